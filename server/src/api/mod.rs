//! The public JSON API under `/api/v1`, described by the OpenAPI document it serves at
//! `/api/v1/openapi.json`.
//!
//! Handlers are thin: extract the caller ([`Caller`]), call one service function, map the
//! result. Errors become a JSON [`ErrorBody`] with the status from [`AppError::status`].

mod accounts;
mod api_tokens;
mod hosts;
mod offers;
pub(crate) mod payments;
mod rentals;
mod telemetry;

use axum::{
    Json, Router,
    extract::{FromRequest, FromRequestParts, rejection::JsonRejection},
    http::{HeaderValue, StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
    routing::{delete, get, post, put},
};
use cardpool_app::ssr::AppState;
use cardpool_domain::{AppError, error::ErrorBody};
use cardpool_service::{
    api_tokens as tokens,
    auth::{self, ClientIp, Principal},
};
use tower_sessions::Session;
use utoipa::{
    Modify, OpenApi,
    openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme},
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/openapi.json", get(openapi_json))
        .route("/auth/sign-up", post(accounts::sign_up))
        .route("/auth/sign-in", post(accounts::sign_in))
        .route("/auth/sign-out", post(accounts::sign_out))
        .route("/me", get(accounts::get_me))
        .route("/me/password", post(accounts::change_password))
        .route("/me/provider", post(accounts::enable_provider))
        .route("/users", get(accounts::list_users))
        .route("/users/{id}/admin", post(accounts::grant_admin))
        .route("/tokens", get(api_tokens::list_api_tokens).post(api_tokens::create_api_token))
        .route("/tokens/{id}", delete(api_tokens::revoke_api_token))
        .route("/enrollment-tokens", post(hosts::create_enrollment_token))
        .route("/agent/enroll", post(hosts::enroll_host))
        .route("/hosts", get(hosts::list_hosts))
        .route("/hosts/{id}", get(hosts::get_host))
        .route("/hosts/{id}/revoke", post(hosts::revoke_host))
        .route("/hosts/{id}/pricing", put(hosts::update_host_pricing))
        .route("/hosts/{id}/listing", put(hosts::set_host_listed))
        .route("/offers", get(offers::list_offers))
        .route("/rentals", get(rentals::list_rentals).post(rentals::book_offer))
        .route("/rentals/{id}", get(rentals::get_rental))
        .route("/rentals/{id}/stop", post(rentals::stop_rental))
        .route("/rentals/{id}/bid", put(rentals::change_bid))
        .route("/telemetry", get(telemetry::get_telemetry))
        .route("/telemetry/live", get(telemetry::live_telemetry))
        .route("/fleet", get(telemetry::get_fleet))
        .route("/alerts", get(telemetry::list_alerts))
        .route("/alerts/{id}/acknowledge", post(telemetry::acknowledge_alert))
        .route("/wallet", get(payments::get_wallet))
        .route("/wallet/top-ups", post(payments::create_top_up))
        .route("/wallet/top-ups/{id}", get(payments::get_top_up))
        .route("/wallet/transactions", get(payments::list_transactions))
        .route("/wallet/transactions.csv", get(payments::export_transactions))
        .route("/wallet/transactions/{id}/receipt", get(payments::get_receipt))
        .route("/earnings", get(payments::get_earnings))
        .route("/earnings/entries", get(payments::list_earnings_entries))
        .route("/earnings/onboarding-link", post(payments::create_onboarding_link))
        .route("/payouts", post(payments::request_payout))
        .route("/admin/credits", get(payments::list_admin_credits).post(payments::admin_credit))
        .fallback(|| async { ApiError(AppError::not_found("API route")) })
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Cardpool API", description = "The GPU marketplace's JSON API. Authenticate with a session cookie (browser) or `Authorization: Bearer <personal API token>`."),
    paths(
        accounts::sign_up,
        accounts::sign_in,
        accounts::sign_out,
        accounts::get_me,
        accounts::change_password,
        accounts::enable_provider,
        accounts::list_users,
        accounts::grant_admin,
        api_tokens::create_api_token,
        api_tokens::list_api_tokens,
        api_tokens::revoke_api_token,
        hosts::create_enrollment_token,
        hosts::enroll_host,
        hosts::list_hosts,
        hosts::get_host,
        hosts::revoke_host,
        hosts::update_host_pricing,
        hosts::set_host_listed,
        offers::list_offers,
        payments::get_wallet,
        payments::create_top_up,
        payments::get_top_up,
        payments::list_transactions,
        payments::export_transactions,
        payments::get_receipt,
        payments::get_earnings,
        payments::list_earnings_entries,
        payments::create_onboarding_link,
        payments::request_payout,
        payments::admin_credit,
        payments::list_admin_credits,
        rentals::book_offer,
        rentals::list_rentals,
        rentals::get_rental,
        rentals::stop_rental,
        rentals::change_bid,
        telemetry::get_telemetry,
        telemetry::live_telemetry,
        telemetry::get_fleet,
        telemetry::list_alerts,
        telemetry::acknowledge_alert,
    ),
    components(schemas(ErrorBody)),
    modifiers(&SecuritySchemes),
    tags((name = "accounts", description = "Sign-up, sign-in and profile"), (name = "tokens", description = "Personal API tokens"), (name = "hosts", description = "Provider hosts and their agents"), (name = "offers", description = "Marketplace search"), (name = "payments", description = "Wallet, top-ups, earnings, payouts and admin credits"), (name = "rentals", description = "Booking and running rentals"), (name = "telemetry", description = "GPU telemetry, live feeds, fleet and alerts"))
)]
pub struct ApiDoc;

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::new(crate::http::SESSION_COOKIE))),
        );
    }
}

#[utoipa::path(get, path = "/api/v1/openapi.json", operation_id = "get_openapi", responses((status = 200, description = "This document")))]
async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// An [`AppError`] answered as JSON.
#[derive(Debug)]
pub struct ApiError(pub AppError);

impl From<AppError> for ApiError {
    fn from(err: AppError) -> Self {
        ApiError(err)
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        ApiError(AppError::Validation { message: rejection.body_text(), fields: Default::default() })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(ErrorBody::from(&self.0))).into_response();
        match self.0 {
            AppError::RateLimited { retry_after_secs } => {
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            }
            AppError::Unauthorized => {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// `Json<T>` whose rejections are our JSON errors.
#[derive(FromRequest)]
#[from_request(via(Json), rejection(ApiError))]
pub struct ApiJson<T>(pub T);

/// The authenticated caller: a bearer token if one is sent, else the browser session.
pub struct Caller(pub Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        if let Some(value) = parts.headers.get(header::AUTHORIZATION) {
            let secret =
                value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).ok_or(ApiError(AppError::Unauthorized))?;
            return Ok(Caller(tokens::authenticate(&state.services, secret.trim()).await?));
        }
        let session = session(parts).await?;
        Ok(Caller(auth::require_session(&state.services, &session).await?))
    }
}

async fn session(parts: &mut Parts) -> Result<Session, ApiError> {
    Session::from_request_parts(parts, &()).await.map_err(|_| ApiError(AppError::Internal))
}

/// The browser session of the request (sign-in and sign-out act on it).
pub struct RequestSession(pub Session);

impl<S: Send + Sync> FromRequestParts<S> for RequestSession {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(RequestSession(session(parts).await?))
    }
}

/// The client address decided by the `client_ip` middleware.
pub fn client_ip(parts: &Parts) -> ClientIp {
    parts.extensions.get::<ClientIp>().copied().unwrap_or_default()
}
