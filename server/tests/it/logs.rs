//! Workload logs end to end (SQLite and PostgreSQL): a real agent runs the workload in its
//! sandbox, the renter reads its output by offset, follows it live as Server-Sent Events
//! through an agent restart without a gap or a repeat, downloads it; nobody else can.

use crate::common::TestApp;
use cardpool_domain::rentals::LogEvent;
use cardpool_server::{config::Config, workers};
use cardpool_service::{Settings, backend_tests, testing::Backend};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;

/// Fifty numbered lines, then a numbered beat five times a second until stopped.
const WORKLOAD: &str = "for i in $(seq 1 50); do echo \"line $i\"; done; n=0; \
    while :; do n=$((n + 1)); echo \"beat $n\"; sleep 0.2; done";

/// Reads Server-Sent Events from `response` until `enough` says so; returns them.
async fn events(response: &mut reqwest::Response, enough: impl Fn(&[LogEvent]) -> bool) -> Vec<LogEvent> {
    let mut buffer = String::new();
    let mut seen = Vec::new();
    while !enough(&seen) {
        let chunk = tokio::time::timeout(Duration::from_secs(20), response.chunk())
            .await
            .expect("an event in time")
            .unwrap()
            .expect("the feed stays open");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            for line in block.lines() {
                if let Some(data) = line.strip_prefix("data: ").or_else(|| line.strip_prefix("data:")) {
                    seen.push(serde_json::from_str(data).unwrap());
                }
            }
        }
    }
    seen
}

fn output(events: &[LogEvent]) -> String {
    events.iter().filter_map(|e| if let LogEvent::Chunk(c) = e { Some(c.data.as_str()) } else { None }).collect()
}

fn beats(text: &str) -> Vec<u64> {
    text.lines().filter_map(|l| l.strip_prefix("beat ")).map(|n| n.parse().unwrap()).collect()
}

async fn a_renter_reads_follows_and_downloads_the_workload_log(backend: Backend) {
    let config = Config { heartbeat_interval_secs: 1, host_offline_grace_secs: 10, ..Config::default() };
    let app = TestApp::spawn_configured(backend, Settings::default(), config).await;
    workers::spawn(&app.services, Duration::from_secs(10), Duration::ZERO, Duration::from_secs(1));
    let dir = std::env::temp_dir().join(format!("cardpool-logs-{}-{backend:?}", std::process::id()));
    let (host, first) = app.agent_host(1, dir.clone()).await;
    let state = &host.state;
    let renter = app.funded_renter("renter@example.com", 20).await;
    let id = app.book_h100(&renter, state.host_id, json!({"command": WORKLOAD})).await;
    app.wait_for_rental_state(&renter, id, "running", Duration::from_secs(15)).await;
    let logs = app.url(&format!("/api/v1/rentals/{id}/logs"));

    // Read by offset, a small piece at a time: whole lines, chained exactly.
    let get = |client: &Client, query: String| {
        let url = format!("{logs}?{query}");
        let client = client.clone();
        async move { client.get(url).send().await.unwrap() }
    };
    let mut text = String::new();
    let mut offset = 0;
    while !text.contains("line 50\n") {
        let chunk: Value = get(&renter, format!("offset={offset}&max_bytes=40")).await.json().await.unwrap();
        assert_eq!(chunk["offset"], offset);
        text.push_str(chunk["data"].as_str().unwrap());
        offset = chunk["end"].as_u64().unwrap();
    }
    let numbered: Vec<String> = (1..=50).map(|i| format!("line {i}")).collect();
    assert_eq!(text.lines().take(50).collect::<Vec<_>>(), numbered);

    // Follow from the start; the agent dies and comes back meanwhile: nothing missed or doubled.
    let mut feed = get(&renter, "follow=true&offset=0".into()).await;
    assert_eq!(feed.status(), StatusCode::OK);
    let before = events(&mut feed, |seen| beats(&output(seen)).len() >= 5).await;
    first.abort();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = host.run_agent();
    let all = events(&mut feed, |seen| beats(&output(seen)).len() >= 15).await;
    let text = output(&before) + &output(&all);
    assert_eq!(text.lines().take(50).collect::<Vec<_>>(), numbered);
    let beats = beats(&text);
    assert_eq!(beats, (1..=beats.len() as u64).collect::<Vec<_>>(), "beats in order, none missed or repeated");

    // Downloaded whole, as a file.
    let file = get(&renter, "download=true".into()).await;
    assert_eq!(file.status(), StatusCode::OK);
    assert!(file.headers()["content-disposition"].to_str().unwrap().contains(&format!("rental-{id}.log")));
    assert!(file.text().await.unwrap().starts_with("line 1\nline 2\n"));

    // Only its renter reads it.
    let stranger = app.browser();
    app.sign_up(&stranger, "stranger@example.com").await;
    for query in ["offset=0", "follow=true", "download=true"] {
        assert_eq!(get(&stranger, query.into()).await.status(), StatusCode::NOT_FOUND, "{query}");
    }
    assert_eq!(get(&host.provider, "offset=0".into()).await.status(), StatusCode::NOT_FOUND);

    // Stopped: a follower is told it has ended.
    let res = renter.post(app.url(&format!("/api/v1/rentals/{id}/stop"))).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    app.wait_for_rental_state(&renter, id, "ended", Duration::from_secs(20)).await;
    let mut feed = get(&renter, "follow=true".into()).await;
    let last = events(&mut feed, |seen| seen.iter().any(|e| matches!(e, LogEvent::End { .. }))).await;
    assert!(matches!(last.last(), Some(LogEvent::End { reason }) if reason.contains("ended")), "{last:?}");
    second.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

backend_tests!(a_renter_reads_follows_and_downloads_the_workload_log);
