//! Two replicas in one test process, as a cluster runs them: each its own server, services and
//! bus over one PostgreSQL database and the NATS at `CARDPOOL_TEST_NATS_URL` (default
//! 127.0.0.1:4222, JetStream on). Agents heartbeat only every 30 s here, so what happens within
//! a few seconds can only have travelled over the bus.

use crate::common::{TestApp, agent_dir, eventually};
use cardpool_server::Config;
use cardpool_service::{Settings, entities::hosts as host_rows, leader::Leadership, testing::Backend};
use reqwest::StatusCode;
use sea_orm::EntityTrait;
use serde_json::json;
use std::time::{Duration, Instant};

pub(crate) fn nats_url() -> String {
    std::env::var("CARDPOOL_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// Replica A (where renters book) and replica B (where agents connect), slow heartbeats.
async fn two_replicas() -> (TestApp, TestApp) {
    let settings = Settings { nats_url: Some(nats_url()), ..Settings::default() };
    let slow = Config { heartbeat_interval_secs: 30, host_offline_grace_secs: 90, ..Config::default() };
    let a = TestApp::spawn_configured(Backend::Postgres, settings, slow.clone()).await;
    let b = a.replica(slow).await;
    for replica in [&a, &b] {
        eventually(Duration::from_secs(10), "the replica's bus connecting", async || {
            replica.services.bus.readiness().ok()
        })
        .await;
    }
    (a, b)
}

fn in_time<T>(what: &str) -> impl FnOnce(tokio::time::error::Elapsed) -> T + '_ {
    move |_| panic!("{what} did not happen in time")
}

/// A booking made on replica A reaches the agent connected to replica B through the bus's
/// wake-up (its heartbeat is 30 s away), the rental runs, and its log and SSH work through A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_booking_on_one_replica_reaches_an_agent_on_the_other_at_once() {
    let (a, b) = two_replicas().await;
    let (host, agent) = b.agent_host(1, agent_dir("cluster-booking")).await;
    let renter = a.funded_renter("renter@example.com", 20).await;
    let scratch = agent_dir("cluster-ssh");
    let key = crate::ssh::keygen(&scratch, "renter").await;
    let booked = Instant::now();
    let command = "echo started on the provider; sleep 600";
    let workload = json!({"command": command, "ssh_public_key": crate::ssh::public(&key)});
    let rental = a.book_h100(&renter, host.state.host_id, workload).await;
    a.wait_for_rental_state(&renter, rental, "running", Duration::from_secs(10)).await;
    eprintln!("booked on replica A, running on replica B's agent after {:?}", booked.elapsed());

    // Its log, read on A, comes from the agent on B (A asks B over the bus).
    let logs = a.url(&format!("/api/v1/rentals/{rental}/logs?offset=0"));
    eventually(Duration::from_secs(10), "the workload's output read through replica A", async || {
        let res = renter.get(&logs).send().await.unwrap();
        let chunk: serde_json::Value = res.json().await.unwrap();
        chunk["data"].as_str().filter(|d| d.contains("started on the provider")).map(|_| ())
    })
    .await;

    // SSH through replica A's gateway reaches the sandbox on B's agent (channels over the bus),
    // both ways: a command's output, and a file sent in and read back.
    let ssh = crate::ssh::Client { port: a.ssh_port, known_hosts: scratch.join("known_hosts") };
    let shell =
        ssh.ssh(&key, &format!("r{rental}"), &[], "echo \"in $(hostname)\"; head -c 300000 /dev/zero | wc -c").await;
    let said = crate::ssh::text(&shell);
    assert!(shell.status.success(), "{said}");
    assert!(said.contains("in rental-") && said.contains("300000"), "{said}");
    // Three agent windows' worth up, through SFTP: the window crosses the bus too.
    let upload = scratch.join("weights.bin");
    let bytes: Vec<u8> = (0..3 << 20).map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(&upload, &bytes).unwrap();
    let sent = ssh.scp(&key, &upload.to_string_lossy(), &format!("r{rental}@127.0.0.1:/tmp/weights.bin"), false).await;
    assert!(sent.status.success(), "{}", crate::ssh::text(&sent));
    let sum = ssh.ssh(&key, &format!("r{rental}"), &[], "sha256sum /tmp/weights.bin").await;
    let expected = sha256_hex(&bytes);
    assert!(crate::ssh::text(&sum).contains(&expected), "{}", crate::ssh::text(&sum));
    let res = renter.post(a.url(&format!("/api/v1/rentals/{rental}/stop"))).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    a.wait_for_rental_state(&renter, rental, "ended", Duration::from_secs(10)).await;
    agent.abort();
}

/// A live feed on replica A shows the frames of a host whose agent is connected to replica B;
/// `/metrics` exports that host's GPUs from B only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_feed_on_one_replica_shows_hosts_connected_to_the_other() {
    let (a, b) = two_replicas().await;
    let (host, agent) = b.agent_host(2, agent_dir("cluster-feed")).await;
    let host_id = host.state.host_id;
    let provider = a.browser();
    let signed_in = a.sign_in(&provider, "provider@example.com", crate::common::PASSWORD).await;
    assert_eq!(signed_in.status(), StatusCode::OK);
    let mut feed =
        provider.get(a.url(&format!("/api/v1/telemetry/live?scope=host&id={host_id}"))).send().await.unwrap();
    assert_eq!(feed.status(), StatusCode::OK);
    let mut seen = String::new();
    tokio::time::timeout(Duration::from_secs(15), async {
        while !seen.contains(&format!("\"host_id\":{host_id}")) {
            seen.push_str(&String::from_utf8_lossy(&feed.chunk().await.unwrap().unwrap()));
        }
    })
    .await
    .unwrap_or_else(in_time("B's host's samples reaching A's feed"));
    assert!(b.services.telemetry.is_connected_here(host_id));
    assert!(!a.services.telemetry.is_connected_here(host_id), "A leaves B's GPUs out of its /metrics");

    // A replica started after the agent has gone still paints the host's recent frames: the
    // JetStream stream kept them.
    agent.abort();
    let c = a.replica(Config::default()).await;
    eventually(Duration::from_secs(10), "the recent frames reaching a replica started later", async || {
        c.services.telemetry.latest().contains_key(&host_id).then_some(())
    })
    .await;
}

/// The agent moves from replica B to replica A: A's connection owns the host in the database,
/// and B's stale connection ends at once (kicked over the bus), not at its next heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_moving_to_another_replica_is_owned_there_and_the_old_connection_ends() {
    let (a, b) = two_replicas().await;
    let (mut host, on_b) = b.agent_host(1, agent_dir("cluster-move")).await;
    let host_id = host.state.host_id;
    let owner = async |app: &TestApp| {
        host_rows::Entity::find_by_id(host_id).one(&app.services.db).await.unwrap().unwrap().connection_id
    };
    let first = owner(&a).await.expect("B's connection owns the host");
    assert!(first.starts_with(b.services.bus.replica()), "{first}");

    // The same agent (its credential) dials replica A, as after a load balancer's move.
    host.state.server = a.base.clone();
    let on_a = host.run_agent();
    eventually(Duration::from_secs(10), "A's connection taking the host over", async || {
        owner(&a).await.filter(|id| id.starts_with(a.services.bus.replica()))
    })
    .await;
    let kicked = Instant::now();
    let connections = b.services.connections.clone();
    eventually(Duration::from_secs(5), "B's stale connection ending", async || {
        connections.with(host_id, |_, _| ()).is_none().then_some(())
    })
    .await;
    eprintln!("B's connection ended {:?} after A took the host over", kicked.elapsed());
    on_a.abort();
    on_b.abort();
}

/// One replica leads the workers; when its lock connection goes (the replica died), the other
/// takes over within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_lead_passes_to_another_replica_when_the_leader_dies() {
    let (a, b) = two_replicas().await;
    let leader = tokio::time::timeout(Duration::from_secs(5), Leadership::campaign(&a.services.db))
        .await
        .unwrap_or_else(in_time("A leading"));
    let db = b.services.db.clone();
    let mut follower = tokio::spawn(async move { Leadership::campaign(&db).await });
    assert!(
        tokio::time::timeout(Duration::from_secs(3), &mut follower).await.is_err(),
        "B must not lead while A holds the lock"
    );
    let died = Instant::now();
    drop(leader);
    let mut taken = tokio::time::timeout(Duration::from_secs(5), follower)
        .await
        .unwrap_or_else(in_time("B taking the lead"))
        .unwrap();
    eprintln!("B took the lead {:?} after A's lock connection closed", died.elapsed());
    // B leads until its own connection fails.
    assert!(tokio::time::timeout(Duration::from_secs(2), taken.lost()).await.is_err());
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}
