//! Alerts: a host gone offline, a GPU over temperature, an XID or uncorrectable ECC error, a
//! rented GPU sitting idle. Telemetry raises and resolves them as conditions start and end
//! (`observe`); the liveness reaper raises "host offline" in the same transaction that marks the
//! host offline. Admins see and acknowledge all of them, providers see their own hosts'.
//!
//! At most one open alert exists per (kind, host, GPU): a unique index on open alerts keeps it
//! so whichever replicas raise them. Which are open is remembered in memory by the replica that
//! holds the host's connection (loaded from the database the first time the host reports there,
//! and again after it reconnects or another replica acknowledges one of its alerts), so a
//! healthy fleet costs no queries; only a change of condition writes.

use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::DbResultExt,
    entities::{alerts, hosts},
};
use cardpool_domain::{
    rentals::RentalState,
    telemetry::{Alert, AlertKind},
};
use cardpool_protocol::TelemetryFrame;
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
    sea_query::{Expr, OnConflict},
};
use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
};

/// Temperature that raises an alert when a GPU does not report its own slowdown point.
const DEFAULT_HOT_C: u32 = 85;

/// A GPU held by a rental right now, as telemetry sees it.
#[derive(Debug, Clone)]
pub struct LiveRental {
    pub rental_id: i64,
    pub gpu_index: u32,
    pub running_since: Option<DateTime<Utc>>,
    pub billing_ends_at: Option<DateTime<Utc>>,
    pub stop_when_idle: bool,
    /// In state `running` (not stopping or being preempted).
    pub running: bool,
    /// The share of the GPU held, in sevenths: 7 for a whole GPU, a MIG slice's compute slices
    /// (NVML gives no per-instance power, so a slice's energy is its share of the GPU's).
    pub sevenths: u8,
}

impl LiveRental {
    /// Whether the workload ran (and was billed) at `at`: energy counts from here.
    pub fn running_at(&self, at: DateTime<Utc>) -> bool {
        self.running_since.is_some_and(|s| s <= at) && self.billing_ends_at.is_none_or(|e| at < e)
    }
}

type Key = (AlertKind, i64, Option<u32>);

#[derive(Default)]
pub(crate) struct Memory {
    inner: Mutex<MemoryInner>,
}

#[derive(Default)]
struct MemoryInner {
    loaded: HashSet<i64>,
    open: HashSet<Key>,
    /// (host, GPU) → (rental, first idle sample, ms).
    idle_since: HashMap<(i64, u32), (i64, i64)>,
}

impl Memory {
    /// Forgets what is remembered of the host's alerts: the next report reloads them.
    pub(crate) fn forget(&self, host_id: i64) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.loaded.remove(&host_id);
        inner.open.retain(|(_, host, _)| *host != host_id);
    }
}

/// Raises an alert unless one of its kind is open for that host and GPU. Returns whether it did.
pub(crate) async fn raise(
    conn: &impl ConnectionTrait,
    kind: AlertKind,
    host_id: i64,
    gpu: Option<u32>,
    rental_id: Option<i64>,
    message: String,
) -> AppResult<bool> {
    let mut open = alerts::Entity::find()
        .filter(alerts::Column::Kind.eq(kind.as_str()))
        .filter(alerts::Column::HostId.eq(host_id))
        .filter(alerts::Column::ResolvedAt.is_null());
    open = match gpu {
        Some(index) => open.filter(alerts::Column::GpuIndex.eq(index as i32)),
        None => open.filter(alerts::Column::GpuIndex.is_null()),
    };
    if open.count(conn).await.context("checking open alerts")? > 0 {
        return Ok(false);
    }
    let alert = alerts::ActiveModel {
        kind: Set(kind.as_str().into()),
        host_id: Set(host_id),
        gpu_index: Set(gpu.map(|g| g as i32)),
        rental_id: Set(rental_id),
        message: Set(message),
        raised_at: Set(Utc::now()),
        ..Default::default()
    };
    // Another replica may raise the same alert at the same moment: the unique index on open
    // alerts keeps one, and this insert then does nothing (no error to abort the transaction).
    let inserted = alerts::Entity::insert(alert)
        .on_conflict(OnConflict::new().do_nothing().to_owned())
        .exec_without_returning(conn)
        .await
        .context("raising alert")?;
    if inserted == 0 {
        return Ok(false);
    }
    tracing::warn!(kind = kind.as_str(), host_id, ?gpu, "alert raised");
    Ok(true)
}

/// Marks the open alert of this kind for that host and GPU resolved.
pub(crate) async fn resolve(
    conn: &impl ConnectionTrait,
    kind: AlertKind,
    host_id: i64,
    gpu: Option<u32>,
) -> AppResult<()> {
    let mut update = alerts::Entity::update_many()
        .col_expr(alerts::Column::ResolvedAt, Expr::value(Utc::now()))
        .filter(alerts::Column::Kind.eq(kind.as_str()))
        .filter(alerts::Column::HostId.eq(host_id))
        .filter(alerts::Column::ResolvedAt.is_null());
    update = match gpu {
        Some(index) => update.filter(alerts::Column::GpuIndex.eq(index as i32)),
        None => update.filter(alerts::Column::GpuIndex.is_null()),
    };
    update.exec(conn).await.context("resolving alert")?;
    Ok(())
}

/// What the frames say about each GPU, raising and resolving alerts on every change.
pub(crate) async fn observe(
    services: &Services,
    host_id: i64,
    frames: &[&TelemetryFrame],
    rentals_here: &[LiveRental],
) -> AppResult<()> {
    let settings = &services.settings.telemetry;
    let memory = &services.telemetry.alerts;
    let needs_load = !memory.inner.lock().unwrap_or_else(|p| p.into_inner()).loaded.contains(&host_id);
    if needs_load {
        let open = alerts::Entity::find()
            .filter(alerts::Column::HostId.eq(host_id))
            .filter(alerts::Column::ResolvedAt.is_null())
            .all(&services.db)
            .await
            .context("loading open alerts")?;
        let mut inner = memory.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.loaded.insert(host_id);
        for alert in open {
            if let Some(kind) = AlertKind::parse(&alert.kind) {
                inner.open.insert((kind, host_id, alert.gpu_index.and_then(|g| u32::try_from(g).ok())));
            }
        }
    }
    // Decide under the lock, write after it.
    let mut to_raise: Vec<(Key, Option<i64>, String)> = Vec::new();
    let mut to_resolve: Vec<Key> = Vec::new();
    let mut idle_rentals: Vec<(i64, u32, bool)> = Vec::new();
    {
        let mut inner = memory.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut want = |inner: &mut MemoryInner, key: Key, on: bool, rental: Option<i64>, message: String| {
            let is_open = inner.open.contains(&key);
            if on && !is_open {
                inner.open.insert(key);
                to_raise.push((key, rental, message));
            } else if !on && is_open && key.0 != AlertKind::XidError {
                inner.open.remove(&key);
                to_resolve.push(key);
            }
        };
        for frame in frames {
            for gpu in &frame.gpus {
                let i = gpu.index;
                let hot_at = gpu.slowdown_temperature_c.unwrap_or(DEFAULT_HOT_C);
                if let Some(t) = gpu.temperature_c {
                    want(
                        &mut inner,
                        (AlertKind::OverTemperature, host_id, Some(i)),
                        t >= hot_at,
                        None,
                        format!("GPU {i} is at {t} °C (slows down at {hot_at} °C)"),
                    );
                }
                if let Some(ecc) = gpu.ecc_uncorrected {
                    want(
                        &mut inner,
                        (AlertKind::UncorrectableEcc, host_id, Some(i)),
                        ecc > 0,
                        None,
                        format!("GPU {i} reports {ecc} uncorrectable ECC error(s)"),
                    );
                }
                if !gpu.xid_errors.is_empty() {
                    let codes: Vec<String> = gpu.xid_errors.iter().map(u64::to_string).collect();
                    want(
                        &mut inner,
                        (AlertKind::XidError, host_id, Some(i)),
                        true,
                        None,
                        format!("GPU {i} raised XID {}", codes.join(", ")),
                    );
                }
                let rental = rentals_here.iter().find(|r| r.gpu_index == i && r.running);
                let key = (AlertKind::GpuIdle, host_id, Some(i));
                match (rental, gpu.utilization_pct) {
                    (Some(rental), Some(util)) if util < settings.idle_util_pct => {
                        let since = match inner.idle_since.get(&(host_id, i)) {
                            Some((r, since)) if *r == rental.rental_id => *since,
                            _ => {
                                inner.idle_since.insert((host_id, i), (rental.rental_id, frame.at_ms));
                                frame.at_ms
                            }
                        };
                        let idle_ms = frame.at_ms - since;
                        if idle_ms >= i64::from(settings.idle_minutes) * 60_000 && !inner.open.contains(&key) {
                            let minutes = idle_ms / 60_000;
                            want(
                                &mut inner,
                                key,
                                true,
                                Some(rental.rental_id),
                                format!("GPU {i} of rental {} has been idle for {minutes} min", rental.rental_id),
                            );
                            idle_rentals.push((rental.rental_id, i, rental.stop_when_idle));
                        }
                    }
                    _ => {
                        inner.idle_since.remove(&(host_id, i));
                        want(&mut inner, key, false, None, String::new());
                    }
                }
            }
        }
    }
    for ((kind, host, gpu), rental, message) in to_raise {
        raise(&services.db, kind, host, gpu, rental, message).await?;
    }
    for (kind, host, gpu) in to_resolve {
        resolve(&services.db, kind, host, gpu).await?;
    }
    for (rental_id, gpu, stop) in idle_rentals {
        let minutes = settings.idle_minutes;
        if stop {
            let reason = format!("stopped automatically: GPU {gpu} idle for {minutes} min (as asked at booking)");
            match crate::rentals::transition(services, rental_id, RentalState::Stopping, &reason).await {
                Ok(_) | Err(AppError::Conflict(_)) => {}
                Err(err) => return Err(err),
            }
        } else {
            crate::rentals::set_notice(
                services,
                rental_id,
                &format!("GPU {gpu} has been idle for {minutes} minutes while you pay for it. Stop the rental if you are done."),
            )
            .await?;
        }
    }
    Ok(())
}

/// Open alerts (all, or of one provider's hosts).
pub(crate) async fn count_open(services: &Services, provider: Option<i64>) -> AppResult<u32> {
    let mut query = alerts::Entity::find().filter(alerts::Column::ResolvedAt.is_null());
    if let Some(provider) = provider {
        query = query.filter(
            alerts::Column::HostId.in_subquery(
                sea_orm::sea_query::Query::select()
                    .column(hosts::Column::Id)
                    .from(hosts::Entity)
                    .and_where(hosts::Column::ProviderId.eq(provider))
                    .to_owned(),
            ),
        );
    }
    Ok(query.count(&services.db).await.context("counting alerts")? as u32)
}

/// Alerts newest first: every host's for admins, the caller's own hosts' for providers.
pub async fn list_alerts(services: &Services, principal: &Principal) -> AppResult<Vec<Alert>> {
    let mut host_query = hosts::Entity::find();
    if !principal.roles.admin {
        host_query = host_query.filter(hosts::Column::ProviderId.eq(principal.user_id));
    }
    let labels: HashMap<i64, String> =
        host_query.all(&services.db).await.context("loading hosts")?.into_iter().map(|h| (h.id, h.hostname)).collect();
    let rows = alerts::Entity::find()
        .filter(alerts::Column::HostId.is_in(labels.keys().copied()))
        .order_by_desc(alerts::Column::Id)
        .limit(200)
        .all(&services.db)
        .await
        .context("loading alerts")?;
    Ok(rows.into_iter().filter_map(|a| view(a, &labels)).collect())
}

/// One host's alerts, open or not, newest first (at most `limit`).
pub(crate) async fn host_alerts(services: &Services, host_id: i64, label: &str, limit: u64) -> AppResult<Vec<Alert>> {
    let labels = HashMap::from([(host_id, label.to_owned())]);
    let rows = alerts::Entity::find()
        .filter(alerts::Column::HostId.eq(host_id))
        .order_by_desc(alerts::Column::Id)
        .limit(limit)
        .all(&services.db)
        .await
        .context("loading the host's alerts")?;
    Ok(rows.into_iter().filter_map(|a| view(a, &labels)).collect())
}

fn view(a: alerts::Model, labels: &HashMap<i64, String>) -> Option<Alert> {
    Some(Alert {
        id: a.id,
        kind: AlertKind::parse(&a.kind)?,
        host_label: labels.get(&a.host_id).cloned().unwrap_or_default(),
        host_id: a.host_id,
        gpu_index: a.gpu_index.and_then(|g| u32::try_from(g).ok()),
        rental_id: a.rental_id,
        message: a.message,
        raised_at: a.raised_at,
        resolved_at: a.resolved_at,
        acknowledged_at: a.acknowledged_at,
    })
}

/// An admin acknowledges an alert. An XID error is an event, not a condition: acknowledging
/// it also closes it, so the next XID on that GPU raises a new alert.
pub async fn acknowledge(services: &Services, principal: &Principal, alert_id: i64) -> AppResult<()> {
    principal.require_admin()?;
    let alert = alerts::Entity::find_by_id(alert_id)
        .one(&services.db)
        .await
        .context("loading alert")?
        .ok_or_else(|| AppError::not_found("alert"))?;
    if alert.acknowledged_at.is_some() {
        return Ok(());
    }
    let now = Utc::now();
    let is_event = alert.kind == AlertKind::XidError.as_str();
    let mut update: alerts::ActiveModel = alert.clone().into();
    update.acknowledged_at = Set(Some(now));
    update.acknowledged_by = Set(Some(principal.user_id));
    if is_event && alert.resolved_at.is_none() {
        update.resolved_at = Set(Some(now));
    }
    update.update(&services.db).await.context("acknowledging alert")?;
    if is_event {
        let key = (AlertKind::XidError, alert.host_id, alert.gpu_index.and_then(|g| u32::try_from(g).ok()));
        services.telemetry.alerts.inner.lock().unwrap_or_else(|p| p.into_inner()).open.remove(&key);
        services.bus.tell(crate::bus::Note::AlertsChanged { host_id: alert.host_id });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Settings, testing};

    crate::backend_tests!(an_alert_two_replicas_raise_at_once_is_open_once);

    /// Two transactions (two replicas) raise the same alert, the second before the first has
    /// committed, so neither saw the other's when it looked: one alert is open, the second
    /// raise does nothing, and its transaction goes on (it is not aborted by a violation).
    async fn an_alert_two_replicas_raise_at_once_is_open_once(backend: testing::Backend) {
        let (_db, services) = testing::services(backend, Settings::default()).await;
        let provider = testing::provider(&services, "p@example.com").await;
        let host = testing::host(&services, &provider, "h").await;
        let first = services.begin_write().await.unwrap();
        assert!(raise(&first, AlertKind::OverTemperature, host, Some(0), None, "hot".into()).await.unwrap());
        let other = services.clone();
        let second = tokio::spawn(async move {
            let txn = other.begin_write().await.unwrap();
            let raised = raise(&txn, AlertKind::OverTemperature, host, Some(0), None, "hot".into()).await.unwrap();
            // The transaction is still usable: a host-wide alert of another kind goes in.
            assert!(raise(&txn, AlertKind::HostOffline, host, None, None, "gone".into()).await.unwrap());
            txn.commit().await.unwrap();
            raised
        });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        first.commit().await.unwrap();
        assert!(!second.await.unwrap(), "the second raise kept the first alert");
        let open = alerts::Entity::find().filter(alerts::Column::ResolvedAt.is_null()).all(&services.db).await.unwrap();
        let mut kinds: Vec<&str> = open.iter().map(|a| a.kind.as_str()).collect();
        kinds.sort();
        assert_eq!(kinds, [AlertKind::HostOffline.as_str(), AlertKind::OverTemperature.as_str()]);
    }
}
