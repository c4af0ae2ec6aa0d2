//! Personal API tokens: bearer credentials for the JSON API.
//!
//! A token is `cpt_` followed by 256 random bits. Only its SHA-256 is stored (a fast hash is
//! right here: the secret has full entropy, unlike a password), so a database leak yields no
//! usable token. The secret is returned once, at creation.

use crate::{
    AppError, AppResult, Services,
    auth::{Credential, Principal},
    db::DbResultExt,
    entities::{api_tokens, users},
    secrets::{digest, new_secret},
};
use cardpool_domain::account::{ApiToken, CreateApiTokenRequest, CreatedApiToken};
use chrono::{Duration, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, IntoActiveModel, PaginatorTrait, QueryFilter,
    QueryOrder,
};

const TOKEN_PREFIX: &str = "cpt_";
/// Characters of the secret kept in clear so people can tell their tokens apart.
const SHOWN_PREFIX_LEN: usize = 12;
/// Active tokens one account may hold.
pub const MAX_ACTIVE_TOKENS: u64 = 50;

fn dto(row: &api_tokens::Model) -> ApiToken {
    ApiToken {
        id: row.id,
        name: row.name.clone(),
        prefix: row.prefix.clone(),
        created_at: row.created_at,
        last_used_at: row.last_used_at,
    }
}

/// Creates a token for the caller; the secret in the answer is shown once.
pub async fn create_api_token(
    services: &Services,
    principal: &Principal,
    request: &CreateApiTokenRequest,
) -> AppResult<CreatedApiToken> {
    let name = request.validate()?;
    let active = api_tokens::Entity::find()
        .filter(api_tokens::Column::UserId.eq(principal.user_id))
        .filter(api_tokens::Column::RevokedAt.is_null())
        .count(&services.db)
        .await
        .context("counting tokens")?;
    if active >= MAX_ACTIVE_TOKENS {
        return Err(AppError::conflict(format!(
            "you already have {MAX_ACTIVE_TOKENS} active tokens; revoke one first"
        )));
    }
    let secret = new_secret(TOKEN_PREFIX);
    let row = api_tokens::ActiveModel {
        user_id: Set(principal.user_id),
        name: Set(name),
        prefix: Set(secret[..SHOWN_PREFIX_LEN].to_owned()),
        token_hash: Set(digest(&secret)),
        created_at: Set(Utc::now()),
        last_used_at: Set(None),
        revoked_at: Set(None),
        ..Default::default()
    }
    .insert(&services.db)
    .await
    .context("inserting token")?;
    tracing::info!(user.id = principal.user_id, token.id = row.id, "api token created");
    Ok(CreatedApiToken { token: dto(&row), secret })
}

/// The caller's active tokens, newest first.
pub async fn list_api_tokens(services: &Services, principal: &Principal) -> AppResult<Vec<ApiToken>> {
    let rows = api_tokens::Entity::find()
        .filter(api_tokens::Column::UserId.eq(principal.user_id))
        .filter(api_tokens::Column::RevokedAt.is_null())
        .order_by_desc(api_tokens::Column::Id)
        .all(&services.db)
        .await
        .context("listing tokens")?;
    Ok(rows.iter().map(dto).collect())
}

/// Revokes one of the caller's tokens. Someone else's token is reported as not found.
pub async fn revoke_api_token(services: &Services, principal: &Principal, token_id: i64) -> AppResult<()> {
    let row = api_tokens::Entity::find_by_id(token_id)
        .filter(api_tokens::Column::UserId.eq(principal.user_id))
        .filter(api_tokens::Column::RevokedAt.is_null())
        .one(&services.db)
        .await
        .context("loading token")?
        .ok_or_else(|| AppError::not_found("token"))?;
    let mut row = row.into_active_model();
    row.revoked_at = Set(Some(Utc::now()));
    row.update(&services.db).await.context("revoking token")?;
    tracing::info!(user.id = principal.user_id, token.id = token_id, "api token revoked");
    Ok(())
}

/// Resolves a bearer secret to its account. Unknown, malformed and revoked tokens are all
/// `Unauthorized`.
pub async fn authenticate(services: &Services, secret: &str) -> AppResult<Principal> {
    if !secret.starts_with(TOKEN_PREFIX) || secret.len() > 128 {
        return Err(AppError::Unauthorized);
    }
    let found = api_tokens::Entity::find()
        .filter(api_tokens::Column::TokenHash.eq(digest(secret)))
        .filter(api_tokens::Column::RevokedAt.is_null())
        .find_also_related(users::Entity)
        .one(&services.db)
        .await
        .context("loading token")?;
    let Some((token, Some(user))) = found else {
        return Err(AppError::Unauthorized);
    };
    if user.suspended_at.is_some() {
        return Err(AppError::forbidden("this account is suspended"));
    }
    // Recording every use would turn each API read into a write; a minute's precision is enough.
    let now = Utc::now();
    if token.last_used_at.is_none_or(|t| now - t > Duration::minutes(1)) {
        let recorded = api_tokens::Entity::update_many()
            .col_expr(api_tokens::Column::LastUsedAt, sea_orm::sea_query::Expr::value(now))
            .filter(api_tokens::Column::Id.eq(token.id))
            .exec(&services.db)
            .await;
        if let Err(err) = recorded {
            tracing::warn!(error = %err, token.id = token.id, "could not record token use");
        }
    }
    Ok(Principal::from_user(&user, Credential::ApiToken { token_id: token.id }))
}
