//! `/api/v1/tokens*`: personal API tokens.

use crate::edges::{ApiError, ApiJson, ApiResult, Caller};
use axum::{
    Json,
    extract::{Path, State},
    http::StatusCode,
};
use cardpool_app::ssr::AppState;
use cardpool_domain::{
    AppError,
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
    security(("bearer" = []), ("session" = [])),
    request_body = CreateApiTokenRequest,
    responses((status = 201, body = CreatedApiToken), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_api_token(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiJson(request): ApiJson<CreateApiTokenRequest>,
) -> ApiResult<(StatusCode, Json<CreatedApiToken>)> {
    let created = api_tokens::create_api_token(&state.services, &caller, &request).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// The caller's active tokens (never their secrets).
#[utoipa::path(get, path = "/tokens", operation_id = "list_api_tokens", tag = "tokens",
    security(("bearer" = []), ("session" = [])),
    responses((status = 200, body = Vec<ApiToken>), (status = 401, body = ErrorBody)))]
pub async fn list_api_tokens(State(state): State<AppState>, Caller(caller): Caller) -> ApiResult<Json<Vec<ApiToken>>> {
    Ok(Json(api_tokens::list_api_tokens(&state.services, &caller).await?))
}

/// Revokes one of the caller's tokens; it stops working at once.
#[utoipa::path(delete, path = "/tokens/{id}", operation_id = "revoke_api_token", tag = "tokens",
    security(("bearer" = []), ("session" = [])),
    params(("id" = i64, Path, description = "Token id")),
    responses((status = 204, description = "Revoked"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn revoke_api_token(
    State(state): State<AppState>,
    Caller(caller): Caller,
    id: Result<Path<i64>, axum::extract::rejection::PathRejection>,
) -> ApiResult<StatusCode> {
    let Path(id) = id.map_err(|_| ApiError(AppError::invalid_field("id", "not a token id")))?;
    api_tokens::revoke_api_token(&state.services, &caller, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
