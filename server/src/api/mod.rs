//! The public JSON API under `/api/v1`, described by the OpenAPI document it serves at
//! `/api/v1/openapi.json`.
//!
//! Handlers are thin: extract the caller ([`crate::edges::Caller`]), call one service function, map the
//! result. Errors become a JSON [`ErrorBody`] with the status from [`AppError::status`].

mod accounts;
mod api_tokens;
mod hosts;
mod logs;
mod offers;
pub(crate) mod payments;
mod rentals;
mod ssh_keys;
mod telemetry;

use crate::edges::ApiError;
use axum::{Router, http::header, routing::get};
use cardpool_app::ssr::AppState;
use cardpool_domain::{AppError, error::ErrorBody};
use utoipa::{
    Modify, OpenApi,
    openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme},
};
use utoipa_axum::router::OpenApiRouter;

/// The API's router, to be nested at `/api/v1`, with its OpenAPI document at `/openapi.json`.
/// Each module registers its operations once ([`utoipa_axum`]): the route and the documented
/// path cannot drift apart.
pub fn router() -> Router<AppState> {
    let (router, paths) = OpenApiRouter::new()
        .merge(accounts::routes())
        .merge(api_tokens::routes())
        .merge(ssh_keys::routes())
        .merge(hosts::routes())
        .merge(logs::routes())
        .merge(offers::routes())
        .merge(payments::routes())
        .merge(rentals::routes())
        .merge(telemetry::routes())
        .split_for_parts();
    let document = ApiDoc::openapi().nest("/api/v1", paths).to_json().unwrap_or_default();
    router
        .route("/openapi.json", get(|| async move { ([(header::CONTENT_TYPE, "application/json")], document) }))
        .fallback(|| async { ApiError(AppError::not_found("API route")) })
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Cardpool API", description = "The GPU marketplace's JSON API. Authenticate with a session cookie (browser) or `Authorization: Bearer <personal API token>`."),
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
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::new(crate::edges::SESSION_COOKIE))),
        );
        // Every operation needs one of the two unless it says otherwise (`security(())`).
        let none: [&str; 0] = [];
        openapi.security =
            Some(vec![SecurityRequirement::new("bearer", none), SecurityRequirement::new("session", none)]);
    }
}
