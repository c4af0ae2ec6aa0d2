//! Accounts: sign-up, sign-in, password changes and roles.

use crate::{
    AppError, AppResult, Services,
    admin::{
        RoleChange,
        audit::{self, Change},
        change_roles, user_summary,
    },
    auth::{self, Credential, Principal, roles_of},
    db::{DbResultExt, Violation},
    entities::users,
};
use cardpool_domain::{
    account::{ChangePasswordRequest, Email, Me, NewAccount, Password, SignInRequest, SignUpRequest, UserSummary},
    admin::AuditAction,
};
use chrono::Utc;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, IntoActiveModel, QueryFilter, QueryOrder, QuerySelect,
};
use std::net::IpAddr;
use tower_sessions::Session;

fn me(user: &users::Model) -> Me {
    Me { id: user.id, email: user.email.clone(), roles: roles_of(user), created_at: user.created_at }
}

async fn insert_account(services: &Services, account: &NewAccount, admin: bool) -> AppResult<users::Model> {
    let password_hash = services.passwords.hash(account.password.expose()).await?;
    let now = Utc::now();
    let row = users::ActiveModel {
        email: Set(account.email.as_str().to_owned()),
        password_hash: Set(password_hash),
        is_provider: Set(false),
        is_admin: Set(admin),
        session_epoch: Set(0),
        created_at: Set(now),
        updated_at: Set(now),
        ..Default::default()
    };
    row.insert(&services.db).await.or_violation(
        Violation::Unique,
        || AppError::invalid_field("email", "an account with this email already exists"),
        "inserting account",
    )
}

/// Creates a renter account and signs `session` in as it; each client address may create a
/// few accounts per hour.
pub async fn sign_up(
    services: &Services,
    session: &Session,
    request: &SignUpRequest,
    client_ip: Option<IpAddr>,
) -> AppResult<Me> {
    request.validate()?;
    services.sign_in_limiter.admit_sign_up(client_ip).await?;
    let me = create_account(services, request).await?;
    auth::start_session(session, me.id, 0).await?;
    Ok(me)
}

/// Creates a renter account without signing anyone in (the demo's accounts, tests).
pub async fn create_account(services: &Services, request: &SignUpRequest) -> AppResult<Me> {
    let account = request.validate()?;
    let user = insert_account(services, &account, false).await?;
    tracing::info!(user.id = user.id, "account created");
    Ok(me(&user))
}

/// Signs `session` in after checking the credentials (see [`check_credentials`]); the session
/// gets a fresh id.
pub async fn sign_in(
    services: &Services,
    session: &Session,
    request: &SignInRequest,
    client_ip: Option<IpAddr>,
) -> AppResult<Me> {
    let (me, epoch) = check_credentials(services, request, client_ip).await?;
    auth::start_session(session, me.id, epoch).await?;
    Ok(me)
}

/// Checks credentials under the sign-in throttle. Returns the account and its session epoch.
///
/// Unknown email and wrong password take the same time and give the same error.
pub async fn check_credentials(
    services: &Services,
    request: &SignInRequest,
    client_ip: Option<IpAddr>,
) -> AppResult<(Me, i64)> {
    let key = request.email.trim().to_lowercase();
    if key.is_empty() || request.password.is_empty() {
        return Err(AppError::InvalidCredentials);
    }
    services.sign_in_limiter.admit(&key, client_ip).await?;
    let user = users::Entity::find()
        .filter(users::Column::Email.eq(&key))
        .one(&services.db)
        .await
        .context("loading account for sign-in")?;
    let ok = services.passwords.verify(&request.password, user.as_ref().map(|u| u.password_hash.as_str())).await?;
    match user {
        Some(user) if ok => {
            if let Some(reason) = user.suspended_at.and(user.suspended_reason.as_deref()) {
                return Err(AppError::forbidden(format!("this account is suspended: {reason}")));
            }
            services.sign_in_limiter.record_success(&key, client_ip).await?;
            tracing::info!(user.id = user.id, "signed in");
            Ok((me(&user), user.session_epoch))
        }
        _ => {
            services.sign_in_limiter.record_failure(&key, client_ip).await?;
            tracing::info!("sign-in failed");
            Err(AppError::InvalidCredentials)
        }
    }
}

async fn load_user(services: &Services, user_id: i64) -> AppResult<users::Model> {
    users::Entity::find_by_id(user_id)
        .one(&services.db)
        .await
        .context("loading account")?
        .ok_or_else(|| AppError::not_found("account"))
}

/// The caller's own account.
pub async fn get_me(services: &Services, principal: &Principal) -> AppResult<Me> {
    Ok(me(&load_user(services, principal.user_id).await?))
}

/// Changes the caller's password (see [`set_password`]); every other session of the account
/// ends, and `session`, the caller's own, stays signed in with a fresh id.
pub async fn change_password(
    services: &Services,
    session: &Session,
    principal: &Principal,
    request: &ChangePasswordRequest,
) -> AppResult<()> {
    let epoch = set_password(services, principal, request).await?;
    auth::refresh_session_epoch(session, epoch).await
}

/// Changes the caller's password after checking the current one. Every other session of the
/// account ends; returns the new session epoch so the caller's own session can stay valid.
pub async fn set_password(
    services: &Services,
    principal: &Principal,
    request: &ChangePasswordRequest,
) -> AppResult<i64> {
    if principal.credential != Credential::Session {
        return Err(AppError::forbidden("change your password from a signed-in browser session"));
    }
    let new_password =
        Password::parse(&request.new_password).map_err(|m| AppError::invalid_field("new_password", m))?;
    let user = load_user(services, principal.user_id).await?;
    if !services.passwords.verify(&request.current_password, Some(&user.password_hash)).await? {
        return Err(AppError::invalid_field("current_password", "that is not your current password"));
    }
    if request.current_password == request.new_password {
        return Err(AppError::invalid_field("new_password", "choose a password different from the current one"));
    }
    let new_hash = services.passwords.hash(new_password.expose()).await?;

    let txn = services.begin_write().await.context("starting password change")?;
    let current = users::Entity::find_by_id(user.id)
        .one(&txn)
        .await
        .context("reloading account")?
        .ok_or_else(|| AppError::not_found("account"))?;
    let epoch = current.session_epoch + 1;
    let mut row = current.into_active_model();
    row.password_hash = Set(new_hash);
    row.session_epoch = Set(epoch);
    row.updated_at = Set(Utc::now());
    row.update(&txn).await.context("saving new password")?;
    txn.commit().await.context("committing password change")?;
    tracing::info!(user.id = user.id, "password changed; other sessions ended");
    Ok(epoch)
}

/// Turns on the provider role for the caller's own account (a role change: audited).
pub async fn enable_provider(services: &Services, principal: &Principal) -> AppResult<Me> {
    let user = load_user(services, principal.user_id).await?;
    if user.is_provider {
        return Ok(me(&user));
    }
    let change = RoleChange {
        provider: Some(true),
        admin: None,
        action: AuditAction::UserEnableProvider,
        reason: "turned on by the account itself",
    };
    let user = match change_roles(services, Some(principal), principal.user_id, change).await {
        // Turned on by a concurrent request.
        Err(AppError::Conflict(_)) => load_user(services, principal.user_id).await?,
        other => other?,
    };
    tracing::info!(user.id = user.id, "provider role enabled");
    Ok(me(&user))
}

/// The most accounts one listing returns.
const MAX_LISTED_USERS: u64 = 200;

/// Accounts, newest first, whose email contains `search` (all when empty), at most 200
/// (admins only).
pub async fn list_users(
    services: &Services,
    principal: &Principal,
    search: Option<&str>,
) -> AppResult<Vec<UserSummary>> {
    principal.require_admin()?;
    let mut query = users::Entity::find().order_by_desc(users::Column::Id).limit(MAX_LISTED_USERS);
    if let Some(search) = search.map(str::trim).filter(|s| !s.is_empty()) {
        if search.chars().count() > 254 || search.chars().any(char::is_control) {
            return Err(AppError::invalid_field("q", "at most 254 printable characters"));
        }
        query = query.filter(users::Column::Email.contains(search.to_lowercase()));
    }
    let users = query.all(&services.db).await.context("listing accounts")?;
    Ok(users.iter().map(user_summary).collect())
}

/// What `cardpool admin create` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminCreated {
    Created,
    Promoted,
}

/// Creates an admin account, or promotes an existing account with that email (operator CLI;
/// no principal because whoever can run the binary against the database already owns it).
pub async fn create_admin(services: &Services, email: &str, password: Option<&str>) -> AppResult<AdminCreated> {
    let email = Email::parse(email).map_err(|m| AppError::invalid_field("email", m))?;
    let existing = users::Entity::find()
        .filter(users::Column::Email.eq(email.as_str()))
        .one(&services.db)
        .await
        .context("loading account")?;
    if let Some(user) = existing {
        let change = RoleChange {
            provider: None,
            admin: Some(true),
            action: AuditAction::UserGrantAdmin,
            reason: "promoted by the operator (cardpool admin create)",
        };
        match change_roles(services, None, user.id, change).await {
            Ok(_) | Err(AppError::Conflict(_)) => return Ok(AdminCreated::Promoted),
            Err(err) => return Err(err),
        }
    }
    let password =
        password.ok_or_else(|| AppError::invalid_field("password", "a new admin account needs a password"))?;
    let password = Password::parse(password).map_err(|m| AppError::invalid_field("password", m))?;
    let user = insert_account(services, &NewAccount { email, password }, true).await?;
    let line = Change {
        action: AuditAction::UserGrantAdmin,
        subject_id: user.id,
        reason: "created as an admin by the operator (cardpool admin create)",
        before: serde_json::Value::Null,
        after: serde_json::json!({"provider": false, "admin": true, "suspended": false}),
    };
    audit::record(&services.db, None, line).await?;
    Ok(AdminCreated::Created)
}

/// Number of accounts (the demo seeds only an empty database).
pub async fn count_users(services: &Services) -> AppResult<u64> {
    use sea_orm::PaginatorTrait;
    users::Entity::find().count(&services.db).await.context("counting accounts")
}

/// The account with `email`, as a principal, for operator tooling that acts on an account's
/// behalf from the command line (the demo seed). Never reachable from a request.
pub async fn principal_for_email(services: &Services, email: &str) -> AppResult<Principal> {
    let user = users::Entity::find()
        .filter(users::Column::Email.eq(email.trim().to_lowercase()))
        .one(&services.db)
        .await
        .context("loading account")?
        .ok_or_else(|| AppError::not_found("account"))?;
    Ok(Principal::from_user(&user, Credential::Session))
}
