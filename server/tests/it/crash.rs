//! A replica killed with SIGKILL in the middle of a booking storm: every booking it or its peer
//! acknowledged is still there with its payment, no GPU is ever held by two rentals, the ledger
//! balances, and the killed replica starts again on the same database.
//!
//! Real processes (the `cardpool` binary), one PostgreSQL database, the test NATS: what a load
//! balancer in front of two replicas sees when one of them dies.

use cardpool_domain::{
    account::CreateApiTokenRequest,
    offers::RentalKind,
    rentals::{BookOfferRequest, Rental, Workload},
};
use cardpool_service::{
    Services, Settings, api_tokens, ledger, rentals,
    testing::{self, Backend, TestDb},
};
use reqwest::{Client, StatusCode};
use sea_orm::{ConnectionTrait, Statement};
use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One `cardpool serve` process of the cluster.
struct Replica {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Replica {
    async fn start(database_url: &str, name: &str) -> Replica {
        let dir = tempfile::tempdir().unwrap().keep();
        let log = dir.join(format!("{name}.log"));
        let port = free_port();
        let output = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_cardpool"))
            .current_dir(&dir)
            .args(["serve", "--addr", &format!("127.0.0.1:{port}"), "--database-url", database_url])
            .env_remove("CARDPOOL_CONFIG")
            .env_remove("CARDPOOL_STRIPE_LOCAL")
            .env("CARDPOOL_NATS_URL", super::cluster::nats_url())
            .env("CARDPOOL_SSH_ADDR", format!("127.0.0.1:{}", free_port()))
            // The seeded hosts have no agents: they must not be judged silent mid-test.
            .env("CARDPOOL_HOST_OFFLINE_GRACE_SECS", "600")
            // Bookings never reach Stripe; a cluster only refuses to start without keys.
            .env("CARDPOOL_STRIPE_SECRET_KEY", "sk_test_crash")
            .env("CARDPOOL_STRIPE_WEBHOOK_SECRET", "whsec_crash")
            .stdout(Stdio::from(output.try_clone().unwrap()))
            .stderr(Stdio::from(output))
            .spawn()
            .unwrap();
        let mut replica = Replica { child, url: format!("http://127.0.0.1:{port}"), log };
        let started = Instant::now();
        loop {
            if reqwest::get(format!("{}/readyz", replica.url)).await.is_ok_and(|r| r.status().is_success()) {
                return replica;
            }
            if let Ok(Some(status)) = replica.child.try_wait() {
                panic!("replica {name} exited ({status}): {}", replica.log_text());
            }
            assert!(started.elapsed() < Duration::from_secs(60), "replica {name} not ready: {}", replica.log_text());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: no drain, no goodbye to agents or browsers.
    fn kill_9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `gpu_count` GPUs of `host`: on demand, or reserved for the hour from `reserve_at`.
fn booking(host_id: i64, gpu_count: u32, reserve_at: Option<chrono::DateTime<chrono::Utc>>) -> BookOfferRequest {
    BookOfferRequest {
        host_id,
        gpu_model: testing::TEST_GPU_MODEL.into(),
        gpu_count,
        kind: if reserve_at.is_some() { RentalKind::Reserved } else { RentalKind::OnDemand },
        workload: Workload { command: Some("python train.py".into()), ..Workload::default() },
        bid_micros: None,
        starts_at: reserve_at,
        hours: reserve_at.map(|_| 1),
        stop_when_idle: false,
        limits: Default::default(),
    }
}

/// A booking the cluster answered 201 for.
struct Acknowledged {
    renter: usize,
    rental: Rental,
}

/// On-demand bookings (1–2 GPUs on the first two hosts, asked to stop a moment later: with no
/// agent to release them they keep their GPUs, so most later ones are refused) and one-hour
/// reservations up to two days ahead (prepaid, on the other two), from `renter`, through `urls[first]` until it stops answering, then the
/// other replica, as a load balancer would.
async fn storm(
    renter: usize,
    token: String,
    hosts: Vec<i64>,
    urls: [String; 2],
    until: Instant,
    acknowledged: Arc<Mutex<Vec<Acknowledged>>>,
) {
    let client = Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let mut replica = renter % 2;
    let mut n = renter as u64 + 1;
    while Instant::now() < until {
        n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        // An open-ended on-demand hold can never sit beside a future reservation on one GPU,
        // so the two kinds book hosts of their own and both keep being accepted.
        let reserved = (n >> 60).is_multiple_of(4);
        let host = hosts[(n >> 33) as usize % 2 + if reserved { 2 } else { 0 }];
        let request = if reserved {
            booking(host, 1, Some(chrono::Utc::now() + chrono::Duration::hours(1 + (n >> 50) as i64 % 48)))
        } else {
            booking(host, 1 + ((n >> 40) % 2) as u32, None)
        };
        let url = &urls[replica];
        let answer = client.post(format!("{url}/api/v1/rentals")).bearer_auth(&token).json(&request).send().await;
        let Ok(answer) = answer else {
            replica = 1 - replica;
            continue;
        };
        match answer.status() {
            StatusCode::CREATED => {
                // Acknowledged once the whole answer is read: a replica that dies before it has
                // sent it has acknowledged nothing.
                let Ok(rental) = answer.json::<Rental>().await else { continue };
                let id = rental.id;
                acknowledged.lock().unwrap().push(Acknowledged { renter, rental });
                if !reserved {
                    let _ = client.post(format!("{url}/api/v1/rentals/{id}/stop")).bearer_auth(&token).send().await;
                }
            }
            StatusCode::CONFLICT | StatusCode::PAYMENT_REQUIRED => {}
            other => panic!("booking answered {other}: {}", answer.text().await.unwrap_or_default()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_mid_booking_storm_loses_nothing_it_acknowledged() {
    let db = TestDb::new(Backend::Postgres).await;
    let services = Services::new(db.connect().await, Settings::default()).await.unwrap();
    let provider = testing::provider(&services, "provider@crash.example").await;
    let mut hosts = Vec::new();
    for name in ["on-demand-1", "on-demand-2", "reserved-1", "reserved-2"] {
        hosts.push(testing::host(&services, &provider, name).gpus(8).await);
    }
    let mut renters = Vec::new();
    for i in 0..12 {
        let renter = testing::renter(&services, &format!("renter-{i}@crash.example")).dollars(10_000).await;
        let token = api_tokens::create_api_token(&services, &renter, &CreateApiTokenRequest { name: "storm".into() })
            .await
            .unwrap()
            .secret;
        renters.push((renter, token));
    }

    let a = Replica::start(&db.url, "a").await;
    let mut b = Replica::start(&db.url, "b").await;
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let until = Instant::now() + Duration::from_secs(5);
    let clients: Vec<_> = renters
        .iter()
        .enumerate()
        .map(|(i, (_, token))| {
            let urls = [a.url.clone(), b.url.clone()];
            tokio::spawn(storm(i, token.clone(), hosts.clone(), urls, until, acknowledged.clone()))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let before_kill = acknowledged.lock().unwrap().len();
    b.kill_9();
    for client in clients {
        client.await.unwrap();
    }
    let acknowledged = std::mem::take(&mut *acknowledged.lock().unwrap());
    assert!(before_kill >= 10, "the storm was under way when B died ({before_kill} bookings): {}", b.log_text());
    assert!(acknowledged.len() > before_kill, "A kept booking after B died: {}", a.log_text());
    let reserved = acknowledged.iter().filter(|ack| ack.rental.kind == RentalKind::Reserved).count();
    eprintln!(
        "{} bookings acknowledged ({reserved} reservations), {before_kill} before B was killed",
        acknowledged.len()
    );

    // Everything acknowledged is there, as it was answered, with its money.
    for Acknowledged { renter, rental } in &acknowledged {
        let stored = rentals::get_rental(&services, &renters[*renter].0, rental.id).await.unwrap();
        assert_eq!(stored.rental.kind, rental.kind, "rental {}", rental.id);
        assert_eq!(stored.rental.gpu_count, rental.gpu_count, "rental {}", rental.id);
        if rental.kind == RentalKind::Reserved {
            let prepaid = services
                .db
                .query_one_raw(Statement::from_sql_and_values(
                    services.db.get_database_backend(),
                    "SELECT COUNT(*) AS n FROM ledger_transactions WHERE reference = $1",
                    [format!("rental-{}-prepay", rental.id).into()],
                ))
                .await
                .unwrap()
                .and_then(|row| row.try_get::<i64>("", "n").ok());
            assert_eq!(prepaid, Some(1), "reservation {} was prepaid exactly once", rental.id);
        }
    }
    assert_eq!(overlapping_holds(&services).await, 0, "no GPU is ever held by two rentals at once");
    assert!(ledger::verify(&services.db).await.unwrap().is_sound(), "the ledger balances");

    // B comes back on the same database and serves bookings again.
    drop(b);
    let b = Replica::start(&db.url, "b-again").await;
    let answer = Client::new()
        .post(format!("{}/api/v1/rentals", b.url))
        .bearer_auth(&renters[0].1)
        .json(&booking(hosts[0], 1, None))
        .send()
        .await
        .unwrap();
    assert!(
        matches!(answer.status(), StatusCode::CREATED | StatusCode::CONFLICT),
        "{}",
        answer.text().await.unwrap_or_default()
    );
    assert_eq!(overlapping_holds(&services).await, 0);
    drop(a);
}

/// Pairs of holds, active or released, on one GPU over overlapping time (an open hold has no end).
async fn overlapping_holds(services: &Services) -> i64 {
    services
        .db
        .query_one_raw(Statement::from_string(
            services.db.get_database_backend(),
            "SELECT COUNT(*) AS n FROM rental_gpus a JOIN rental_gpus b ON a.gpu_id = b.gpu_id AND a.id < b.id \
             AND (b.ends_at IS NULL OR a.starts_at < b.ends_at) AND (a.ends_at IS NULL OR b.starts_at < a.ends_at)",
        ))
        .await
        .unwrap()
        .and_then(|row| row.try_get::<i64>("", "n").ok())
        .unwrap_or(-1)
}
