//! Rentals survive what a real network and real upgrades do to them (SQLite and PostgreSQL,
//! with a real agent running the workload in its sandbox): the agent dying and coming back
//! within the offline grace leaves the rental running and billed for every second, with the
//! same workload (adopted, not restarted); only a host silent past the grace is offline, its
//! rental interrupted and billed to the last heartbeat; an agent still running a workload the
//! server has ended is told to stop it; and a rental whose workload vanished with a reboot
//! fails rather than being billed on.

use crate::common::{H100 as MODEL, TestApp, eventually};
use cardpool_server::{config::Config, workers};
use cardpool_service::{Settings, backend_tests, hosts, testing::Backend};
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

const GRACE: Duration = Duration::from_secs(5);
/// Prints one line when it starts, then runs until stopped.
const WORKLOAD: &str = "echo started; while :; do sleep 1; done";

fn started_lines(dir: &std::path::Path, rental_id: i64) -> usize {
    let log = std::fs::read_to_string(dir.join(format!("{rental_id}/workload.log"))).unwrap_or_default();
    log.lines().filter(|l| *l == "started").count()
}

fn running_since(rental: &Value) -> DateTime<Utc> {
    rental["rental"]["running_since"].as_str().unwrap().parse().unwrap()
}

async fn rentals_survive_agent_restarts_and_end_only_after_the_grace(backend: Backend) {
    let config = Config { heartbeat_interval_secs: 1, host_offline_grace_secs: GRACE.as_secs(), ..Config::default() };
    let app = TestApp::spawn_configured(backend, Settings::default(), config).await;
    workers::spawn(&app.services, GRACE, Duration::ZERO, Duration::from_secs(1));
    let dir = std::env::temp_dir().join(format!("cardpool-survival-{}-{backend:?}", std::process::id()));
    let (host, first) = app.agent_host(1, dir.clone()).await;
    let (state, owner) = (&host.state, &host.owner);
    let renter = app.funded_renter("renter@example.com", 20).await;

    // The agent dies (kill -9, an upgrade) and is back two seconds later.
    let id = app.book_h100(&renter, state.host_id, json!({"command": WORKLOAD})).await;
    let running = app.wait_for_rental_state(&renter, id, "running", Duration::from_secs(15)).await;
    first.abort();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = host.run_agent();
    // Well past the grace, the rental still runs the same workload: adopted, not restarted.
    tokio::time::sleep(GRACE + Duration::from_secs(3)).await;
    let after = app.rental(&renter, id).await;
    assert_eq!(after["rental"]["state"], "running", "{after}");
    assert_eq!(started_lines(&dir, id), 1, "the workload was started again");
    let detail = hosts::get_host(&app.services, owner, state.host_id).await.unwrap();
    assert_eq!(detail.host.status.as_str(), "online");
    // Billed for every second of it, the blip included.
    let res = renter.post(app.url(&format!("/api/v1/rentals/{id}/stop"))).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let stop_asked = Utc::now();
    let ended = app.wait_for_rental_state(&renter, id, "ended", Duration::from_secs(20)).await;
    let billed = ended["rental"]["billed_seconds"].as_i64().unwrap();
    let ran = (stop_asked - running_since(&running)).num_seconds();
    assert!((ran - 1..=ran + 1).contains(&billed), "billed {billed} s of {ran} s: {ended}");

    // Silent past the grace (the agent is gone for good): interrupted, billed to the last
    // heartbeat.
    let id = app.book_h100(&renter, state.host_id, json!({"command": WORKLOAD})).await;
    let running = app.wait_for_rental_state(&renter, id, "running", Duration::from_secs(15)).await;
    second.abort();
    let silenced = Utc::now();
    let interrupted = app.wait_for_rental_state(&renter, id, "interrupted", GRACE * 3).await;
    let billed = interrupted["rental"]["billed_seconds"].as_i64().unwrap();
    let heard = (silenced - running_since(&running)).num_seconds();
    assert!(billed <= heard + 1, "billed {billed} s, last heard after {heard} s: {interrupted}");

    // Its sandbox outlived the agent; the agent that comes back adopts it, reports it, and is
    // told to stop it, since the server has ended that rental.
    assert_eq!(started_lines(&dir, id), 1);
    let third = host.run_agent();
    eventually(Duration::from_secs(20), "the ended rental's workload stopped", async || {
        let status = cardpool_agent::sandbox::SandboxStatus::read(&dir.join(id.to_string()));
        (!status.alive()).then_some(())
    })
    .await;

    // The host reboots: agent and workload are gone; the agent that starts finds nothing to
    // adopt, and the server, hearing it run nothing, fails the rental instead of billing on.
    let id = app.book_h100(&renter, state.host_id, json!({"command": WORKLOAD})).await;
    app.wait_for_rental_state(&renter, id, "running", Duration::from_secs(15)).await;
    third.abort();
    let sandbox = cardpool_agent::sandbox::SandboxStatus::read(&dir.join(id.to_string()));
    let init = sandbox.init_pid.expect("the sandbox is up").to_string();
    assert!(std::process::Command::new("kill").args(["-9", &init]).status().unwrap().success());
    let fourth = host.run_agent();
    let failed = app.wait_for_rental_state(&renter, id, "failed", Duration::from_secs(30)).await;
    let reasons: Vec<&str> = failed["events"].as_array().unwrap().iter().filter_map(|e| e["reason"].as_str()).collect();
    assert!(reasons.iter().any(|r| r.contains("no longer running on the host")), "{reasons:?}");
    fourth.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

backend_tests!(rentals_survive_agent_restarts_and_end_only_after_the_grace);

/// The server was down (an upgrade) for half a minute: every host's last heartbeat is that old
/// when it starts. Its reaper judges nobody until agents have had time to reconnect, so the
/// rental that ran through the outage goes on; a host that stays silent is judged after that.
async fn a_server_restart_interrupts_nothing(backend: Backend) {
    use cardpool_domain::{
        offers::RentalKind,
        rentals::{BookOfferRequest, Workload},
    };
    use cardpool_service::{entities::hosts as host_rows, rentals, testing};
    use sea_orm::{ActiveModelTrait, ActiveValue::Set, EntityTrait, IntoActiveModel};

    let app = TestApp::spawn(backend).await;
    let services = &app.services;
    let provider = testing::provider(services, "owner@example.com").await;
    let host_id = testing::host(services, &provider, "storm").await;
    let renter = testing::renter(services, "renter@example.com").dollars(20).await;
    let request = BookOfferRequest {
        host_id,
        gpu_model: MODEL.into(),
        gpu_count: 1,
        kind: RentalKind::OnDemand,
        workload: Workload { command: Some(WORKLOAD.into()), ..Workload::default() },
        bid_micros: None,
        starts_at: None,
        hours: None,
        stop_when_idle: false,
        limits: Default::default(),
    };
    let rental = rentals::book_offer(services, &renter, &request).await.unwrap();
    rentals::record_workload_status(services, host_id, rental.id, &cardpool_protocol::WorkloadStatus::Ready)
        .await
        .unwrap();
    let host = host_rows::Entity::find_by_id(host_id).one(&services.db).await.unwrap().unwrap();
    let mut stale = host.clone().into_active_model();
    stale.last_heartbeat_at = Set(Some(Utc::now() - chrono::Duration::seconds(30)));
    stale.update(&services.db).await.unwrap();

    // Up again: grace 1 s, agents get 3 s more to reconnect. This one is back after 2 s.
    let hold = Duration::from_secs(4);
    workers::spawn(services, Duration::from_secs(1), hold, Duration::from_secs(1));
    let started = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    while started.elapsed() < hold + Duration::from_secs(2) {
        hosts::record_heartbeat(services, &host).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let detail = rentals::get_rental(services, &renter, rental.id).await.unwrap();
    assert_eq!(detail.rental.state.as_str(), "running", "{:?}", detail.events);
    let owner = hosts::get_host(services, &provider, host_id).await.unwrap();
    assert_eq!(owner.host.status.as_str(), "online");
    // Silent from now on: judged as any host is, within the grace.
    eventually(Duration::from_secs(5), "the silent host interrupted", async || {
        let detail = rentals::get_rental(services, &renter, rental.id).await.unwrap();
        (detail.rental.state.as_str() == "interrupted").then_some(())
    })
    .await;
}

backend_tests!(a_server_restart_interrupts_nothing);
