//! `logs`: a rental's workload output, a piece or followed live (`-f`).
//!
//! Following reads the API's Server-Sent Events and, when the stream drops (a replica
//! restarting, a network blip), reconnects with `Last-Event-ID`, so no output is shown twice
//! or skipped; it ends when the workload does.

use crate::{
    Ctx,
    args::Logs,
    failure::{Failure, Kind, Outcome},
};
use cardpool_domain::rentals::LogEvent;
use cardpool_protocol::LogChunk;
use reqwest::{Method, Response};
use std::time::Duration;

/// Reconnections in a row that may fail before `logs -f` gives up.
const RECONNECTS: u32 = 10;
/// The most an event may hold before it ends (a chunk is at most 256 KiB of JSON-escaped text).
const MAX_EVENT_BYTES: usize = 2 << 20;

pub async fn logs(ctx: &mut Ctx<'_, '_>, logs: &Logs) -> Outcome {
    let path = format!("/rentals/{}/logs", logs.rental);
    if !logs.follow {
        let chunk: LogChunk = ctx.get(&path).await?;
        if ctx.json {
            return ctx.print_json(&chunk);
        }
        if chunk.skipped > 0 {
            writeln!(ctx.console.err, "({} earlier bytes are no longer kept)", chunk.skipped)?;
        }
        write!(ctx.console.out, "{}", chunk.data)?;
        return Ok(());
    }
    let path = format!("{path}?follow=true");
    let mut resume: Option<String> = None;
    let mut failures = 0;
    loop {
        let headers: Vec<(&str, String)> = resume.iter().map(|id| ("last-event-id", id.clone())).collect();
        let sent = ctx.api.send_with(&mut *ctx.console.err, Method::GET, &path, None, &headers, None).await;
        let response = match sent {
            Ok(response) => response,
            Err(failure) if failure.kind == Kind::Unavailable && failures < RECONNECTS => {
                failures += 1;
                writeln!(ctx.console.err, "(reconnecting: {})", failure.message)?;
                tokio::time::sleep(Duration::from_secs(failures.into())).await;
                continue;
            }
            Err(failure) => return Err(failure),
        };
        failures = 0;
        if follow(ctx, response, &mut resume).await? {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Shows the events of one connection; true once the log has ended, false if the stream
/// dropped first.
async fn follow(ctx: &mut Ctx<'_, '_>, mut response: Response, resume: &mut Option<String>) -> Outcome<bool> {
    let mut buffer = String::new();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) | Err(_) => return Ok(false),
        };
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        if buffer.len() > MAX_EVENT_BYTES {
            return Err(Failure::other("the log stream sent an event larger than 2 MiB"));
        }
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let (id, data) = parse_event(&event);
            let Some(data) = data else { continue }; // a keep-alive comment
            let event: LogEvent = serde_json::from_str(&data)
                .map_err(|e| Failure::other(format!("the log stream sent an event not understood: {e}")))?;
            if let Some(id) = id {
                *resume = Some(id);
            }
            if ctx.json {
                writeln!(ctx.console.out, "{}", serde_json::to_string(&event).unwrap_or_default())?;
            }
            match event {
                LogEvent::Chunk(chunk) if !ctx.json => write!(ctx.console.out, "{}", chunk.data)?,
                LogEvent::Waiting { reason } if !ctx.json => writeln!(ctx.console.err, "(waiting: {reason})")?,
                LogEvent::End { reason } => {
                    if !ctx.json {
                        writeln!(ctx.console.err, "({reason})")?;
                    }
                    return Ok(true);
                }
                _ => {}
            }
            ctx.console.out.flush()?;
        }
    }
}

/// An SSE event's id and its data lines joined, as the HTML standard reads them.
fn parse_event(event: &str) -> (Option<String>, Option<String>) {
    let (mut id, mut data): (Option<String>, Option<String>) = (None, None);
    for line in event.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => id = Some(value.to_owned()),
            "data" => match &mut data {
                Some(joined) => {
                    joined.push('\n');
                    joined.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
    (id, data)
}

#[cfg(test)]
mod tests {
    use super::parse_event;

    #[test]
    fn reads_server_sent_events() {
        assert_eq!(parse_event("id: 42\ndata: {\"a\":\ndata: 1}\n\n"), (Some("42".into()), Some("{\"a\":\n1}".into())));
        assert_eq!(parse_event(":\n\n"), (None, None), "a keep-alive carries nothing");
    }
}
