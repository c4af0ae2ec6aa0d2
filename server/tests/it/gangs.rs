//! A 2×2-GPU gang over the API with two real agents (in-process, simulated H100s), on SQLite
//! and PostgreSQL. The test makes the fabric: a veth pair whose two ends carry the two hosts'
//! fabric addresses. Each member runs in its own sandbox, with a network namespace of its own
//! whose firewall refuses the provider's addresses (the fabric's included) but for rank 0's
//! rendezvous port. The members run a small rendezvous (a TCP store like `torch.distributed`'s,
//! in Python's standard library): rank 0 serves it inside its sandbox, rank 0's agent forwards
//! the fabric port into it, and every rank connects to `MASTER_ADDR:MASTER_PORT`, says its
//! rank and learns the world once all have. Billing starts for both members at one instant
//! and is exact per member; a stop ends both.
//!
//! Needs root (the veth pair, the sandboxes' firewalls), as CI runs; elsewhere it says so and
//! passes without running.

use crate::common::{H100, TestApp, agent_dir, eventually};
use cardpool_service::{Settings, backend_tests, rentals, testing::Backend};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::{process::Command, time::Duration};

/// The rendezvous: rank 0 serves a store on `MASTER_PORT` in its sandbox; every rank (rank 0
/// too) connects to `MASTER_ADDR:MASTER_PORT`, sends its rank, and waits for the ranks seen
/// once all `NNODES` have come (as torch's store does: one rank's sandbox may start seconds
/// after another's). Then each tries another port of rank 0's host, which its
/// firewall refuses, and stays up.
const RENDEZVOUS: &str = r#"/usr/bin/python3 - <<'PY'
import os, socket, threading, time
rank, world = int(os.environ["NODE_RANK"]), int(os.environ["NNODES"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen()
    def store():
        clients = {}
        while len(clients) < world:
            conn, _ = server.accept()
            line = conn.makefile().readline().split()
            if line[:1] == ["rank"]:
                # A rank that comes again (its connection broke) is answered on its newest.
                clients[int(line[1])] = conn
        reply = "world %d ranks %s\n" % (len(clients), ",".join(map(str, sorted(clients))))
        for conn in clients.values():
            try:
                conn.sendall(reply.encode())
            except OSError:
                pass
            conn.close()
    threading.Thread(target=store, daemon=True).start()
deadline = time.time() + 60
while True:
    try:
        conn = socket.create_connection((addr, port), timeout=5)
        conn.sendall(b"rank %d\n" % rank)
        # The answer comes once every rank has come, however long the others take to start:
        # a rank that gave up waiting and came again would be answered on a connection it
        # had closed.
        conn.settimeout(max(1, deadline - time.time()))
        reply = conn.makefile().readline().split()
        if reply[:1] == ["world"]:
            break
    except OSError:
        pass
    if time.time() > deadline:
        raise SystemExit("no rendezvous")
    time.sleep(0.2)
print("rendezvous rank=%d world=%s ranks=%s" % (rank, reply[1], reply[3]), flush=True)
try:
    socket.create_connection((addr, port + 1), timeout=3)
    print("other port reached", flush=True)
except OSError:
    print("other port refused", flush=True)
PY
exec sleep 600"#;

/// The fabric: a veth pair in the test's network namespace, one end per host, each with its
/// host's address (and a third address on the first end, for a stranger). Gone when dropped.
struct Fabric {
    link: String,
}

impl Fabric {
    fn make(link: &str, peer: &str, addresses: [&str; 3]) -> Option<Fabric> {
        let ip = |args: &[&str]| Command::new("ip").args(args).status().is_ok_and(|s| s.success());
        let _ = Command::new("ip").args(["link", "del", link]).output();
        if !ip(&["link", "add", link, "type", "veth", "peer", "name", peer]) {
            return None;
        }
        let fabric = Fabric { link: link.to_owned() };
        for (dev, address) in [(link, addresses[0]), (peer, addresses[1]), (link, addresses[2])] {
            assert!(ip(&["addr", "add", &format!("{address}/32"), "dev", dev]), "address {address} on {dev}");
        }
        for dev in [link, peer] {
            assert!(ip(&["link", "set", dev, "up"]), "{dev} up");
        }
        Some(fabric)
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.link]).output();
    }
}

async fn a_gang_rendezvous_across_hosts_and_bills_together(backend: Backend) {
    if !is_root() {
        return eprintln!("needs root: the test's fabric (a veth pair) and the sandboxes' firewalls");
    }
    // Each backend's run gets a fabric of its own (the two run at once in this process).
    let net = if backend == Backend::Sqlite { 1 } else { 2 };
    let addresses = [format!("10.77.{net}.1"), format!("10.77.{net}.2"), format!("10.77.{net}.9")];
    let Some(_fabric) =
        Fabric::make(&format!("cpgang{net}a"), &format!("cpgang{net}b"), [&addresses[0], &addresses[1], &addresses[2]])
    else {
        panic!("cannot make a veth pair as root (iproute2 missing?)");
    };
    let app = TestApp::spawn_with(backend, Settings::default()).await;
    let provider = app.provider("provider@example.com").await;
    let owner = cardpool_service::accounts::principal_for_email(&app.services, "provider@example.com").await.unwrap();
    let mut agents = Vec::new();
    let mut dirs = Vec::new();
    let mut host_ids = Vec::new();
    for (i, address) in addresses[..2].iter().enumerate() {
        use cardpool_agent::{connection, gpu::simulated::SimulatedSource, runtime::WorkloadMode};
        let token = app.enrollment_token(&provider, "Lab").await;
        let name = format!("node{i}");
        let state = cardpool_agent::enrollment::enroll(&app.base, &token, &name).await.unwrap();
        let host_id = state.host_id;
        let dir = agent_dir("gang");
        dirs.push(dir.clone());
        agents.push(tokio::spawn(async move {
            let source = SimulatedSource::new("2xH100-80GB", &name, vec![]).unwrap();
            connection::run(&state, &source, None, dir, WorkloadMode::Run, Duration::from_secs(1)).await
        }));
        eventually(Duration::from_secs(10), "inventory arriving", async || {
            let detail = cardpool_service::hosts::get_host(&app.services, &owner, host_id).await.unwrap();
            (detail.gpus.len() == 2).then_some(())
        })
        .await;
        let put = |path: &str, body: Value| {
            provider.put(app.url(&format!("/api/v1/hosts/{host_id}/{path}"))).json(&body).send()
        };
        let price = json!({"gpu_model": H100, "on_demand_micros": 3_600_000, "reserved_micros": 3_000_000, "spot_min_bid_micros": 1_000_000});
        assert_eq!(put("pricing", price).await.unwrap().status(), StatusCode::OK);
        let fabric =
            json!({"fabric": {"fabric_id": "lab-ib", "interconnect": "infiniband", "gbps": 400, "address": address}});
        assert_eq!(put("fabric", fabric).await.unwrap().status(), StatusCode::OK);
        assert_eq!(put("listing", json!({"listed": true})).await.unwrap().status(), StatusCode::NO_CONTENT);
        host_ids.push(host_id);
    }
    // Rank 0's host listens on this port of its fabric address; the one above is refused.
    let port = 29_500 + (std::process::id() % 500) as u16 * 2 + net * 1_000;
    let other = std::net::TcpListener::bind((addresses[0].as_str(), port + 1)).unwrap();

    let renter = app.funded_renter("renter@example.com", 50).await;
    let bad = renter
        .post(app.url("/api/v1/gangs"))
        .json(&json!({"gpu_model": H100, "nodes": 3, "gpus_per_node": 2,
        "workload": {"command": "true"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::CONFLICT, "two hosts cannot make three");
    let res = renter
        .post(app.url("/api/v1/gangs"))
        .json(&json!({"gpu_model": H100, "nodes": 2, "gpus_per_node": 2, "fabric_id": "lab-ib",
            "master_port": port, "workload": {"command": RENDEZVOUS}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let gang: Value = res.json().await.unwrap();
    let id = gang["id"].as_i64().unwrap();
    assert_eq!(gang["master_addr"], addresses[0].as_str(), "{gang}");
    let running = eventually(Duration::from_secs(20), "both members up", async || {
        let gang = app.get_json(&renter, &format!("/api/v1/gangs/{id}")).await;
        (gang["state"] == "running").then_some(gang)
    })
    .await;
    let members = running["members"].as_array().unwrap();
    assert_eq!(members.len(), 2);
    let rental_ids: Vec<i64> = members.iter().map(|m| m["rental_id"].as_i64().unwrap()).collect();
    let details: Vec<Value> = futures_util::future::join_all(rental_ids.iter().map(|r| app.rental(&renter, *r))).await;
    let since: Vec<&Value> = details.iter().map(|d| &d["rental"]["running_since"]).collect();
    assert!(since[0].is_string() && since[0] == since[1], "billing starts at one instant: {since:?}");

    // Every rank found rank 0 through the fabric and sees the whole world; nothing else of
    // rank 0's host is reachable from either sandbox.
    for (rank, (dir, rental)) in dirs.iter().zip(&rental_ids).enumerate() {
        let log = eventually(Duration::from_secs(30), "the rendezvous line", async || {
            std::fs::read_to_string(dir.join(format!("{rental}/workload.log")))
                .ok()
                .filter(|l| l.contains("other port"))
        })
        .await;
        assert!(log.contains(&format!("rendezvous rank={rank} world=2 ranks=0,1")), "rank {rank}: {log}");
        assert!(log.contains("other port refused"), "rank {rank}: {log}");
    }
    // A stranger on the fabric (an address of no member host) is not let in to the rendezvous.
    let stranger = tokio::net::TcpSocket::new_v4().unwrap();
    stranger.bind(format!("{}:0", addresses[2]).parse().unwrap()).unwrap();
    let mut stream = stranger.connect(format!("{}:{port}", addresses[0]).parse().unwrap()).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(3), tokio::io::AsyncReadExt::read(&mut stream, &mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "the forwarder closes a stranger's connection at once: {read:?}");
    drop(other);

    // Stopping the gang stops both; each is billed exactly its own seconds at the same start.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let res = renter.post(app.url(&format!("/api/v1/gangs/{id}/stop"))).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    for rental in &rental_ids {
        let ended = app.wait_for_rental_state(&renter, *rental, "ended", Duration::from_secs(15)).await;
        let billed = ended["rental"]["billed_seconds"].as_i64().unwrap();
        assert!(billed >= 2, "{ended}");
        assert_eq!(ended["rental"]["charged_micros"].as_i64().unwrap(), rentals::cost(3_600_000, 2, billed));
    }
    let ended = app.get_json(&renter, &format!("/api/v1/gangs/{id}")).await;
    assert_eq!(ended["state"], "ended", "{ended}");
    for agent in agents {
        agent.abort();
    }
}

/// Whether this process runs as root (its effective uid, from the kernel's own account).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").ok().is_some_and(|status| {
        status.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(2)) == Some("0")
    })
}

backend_tests!(a_gang_rendezvous_across_hosts_and_bills_together);
