//! The offer stock: one row per (host, unit: a GPU model or a MIG slice's) with its free units and the market facts a
//! search filters and sorts on (on the market or not, prices, location), so an offer search is
//! an index scan of one table (see `offers`).
//!
//! [`refresh_stock`] recomputes a host's rows at the end of every transaction that changes any
//! of them: its GPUs or holds (inventory, booking, release), its status (online, offline,
//! revoked), its listing and its prices. So the stock is never stale. [`rebuild_stock`] redoes
//! all of it at start-up, for holds that ended while the server was down.
//!
//! [`StockVersion`] counts the committed changes this process made or heard of over the bus, so
//! a rendering of the market kept for a moment (the server's page cache for visitors) knows
//! when it is out of date.

use crate::{
    AppResult, Services,
    db::{DbResultExt, Sql},
};
use cardpool_domain::host::HostStatus;
use chrono::Utc;
use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};
use std::sync::atomic::{AtomicU64, Ordering};

/// How many committed changes to the offer stock this process has made or heard of. A copy of
/// anything rendered from the stock is current while this number has not moved (a change
/// whose note the bus lost is not counted: such copies also expire by age).
#[derive(Debug, Default)]
pub struct StockVersion(AtomicU64);

impl StockVersion {
    pub fn current(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Counts a change (this replica's, or one another replica told of over the bus).
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// A refresh of the stock in a transaction that has not committed yet. Publish it once the
/// commit is through: counted before, a reader could copy the old rows under the new number
/// and keep serving them.
#[must_use = "call `.published(services)` once the transaction has committed"]
pub struct StockChange(());

impl StockChange {
    pub fn published(self, services: &Services) {
        services.stock_version.bump();
        services.bus.tell(crate::bus::Note::StockChanged);
    }
}

/// The stock of one host: its free GPUs (from its GPUs and their holds) and its market facts
/// (status, listing, prices, location). Call it last in a transaction that changed any of them,
/// and publish what it returns after the commit. On PostgreSQL it takes the host's advisory lock
/// first, so concurrent refreshes of one host run one after the other and each sees the one
/// before it (taken last, the lock never waits inside a lock chain, so it cannot deadlock).
pub async fn refresh_stock(conn: &impl ConnectionTrait, host_id: i64) -> AppResult<StockChange> {
    let backend = conn.get_database_backend();
    if backend == DbBackend::Postgres {
        conn.execute_raw(Statement::from_sql_and_values(
            backend,
            "SELECT pg_advisory_xact_lock($1)",
            [Value::from(STOCK_LOCK_SPACE + host_id)],
        ))
        .await
        .context("locking host stock")?;
    }
    let mut delete = Sql::new(backend);
    let host = delete.bind(host_id);
    conn.execute_raw(Statement::from_sql_and_values(
        backend,
        format!("DELETE FROM offer_stock WHERE host_id = {host}"),
        delete.values,
    ))
    .await
    .context("clearing host stock")?;
    let mut insert = Sql::new(backend);
    let select = stock_select(&mut insert, Some(host_id));
    conn.execute_raw(Statement::from_sql_and_values(backend, select, insert.values))
        .await
        .context("refreshing host stock")?;
    Ok(StockChange(()))
}

/// Recomputes the whole stock (at start-up: holds that ended while the server was down).
pub async fn rebuild_stock(conn: &impl ConnectionTrait) -> AppResult<()> {
    let backend = conn.get_database_backend();
    conn.execute_unprepared("DELETE FROM offer_stock").await.context("clearing stock")?;
    let mut insert = Sql::new(backend);
    let select = stock_select(&mut insert, None);
    conn.execute_raw(Statement::from_sql_and_values(backend, select, insert.values))
        .await
        .context("rebuilding stock")?;
    Ok(())
}

/// [`rebuild_stock`] as a server starts: in one transaction, under the start-up lock (so
/// replicas starting together rebuild one after the other) and, on PostgreSQL, with the stock
/// locked against writes, so a booking on a running replica waits for it instead of adding its
/// host's rows twice. Readers go on reading the old stock until the commit.
pub async fn rebuild_at_start_up(db: &sea_orm::DatabaseConnection) -> AppResult<()> {
    use sea_orm::TransactionTrait;
    let rebuild = async {
        let txn = db.begin().await?;
        if txn.get_database_backend() == DbBackend::Postgres {
            txn.execute_unprepared("LOCK TABLE offer_stock IN EXCLUSIVE MODE").await?;
        }
        rebuild_stock(&txn).await.map_err(|e| sea_orm::DbErr::Custom(e.to_string()))?;
        txn.commit().await
    };
    crate::leader::one_at_a_time(db, rebuild).await.context("rebuilding the offer stock")
}

/// Advisory-lock keys of host stock: `STOCK_LOCK_SPACE + host id`.
const STOCK_LOCK_SPACE: i64 = 0x5354_4f43_0000_0000;

/// `INSERT INTO offer_stock SELECT ...` of the available units for sale matching `which` that no
/// active hold keeps now or later (a reservation): no hold on the unit's physical GPU covering
/// any of its slots, as booking sees them, with the host's market facts.
/// Parameters are bound in the order they appear (SQLite's `?` are positional).
fn stock_select(sql: &mut Sql, host_id: Option<i64>) -> String {
    let listed = sql.bind(true);
    let online = sql.bind(HostStatus::Online.as_str());
    let which = match host_id {
        Some(id) => format!("g.host_id = {}", sql.bind(id)),
        None => "1 = 1".to_owned(),
    };
    let for_sale = sql.bind(true);
    let active = sql.bind(true);
    let now = sql.bind(Utc::now());
    format!(
        "INSERT INTO offer_stock (host_id, gpu_model, mig_profile, gpus_free, vram_bytes, cuda_version, cuda_version_num, \
         driver_version, linked, on_market, location_key, on_demand_micros, reserved_micros, spot_min_bid_micros) \
         SELECT a.host_id, a.model, a.profile, a.free, a.vram, a.cuda, a.cuda_num, a.driver, a.linked, \
         (h.listed = {listed} AND h.held_reason IS NULL AND h.status = {online} AND h.revoked_at IS NULL \
         AND p.host_id IS NOT NULL), \
         LOWER(h.location), COALESCE(p.on_demand_micros, 0), COALESCE(p.reserved_micros, 0), \
         COALESCE(p.spot_min_bid_micros, 0) \
         FROM (SELECT g.host_id AS host_id, g.model AS model, MIN(g.mig_profile) AS profile, COUNT(g.id) AS free, MIN(g.memory_bytes) AS vram, \
         MIN(g.cuda_version) AS cuda, MIN(g.cuda_version_num) AS cuda_num, MIN(g.driver_version) AS driver, \
         SUM(CASE WHEN g.nvlink_peers <> '[]' THEN 1 ELSE 0 END) AS linked \
         FROM gpus g WHERE {which} AND g.state = 'available' AND g.for_sale = {for_sale} \
         AND NOT EXISTS (SELECT 1 FROM rental_gpus rg WHERE rg.physical_gpu_id = COALESCE(g.parent_id, g.id) \
         AND rg.slot_from < g.slot_to AND g.slot_from < rg.slot_to AND rg.active = {active} AND rg.ends_at > {now}) \
         GROUP BY g.host_id, g.model) a \
         JOIN hosts h ON h.id = a.host_id \
         LEFT JOIN host_prices p ON p.host_id = a.host_id AND p.gpu_model = a.model"
    )
}
