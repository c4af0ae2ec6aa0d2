//! Benchmark (not a test): the money pages' reads over a ledger of `BENCH_POSTINGS` (10
//! million) postings, on SQLite and PostgreSQL, and the hourly audit's memory.
//!
//! ```sh
//! cargo run --release -p cardpool-server --example bench_ledger            # both backends
//! cargo run --release -p cardpool-server --example bench_ledger -- sqlite  # one
//! ```
//! The ledger is seeded in SQL: half as many usage transactions as postings, spread over 60
//! days, each moving money from one of 1,000 renters' wallets to one of 100 providers'
//! earnings; one renter and one provider are hot (a tenth of all transactions each). Then, for
//! the hot ones and for ordinary ones, `BENCH_ROUNDS` (200) timed calls each of: the wallet,
//! the newest page of the wallet history, a page deep in it, the earnings and the earnings
//! history; p50/p99 printed. Last, `ledger::verify` (the hourly audit) with the process's
//! resident memory before and after.
#![allow(clippy::print_stdout)] // printing the figures is the point

use cardpool_domain::{account::Roles, payments::HistoryQuery};
use cardpool_service::{
    Services, Settings,
    auth::{Credential, Principal},
    ledger::{self, Book},
    payments, payouts,
    testing::{self, Backend},
};
use sea_orm::{ConnectionTrait, DbBackend};
use std::time::{Duration, Instant};

const RENTERS: i64 = 1000;
const PROVIDERS: i64 = 100;
/// Account ids: renters' wallets 1..=1000, providers' earnings 1001..=1100, the fees 1101.
const FEES: i64 = RENTERS + PROVIDERS + 1;
const HOT_RENTER: i64 = 1;
const HOT_PROVIDER: i64 = RENTERS + 1;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Seeds accounts, `transactions` usage transactions and their postings, then the cached
/// balances, all in SQL.
async fn seed(services: &Services, transactions: i64) {
    let db = &services.db;
    let backend = db.get_database_backend();
    let exec = |sql: String| async move {
        db.execute_unprepared(&sql).await.unwrap_or_else(|e| panic!("{e}: {sql}"));
    };
    // Accounts: user ids are fabricated (the reads below take a principal, not a user row).
    let mut values = Vec::new();
    for id in 1..=RENTERS {
        values.push(format!("({id}, 'wallet:{id}', 'wallet', 0, CURRENT_TIMESTAMP)"));
    }
    for id in RENTERS + 1..=RENTERS + PROVIDERS {
        values.push(format!("({id}, 'earnings:{id}', 'earnings', 0, CURRENT_TIMESTAMP)"));
    }
    values.push(format!("({FEES}, 'platform_fees', 'platform_fees', 0, CURRENT_TIMESTAMP)"));
    exec(format!(
        "INSERT INTO ledger_accounts (id, code, kind, balance_micros, created_at) VALUES {}",
        values.join(", ")
    ))
    .await;
    let span_secs = 60 * 24 * 3600;
    let (series, at) = match backend {
        DbBackend::Postgres => (
            format!("SELECT g AS x FROM generate_series(1, {transactions}) g"),
            format!("now() - make_interval(secs => ({transactions} - x) * {span_secs}.0 / {transactions})"),
        ),
        _ => (
            format!(
                "WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s WHERE x < {transactions}) SELECT x FROM s"
            ),
            format!(
                "strftime('%Y-%m-%d %H:%M:%f+00:00', 'now', '-' || (({transactions} - x) * {span_secs} / {transactions}) || ' seconds')"
            ),
        ),
    };
    exec(format!(
        "INSERT INTO ledger_transactions (id, kind, reference, description, created_at) \
         SELECT x, 'usage', 'bench-' || x, 'Rental #' || x || ': 1x H100 for 60 s', {at} FROM ({series}) q"
    ))
    .await;
    // Every tenth transaction is the hot renter's (and, shifted, the hot provider's).
    let renter = format!("CASE WHEN x % 10 = 0 THEN {HOT_RENTER} ELSE 2 + x % {} END", RENTERS - 1);
    let provider = format!("CASE WHEN x % 10 = 3 THEN {HOT_PROVIDER} ELSE {} + x % {} END", RENTERS + 2, PROVIDERS - 1);
    exec(format!(
        "INSERT INTO ledger_postings (transaction_id, ledger_account_id, amount_micros) \
         SELECT x, {renter}, -60000 FROM ({series}) q"
    ))
    .await;
    exec(format!(
        "INSERT INTO ledger_postings (transaction_id, ledger_account_id, amount_micros) \
         SELECT x, {provider}, 60000 FROM ({series}) q"
    ))
    .await;
    // Cached balances from the postings (wallets go negative: their top-ups are not seeded;
    // the accounts belong to nobody, so the audit does not flag them).
    exec(
        "UPDATE ledger_accounts SET balance_micros = COALESCE((SELECT SUM(amount_micros) FROM ledger_postings p \
         WHERE p.ledger_account_id = ledger_accounts.id), 0)"
            .into(),
    )
    .await;
    exec("ANALYZE".into()).await;
}

fn principal(user_id: i64, provider: bool) -> Principal {
    Principal {
        user_id,
        email: format!("bench{user_id}@example.com"),
        roles: Roles { renter: true, provider, admin: false },
        credential: Credential::Session,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn time<F: std::future::Future>(rounds: u64, mut call: impl FnMut(u64) -> F) -> (Duration, Duration) {
    let mut took = Vec::new();
    for i in 0..rounds {
        let start = Instant::now();
        call(i).await;
        took.push(start.elapsed());
    }
    took.sort();
    (percentile(&took, 0.5), percentile(&took, 0.99))
}

async fn run(backend: Backend, postings: u64, rounds: u64) {
    let (_db, services) = testing::services(backend, Settings::default()).await;
    let transactions = i64::try_from(postings / 2).unwrap_or(i64::MAX);
    let start = Instant::now();
    seed(&services, transactions).await;
    println!("{backend:?}: seeded {} postings in {:.0} s", transactions * 2, start.elapsed().as_secs_f64());
    let s = &services;
    for (who, renter, provider) in [("hot", HOT_RENTER, HOT_PROVIDER), ("ordinary", 500, RENTERS + 50)] {
        let (renter, provider) = (principal(renter, false), principal(provider, true));
        let deep = ledger::recent_entries(&s.db, Book::Wallet(renter.user_id), None, 500)
            .await
            .unwrap()
            .last()
            .map(|e| e.transaction_id);
        let figures = [
            ("wallet", time(rounds, |_| async { payments::get_wallet(s, &renter).await.unwrap() }).await),
            (
                "transactions (newest 100)",
                time(rounds, |_| async {
                    payments::list_transactions(s, &renter, &HistoryQuery::default()).await.unwrap()
                })
                .await,
            ),
            (
                "transactions (a page 500 deep)",
                time(rounds, |_| async {
                    let page = HistoryQuery { before: deep, limit: None };
                    payments::list_transactions(s, &renter, &page).await.unwrap()
                })
                .await,
            ),
            ("earnings", time(rounds, |_| async { payouts::get_earnings(s, &provider).await.unwrap() }).await),
            (
                "earnings history (newest 100)",
                time(rounds, |_| async {
                    payouts::list_earnings_entries(s, &provider, &HistoryQuery::default()).await.unwrap()
                })
                .await,
            ),
        ];
        for (what, (p50, p99)) in figures {
            println!(
                "{backend:?} {who:>8} {what:<32} p50 {:>7.2} ms  p99 {:>7.2} ms",
                p50.as_secs_f64() * 1e3,
                p99.as_secs_f64() * 1e3
            );
        }
    }
    let before = rss_kib();
    let start = Instant::now();
    let check = ledger::verify(&s.db).await.unwrap();
    println!(
        "{backend:?} audit: {} transactions, {} accounts, sound {} in {:.1} s; resident memory {} MiB before, {} MiB after",
        check.transactions,
        check.accounts,
        check.is_sound(),
        start.elapsed().as_secs_f64(),
        before / 1024,
        rss_kib() / 1024
    );
}

#[tokio::main]
async fn main() {
    let postings = env("BENCH_POSTINGS", 10_000_000);
    let rounds = env("BENCH_ROUNDS", 200);
    let only = std::env::args().nth(1);
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let name = format!("{backend:?}").to_lowercase();
        if only.as_deref().is_none_or(|o| o == name) {
            run(backend, postings, rounds).await;
        }
    }
}
