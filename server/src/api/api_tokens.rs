//! `/api/v1/tokens*`: personal API tokens.

use crate::edges::{ApiJson, ApiResult, Caller, PathId};
use axum::{Json, http::StatusCode};
use cardpool_app::ssr::AppState;
use cardpool_domain::{
    account::{ApiToken, CreateApiTokenRequest, CreatedApiToken},
    error::ErrorBody,
};
use cardpool_service::api_tokens;
use utoipa_axum::{router::OpenApiRouter, routes};

/// This module's operations, each registered once: its route and its OpenAPI path.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_api_tokens, create_api_token)).routes(routes!(revoke_api_token))
}

/// Creates a token. The `secret` in the answer is shown only this once.
#[utoipa::path(post, path = "/tokens", operation_id = "create_api_token", tag = "tokens",
    request_body = CreateApiTokenRequest,
    responses((status = 201, body = CreatedApiToken), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_api_token(
    Caller(services, caller): Caller,
    ApiJson(request): ApiJson<CreateApiTokenRequest>,
) -> ApiResult<(StatusCode, Json<CreatedApiToken>)> {
    let created = api_tokens::create_api_token(&services, &caller, &request).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// The caller's active tokens (never their secrets).
#[utoipa::path(get, path = "/tokens", operation_id = "list_api_tokens", tag = "tokens",
    responses((status = 200, body = Vec<ApiToken>), (status = 401, body = ErrorBody)))]
pub async fn list_api_tokens(Caller(services, caller): Caller) -> ApiResult<Json<Vec<ApiToken>>> {
    Ok(Json(api_tokens::list_api_tokens(&services, &caller).await?))
}

/// Revokes one of the caller's tokens; it stops working at once.
#[utoipa::path(delete, path = "/tokens/{id}", operation_id = "revoke_api_token", tag = "tokens",
    params(("id" = i64, Path, description = "Token id")),
    responses((status = 204, description = "Revoked"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke_api_token(Caller(services, caller): Caller, id: PathId) -> ApiResult<StatusCode> {
    let id = id.of("a token")?;
    api_tokens::revoke_api_token(&services, &caller, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
