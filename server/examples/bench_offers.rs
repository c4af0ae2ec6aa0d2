//! Benchmark (not a test): the release server as people get it, at market scale.
//!
//! Seeds 10,000 hosts into a fresh database, starts the real `target/release/cardpool serve`
//! on it (the site cargo-leptos built under `target/site`), and prints, per backend:
//! - the shipped bundle (JavaScript, wasm, stylesheet) raw and as sent to a browser that
//!   accepts brotli or gzip, and the caching headers it gets;
//! - requests per second and latency of `/healthz`, static files served from memory, the
//!   server-rendered `/offers` (for visitors, kept between market changes by the server's
//!   page cache, and for someone signed in, rendered every time) and the offers API, at full
//!   load (`BENCH_CONCURRENCY` clients back to back), and `/offers` against a static file of
//!   the same server side by side;
//! - the default offer search at half of the capacity just measured: an open-loop arrival
//!   rate, latency counted from each request's scheduled start (no coordinated omission).
//!
//! ```sh
//! cargo leptos build --release --precompress --split   # the site and the server binary
//! cargo run --release -p cardpool-server --example bench_offers            # both backends
//! cargo run --release -p cardpool-server --example bench_offers -- sqlite  # one
//! ```
//! `scripts/bench.sh` runs both, then Lighthouse. Environment: `BENCH_HOSTS` (10000),
//! `BENCH_SECONDS` (10), `BENCH_CONCURRENCY` (16), `CARDPOOL_BIN` (target/release/cardpool).
#![allow(clippy::print_stdout)] // printing the figures is the point

use cardpool_service::{
    entities::{gpus, host_prices, hosts, users},
    testing::{Backend, TestDb},
};
use chrono::Utc;
use sea_orm::{ActiveValue::Set, DatabaseConnection, EntityTrait};
use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
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
/// What a browser sends.
const BROWSER_ENCODINGS: &str = "gzip, deflate, br, zstd";

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

/// The release server on `database_url`, stopped when dropped.
struct Server {
    child: Child,
    base: String,
    _scratch: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_server(database_url: &str) -> Server {
    let workspace = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let bin = std::env::var("CARDPOOL_BIN").map(PathBuf::from).unwrap_or(workspace.join("target/release/cardpool"));
    assert!(
        bin.exists(),
        "{} is missing: run `cargo leptos build --release --precompress --split` first",
        bin.display()
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let scratch = tempfile::tempdir().expect("scratch dir");
    let child = Command::new(&bin)
        .current_dir(scratch.path())
        .args(["serve", "--addr", &format!("127.0.0.1:{port}"), "--database-url", database_url, "--site-root"])
        .arg(workspace.join("target/site"))
        .env("CARDPOOL_STRIPE_LOCAL", "true")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("start the server");
    let server = Server { child, base: format!("http://127.0.0.1:{port}"), _scratch: scratch };
    let client = reqwest::Client::new();
    for _ in 0..240 {
        if client.get(format!("{}/healthz", server.base)).send().await.is_ok_and(|r| r.status().is_success()) {
            return server;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the server did not answer /healthz within a minute");
}

struct Figures {
    requests: u64,
    errors: u64,
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl Figures {
    fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
    fn ms(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        self.latencies[((self.latencies.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e3
    }
}

/// A browser's client: its encodings, and its session cookie when `cookie` is set.
fn client(concurrency: usize, cookie: Option<&str>) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(reqwest::header::ACCEPT_ENCODING, BROWSER_ENCODINGS.parse().expect("header"));
    if let Some(cookie) = cookie {
        headers.insert(reqwest::header::COOKIE, cookie.parse().expect("cookie"));
    }
    reqwest::Client::builder().pool_max_idle_per_host(concurrency).default_headers(headers).build().expect("client")
}

async fn fetch(client: &reqwest::Client, url: &str) -> bool {
    match client.get(url).send().await {
        Ok(res) if res.status().is_success() => res.bytes().await.is_ok(),
        _ => false,
    }
}

/// `concurrency` clients sending back to back for `duration`: the server's capacity.
async fn closed_loop(url: &str, concurrency: usize, duration: Duration, cookie: Option<&str>) -> Figures {
    let client = client(concurrency, cookie);
    let deadline = Instant::now() + duration;
    let start = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, url) = (client.clone(), url.to_owned());
            tokio::spawn(async move {
                let (mut ok, mut errors, mut latencies) = (0u64, 0u64, Vec::new());
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    if fetch(&client, &url).await {
                        ok += 1;
                        latencies.push(sent.elapsed());
                    } else {
                        errors += 1;
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

/// Requests started at a fixed `rate` whether or not earlier ones have answered; each
/// latency runs from the request's scheduled start.
async fn open_loop(url: &str, rate: f64, duration: Duration, cookie: Option<&str>) -> Figures {
    let client = client(64, cookie);
    let interval = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    let mut next = start;
    while next < start + duration {
        tokio::time::sleep_until(next.into()).await;
        let (client, url, scheduled) = (client.clone(), url.to_owned(), next);
        tasks.push(tokio::spawn(async move { fetch(&client, &url).await.then(|| scheduled.elapsed()) }));
        next += interval;
    }
    let mut figures = Figures { requests: 0, errors: 0, latencies: Vec::new(), elapsed: duration };
    for task in tasks {
        match task.await.expect("request") {
            Some(latency) => {
                figures.requests += 1;
                figures.latencies.push(latency);
            }
            None => figures.errors += 1,
        }
    }
    figures.latencies.sort();
    figures
}

/// A new account's session cookie (`name=value`), signed up through the API.
async fn sign_up(base: &str) -> String {
    let email = format!("bench-{}@example.com", std::process::id());
    let res = reqwest::Client::new()
        .post(format!("{base}/api/v1/auth/sign-up"))
        .json(&serde_json::json!({"email": email, "password": "a bench password"}))
        .send()
        .await
        .expect("sign up");
    assert!(res.status().is_success(), "sign-up: {}", res.status());
    let cookie = res.headers().get(reqwest::header::SET_COOKIE).and_then(|v| v.to_str().ok()).expect("session cookie");
    cookie.split(';').next().unwrap_or_default().to_owned()
}

/// The bundle's files as the page links them: `(label, path)`.
async fn bundle_paths(base: &str) -> Vec<(&'static str, String)> {
    let html = reqwest::get(format!("{base}/")).await.expect("home page").text().await.expect("html");
    let find = |suffix: &str| {
        html.split('"').find(|part| part.starts_with("/pkg/") && part.ends_with(suffix)).map(str::to_owned)
    };
    [("JavaScript", find(".js")), ("wasm", find(".wasm")), ("stylesheet", find(".css"))]
        .into_iter()
        .map(|(label, path)| (label, path.unwrap_or_else(|| panic!("the home page links no {label}"))))
        .collect()
}

async fn print_bundle(base: &str, paths: &[(&'static str, String)]) {
    println!("{:<12} {:<44} {:>10} {:>10} {:>10}  cache-control", "bundle", "path", "raw", "gzip", "brotli");
    let mut totals = [0usize; 3];
    for (label, path) in paths {
        let mut sizes = [0usize; 3];
        let mut cache = String::new();
        for (i, encoding) in ["identity", "gzip", "br"].into_iter().enumerate() {
            let res = reqwest::Client::new()
                .get(format!("{base}{path}"))
                .header("accept-encoding", encoding)
                .send()
                .await
                .expect("bundle file");
            let sent = res.headers().get("content-encoding").and_then(|v| v.to_str().ok()).unwrap_or("identity");
            assert_eq!(sent, encoding, "{path} is not served with {encoding}");
            cache = res.headers().get("cache-control").and_then(|v| v.to_str().ok()).unwrap_or("none").to_owned();
            sizes[i] = res.bytes().await.expect("body").len();
        }
        if *label != "stylesheet" {
            for i in 0..3 {
                totals[i] += sizes[i];
            }
        }
        println!("{label:<12} {path:<44} {:>10} {:>10} {:>10}  {cache}", sizes[0], sizes[1], sizes[2]);
    }
    println!(
        "{:<12} {:<44} {:>10} {:>10} {:>10}  (each page's chunks come on top: end2end/bench/first-load.mjs)",
        "shell code", "JavaScript + wasm", totals[0], totals[1], totals[2]
    );
}

#[tokio::main]
async fn main() {
    let count = env("BENCH_HOSTS", 10_000) as usize;
    let seconds = Duration::from_secs(env("BENCH_SECONDS", 10));
    let concurrency = env("BENCH_CONCURRENCY", 16) as usize;
    let wanted = std::env::args().nth(1);
    let backends = [(Backend::Sqlite, "sqlite"), (Backend::Postgres, "postgres")];
    println!(
        "offers benchmark: release server, {count} hosts, {concurrency} concurrent clients, {} s per URL",
        seconds.as_secs()
    );
    for (backend, name) in backends.into_iter().filter(|(_, n)| wanted.as_deref().is_none_or(|w| w == *n)) {
        let db = TestDb::new(backend).await;
        let conn = db.connect().await;
        let seeding = Instant::now();
        seed(&conn, count).await;
        cardpool_service::stock::rebuild_stock(&conn).await.expect("stock");
        drop(conn);
        println!("\n[{name}] seeded {count} hosts in {:.1} s", seeding.elapsed().as_secs_f64());
        let server = start_server(&db.url).await;
        let base = Arc::new(server.base.clone());
        let bundle = bundle_paths(&base).await;
        print_bundle(&base, &bundle).await;

        let css = bundle.iter().find(|(label, _)| *label == "stylesheet").map(|(_, p)| p.clone()).expect("css");
        let wasm = bundle.iter().find(|(label, _)| *label == "wasm").map(|(_, p)| p.clone()).expect("wasm");
        println!("\n{:<58} {:>9} {:>9} {:>9} {:>7}", "URL (full load)", "req/s", "p50 ms", "p99 ms", "errors");
        let mut rates = std::collections::HashMap::new();
        for path in [
            "/healthz".to_owned(),
            "/favicon.svg".to_owned(),
            css.clone(),
            wasm,
            "/offers".to_owned(),
            "/offers?gpu_model=NVIDIA+H100+80GB+HBM3&min_gpus=4&location=DE&sort=price_per_vram".to_owned(),
            "/api/v1/offers".to_owned(),
            "/api/v1/offers?kind=spot&max_price=0.50&sort=availability&page=20".to_owned(),
        ] {
            let f = closed_loop(&format!("{base}{path}"), concurrency, seconds, None).await;
            let shown = if path.len() > 58 { &path[..58] } else { &path[..] };
            println!("{shown:<58} {:>9.1} {:>9.2} {:>9.2} {:>7}", f.rate(), f.ms(0.50), f.ms(0.99), f.errors);
            rates.insert(path, f.rate());
        }
        // Someone signed in is never served the page kept for visitors: their own rendering.
        let cookie = sign_up(&base).await;
        let f = closed_loop(&format!("{base}/offers"), concurrency, seconds, Some(&cookie)).await;
        println!(
            "{:<58} {:>9.1} {:>9.2} {:>9.2} {:>7}",
            "/offers (signed in)",
            f.rate(),
            f.ms(0.50),
            f.ms(0.99),
            f.errors
        );
        let signed_in_rate = f.rate();
        println!(
            "/offers ÷ static stylesheet from memory: {:.2} for visitors, {:.2} signed in (goal >= 0.25)",
            rates["/offers"] / rates[&css].max(f64::MIN_POSITIVE),
            signed_in_rate / rates[&css].max(f64::MIN_POSITIVE)
        );

        println!(
            "\n{:<58} {:>9} {:>9} {:>9} {:>7}",
            "URL (half of capacity, open loop)", "req/s", "p50 ms", "p99 ms", "errors"
        );
        // The control: a static file from memory at the visitors' page rate. Its tail is what
        // this machine and the load generator in this process give any request at that rate.
        for (path, rate, cookie) in [
            (css.as_str(), rates["/offers"] / 2.0, None),
            ("/offers", rates["/offers"] / 2.0, None),
            ("/api/v1/offers", rates["/api/v1/offers"] / 2.0, None),
            ("/offers (signed in)", signed_in_rate / 2.0, Some(cookie.as_str())),
        ] {
            let url = format!("{base}{}", path.trim_end_matches(" (signed in)"));
            let f = open_loop(&url, rate, seconds, cookie).await;
            let shown = if path.len() > 58 { &path[..58] } else { path };
            println!(
                "{shown:<58} {:>9.1} {:>9.2} {:>9.2} {:>7}   (goal p99 < 50 ms)",
                f.rate(),
                f.ms(0.50),
                f.ms(0.99),
                f.errors
            );
        }
        drop(server);
    }
}
