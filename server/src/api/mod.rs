//! The public JSON API under `/api/v1`, described by the OpenAPI document it serves at
//! `/api/v1/openapi.json`.
//!
//! Handlers are thin: extract the caller ([`crate::edges::Caller`]), call one service function, map the
//! result. Errors become a JSON [`ErrorBody`] with the status from [`AppError::status`].

mod accounts;
mod admin;
mod api_tokens;
mod gangs;
mod hosts;
mod logs;
mod notifications;
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

/// `events` until the server begins to stop, then the end of the stream: the connection closes
/// and a browser's `EventSource` reconnects by itself (with `Last-Event-ID`), to a server that
/// is up. Without it a stop would wait out its drain on feeds that never end.
pub(crate) fn until_stopping<S: futures_util::Stream>(
    stopping: std::sync::Arc<cardpool_service::signals::Stopping>,
    events: S,
) -> impl futures_util::Stream<Item = S::Item> {
    futures_util::StreamExt::take_until(events, async move { stopping.wait().await })
}

/// The API's router, to be nested at `/api/v1`, with its OpenAPI document at `/openapi.json`.
/// Each module registers its operations once ([`utoipa_axum`]): the route and the documented
/// path cannot drift apart.
pub fn router() -> Router<AppState> {
    let (router, paths) = OpenApiRouter::new()
        .merge(accounts::routes())
        .merge(admin::routes())
        .merge(api_tokens::routes())
        .merge(gangs::routes())
        .merge(ssh_keys::routes())
        .merge(hosts::routes())
        .merge(logs::routes())
        .merge(notifications::routes())
        .merge(offers::routes())
        .merge(payments::routes())
        .merge(rentals::routes())
        .merge(telemetry::routes())
        .split_for_parts();
    let mut document = ApiDoc::openapi().nest("/api/v1", paths);
    document_common_errors(&mut document);
    let document = document.to_json().unwrap_or_default();
    router
        .route("/openapi.json", get(|| async move { ([(header::CONTENT_TYPE, "application/json")], document) }))
        .fallback(|| async { ApiError(AppError::not_found("API route")) })
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Cardpool API", description = "The GPU marketplace's JSON API. Authenticate with a session cookie (browser) or `Authorization: Bearer <personal API token>`."),
    components(schemas(
        ErrorBody,
        cardpool_domain::offers::OfferSort,
        cardpool_domain::offers::OfferUnit,
        cardpool_domain::fabric::Interconnect
    )),
    modifiers(&SecuritySchemes),
    tags((name = "accounts", description = "Sign-up, sign-in and profile"), (name = "tokens", description = "Personal API tokens"), (name = "hosts", description = "Provider hosts and their agents"), (name = "offers", description = "Marketplace search"), (name = "payments", description = "Wallet, top-ups, earnings, payouts and admin credits"), (name = "rentals", description = "Booking and running rentals"), (name = "telemetry", description = "GPU telemetry, live feeds, fleet and alerts"), (name = "admin", description = "The admin console: accounts, host verification and delisting, suspensions, the audit log"), (name = "notifications", description = "Notifications, signed webhooks and spend limits"))
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

/// What any request may be answered besides what its operation documents: a malformed query
/// (400), a cross-site state change (403), a body over the route's limit (413), a path or body
/// that does not parse (422), a throttle (429) and our own failure (500), each an [`ErrorBody`].
fn document_common_errors(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder, path::HttpMethod};
    let error = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content("application/json", ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build())
            .build()
    };
    for item in doc.paths.paths.values_mut() {
        let methods = [
            (HttpMethod::Get, item.get.as_mut()),
            (HttpMethod::Post, item.post.as_mut()),
            (HttpMethod::Put, item.put.as_mut()),
            (HttpMethod::Patch, item.patch.as_mut()),
            (HttpMethod::Delete, item.delete.as_mut()),
        ];
        for (method, operation) in methods {
            let Some(operation) = operation else { continue };
            let mut common = vec![
                ("400", "The query string is malformed"),
                ("413", "The request body is larger than this route takes"),
                ("422", "A path parameter or the body does not parse or is invalid"),
                ("429", "Too many requests; see Retry-After"),
                ("500", "Something failed on our side"),
            ];
            if method != HttpMethod::Get {
                common.push(("403", "Refused: a cross-site request, or not allowed"));
            }
            // Every operation needs a caller unless it says otherwise (`security(())`).
            let public = operation.security.as_ref().is_some_and(|s| s.iter().all(|r| *r == Default::default()));
            if !public {
                common.push(("401", "Sign in (a session) or send a bearer token"));
            }
            for (status, description) in common {
                operation.responses.responses.entry(status.to_owned()).or_insert_with(|| error(description).into());
            }
        }
    }
}
