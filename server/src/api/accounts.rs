//! `/api/v1/auth/*` and `/api/v1/me*` (accounts as admins see them: `admin`).

use crate::edges::{ApiJson, ApiResult, Caller, RequestSession};
use axum::{Extension, Json, extract::State, http::StatusCode};
use cardpool_app::ssr::AppState;
use cardpool_domain::{
    account::{ChangePasswordRequest, Me, SignInRequest, SignUpRequest},
    error::ErrorBody,
};
use cardpool_service::{
    accounts,
    auth::{self, ClientIp},
};
use utoipa_axum::{router::OpenApiRouter, routes};

/// This module's operations, each registered once: its route and its OpenAPI path.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(sign_up))
        .routes(routes!(sign_in))
        .routes(routes!(sign_out))
        .routes(routes!(get_me))
        .routes(routes!(change_password))
        .routes(routes!(enable_provider))
}

/// Creates an account and signs it in (sets the session cookie).
#[utoipa::path(post, path = "/auth/sign-up", operation_id = "sign_up", tag = "accounts", security(()),
    request_body = SignUpRequest,
    responses((status = 201, body = Me), (status = 422, description = "Invalid fields", body = ErrorBody),
        (status = 429, description = "Too many accounts from this address; see Retry-After", body = ErrorBody)))]
pub async fn sign_up(
    State(state): State<AppState>,
    RequestSession(session): RequestSession,
    client_ip: Option<Extension<ClientIp>>,
    ApiJson(request): ApiJson<SignUpRequest>,
) -> ApiResult<(StatusCode, Json<Me>)> {
    let ip = client_ip.map(|e| e.0.0).unwrap_or_default();
    Ok((StatusCode::CREATED, Json(accounts::sign_up(&state.services, &session, &request, ip).await?)))
}

/// Signs in with email and password (sets a fresh session cookie).
#[utoipa::path(post, path = "/auth/sign-in", operation_id = "sign_in", tag = "accounts", security(()),
    request_body = SignInRequest,
    responses(
        (status = 200, body = Me),
        (status = 401, description = "Email or password is incorrect", body = ErrorBody),
        (status = 429, description = "Too many attempts; see Retry-After", body = ErrorBody)))]
pub async fn sign_in(
    State(state): State<AppState>,
    RequestSession(session): RequestSession,
    client_ip: Option<Extension<ClientIp>>,
    ApiJson(request): ApiJson<SignInRequest>,
) -> ApiResult<Json<Me>> {
    let ip = client_ip.map(|e| e.0.0).unwrap_or_default();
    Ok(Json(accounts::sign_in(&state.services, &session, &request, ip).await?))
}

/// Ends the browser session.
#[utoipa::path(post, path = "/auth/sign-out", operation_id = "sign_out", tag = "accounts", security(()),
    responses((status = 204, description = "Signed out")))]
pub async fn sign_out(RequestSession(session): RequestSession) -> ApiResult<StatusCode> {
    auth::end_session(&session).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The caller's own account.
#[utoipa::path(get, path = "/me", operation_id = "get_me", tag = "accounts",
    responses((status = 200, body = Me), (status = 401, body = ErrorBody)))]
pub async fn get_me(Caller(services, caller): Caller) -> ApiResult<Json<Me>> {
    Ok(Json(accounts::get_me(&services, &caller).await?))
}

/// Changes the password; every other session of the account ends. Browser sessions only.
#[utoipa::path(post, path = "/me/password", operation_id = "change_password", tag = "accounts",
    security(("session" = [])),
    request_body = ChangePasswordRequest,
    responses((status = 204, description = "Changed"), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn change_password(
    State(state): State<AppState>,
    RequestSession(session): RequestSession,
    Caller(_, caller): Caller,
    ApiJson(request): ApiJson<ChangePasswordRequest>,
) -> ApiResult<StatusCode> {
    accounts::change_password(&state.services, &session, &caller, &request).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Turns on provider features for the caller's account.
#[utoipa::path(post, path = "/me/provider", operation_id = "enable_provider", tag = "accounts",
    responses((status = 200, body = Me), (status = 401, body = ErrorBody)))]
pub async fn enable_provider(Caller(services, caller): Caller) -> ApiResult<Json<Me>> {
    Ok(Json(accounts::enable_provider(&services, &caller).await?))
}
