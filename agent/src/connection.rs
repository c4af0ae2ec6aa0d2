//! `cardpool-agent run`: stay connected to the server, report inventory and heartbeats.
//!
//! The agent dials out (so it works behind NAT), authenticates with its host credential, and
//! reconnects with jittered exponential backoff when the connection drops. A refusal that
//! retrying cannot fix (revoked host, unsupported protocol) ends the agent with a clear error.
//! SIGTERM or Ctrl-C closes the connection cleanly and exits 0.

use crate::{
    devices::DeviceMap,
    gpu::GpuSource,
    host,
    runtime::{Runtimes, WorkloadMode},
    shares::HostShares,
    state::AgentState,
    supervisor::{StatusUpdate, Supervisor},
    telemetry::{self, FRAMES_PER_MESSAGE, IN_FLIGHT_FRAMES, TelemetryBuffer},
    tunnels::Tunnels,
};
use cardpool_protocol::{AgentMessage, Inventory, PROTOCOL_VERSION, ServerMessage};
use futures_util::{SinkExt, StreamExt};
use rand::Rng;
use std::{path::PathBuf, sync::Mutex, time::Duration};
use tokio::sync::{Notify, mpsc::UnboundedReceiver};
use tokio_tungstenite::tungstenite::{self, Message, client::IntoClientRequest, http::HeaderValue};

const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long an ended rental's directory (its log, its workspace) is kept on the host.
const KEEP_ENDED: Duration = Duration::from_secs(7 * 24 * 3600);
/// How often the inventory is re-read to notice changes (a GPU falling off the bus, say).
const INVENTORY_REFRESH: Duration = Duration::from_secs(15);

/// How one connection ended.
enum Ended {
    /// Asked to stop (signal).
    Shutdown,
    /// The network or the server went away; try again.
    Dropped(String),
    /// The server refused us for a reason retrying will not fix.
    Refused(String),
}

/// Exponential backoff with full jitter in its upper half: waits between half and all of
/// the current step, so a fleet of agents does not reconnect in lockstep.
pub struct Backoff {
    step: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Backoff {
    pub fn new() -> Self {
        Backoff { step: INITIAL_BACKOFF }
    }

    pub fn next_delay(&mut self) -> Duration {
        let step = self.step;
        self.step = (self.step * 2).min(MAX_BACKOFF);
        let millis = step.as_millis() as u64;
        Duration::from_millis(rand::rng().random_range(millis / 2..=millis))
    }

    pub fn reset(&mut self) {
        self.step = INITIAL_BACKOFF;
    }
}

/// The WebSocket URL of the gateway for a server base URL: `wss://` for `https://` servers,
/// `ws://` for `http://` ones (loopback and trusted networks).
pub fn gateway_url(server: &str) -> Result<String, String> {
    let base = server.trim_end_matches('/');
    if let Some(rest) = base.strip_prefix("https://") {
        Ok(format!("wss://{rest}/agent/v1/connect"))
    } else if let Some(rest) = base.strip_prefix("http://") {
        Ok(format!("ws://{rest}/agent/v1/connect"))
    } else {
        Err(format!("{server:?} is not an http:// or https:// URL"))
    }
}

fn inventory(source: &dyn GpuSource, location: &Option<String>) -> Result<Inventory, String> {
    Ok(Inventory {
        protocol: PROTOCOL_VERSION,
        host: host::host_facts(location.clone()),
        gpus: source.gpus().map_err(|e| e.to_string())?,
    })
}

/// This host's capacity, which rentals get their GPUs' share of.
pub fn shares(source: &dyn GpuSource) -> HostShares {
    let host = host::host_facts(None);
    let gpus = source.gpus().map(|g| g.len()).unwrap_or(1).max(1);
    HostShares::new(u64::from(host.cpu_cores) * 1000, host.ram_bytes, gpus as u64)
}

/// What one agent process keeps across its connections.
struct Agent<'a> {
    url: String,
    state: &'a AgentState,
    source: &'a dyn GpuSource,
    location: Option<String>,
    supervisor: Supervisor,
    /// The GPUs and MIG slices the GPU source last reported (the sandbox reads it).
    devices: DeviceMap,
    /// The self-test's check of how workloads are isolated.
    isolation: cardpool_protocol::SelfTestCheck,
    telemetry: Mutex<TelemetryBuffer>,
    /// Woken by the sampler after each frame.
    fresh: Notify,
}

/// Runs until shut down or refused for good. Rentals' workloads run in `rentals_dir` (one
/// directory each) and keep running across reconnects; GPUs are sampled every
/// `sample_interval` (one second in production) whether or not the server is reachable.
pub async fn run(
    state: &AgentState,
    source: &dyn GpuSource,
    location: Option<String>,
    rentals_dir: PathBuf,
    mode: WorkloadMode,
    sample_interval: Duration,
) -> Result<(), String> {
    let url = gateway_url(&state.server)?;
    let devices = DeviceMap::default();
    devices.learn(&source.gpus().unwrap_or_default());
    let runtimes = Runtimes::detect(mode, shares(source), devices.clone());
    eprintln!("cardpool-agent: {}", runtimes.check.detail);
    let isolation = runtimes.check.clone();
    let reachable = crate::sandbox::reachable_rentals_dir(&rentals_dir);
    if reachable != rentals_dir {
        eprintln!(
            "cardpool-agent: rentals' directories are in {} (sandboxes cannot pass through {})",
            reachable.display(),
            rentals_dir.display()
        );
    }
    let (supervisor, mut updates) = Supervisor::new(reachable, runtimes.process, runtimes.container);
    let adopted = supervisor.adopt();
    supervisor.prune(KEEP_ENDED);
    if !adopted.is_empty() {
        eprintln!("cardpool-agent: still running from before: rentals {adopted:?}");
    }
    let agent = Agent {
        url,
        state,
        source,
        location,
        supervisor,
        devices,
        isolation,
        telemetry: Mutex::new(TelemetryBuffer::new(telemetry::BUFFER_FRAMES)),
        fresh: Notify::new(),
    };
    let sampler = telemetry::sample_forever(source, &agent.supervisor, &agent.telemetry, &agent.fresh, sample_interval);
    tokio::pin!(sampler);
    let mut backoff = Backoff::new();
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let ended = tokio::select! {
            ended = session(&agent, &mut backoff, &mut updates) => ended,
            () = &mut sampler => Ended::Shutdown,
            () = &mut shutdown => Ended::Shutdown,
        };
        match ended {
            Ended::Shutdown => {
                eprintln!("cardpool-agent: stopping");
                return Ok(());
            }
            Ended::Refused(reason) => return Err(format!("the server refused this agent: {reason}")),
            Ended::Dropped(reason) => {
                let delay = backoff.next_delay();
                eprintln!("cardpool-agent: connection lost ({reason}); reconnecting in {:.1} s", delay.as_secs_f32());
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = &mut sampler => return Ok(()),
                    () = &mut shutdown => return Ok(()),
                }
            }
        }
    }
}

/// The next telemetry message after `sent`, if any is due and the in-flight window allows.
fn next_telemetry(agent: &Agent<'_>, sent: &mut u64) -> Option<AgentMessage> {
    let buffer = agent.telemetry.lock().unwrap_or_else(|p| p.into_inner());
    if *sent < buffer.acked() {
        *sent = buffer.acked();
    }
    if *sent - buffer.acked() >= IN_FLIGHT_FRAMES {
        return None;
    }
    let frames = buffer.after(*sent, FRAMES_PER_MESSAGE);
    let last = frames.last()?.sequence;
    *sent = last;
    Some(AgentMessage::Telemetry { stream: buffer.stream, frames, dropped: buffer.dropped() })
}

/// The WebSocket's settings. tungstenite zero-fills its whole read buffer before every read
/// (even one that finds nothing yet), so the default 128 KiB cost more CPU than the agent's
/// sampling; the server's messages are small, and a larger one still grows the buffer. And no
/// Nagle: a telemetry message goes out at once, not after the previous one's ACK.
fn socket_config() -> tungstenite::protocol::WebSocketConfig {
    tungstenite::protocol::WebSocketConfig::default().read_buffer_size(16 * 1024)
}

async fn session(agent: &Agent<'_>, backoff: &mut Backoff, updates: &mut UnboundedReceiver<StatusUpdate>) -> Ended {
    let (url, state, source, location, supervisor) =
        (agent.url.as_str(), agent.state, agent.source, &agent.location, &agent.supervisor);
    let mut request = match url.into_client_request() {
        Ok(request) => request,
        Err(err) => return Ended::Refused(err.to_string()),
    };
    match HeaderValue::from_str(&format!("Bearer {}", state.credential)) {
        Ok(value) => request.headers_mut().insert("authorization", value),
        Err(_) => return Ended::Refused("the stored credential is malformed; enroll again".into()),
    };
    let (socket, _) = match tokio_tungstenite::connect_async_with_config(request, Some(socket_config()), true).await {
        Ok(connected) => connected,
        Err(tungstenite::Error::Http(response)) if response.status() == 401 => {
            return Ended::Refused("this host's credential was rejected (revoked?); enroll again".into());
        }
        Err(err) => return Ended::Dropped(err.to_string()),
    };
    let (mut tx, mut rx) = socket.split();
    let send = |message: AgentMessage| async move {
        serde_json::to_string(&message).map(|text| Message::Text(text.into())).map_err(|e| e.to_string())
    };
    let hello = AgentMessage::Hello {
        protocol: PROTOCOL_VERSION,
        agent_version: env!("CARGO_PKG_VERSION").into(),
        host_id: state.host_id,
    };
    let Ok(frame) = send(hello).await else { return Ended::Refused("cannot encode hello".into()) };
    if let Err(err) = tx.send(frame).await {
        return Ended::Dropped(err.to_string());
    }
    let interval = match rx.next().await {
        Some(Ok(Message::Text(text))) => match serde_json::from_str::<ServerMessage>(&text) {
            Ok(ServerMessage::Welcome { heartbeat_interval_secs, host_id }) => {
                eprintln!("cardpool-agent: connected as host {host_id}");
                Duration::from_secs(heartbeat_interval_secs.max(1))
            }
            Ok(ServerMessage::Refused { reason }) => return Ended::Refused(reason),
            Ok(other) => return Ended::Dropped(format!("unexpected answer to hello: {other:?}")),
            Err(err) => return Ended::Dropped(format!("unexpected answer to hello: {err}")),
        },
        Some(Ok(other)) => return Ended::Dropped(format!("unexpected answer to hello: {other:?}")),
        Some(Err(err)) => return Ended::Dropped(err.to_string()),
        None => return Ended::Dropped("closed before welcome".into()),
    };
    backoff.reset();

    let mut last_inventory = match inventory(source, location) {
        Ok(inventory) => {
            agent.devices.learn(&inventory.gpus);
            inventory
        }
        Err(err) => return Ended::Refused(format!("cannot read the GPUs: {err}")),
    };
    let Ok(frame) = send(AgentMessage::Inventory(last_inventory.clone())).await else {
        return Ended::Refused("cannot encode inventory".into());
    };
    if let Err(err) = tx.send(frame).await {
        return Ended::Dropped(err.to_string());
    }

    let mut last_self_test = crate::selftest::run(source, &last_inventory.host, &agent.isolation);
    let Ok(frame) = send(AgentMessage::SelfTest(last_self_test.clone())).await else {
        return Ended::Refused("cannot encode self-test".into());
    };
    if let Err(err) = tx.send(frame).await {
        return Ended::Dropped(err.to_string());
    }

    let mut heartbeat = tokio::time::interval(interval);
    let mut refresh = tokio::time::interval(INVENTORY_REFRESH);
    refresh.tick().await;
    let mut sequence = 0u64;
    // Telemetry sent on this connection (a new connection replays what was not acknowledged).
    let mut sent = agent.telemetry.lock().unwrap_or_else(|p| p.into_inner()).acked();
    agent.fresh.notify_one();
    // SSH channels live as long as this connection (the server's side of them does too).
    let (tunnels, mut tunnel_frames) = Tunnels::new(supervisor.clone());
    loop {
        let outgoing = tokio::select! {
            Some(frame) = tunnel_frames.recv() => {
                if let Err(err) = tx.send(frame).await {
                    return Ended::Dropped(err.to_string());
                }
                continue;
            }
            () = agent.fresh.notified() => match next_telemetry(agent, &mut sent) {
                Some(message) => message,
                None => continue,
            },
            _ = heartbeat.tick() => {
                supervisor.trim_logs();
                // Status changes go first: a heartbeat never leaves out a workload whose end
                // the server has not heard yet (it would take it for a vanished one).
                while let Ok((rental_id, status)) = updates.try_recv() {
                    let Ok(frame) = send(AgentMessage::RentalStatus { rental_id, status }).await else {
                        return Ended::Refused("cannot encode message".into());
                    };
                    if let Err(err) = tx.send(frame).await {
                        return Ended::Dropped(err.to_string());
                    }
                }
                sequence += 1;
                AgentMessage::Heartbeat { sequence, rentals: supervisor.running() }
            }
            Some((rental_id, status)) = updates.recv() => AgentMessage::RentalStatus { rental_id, status },
            _ = refresh.tick() => {
                supervisor.prune(KEEP_ENDED);
                match inventory(source, location) {
                    Ok(current) if current != last_inventory => {
                        agent.devices.learn(&current.gpus);
                        last_inventory = current.clone();
                        AgentMessage::Inventory(current)
                    }
                    Ok(current) => {
                        let report = crate::selftest::run(source, &current.host, &agent.isolation);
                        if outcome(&report) == outcome(&last_self_test) {
                            continue;
                        }
                        last_self_test = report.clone();
                        AgentMessage::SelfTest(report)
                    }
                    Err(err) => {
                        eprintln!("cardpool-agent: cannot read the GPUs: {err}");
                        continue;
                    }
                }
            }
            frame = rx.next() => match frame {
                Some(Ok(Message::Text(text))) => match serde_json::from_str::<ServerMessage>(&text) {
                    Ok(ServerMessage::Refused { reason }) => return Ended::Refused(reason),
                    Ok(ServerMessage::Error { message }) => {
                        eprintln!("cardpool-agent: the server did not accept a message: {message}");
                        continue;
                    }
                    Ok(ServerMessage::Attach(spec)) => {
                        supervisor.attach(spec);
                        continue;
                    }
                    Ok(ServerMessage::PreemptNotice { rental_id, grace_secs }) => {
                        supervisor.preempt(rental_id, Duration::from_secs(grace_secs)).await;
                        continue;
                    }
                    Ok(ServerMessage::Detach { rental_id }) => {
                        supervisor.detach(rental_id);
                        continue;
                    }
                    Ok(ServerMessage::ReadLogs { request_id, rental_id, offset, max_bytes }) => {
                        AgentMessage::Logs { request_id, chunk: supervisor.read_log(rental_id, offset, max_bytes) }
                    }
                    Ok(ServerMessage::OpenChannel { channel, rental_id, target, terminal, env }) => {
                        tunnels.open(channel, rental_id, target, terminal, env);
                        continue;
                    }
                    Ok(ServerMessage::ChannelWindow { channel, bytes }) => {
                        tunnels.window(channel, bytes);
                        continue;
                    }
                    Ok(ServerMessage::ChannelEof { channel }) => {
                        tunnels.eof(channel);
                        continue;
                    }
                    Ok(ServerMessage::ChannelResize { channel, cols, rows }) => {
                        tunnels.resize(channel, cols, rows);
                        continue;
                    }
                    Ok(ServerMessage::ChannelClose { channel }) => {
                        tunnels.close(channel);
                        continue;
                    }
                    Ok(ServerMessage::ApplyMigLayout { gpu_index, profiles }) => {
                        if let Err(reason) = carve(agent, gpu_index, &profiles) {
                            eprintln!("cardpool-agent: MIG layout of GPU {gpu_index} not applied: {reason}");
                            let failed = AgentMessage::MigLayoutFailed { gpu_index, reason };
                            let Ok(frame) = send(failed).await else { return Ended::Refused("cannot encode message".into()) };
                            if let Err(err) = tx.send(frame).await {
                                return Ended::Dropped(err.to_string());
                            }
                        }
                        // Either way the server hears what the GPU holds now.
                        match inventory(source, location) {
                            Ok(current) => {
                                agent.devices.learn(&current.gpus);
                                last_inventory = current.clone();
                                AgentMessage::Inventory(current)
                            }
                            Err(err) => {
                                eprintln!("cardpool-agent: cannot read the GPUs: {err}");
                                continue;
                            }
                        }
                    }
                    Ok(ServerMessage::TelemetryAck { stream, sequence }) => {
                        agent.telemetry.lock().unwrap_or_else(|p| p.into_inner()).ack(stream, sequence);
                        // The window may have room again, or a replay has more to send.
                        agent.fresh.notify_one();
                        continue;
                    }
                    _ => continue,
                },
                Some(Ok(Message::Binary(frame))) => {
                    tunnels.data(&frame);
                    continue;
                }
                Some(Ok(Message::Close(_))) | None => return Ended::Dropped("server closed the connection".into()),
                Some(Ok(_)) => continue,
                Some(Err(err)) => return Ended::Dropped(err.to_string()),
            },
        };
        let Ok(frame) = send(outgoing).await else { return Ended::Refused("cannot encode message".into()) };
        if let Err(err) = tx.send(frame).await {
            return Ended::Dropped(err.to_string());
        }
    }
}

/// Carves GPU `gpu_index` into the MIG layout the server sent, unless it already has it or a
/// workload runs on it (the server checked no rental holds it; one may still be winding down).
/// NVML carves in well under a second, so this runs on the connection's task.
fn carve(agent: &Agent<'_>, gpu_index: u32, profiles: &[String]) -> Result<(), String> {
    let gpus = agent.source.gpus().map_err(|e| e.to_string())?;
    let gpu = gpus.iter().find(|g| g.index == gpu_index).ok_or_else(|| format!("this host has no GPU {gpu_index}"))?;
    let now: Vec<&str> = gpu.mig_instances.iter().map(|m| m.profile.as_str()).collect();
    if cardpool_protocol::mig::same_layout(&now, profiles) {
        return Ok(());
    }
    if let Some(busy) = agent.supervisor.gpu_use().into_iter().find(|u| u.gpu_indexes.contains(&gpu_index)) {
        return Err(format!("GPU {gpu_index} is in use by rental {}", busy.rental_id));
    }
    agent.source.apply_mig_layout(gpu_index, profiles).map_err(|e| e.to_string())
}

/// What changed in a self-test worth reporting: which checks pass, not their readings.
fn outcome(report: &cardpool_protocol::SelfTestReport) -> Vec<(&str, bool)> {
    report.checks.iter().map(|c| (c.name.as_str(), c.passed)).collect()
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_and_caps() {
        let mut backoff = Backoff::new();
        let delays: Vec<Duration> = (0..10).map(|_| backoff.next_delay()).collect();
        assert!(delays[0] >= Duration::from_millis(500) && delays[0] <= Duration::from_secs(1));
        assert!(delays[3] >= Duration::from_secs(4) && delays[3] <= Duration::from_secs(8));
        assert!(delays.iter().all(|d| *d <= MAX_BACKOFF));
        assert!(delays[9] >= MAX_BACKOFF / 2);
        backoff.reset();
        assert!(backoff.next_delay() <= Duration::from_secs(1));
    }

    #[test]
    fn gateway_urls() {
        assert_eq!(gateway_url("http://127.0.0.1:3000/").unwrap(), "ws://127.0.0.1:3000/agent/v1/connect");
        assert_eq!(gateway_url("https://cardpool.example").unwrap(), "wss://cardpool.example/agent/v1/connect");
        assert!(gateway_url("ftp://x").is_err());
    }

    /// A TLS handshake against something that is not a TLS server must fail as a retryable
    /// drop: proves the TLS stack (and its crypto provider) is wired, and never panics.
    #[tokio::test]
    async fn wss_to_a_non_tls_peer_is_a_retryable_drop() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                use tokio::io::AsyncWriteExt;
                let _ = socket.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            }
        });
        let state = AgentState { server: format!("https://127.0.0.1:{port}"), host_id: 1, credential: "cph_x".into() };
        let source = crate::gpu::simulated::SimulatedSource::new("1xL40S-48GB", "t", vec![]).unwrap();
        let url = gateway_url(&state.server).unwrap();
        let (supervisor, mut updates) = Supervisor::new(std::env::temp_dir().join("cardpool-tls-test"), None, None);
        let agent = Agent {
            url,
            state: &state,
            source: &source,
            location: None,
            supervisor,
            devices: DeviceMap::default(),
            isolation: cardpool_protocol::SelfTestCheck {
                name: "isolation".into(),
                passed: true,
                detail: String::new(),
            },
            telemetry: Mutex::new(TelemetryBuffer::new(10)),
            fresh: Notify::new(),
        };
        match session(&agent, &mut Backoff::new(), &mut updates).await {
            Ended::Dropped(reason) => assert!(!reason.is_empty()),
            Ended::Refused(reason) => panic!("a network failure must be retried, got refusal: {reason}"),
            Ended::Shutdown => unreachable!(),
        }
        let enrolled = crate::enrollment::enroll(&state.server, "cpe_x", "t").await.unwrap_err();
        assert!(enrolled.contains("cannot reach"), "{enrolled}");
    }
}
