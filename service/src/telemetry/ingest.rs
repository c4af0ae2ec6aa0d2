//! Ingest: an agent sends frames (every GPU of its host at one instant) numbered per host by
//! `(stream, sequence)`. [`accept`] shows them to dashboards at once, observes alerts, and adds
//! the frames the server has not seen to the open [`Batch`](super::flush::Batch) in memory: one
//! minute's rollup per GPU summed as frames arrive, the energy each sample used, the host's new
//! cursor. Every `flush_interval` the batch is written in one transaction (see `flush`), and only
//! then does the [`Receipt`] let the gateway acknowledge: the agent replays anything
//! unacknowledged, so nothing is stored twice or lost across a crash on either side.
//!
//! Why a batch and not a row per frame: at 1 Hz a frame per host per second would be a rollup
//! upsert per GPU per second (200,000 a second for 200,000 GPUs); a batch of a few seconds writes
//! each GPU-minute once per flush and costs one transaction for every agent at once.
//!
//! Which frames are new is decided here, against the host's cursor as this replica knows it
//! (loaded from the database when a connection first sends, kept in memory after). The flush
//! moves the database's cursor only from where this replica last left it, so frames another
//! replica stored meanwhile (the agent moved) are not stored again: that host's part of the
//! batch is refused, its connection here ends, and the agent replays to whoever owns it.

use super::flush::{self, Batch, CursorMove, EnergySample, Outcome};
use crate::{
    AppError, AppResult, Services,
    alerts::{self, LiveRental},
    db::DbResultExt,
};
use cardpool_protocol::{GpuSample, ServerMessage, TelemetryFrame};
use chrono::Utc;
use sea_orm::{ConnectionTrait, FromQueryResult, Statement};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex, atomic::Ordering},
};
use tokio::sync::{Notify, watch};

/// Frames one message may carry, and GPUs one frame.
const MAX_FRAMES: usize = 1000;

const MAX_GPUS: usize = 64;
/// A GPU UUID is `GPU-` and 36 characters; MIG instances are a little longer.
const MAX_UUID: usize = 96;

/// A frame stands for the time since the previous one, at most this long (a gap is no usage).
const MAX_FRAME_GAP_MS: i64 = 5_000;

/// The time one frame stands for when there is no previous one.
const DEFAULT_FRAME_MS: i64 = 1_000;

/// GPU samples the open batch may hold before it is written early (a burst of replays), so a
/// batch stays a few tens of megabytes however many agents send at once.
pub(super) const MAX_BATCH_SAMPLES: u64 = 1_000_000;

/// The connection name [`ingest`] stores under (callers that are not an agent's connection).
const DIRECT: &str = "direct";

/// Sums of one GPU over one minute, as the rollup row adds them up.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Rollup {
    pub(super) samples: i64,
    pub(super) util_sum: i64,
    pub(super) util_min: i64,
    pub(super) util_max: i64,
    pub(super) memory_sum: i64,
    pub(super) memory_max: i64,
    pub(super) temperature_sum: i64,
    pub(super) temperature_max: i64,
    pub(super) power_sum: i64,
    pub(super) power_max: i64,
    pub(super) energy_mj: i64,
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

fn minute_of(at_ms: i64) -> i64 {
    at_ms - at_ms.rem_euclid(60_000)
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

/// What this replica knows of one host's telemetry.
struct HostMemory {
    /// The connection that last sent (a new one may find the database ahead of us).
    connection: String,
    /// The newest frame accepted, and the newest this replica knows is in the database.
    cursor: Option<(i64, i64)>,
    durable: Option<(i64, i64)>,
    /// When the newest accepted frame was sampled (the next one stands for the time since).
    previous_ms: Option<i64>,
    /// The host's rentals that hold GPUs (alerts' idle check), as read when `rentals_read`
    /// equalled `rentals_changed` (a change to the host's rentals bumps the latter).
    rentals: Arc<Vec<LiveRental>>,
    rentals_read: u64,
    rentals_changed: u64,
    /// A flush could not store this host's part: nothing more from this connection is taken
    /// (it ends, and the agent replays from what it had acknowledged).
    poisoned: bool,
}

impl HostMemory {
    /// Whether `connection`, sending for the first time, must read the cursor afresh: the
    /// database may be ahead of this memory (another replica stored the host meanwhile) unless
    /// frames accepted here are still unwritten; after a refusal it is read again regardless.
    fn stale_for(&self, connection: &str) -> bool {
        self.connection != connection && (self.poisoned || self.cursor == self.durable)
    }
}

/// The state of ingest in this process: hosts' cursors, the open batch, the writer's turn.
pub(super) struct Ingest {
    state: Mutex<State>,
    /// Held while a batch is written: batches commit one after another, in order.
    pub(super) writer: tokio::sync::Mutex<()>,
    /// Woken when the open batch is full.
    pub(super) full: Notify,
}

pub(super) struct State {
    hosts: HashMap<i64, HostMemory>,
    pub(super) open: Batch,
    /// Whether a flusher task runs (it ends when it finds nothing to write).
    pub(super) flusher: bool,
}

impl Default for Ingest {
    fn default() -> Self {
        Ingest {
            state: Mutex::new(State { hosts: HashMap::new(), open: Batch::default(), flusher: false }),
            writer: tokio::sync::Mutex::new(()),
            full: Notify::new(),
        }
    }
}

impl Ingest {
    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What must be read from the database before `connection`'s frames of `host_id` are
    /// taken: the cursor (never seen, or a new connection while nothing of the host is unwritten
    /// here: another replica may have stored it meanwhile), and the rentals (changed since read),
    /// with the change count they are read at.
    fn needs(&self, host_id: i64, connection: &str) -> (bool, Option<u64>) {
        match self.state().hosts.get(&host_id) {
            None => (true, Some(0)),
            Some(m) if m.stale_for(connection) => (true, Some(m.rentals_changed)),
            Some(m) => (false, (m.rentals_read != m.rentals_changed).then_some(m.rentals_changed)),
        }
    }

    /// The host's rentals changed (booked, started, stopped, ended): read them again before
    /// its next frames are observed.
    pub(super) fn rentals_changed(&self, host_id: i64) {
        if let Some(memory) = self.state().hosts.get_mut(&host_id) {
            memory.rentals_changed += 1;
        }
    }

    /// What a written batch means for the hosts' memory: committed cursors become durable; a
    /// host whose part was refused is poisoned for the connection that sent it.
    pub(super) fn written(&self, moves: &HashMap<i64, CursorMove>, outcome: &Outcome) {
        let mut state = self.state();
        for (host_id, moved) in moves {
            let Some(memory) = state.hosts.get_mut(host_id) else { continue };
            if outcome.stored(*host_id) {
                memory.durable = Some((moved.stream, moved.sequence));
            } else if memory.connection == moved.connection {
                memory.poisoned = true;
            }
        }
    }
}

/// The promise that a message's frames will be stored: [`Receipt::stored`] resolves once the
/// batch holding them committed, with the acknowledgement to send.
pub struct Receipt {
    ack: ServerMessage,
    host_id: i64,
    done: watch::Receiver<Option<Arc<Outcome>>>,
}

impl Receipt {
    /// Waits for the batch; an error means nothing of this host from here on is stored (the
    /// connection should end so that the agent replays).
    pub async fn stored(mut self) -> AppResult<ServerMessage> {
        let outcome = match self.done.wait_for(Option::is_some).await {
            Ok(outcome) => outcome.clone(),
            // The batch was dropped unwritten (its writer was cancelled): not stored.
            Err(_) => return Err(AppError::Internal),
        };
        match outcome {
            Some(outcome) if outcome.stored(self.host_id) => Ok(self.ack),
            _ => Err(AppError::Internal),
        }
    }
}

/// Takes an agent message's frames for storing (see the module docs) and returns the receipt
/// that says when they are stored. `None` for an empty message.
pub async fn accept(
    services: &Services,
    host_id: i64,
    connection: &str,
    stream: u64,
    frames: Vec<TelemetryFrame>,
    dropped: u64,
) -> AppResult<Option<Receipt>> {
    check_batch(&frames)?;
    let Some(last) = frames.last() else { return Ok(None) };
    let ack = ServerMessage::TelemetryAck { stream, sequence: last.sequence };
    let stream = i64::try_from(stream).map_err(|_| AppError::invalid_field("stream", "out of range"))?;
    let frames = within_clock(frames, Utc::now().timestamp_millis());
    let dropped = i64::try_from(dropped).unwrap_or(i64::MAX);
    // Dashboards see the frames now; storing them waits for the flush.
    let hub = &services.telemetry;
    let shown = hub.arrived(host_id, &frames);
    services.bus.share_telemetry(host_id, &shown);

    let ingest = &hub.ingest;
    let (cursor_needed, rentals_needed) = ingest.needs(host_id, connection);
    if let Some(read_at) = rentals_needed {
        let cursor = if cursor_needed { load_cursor(&services.db, host_id).await? } else { None };
        let rentals =
            flush::live_rentals(&services.db, &[host_id], Utc::now()).await?.remove(&host_id).unwrap_or_default();
        let mut state = ingest.state();
        match state.hosts.get_mut(&host_id) {
            Some(memory) if !(cursor_needed && memory.stale_for(connection)) => {
                memory.rentals = Arc::new(rentals);
                memory.rentals_read = read_at;
            }
            known => {
                let (previous_ms, changed) = known.map_or((None, 0), |m| (m.previous_ms, m.rentals_changed));
                state.hosts.insert(
                    host_id,
                    HostMemory {
                        connection: connection.to_owned(),
                        cursor,
                        durable: cursor,
                        previous_ms,
                        rentals: Arc::new(rentals),
                        rentals_read: read_at,
                        rentals_changed: changed,
                        poisoned: false,
                    },
                );
            }
        }
    }

    let sent = frames.len();
    let (fresh, rentals, done, start_flusher, full) = {
        let mut state = ingest.state();
        let State { hosts, open, flusher } = &mut *state;
        let Some(memory) = hosts.get_mut(&host_id) else { return Err(AppError::Internal) };
        if memory.poisoned && memory.connection == connection {
            tracing::warn!(host.id = host_id, "telemetry of a connection whose earlier frames were not stored");
            return Err(AppError::Internal);
        }
        memory.connection = connection.to_owned();
        let fresh: Vec<TelemetryFrame> =
            frames.into_iter().filter(|f| is_new(memory.cursor, stream, f.sequence as i64)).collect();
        // Every message has its host in the batch, even one that brought nothing new: its
        // acknowledgement must wait until what it duplicates is written, and must not come if
        // that was refused.
        let newest = fresh.last().map(|f| (stream, f.sequence as i64)).or(memory.cursor);
        if let Some((newest_stream, newest_sequence)) = newest {
            let base = memory.cursor;
            let moved = open.moves.entry(host_id).or_insert_with(|| CursorMove {
                base,
                stream: newest_stream,
                sequence: newest_sequence,
                frames: 0,
                dropped,
                connection: String::new(),
            });
            moved.connection = connection.to_owned();
            moved.stream = newest_stream;
            moved.sequence = newest_sequence;
            moved.frames += fresh.len() as i64;
            if !fresh.is_empty() {
                moved.dropped = dropped;
            }
            memory.cursor = Some((newest_stream, newest_sequence));
        }
        for frame in &fresh {
            let frame_ms =
                memory.previous_ms.map_or(DEFAULT_FRAME_MS, |p| (frame.at_ms - p).clamp(0, MAX_FRAME_GAP_MS));
            memory.previous_ms = Some(frame.at_ms);
            let minute = minute_of(frame.at_ms);
            for gpu in &frame.gpus {
                open.rollups.entry((host_id, gpu.index, minute)).or_default().add(gpu, frame_ms);
                if let Some(power) = gpu.power_milliwatts {
                    let mj = energy_mj(i64::from(power), frame_ms);
                    open.energy.push(EnergySample { host_id, gpu_index: gpu.index, at_ms: frame.at_ms, mj });
                }
            }
            open.frames += 1;
            open.samples += frame.gpus.len() as u64;
        }
        let start_flusher = !*flusher;
        *flusher = true;
        (fresh, memory.rentals.clone(), open.done.subscribe(), start_flusher, open.samples >= MAX_BATCH_SAMPLES)
    };
    if start_flusher {
        tokio::spawn(flush::flush_forever(services.clone()));
    }
    if full {
        ingest.full.notify_one();
    }
    hub.frames_duplicate.fetch_add((sent - fresh.len()) as u64, Ordering::Relaxed);
    if !fresh.is_empty() {
        let fresh: Vec<&TelemetryFrame> = fresh.iter().collect();
        alerts::observe(services, host_id, &fresh, &rentals).await?;
    }
    Ok(Some(Receipt { ack, host_id, done }))
}

/// Stores the frames of `stream` the server has not seen, once, before it returns, and says
/// what to acknowledge; `None` for an empty batch. (The gateway uses [`accept`] and sends the
/// acknowledgement when the flush comes; this writes the open batch at once.)
pub async fn ingest(
    services: &Services,
    host_id: i64,
    stream: u64,
    frames: &[TelemetryFrame],
    dropped: u64,
) -> AppResult<Option<ServerMessage>> {
    let Some(receipt) = accept(services, host_id, DIRECT, stream, frames.to_vec(), dropped).await? else {
        return Ok(None);
    };
    flush::flush(services, false).await;
    receipt.stored().await.map(Some)
}

/// A host's cursor `(stream, sequence)` in the database, if it has one.
async fn load_cursor(conn: &impl ConnectionTrait, host_id: i64) -> AppResult<Option<(i64, i64)>> {
    #[derive(FromQueryResult)]
    struct Row {
        stream: i64,
        sequence: i64,
    }
    let backend = conn.get_database_backend();
    let text = match backend {
        sea_orm::DbBackend::Postgres => "SELECT stream, sequence FROM telemetry_cursors WHERE host_id = $1",
        _ => "SELECT stream, sequence FROM telemetry_cursors WHERE host_id = ?",
    };
    let row = Row::find_by_statement(Statement::from_sql_and_values(backend, text, [host_id.into()]))
        .one(conn)
        .await
        .context("loading a telemetry cursor")?;
    Ok(row.map(|r| (r.stream, r.sequence)))
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

    #[test]
    fn minutes_start_on_the_minute() {
        assert_eq!(minute_of(120_000), 120_000);
        assert_eq!(minute_of(179_999), 120_000);
    }
}
