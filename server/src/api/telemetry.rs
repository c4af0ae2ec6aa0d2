//! `/api/v1/telemetry`, `/api/v1/fleet`, `/api/v1/alerts`: dashboards' data. The live feed is
//! Server-Sent Events (a busy feed's events go out in chunks; see [`feed`]); each event is a
//! `LiveEvent` as JSON, filtered by the caller's grant, which
//! is re-checked every few seconds together with the caller's sign-in: a rental that ends, a
//! session that signs out or an API token revoked closes the feed with an `end` event.

use crate::edges::{ApiError, ApiQuery, ApiResult, Caller, PathId, RequestSession};
use axum::{
    Json,
    body::{Body, Bytes},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use cardpool_app::ssr::AppState;
use cardpool_domain::{
    AppError,
    error::ErrorBody,
    telemetry::{Alert, FleetOverview, LiveEvent, TelemetryScope, TelemetryView},
};
use cardpool_service::{Services, alerts, auth::Principal, telemetry};
use futures_util::Stream;
use serde::Deserialize;
use std::{convert::Infallible, time::Duration};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use utoipa_axum::{router::OpenApiRouter, routes};

/// This module's operations, each registered once: its route and its OpenAPI path.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_telemetry))
        .routes(routes!(live_telemetry))
        .routes(routes!(get_fleet))
        .routes(routes!(list_alerts))
        .routes(routes!(acknowledge_alert))
}

/// How often a live feed re-checks what its viewer may see.
const RECHECK: Duration = Duration::from_secs(5);

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ScopeQuery {
    /// `rental` or `host` (with `id`), `mine` (a provider's hosts) or `fleet` (admins).
    scope: String,
    id: Option<i64>,
}

impl ScopeQuery {
    fn parse(&self) -> Result<TelemetryScope, ApiError> {
        Ok(TelemetryScope::parse(&self.scope, self.id)?)
    }
}

/// The last hour of a rental's, host's or the fleet's GPUs (minute averages, then the recent
/// seconds), and energy per GPU for a rental.
#[utoipa::path(get, path = "/telemetry", operation_id = "get_telemetry", tag = "telemetry", params(ScopeQuery),
    responses((status = 200, body = TelemetryView), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_telemetry(
    Caller(services, caller): Caller,
    ApiQuery(query): ApiQuery<ScopeQuery>,
) -> ApiResult<Json<TelemetryView>> {
    Ok(Json(telemetry::view(&services, &caller, query.parse()?).await?))
}

/// The live feed (text/event-stream): one `sample` event per host per second with the GPUs the
/// caller may see; `end` when that stops (the rental ended).
#[utoipa::path(get, path = "/telemetry/live", operation_id = "live_telemetry", tag = "telemetry", params(ScopeQuery),
    responses((status = 200, description = "Server-Sent Events, each a LiveEvent as JSON", content_type = "text/event-stream"),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "The rental no longer holds GPUs, or the account has its limit of live feeds open", body = ErrorBody),
        (status = 503, description = "The server has its limit of live feeds open", body = ErrorBody)))]
pub async fn live_telemetry(
    Caller(services, caller): Caller,
    RequestSession(session): RequestSession,
    ApiQuery(query): ApiQuery<ScopeQuery>,
) -> ApiResult<Response> {
    let grant = telemetry::grant(&services, &caller, query.parse()?).await?;
    if !grant.live {
        return Err(ApiError(AppError::conflict(
            "this rental no longer holds GPUs; its history is in /api/v1/telemetry",
        )));
    }
    let limits = &services.settings.telemetry;
    let slot = services.telemetry.open_feed(caller.user_id, limits.feeds_per_account, limits.feeds)?;
    let chunks = super::until_stopping(services.stopping.clone(), feed(services, caller, session.id(), grant, slot));
    let headers = [(header::CONTENT_TYPE, "text/event-stream"), (header::CACHE_CONTROL, "no-cache")];
    Ok((headers, Body::from_stream(chunks)).into_response())
}

/// How long a busy feed gathers events into one chunk of the response.
const COALESCE: Duration = Duration::from_millis(25);
/// A chunk goes out at this size, gathered or not.
const MAX_CHUNK: usize = 256 * 1024;
/// A comment goes out after this long without events, so proxies keep the connection.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

struct Feed {
    services: Services,
    principal: Principal,
    session: Option<tower_sessions::session::Id>,
    grant: telemetry::Grant,
    rx: tokio::sync::broadcast::Receiver<std::sync::Arc<telemetry::Published>>,
    recheck: tokio::time::Interval,
    keep_alive: tokio::time::Interval,
    /// Whether the last chunk held more than one event: the next one gathers for [`COALESCE`].
    busy: bool,
    done: bool,
    /// Counts this feed against its account's and the server's limits while it is open.
    _slot: telemetry::FeedSlot,
}

/// The feed's response body: Server-Sent Events, as many as are ready in one chunk. A fleet
/// dashboard sees thousands of hosts a second; one chunk (one write, one wake-up of the reader)
/// per event was most of the server's work at that size, so a busy feed gathers what arrives
/// within [`COALESCE`] into one chunk, while a quiet one (a renter's rental) sends each at once.
fn feed(
    services: Services,
    principal: Principal,
    session: Option<tower_sessions::session::Id>,
    grant: telemetry::Grant,
    slot: telemetry::FeedSlot,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    let rx = services.telemetry.subscribe();
    let mut recheck = tokio::time::interval(RECHECK);
    recheck.reset();
    let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
    keep_alive.reset();
    let start =
        Feed { services, principal, session, grant, rx, recheck, keep_alive, busy: false, done: false, _slot: slot };
    futures_util::stream::unfold(start, |mut feed| async move {
        if feed.done {
            return None;
        }
        let mut chunk = String::new();
        loop {
            tokio::select! {
                received = feed.rx.recv() => match received {
                    Ok(published) => {
                        if feed.add(&published, &mut chunk) {
                            break;
                        }
                    }
                    // A slow reader skips what it missed; the next sample is complete on its own.
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return None,
                },
                _ = feed.recheck.tick() => {
                    if let Some(reason) = feed.recheck().await {
                        feed.done = true;
                        let json = serde_json::to_string(&LiveEvent::End { reason }).unwrap_or_default();
                        push_event(&mut chunk, &json);
                        return Some((Ok(chunk.into()), feed));
                    }
                }
                _ = feed.keep_alive.tick() => return Some((Ok(Bytes::from_static(b":\n\n")), feed)),
            }
        }
        let mut events = 1 + feed.gather(&mut chunk);
        if feed.busy && chunk.len() < MAX_CHUNK {
            tokio::time::sleep(COALESCE).await;
            events += feed.gather(&mut chunk);
        }
        feed.busy = events > 1;
        feed.keep_alive.reset();
        Some((Ok(chunk.into()), feed))
    })
}

/// Appends one event whose data is `json` (one line: JSON as serde writes it has no newlines).
fn push_event(chunk: &mut String, json: &str) {
    chunk.push_str("data: ");
    chunk.push_str(json);
    chunk.push_str("\n\n");
}

impl Feed {
    /// Appends `published` if the feed may see it; whether it did.
    fn add(&self, published: &telemetry::Published, chunk: &mut String) -> bool {
        let json = self.grant.admit(published);
        if let Some(json) = &json {
            push_event(chunk, json);
        }
        json.is_some()
    }

    /// Appends what the feed may see of the frames already waiting, up to [`MAX_CHUNK`]; how many.
    fn gather(&mut self, chunk: &mut String) -> usize {
        let mut events = 0;
        while chunk.len() < MAX_CHUNK {
            match self.rx.try_recv() {
                Ok(published) => events += usize::from(self.add(&published, chunk)),
                Err(TryRecvError::Lagged(_)) => {}
                Err(TryRecvError::Empty | TryRecvError::Closed) => break,
            }
        }
        events
    }

    /// Re-checks the caller's sign-in and grant; why the feed must end, if it must.
    async fn recheck(&mut self) -> Option<String> {
        match telemetry::recheck(&self.services, &self.principal, self.session, self.grant.scope).await {
            telemetry::Recheck::Continue(principal, grant) => {
                self.principal = principal;
                self.grant = grant;
                None
            }
            telemetry::Recheck::End(reason) => Some(reason),
            telemetry::Recheck::Retry => None,
        }
    }
}

/// Every host and GPU at a glance, with fleet totals (admins).
#[utoipa::path(get, path = "/fleet", operation_id = "get_fleet", tag = "telemetry",
    responses((status = 200, body = FleetOverview), (status = 403, body = ErrorBody)))]
pub async fn get_fleet(Caller(services, caller): Caller) -> ApiResult<Json<FleetOverview>> {
    Ok(Json(telemetry::fleet(&services, &caller).await?))
}

/// Alerts, newest first: all for admins, a provider's own hosts' otherwise.
#[utoipa::path(get, path = "/alerts", operation_id = "list_alerts", tag = "telemetry",
    responses((status = 200, body = Vec<Alert>), (status = 401, body = ErrorBody)))]
pub async fn list_alerts(Caller(services, caller): Caller) -> ApiResult<Json<Vec<Alert>>> {
    Ok(Json(alerts::list_alerts(&services, &caller).await?))
}

/// Acknowledges an alert (admins).
#[utoipa::path(post, path = "/alerts/{id}/acknowledge", operation_id = "acknowledge_alert", tag = "telemetry",
    params(("id" = i64, Path, description = "Alert id")),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn acknowledge_alert(Caller(services, caller): Caller, id: PathId) -> ApiResult<StatusCode> {
    let id = id.of("an alert")?;
    alerts::acknowledge(&services, &caller, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
