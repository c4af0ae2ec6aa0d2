//! Rentals end to end over HTTP with a real agent (in-process, simulated GPUs, the sandbox
//! runtime running real shell commands), on SQLite and PostgreSQL: a spot rental runs with only
//! its GPU visible, is preempted by an on-demand booking (SIGTERM + notice file, then
//! `preempted`), the on-demand rental runs, is stopped and billed exactly.

use crate::common::{H100 as MODEL, TestApp};
use cardpool_server::{config::Config, workers};
use cardpool_service::{Settings, backend_tests, hosts, ledger, rentals, testing::Backend};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

async fn a_spot_rental_is_preempted_by_on_demand_and_billing_is_exact(backend: Backend) {
    let config = Config { heartbeat_interval_secs: 1, host_offline_grace_secs: 5, ..Config::default() };
    let mut settings = Settings::default();
    settings.rentals.preemption_notice_secs = 2;
    let app = TestApp::spawn_configured(backend, settings, config).await;
    workers::spawn(&app.services, Duration::from_secs(5), Duration::ZERO, Duration::from_secs(1));

    // A provider's host with two simulated H100s, priced and listed, its agent connected.
    let rentals_dir = std::env::temp_dir().join(format!("cardpool-e2e-rentals-{}-{backend:?}", std::process::id()));
    let (host, agent) = app.agent_host(2, rentals_dir.clone()).await;
    let (state, owner) = (&host.state, &host.owner);

    // A spot renter's workload traps SIGTERM and prints the notice it was given.
    let spot = app.funded_renter("spot@example.com", 20).await;
    let res = spot
        .post(app.url("/api/v1/rentals"))
        .json(&json!({
            "host_id": state.host_id, "gpu_model": MODEL, "gpu_count": 1, "kind": "spot", "bid_micros": 1_500_000,
            "workload": {"command": "trap 'cat \"$CARDPOOL_PREEMPT_NOTICE_FILE\"; exit 0' TERM; echo \"gpus=$CUDA_VISIBLE_DEVICES\"; while true; do sleep 0.1; done"}
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let spot_rental: Value = res.json().await.unwrap();
    let spot_id = spot_rental["id"].as_i64().unwrap();
    assert_eq!(spot_rental["price_micros"], 1_000_000, "one GPU still free: the minimum clears");
    app.wait_for_rental_state(&spot, spot_id, "running", Duration::from_secs(10)).await;
    let index = spot_rental["gpu_indexes"][0].as_u64().unwrap();

    // On-demand wants both GPUs: the spot rental gets its notice and ends as preempted.
    let od = app.funded_renter("od@example.com", 20).await;
    let res = od
        .post(app.url("/api/v1/rentals"))
        .json(&json!({"host_id": state.host_id, "gpu_model": MODEL, "gpu_count": 2, "workload": {"command": "sleep 600"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let od_id = res.json::<Value>().await.unwrap()["id"].as_i64().unwrap();
    // The booking itself gives notice; this workload exits on SIGTERM at once, so by the time
    // we look it may already be over.
    let noticed = app.rental(&spot, spot_id).await;
    assert!(matches!(noticed["rental"]["state"].as_str(), Some("preempting" | "preempted")), "{noticed}");
    assert!(noticed["rental"]["notice"].as_str().unwrap().starts_with("Preempted"));
    let preempted = app.wait_for_rental_state(&spot, spot_id, "preempted", Duration::from_secs(10)).await;
    let states: Vec<&str> =
        preempted["events"].as_array().unwrap().iter().filter_map(|e| e["state"].as_str()).collect();
    assert_eq!(states, ["requested", "provisioning", "running", "preempting", "preempted"], "{preempted}");
    let log = std::fs::read_to_string(rentals_dir.join(format!("{spot_id}/workload.log"))).unwrap();
    let host = hosts::get_host(&app.services, owner, state.host_id).await.unwrap();
    let uuid = &host.gpus.iter().find(|g| g.index as u64 == index).unwrap().uuid;
    assert!(log.contains(&format!("gpus={uuid}\n")), "only its GPU is visible: {log}");
    assert!(log.contains("\"reason\":\"preempted\""), "the notice reached the workload: {log}");
    let billed = preempted["rental"]["billed_seconds"].as_i64().unwrap();
    assert_eq!(preempted["rental"]["charged_micros"].as_i64().unwrap(), rentals::cost(1_000_000, 1, billed));

    // The on-demand rental starts once the spot workload is gone, runs, and is stopped.
    let running = app.wait_for_rental_state(&od, od_id, "running", Duration::from_secs(10)).await;
    assert_eq!(running["rental"]["gpu_indexes"], json!([0, 1]));
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let res = od.post(app.url(&format!("/api/v1/rentals/{od_id}/stop"))).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let ended = app.wait_for_rental_state(&od, od_id, "ended", Duration::from_secs(15)).await;
    let billed = ended["rental"]["billed_seconds"].as_i64().unwrap();
    assert!((2..=4).contains(&billed), "{ended}");
    let charged = ended["rental"]["charged_micros"].as_i64().unwrap();
    assert_eq!(charged, rentals::cost(3_600_000, 2, billed));
    let wallet: Value = app.get_json(&od, "/api/v1/wallet").await;
    assert_eq!(wallet["balance_micros"].as_i64().unwrap(), 20_000_000 - charged);
    let timeline: Vec<&str> =
        ended["events"].as_array().unwrap().iter().map(|e| e["state"].as_str().unwrap()).collect();
    assert_eq!(timeline, ["requested", "provisioning", "running", "stopping", "ended"]);
    // Nobody else sees these rentals.
    let stranger = app.browser();
    app.sign_up(&stranger, "stranger@example.com").await;
    let res = stranger.get(app.url(&format!("/api/v1/rentals/{od_id}"))).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let res = stranger.post(app.url(&format!("/api/v1/rentals/{od_id}/stop"))).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    assert!(ledger::verify(&app.services.db).await.unwrap().is_sound());
    agent.abort();
    let _ = std::fs::remove_dir_all(&rentals_dir);
}

async fn bad_bookings_are_refused_clearly(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let renter = app.funded_renter("renter@example.com", 1).await;
    for (body, status) in [
        (
            json!({"host_id": 999, "gpu_model": MODEL, "gpu_count": 0, "workload": {"command": "x"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (json!({"host_id": 999, "gpu_model": MODEL, "gpu_count": 1, "workload": {}}), StatusCode::UNPROCESSABLE_ENTITY),
        (
            json!({"host_id": 999, "gpu_model": MODEL, "gpu_count": 1, "workload": {"command": "x"}}),
            StatusCode::NOT_FOUND,
        ),
    ] {
        let res = renter.post(app.url("/api/v1/rentals")).json(&body).send().await.unwrap();
        assert_eq!(res.status(), status, "{body}");
    }
    let anonymous = app.browser();
    let res = anonymous.get(app.url("/api/v1/rentals")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let listed: Value = app.get_json(&renter, "/api/v1/rentals").await;
    assert_eq!(listed, json!([]));
}

backend_tests!(a_spot_rental_is_preempted_by_on_demand_and_billing_is_exact, bad_bookings_are_refused_clearly);
