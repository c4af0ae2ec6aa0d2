//! Benchmark (not a test): the server-rendered offer page and the offers API with 10,000 hosts
//! in the database, against a static file from the same server, on SQLite and PostgreSQL.
//!
//! ```sh
//! cargo run --release -p cardpool-server --example bench_offers            # both backends
//! cargo run --release -p cardpool-server --example bench_offers -- sqlite  # one
//! ```
//! Prints requests per second and latency percentiles per URL. Environment: `BENCH_HOSTS`
//! (10000), `BENCH_SECONDS` (10), `BENCH_CONCURRENCY` (16).
#![allow(clippy::print_stdout)] // printing the figures is the point

use cardpool_server::{Config, http};
use cardpool_service::{
    Services, Settings,
    entities::{gpus, host_prices, hosts, users},
    testing::{Backend, TestDb},
};
use chrono::Utc;
use sea_orm::{ActiveValue::Set, DatabaseConnection, EntityTrait};
use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

const MODELS: [(&str, i64, i64); 4] = [
    ("NVIDIA H100 80GB HBM3", 80, 2_490_000),
    ("NVIDIA A100-SXM4-80GB", 80, 1_290_000),
    ("NVIDIA L40S", 48, 790_000),
    ("NVIDIA GeForce RTX 4090", 24, 390_000),
];
const LOCATIONS: [&str; 6] = ["Frankfurt, DE", "Oregon, US", "Warsaw, PL", "Virginia, US", "Tokyo, JP", "Helsinki, FI"];

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

async fn seed(db: &DatabaseConnection, count: usize) {
    let now = Utc::now();
    let provider = users::Entity::insert(users::ActiveModel {
        email: Set("bench-provider@example.com".into()),
        password_hash: Set("not-a-hash".into()),
        is_provider: Set(true),
        is_admin: Set(false),
        session_epoch: Set(0),
        created_at: Set(now),
        updated_at: Set(now),
        ..Default::default()
    })
    .exec(db)
    .await
    .expect("provider")
    .last_insert_id;
    let facts = r#"{"hostname":"bench","cpu_model":"AMD EPYC 9654","cpu_cores":96,"ram_bytes":1099511627776,"disk_bytes":8796093022208,"os":"Debian 12","agent_version":"0.1.0","location":null}"#;
    for chunk_start in (0..count).step_by(500) {
        let chunk = chunk_start..(chunk_start + 500).min(count);
        let rows = chunk.clone().map(|i| hosts::ActiveModel {
            provider_id: Set(provider),
            hostname: Set(format!("bench-{i:05}")),
            location: Set(Some(LOCATIONS[i % LOCATIONS.len()].into())),
            credential_hash: Set(format!("bench-credential-{i}")),
            status: Set(if i % 10 == 9 { "offline" } else { "online" }.into()),
            agent_version: Set(Some("0.1.0".into())),
            facts: Set(Some(facts.into())),
            last_heartbeat_at: Set(Some(now)),
            created_at: Set(now),
            listed: Set(i % 20 != 19),
            ..Default::default()
        });
        hosts::Entity::insert_many(rows).exec_without_returning(db).await.expect("hosts");
    }
    let ids: Vec<i64> = hosts::Entity::find().all(db).await.expect("host ids").into_iter().map(|h| h.id).collect();
    for chunk in ids.chunks(100) {
        let mut gpu_rows = Vec::new();
        let mut price_rows = Vec::new();
        for &host_id in chunk {
            let (model, vram, price) = MODELS[host_id as usize % MODELS.len()];
            let n = [8, 4, 2, 1][host_id as usize % 4];
            for index in 0..n {
                gpu_rows.push(gpus::ActiveModel {
                    host_id: Set(host_id),
                    device_index: Set(index),
                    uuid: Set(format!("GPU-bench-{host_id}-{index}")),
                    model: Set(model.into()),
                    memory_bytes: Set(vram << 30),
                    pci_bus_id: Set(format!("00000000:{index:02X}:00.0")),
                    driver_version: Set("550.54.15".into()),
                    cuda_version: Set("12.4".into()),
                    cuda_version_num: Set(12004),
                    nvlink_peers: Set(if n >= 4 { r#"["peer"]"# } else { "[]" }.into()),
                    state: Set("available".into()),
                    updated_at: Set(now),
                    ..Default::default()
                });
            }
            price_rows.push(host_prices::ActiveModel {
                host_id: Set(host_id),
                gpu_model: Set(model.into()),
                on_demand_micros: Set(price + (host_id % 97) * 1_000),
                reserved_micros: Set(price / 5 * 4),
                spot_min_bid_micros: Set(price / 5 * 2),
                updated_at: Set(now),
                ..Default::default()
            });
        }
        gpus::Entity::insert_many(gpu_rows).exec_without_returning(db).await.expect("gpus");
        host_prices::Entity::insert_many(price_rows).exec_without_returning(db).await.expect("prices");
    }
}

struct Figures {
    requests: u64,
    errors: u64,
    latencies: Vec<Duration>,
    elapsed: Duration,
}

async fn hammer(url: String, concurrency: usize, duration: Duration) -> Figures {
    let client = reqwest::Client::builder().pool_max_idle_per_host(concurrency).build().expect("client");
    let deadline = Instant::now() + duration;
    let start = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let (mut ok, mut errors, mut latencies) = (0u64, 0u64, Vec::new());
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    match client.get(&url).send().await {
                        Ok(res) if res.status().is_success() => {
                            let _ = res.bytes().await;
                            ok += 1;
                            latencies.push(sent.elapsed());
                        }
                        _ => errors += 1,
                    }
                }
                (ok, errors, latencies)
            })
        })
        .collect();
    let mut figures = Figures { requests: 0, errors: 0, latencies: Vec::new(), elapsed: Duration::ZERO };
    for worker in workers {
        let (ok, errors, latencies) = worker.await.expect("worker");
        figures.requests += ok;
        figures.errors += errors;
        figures.latencies.extend(latencies);
    }
    figures.elapsed = start.elapsed();
    figures.latencies.sort();
    figures
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let count = env("BENCH_HOSTS", 10_000) as usize;
    let seconds = env("BENCH_SECONDS", 10);
    let concurrency = env("BENCH_CONCURRENCY", 16) as usize;
    let wanted = std::env::args().nth(1);
    let backends = [(Backend::Sqlite, "sqlite"), (Backend::Postgres, "postgres")];
    println!("offers benchmark: {count} hosts, {concurrency} concurrent clients, {seconds} s per URL");
    for (backend, name) in backends.into_iter().filter(|(_, n)| wanted.as_deref().is_none_or(|w| w == *n)) {
        let db = TestDb::new(backend).await;
        let conn = db.connect().await;
        let seeding = Instant::now();
        seed(&conn, count).await;
        cardpool_service::offers::rebuild_stock(&conn).await.expect("stock");
        println!("\n[{name}] seeded {count} hosts in {:.1} s", seeding.elapsed().as_secs_f64());
        let services = Services::new(conn, Settings::default()).await.expect("services");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        // Static files come from public/ (favicon.svg), the comparison a page is measured against.
        let config =
            Config { addr, site_root: concat!(env!("CARGO_MANIFEST_DIR"), "/../public").into(), ..Config::default() };
        let app = http::router(services, http::leptos_options(&config), http::HttpOptions::from_config(&config));
        tokio::spawn(async move {
            axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.expect("serve");
        });
        let base = Arc::new(format!("http://{addr}"));
        println!("{:<58} {:>9} {:>9} {:>9} {:>7}", "URL", "req/s", "p50 ms", "p99 ms", "errors");
        for path in [
            "/favicon.svg",
            "/offers",
            "/offers?gpu_model=NVIDIA+H100+80GB+HBM3&min_gpus=4&location=DE&sort=price_per_vram",
            "/api/v1/offers",
            "/api/v1/offers?kind=spot&max_price=0.50&sort=availability&page=20",
        ] {
            let f = hammer(format!("{base}{path}"), concurrency, Duration::from_secs(seconds)).await;
            println!(
                "{:<58} {:>9.1} {:>9.2} {:>9.2} {:>7}",
                if path.len() > 58 { &path[..58] } else { path },
                f.requests as f64 / f.elapsed.as_secs_f64(),
                percentile(&f.latencies, 0.50).as_secs_f64() * 1e3,
                percentile(&f.latencies, 0.99).as_secs_f64() * 1e3,
                f.errors
            );
        }
    }
}
