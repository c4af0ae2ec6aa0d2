//! `/api/v1/rentals/{id}/logs`: a rental's workload output (stdout and stderr), read through
//! its host's agent (`cardpool_service::logs`). Read a piece by offset, follow it live as
//! Server-Sent Events (resuming from `Last-Event-ID`), or download what the host keeps.

use crate::edges::{ApiQuery, ApiResult, Caller, PathId};
use axum::{
    Json,
    http::{HeaderMap, header},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use cardpool_app::ssr::AppState;
use cardpool_domain::{AppError, error::ErrorBody, rentals::LogEvent};
use cardpool_protocol::{LOG_CHUNK_BYTES, LOG_RING_BYTES, LogChunk};
use cardpool_service::{Services, auth::Principal, logs};
use serde::Deserialize;
use std::{convert::Infallible, time::Duration};
use utoipa_axum::{router::OpenApiRouter, routes};

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(rental_logs))
}

/// A following reader with nothing new waits this long before asking again.
const POLL: Duration = Duration::from_millis(750);
/// ... and this long while the host's agent is away.
const AWAY: Duration = Duration::from_secs(3);
/// What a new follower is shown of the past.
const FOLLOW_TAIL: u32 = 64 << 10;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogsQuery {
    /// Byte offset to read from (a previous piece's `end`); without it, the last `max_bytes`.
    offset: Option<u64>,
    /// At most this many bytes (up to 262144).
    max_bytes: Option<u32>,
    /// Server-Sent Events: each a `LogEvent` as JSON with the offset to resume from as its id.
    #[serde(default)]
    follow: bool,
    /// Everything the host still keeps (up to 8 MiB), as a text file.
    #[serde(default)]
    download: bool,
}

/// A piece of the rental's workload log (renter or admin), or the live log, or the whole kept
/// log as a file.
#[utoipa::path(get, path = "/rentals/{id}/logs", operation_id = "rental_logs", tag = "rentals",
    params(("id" = i64, Path, description = "Rental id"), LogsQuery),
    responses((status = 200, body = LogChunk, description = "A piece of the log; with follow=true, text/event-stream of LogEvent; with download=true, text/plain"),
        (status = 404, body = ErrorBody), (status = 503, description = "The host's agent is not connected", body = ErrorBody)))]
pub async fn rental_logs(
    Caller(services, caller): Caller,
    id: PathId,
    headers: HeaderMap,
    ApiQuery(query): ApiQuery<LogsQuery>,
) -> ApiResult<Response> {
    let rental_id = id.of("a rental")?;
    if query.follow {
        // Checked before the stream starts, so a stranger gets 404, not an empty feed.
        let resume = headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .or(query.offset);
        logs::read_rental_log(&services, &caller, rental_id, resume, Some(1)).await.or_else(|e| match e {
            AppError::Unavailable(_) => Ok(empty_chunk()),
            other => Err(other),
        })?;
        let stream = super::until_stopping(services.stopping.clone(), follow(services, caller, rental_id, resume));
        return Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response());
    }
    if query.download {
        return download(&services, &caller, rental_id).await;
    }
    Ok(Json(logs::read_rental_log(&services, &caller, rental_id, query.offset, query.max_bytes).await?).into_response())
}

fn empty_chunk() -> LogChunk {
    LogChunk { offset: 0, end: 0, skipped: 0, data: String::new(), running: true }
}

/// The kept log, oldest first, as `rental-<id>.log`.
async fn download(services: &Services, caller: &Principal, rental_id: i64) -> ApiResult<Response> {
    let mut text = String::new();
    let mut offset = 0;
    while (text.len() as u64) < LOG_RING_BYTES + u64::from(LOG_CHUNK_BYTES) {
        let chunk = logs::read_rental_log(services, caller, rental_id, Some(offset), None).await?;
        if chunk.data.is_empty() {
            break;
        }
        text.push_str(&chunk.data);
        offset = chunk.end;
    }
    let disposition = format!("attachment; filename=\"rental-{rental_id}.log\"");
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()), (header::CONTENT_DISPOSITION, disposition)],
        text,
    )
        .into_response())
}

struct Follower {
    services: Services,
    caller: Principal,
    rental_id: i64,
    offset: Option<u64>,
    done: bool,
}

fn follow(
    services: Services,
    caller: Principal,
    rental_id: i64,
    offset: Option<u64>,
) -> impl futures_util::Stream<Item = Result<Event, Infallible>> {
    let start = Follower { services, caller, rental_id, offset, done: false };
    futures_util::stream::unfold(start, |mut f| async move {
        if f.done {
            return None;
        }
        loop {
            let read = match f.offset {
                Some(offset) => logs::read_rental_log(&f.services, &f.caller, f.rental_id, Some(offset), None).await,
                None => logs::read_rental_log(&f.services, &f.caller, f.rental_id, None, Some(FOLLOW_TAIL)).await,
            };
            let (event, resume) = match read {
                Ok(chunk) if !chunk.data.is_empty() => {
                    f.offset = Some(chunk.end);
                    let id = chunk.end.to_string();
                    (LogEvent::Chunk(chunk), Some(id))
                }
                Ok(chunk) if chunk.running => {
                    f.offset = Some(chunk.end);
                    tokio::time::sleep(POLL).await;
                    continue;
                }
                Ok(_) => {
                    f.done = true;
                    (LogEvent::End { reason: "the workload has ended".into() }, None)
                }
                Err(AppError::Unavailable(reason)) => {
                    tokio::time::sleep(AWAY).await;
                    (LogEvent::Waiting { reason }, None)
                }
                Err(err) => {
                    f.done = true;
                    (LogEvent::End { reason: err.to_string() }, None)
                }
            };
            let json = serde_json::to_string(&event).unwrap_or_default();
            let mut sse = Event::default().data(json);
            if let Some(id) = resume {
                sse = sse.id(id);
            }
            return Some((Ok(sse), f));
        }
    })
}
