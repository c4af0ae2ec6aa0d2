//! Telemetry end to end, on SQLite and PostgreSQL: a real agent sampling fast (so seconds
//! stand for minutes) loses its connection for the equivalent of two minutes and every frame
//! is still stored exactly once; the live feed over HTTP shows a renter only their GPUs;
//! `/metrics` speaks dcgm-exporter and wants its token.

use crate::common::{TestApp, agent_dir, eventually};
use cardpool_agent::{connection, enrollment, gpu::simulated::SimulatedSource, runtime::WorkloadMode};
use cardpool_server::{Config, workers};
use cardpool_service::{
    Settings, accounts, backend_tests,
    entities::{gpu_rollups, telemetry_cursors},
    hosts,
    testing::Backend,
};
use reqwest::{Client, StatusCode};
use sea_orm::EntityTrait;
use serde_json::{Value, json};
use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};
use tokio::{net::TcpListener, sync::Mutex, task::JoinHandle};

/// A TCP relay between the agent and the server that the test can cut and restore.
struct Relay {
    port: u16,
    open: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Relay {
    async fn start(target: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = Arc::new(AtomicBool::new(true));
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (accepting, registry) = (open.clone(), links.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !accepting.load(Ordering::SeqCst) {
                    continue; // dropped: the agent sees a refused handshake
                }
                let target = target.clone();
                registry.lock().await.push(tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                }));
            }
        });
        Relay { port, open, links }
    }

    async fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for link in self.links.lock().await.drain(..) {
            link.abort();
        }
    }

    fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

/// A simulated agent of `shape` for the enrolled host `state`, one telemetry frame per `frame`.
fn spawn_agent(
    state: cardpool_agent::state::AgentState,
    shape: &'static str,
    dir: &'static str,
    frame: Duration,
) -> JoinHandle<Result<(), String>> {
    tokio::spawn(async move {
        let source = SimulatedSource::new(shape, "rig", vec![]).unwrap();
        connection::run(&state, &source, None, agent_dir(dir), WorkloadMode::Simulate, frame).await
    })
}

async fn provider_with_host(app: &TestApp, server: &str, name: &str) -> (Client, cardpool_agent::state::AgentState) {
    let provider = app.provider(&format!("{name}@example.com")).await;
    let token = app.enrollment_token(&provider, "Lab").await;
    let mut state = enrollment::enroll(&app.base, &token, name).await.unwrap();
    state.server = server.to_owned();
    (provider, state)
}

async fn cursor(app: &TestApp, host: i64) -> Option<telemetry_cursors::Model> {
    telemetry_cursors::Entity::find_by_id(host).one(&app.services.db).await.unwrap()
}

backend_tests!(
    two_minutes_disconnected_then_every_frame_is_stored_once,
    the_live_feed_shows_a_renter_only_their_gpus_and_metrics_need_the_token,
    live_feeds_are_capped_per_account_and_overall,
    a_stop_closes_agent_sockets_and_live_feeds_at_once,
);

/// When the server begins to stop, the agent's socket and a live feed (connections that never
/// end on their own) are closed at once, so the drain does not wait them out and their clients
/// reconnect to a server that is up.
async fn a_stop_closes_agent_sockets_and_live_feeds_at_once(backend: Backend) {
    let mut app = TestApp::spawn_with_agents(backend).await;
    let (provider, state) = provider_with_host(&app, &app.base, "rig").await;
    let host = state.host_id;
    let agent = spawn_agent(state, "2xH100-80GB", "stop", Duration::from_millis(200));
    let mut feed = provider.get(app.url(&format!("/api/v1/telemetry/live?scope=host&id={host}"))).send().await.unwrap();
    assert_eq!(feed.status(), StatusCode::OK);
    let mut seen = String::new();
    tokio::time::timeout(Duration::from_secs(15), async {
        while !seen.contains("data: ") {
            seen.push_str(&String::from_utf8_lossy(&feed.chunk().await.unwrap().unwrap()));
        }
    })
    .await
    .expect("the agent's samples reach the feed");
    let connections = app.services.connections.clone();
    let connected = || connections.with(host, |_, _| ()).is_some();
    assert!(connected(), "the agent's socket is open");

    let stopping = std::time::Instant::now();
    app.services.stopping.begin();
    tokio::time::timeout(Duration::from_secs(5), async { while feed.chunk().await.unwrap().is_some() {} })
        .await
        .expect("the live feed ends");
    tokio::time::timeout(Duration::from_secs(5), &mut app.serving)
        .await
        .expect("the server stops without waiting out its drain")
        .unwrap();
    assert!(stopping.elapsed() < Duration::from_secs(5), "{:?}", stopping.elapsed());
    eventually(Duration::from_secs(5), "the agent's socket closed", async || (!connected()).then_some(())).await;
    agent.abort();
}

async fn live_feeds_are_capped_per_account_and_overall(backend: Backend) {
    let mut settings = Settings::default();
    settings.telemetry.feeds_per_account = 2;
    settings.telemetry.feeds = 3;
    let app = TestApp::spawn_with(backend, settings).await;
    let (provider, state) = provider_with_host(&app, &app.base, "rig").await;
    let url = app.url(&format!("/api/v1/telemetry/live?scope=host&id={}", state.host_id));
    let open = |client: &Client| {
        let (client, url) = (client.clone(), url.clone());
        async move { client.get(url).send().await.unwrap() }
    };
    let first = open(&provider).await;
    let second = open(&provider).await;
    assert_eq!((first.status(), second.status()), (StatusCode::OK, StatusCode::OK));
    let third = open(&provider).await;
    assert_eq!(third.status(), StatusCode::CONFLICT);
    let body: Value = third.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("2 live feeds open"), "{body}");
    // Closing one frees its slot (the server notices the client went when it next writes).
    drop(first);
    let again = eventually(Duration::from_secs(40), "the closed feed's slot freed", async || {
        let again = open(&provider).await;
        (again.status() == StatusCode::OK).then_some(again)
    })
    .await;
    // Another provider gets one; the server's third slot is then the last.
    let (other, other_state) = provider_with_host(&app, &app.base, "other").await;
    let other_url = app.url(&format!("/api/v1/telemetry/live?scope=host&id={}", other_state.host_id));
    let theirs = other.get(&other_url).send().await.unwrap();
    assert_eq!(theirs.status(), StatusCode::OK);
    let full = other.get(&other_url).send().await.unwrap();
    assert_eq!(full.status(), StatusCode::SERVICE_UNAVAILABLE);
    drop((second, again, theirs));
}

async fn two_minutes_disconnected_then_every_frame_is_stored_once(backend: Backend) {
    let config = Config { heartbeat_interval_secs: 1, host_offline_grace_secs: 2, ..Config::default() };
    let mut settings = Settings::default();
    settings.telemetry.flush_interval = Duration::from_millis(200);
    let app = TestApp::spawn_configured(backend, settings, config).await;
    workers::spawn(&app.services, Duration::from_secs(2), Duration::ZERO, Duration::from_secs(1));
    let relay = Relay::start(app.base.trim_start_matches("http://").to_owned()).await;
    let (_provider, state) = provider_with_host(&app, &format!("http://127.0.0.1:{}", relay.port), "rig").await;
    let host = state.host_id;
    // 20 ms a frame: 120 frames (two minutes at 1 Hz) pass in 2.4 s.
    let agent = spawn_agent(state, "8xH100-80GB", "telemetry", Duration::from_millis(20));
    let before = eventually(Duration::from_secs(10), "telemetry arriving", async || {
        cursor(&app, host).await.filter(|c| c.frames >= 20)
    })
    .await;

    relay.cut().await;
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let during = cursor(&app, host).await.unwrap();
    relay.restore();
    let owner = accounts::principal_for_email(&app.services, "rig@example.com").await.unwrap();
    let offline = hosts::get_host(&app.services, &owner, host).await.unwrap().host.status;
    assert_eq!(offline.as_str(), "offline", "the outage was real");

    // Reconnected: the replay catches up well past what was sampled during the outage.
    let after = eventually(Duration::from_secs(20), "the replay", async || {
        cursor(&app, host).await.filter(|c| c.sequence >= during.sequence + 200)
    })
    .await;
    agent.abort();
    // What was accepted before the abort is written by the next flush (200 ms).
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let last = cursor(&app, host).await.unwrap();
    assert!(during.sequence - before.sequence < 200, "little was stored while cut off");
    assert_eq!(last.dropped, 0, "the buffer held the outage");
    assert_eq!(last.stream, after.stream, "one agent process");
    assert_eq!(last.frames, last.sequence, "frames 1..=n all stored, none twice: {last:?}");
    let rollups = gpu_rollups::Entity::find().all(&app.services.db).await.unwrap();
    for gpu in 0..8 {
        let samples: i64 =
            rollups.iter().filter(|r| r.host_id == host && r.gpu_index == gpu).map(|r| i64::from(r.samples)).sum();
        assert_eq!(samples, last.sequence, "GPU {gpu}: every frame once");
    }
    let duplicates = app.services.telemetry.frames_duplicate.load(Ordering::Relaxed);
    eprintln!("stored {} frames; {duplicates} replayed duplicates ignored", last.frames);
}

/// Reads the SSE stream until `count` data events arrive or the stream ends.
async fn events(response: reqwest::Response, count: usize) -> Vec<Value> {
    events_until(response, |seen| seen.len() >= count).await
}

/// Reads Server-Sent Events until `enough` says so (or the feed ends).
async fn events_until(mut response: reqwest::Response, enough: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut text = String::new();
    let mut out = Vec::new();
    while !enough(&out) {
        let Some(chunk) =
            tokio::time::timeout(Duration::from_secs(10), response.chunk()).await.expect("an event").unwrap()
        else {
            break;
        };
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = text.find("\n\n") {
            let event: String = text.drain(..end + 2).collect();
            for line in event.lines() {
                if let Some(data) = line.strip_prefix("data: ") {
                    out.push(serde_json::from_str(data).unwrap());
                }
            }
        }
    }
    out
}

async fn the_live_feed_shows_a_renter_only_their_gpus_and_metrics_need_the_token(backend: Backend) {
    let config = Config {
        heartbeat_interval_secs: 1,
        host_offline_grace_secs: 5,
        metrics_token: Some(cardpool_server::config::Secret::new("scrape-me")),
        ..Config::default()
    };
    let app = TestApp::spawn_configured(backend, Settings::default(), config).await;
    workers::spawn(&app.services, Duration::from_secs(5), Duration::ZERO, Duration::from_secs(1));
    let (provider, state) = provider_with_host(&app, &app.base, "rig").await;
    let host = state.host_id;
    let agent = spawn_agent(state, "4xH100-80GB", "telemetry-feed", Duration::from_millis(200));
    let owner = accounts::principal_for_email(&app.services, "rig@example.com").await.unwrap();
    eventually(Duration::from_secs(10), "inventory", async || {
        (hosts::get_host(&app.services, &owner, host).await.unwrap().gpus.len() == 4).then_some(())
    })
    .await;
    let price = cardpool_domain::host::GpuModelPrice {
        gpu_model: "NVIDIA H100 80GB HBM3".into(),
        on_demand_micros: 3_600_000,
        reserved_micros: 3_000_000,
        spot_min_bid_micros: 1_000_000,
    };
    hosts::update_host_pricing(&app.services, &owner, host, &price).await.unwrap();
    hosts::set_host_listed(&app.services, &owner, host, true).await.unwrap();

    let renter = app.funded_renter("renter@example.com", 50).await;
    let res = renter
        .post(app.url("/api/v1/rentals"))
        .json(&json!({"host_id": host, "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_count": 2, "workload": {"command": "sleep 60"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let rental: Value = res.json().await.unwrap();
    let id = rental["id"].as_i64().unwrap();
    let mine: Vec<u64> = rental["gpu_indexes"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    let running = app.wait_for_rental_state(&renter, id, "running", Duration::from_secs(10)).await;
    let running_since = running["rental"]["running_since"].as_str().unwrap();
    let running_since = chrono::DateTime::parse_from_rfc3339(running_since).unwrap().timestamp_millis();

    let feed = renter.get(app.url(&format!("/api/v1/telemetry/live?scope=rental&id={id}"))).send().await.unwrap();
    assert_eq!(feed.status(), StatusCode::OK);
    assert_eq!(feed.headers()["content-type"], "text/event-stream");
    // Samples come in as the host's agent sends them, which under load may be a little behind:
    // the first ones can predate the workload. Three taken while it ran are enough.
    let since_running = |event: &Value| event["at_ms"].as_i64().unwrap() >= running_since;
    let seen = events_until(feed, |seen| seen.iter().filter(|e| since_running(e)).count() >= 3).await;
    for event in &seen {
        assert_eq!(event["type"], "sample");
        let indexes: Vec<u64> =
            event["gpus"].as_array().unwrap().iter().map(|g| g["index"].as_u64().unwrap()).collect();
        assert_eq!(indexes, mine, "only the rental's GPUs: {event}");
    }
    for event in seen.iter().filter(|e| since_running(e)) {
        // The rented GPUs are busy in the simulator while the workload runs.
        assert!(event["gpus"][0]["util_pct"].as_f64().unwrap() > 50.0, "{event}");
    }
    let whole_host =
        provider.get(app.url(&format!("/api/v1/telemetry/live?scope=host&id={host}"))).send().await.unwrap();
    let event = &events(whole_host, 1).await[0];
    assert_eq!(event["gpus"].as_array().unwrap().len(), 4, "the provider sees the whole host");

    // Everyone else: not found, forbidden, or not signed in.
    let stranger = app.browser();
    app.sign_up(&stranger, "stranger@example.com").await;
    for (client, url, status) in [
        (&stranger, format!("/api/v1/telemetry/live?scope=rental&id={id}"), StatusCode::NOT_FOUND),
        (&renter, format!("/api/v1/telemetry/live?scope=host&id={host}"), StatusCode::NOT_FOUND),
        (&renter, "/api/v1/telemetry/live?scope=fleet".to_owned(), StatusCode::FORBIDDEN),
        (&app.browser(), format!("/api/v1/telemetry/live?scope=rental&id={id}"), StatusCode::UNAUTHORIZED),
        (&renter, "/api/v1/telemetry/live?scope=everything".to_owned(), StatusCode::UNPROCESSABLE_ENTITY),
    ] {
        assert_eq!(client.get(app.url(&url)).send().await.unwrap().status(), status, "{url}");
    }
    let history: Value = app.get_json(&renter, &format!("/api/v1/telemetry?scope=rental&id={id}")).await;
    assert!(history["live"].as_bool().unwrap());
    assert!(!history["samples"].as_array().unwrap().is_empty());

    // /metrics: no token, wrong token, then the dcgm-exporter names and labels.
    let plain = Client::new();
    assert_eq!(plain.get(app.url("/metrics")).send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
    let wrong = plain.get(app.url("/metrics")).bearer_auth("nope").send().await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let metrics = plain.get(app.url("/metrics")).bearer_auth("scrape-me").send().await.unwrap().text().await.unwrap();
    let util_lines: Vec<&str> = metrics.lines().filter(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL{")).collect();
    assert_eq!(util_lines.len(), 4, "{metrics}");
    assert!(util_lines[0].contains("gpu=\"0\"") && util_lines[0].contains("UUID=\"GPU-"), "{metrics}");
    assert!(
        util_lines[0].contains("modelName=\"NVIDIA H100 80GB HBM3\"") && util_lines[0].contains("Hostname=\"rig\"")
    );
    assert!(util_lines[0].contains("pci_bus_id=\"00000000:18:00.0\""), "{}", util_lines[0]);
    for name in [
        "DCGM_FI_DEV_FB_USED{",
        "DCGM_FI_DEV_GPU_TEMP{",
        "DCGM_FI_DEV_POWER_USAGE{",
        "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{",
        "DCGM_FI_DEV_XID_ERRORS{",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{",
        "cardpool_agents_connected 1",
        "cardpool_telemetry_commits_total ",
    ] {
        assert!(metrics.contains(name), "{name} missing: {metrics}");
    }
    assert!(metrics.contains("cardpool_rentals{kind=\"on_demand\",state=\"running\"} 1"), "{metrics}");

    // The rental ends: its feed closes with an `end` event, and a new feed is refused.
    let feed = renter.get(app.url(&format!("/api/v1/telemetry/live?scope=rental&id={id}"))).send().await.unwrap();
    renter.post(app.url(&format!("/api/v1/rentals/{id}/stop"))).send().await.unwrap();
    app.wait_for_rental_state(&renter, id, "ended", Duration::from_secs(10)).await;
    let mut ended = false;
    for event in events(feed, 1000).await {
        if event["type"] == "end" {
            ended = true;
            break;
        }
    }
    assert!(ended, "the feed ends within its re-check");
    let refused = renter.get(app.url(&format!("/api/v1/telemetry/live?scope=rental&id={id}"))).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::CONFLICT);

    // A feed lasts only as long as what it signed in with: signing out ends a session's feed,
    // revoking a token ends the token's.
    let res = provider.post(app.url("/api/v1/tokens")).json(&json!({"name": "grafana"})).send().await.unwrap();
    let created: Value = res.json().await.unwrap();
    let (secret, token_id) = (created["secret"].as_str().unwrap(), created["token"]["id"].as_i64().unwrap());
    let live = format!("/api/v1/telemetry/live?scope=host&id={host}");
    let by_session = provider.get(app.url(&live)).send().await.unwrap();
    let by_token = Client::new().get(app.url(&live)).bearer_auth(secret).send().await.unwrap();
    assert_eq!((by_session.status(), by_token.status()), (StatusCode::OK, StatusCode::OK));
    let revoked = provider.delete(app.url(&format!("/api/v1/tokens/{token_id}"))).send().await.unwrap();
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    let signed_out = provider.post(app.url("/api/v1/auth/sign-out")).send().await.unwrap();
    assert_eq!(signed_out.status(), StatusCode::NO_CONTENT);
    for feed in [by_session, by_token] {
        let last = events(feed, 1000).await.pop().unwrap();
        assert_eq!(last["type"], "end", "{last}");
        assert!(last["reason"].as_str().unwrap().contains("signed out"), "{last}");
    }
    agent.abort();
}
