//! Benchmark (not a test): bookings per second under contention, on SQLite and PostgreSQL,
//! through the service layer a booking request runs (HTTP adds the same small cost to every
//! request and is measured by `bench_offers`).
//!
//! ```sh
//! cargo run --release -p cardpool-server --example bench_bookings            # both backends
//! cargo run --release -p cardpool-server --example bench_bookings -- sqlite  # one
//! BENCH_HOSTS=64 BENCH_REPLICAS=2 cargo run --release -p cardpool-server --example bench_bookings -- postgres
//! ```
//! `BENCH_CLIENTS` renters (32) book 1–4 GPUs at a time on `BENCH_HOSTS` hosts (4) of 8 GPUs
//! for `BENCH_SECONDS` (10); every accepted rental is stopped and ended a moment later (as its
//! agent would), so GPUs keep changing hands. With 4 hosts most attempts find their host full
//! (32 GPUs bound what can be accepted); with 64 nearly every attempt is accepted, which is the
//! booking path's own throughput. On PostgreSQL, `BENCH_REPLICAS` (1) sets of services, each
//! with its own connection pool and, when more than one, a bus over the NATS at
//! `CARDPOOL_TEST_NATS_URL`, share the renters as a cluster's replicas would. Afterwards every
//! hold ever made is checked pairwise: no GPU was held by two rentals over overlapping time,
//! and the ledger balances.
//!
//! `BENCH_PROFILE=1` also prints, per accepted booking, the statements the services issued
//! (counted and timed from the caller's side, so a round trip to SQLite's connection thread or
//! to PostgreSQL is included): where the time of a booking goes.
#![allow(clippy::print_stdout)] // printing the figures is the point

use cardpool_domain::{
    AppError,
    offers::RentalKind,
    rentals::{BookOfferRequest, RentalState, Workload},
};
use cardpool_service::{
    Services, Settings, ledger, rentals,
    testing::{self, Backend, TestDb},
};
use sea_orm::{ConnectionTrait, Statement};
use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

const MODEL: &str = testing::TEST_GPU_MODEL;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[derive(Default)]
struct Tally {
    accepted: AtomicU64,
    rejected: AtomicU64,
    errors: AtomicU64,
}

/// Statements seen, by their SQL text: how many and how long in all.
#[derive(Default)]
struct Profile(Mutex<HashMap<String, (u64, Duration)>>);

impl Profile {
    /// Connects with every statement counted into this profile.
    async fn connect(self: &Arc<Self>, db: &TestDb) -> sea_orm::DatabaseConnection {
        let mut conn = db.connect().await;
        let profile = self.clone();
        conn.set_metric_callback(move |info| {
            let mut seen = profile.0.lock().expect("profile");
            let entry = seen.entry(info.statement.sql.clone()).or_default();
            entry.0 += 1;
            entry.1 += info.elapsed;
        });
        conn
    }

    /// The statements seen so far, forgotten here.
    fn take(&self) -> Vec<(String, (u64, Duration))> {
        self.0.lock().expect("profile").drain().collect()
    }
}

/// Prints the statements by total time, each per accepted booking.
fn print_profile(mut seen: Vec<(String, (u64, Duration))>, accepted: u64) {
    seen.sort_by_key(|(_, (_, total))| std::cmp::Reverse(*total));
    let per = accepted.max(1) as f64;
    let (count, total) = seen.iter().fold((0, Duration::ZERO), |(n, t), (_, (c, d))| (n + c, t + *d));
    println!(
        "  {:.1} statements and {:.2} ms of statement time per accepted booking; the most costly:",
        count as f64 / per,
        total.as_secs_f64() * 1e3 / per
    );
    for (sql, (n, total)) in seen.iter().take(25) {
        let sql: String = sql.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(110).collect();
        println!(
            "  {:>6.2}× {:>7.1} µs each {:>6.3} ms/booking  {sql}",
            *n as f64 / per,
            total.as_secs_f64() * 1e6 / *n as f64,
            total.as_secs_f64() * 1e3 / per
        );
    }
}

#[tokio::main]
async fn main() {
    let clients = env("BENCH_CLIENTS", 32) as usize;
    let host_count = env("BENCH_HOSTS", 4) as usize;
    let seconds = env("BENCH_SECONDS", 10);
    let replica_count = env("BENCH_REPLICAS", 1).max(1) as usize;
    let wanted = std::env::args().nth(1);
    let profiling = env("BENCH_PROFILE", 0) == 1;
    println!(
        "booking benchmark: {clients} concurrent renters, {host_count} hosts × 8 GPUs, {seconds} s per backend, 1–4 GPUs per booking"
    );
    println!(
        "{:<10} {:>8} {:>10} {:>12} {:>10} {:>8} {:>10} {:>8}",
        "backend", "replicas", "attempts/s", "bookings/s", "rejected", "errors", "overlaps", "ledger"
    );
    for (backend, name) in [(Backend::Sqlite, "sqlite"), (Backend::Postgres, "postgres")]
        .into_iter()
        .filter(|(_, n)| wanted.as_deref().is_none_or(|w| w == *n))
    {
        let db = TestDb::new(backend).await;
        let profile = Arc::new(Profile::default());
        let connect = async || if profiling { profile.connect(&db).await } else { db.connect().await };
        let services = Services::new(connect().await, Settings::default()).await.expect("services");
        // SQLite is one process's file: its replicas are PostgreSQL's.
        let replicas = if backend == Backend::Postgres { replica_count } else { 1 };
        let mut fleet = vec![services.clone()];
        if replicas > 1 {
            let nats = std::env::var("CARDPOOL_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
            fleet.clear();
            for _ in 0..replicas {
                let settings = Settings { nats_url: Some(nats.clone()), ..Settings::default() };
                fleet.push(Services::new(connect().await, settings).await.expect("replica"));
            }
        }
        let provider = testing::provider(&services, "provider@bench.example").await;
        let mut host_ids = Vec::new();
        for i in 0..host_count {
            host_ids.push(testing::host(&services, &provider, &format!("bench-{i}")).gpus(8).await);
        }
        let mut renters = Vec::new();
        for i in 0..clients {
            renters.push(testing::renter(&services, &format!("renter-{i}@bench.example")).dollars(1_000_000).await);
        }
        let tally = Arc::new(Tally::default());
        profile.take(); // the set-up's statements are not the bench's
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for (i, renter) in renters.into_iter().enumerate() {
            let (services, tally, host_ids) = (fleet[i % fleet.len()].clone(), tally.clone(), host_ids.clone());
            tasks.push(tokio::spawn(async move {
                let mut n = i as u64;
                while Instant::now() < deadline {
                    n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let request = BookOfferRequest {
                        host_id: host_ids[(n >> 33) as usize % host_ids.len()],
                        gpu_model: MODEL.into(),
                        gpu_count: 1 + ((n >> 40) % 4) as u32,
                        kind: RentalKind::OnDemand,
                        workload: Workload { command: Some("python train.py".into()), ..Workload::default() },
                        bid_micros: None,
                        starts_at: None,
                        hours: None,
                        stop_when_idle: false,
                        limits: Default::default(),
                    };
                    match rentals::book_offer(&services, &renter, &request).await {
                        Ok(rental) => {
                            tally.accepted.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis((n >> 50) % 20)).await;
                            let ended = match rentals::stop_rental(&services, &renter, rental.id).await {
                                Ok(_) => rentals::transition(&services, rental.id, RentalState::Ended, "bench").await,
                                Err(err) => Err(err),
                            };
                            if ended.is_err() {
                                tally.errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(AppError::Conflict(_)) => {
                            tally.rejected.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            tally.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }));
        }
        for task in tasks {
            task.await.expect("client");
        }
        let elapsed = started.elapsed().as_secs_f64();
        let statements = profile.take();
        // Every hold ever made, active or released (released holds keep their real interval).
        let overlaps = services
            .db
            .query_one_raw(Statement::from_string(
                services.db.get_database_backend(),
                "SELECT COUNT(*) AS n FROM rental_gpus a JOIN rental_gpus b ON a.gpu_id = b.gpu_id AND a.id < b.id \
                 AND a.starts_at < b.ends_at AND b.starts_at < a.ends_at",
            ))
            .await
            .expect("overlap query")
            .and_then(|row| row.try_get::<i64>("", "n").ok())
            .unwrap_or(-1);
        let sound = ledger::verify(&services.db).await.expect("ledger").is_sound();
        let accepted = tally.accepted.load(Ordering::Relaxed);
        let rejected = tally.rejected.load(Ordering::Relaxed);
        println!(
            "{:<10} {:>8} {:>10.1} {:>12.1} {:>10} {:>8} {:>10} {:>8}",
            name,
            replicas,
            (accepted + rejected) as f64 / elapsed,
            accepted as f64 / elapsed,
            rejected,
            tally.errors.load(Ordering::Relaxed),
            overlaps,
            if sound { "sound" } else { "UNSOUND" }
        );
        if profiling {
            print_profile(statements, accepted);
        }
    }
}
