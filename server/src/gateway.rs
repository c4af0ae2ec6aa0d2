//! The agent gateway: one WebSocket per connected host at `/agent/v1/connect`.
//!
//! The agent authenticates with its host credential (`Authorization: Bearer cph_...`) before
//! the upgrade, then says hello with its protocol version and host id; the server refuses
//! other protocol majors and a host id that is not the credential's. After that it stores
//! inventories and heartbeats through `cardpool_service::hosts`. Every heartbeat checks that
//! the host is not revoked (and the credential is checked again when heartbeats stop), so a
//! revoked host is cut off within seconds.
//!
//! Rentals: the connection sends the agent what `rentals::commands_for_host` says it must do
//! (attach, preemption notice, detach, carve a MIG layout) on connect, whenever the service signals a change on
//! this host, and in answer to every heartbeat (which lists what the agent runs; heartbeats are
//! recorded in batches by `hosts::heartbeat`, the connection reading on meanwhile); the agent's
//! workload reports drive the rental's state machine through `rentals::record_workload_status`.
//!
//! SSH: channels of the SSH gateway (`crate::ssh`) travel over the same socket, control as
//! JSON and bytes as binary frames, through `cardpool_service::tunnels`.
//!
//! Telemetry: each message is taken by `telemetry::accept` and acknowledged only after the
//! flush that stores it has committed (the connection goes on reading meanwhile); the agent
//! replays anything unacknowledged on its next connection.
//!
//! Replicas: a connection takes its host over in the database at hello (`hosts.connection_id`);
//! a connection that no longer owns its host (the agent reconnected, here or on another
//! replica) ends at its next heartbeat, or at once when the bus carries the other replica's kick.

use crate::edges::ApiError;
use axum::{
    Extension,
    extract::{
        State,
        ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade},
    },
    http::{HeaderMap, header},
    response::{IntoResponse, Response},
};
use cardpool_app::ssr::AppState;
use cardpool_domain::AppError;
use cardpool_protocol::{AgentMessage, PROTOCOL_VERSION, ServerMessage};
use cardpool_service::{Services, bus, entities::hosts as host_rows, hosts, rentals, telemetry, tunnels};
use futures_util::{
    SinkExt, StreamExt,
    future::BoxFuture,
    stream::{FuturesUnordered, SplitSink},
};
use std::time::Duration;

/// How the gateway paces agents.
#[derive(Clone)]
pub struct GatewayOptions {
    pub heartbeat_interval: Duration,
    pub metrics: std::sync::Arc<crate::metrics::ServerMetrics>,
}

/// Why a connection that lost its host to a newer one ends.
const TAKEN_OVER: &str = "another connection of this host took over (is a second agent running with its credential?)";
const REVOKED: &str = "this host's credential was revoked";
/// How long a new connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest message an agent may send: a telemetry batch (60 frames of 64 GPUs) is ~600 KiB.
const MAX_MESSAGE_BYTES: usize = 1 << 20;
/// The agent socket's read buffer and the unsent bytes at which writes go out.
const SOCKET_BUFFER_BYTES: usize = 16 * 1024;
/// Unsent bytes to one agent past which sending fails and the connection ends.
const MAX_UNSENT_BYTES: usize = 4 * 1024 * 1024;
/// Messages that reach the database (heartbeats, reports, telemetry): per second, and in a burst.
const STORED_PER_SEC: f64 = 20.0;
const STORED_BURST: f64 = 200.0;
/// Messages relayed in memory (SSH channel control, log chunks).
const RELAYED_PER_SEC: f64 = 5000.0;
const RELAYED_BURST: f64 = 10_000.0;

pub async fn connect(
    State(state): State<AppState>,
    Extension(options): Extension<GatewayOptions>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    let Some(credential) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|v| v.trim().to_owned())
    else {
        return ApiError(AppError::Unauthorized).into_response();
    };
    let host = match hosts::authenticate_host(&state.services, &credential).await {
        Ok(host) => host,
        Err(err) => return ApiError(err).into_response(),
    };
    upgrade
        .max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        // tungstenite's 128 KiB default read buffer is zero-filled before every read and, with
        // the write buffer, held per agent for the connection's life: at thousands of agents
        // that was most of the server's memory and a share of its CPU. Larger messages still
        // grow the read buffer; what waits unsent for a stuck agent is bounded.
        .read_buffer_size(SOCKET_BUFFER_BYTES)
        .write_buffer_size(SOCKET_BUFFER_BYTES)
        .max_write_buffer_size(MAX_UNSENT_BYTES)
        .on_upgrade(move |socket| serve_agent(state.services, host, credential, options, socket))
}

type Sender = SplitSink<WebSocket, Message>;

async fn send(tx: &mut Sender, message: &ServerMessage) -> bool {
    match serde_json::to_string(message) {
        Ok(text) => tx.send(Message::Text(text.into())).await.is_ok(),
        Err(_) => false,
    }
}

async fn refuse(tx: &mut Sender, reason: impl Into<String>) {
    let reason = reason.into();
    tracing::info!(%reason, "agent connection refused");
    send(tx, &ServerMessage::Refused { reason }).await;
    let _ = tx.send(Message::Close(None)).await;
}

/// Sends what the agent must do now. False when the connection is gone.
async fn send_commands(services: &Services, tx: &mut Sender, host_id: i64, running: Option<&[i64]>) -> bool {
    match rentals::commands_for_host(services, host_id, running).await {
        Ok(commands) => send_all(tx, &commands).await,
        // Already logged; the next tick tries again.
        Err(_) => true,
    }
}

/// Sends each of `commands`; false when the socket is gone.
async fn send_all(tx: &mut Sender, commands: &[ServerMessage]) -> bool {
    for command in commands {
        if !send(tx, command).await {
            return false;
        }
    }
    true
}

async fn serve_agent(
    services: Services,
    host: host_rows::Model,
    credential: String,
    options: GatewayOptions,
    socket: WebSocket,
) {
    let (mut tx, mut rx) = socket.split();
    let hello = tokio::time::timeout(HELLO_TIMEOUT, rx.next()).await;
    let Ok(Some(Ok(Message::Text(text)))) = hello else {
        return refuse(&mut tx, "expected a hello message first").await;
    };
    let agent_protocol = match serde_json::from_str::<AgentMessage>(&text) {
        Ok(AgentMessage::Hello { protocol, host_id, .. }) => {
            if let Err(reason) = PROTOCOL_VERSION.check_peer(protocol) {
                return refuse(&mut tx, reason).await;
            }
            if host_id != host.id {
                return refuse(&mut tx, format!("this credential belongs to host {}, not host {host_id}", host.id))
                    .await;
            }
            protocol
        }
        _ => return refuse(&mut tx, "expected a hello message first").await,
    };
    let welcome = ServerMessage::Welcome {
        host_id: host.id,
        heartbeat_interval_secs: options.heartbeat_interval.as_secs().max(1),
    };
    // One live connection per host: a newer one's arrival here drops `kick`'s sender, and one
    // elsewhere takes the host over in the database (and says so on the bus).
    let (kick, kicked) = tokio::sync::oneshot::channel();
    let hooked = services.connections.connect(host.id, kick);
    let connection = bus::connection_id(&services, hooked.generation);
    if !send(&mut tx, &welcome).await || hosts::connect_host(&services, &host, &connection).await.is_err() {
        return;
    }
    tracing::info!(host.id = host.id, %connection, "agent connected");
    options.metrics.agents_connected.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let link = Link { host: &host, credential: &credential, connection: &connection, protocol: agent_protocol };
    serve_connected(&services, link, &options, kicked, &mut tx, &mut rx).await;
    options.metrics.agents_connected.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    drop(hooked);
    if let Err(err) = hosts::disconnect_host(&services, host.id, &connection).await {
        tracing::debug!(host.id = host.id, error = %err, "agent disconnect not recorded");
    }
    // A closed connection is not an offline host: the agent reconnects within the offline grace
    // and its rentals go on; only the reaper, judging silence, takes a host offline. So a stale
    // socket closing late can never mark a host that has already reconnected.
    tracing::info!(host.id = host.id, "agent disconnected; offline if silent past the grace");
}

/// A welcomed agent connection: whose it is and what it speaks.
struct Link<'a> {
    host: &'a host_rows::Model,
    credential: &'a str,
    /// This connection's id, as `hosts.connection_id` holds it while it owns the host.
    connection: &'a str,
    protocol: cardpool_protocol::ProtocolVersion,
}

/// The connection after a welcome: commands out, reports in, until either side goes.
async fn serve_connected(
    services: &Services,
    link: Link<'_>,
    options: &GatewayOptions,
    mut kicked: tokio::sync::oneshot::Receiver<()>,
    tx: &mut Sender,
    rx: &mut futures_util::stream::SplitStream<WebSocket>,
) {
    let Link { host, credential, connection, protocol: agent_protocol } = link;
    let mut stored = TokenBucket::new(STORED_PER_SEC, STORED_BURST);
    let mut relayed = TokenBucket::new(RELAYED_PER_SEC, RELAYED_BURST);
    let wake = services.signals.subscribe(host.id);
    // Reads of workload logs for this host come through here until the connection ends, the
    // other replicas' reads and SSH channels too.
    let mut logs = services.logs.connect(host.id);
    let _serving_others = bus::serve_host(services, host.id);
    // Agents since 1.2 report every status change before the heartbeat that leaves the
    // workload out, so a workload missing from a heartbeat is really gone.
    let reconciles = agent_protocol.minor >= 2;
    // Agents since 1.3 carry SSH channels.
    let mut tunnels = (agent_protocol.minor >= 3).then(|| services.tunnels.connect(host.id));
    if !send_commands(services, tx, host.id, None).await {
        return;
    }

    let mut recheck = tokio::time::interval(options.heartbeat_interval);
    recheck.tick().await;
    // Telemetry waiting for its flush; each is acknowledged when stored.
    let mut acks: FuturesUnordered<BoxFuture<'static, Result<ServerMessage, AppError>>> = FuturesUnordered::new();
    // Heartbeats waiting for their batch (see `hosts::heartbeat`), and when one last counted.
    let mut beats: FuturesUnordered<BoxFuture<'static, Result<hosts::HeartbeatAnswer, AppError>>> =
        FuturesUnordered::new();
    let mut verified = tokio::time::Instant::now();
    loop {
        let to_agent = async {
            match tunnels.as_mut() {
                Some(tunnels) => tunnels.frames.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some(frame) = to_agent => {
                let sent = match frame {
                    tunnels::ToAgent::Message(message) => send(tx, &message).await,
                    tunnels::ToAgent::Data(bytes) => tx.send(Message::Binary(bytes.into())).await.is_ok(),
                };
                if !sent {
                    break;
                }
            }
            Some(stored) = acks.next(), if !acks.is_empty() => match stored {
                Ok(ack) => {
                    if !send(tx, &ack).await {
                        break;
                    }
                }
                // Not stored (already logged): the agent replays on its next connection.
                Err(_) => break,
            },
            Some(read) = logs.reads.recv() => {
                if !send(tx, &read).await {
                    break;
                }
            }
            _ = &mut kicked => {
                refuse(tx, TAKEN_OVER).await;
                break;
            }
            () = services.stopping.wait() => {
                // 1012 "service restart": the agent reconnects (to another replica, if any);
                // its rentals go on, and what it had not had acknowledged it sends again.
                let close = CloseFrame { code: 1012, reason: "the server is restarting".into() };
                let _ = tx.send(Message::Close(Some(close))).await;
                break;
            }
            () = wake.notified() => {
                if !send_commands(services, tx, host.id, None).await {
                    break;
                }
            }
            frame = rx.next() => {
                let text = match frame {
                    None | Some(Err(_)) | Some(Ok(Message::Close(_))) => break,
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Binary(frame))) => {
                        services.tunnels.from_agent_data(host.id, &frame);
                        continue;
                    }
                    Some(Ok(_)) => continue,
                };
                let message = cardpool_protocol::decode::agent_message(&text);
                match &message {
                    Ok(m) if is_relayed(m) => relayed.take().await,
                    _ => stored.take().await,
                }
                let result = match message {
                    Ok(AgentMessage::Inventory(inventory)) => hosts::record_inventory(services, host, &inventory).await,
                    Ok(AgentMessage::Heartbeat { rentals: running, .. }) => {
                        let beat = hosts::Beat { host_id: host.id, connection: connection.to_owned(), running, reconciles };
                        beats.push(Box::pin(hosts::heartbeat(services, beat)));
                        Ok(())
                    }
                    Ok(AgentMessage::RentalStatus { rental_id, status }) => {
                        rentals::record_workload_status(services, host.id, rental_id, &status).await
                    }
                    Ok(AgentMessage::SelfTest(report)) => hosts::record_self_test(services, host, &report).await,
                    Ok(AgentMessage::MigLayoutFailed { gpu_index, reason }) => {
                        hosts::record_layout_failure(services, host, gpu_index, &reason).await
                    }
                    Ok(AgentMessage::Telemetry { stream, frames, dropped }) => {
                        match telemetry::accept(services, host.id, connection, stream, frames, dropped).await {
                            Ok(Some(receipt)) => {
                                acks.push(Box::pin(receipt.stored()));
                                Ok(())
                            }
                            Ok(None) => Ok(()),
                            Err(err) => Err(err),
                        }
                    }
                    Ok(AgentMessage::Logs { request_id, chunk }) => {
                        services.logs.answer(host.id, request_id, chunk);
                        Ok(())
                    }
                    Ok(
                        message @ (AgentMessage::ChannelOpened { .. }
                        | AgentMessage::ChannelRefused { .. }
                        | AgentMessage::ChannelWindow { .. }
                        | AgentMessage::ChannelEof { .. }
                        | AgentMessage::ChannelExit { .. }
                        | AgentMessage::ChannelClosed { .. }),
                    ) => {
                        services.tunnels.from_agent(host.id, &message);
                        Ok(())
                    }
                    Ok(AgentMessage::Hello { .. }) => Err(AppError::invalid_field("type", "hello was already received")),
                    Err(message) => Err(AppError::invalid_field("message", message)),
                };
                if let Err(err) = result
                    && !refused(tx, host.id, err).await
                {
                    break;
                }
            }
            Some(answer) = beats.next(), if !beats.is_empty() => match answer {
                Ok(hosts::HeartbeatAnswer::Commands(commands)) => {
                    verified = tokio::time::Instant::now();
                    if !send_all(tx, &commands).await {
                        break;
                    }
                }
                Ok(hosts::HeartbeatAnswer::TakenOver) => {
                    refuse(tx, TAKEN_OVER).await;
                    break;
                }
                Ok(hosts::HeartbeatAnswer::Revoked) => {
                    refuse(tx, REVOKED).await;
                    break;
                }
                Err(err) => {
                    if !refused(tx, host.id, err).await {
                        break;
                    }
                }
            },
            // A counted heartbeat has checked the credential; an agent silent that long is
            // checked here instead.
            _ = recheck.tick(), if verified.elapsed() >= options.heartbeat_interval => {
                if hosts::authenticate_host(services, credential).await.is_err() {
                    refuse(tx, REVOKED).await;
                    break;
                }
            }
        }
    }
}

/// Tells the agent why its message was not accepted; false when the connection must end (our
/// own failure, already logged: the agent reconnects and retries; or the socket is gone). The
/// connection and its rentals go on otherwise.
async fn refused(tx: &mut Sender, host_id: i64, err: AppError) -> bool {
    if err == AppError::Internal {
        return false;
    }
    let message = match &err {
        AppError::Validation { fields, message } => fields.values().next().cloned().unwrap_or_else(|| message.clone()),
        other => other.to_string(),
    };
    tracing::info!(host.id = host_id, %message, "agent message not accepted");
    send(tx, &ServerMessage::Error { message }).await
}

/// Messages the server only passes on in memory (an SSH channel's control, a log chunk).
fn is_relayed(message: &AgentMessage) -> bool {
    matches!(
        message,
        AgentMessage::Logs { .. }
            | AgentMessage::ChannelOpened { .. }
            | AgentMessage::ChannelRefused { .. }
            | AgentMessage::ChannelWindow { .. }
            | AgentMessage::ChannelEof { .. }
            | AgentMessage::ChannelExit { .. }
            | AgentMessage::ChannelClosed { .. }
    )
}

/// Paces an agent's messages: `rate` a second on average, `burst` at once; past that the
/// connection's reading waits (the agent's socket backs up), nothing is dropped or refused.
struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: tokio::time::Instant,
}

impl TokenBucket {
    fn new(rate: f64, burst: f64) -> Self {
        TokenBucket { rate, burst, tokens: burst, at: tokio::time::Instant::now() }
    }

    async fn take(&mut self) {
        let now = tokio::time::Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * self.rate).min(self.burst);
        self.at = now;
        if self.tokens < 1.0 {
            let wait = Duration::from_secs_f64((1.0 - self.tokens) / self.rate);
            tokio::time::sleep(wait).await;
            self.tokens = 1.0;
            self.at = tokio::time::Instant::now();
        }
        self.tokens -= 1.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_flood_is_paced_to_the_rate_after_the_burst() {
        let mut bucket = TokenBucket::new(20.0, 200.0);
        let start = tokio::time::Instant::now();
        for _ in 0..200 {
            bucket.take().await;
        }
        assert!(start.elapsed() < Duration::from_millis(1), "the burst passes at once");
        for _ in 0..100 {
            bucket.take().await;
        }
        let paced = start.elapsed();
        assert!(paced >= Duration::from_millis(4950) && paced <= Duration::from_millis(5100), "{paced:?}");
    }
}
