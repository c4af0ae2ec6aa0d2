//! The agent and the server over a real WebSocket, on SQLite and PostgreSQL: enrollment,
//! inventory, heartbeats and liveness, reconnects, revocation, and refusals.

use crate::common::{TestApp, agent_dir, eventually};
use cardpool_agent::{
    connection, enrollment, gpu::simulated::SimulatedSource, runtime::WorkloadMode, state::AgentState,
};
use cardpool_protocol::{AgentMessage, PROTOCOL_VERSION, ProtocolVersion, ServerMessage};
use cardpool_service::{backend_tests, testing::Backend};
use futures_util::{SinkExt, StreamExt};
use reqwest::{Client, StatusCode};
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};

async fn host(app: &TestApp, client: &Client, id: i64) -> Value {
    app.get_json(client, &format!("/api/v1/hosts/{id}")).await
}

/// Polls the host until `check` holds, failing after `within`.
async fn wait_for(
    app: &TestApp,
    client: &Client,
    id: i64,
    within: Duration,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    eventually(within, what, async || Some(host(app, client, id).await).filter(&check)).await
}

fn spawn_agent(state: AgentState, spec: &'static str) -> tokio::task::JoinHandle<Result<(), String>> {
    tokio::spawn(async move {
        let source = SimulatedSource::new(spec, "test-host", vec![]).unwrap();
        let dir = agent_dir("rentals");
        connection::run(&state, &source, Some("Lab 1".into()), dir, WorkloadMode::Simulate, Duration::from_secs(1))
            .await
    })
}

/// A bare protocol client, for behaving in ways the real agent never would.
async fn raw_connect(
    app: &TestApp,
    credential: &str,
) -> Result<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    tokio_tungstenite::tungstenite::Error,
> {
    let mut request = app.url("/agent/v1/connect").replace("http://", "ws://").into_client_request().unwrap();
    request.headers_mut().insert("authorization", format!("Bearer {credential}").parse().unwrap());
    tokio_tungstenite::connect_async(request).await.map(|(socket, _)| socket)
}

async fn say_hello(
    socket: &mut tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    protocol: ProtocolVersion,
    host_id: i64,
) -> ServerMessage {
    let hello = AgentMessage::Hello { protocol, agent_version: "test".into(), host_id };
    socket.send(Message::Text(serde_json::to_string(&hello).unwrap().into())).await.unwrap();
    loop {
        match socket.next().await.unwrap().unwrap() {
            Message::Text(text) => return serde_json::from_str(&text).unwrap(),
            _ => continue,
        }
    }
}

backend_tests!(
    enroll_run_inventory_offline_and_reconnect,
    a_silent_agent_goes_offline_within_the_grace,
    a_revoked_host_is_disconnected_and_cannot_return,
    wrong_host_bad_protocol_and_bad_credentials_are_refused,
    a_misbehaving_agent_is_answered_bounded_and_replaced,
);

async fn enroll_run_inventory_offline_and_reconnect(backend: Backend) {
    let app = TestApp::spawn_with_agents(backend).await;
    let client = app.provider("provider@example.com").await;
    let token = app.enrollment_token(&client, "Lab 1").await;
    let state = enrollment::enroll(&app.base, &token, "test-host").await.unwrap();
    let replay = enrollment::enroll(&app.base, &token, "impostor").await.unwrap_err();
    assert!(replay.contains("already used"), "{replay}");

    let agent = spawn_agent(state.clone(), "2xH100-80GB:mig=3g.40gb*2");
    let detail = wait_for(&app, &client, state.host_id, Duration::from_secs(10), "coming online with inventory", |h| {
        h["host"]["status"] == "online" && h["host"]["gpu_count"] == 2 && h["self_test"].is_object()
    })
    .await;
    let checks = detail["self_test"]["checks"].as_array().unwrap();
    assert!(checks.iter().any(|c| c["name"] == "gpu 1"), "{checks:?}");
    assert!(checks.iter().all(|c| c["passed"] == true), "{checks:?}");
    assert_eq!(detail["host"]["location"], "Lab 1");
    assert_eq!(detail["gpus"][0]["model"], "NVIDIA H100 80GB HBM3");
    assert_eq!(detail["gpus"][0]["nvlink_peers"].as_array().unwrap().len(), 1);
    assert_eq!(detail["gpus"][1]["mig_enabled"], true);
    let slices = detail["gpus"][1]["mig_instances"].as_array().unwrap();
    assert_eq!(slices.len(), 2, "{slices:?}");
    assert_eq!(slices[0]["profile"], "3g.40gb");
    assert_eq!(slices[0]["memory_bytes"], 40u64 << 30);
    assert!(slices[0]["uuid"].as_str().unwrap().starts_with("MIG-"));
    let listed: Value = app.get_json(&client, "/api/v1/hosts").await;
    assert_eq!(listed[0]["agent_version"], env!("CARGO_PKG_VERSION"));

    agent.abort();
    wait_for(&app, &client, state.host_id, Duration::from_secs(5), "going offline", |h| {
        h["host"]["status"] == "offline"
    })
    .await;

    let again = spawn_agent(state.clone(), "2xH100-80GB");
    let detail = wait_for(&app, &client, state.host_id, Duration::from_secs(10), "reconnecting", |h| {
        h["host"]["status"] == "online"
    })
    .await;
    let reasons: Vec<&str> =
        detail["events"].as_array().unwrap().iter().rev().map(|e| e["reason"].as_str().unwrap()).collect();
    assert_eq!(reasons, vec!["enrolled", "agent connected", "missed heartbeats", "agent connected"]);
    again.abort();
}

async fn a_silent_agent_goes_offline_within_the_grace(backend: Backend) {
    let app = TestApp::spawn_with_agents(backend).await;
    let client = app.provider("provider@example.com").await;
    let token = app.enrollment_token(&client, "Lab 1").await;
    let state = enrollment::enroll(&app.base, &token, "quiet").await.unwrap();
    let mut socket = raw_connect(&app, &state.credential).await.unwrap();
    assert!(matches!(say_hello(&mut socket, PROTOCOL_VERSION, state.host_id).await, ServerMessage::Welcome { .. }));
    wait_for(&app, &client, state.host_id, Duration::from_secs(2), "coming online", |h| {
        h["host"]["status"] == "online"
    })
    .await;
    // Connected but silent: no heartbeats. Grace is 2 s; the reaper sweeps every 0.5 s.
    let started = Instant::now();
    let detail = wait_for(&app, &client, state.host_id, Duration::from_secs(5), "going offline", |h| {
        h["host"]["status"] == "offline"
    })
    .await;
    assert!(started.elapsed() >= Duration::from_millis(1000), "not before the grace: {:?}", started.elapsed());
    assert_eq!(detail["events"][0]["reason"], "missed heartbeats");
    drop(socket);
}

async fn a_revoked_host_is_disconnected_and_cannot_return(backend: Backend) {
    let app = TestApp::spawn_with_agents(backend).await;
    let client = app.provider("provider@example.com").await;
    let token = app.enrollment_token(&client, "Lab 1").await;
    let state = enrollment::enroll(&app.base, &token, "doomed").await.unwrap();
    let agent = spawn_agent(state.clone(), "1xL40S-48GB");
    wait_for(&app, &client, state.host_id, Duration::from_secs(10), "coming online", |h| {
        h["host"]["status"] == "online"
    })
    .await;

    let res = client.post(app.url(&format!("/api/v1/hosts/{}/revoke", state.host_id))).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    let ended =
        tokio::time::timeout(Duration::from_secs(5), agent).await.expect("agent cut off within seconds").unwrap();
    assert!(ended.unwrap_err().contains("revoked"));
    assert_eq!(host(&app, &client, state.host_id).await["host"]["status"], "revoked");
    let source = SimulatedSource::new("1xL40S-48GB", "doomed", vec![]).unwrap();
    let back =
        connection::run(&state, &source, None, agent_dir("doomed"), WorkloadMode::Simulate, Duration::from_secs(1))
            .await;
    assert!(back.unwrap_err().contains("rejected"));
}

async fn wrong_host_bad_protocol_and_bad_credentials_are_refused(backend: Backend) {
    let app = TestApp::spawn_with_agents(backend).await;
    let client = app.provider("provider@example.com").await;
    let a = enrollment::enroll(&app.base, &app.enrollment_token(&client, "Lab 1").await, "a").await.unwrap();
    let b = enrollment::enroll(&app.base, &app.enrollment_token(&client, "Lab 1").await, "b").await.unwrap();

    let mut socket = raw_connect(&app, &a.credential).await.unwrap();
    match say_hello(&mut socket, PROTOCOL_VERSION, b.host_id).await {
        ServerMessage::Refused { reason } => assert!(reason.contains("belongs to host"), "{reason}"),
        other => panic!("speaking for another host was accepted: {other:?}"),
    }
    let mut socket = raw_connect(&app, &a.credential).await.unwrap();
    match say_hello(&mut socket, ProtocolVersion { major: 2, minor: 0 }, a.host_id).await {
        ServerMessage::Refused { reason } => assert!(reason.contains("not supported"), "{reason}"),
        other => panic!("protocol 2.0 was accepted: {other:?}"),
    }
    assert_eq!(host(&app, &client, b.host_id).await["host"]["status"], "offline", "b was never spoken for");

    match raw_connect(&app, "cph_forged").await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 401),
        other => panic!("a forged credential connected: {:?}", other.map(|_| ())),
    }
}

/// The next message from the server that is not a command (attach, detach...).
async fn next_reply(
    socket: &mut tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
) -> Option<ServerMessage> {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), socket.next()).await.expect("an answer in time") {
            Some(Ok(Message::Text(text))) => return Some(serde_json::from_str(&text).unwrap()),
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
            Some(Ok(_)) => continue,
        }
    }
}

async fn a_misbehaving_agent_is_answered_bounded_and_replaced(backend: Backend) {
    let app = TestApp::spawn_with_agents(backend).await;
    let client = app.provider("provider@example.com").await;
    let state = enrollment::enroll(&app.base, &app.enrollment_token(&client, "Lab 1").await, "odd").await.unwrap();
    let mut socket = raw_connect(&app, &state.credential).await.unwrap();
    assert!(matches!(say_hello(&mut socket, PROTOCOL_VERSION, state.host_id).await, ServerMessage::Welcome { .. }));
    let text = |m: &AgentMessage| Message::Text(serde_json::to_string(m).unwrap().into());

    // A malformed message, an over-long string, a report the service refuses: each is answered
    // with an error, and the connection goes on (before, each ended it for good).
    socket.send(Message::Text("{\"type\":\"no_such_thing\"}".into())).await.unwrap();
    assert!(
        matches!(next_reply(&mut socket).await, Some(ServerMessage::Error { message }) if message.contains("malformed"))
    );
    let long = AgentMessage::RentalStatus {
        rental_id: 1,
        status: cardpool_protocol::WorkloadStatus::Failed { reason: "x".repeat(5000) },
    };
    socket.send(text(&long)).await.unwrap();
    match next_reply(&mut socket).await {
        Some(ServerMessage::Error { message }) => assert!(message.contains("reason is longer than 4096"), "{message}"),
        other => panic!("{other:?}"),
    }
    let hello =
        AgentMessage::Hello { protocol: PROTOCOL_VERSION, agent_version: "test".into(), host_id: state.host_id };
    socket.send(text(&hello)).await.unwrap();
    assert!(
        matches!(next_reply(&mut socket).await, Some(ServerMessage::Error { message }) if message.contains("already"))
    );
    wait_for(&app, &client, state.host_id, Duration::from_secs(5), "the host still online", |h| {
        h["host"]["status"] == "online"
    })
    .await;

    // A second connection with the credential takes over; the first is told why and closed.
    let mut second = raw_connect(&app, &state.credential).await.unwrap();
    assert!(matches!(say_hello(&mut second, PROTOCOL_VERSION, state.host_id).await, ServerMessage::Welcome { .. }));
    match next_reply(&mut socket).await {
        Some(ServerMessage::Refused { reason }) => assert!(reason.contains("took over"), "{reason}"),
        other => panic!("the older connection lived on: {other:?}"),
    }
    assert!(next_reply(&mut socket).await.is_none(), "and is closed");

    // A message over 1 MiB closes the connection without reaching the service.
    let huge = format!("{{\"type\":\"heartbeat\",\"pad\":\"{}\"}}", "y".repeat(2 << 20));
    let _ = second.send(Message::Text(huge.into())).await;
    assert!(next_reply(&mut second).await.is_none(), "a 2 MiB message ends the connection");
}
