//! Background work the server runs beside the HTTP stack: on every replica of a cluster, but
//! only while it leads (`cardpool_service::leader`), so each sweep runs once per cluster.

use cardpool_service::{
    Services, hosts,
    leader::Leadership,
    ledger,
    notify::{self, delivery},
    payouts, rentals,
    session_store::DbSessionStore,
    telemetry,
};
use std::time::Duration;
use tokio::task::JoinSet;
use tower_sessions::ExpiredDeletion;

/// Starts the background workers: the host liveness reaper, rental billing and schedules
/// (reservation windows, scheduled preemptions), webhook deliveries, expired-session cleanup, the retry of payouts
/// Stripe has not confirmed, the telemetry and notification retention policies, the sign-in throttle's sweep, and
/// an hourly audit of the ledger.
///
/// The reaper judges no host until `reconnect_hold` has passed since the server started or
/// since its own last failure: after a restart, an upgrade or a database outage, agents that
/// are backing off need that long to reconnect and be heard, and a host is offline only when it
/// is silent, not when we were; a replica that has just taken the lead waits as long, since
/// the agents of a leader that died are reconnecting too.
pub fn spawn(services: &Services, offline_grace: Duration, reconnect_hold: Duration, billing_interval: Duration) {
    tokio::spawn(watch_lag());
    let services = services.clone();
    tokio::spawn(async move {
        loop {
            let mut leadership = Leadership::campaign(&services.db).await;
            tracing::info!("leading the background workers");
            let workers = start(&services, offline_grace, reconnect_hold, billing_interval);
            leadership.lost().await;
            // Dropping the set aborts every worker: another replica leads now.
            drop(workers);
        }
    });
}

/// How often the lag watch wakes, and how late a wake-up is logged.
const LAG_TICK: Duration = Duration::from_millis(250);
const LAG_LOGGED: Duration = Duration::from_secs(1);

/// On every replica: logs when this process's tasks ran late, i.e. a wake-up due every
/// [`LAG_TICK`] came [`LAG_LOGGED`] or more after it was due. That is a blocked or starved async
/// runtime (a blocking call on a worker thread, the machine out of CPU), which delays every
/// agent connection at once: their heartbeats go unrecorded and the reaper takes their hosts
/// for silent. Beside the heartbeat batches' own log of late recording (the database), it
/// tells a stalled process from a slow database.
async fn watch_lag() {
    let mut due = tokio::time::Instant::now() + LAG_TICK;
    loop {
        tokio::time::sleep_until(due).await;
        let late = due.elapsed();
        if late >= LAG_LOGGED {
            tracing::warn!(late_ms = late.as_millis() as u64, "the server's tasks ran late (blocked or starved)");
        }
        due = tokio::time::Instant::now() + LAG_TICK;
    }
}

fn start(
    services: &Services,
    offline_grace: Duration,
    reconnect_hold: Duration,
    billing_interval: Duration,
) -> JoinSet<()> {
    let mut workers = JoinSet::new();
    let biller = services.clone();
    workers.spawn(async move {
        let mut every = tokio::time::interval(billing_interval.clamp(Duration::from_secs(1), Duration::from_secs(60)));
        loop {
            every.tick().await;
            if let Err(err) = rentals::settle_all(&biller).await {
                tracing::warn!(error = %err, "rental billing failed; will retry");
            }
        }
    });
    let courier = services.clone();
    workers.spawn(async move {
        let sender = match delivery::Sender::new(&courier.settings.webhooks) {
            Ok(sender) => sender,
            Err(err) => return tracing::error!(error = %err, "webhooks cannot be delivered"),
        };
        let mut every = tokio::time::interval(Duration::from_secs(1));
        loop {
            every.tick().await;
            if let Err(err) = delivery::deliver_due(&courier, &sender).await {
                tracing::warn!(error = %err, "webhook delivery failed; will retry");
            }
        }
    });
    let scheduler = services.clone();
    workers.spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(2));
        loop {
            every.tick().await;
            if let Err(err) = rentals::run_schedules(&scheduler).await {
                tracing::warn!(error = %err, "rental schedules failed; will retry");
            }
        }
    });

    let reaper = services.clone();
    workers.spawn(async move {
        let mut every = tokio::time::interval((offline_grace / 4).max(Duration::from_millis(250)));
        let mut judge_from = tokio::time::Instant::now() + reconnect_hold;
        loop {
            every.tick().await;
            if tokio::time::Instant::now() < judge_from {
                continue;
            }
            match hosts::mark_silent_hosts_offline(&reaper, offline_grace).await {
                Ok(ids) if !ids.is_empty() => tracing::info!(?ids, "hosts missed their heartbeats; marked offline"),
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(error = %err, "liveness sweep failed; hosts are judged again after the hold");
                    judge_from = tokio::time::Instant::now() + reconnect_hold;
                }
            }
        }
    });

    let store = DbSessionStore::new(services.db.clone());
    workers.spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(600));
        loop {
            every.tick().await;
            if let Err(err) = store.delete_expired().await {
                tracing::warn!(error = %err, "expired-session cleanup failed; will retry");
            }
        }
    });

    let payouts = services.clone();
    workers.spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(60));
        loop {
            every.tick().await;
            match payouts::retry_pending_payouts(&payouts, Duration::from_secs(30)).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(settled = n, "pending payouts settled"),
                Err(err) => tracing::warn!(error = %err, "payout retry failed; will retry"),
            }
        }
    });

    let throttle = services.clone();
    workers.spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(3600));
        loop {
            every.tick().await;
            match throttle.sign_in_limiter.sweep().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, "expired sign-in throttle events deleted"),
                Err(err) => tracing::warn!(error = %err, "sign-in throttle sweep failed; will retry"),
            }
        }
    });

    let retention = services.clone();
    workers.spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(3600));
        loop {
            every.tick().await;
            match telemetry::apply_retention(&retention).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, "old telemetry rollups deleted"),
                Err(err) => tracing::warn!(error = %err, "telemetry retention failed; will retry"),
            }
            match notify::apply_retention(&retention).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, "old notifications and webhook deliveries deleted"),
                Err(err) => tracing::warn!(error = %err, "notification retention failed; will retry"),
            }
        }
    });

    // Cached balances must equal the postings, every entry must balance, money is conserved.
    let auditor = services.clone();
    workers.spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(3600));
        loop {
            every.tick().await;
            match ledger::verify(&auditor.db).await {
                Ok(check) if check.is_sound() => {
                    tracing::info!(transactions = check.transactions, accounts = check.accounts, "ledger audit passed")
                }
                Ok(check) => tracing::error!(?check, "LEDGER AUDIT FAILED: balances do not match postings"),
                Err(err) => tracing::warn!(error = %err, "ledger audit could not run; will retry"),
            }
        }
    });
    workers
}
