//! Who is asking: browser sessions and the [`Principal`] every service call is checked against.
//!
//! A session stores the user id, the account's session epoch at sign-in and the sign-in time.
//! Changing the password bumps the epoch, which kills every other session of the account at
//! its next request; the absolute lifetime caps a session however active it stays.

use crate::{
    AppError, AppResult, Services,
    db::DbResultExt,
    entities::{api_tokens, users},
};
use cardpool_domain::account::Roles;
use chrono::Utc;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use std::time::Duration;
use tower_sessions::Session;

const USER_ID: &str = "user_id";
const EPOCH: &str = "epoch";
const SIGNED_IN_AT: &str = "signed_in_at";

/// How long sessions live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionPolicy {
    /// A session unused for this long expires (the cookie and the stored row).
    pub idle: Duration,
    /// A session older than this expires however active it is.
    pub absolute: Duration,
}

impl Default for SessionPolicy {
    fn default() -> Self {
        SessionPolicy { idle: Duration::from_secs(12 * 3600), absolute: Duration::from_secs(7 * 24 * 3600) }
    }
}

/// How a request proved who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    Session,
    ApiToken { token_id: i64 },
}

/// An authenticated account, as service functions see the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub user_id: i64,
    pub email: String,
    pub roles: Roles,
    pub credential: Credential,
}

impl Principal {
    pub(crate) fn from_user(user: &users::Model, credential: Credential) -> Self {
        Principal { user_id: user.id, email: user.email.clone(), roles: roles_of(user), credential }
    }

    /// Fails with `Forbidden` unless the caller is an admin.
    pub fn require_admin(&self) -> AppResult<()> {
        if self.roles.admin { Ok(()) } else { Err(AppError::forbidden("this needs an admin account")) }
    }
}

pub(crate) fn roles_of(user: &users::Model) -> Roles {
    Roles { renter: true, provider: user.is_provider, admin: user.is_admin }
}

fn session_err(err: tower_sessions::session::Error) -> AppError {
    tracing::error!(error = %err, "session store failed");
    AppError::Internal
}

/// Binds `session` to `user` under a fresh session id (the old id, which an attacker might
/// have planted, dies).
pub async fn start_session(session: &Session, user_id: i64, epoch: i64) -> AppResult<()> {
    session.cycle_id().await.map_err(session_err)?;
    session.insert(USER_ID, user_id).await.map_err(session_err)?;
    session.insert(EPOCH, epoch).await.map_err(session_err)?;
    session.insert(SIGNED_IN_AT, Utc::now().timestamp()).await.map_err(session_err)?;
    Ok(())
}

/// Re-binds the current session after its account's epoch moved (password change), so the
/// session that made the change stays signed in while all others end.
pub async fn refresh_session_epoch(session: &Session, epoch: i64) -> AppResult<()> {
    session.cycle_id().await.map_err(session_err)?;
    session.insert(EPOCH, epoch).await.map_err(session_err)
}

/// Ends the session: its row is deleted and the cookie cleared.
pub async fn end_session(session: &Session) -> AppResult<()> {
    session.flush().await.map_err(session_err)
}

/// The account behind `session`, if it is signed in and still valid.
pub async fn principal_from_session(services: &Services, session: &Session) -> AppResult<Option<Principal>> {
    let Some(user_id) = session.get::<i64>(USER_ID).await.map_err(session_err)? else {
        return Ok(None);
    };
    let epoch = session.get::<i64>(EPOCH).await.map_err(session_err)?;
    let signed_in_at = session.get::<i64>(SIGNED_IN_AT).await.map_err(session_err)?.unwrap_or(0);
    let principal = signed_in(services, user_id, epoch, signed_in_at).await?;
    if principal.is_none() {
        end_session(session).await?;
    }
    Ok(principal)
}

/// The account a session signed in as, if that sign-in is still good: the account exists, its
/// password has not changed since (same epoch), it is not suspended, and the session is within
/// its absolute lifetime.
async fn signed_in(
    services: &Services,
    user_id: i64,
    epoch: Option<i64>,
    signed_in_at: i64,
) -> AppResult<Option<Principal>> {
    let age = Utc::now().timestamp().saturating_sub(signed_in_at);
    if u64::try_from(age).map_or(true, |age| age > services.settings.session.absolute.as_secs()) {
        return Ok(None);
    }
    let user = users::Entity::find_by_id(user_id).one(&services.db).await.context("loading session user")?;
    Ok(user
        .filter(|user| epoch == Some(user.session_epoch) && user.suspended_at.is_none())
        .map(|user| Principal::from_user(&user, Credential::Session)))
}

/// Who `principal` is now, for a request that outlives its authentication (a live feed):
/// `None` once what it signed in with has ended (the session signed out, expired or was ended
/// by a password change; the API token revoked), otherwise the account with its current roles.
/// `session` is the id of the browser session it came with (for session callers).
pub async fn reauthenticate(
    services: &Services,
    principal: &Principal,
    session: Option<tower_sessions::session::Id>,
) -> AppResult<Option<Principal>> {
    match principal.credential {
        Credential::ApiToken { token_id } => token_still_valid(services, token_id).await,
        Credential::Session => {
            let Some(id) = session else { return Ok(None) };
            let store = crate::session_store::DbSessionStore::new(services.db.clone());
            let Some(record) = tower_sessions::SessionStore::load(&store, &id).await.map_err(|err| {
                tracing::error!(error = %err, "session store failed");
                AppError::Internal
            })?
            else {
                return Ok(None);
            };
            let number = |key: &str| record.data.get(key).and_then(serde_json::Value::as_i64);
            match number(USER_ID) {
                Some(user_id) if user_id == principal.user_id => {
                    signed_in(services, user_id, number(EPOCH), number(SIGNED_IN_AT).unwrap_or(0)).await
                }
                _ => Ok(None),
            }
        }
    }
}

/// The account behind token `token_id` if the token is still good (not revoked), with the
/// account's current roles; for requests that outlive their authentication.
async fn token_still_valid(services: &Services, token_id: i64) -> AppResult<Option<Principal>> {
    let found = api_tokens::Entity::find_by_id(token_id)
        .filter(api_tokens::Column::RevokedAt.is_null())
        .find_also_related(users::Entity)
        .one(&services.db)
        .await
        .context("loading token")?;
    Ok(found.and_then(|(token, user)| {
        user.filter(|u| u.suspended_at.is_none())
            .map(|u| Principal::from_user(&u, Credential::ApiToken { token_id: token.id }))
    }))
}

/// Like [`principal_from_session`], but a missing sign-in is `Unauthorized`.
pub async fn require_session(services: &Services, session: &Session) -> AppResult<Principal> {
    principal_from_session(services, session).await?.ok_or(AppError::Unauthorized)
}

/// The client's address as the server determined it (the peer, or a trusted proxy's header).
/// Adapters put it in request extensions; the sign-in throttle keys on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientIp(pub Option<std::net::IpAddr>);
