//! Dashboards' reads: a scope's first paint (minute averages, then recent raw seconds),
//! energy per rental and per provider, the fleet and provider overviews, and what `/metrics`
//! needs beside the live frames.

use super::{
    HISTORY_MINUTES,
    access::{GrantHosts, grant},
    hub::{GIB, reading},
};
use crate::{
    AppResult, Services,
    alerts::{self},
    auth::Principal,
    db::{DbResultExt, Sql},
    entities::{gpu_rollups, gpus, hosts, rental_energy, rental_gpus, rentals, users},
};
use cardpool_domain::{
    host::HostStatus,
    rentals::RentalState,
    telemetry::{
        DeliveredEnergy, FleetGpu, FleetHost, FleetOverview, GpuEnergy, GpuReading, HostSample, TelemetryScope,
        TelemetryView,
    },
};
use chrono::{DateTime, Duration, DurationRound, Utc};
use sea_orm::{ColumnTrait, EntityTrait, FromQueryResult, QueryFilter, QueryOrder, Statement};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A dashboard's first paint: the last hour as minute averages, then the recent raw seconds.
pub async fn view(services: &Services, principal: &Principal, scope: TelemetryScope) -> AppResult<TelemetryView> {
    let grant = grant(services, principal, scope).await?;
    let now = Utc::now();
    let mut from = now - Duration::minutes(HISTORY_MINUTES);
    if let Some(since) = grant.since {
        // Whole minutes only: a minute that began before the rental also holds someone else's.
        let ceil = since.duration_trunc(Duration::minutes(1)).unwrap_or(since);
        from = from.max(if ceil < since { ceil + Duration::minutes(1) } else { ceil });
    }
    let hosts = match &grant.hosts {
        GrantHosts::Listed(hosts) => hosts.clone(),
        GrantHosts::All => hosts::Entity::find()
            .filter(hosts::Column::RevokedAt.is_null())
            .all(&services.db)
            .await
            .context("loading hosts")?
            .into_iter()
            .map(|h| (h.id, None))
            .collect(),
    };
    let mut samples: Vec<HostSample> = Vec::new();
    for (host_id, indexes) in &hosts {
        let recent: Vec<HostSample> =
            services.telemetry.recent(*host_id).iter().filter_map(|sample| grant.admits_sample(sample)).collect();
        let raw_from = recent.first().map(|s| s.at_ms);
        let mut query = gpu_rollups::Entity::find()
            .filter(gpu_rollups::Column::HostId.eq(*host_id))
            .filter(gpu_rollups::Column::Minute.gte(from))
            .order_by_asc(gpu_rollups::Column::Minute);
        if let Some(until) = grant.until {
            query = query
                .filter(gpu_rollups::Column::Minute.lt(until.duration_trunc(Duration::minutes(1)).unwrap_or(until)));
        }
        if let Some(indexes) = indexes {
            query = query.filter(gpu_rollups::Column::GpuIndex.is_in(indexes.iter().map(|i| *i as i32)));
        }
        let rows = query.all(&services.db).await.context("loading telemetry history")?;
        let mut minutes: BTreeMap<DateTime<Utc>, Vec<GpuReading>> = BTreeMap::new();
        for row in rows.into_iter().filter(|r| r.samples > 0) {
            // The raw seconds cover their own minutes more finely.
            if raw_from.is_some_and(|from| row.minute.timestamp_millis() + 60_000 > from) {
                continue;
            }
            let n = f64::from(row.samples);
            minutes.entry(row.minute).or_default().push(GpuReading {
                index: u32::try_from(row.gpu_index).unwrap_or(0),
                util_pct: Some(row.util_sum as f64 / n),
                memory_used_gib: Some(row.memory_used_sum as f64 / n / GIB),
                memory_total_gib: None,
                temperature_c: Some(row.temperature_sum as f64 / n),
                power_w: Some(row.power_sum_mw as f64 / n / 1000.0),
            });
        }
        samples.extend(minutes.into_iter().map(|(minute, gpus)| HostSample {
            host_id: *host_id,
            at_ms: minute.timestamp_millis() + 30_000,
            gpus,
        }));
        samples.extend(recent);
    }
    samples.sort_by_key(|s| (s.at_ms, s.host_id));
    let energy = match scope {
        TelemetryScope::Rental(id) => rental_energy(services, id).await?,
        _ => Vec::new(),
    };
    Ok(TelemetryView { scope, samples, energy, live: grant.live, now_ms: now.timestamp_millis() })
}

/// Energy per GPU of a rental so far (callers have checked access).
pub async fn rental_energy(services: &Services, rental_id: i64) -> AppResult<Vec<GpuEnergy>> {
    Ok(rental_energy::Entity::find()
        .filter(rental_energy::Column::RentalId.eq(rental_id))
        .order_by_asc(rental_energy::Column::GpuIndex)
        .all(&services.db)
        .await
        .context("loading rental energy")?
        .into_iter()
        .map(|e| GpuEnergy { gpu_index: u32::try_from(e.gpu_index).unwrap_or(0), energy_mj: e.energy_mj })
        .collect())
}

/// Energy delivered on a provider's hosts per rental, newest rentals first (earnings view).
pub async fn provider_energy(services: &Services, principal: &Principal) -> AppResult<Vec<DeliveredEnergy>> {
    #[derive(FromQueryResult)]
    struct Row {
        rental_id: i64,
        hostname: String,
        energy_mj: i64,
    }
    let backend = services.db.get_database_backend();
    let mut sql = Sql::new(backend);
    let provider = sql.bind(principal.user_id);
    let text = format!(
        "SELECT e.rental_id, h.hostname, CAST(SUM(e.energy_mj) AS BIGINT) AS energy_mj FROM rental_energy e \
         JOIN rentals r ON r.id = e.rental_id JOIN hosts h ON h.id = r.host_id WHERE h.provider_id = {provider} \
         GROUP BY e.rental_id, h.hostname ORDER BY e.rental_id DESC LIMIT 50"
    );
    let rows = Row::find_by_statement(Statement::from_sql_and_values(backend, text, sql.values))
        .all(&services.db)
        .await
        .context("loading provider energy")?;
    Ok(rows
        .into_iter()
        .map(|r| DeliveredEnergy { rental_id: r.rental_id, hostname: r.hostname, energy_mj: r.energy_mj })
        .collect())
}

/// Every host and GPU at a glance, with fleet totals (admins).
pub async fn fleet(services: &Services, principal: &Principal) -> AppResult<FleetOverview> {
    principal.require_admin()?;
    overview(services, None).await
}

/// The calling provider's hosts, as tiles.
pub async fn my_hosts(services: &Services, principal: &Principal) -> AppResult<FleetOverview> {
    overview(services, Some(principal.user_id)).await
}

async fn overview(services: &Services, provider: Option<i64>) -> AppResult<FleetOverview> {
    let now = Utc::now();
    let mut host_query =
        hosts::Entity::find().filter(hosts::Column::RevokedAt.is_null()).order_by_asc(hosts::Column::Id);
    if let Some(provider) = provider {
        host_query = host_query.filter(hosts::Column::ProviderId.eq(provider));
    }
    let host_rows = host_query.all(&services.db).await.context("loading hosts")?;
    let host_ids: Vec<i64> = host_rows.iter().map(|h| h.id).collect();
    // Physical GPUs: one with a MIG slice rented counts as rented.
    let gpu_rows = gpus::Entity::find()
        .filter(gpus::Column::HostId.is_in(host_ids.clone()))
        .filter(gpus::Column::ParentId.is_null())
        .filter(gpus::Column::State.eq("available"))
        .order_by_asc(gpus::Column::DeviceIndex)
        .all(&services.db)
        .await
        .context("loading gpus")?;
    let held: BTreeSet<i64> = rental_gpus::Entity::find()
        .filter(rental_gpus::Column::PhysicalGpuId.is_in(gpu_rows.iter().map(|g| g.id)))
        .filter(rental_gpus::Column::Active.eq(true))
        .filter(rental_gpus::Column::StartsAt.lte(now))
        .filter(rental_gpus::Column::EndsAt.gt(now))
        .all(&services.db)
        .await
        .context("loading holds")?
        .into_iter()
        .map(|h| h.physical_gpu_id)
        .collect();
    let providers: HashMap<i64, String> = users::Entity::find()
        .filter(users::Column::Id.is_in(host_rows.iter().map(|h| h.provider_id)))
        .all(&services.db)
        .await
        .context("loading providers")?
        .into_iter()
        .map(|u| (u.id, u.email))
        .collect();
    let running = rentals::Entity::find()
        .filter(rentals::Column::HostId.is_in(host_ids.clone()))
        .filter(rentals::Column::State.eq(RentalState::Running.as_str()))
        .all(&services.db)
        .await
        .context("loading running rentals")?;
    let revenue_per_hour_micros = running.iter().map(|r| r.price_micros.saturating_mul(i64::from(r.gpu_count))).sum();
    let open_alerts = alerts::count_open(services, provider).await?;
    let latest = services.telemetry.latest();
    let mut overview = FleetOverview {
        hosts: Vec::new(),
        gpus_total: 0,
        gpus_online: 0,
        gpus_rented: 0,
        revenue_per_hour_micros,
        open_alerts,
    };
    for host in host_rows {
        let online = HostStatus::parse(&host.status) == Some(HostStatus::Online);
        let frame = latest.get(&host.id).filter(|_| online);
        let gpus: Vec<FleetGpu> = gpu_rows
            .iter()
            .filter(|g| g.host_id == host.id)
            .map(|g| {
                let index = u32::try_from(g.device_index).unwrap_or(0);
                FleetGpu {
                    index,
                    rented: held.contains(&g.id),
                    latest: frame.and_then(|f| f.gpus.iter().find(|s| s.index == index)).map(reading),
                }
            })
            .collect();
        overview.gpus_total += gpus.len() as u32;
        if online {
            overview.gpus_online += gpus.len() as u32;
        }
        overview.gpus_rented += gpus.iter().filter(|g| g.rented).count() as u32;
        let mut models: Vec<&str> =
            gpu_rows.iter().filter(|g| g.host_id == host.id).map(|g| g.model.as_str()).collect();
        models.dedup();
        overview.hosts.push(FleetHost {
            host_id: host.id,
            name: host.hostname,
            provider: providers.get(&host.provider_id).cloned().unwrap_or_default(),
            online,
            gpu_model: models.join(", "),
            gpus,
        });
    }
    Ok(overview)
}

/// What `/metrics` needs beside the live frames.
pub struct MetricsSnapshot {
    /// (host id, GPU index) → what labels the GPU, for hosts with a frame in memory.
    pub gpus: HashMap<(i64, u32), GpuLabels>,
    pub online_hosts: BTreeSet<i64>,
    /// (kind, state, count) of every rental.
    pub rentals: Vec<(String, String, i64)>,
}

/// What dcgm-exporter labels a GPU with, beyond what its samples say.
#[derive(Debug, Clone, Default)]
pub struct GpuLabels {
    pub hostname: String,
    pub model: String,
    pub pci_bus_id: String,
}

pub async fn metrics_snapshot(services: &Services) -> AppResult<MetricsSnapshot> {
    let ids: Vec<i64> = services.telemetry.latest().keys().copied().collect();
    let hosts: Vec<hosts::Model> = hosts::Entity::find()
        .filter(hosts::Column::Id.is_in(ids.clone()))
        .all(&services.db)
        .await
        .context("loading hosts")?;
    let online_hosts = hosts.iter().filter(|h| h.status == HostStatus::Online.as_str()).map(|h| h.id).collect();
    let names: HashMap<i64, String> = hosts.into_iter().map(|h| (h.id, h.hostname)).collect();
    let gpus = gpus::Entity::find()
        .filter(gpus::Column::HostId.is_in(ids))
        .filter(gpus::Column::ParentId.is_null())
        .all(&services.db)
        .await
        .context("loading gpus")?
        .into_iter()
        .map(|g| {
            let hostname = names.get(&g.host_id).cloned().unwrap_or_default();
            let labels = GpuLabels { hostname, model: g.model, pci_bus_id: g.pci_bus_id };
            ((g.host_id, u32::try_from(g.device_index).unwrap_or(0)), labels)
        })
        .collect();
    #[derive(FromQueryResult)]
    struct Count {
        kind: String,
        state: String,
        n: i64,
    }
    let backend = services.db.get_database_backend();
    let rentals = Count::find_by_statement(Statement::from_string(
        backend,
        "SELECT kind, state, COUNT(*) AS n FROM rentals GROUP BY kind, state ORDER BY kind, state",
    ))
    .all(&services.db)
    .await
    .context("counting rentals")?
    .into_iter()
    .map(|c| (c.kind, c.state, c.n))
    .collect();
    Ok(MetricsSnapshot { gpus, online_hosts, rentals })
}
