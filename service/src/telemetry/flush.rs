//! The flush: the open batch of accepted telemetry (see `ingest`) written in one transaction —
//! rollups upserted once per GPU-minute, energy per rented GPU, hosts' cursors moved — and
//! every message in it told its outcome. A flusher task runs while there is anything to write
//! (started by the first message after a quiet spell, ending when it finds nothing), writing
//! every `flush_interval`, or at once when the batch is full.
//!
//! Cursors move only from where this replica left them (read under the rows' locks in the same
//! transaction): a host whose cursor moved elsewhere is left out of the write and its messages
//! told so, and nothing of it is stored twice.

use super::ingest::Rollup;
use crate::{
    AppResult, Services,
    alerts::LiveRental,
    db::{DbResultExt, Sql},
};
use cardpool_domain::{offers::profile_sevenths, rentals::RentalState};
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use sea_orm::{ConnectionTrait, DbBackend, FromQueryResult, Statement};
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fmt::Write as _,
    sync::{Arc, atomic::Ordering},
};
use tokio::sync::watch;

/// Rows one SQLite statement writes at most (14 parameters a rollup row, well within its limit of
/// 32,766). PostgreSQL takes every row in one statement: each column is one parameter there.
const ROWS_PER_STATEMENT: usize = 1_000;

/// Rows or ids one statement takes on `backend`.
fn per_statement(backend: DbBackend) -> usize {
    if backend == DbBackend::Postgres { usize::MAX } else { ROWS_PER_STATEMENT }
}

/// One value of a row the flush writes: an integer (`bigint`) or an instant (`timestamptz`).
enum Cell {
    Int(i64),
    At(DateTime<Utc>),
}

/// How a host's cursor moves in a batch: from `base` (where this replica's memory had it when
/// the batch first took a frame of the host) to `(stream, sequence)`.
pub(super) struct CursorMove {
    pub(super) base: Option<(i64, i64)>,
    pub(super) stream: i64,
    pub(super) sequence: i64,
    /// Frames the batch stores of the host, and the agent's latest count of dropped ones.
    pub(super) frames: i64,
    pub(super) dropped: i64,
    /// The connection whose frames last moved it.
    pub(super) connection: String,
}

/// The energy one GPU sample stands for, attributed to rentals when written.
pub(super) struct EnergySample {
    pub(super) host_id: i64,
    pub(super) gpu_index: u32,
    pub(super) at_ms: i64,
    pub(super) mj: i64,
}

/// Accepted telemetry not yet written.
pub(super) struct Batch {
    pub(super) rollups: HashMap<(i64, u32, i64), Rollup>,
    pub(super) energy: Vec<EnergySample>,
    pub(super) moves: HashMap<i64, CursorMove>,
    pub(super) frames: u64,
    pub(super) samples: u64,
    /// Where the batch's messages wait for its outcome.
    pub(super) done: watch::Sender<Option<Arc<Outcome>>>,
}

impl Default for Batch {
    fn default() -> Self {
        Batch {
            rollups: HashMap::new(),
            energy: Vec::new(),
            moves: HashMap::new(),
            frames: 0,
            samples: 0,
            done: watch::channel(None).0,
        }
    }
}

/// What became of a batch: written (but for the hosts refused, whose cursor had moved
/// elsewhere), or not at all.
pub struct Outcome {
    written: bool,
    refused: HashSet<i64>,
}

impl Outcome {
    /// Whether the batch stored `host_id`'s part.
    pub(super) fn stored(&self, host_id: i64) -> bool {
        self.written && !self.refused.contains(&host_id)
    }
}

/// Writes the open batch every `flush_interval` (sooner when it is full) until a flush finds
/// nothing to write.
pub(super) async fn flush_forever(services: Services) {
    let every = services.settings.telemetry.flush_interval;
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = services.telemetry.ingest.full.notified() => {}
        }
        if !flush(&services, true).await {
            return;
        }
    }
}

/// Writes the open batch now, after any batch being written; false when it was empty. The
/// flusher task passes `flusher`: finding nothing, it stops (the next message starts another).
pub(super) async fn flush(services: &Services, flusher: bool) -> bool {
    let ingest = &services.telemetry.ingest;
    let _turn = ingest.writer.lock().await;
    let batch = {
        let mut state = ingest.state();
        if state.open.moves.is_empty() {
            if flusher {
                state.flusher = false;
            }
            return false;
        }
        std::mem::take(&mut state.open)
    };
    let outcome = match write(services, &batch).await {
        Ok(refused) => Outcome { written: true, refused },
        Err(_) => Outcome { written: false, refused: HashSet::new() },
    };
    ingest.written(&batch.moves, &outcome);
    let hub = &services.telemetry;
    let stored: Vec<&CursorMove> =
        batch.moves.iter().filter(|(host, _)| outcome.stored(**host)).map(|(_, moved)| moved).collect();
    hub.frames_stored.fetch_add(stored.iter().map(|m| m.frames as u64).sum(), Ordering::Relaxed);
    let samples = if outcome.refused.is_empty() && outcome.written {
        batch.samples
    } else {
        batch.rollups.iter().filter(|((host, _, _), _)| outcome.stored(*host)).map(|(_, r)| r.samples as u64).sum()
    };
    hub.samples_stored.fetch_add(samples, Ordering::Relaxed);
    if outcome.written {
        hub.commits.fetch_add(1, Ordering::Relaxed);
    }
    let _ = batch.done.send(Some(Arc::new(outcome)));
    true
}

/// One transaction for a batch; returns the hosts refused (their cursor is not where this
/// replica left it).
async fn write(services: &Services, batch: &Batch) -> AppResult<HashSet<i64>> {
    let now = Utc::now();
    let mut hosts: Vec<i64> = batch.moves.keys().copied().collect();
    hosts.sort_unstable();
    let txn = services.begin_write().await.context("starting telemetry ingest")?;
    let cursors = lock_cursors(&txn, &hosts).await?;
    let refused: HashSet<i64> =
        batch.moves.iter().filter(|(host, m)| cursors.get(host).copied() != m.base).map(|(host, _)| *host).collect();
    if !refused.is_empty() {
        tracing::info!(hosts = refused.len(), "telemetry of hosts stored elsewhere meanwhile is not stored here");
    }
    hosts.retain(|h| !refused.contains(h));
    let oldest = batch.energy.iter().map(|s| s.at_ms).min().unwrap_or(now.timestamp_millis());
    let since = Utc.timestamp_millis_opt(oldest).single().unwrap_or(now);
    let live = live_rentals(&txn, &hosts, since).await?;
    let mut energy: BTreeMap<(i64, u32), i64> = BTreeMap::new();
    for sample in batch.energy.iter().filter(|s| !refused.contains(&s.host_id)) {
        let Some(rentals) = live.get(&sample.host_id) else { continue };
        let at = Utc.timestamp_millis_opt(sample.at_ms).single().unwrap_or(now);
        for rental in rentals.iter().filter(|r| r.gpu_index == sample.gpu_index && r.running_at(at)) {
            *energy.entry((rental.rental_id, sample.gpu_index)).or_default() +=
                sample.mj * i64::from(rental.sevenths) / 7;
        }
    }
    let rollups: Vec<_> =
        batch.rollups.iter().filter(|((host, _, _), r)| r.samples > 0 && !refused.contains(host)).collect();
    upsert_rollups(&txn, &rollups).await?;
    add_energy(&txn, &energy).await?;
    // A host whose messages brought nothing new keeps its cursor row as it is.
    let moves: Vec<_> = batch.moves.iter().filter(|(host, m)| m.frames > 0 && !refused.contains(host)).collect();
    move_cursors(&txn, &moves, now).await?;
    txn.commit().await.context("committing telemetry")?;
    Ok(refused)
}

/// `column` is one of `ids`: on SQLite `IN (…)` with a parameter each, on PostgreSQL one array
/// parameter, so a fleet's hosts are one statement whose text does not grow with them.
fn among(sql: &mut Sql, column: &str, ids: &[i64]) -> String {
    if sql.backend == DbBackend::Postgres {
        let mut array = ArrayText::default();
        for id in ids {
            array.push(id);
        }
        let array = sql.bind(array.finish());
        return format!("{column} = ANY({array}::bigint[])");
    }
    let list: Vec<String> = ids.iter().map(|id| sql.bind(*id)).collect();
    format!("{column} IN ({})", list.join(", "))
}

/// PostgreSQL's text form of an array (`{1,2,3}`), written as its items come; they need no
/// quoting (numbers, RFC 3339 instants).
#[derive(Default)]
struct ArrayText(String);

impl ArrayText {
    fn push(&mut self, item: impl std::fmt::Display) {
        self.0.push(if self.0.is_empty() { '{' } else { ',' });
        let _ = write!(self.0, "{item}");
    }

    fn finish(mut self) -> String {
        if self.0.is_empty() {
            self.0.push('{');
        }
        self.0.push('}');
        self.0
    }
}

/// The cursors `(stream, sequence)` of the hosts that have one, locked until the transaction
/// ends (SQLite's write transaction holds the whole database already).
async fn lock_cursors(conn: &impl ConnectionTrait, hosts: &[i64]) -> AppResult<HashMap<i64, (i64, i64)>> {
    #[derive(FromQueryResult)]
    struct Row {
        host_id: i64,
        stream: i64,
        sequence: i64,
    }
    let backend = conn.get_database_backend();
    let lock = if backend == DbBackend::Postgres { " ORDER BY host_id FOR UPDATE" } else { "" };
    let mut cursors = HashMap::new();
    for chunk in hosts.chunks(per_statement(backend)) {
        let mut sql = Sql::new(backend);
        let text = format!(
            "SELECT host_id, stream, sequence FROM telemetry_cursors WHERE {}{lock}",
            among(&mut sql, "host_id", chunk)
        );
        let rows = Row::find_by_statement(Statement::from_sql_and_values(backend, text, sql.values))
            .all(conn)
            .await
            .context("loading telemetry cursors")?;
        cursors.extend(rows.into_iter().map(|r| (r.host_id, (r.stream, r.sequence))));
    }
    Ok(cursors)
}

/// What a flush statement writes: `columns` of `table`, and what to do with a row whose key is
/// there already (`ON CONFLICT …`).
struct Upsert<const N: usize> {
    table: &'static str,
    columns: [&'static str; N],
    on_conflict: String,
}

/// Writes `rows` (each given as its [`Cell`]s by `cells`) as `upsert` says. SQLite gets them
/// as `VALUES` lists, [`ROWS_PER_STATEMENT`] at a time; PostgreSQL gets all of them in one
/// statement with one array per column (`unnest`), so that it parses one short statement per
/// table instead of one with thousands of parameters per thousand rows.
async fn write_rows<R, const N: usize>(
    conn: &impl ConnectionTrait,
    rows: &[R],
    upsert: &Upsert<N>,
    cells: impl Fn(&R) -> [Cell; N],
    doing: &'static str,
) -> AppResult<()> {
    let backend = conn.get_database_backend();
    let columns = upsert.columns.join(", ");
    for chunk in rows.chunks(per_statement(backend)) {
        let mut sql = Sql::new(backend);
        let source = if backend == DbBackend::Postgres {
            let mut arrays: [ArrayText; N] = std::array::from_fn(|_| ArrayText::default());
            let mut types = ["bigint[]"; N];
            for row in chunk {
                for ((array, kind), cell) in arrays.iter_mut().zip(&mut types).zip(cells(row)) {
                    match cell {
                        Cell::Int(n) => array.push(n),
                        Cell::At(at) => {
                            *kind = "timestamptz[]";
                            array.push(at.to_rfc3339_opts(SecondsFormat::Micros, true));
                        }
                    }
                }
            }
            let arrays: Vec<String> = arrays
                .into_iter()
                .zip(types)
                .map(|(array, kind)| format!("{}::{kind}", sql.bind(array.finish())))
                .collect();
            format!("SELECT * FROM unnest({})", arrays.join(", "))
        } else {
            let values: Vec<String> = chunk
                .iter()
                .map(|row| {
                    let params: Vec<String> = cells(row)
                        .into_iter()
                        .map(|cell| match cell {
                            Cell::Int(n) => sql.bind(n),
                            Cell::At(at) => sql.bind(at),
                        })
                        .collect();
                    format!("({})", params.join(", "))
                })
                .collect();
            format!("VALUES {}", values.join(", "))
        };
        let text = format!("INSERT INTO {} ({columns}) {source} {}", upsert.table, upsert.on_conflict);
        conn.execute_raw(Statement::from_sql_and_values(backend, text, sql.values)).await.context(doing)?;
    }
    Ok(())
}

async fn move_cursors(conn: &impl ConnectionTrait, moves: &[(&i64, &CursorMove)], now: DateTime<Utc>) -> AppResult<()> {
    let upsert = Upsert {
        table: "telemetry_cursors",
        columns: ["host_id", "stream", "sequence", "frames", "dropped", "updated_at"],
        on_conflict: "ON CONFLICT (host_id) DO UPDATE SET stream = excluded.stream, sequence = excluded.sequence, \
             frames = telemetry_cursors.frames + excluded.frames, dropped = excluded.dropped, \
             updated_at = excluded.updated_at"
            .to_owned(),
    };
    write_rows(
        conn,
        moves,
        &upsert,
        |(host_id, m)| {
            [
                Cell::Int(**host_id),
                Cell::Int(m.stream),
                Cell::Int(m.sequence),
                Cell::Int(m.frames),
                Cell::Int(m.dropped),
                Cell::At(now),
            ]
        },
        "moving telemetry cursors",
    )
    .await
}

type RollupRow<'a> = (&'a (i64, u32, i64), &'a Rollup);

async fn upsert_rollups(conn: &impl ConnectionTrait, rollups: &[RollupRow<'_>]) -> AppResult<()> {
    let (least, greatest) =
        if conn.get_database_backend() == DbBackend::Postgres { ("LEAST", "GREATEST") } else { ("MIN", "MAX") };
    let add = |c: &str| format!("{c} = gpu_rollups.{c} + excluded.{c}");
    let sums = ["samples", "util_sum", "memory_used_sum", "temperature_sum", "power_sum_mw", "energy_mj"].map(add);
    let upsert = Upsert {
        table: "gpu_rollups",
        columns: [
            "host_id",
            "gpu_index",
            "minute",
            "samples",
            "util_sum",
            "util_min",
            "util_max",
            "memory_used_sum",
            "memory_used_max",
            "temperature_sum",
            "temperature_max",
            "power_sum_mw",
            "power_max_mw",
            "energy_mj",
        ],
        on_conflict: format!(
            "ON CONFLICT (host_id, gpu_index, minute) DO UPDATE SET {}, \
             util_min = {least}(gpu_rollups.util_min, excluded.util_min), \
             util_max = {greatest}(gpu_rollups.util_max, excluded.util_max), \
             memory_used_max = {greatest}(gpu_rollups.memory_used_max, excluded.memory_used_max), \
             temperature_max = {greatest}(gpu_rollups.temperature_max, excluded.temperature_max), \
             power_max_mw = {greatest}(gpu_rollups.power_max_mw, excluded.power_max_mw)",
            sums.join(", ")
        ),
    };
    write_rows(
        conn,
        rollups,
        &upsert,
        |((host_id, index, minute_ms), r)| {
            [
                Cell::Int(*host_id),
                Cell::Int(i64::from(*index)),
                Cell::At(Utc.timestamp_millis_opt(*minute_ms).single().unwrap_or_default()),
                Cell::Int(r.samples),
                Cell::Int(r.util_sum),
                Cell::Int(r.util_min),
                Cell::Int(r.util_max),
                Cell::Int(r.memory_sum),
                Cell::Int(r.memory_max),
                Cell::Int(r.temperature_sum),
                Cell::Int(r.temperature_max),
                Cell::Int(r.power_sum),
                Cell::Int(r.power_max),
                Cell::Int(r.energy_mj),
            ]
        },
        "storing telemetry rollups",
    )
    .await
}

async fn add_energy(conn: &impl ConnectionTrait, energy: &BTreeMap<(i64, u32), i64>) -> AppResult<()> {
    let energy: Vec<_> = energy.iter().collect();
    let upsert = Upsert {
        table: "rental_energy",
        columns: ["rental_id", "gpu_index", "energy_mj"],
        on_conflict:
            "ON CONFLICT (rental_id, gpu_index) DO UPDATE SET energy_mj = rental_energy.energy_mj + excluded.energy_mj"
                .to_owned(),
    };
    write_rows(
        conn,
        &energy,
        &upsert,
        |((rental, index), mj)| [Cell::Int(*rental), Cell::Int(i64::from(*index)), Cell::Int(**mj)],
        "storing rental energy",
    )
    .await
}

/// The hosts' rentals that hold GPUs now or were billed after `since` (their last seconds'
/// energy may be in the batch), one row per (rental, GPU), by host.
pub(super) async fn live_rentals(
    conn: &impl ConnectionTrait,
    hosts: &[i64],
    since: DateTime<Utc>,
) -> AppResult<HashMap<i64, Vec<LiveRental>>> {
    #[derive(FromQueryResult)]
    struct Row {
        host_id: i64,
        rental_id: i64,
        device_index: i32,
        running_since: Option<DateTime<Utc>>,
        billing_ends_at: Option<DateTime<Utc>>,
        stop_when_idle: bool,
        state: String,
        mig_profile: Option<String>,
    }
    let backend = conn.get_database_backend();
    let mut live: HashMap<i64, Vec<LiveRental>> = HashMap::new();
    for chunk in hosts.chunks(per_statement(backend)) {
        let mut sql = Sql::new(backend);
        let hosts = among(&mut sql, "r.host_id", chunk);
        let active = sql.bind(true);
        let states: Vec<String> =
            [RentalState::Provisioning, RentalState::Running, RentalState::Stopping, RentalState::Preempting]
                .iter()
                .map(|s| sql.bind(s.as_str()))
                .collect();
        let since = sql.bind(since);
        let text = format!(
            "SELECT r.host_id, r.id AS rental_id, g.device_index, g.mig_profile, r.running_since, r.billing_ends_at, r.stop_when_idle, r.state \
             FROM rentals r JOIN rental_gpus rg ON rg.rental_id = r.id JOIN gpus g ON g.id = rg.gpu_id \
             WHERE {hosts} AND ((rg.active = {active} AND r.state IN ({})) OR r.billing_ends_at >= {since})",
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
                sevenths: r.mig_profile.as_deref().map_or(7, |p| profile_sevenths(p) as u8),
            });
        }
    }
    Ok(live)
}
