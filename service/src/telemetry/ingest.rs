//! Ingest: an agent sends frames (every GPU of its host at one instant) numbered per host by
//! `(stream, sequence)`. [`ingest`] stores, in one transaction, the one-minute rollups of the
//! frames it has not seen, the energy each rented GPU used, and the host's cursor (the newest
//! frame stored); only after the commit does the gateway acknowledge, so the agent replays
//! anything unacknowledged and nothing is stored twice or lost across a crash on either side.

use crate::{
    AppError, AppResult, Services,
    alerts::{self, LiveRental},
    db::{DbResultExt, Sql, begin_write},
    entities::telemetry_cursors,
};
use cardpool_domain::rentals::RentalState;
use cardpool_protocol::{GpuSample, ServerMessage, TelemetryFrame};
use chrono::{DateTime, Duration, DurationRound, TimeZone, Utc};
use sea_orm::{ConnectionTrait, DbBackend, EntityTrait, FromQueryResult, Statement};
use std::{collections::BTreeMap, sync::atomic::Ordering};

/// Frames one message may carry, and GPUs one frame.
const MAX_FRAMES: usize = 1000;

const MAX_GPUS: usize = 64;
/// A GPU UUID is `GPU-` and 36 characters; MIG instances are a little longer.
const MAX_UUID: usize = 96;

/// A frame stands for the time since the previous one, at most this long (a gap is no usage).
const MAX_FRAME_GAP_MS: i64 = 5_000;

/// The time one frame stands for when there is no previous one.
const DEFAULT_FRAME_MS: i64 = 1_000;

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
pub(super) fn energy_mj(power_mw: i64, ms: i64) -> i64 {
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
    if frames.iter().any(|f| f.gpus.len() > MAX_GPUS || f.gpus.iter().any(|g| g.uuid.len() > MAX_UUID)) {
        return Err(AppError::invalid_field(
            "frames",
            format!("at most {MAX_GPUS} GPUs per frame, UUIDs of at most {MAX_UUID} characters"),
        ));
    }
    if frames.iter().any(|f| i64::try_from(f.sequence).is_err() || f.at_ms <= 0) {
        return Err(AppError::invalid_field("frames", "a frame needs a sequence and a time"));
    }
    Ok(())
}

/// How far ahead of the server's clock a sample's time may be (clocks drift a little). A later
/// one is taken as now, so an agent's clock cannot date rollups in the future or make an idle
/// GPU look idle for hours at once. (Earlier times are real: an agent replays what it buffered
/// while disconnected.)
const CLOCK_AHEAD_MS: i64 = 5_000;

fn within_clock(frames: &[TelemetryFrame], now_ms: i64) -> std::borrow::Cow<'_, [TelemetryFrame]> {
    if frames.iter().all(|f| f.at_ms <= now_ms + CLOCK_AHEAD_MS) {
        return std::borrow::Cow::Borrowed(frames);
    }
    let clamped = frames
        .iter()
        .map(|f| TelemetryFrame {
            at_ms: if f.at_ms > now_ms + CLOCK_AHEAD_MS { now_ms } else { f.at_ms },
            ..f.clone()
        })
        .collect();
    std::borrow::Cow::Owned(clamped)
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
    let frames = within_clock(frames, now.timestamp_millis());
    let frames = frames.as_ref();

    let txn = begin_write(&services.db).await.context("starting telemetry ingest")?;
    let cursor = telemetry_cursors::Entity::find_by_id(host_id).one(&txn).await.context("loading telemetry cursor")?;
    let fresh: Vec<&TelemetryFrame> =
        frames.iter().filter(|f| is_new(cursor.as_ref(), stream_key, f.sequence as i64)).collect();
    if fresh.is_empty() {
        txn.commit().await.context("ending telemetry ingest")?;
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
    let mut sql = Sql::new(backend);
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
    .context("moving telemetry cursor")?;
    txn.commit().await.context("committing telemetry")?;

    services.telemetry.stored(host_id, &fresh);
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
    let mut sql = Sql::new(backend);
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
        .context("storing telemetry rollups")?;
    Ok(())
}

async fn add_energy(conn: &impl ConnectionTrait, energy: &BTreeMap<(i64, u32), i64>) -> AppResult<()> {
    if energy.is_empty() {
        return Ok(());
    }
    let backend = conn.get_database_backend();
    let mut sql = Sql::new(backend);
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
        .context("storing rental energy")?;
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
    let mut sql = Sql::new(backend);
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
        .context("loading the host's live rentals")?;
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
