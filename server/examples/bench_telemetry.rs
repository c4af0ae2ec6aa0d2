//! Benchmark (not a test): telemetry ingest, agent→browser latency, memory per dashboard and the
//! agent's own footprint, on SQLite and PostgreSQL.
//!
//! ```sh
//! cargo build --release -p cardpool-agent --bin cardpool-agent && \
//! cargo run --release -p cardpool-server --example bench_telemetry            # both backends
//! cargo run --release -p cardpool-server --example bench_telemetry -- sqlite  # one
//! ```
//! 1. Ingest ceiling: `BENCH_AGENTS` (100) simulated agents with 8 GPUs each, connected over
//!    WebSocket, sample every `BENCH_SAMPLE_MS` (100 ms, ten times production) for
//!    `BENCH_SECONDS` (15), with `BENCH_DASHBOARDS` (20) admin fleet feeds (SSE) watching: GPU
//!    samples stored per second.
//! 2. The same agents at production pace (1 Hz), the same dashboards: latency p50/p99 from
//!    sampling on the agent to the event at a dashboard.
//! 3. Memory per dashboard: the server's resident memory before and after `BENCH_IDLE_DASHBOARDS`
//!    (200) more fleet feeds are opened at that load (by a second process, so that only the
//!    server's side is counted), divided by their number.
//!    Agents heartbeat every `BENCH_HEARTBEAT_SECS` (the server's default, 5); the server
//!    writes telemetry every `BENCH_FLUSH_MS` (its default, 2,000).
//! 4. The real `cardpool-agent` binary (target/release) at 1 Hz with 8 simulated GPUs for
//!    `BENCH_AGENT_SECONDS` (30): its CPU time and resident memory from /proc.
//!
//! The agents (the agent crate's own connection loop, one per host) run in a second process,
//! this benchmark started again with `--run-agents`, so the server's CPU time and the load
//! generator's are told apart (both are printed per measurement); they still share the machine.
//! The server's figure includes the dashboards' readers (they run in its process). With
//! `BENCH_LIGHT_AGENTS=1` that process runs light agents, which send the server the same
//! messages without the real agent's own work (see `start_light_agents`): for fleets of
//! thousands, where the real agents' start-up and sampling would use the machine up first.
#![allow(clippy::print_stdout)] // printing the figures is the point

use cardpool_agent::{
    connection, enrollment, gpu::simulated::SimulatedSource, runtime::WorkloadMode, state::AgentState,
};
use cardpool_domain::account::CreateApiTokenRequest;
use cardpool_server::{Config, http};
use cardpool_service::{
    Settings, api_tokens,
    entities::users,
    hosts,
    testing::{self, Backend},
};
use sea_orm::{ActiveValue::Set, EntityTrait};
use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Resident memory of process `pid` ("self" for this one), KiB.
fn rss_kib(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// User + system CPU time of process `pid`, seconds.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0 // USER_HZ
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Reads an SSE feed, recording (arrival − sample time) of every event while `recording`.
/// The readers run in the server's process, on its two cores: they take as little as they
/// can, so that what is measured is the server.
async fn watch(mut response: reqwest::Response, latencies: Arc<Mutex<Vec<(i64, i64)>>>, recording: Arc<AtomicBool>) {
    let mut text = String::new();
    let mut seen = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        // Not recording, the bytes are only taken off the socket (a browser reads on a machine
        // of its own). The first chunk recorded may begin inside an event: it does not start
        // with `data: ` and is skipped.
        if !recording.load(Ordering::Relaxed) {
            text.clear();
            continue;
        }
        // Every event of a chunk arrived when the chunk did.
        let arrived = now_ms();
        // The feed is JSON in ASCII; lossy only in case a chunk ever cuts a character.
        match std::str::from_utf8(&chunk) {
            Ok(read) => text.push_str(read),
            Err(_) => text.push_str(&String::from_utf8_lossy(&chunk)),
        }
        // Every whole event of the chunk, then what they took cut off once (cutting per event
        // would move the rest of a large chunk once per event, and the reader would lag).
        let mut start = 0;
        while let Some(end) = text[start..].find("\n\n") {
            let event = &text[start..start + end];
            start += end + 2;
            // The server writes an event as one `data: ` line, `at_ms` among its first fields.
            let Some(data) = event.strip_prefix("data: ") else { continue };
            let head = data.get(..96).unwrap_or(data);
            if let Some(at) =
                head.find("\"at_ms\":").and_then(|i| data[i + 8..].split([',', '}']).next()?.parse::<i64>().ok())
            {
                seen.push((arrived, arrived - at));
            }
        }
        text.drain(..start);
        if !seen.is_empty() {
            latencies.lock().unwrap_or_else(|p| p.into_inner()).append(&mut seen);
        }
    }
}

/// The p99 of each second's arrivals, in order: whether a tail is spread evenly (the server is
/// short of CPU) or comes in bursts (something stalls now and then) shows here.
fn by_second(arrivals: &[(i64, i64)]) -> String {
    let mut seconds: std::collections::BTreeMap<i64, Vec<i64>> = std::collections::BTreeMap::new();
    for &(arrived, latency) in arrivals {
        seconds.entry(arrived / 1000).or_default().push(latency);
    }
    let p99s: Vec<String> = seconds
        .into_values()
        .map(|mut latencies| {
            latencies.sort_unstable();
            percentile(&latencies, 0.99).to_string()
        })
        .collect();
    format!("p99 of each second's events, ms: {}", p99s.join(" "))
}

/// The agent process of measurements 1 and 2: runs one agent per host in `states_file` (JSON),
/// sampling every `sample_ms`, until killed. `BENCH_LIGHT_AGENTS=1` runs light agents instead.
async fn run_agents(states_file: &str, sample_ms: u64) {
    let states: Vec<AgentState> =
        serde_json::from_str(&std::fs::read_to_string(states_file).expect("agent states")).expect("agent states");
    let agents = if env("BENCH_LIGHT_AGENTS", 0) == 1 {
        start_light_agents(&states, sample_ms)
    } else {
        start_agents(&states, sample_ms)
    };
    for agent in agents {
        let _ = agent.await;
    }
}

/// Light agents: each sends what a real agent sends the server, as it sends it (hello, its
/// simulated GPUs' inventory, one telemetry frame of all 8 every `sample_ms`, a heartbeat every
/// interval the server asks for), and reads what the server sends, without the real agent's
/// sampler, workload supervisor, self-test and sandbox probe. At thousands of agents in one
/// process those cost more than the server does (each real agent probes its sandbox at start),
/// which measures the load generator, not the server.
fn start_light_agents(states: &[AgentState], sample_ms: u64) -> Vec<tokio::task::JoinHandle<()>> {
    spread(states, sample_ms, move |state, i| async move {
        if let Err(err) = light_agent(&state, i, sample_ms).await {
            eprintln!("light agent {i}: {err}");
        }
    })
}

async fn light_agent(state: &AgentState, index: usize, sample_ms: u64) -> Result<(), String> {
    use cardpool_agent::gpu::GpuSource;
    use cardpool_protocol::{AgentMessage, Inventory, PROTOCOL_VERSION, ServerMessage, TelemetryFrame};
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};
    let source = SimulatedSource::new("8xH100-80GB", &format!("bench-{index:03}"), vec![])?;
    let mut request = connection::gateway_url(&state.server)?.into_client_request().map_err(|e| e.to_string())?;
    let bearer = format!("Bearer {}", state.credential).parse().map_err(|_| "credential")?;
    request.headers_mut().insert("authorization", bearer);
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default().read_buffer_size(16 * 1024);
    let (socket, _) =
        tokio_tungstenite::connect_async_with_config(request, Some(config), true).await.map_err(|e| e.to_string())?;
    let (mut tx, mut rx) = socket.split();
    let text = |message: &AgentMessage| Message::Text(serde_json::to_string(message).expect("encodes").into());
    let hello =
        AgentMessage::Hello { protocol: PROTOCOL_VERSION, agent_version: "bench".into(), host_id: state.host_id };
    tx.send(text(&hello)).await.map_err(|e| e.to_string())?;
    let heartbeat_secs = match rx.next().await {
        Some(Ok(Message::Text(answer))) => match serde_json::from_str::<ServerMessage>(&answer) {
            Ok(ServerMessage::Welcome { heartbeat_interval_secs, .. }) => heartbeat_interval_secs.max(1),
            other => return Err(format!("answer to hello: {other:?}")),
        },
        other => return Err(format!("answer to hello: {other:?}")),
    };
    let inventory = Inventory {
        protocol: PROTOCOL_VERSION,
        host: cardpool_agent::host::host_facts(None),
        gpus: source.gpus().map_err(|e| e.to_string())?,
    };
    tx.send(text(&AgentMessage::Inventory(inventory))).await.map_err(|e| e.to_string())?;
    let stream = now_ms() as u64;
    let (mut sequence, mut beats) = (0u64, 0u64);
    let mut sample = tokio::time::interval(Duration::from_millis(sample_ms));
    let mut heartbeat = tokio::time::interval(Duration::from_secs(heartbeat_secs));
    loop {
        let message = tokio::select! {
            _ = sample.tick() => {
                sequence += 1;
                let frame = TelemetryFrame { sequence, at_ms: now_ms(), gpus: source.sample(&[]).map_err(|e| e.to_string())? };
                AgentMessage::Telemetry { stream, frames: vec![frame], dropped: 0 }
            }
            _ = heartbeat.tick() => {
                beats += 1;
                AgentMessage::Heartbeat { sequence: beats, rentals: Vec::new() }
            }
            read = rx.next() => match read {
                Some(Ok(_)) => continue, // acknowledgements; nothing to replay here
                _ => return Err("the server closed the connection".into()),
            },
        };
        tx.send(text(&message)).await.map_err(|e| e.to_string())?;
    }
}

/// The agents in a process of their own (this benchmark again, with `--run-agents`).
struct AgentProcess(std::process::Child);

impl AgentProcess {
    fn start(states_file: &std::path::Path, sample_ms: u64) -> AgentProcess {
        let child = std::process::Command::new(std::env::current_exe().expect("this benchmark"))
            .arg("--run-agents")
            .arg(states_file)
            .arg(sample_ms.to_string())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("agent process");
        AgentProcess(child)
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CPU time the server (this process) and the agents' process used while `measure` ran.
struct CpuShare {
    server: f64,
    agents: f64,
    started: Instant,
    agents_pid: u32,
}

impl CpuShare {
    fn start(agents: &AgentProcess) -> CpuShare {
        let agents_pid = agents.0.id();
        CpuShare {
            server: cpu_secs(std::process::id()),
            agents: cpu_secs(agents_pid),
            started: Instant::now(),
            agents_pid,
        }
    }
    /// Each process's share of one core since `start`.
    fn report(&self) -> String {
        let wall = self.started.elapsed().as_secs_f64();
        format!(
            "CPU: server {:.0} % of one core, agents' process {:.0} % (2 cores in all)",
            (cpu_secs(std::process::id()) - self.server) / wall * 100.0,
            (cpu_secs(self.agents_pid) - self.agents) / wall * 100.0
        )
    }
}

/// Runs one agent per enrolled host, sampling every `sample_ms`.
fn start_agents(states: &[AgentState], sample_ms: u64) -> Vec<tokio::task::JoinHandle<()>> {
    spread(states, sample_ms, move |state, i| async move {
        let source = SimulatedSource::new("8xH100-80GB", &format!("bench-{i:03}"), vec![]).expect("source");
        let dir = std::env::temp_dir().join(format!("cardpool-bench-telemetry-{}-{i}", std::process::id()));
        let _ =
            connection::run(&state, &source, None, dir, WorkloadMode::Simulate, Duration::from_millis(sample_ms)).await;
    })
}

/// Starts `agent` for every host, their starts spread over one interval, as a real fleet's
/// are: agents started in the same millisecond would sample in lockstep and arrive as one
/// burst every interval, which measures the burst, not the feed.
fn spread<F, Fut>(states: &[AgentState], sample_ms: u64, agent: F) -> Vec<tokio::task::JoinHandle<()>>
where
    F: Fn(AgentState, usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let count = states.len().max(1) as u64;
    states
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, state)| {
            let run = agent(state, i);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(i as u64 * sample_ms / count)).await;
                run.await;
            })
        })
        .collect()
}

/// Waits until every one of `agents` hosts has a frame sampled after `since_ms` stored: the
/// agents started (each probes its sandbox once, which costs far more than sampling) and are
/// streaming, so what is measured next is the steady state.
async fn wait_until_streaming(hub: &cardpool_service::telemetry::Hub, agents: usize, since_ms: i64) {
    wait_for_frames(hub, agents, "agents streaming", || since_ms).await;
}

/// Waits until the server has every agent's frame of the last two seconds: what queued while
/// thousands of agents reconnected at once has drained, and what follows is the steady state.
async fn wait_until_current(hub: &cardpool_service::telemetry::Hub, agents: usize) {
    wait_for_frames(hub, agents, "agents current (what queued while they reconnected drained)", || now_ms() - 2000)
        .await;
}

/// Waits until every one of `agents` hosts' newest frame at the server was sampled at
/// `since()` or later, and says how long that took.
async fn wait_for_frames(hub: &cardpool_service::telemetry::Hub, agents: usize, what: &str, since: impl Fn() -> i64) {
    let started = Instant::now();
    loop {
        let since_ms = since();
        let fresh = hub.latest().values().filter(|f| f.at_ms >= since_ms).count();
        if fresh >= agents {
            println!("  all {agents} {what} after {:.1} s", started.elapsed().as_secs_f64());
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(300), "only {fresh} of {agents} {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Returns just after the next flush commits.
async fn next_commit(hub: &cardpool_service::telemetry::Hub) {
    let commits = hub.commits.load(Ordering::Relaxed);
    while hub.commits.load(Ordering::Relaxed) == commits {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The reader process of measurement 3: opens `count` feeds of `url`, says how many opened,
/// and reads them until killed.
async fn read_feeds(count: usize, url: &str, token: &str) {
    let client = reqwest::Client::new();
    let mut held = Vec::new();
    for _ in 0..count {
        let feed = client.get(url).bearer_auth(token).send().await.expect("feed");
        assert!(feed.status().is_success(), "feed refused: {}", feed.status());
        held.push(tokio::spawn(watch(feed, Arc::default(), Arc::new(AtomicBool::new(false)))));
    }
    println!("{}", held.len());
    std::future::pending::<()>().await;
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, count, url, token] = args.as_slice()
        && flag == "--read-feeds"
    {
        return read_feeds(count.parse().expect("a count"), url, token).await;
    }
    if let [_, flag, states_file, sample_ms] = args.as_slice()
        && flag == "--run-agents"
    {
        return run_agents(states_file, sample_ms.parse().expect("a sample interval")).await;
    }
    let agents = env("BENCH_AGENTS", 100) as usize;
    let sample_ms = env("BENCH_SAMPLE_MS", 100);
    let dashboards = env("BENCH_DASHBOARDS", 20) as usize;
    let idle_dashboards = env("BENCH_IDLE_DASHBOARDS", 200) as usize;
    let seconds = env("BENCH_SECONDS", 15);
    let agent_seconds = env("BENCH_AGENT_SECONDS", 30);
    let wanted = std::env::args().nth(1);
    let kind = if env("BENCH_LIGHT_AGENTS", 0) == 1 { "light agents" } else { "agents" };
    println!(
        "telemetry benchmark: {agents} {kind} × 8 simulated GPUs (in a process of their own), {seconds} s per measurement"
    );
    for (backend, name) in [(Backend::Sqlite, "sqlite"), (Backend::Postgres, "postgres")] {
        if wanted.as_deref().is_some_and(|w| w != name) {
            continue;
        }
        // One admin watches from every dashboard: past the default 16 feeds per account.
        let mut settings = Settings::default();
        settings.telemetry.feeds_per_account = dashboards + idle_dashboards;
        if let Some(ms) = std::env::var("BENCH_FLUSH_MS").ok().and_then(|v| v.parse().ok()) {
            settings.telemetry.flush_interval = Duration::from_millis(ms);
        }
        let (_db, services) = testing::services(backend, settings).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let heartbeat_interval_secs = env("BENCH_HEARTBEAT_SECS", Config::default().heartbeat_interval_secs);
        let config = Config { addr, heartbeat_interval_secs, ..Config::default() };
        let app =
            http::router(services.clone(), http::leptos_options(&config), http::HttpOptions::from_config(&config));
        tokio::spawn(cardpool_server::serve::serve(listener, app, config.max_connections, std::future::pending()));
        let base = format!("http://{addr}");

        // An admin with an API token watches the fleet.
        let admin = testing::renter(&services, "admin@bench.example").await;
        users::Entity::update(users::ActiveModel { id: Set(admin.user_id), is_admin: Set(true), ..Default::default() })
            .exec(&services.db)
            .await
            .expect("admin");
        let token = api_tokens::create_api_token(&services, &admin, &CreateApiTokenRequest { name: "bench".into() })
            .await
            .expect("token")
            .secret;
        let provider = testing::provider(&services, "provider@bench.example").await;

        // The agents: enrolled over HTTP once, then run at two paces from the same hosts.
        let enrolling = Instant::now();
        let mut states = Vec::new();
        for i in 0..agents {
            let created =
                hosts::create_enrollment_token(&services, &provider, None, &base).await.expect("enrollment token");
            states.push(enrollment::enroll(&base, &created.token, &format!("bench-{i:03}")).await.expect("enroll"));
        }
        println!("\n[{name}] {agents} agents enrolled in {:.1} s", enrolling.elapsed().as_secs_f64());
        let states_file =
            std::env::temp_dir().join(format!("cardpool-bench-agents-{}-{name}.json", std::process::id()));
        std::fs::write(&states_file, serde_json::to_string(&states).expect("states")).expect("writing agent states");
        let hub = services.telemetry.clone();
        let stored = || hub.samples_stored.load(Ordering::Relaxed);

        // The fleet dashboards watch from here on (the ceiling is measured with them connected).
        let client = reqwest::Client::new();
        let latencies: Arc<Mutex<Vec<(i64, i64)>>> = Arc::default();
        let recording = Arc::new(AtomicBool::new(false));
        let open_fleet_feed = async || {
            let feed = client
                .get(format!("{base}/api/v1/telemetry/live?scope=fleet"))
                .bearer_auth(&token)
                .send()
                .await
                .expect("feed");
            assert!(feed.status().is_success(), "feed refused: {}", feed.status());
            feed
        };
        for _ in 0..dashboards {
            tokio::spawn(watch(open_fleet_feed().await, latencies.clone(), recording.clone()));
        }

        // 1. The ceiling: every agent sampling `sample_ms`, faster than production.
        let fleet = AgentProcess::start(&states_file, sample_ms);
        wait_until_streaming(&hub, agents, now_ms()).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let commits = || hub.commits.load(Ordering::Relaxed);
        let frames = || hub.frames_stored.load(Ordering::Relaxed);
        // Measured from one commit to another: a flush stores seconds of samples at once, so a
        // window cut anywhere else would count one flush more or less by chance.
        next_commit(&hub).await;
        let (samples0, commits0, frames0, started) = (stored(), commits(), frames(), Instant::now());
        let cpu = CpuShare::start(&fleet);
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        next_commit(&hub).await;
        println!("  {}", cpu.report());
        let ceiling = (stored() - samples0) as f64 / started.elapsed().as_secs_f64();
        let transactions = commits() - commits0;
        println!(
            "ingest ceiling: {ceiling:.0} GPU samples/s stored ({:.0} offered by {agents} agents × 8 GPUs every {sample_ms} ms); {} replayed duplicates ignored; {transactions} transactions, {:.1} frames each",
            agents as f64 * 8.0 * 1000.0 / sample_ms as f64,
            hub.frames_duplicate.load(Ordering::Relaxed),
            (frames() - frames0) as f64 / transactions.max(1) as f64
        );
        drop(fleet);

        // 2. Production pace (1 Hz) with fleet dashboards watching: latency from sampling on the
        // agent to the event at a dashboard.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let swapped = now_ms();
        let fleet = AgentProcess::start(&states_file, 1000);
        // What piled up while the agents were swapped (and reconnected) has to drain first.
        wait_until_streaming(&hub, agents, swapped).await;
        wait_until_current(&hub, agents).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (samples0, started) = (stored(), Instant::now());
        let cpu = CpuShare::start(&fleet);
        recording.store(true, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        recording.store(false, Ordering::Relaxed);
        println!("  {}", cpu.report());
        let rate = (stored() - samples0) as f64 / started.elapsed().as_secs_f64();
        let arrivals = std::mem::take(&mut *latencies.lock().unwrap_or_else(|p| p.into_inner()));
        let mut lat: Vec<i64> = arrivals.iter().map(|&(_, latency)| latency).collect();
        lat.sort_unstable();
        println!(
            "at 1 Hz: {rate:.0} GPU samples/s stored; agent→dashboard latency over {} events ({dashboards} fleet dashboards): p50 {} ms, p99 {} ms, max {} ms",
            lat.len(),
            percentile(&lat, 0.50),
            percentile(&lat, 0.99),
            lat.last().copied().unwrap_or(0)
        );
        println!("  {}", by_second(&arrivals));
        // Most of it is the hosts' recent samples (first paints), which grow to five minutes' worth.
        println!("  server resident memory: {} MiB", rss_kib("self") / 1024);

        // 3. Memory per dashboard: open many more feeds at that load from another process (this
        // benchmark run again as a reader), compare the server's resident memory.
        let before = rss_kib("self");
        let mut readers = std::process::Command::new(std::env::current_exe().expect("this benchmark"))
            .args([
                "--read-feeds",
                &idle_dashboards.to_string(),
                &format!("{base}/api/v1/telemetry/live?scope=fleet"),
                &token,
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("feed readers");
        let mut opened = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(readers.stdout.as_mut().expect("readers' output")),
            &mut opened,
        )
        .expect("readers opened");
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after = rss_kib("self");
        println!(
            "memory: {} more fleet dashboards (read by another process) added {} KiB to the server's resident memory: {:.1} KiB per dashboard",
            opened.trim(),
            after.saturating_sub(before),
            after.saturating_sub(before) as f64 / idle_dashboards as f64
        );
        let _ = readers.kill();
        let _ = readers.wait();
        drop(fleet);
        let _ = std::fs::remove_file(&states_file);

        // The real agent binary at production pace.
        let binary = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release/cardpool-agent");
        if !std::path::Path::new(binary).exists() {
            println!("agent: {binary} not built; run `cargo build --release -p cardpool-agent` first");
            continue;
        }
        let created = hosts::create_enrollment_token(&services, &provider, None, &base).await.expect("token");
        let dir = std::env::temp_dir().join(format!("cardpool-bench-agent-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let enrolled = std::process::Command::new(binary)
            .args(["enroll", "--server", &base, "--token", &created.token, "--state-dir"])
            .arg(&dir)
            .output()
            .expect("enroll");
        assert!(enrolled.status.success(), "{}", String::from_utf8_lossy(&enrolled.stderr));
        let mut child = std::process::Command::new(binary)
            .args(["run", "--simulate", "8xH100-80GB", "--state-dir"])
            .arg(&dir)
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("agent");
        let pid = child.id();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let cpu0 = cpu_secs(pid);
        let t0 = Instant::now();
        let mut peak = 0;
        while t0.elapsed() < Duration::from_secs(agent_seconds) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            peak = peak.max(rss_kib(&pid.to_string()));
        }
        let cpu = cpu_secs(pid) - cpu0;
        let rss = rss_kib(&pid.to_string());
        let _ = child.kill();
        let _ = child.wait();
        println!(
            "agent (1 Hz, 8 simulated GPUs, {agent_seconds} s): CPU {:.2} % of one core, resident memory {:.1} MiB (peak {:.1} MiB)",
            cpu / t0.elapsed().as_secs_f64() * 100.0,
            rss as f64 / 1024.0,
            peak as f64 / 1024.0
        );
    }
    std::process::exit(0);
}
