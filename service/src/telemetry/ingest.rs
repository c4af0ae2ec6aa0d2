//! Ingest: an agent sends frames (every GPU of its host at one instant) numbered per host by
//! `(stream, sequence)`. [`ingest`] stores the one-minute rollups of the frames the server has
//! not seen, the energy each rented GPU used, and the host's cursor (the newest frame stored) in
//! one transaction; only after the commit does the gateway acknowledge, so the agent replays
//! anything unacknowledged and nothing is stored twice or lost across a crash on either side.
//!
//! Group commit: the messages of every agent that arrive while a transaction is being written
//! wait in [`GroupCommit`]'s queue, and the next transaction stores all of them at once (their
//! rollups summed in memory into one row per GPU-minute, their cursors moved in the same
//! transaction). No task runs it: whichever waiting caller takes the writer's turn writes the
//! group and hands every other caller its outcome. A commit costs about the same for one
//! message as for a thousand, so throughput grows with load instead of queueing behind it.

use crate::{
    AppError, AppResult, Services,
    alerts::{self, LiveRental},
    db::{DbResultExt, Sql, begin_write},
};
use cardpool_domain::rentals::RentalState;
use cardpool_protocol::{GpuSample, ServerMessage, TelemetryFrame};
use chrono::{DateTime, Duration, DurationRound, TimeZone, Utc};
use sea_orm::{ConnectionTrait, DbBackend, FromQueryResult, Statement};
use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    sync::{Mutex, atomic::Ordering},
};
use tokio::sync::oneshot;

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

/// Whether `(stream, sequence)` comes after the cursor `(stream, sequence)`.
fn is_new(cursor: Option<(i64, i64)>, stream: i64, sequence: i64) -> bool {
    cursor.is_none_or(|c| (stream, sequence) > c)
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

fn within_clock(mut frames: Vec<TelemetryFrame>, now_ms: i64) -> Vec<TelemetryFrame> {
    for frame in frames.iter_mut().filter(|f| f.at_ms > now_ms + CLOCK_AHEAD_MS) {
        frame.at_ms = now_ms;
    }
    frames
}

/// Messages one transaction stores at most, counted in GPU samples (a group past it leaves the
/// rest queued for the next transaction), so a transaction stays a few megabytes however many
/// agents send at once.
const MAX_GROUP_SAMPLES: usize = 100_000;

/// Rows one statement writes at most (14 parameters a rollup row, well within SQLite's 32,766
/// and PostgreSQL's 65,535).
const ROWS_PER_STATEMENT: usize = 1_000;

/// One agent's telemetry message, as the group commit stores it.
struct Message {
    host_id: i64,
    stream: i64,
    frames: Vec<TelemetryFrame>,
    dropped: i64,
}

/// A message waiting for the next group commit, and where its outcome goes.
struct Pending {
    message: Message,
    done: oneshot::Sender<AppResult<Stored>>,
}

/// What the group commit stored of one message: its frames the server had not seen (oldest
/// first) and the host's live rentals, for the live feed and alerts.
struct Stored {
    fresh: Vec<TelemetryFrame>,
    rentals: Vec<LiveRental>,
}

/// The queue of messages waiting to be stored, and the writer's turn.
#[derive(Default)]
pub(super) struct GroupCommit {
    queue: Mutex<VecDeque<Pending>>,
    writer: tokio::sync::Mutex<()>,
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
    let stream = i64::try_from(stream).map_err(|_| AppError::invalid_field("stream", "out of range"))?;
    let frames = within_clock(frames.to_vec(), Utc::now().timestamp_millis());
    let dropped = i64::try_from(dropped).unwrap_or(i64::MAX);
    let sent = frames.len();
    // Dashboards see the frames now; storing them may wait for the transaction before.
    let shown = services.telemetry.arrived(host_id, &frames);
    services.bus.share_telemetry(host_id, &shown);

    let group = &services.telemetry.group;
    let (done, mut outcome) = oneshot::channel();
    group
        .queue
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push_back(Pending { message: Message { host_id, stream, frames, dropped }, done });
    let stored = {
        let _turn = group.writer.lock().await;
        // A writer before us may already have stored our message with its group; if not, the
        // groups ahead of it are written until it has been (a group is bounded, so a long queue
        // takes several).
        loop {
            match outcome.try_recv() {
                Err(oneshot::error::TryRecvError::Empty) => write_next_group(services).await,
                // Closed: its writer was cancelled mid-write; nothing was acknowledged, the agent replays.
                answer => break answer.unwrap_or(Err(AppError::Internal)),
            }
        }
    }?;

    let duplicates = sent - stored.fresh.len();
    services.telemetry.frames_duplicate.fetch_add(duplicates as u64, Ordering::Relaxed);
    if stored.fresh.is_empty() {
        return Ok(Some(ack));
    }
    let fresh: Vec<&TelemetryFrame> = stored.fresh.iter().collect();
    services.telemetry.stored(host_id, &fresh);
    alerts::observe(services, host_id, &fresh, &stored.rentals).await?;
    Ok(Some(ack))
}

/// Takes the queue's oldest messages, up to [`MAX_GROUP_SAMPLES`], stores them in one
/// transaction and hands each its outcome. Called only with the writer's turn held.
async fn write_next_group(services: &Services) {
    let group = {
        let mut queue = services.telemetry.group.queue.lock().unwrap_or_else(|p| p.into_inner());
        let mut samples = 0;
        let mut taken = 0;
        for pending in queue.iter() {
            let size: usize = pending.message.frames.iter().map(|f| f.gpus.len().max(1)).sum();
            if taken > 0 && samples + size > MAX_GROUP_SAMPLES {
                break;
            }
            samples += size;
            taken += 1;
        }
        queue.drain(..taken).collect::<Vec<_>>()
    };
    let (messages, answers): (Vec<_>, Vec<_>) = group.into_iter().map(|p| (p.message, p.done)).unzip();
    match write_group(services, messages).await {
        Ok(stored) => {
            for (answer, stored) in answers.into_iter().zip(stored) {
                let _ = answer.send(Ok(stored));
            }
        }
        Err(err) => {
            for answer in answers {
                let _ = answer.send(Err(err.clone()));
            }
        }
    }
}

/// A host's cursor as the group moves it: the newest frame stored, frames stored, the agent's
/// latest count of dropped frames.
struct CursorMove {
    stream: i64,
    sequence: i64,
    frames: i64,
    dropped: i64,
}

/// One transaction for a group of messages, in arrival order
/// (two messages of one host are filtered against each other as well as against its cursor).
async fn write_group(services: &Services, messages: Vec<Message>) -> AppResult<Vec<Stored>> {
    let now = Utc::now();
    let hosts: Vec<i64> = messages.iter().map(|m| m.host_id).collect::<BTreeSet<_>>().into_iter().collect();
    let txn = begin_write(&services.db).await.context("starting telemetry ingest")?;
    let mut cursors = load_cursors(&txn, &hosts).await?;
    let live = live_rentals(&txn, &hosts).await?;
    let mut rollups: BTreeMap<(i64, u32, DateTime<Utc>), Rollup> = BTreeMap::new();
    let mut energy: BTreeMap<(i64, u32), i64> = BTreeMap::new();
    let mut moves: BTreeMap<i64, CursorMove> = BTreeMap::new();
    let mut previous: HashMap<i64, Option<i64>> = HashMap::new();
    let mut stored = Vec::with_capacity(messages.len());
    for Message { host_id, stream, frames, dropped } in messages {
        let cursor = cursors.get(&host_id).copied();
        let fresh: Vec<TelemetryFrame> =
            frames.into_iter().filter(|f| is_new(cursor, stream, f.sequence as i64)).collect();
        let rentals = live.get(&host_id).cloned().unwrap_or_default();
        let previous = previous.entry(host_id).or_insert_with(|| services.telemetry.last_stored_ms(host_id));
        for frame in &fresh {
            let frame_ms = previous.map_or(DEFAULT_FRAME_MS, |p| (frame.at_ms - p).clamp(0, MAX_FRAME_GAP_MS));
            *previous = Some(frame.at_ms);
            let minute = minute_of(frame.at_ms);
            let at = Utc.timestamp_millis_opt(frame.at_ms).single().unwrap_or(now);
            for gpu in &frame.gpus {
                rollups.entry((host_id, gpu.index, minute)).or_default().add(gpu, frame_ms);
                let Some(power) = gpu.power_milliwatts else { continue };
                for rental in rentals.iter().filter(|r| r.gpu_index == gpu.index && r.running_at(at)) {
                    *energy.entry((rental.rental_id, gpu.index)).or_default() += energy_mj(i64::from(power), frame_ms);
                }
            }
        }
        if let Some(newest) = fresh.last() {
            let sequence = newest.sequence as i64;
            cursors.insert(host_id, (stream, sequence));
            let moved = moves.entry(host_id).or_insert(CursorMove { stream, sequence, frames: 0, dropped });
            *moved = CursorMove { stream, sequence, frames: moved.frames + fresh.len() as i64, dropped };
        }
        stored.push(Stored { fresh, rentals });
    }
    upsert_rollups(&txn, &rollups).await?;
    add_energy(&txn, &energy).await?;
    move_cursors(&txn, &moves, now).await?;
    txn.commit().await.context("committing telemetry")?;
    services.telemetry.commits.fetch_add(1, Ordering::Relaxed);
    Ok(stored)
}

/// `IN (…)` over `ids`, one bound parameter each.
fn id_list(sql: &mut Sql, ids: &[i64]) -> String {
    ids.iter().map(|id| sql.bind(*id)).collect::<Vec<_>>().join(", ")
}

/// The cursors `(stream, sequence)` of the hosts that have one.
async fn load_cursors(conn: &impl ConnectionTrait, hosts: &[i64]) -> AppResult<HashMap<i64, (i64, i64)>> {
    #[derive(FromQueryResult)]
    struct Row {
        host_id: i64,
        stream: i64,
        sequence: i64,
    }
    let backend = conn.get_database_backend();
    let mut cursors = HashMap::new();
    for chunk in hosts.chunks(ROWS_PER_STATEMENT) {
        let mut sql = Sql::new(backend);
        let text = format!(
            "SELECT host_id, stream, sequence FROM telemetry_cursors WHERE host_id IN ({})",
            id_list(&mut sql, chunk)
        );
        let rows = Row::find_by_statement(Statement::from_sql_and_values(backend, text, sql.values))
            .all(conn)
            .await
            .context("loading telemetry cursors")?;
        cursors.extend(rows.into_iter().map(|r| (r.host_id, (r.stream, r.sequence))));
    }
    Ok(cursors)
}

/// Writes `rows` by `statement` (an `INSERT ... VALUES {rows} ...` given the VALUES list),
/// [`ROWS_PER_STATEMENT`] at a time; `bind` binds one row's values and returns their
/// placeholders.
async fn write_rows<R>(
    conn: &impl ConnectionTrait,
    rows: &[R],
    statement: impl Fn(&str) -> String,
    bind: impl Fn(&mut Sql, &R) -> Vec<String>,
    doing: &'static str,
) -> AppResult<()> {
    let backend = conn.get_database_backend();
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let mut sql = Sql::new(backend);
        let values: Vec<String> = chunk.iter().map(|row| format!("({})", bind(&mut sql, row).join(", "))).collect();
        let text = statement(&values.join(", "));
        conn.execute_raw(Statement::from_sql_and_values(backend, text, sql.values)).await.context(doing)?;
    }
    Ok(())
}

async fn move_cursors(
    conn: &impl ConnectionTrait,
    moves: &BTreeMap<i64, CursorMove>,
    now: DateTime<Utc>,
) -> AppResult<()> {
    let moves: Vec<_> = moves.iter().collect();
    write_rows(
        conn,
        &moves,
        |rows| {
            format!(
                "INSERT INTO telemetry_cursors (host_id, stream, sequence, frames, dropped, updated_at) VALUES {rows} \
                 ON CONFLICT (host_id) DO UPDATE SET stream = excluded.stream, sequence = excluded.sequence, \
                 frames = telemetry_cursors.frames + excluded.frames, dropped = excluded.dropped, \
                 updated_at = excluded.updated_at"
            )
        },
        |sql, (host_id, m)| {
            vec![
                sql.bind(**host_id),
                sql.bind(m.stream),
                sql.bind(m.sequence),
                sql.bind(m.frames),
                sql.bind(m.dropped),
                sql.bind(now),
            ]
        },
        "moving telemetry cursors",
    )
    .await
}

async fn upsert_rollups(
    conn: &impl ConnectionTrait,
    rollups: &BTreeMap<(i64, u32, DateTime<Utc>), Rollup>,
) -> AppResult<()> {
    let (least, greatest) =
        if conn.get_database_backend() == DbBackend::Postgres { ("LEAST", "GREATEST") } else { ("MIN", "MAX") };
    let add = |c: &str| format!("{c} = gpu_rollups.{c} + excluded.{c}");
    let sums = ["samples", "util_sum", "memory_used_sum", "temperature_sum", "power_sum_mw", "energy_mj"].map(add);
    let rollups: Vec<_> = rollups.iter().filter(|(_, r)| r.samples > 0).collect();
    write_rows(
        conn,
        &rollups,
        |rows| {
            format!(
                "INSERT INTO gpu_rollups (host_id, gpu_index, minute, samples, util_sum, util_min, util_max, \
                 memory_used_sum, memory_used_max, temperature_sum, temperature_max, power_sum_mw, power_max_mw, \
                 energy_mj) VALUES {rows} ON CONFLICT (host_id, gpu_index, minute) DO UPDATE SET {}, \
                 util_min = {least}(gpu_rollups.util_min, excluded.util_min), \
                 util_max = {greatest}(gpu_rollups.util_max, excluded.util_max), \
                 memory_used_max = {greatest}(gpu_rollups.memory_used_max, excluded.memory_used_max), \
                 temperature_max = {greatest}(gpu_rollups.temperature_max, excluded.temperature_max), \
                 power_max_mw = {greatest}(gpu_rollups.power_max_mw, excluded.power_max_mw)",
                sums.join(", ")
            )
        },
        |sql, ((host_id, index, minute), r)| {
            vec![
                sql.bind(*host_id),
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
            ]
        },
        "storing telemetry rollups",
    )
    .await
}

async fn add_energy(conn: &impl ConnectionTrait, energy: &BTreeMap<(i64, u32), i64>) -> AppResult<()> {
    let energy: Vec<_> = energy.iter().collect();
    write_rows(
        conn,
        &energy,
        |rows| {
            format!(
                "INSERT INTO rental_energy (rental_id, gpu_index, energy_mj) VALUES {rows} \
                 ON CONFLICT (rental_id, gpu_index) DO UPDATE SET energy_mj = rental_energy.energy_mj + excluded.energy_mj"
            )
        },
        |sql, ((rental, index), mj)| {
            vec![sql.bind(*rental), sql.bind(i32::try_from(*index).unwrap_or(i32::MAX)), sql.bind(**mj)]
        },
        "storing rental energy",
    )
    .await
}

/// The hosts' rentals that hold GPUs now, one row per (rental, GPU), by host.
async fn live_rentals(conn: &impl ConnectionTrait, hosts: &[i64]) -> AppResult<HashMap<i64, Vec<LiveRental>>> {
    #[derive(FromQueryResult)]
    struct Row {
        host_id: i64,
        rental_id: i64,
        device_index: i32,
        running_since: Option<DateTime<Utc>>,
        billing_ends_at: Option<DateTime<Utc>>,
        stop_when_idle: bool,
        state: String,
    }
    let backend = conn.get_database_backend();
    let mut live: HashMap<i64, Vec<LiveRental>> = HashMap::new();
    for chunk in hosts.chunks(ROWS_PER_STATEMENT) {
        let mut sql = Sql::new(backend);
        let hosts = id_list(&mut sql, chunk);
        let active = sql.bind(true);
        let states: Vec<String> =
            [RentalState::Provisioning, RentalState::Running, RentalState::Stopping, RentalState::Preempting]
                .iter()
                .map(|s| sql.bind(s.as_str()))
                .collect();
        let text = format!(
            "SELECT r.host_id, r.id AS rental_id, g.device_index, r.running_since, r.billing_ends_at, r.stop_when_idle, r.state \
             FROM rentals r JOIN rental_gpus rg ON rg.rental_id = r.id JOIN gpus g ON g.id = rg.gpu_id \
             WHERE r.host_id IN ({hosts}) AND rg.active = {active} AND r.state IN ({})",
            states.join(", ")
        );
        let rows = Row::find_by_statement(Statement::from_sql_and_values(backend, text, sql.values))
            .all(conn)
            .await
            .context("loading the hosts' live rentals")?;
        for r in rows {
            live.entry(r.host_id).or_default().push(LiveRental {
                rental_id: r.rental_id,
                gpu_index: u32::try_from(r.device_index).unwrap_or(u32::MAX),
                running_since: r.running_since,
                billing_ends_at: r.billing_ends_at,
                stop_when_idle: r.stop_when_idle,
                running: r.state == RentalState::Running.as_str(),
            });
        }
    }
    Ok(live)
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
        let cursor = Some((10, 5));
        assert!(!is_new(cursor, 10, 5));
        assert!(!is_new(cursor, 10, 4));
        assert!(is_new(cursor, 10, 6));
        assert!(is_new(cursor, 11, 1), "a restarted agent's first frame is new");
        assert!(!is_new(cursor, 9, 100), "a late frame of an older stream is not");
        assert!(is_new(None, 1, 1));
    }
}
