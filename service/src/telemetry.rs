//! GPU telemetry: ingest from agents, live fan-out, history, energy, and who may see what.
//!
//! An agent sends frames (every GPU of its host at one instant) numbered per host by
//! `(stream, sequence)`. [`ingest`] stores, in one transaction, the one-minute rollups of the
//! frames it has not seen, the energy each rented GPU used, and the host's cursor (the newest
//! frame stored); only after the commit does the gateway acknowledge, so the agent replays
//! anything unacknowledged and nothing is stored twice or lost across a crash on either side.
//!
//! Raw frames stay in memory only ([`Hub`]): the last few minutes per host for first paints
//! and `/metrics`, and a broadcast channel for live dashboards. Each subscriber holds a
//! [`Grant`] (from [`grant`]) that says which hosts and GPUs it may see and is re-checked while
//! the feed runs, so a renter stops seeing a GPU when the rental ends.
//!
//! In-process only: with several replicas, a dashboard sees the hosts connected to its own
//! replica live (history and alerts come from the database and are complete); a NATS subject
//! per host would carry frames across replicas.

use crate::{
    AppError, AppResult, Services,
    alerts::{self, LiveRental},
    auth::Principal,
    db::begin_write,
    entities::{gpu_rollups, gpus, hosts, rental_energy, rental_gpus, rentals, telemetry_cursors, users},
    internal,
    offers::Sql,
};
use cardpool_domain::{
    host::HostStatus,
    rentals::RentalState,
    telemetry::{
        DeliveredEnergy, FleetGpu, FleetHost, FleetOverview, GpuEnergy, GpuReading, HostSample, LiveEvent,
        TelemetryScope, TelemetryView,
    },
};
use cardpool_protocol::{GpuSample, ServerMessage, TelemetryFrame};
use chrono::{DateTime, Duration, DurationRound, TimeZone, Utc};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, FromQueryResult, QueryFilter, QueryOrder, Statement,
};
use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    sync::{
        Arc, RwLock,
        atomic::{AtomicU64, Ordering},
    },
};
use tokio::sync::broadcast;

/// Raw frames kept per host for first paints (five minutes at 1 Hz).
const RECENT_FRAMES: usize = 300;
/// Frames one message may carry, and GPUs one frame.
const MAX_FRAMES: usize = 1000;
const MAX_GPUS: usize = 64;
/// A frame stands for the time since the previous one, at most this long (a gap is no usage).
const MAX_FRAME_GAP_MS: i64 = 5_000;
/// The time one frame stands for when there is no previous one.
const DEFAULT_FRAME_MS: i64 = 1_000;
/// History dashboards show by default.
pub const HISTORY_MINUTES: i64 = 60;

/// Telemetry tunables.
#[derive(Debug, Clone)]
pub struct TelemetrySettings {
    /// A rented GPU below this utilisation counts as idle.
    pub idle_util_pct: u32,
    /// Idle this long raises the alert (and stops rentals that asked for it).
    pub idle_minutes: u32,
    /// Days of one-minute rollups kept.
    pub retention_days: u32,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        TelemetrySettings { idle_util_pct: 5, idle_minutes: 30, retention_days: 30 }
    }
}

/// One host's frame as dashboards receive it, with its JSON ready for feeds that may see all
/// of the host's GPUs (serialised once however many dashboards watch).
pub struct Published {
    pub sample: HostSample,
    pub json: String,
}

/// Telemetry that lives in memory: recent frames, the live feed, counters for `/metrics`.
pub struct Hub {
    recent: RwLock<HashMap<i64, VecDeque<Arc<Published>>>>,
    latest: RwLock<HashMap<i64, Arc<TelemetryFrame>>>,
    feed: broadcast::Sender<Arc<Published>>,
    pub frames_stored: AtomicU64,
    pub samples_stored: AtomicU64,
    pub frames_duplicate: AtomicU64,
    pub(crate) alerts: alerts::Memory,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            recent: RwLock::default(),
            latest: RwLock::default(),
            feed: broadcast::channel(4096).0,
            frames_stored: AtomicU64::new(0),
            samples_stored: AtomicU64::new(0),
            frames_duplicate: AtomicU64::new(0),
            alerts: alerts::Memory::default(),
        }
    }
}

impl Hub {
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Published>> {
        self.feed.subscribe()
    }

    /// Dashboards watching right now.
    pub fn watchers(&self) -> usize {
        self.feed.receiver_count()
    }

    /// The newest raw frame of every host heard from since start-up.
    pub fn latest(&self) -> HashMap<i64, Arc<TelemetryFrame>> {
        self.latest.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn recent(&self, host_id: i64) -> Vec<Arc<Published>> {
        self.recent
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&host_id)
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn last_at_ms(&self, host_id: i64) -> Option<i64> {
        self.latest.read().unwrap_or_else(|p| p.into_inner()).get(&host_id).map(|f| f.at_ms)
    }

    fn publish(&self, host_id: i64, frame: &TelemetryFrame) {
        let sample = HostSample { host_id, at_ms: frame.at_ms, gpus: frame.gpus.iter().map(reading).collect() };
        let json = serde_json::to_string(&LiveEvent::Sample(sample.clone())).unwrap_or_default();
        let published = Arc::new(Published { sample, json });
        {
            let mut recent = self.recent.write().unwrap_or_else(|p| p.into_inner());
            let frames = recent.entry(host_id).or_default();
            if frames.len() == RECENT_FRAMES {
                frames.pop_front();
            }
            frames.push_back(published.clone());
        }
        // No dashboard watching is not an error.
        let _ = self.feed.send(published);
    }
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A raw sample as dashboards show it.
pub fn reading(gpu: &GpuSample) -> GpuReading {
    GpuReading {
        index: gpu.index,
        util_pct: gpu.utilization_pct.map(f64::from),
        memory_used_gib: gpu.memory_used_bytes.map(|b| b as f64 / GIB),
        memory_total_gib: gpu.memory_total_bytes.map(|b| b as f64 / GIB),
        temperature_c: gpu.temperature_c.map(f64::from),
        power_w: gpu.power_milliwatts.map(|mw| f64::from(mw) / 1000.0),
    }
}

/// Sums of one GPU over one minute, as the rollup row adds them up.
#[derive(Debug, Default, Clone, PartialEq)]
struct Rollup {
    samples: i64,
    util_sum: i64,
    util_min: i64,
    util_max: i64,
    memory_sum: i64,
    memory_max: i64,
    temperature_sum: i64,
    temperature_max: i64,
    power_sum: i64,
    power_max: i64,
    energy_mj: i64,
}

impl Rollup {
    fn add(&mut self, gpu: &GpuSample, frame_ms: i64) {
        let Some(util) = gpu.utilization_pct.map(i64::from) else { return };
        let memory = gpu.memory_used_bytes.map_or(0, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let temperature = gpu.temperature_c.map_or(0, i64::from);
        let power = gpu.power_milliwatts.map_or(0, i64::from);
        if self.samples == 0 {
            self.util_min = util;
        }
        self.samples += 1;
        self.util_sum += util;
        self.util_min = self.util_min.min(util);
        self.util_max = self.util_max.max(util);
        self.memory_sum += memory;
        self.memory_max = self.memory_max.max(memory);
        self.temperature_sum += temperature;
        self.temperature_max = self.temperature_max.max(temperature);
        self.power_sum += power;
        self.power_max = self.power_max.max(power);
        self.energy_mj += energy_mj(power, frame_ms);
    }
}

/// Energy of `power_mw` held for `ms`, millijoules.
fn energy_mj(power_mw: i64, ms: i64) -> i64 {
    power_mw * ms / 1000
}

fn minute_of(at_ms: i64) -> DateTime<Utc> {
    let at = Utc.timestamp_millis_opt(at_ms).single().unwrap_or_default();
    at.duration_trunc(Duration::minutes(1)).unwrap_or(at)
}

/// Whether `(stream, sequence)` comes after the cursor.
fn is_new(cursor: Option<&telemetry_cursors::Model>, stream: i64, sequence: i64) -> bool {
    cursor.is_none_or(|c| (stream, sequence) > (c.stream, c.sequence))
}

fn check_batch(frames: &[TelemetryFrame]) -> AppResult<()> {
    if frames.len() > MAX_FRAMES {
        return Err(AppError::invalid_field("frames", format!("at most {MAX_FRAMES} frames per message")));
    }
    if frames.windows(2).any(|w| w[1].sequence <= w[0].sequence) {
        return Err(AppError::invalid_field("frames", "sequence numbers must grow within a message"));
    }
    if frames.iter().any(|f| f.gpus.len() > MAX_GPUS) {
        return Err(AppError::invalid_field("frames", format!("at most {MAX_GPUS} GPUs per frame")));
    }
    if frames.iter().any(|f| i64::try_from(f.sequence).is_err() || f.at_ms <= 0) {
        return Err(AppError::invalid_field("frames", "a frame needs a sequence and a time"));
    }
    Ok(())
}

/// Stores the frames of `stream` the server has not seen, once, and says what to acknowledge.
/// Returns `None` for an empty batch.
pub async fn ingest(
    services: &Services,
    host_id: i64,
    stream: u64,
    frames: &[TelemetryFrame],
    dropped: u64,
) -> AppResult<Option<ServerMessage>> {
    check_batch(frames)?;
    let Some(last) = frames.last() else { return Ok(None) };
    let ack = ServerMessage::TelemetryAck { stream, sequence: last.sequence };
    let stream_key = i64::try_from(stream).map_err(|_| AppError::invalid_field("stream", "out of range"))?;
    let now = Utc::now();

    let txn = begin_write(&services.db).await.map_err(internal("starting telemetry ingest"))?;
    let cursor =
        telemetry_cursors::Entity::find_by_id(host_id).one(&txn).await.map_err(internal("loading telemetry cursor"))?;
    let fresh: Vec<&TelemetryFrame> =
        frames.iter().filter(|f| is_new(cursor.as_ref(), stream_key, f.sequence as i64)).collect();
    if fresh.is_empty() {
        txn.commit().await.map_err(internal("ending telemetry ingest"))?;
        services.telemetry.frames_duplicate.fetch_add(frames.len() as u64, Ordering::Relaxed);
        return Ok(Some(ack));
    }

    let rentals = live_rentals(&txn, host_id).await?;
    let mut rollups: BTreeMap<(u32, DateTime<Utc>), Rollup> = BTreeMap::new();
    let mut energy: BTreeMap<(i64, u32), i64> = BTreeMap::new();
    let mut previous = services.telemetry.last_at_ms(host_id);
    for frame in &fresh {
        let frame_ms = previous.map_or(DEFAULT_FRAME_MS, |p| (frame.at_ms - p).clamp(0, MAX_FRAME_GAP_MS));
        previous = Some(frame.at_ms);
        let minute = minute_of(frame.at_ms);
        let at = Utc.timestamp_millis_opt(frame.at_ms).single().unwrap_or(now);
        for gpu in &frame.gpus {
            rollups.entry((gpu.index, minute)).or_default().add(gpu, frame_ms);
            let Some(power) = gpu.power_milliwatts else { continue };
            for rental in rentals.iter().filter(|r| r.gpu_index == gpu.index && r.running_at(at)) {
                *energy.entry((rental.rental_id, gpu.index)).or_default() += energy_mj(i64::from(power), frame_ms);
            }
        }
    }
    upsert_rollups(&txn, host_id, &rollups).await?;
    add_energy(&txn, &energy).await?;
    let stored = fresh.len() as i64;
    let newest = fresh.last().map_or(0, |f| f.sequence as i64);
    let dropped = i64::try_from(dropped).unwrap_or(i64::MAX);
    let backend = txn.get_database_backend();
    let mut sql = Sql { backend, text: String::new(), values: Vec::new() };
    let row =
        [sql.bind(host_id), sql.bind(stream_key), sql.bind(newest), sql.bind(stored), sql.bind(dropped), sql.bind(now)]
            .join(", ");
    txn.execute_raw(Statement::from_sql_and_values(
        backend,
        format!(
            "INSERT INTO telemetry_cursors (host_id, stream, sequence, frames, dropped, updated_at) VALUES ({row}) \
             ON CONFLICT (host_id) DO UPDATE SET stream = excluded.stream, sequence = excluded.sequence, \
             frames = telemetry_cursors.frames + excluded.frames, dropped = excluded.dropped, updated_at = excluded.updated_at"
        ),
        sql.values,
    ))
    .await
    .map_err(internal("moving telemetry cursor"))?;
    txn.commit().await.map_err(internal("committing telemetry"))?;

    let hub = &services.telemetry;
    hub.frames_stored.fetch_add(fresh.len() as u64, Ordering::Relaxed);
    hub.samples_stored.fetch_add(fresh.iter().map(|f| f.gpus.len() as u64).sum(), Ordering::Relaxed);
    for frame in &fresh {
        hub.publish(host_id, frame);
    }
    if let Some(newest) = fresh.last() {
        hub.latest.write().unwrap_or_else(|p| p.into_inner()).insert(host_id, Arc::new((*newest).clone()));
    }
    alerts::observe(services, host_id, &fresh, &rentals).await?;
    Ok(Some(ack))
}

async fn upsert_rollups(
    conn: &impl ConnectionTrait,
    host_id: i64,
    rollups: &BTreeMap<(u32, DateTime<Utc>), Rollup>,
) -> AppResult<()> {
    let backend = conn.get_database_backend();
    let (least, greatest) = if backend == DbBackend::Postgres { ("LEAST", "GREATEST") } else { ("MIN", "MAX") };
    let mut sql = Sql { backend, text: String::new(), values: Vec::new() };
    let mut rows = Vec::new();
    for ((index, minute), r) in rollups.iter().filter(|(_, r)| r.samples > 0) {
        let values = [
            sql.bind(host_id),
            sql.bind(i32::try_from(*index).unwrap_or(i32::MAX)),
            sql.bind(*minute),
            sql.bind(r.samples as i32),
            sql.bind(r.util_sum),
            sql.bind(r.util_min as i32),
            sql.bind(r.util_max as i32),
            sql.bind(r.memory_sum),
            sql.bind(r.memory_max),
            sql.bind(r.temperature_sum),
            sql.bind(r.temperature_max as i32),
            sql.bind(r.power_sum),
            sql.bind(r.power_max),
            sql.bind(r.energy_mj),
        ];
        rows.push(format!("({})", values.join(", ")));
    }
    if rows.is_empty() {
        return Ok(());
    }
    let add = |c: &str| format!("{c} = gpu_rollups.{c} + excluded.{c}");
    let text = format!(
        "INSERT INTO gpu_rollups (host_id, gpu_index, minute, samples, util_sum, util_min, util_max, memory_used_sum, \
         memory_used_max, temperature_sum, temperature_max, power_sum_mw, power_max_mw, energy_mj) VALUES {} \
         ON CONFLICT (host_id, gpu_index, minute) DO UPDATE SET {}, {}, {}, {}, {}, {}, \
         util_min = {least}(gpu_rollups.util_min, excluded.util_min), \
         util_max = {greatest}(gpu_rollups.util_max, excluded.util_max), \
         memory_used_max = {greatest}(gpu_rollups.memory_used_max, excluded.memory_used_max), \
         temperature_max = {greatest}(gpu_rollups.temperature_max, excluded.temperature_max), \
         power_max_mw = {greatest}(gpu_rollups.power_max_mw, excluded.power_max_mw)",
        rows.join(", "),
        add("samples"),
        add("util_sum"),
        add("memory_used_sum"),
        add("temperature_sum"),
        add("power_sum_mw"),
        add("energy_mj"),
    );
    conn.execute_raw(Statement::from_sql_and_values(backend, text, sql.values))
        .await
        .map_err(internal("storing telemetry rollups"))?;
    Ok(())
}

async fn add_energy(conn: &impl ConnectionTrait, energy: &BTreeMap<(i64, u32), i64>) -> AppResult<()> {
    if energy.is_empty() {
        return Ok(());
    }
    let backend = conn.get_database_backend();
    let mut sql = Sql { backend, text: String::new(), values: Vec::new() };
    let rows: Vec<String> = energy
        .iter()
        .map(|((rental, index), mj)| {
            format!(
                "({}, {}, {})",
                sql.bind(*rental),
                sql.bind(i32::try_from(*index).unwrap_or(i32::MAX)),
                sql.bind(*mj)
            )
        })
        .collect();
    let text = format!(
        "INSERT INTO rental_energy (rental_id, gpu_index, energy_mj) VALUES {} ON CONFLICT (rental_id, gpu_index) \
         DO UPDATE SET energy_mj = rental_energy.energy_mj + excluded.energy_mj",
        rows.join(", ")
    );
    conn.execute_raw(Statement::from_sql_and_values(backend, text, sql.values))
        .await
        .map_err(internal("storing rental energy"))?;
    Ok(())
}

/// The host's rentals that hold GPUs now, one row per (rental, GPU).
async fn live_rentals(conn: &impl ConnectionTrait, host_id: i64) -> AppResult<Vec<LiveRental>> {
    #[derive(FromQueryResult)]
    struct Row {
        rental_id: i64,
        device_index: i32,
        running_since: Option<DateTime<Utc>>,
        billing_ends_at: Option<DateTime<Utc>>,
        stop_when_idle: bool,
        state: String,
    }
    let backend = conn.get_database_backend();
    let mut sql = Sql { backend, text: String::new(), values: Vec::new() };
    let host = sql.bind(host_id);
    let active = sql.bind(true);
    let states: Vec<String> =
        [RentalState::Provisioning, RentalState::Running, RentalState::Stopping, RentalState::Preempting]
            .iter()
            .map(|s| sql.bind(s.as_str()))
            .collect();
    let text = format!(
        "SELECT r.id AS rental_id, g.device_index, r.running_since, r.billing_ends_at, r.stop_when_idle, r.state \
         FROM rentals r JOIN rental_gpus rg ON rg.rental_id = r.id JOIN gpus g ON g.id = rg.gpu_id \
         WHERE r.host_id = {host} AND rg.active = {active} AND r.state IN ({})",
        states.join(", ")
    );
    let rows = Row::find_by_statement(Statement::from_sql_and_values(backend, text, sql.values))
        .all(conn)
        .await
        .map_err(internal("loading the host's live rentals"))?;
    Ok(rows
        .into_iter()
        .map(|r| LiveRental {
            rental_id: r.rental_id,
            gpu_index: u32::try_from(r.device_index).unwrap_or(u32::MAX),
            running_since: r.running_since,
            billing_ends_at: r.billing_ends_at,
            stop_when_idle: r.stop_when_idle,
            running: r.state == RentalState::Running.as_str(),
        })
        .collect())
}

/// What one viewer may see: hosts, and per host all GPUs (`None`) or some, from a time on.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub scope: TelemetryScope,
    hosts: BTreeMap<i64, Option<BTreeSet<u32>>>,
    /// Nothing before this (a rental's own window).
    since: Option<DateTime<Utc>>,
    /// Nothing after this (an ended rental).
    until: Option<DateTime<Utc>>,
    /// A live feed may follow.
    pub live: bool,
}

impl Grant {
    /// The part of `published` this viewer may see, as the feed's JSON.
    pub fn admit(&self, published: &Published) -> Option<String> {
        match self.covers(&published.sample)? {
            None => Some(published.json.clone()),
            only => serde_json::to_string(&LiveEvent::Sample(restricted(&published.sample, only))).ok(),
        }
    }

    fn admits_sample(&self, sample: &HostSample) -> Option<HostSample> {
        self.covers(sample).map(|only| restricted(sample, only))
    }

    /// Whether this grant covers `sample` (its host, inside the time window), and if so which
    /// of its GPUs: `Some(None)` all of them, `Some(Some(indexes))` only those.
    fn covers(&self, sample: &HostSample) -> Option<Option<&BTreeSet<u32>>> {
        let gpus = self.hosts.get(&sample.host_id)?;
        let at = sample.at_ms;
        let in_window = self.since.is_none_or(|s| at >= s.timestamp_millis())
            && self.until.is_none_or(|u| at < u.timestamp_millis());
        in_window.then_some(gpus.as_ref())
    }
}

/// `sample` with only the GPUs in `only` (all of them when `None`).
fn restricted(sample: &HostSample, only: Option<&BTreeSet<u32>>) -> HostSample {
    HostSample {
        gpus: sample.gpus.iter().filter(|g| only.is_none_or(|i| i.contains(&g.index))).cloned().collect(),
        ..sample.clone()
    }
}

/// Decides what `principal` may see of `scope`: a renter their rental's GPUs while it holds
/// them (and its own past window as history), a provider their hosts, an admin everything.
/// Anything else is "not found", so ids of other people's rentals and hosts reveal nothing.
pub async fn grant(services: &Services, principal: &Principal, scope: TelemetryScope) -> AppResult<Grant> {
    let mut grant = Grant { scope, hosts: BTreeMap::new(), since: None, until: None, live: true };
    match scope {
        TelemetryScope::Rental(id) => {
            let rental = rentals::Entity::find_by_id(id)
                .one(&services.db)
                .await
                .map_err(internal("loading rental"))?
                .filter(|r| r.renter_id == principal.user_id || principal.roles.admin)
                .ok_or_else(|| AppError::not_found("rental"))?;
            let gpu_ids: Vec<i64> = rental_gpus::Entity::find()
                .filter(rental_gpus::Column::RentalId.eq(id))
                .all(&services.db)
                .await
                .map_err(internal("loading rental gpus"))?
                .into_iter()
                .map(|h| h.gpu_id)
                .collect();
            let indexes: BTreeSet<u32> = gpus::Entity::find()
                .filter(gpus::Column::Id.is_in(gpu_ids))
                .all(&services.db)
                .await
                .map_err(internal("loading gpus"))?
                .into_iter()
                .filter_map(|g| u32::try_from(g.device_index).ok())
                .collect();
            let state = RentalState::parse(&rental.state).unwrap_or(RentalState::Failed);
            let holding = matches!(
                state,
                RentalState::Provisioning | RentalState::Running | RentalState::Stopping | RentalState::Preempting
            );
            grant.hosts.insert(rental.host_id, Some(indexes));
            grant.since = Some(rental.starts_at);
            grant.live = holding;
            if !holding {
                grant.until = Some(rental.ends_at.or(rental.billing_ends_at).unwrap_or(rental.starts_at));
            }
        }
        TelemetryScope::Host(id) => {
            let host = hosts::Entity::find_by_id(id)
                .one(&services.db)
                .await
                .map_err(internal("loading host"))?
                .filter(|h| h.provider_id == principal.user_id || principal.roles.admin)
                .ok_or_else(|| AppError::not_found("host"))?;
            grant.hosts.insert(host.id, None);
        }
        TelemetryScope::Mine => {
            let owned = hosts::Entity::find()
                .filter(hosts::Column::ProviderId.eq(principal.user_id))
                .filter(hosts::Column::RevokedAt.is_null())
                .all(&services.db)
                .await
                .map_err(internal("loading hosts"))?;
            grant.hosts.extend(owned.into_iter().map(|h| (h.id, None)));
        }
        TelemetryScope::Fleet => {
            principal.require_admin()?;
            let all = hosts::Entity::find()
                .filter(hosts::Column::RevokedAt.is_null())
                .all(&services.db)
                .await
                .map_err(internal("loading hosts"))?;
            grant.hosts.extend(all.into_iter().map(|h| (h.id, None)));
        }
    }
    Ok(grant)
}

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
    let mut samples: Vec<HostSample> = Vec::new();
    for (host_id, indexes) in &grant.hosts {
        let recent: Vec<HostSample> =
            services.telemetry.recent(*host_id).iter().filter_map(|p| grant.admits_sample(&p.sample)).collect();
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
        let rows = query.all(&services.db).await.map_err(internal("loading telemetry history"))?;
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
        .map_err(internal("loading rental energy"))?
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
    let mut sql = Sql { backend, text: String::new(), values: Vec::new() };
    let provider = sql.bind(principal.user_id);
    let text = format!(
        "SELECT e.rental_id, h.hostname, CAST(SUM(e.energy_mj) AS BIGINT) AS energy_mj FROM rental_energy e \
         JOIN rentals r ON r.id = e.rental_id JOIN hosts h ON h.id = r.host_id WHERE h.provider_id = {provider} \
         GROUP BY e.rental_id, h.hostname ORDER BY e.rental_id DESC LIMIT 50"
    );
    let rows = Row::find_by_statement(Statement::from_sql_and_values(backend, text, sql.values))
        .all(&services.db)
        .await
        .map_err(internal("loading provider energy"))?;
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
    let host_rows = host_query.all(&services.db).await.map_err(internal("loading hosts"))?;
    let host_ids: Vec<i64> = host_rows.iter().map(|h| h.id).collect();
    let gpu_rows = gpus::Entity::find()
        .filter(gpus::Column::HostId.is_in(host_ids.clone()))
        .filter(gpus::Column::State.eq("available"))
        .order_by_asc(gpus::Column::DeviceIndex)
        .all(&services.db)
        .await
        .map_err(internal("loading gpus"))?;
    let held: BTreeSet<i64> = rental_gpus::Entity::find()
        .filter(rental_gpus::Column::GpuId.is_in(gpu_rows.iter().map(|g| g.id)))
        .filter(rental_gpus::Column::Active.eq(true))
        .filter(rental_gpus::Column::StartsAt.lte(now))
        .filter(rental_gpus::Column::EndsAt.gt(now))
        .all(&services.db)
        .await
        .map_err(internal("loading holds"))?
        .into_iter()
        .map(|h| h.gpu_id)
        .collect();
    let providers: HashMap<i64, String> = users::Entity::find()
        .filter(users::Column::Id.is_in(host_rows.iter().map(|h| h.provider_id)))
        .all(&services.db)
        .await
        .map_err(internal("loading providers"))?
        .into_iter()
        .map(|u| (u.id, u.email))
        .collect();
    let running = rentals::Entity::find()
        .filter(rentals::Column::HostId.is_in(host_ids.clone()))
        .filter(rentals::Column::State.eq(RentalState::Running.as_str()))
        .all(&services.db)
        .await
        .map_err(internal("loading running rentals"))?;
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

/// Deletes rollups older than the retention period. Returns how many rows went.
pub async fn apply_retention(services: &Services) -> AppResult<u64> {
    let keep_days = services.settings.telemetry.retention_days.max(1);
    let cutoff = Utc::now() - Duration::days(i64::from(keep_days));
    Ok(gpu_rollups::Entity::delete_many()
        .filter(gpu_rollups::Column::Minute.lt(cutoff))
        .exec(&services.db)
        .await
        .map_err(internal("deleting old rollups"))?
        .rows_affected)
}

/// What `/metrics` needs beside the live frames.
pub struct MetricsSnapshot {
    /// (host id, GPU index) → (hostname, model) of hosts online now with a frame in memory.
    pub gpus: HashMap<(i64, u32), (String, String)>,
    pub online_hosts: BTreeSet<i64>,
    /// (kind, state, count) of every rental.
    pub rentals: Vec<(String, String, i64)>,
}

pub async fn metrics_snapshot(services: &Services) -> AppResult<MetricsSnapshot> {
    let ids: Vec<i64> = services.telemetry.latest().keys().copied().collect();
    let hosts: Vec<hosts::Model> = hosts::Entity::find()
        .filter(hosts::Column::Id.is_in(ids.clone()))
        .all(&services.db)
        .await
        .map_err(internal("loading hosts"))?;
    let online_hosts = hosts.iter().filter(|h| h.status == HostStatus::Online.as_str()).map(|h| h.id).collect();
    let names: HashMap<i64, String> = hosts.into_iter().map(|h| (h.id, h.hostname)).collect();
    let gpus = gpus::Entity::find()
        .filter(gpus::Column::HostId.is_in(ids))
        .all(&services.db)
        .await
        .map_err(internal("loading gpus"))?
        .into_iter()
        .map(|g| {
            let host = names.get(&g.host_id).cloned().unwrap_or_default();
            ((g.host_id, u32::try_from(g.device_index).unwrap_or(0)), (host, g.model))
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
    .map_err(internal("counting rentals"))?
    .into_iter()
    .map(|c| (c.kind, c.state, c.n))
    .collect();
    Ok(MetricsSnapshot { gpus, online_hosts, rentals })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(util: u32, power: u32) -> GpuSample {
        GpuSample { utilization_pct: Some(util), power_milliwatts: Some(power), ..GpuSample::default() }
    }

    proptest! {
        /// Split into any batches, a minute's rollup adds up to the same as in one batch.
        #[test]
        fn rollups_add_up_whatever_the_batching(utils in proptest::collection::vec(0u32..=100, 1..60), cut in 0usize..60) {
            let mut whole = Rollup::default();
            for u in &utils {
                whole.add(&sample(*u, 1000 * u), 1000);
            }
            let cut = cut.min(utils.len());
            let (mut a, mut b) = (Rollup::default(), Rollup::default());
            for u in &utils[..cut] { a.add(&sample(*u, 1000 * u), 1000); }
            for u in &utils[cut..] { b.add(&sample(*u, 1000 * u), 1000); }
            let merged = match (a.samples, b.samples) {
                (0, _) => b.clone(),
                (_, 0) => a.clone(),
                _ => Rollup {
                    samples: a.samples + b.samples,
                    util_sum: a.util_sum + b.util_sum,
                    util_min: a.util_min.min(b.util_min),
                    util_max: a.util_max.max(b.util_max),
                    memory_sum: a.memory_sum + b.memory_sum,
                    memory_max: a.memory_max.max(b.memory_max),
                    temperature_sum: a.temperature_sum + b.temperature_sum,
                    temperature_max: a.temperature_max.max(b.temperature_max),
                    power_sum: a.power_sum + b.power_sum,
                    power_max: a.power_max.max(b.power_max),
                    energy_mj: a.energy_mj + b.energy_mj,
                },
            };
            prop_assert_eq!(merged, whole.clone());
            prop_assert_eq!(whole.energy_mj, utils.iter().map(|u| i64::from(*u) * 1000).sum::<i64>());
        }
    }

    #[test]
    fn cursor_order_is_stream_then_sequence() {
        let cursor = telemetry_cursors::Model {
            host_id: 1,
            stream: 10,
            sequence: 5,
            frames: 5,
            dropped: 0,
            updated_at: Utc::now(),
        };
        assert!(!is_new(Some(&cursor), 10, 5));
        assert!(!is_new(Some(&cursor), 10, 4));
        assert!(is_new(Some(&cursor), 10, 6));
        assert!(is_new(Some(&cursor), 11, 1), "a restarted agent's first frame is new");
        assert!(!is_new(Some(&cursor), 9, 100), "a late frame of an older stream is not");
        assert!(is_new(None, 1, 1));
    }
}
