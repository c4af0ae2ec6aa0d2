//! Opening the database: SQLite by default, PostgreSQL by URL, migrated before first use.
//!
//! SQLite runs in WAL mode with a busy timeout and foreign keys on. Writes that read first go
//! through [`WriteQueue::begin`], which on SQLite is `BEGIN IMMEDIATE`: the write lock is taken
//! up front, so two such transactions queue instead of failing with `SQLITE_BUSY` halfway. They
//! queue in this process first, in arrival order: SQLite has one writer at a time, and a writer
//! left to SQLite's busy handler sleeps in growing steps (1, 2, 5 … 100 ms) and polls, so under
//! load the lock sat free while the waiters slept; the queue hands it straight to the next.
//!
//! Database errors leave the service through [`DbResultExt`]: an unexpected one is logged once
//! with what was being done and becomes the client-safe [`AppError::Internal`]; a broken rule
//! the service expects (a duplicate email, an overlapping GPU hold) is recognised by its
//! SQLSTATE and constraint name ([`Violation`]), never by matching error text.

use crate::{AppError, AppResult};
use cardpool_migrations::{Migrator, MigratorTrait};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr, ExecResult,
    QueryResult, RuntimeErr, Statement, TransactionOptions, TransactionTrait, Value,
    sqlx::{
        self,
        sqlite::{SqliteJournalMode, SqliteSynchronous},
    },
};
use std::{ops::Deref, sync::Arc, time::Duration};
use tokio::sync::{Mutex, OwnedMutexGuard};

/// A pooled connection idle this long is pinged before it is handed out again.
const POOL_PING_WHEN_IDLE: Duration = Duration::from_secs(5);

/// How long a SQLite writer waits for the lock before giving up.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects to `url` (`sqlite://path?mode=rwc` or `postgres://...`) and runs pending migrations.
/// Replicas starting together migrate one after the other (see `leader::one_at_a_time`).
pub async fn connect_and_migrate(url: &str) -> Result<DatabaseConnection, DbErr> {
    let db = connect(url).await?;
    crate::leader::one_at_a_time(&db, Migrator::up(&db, None)).await?;
    Ok(db)
}

/// Connects without migrating.
pub async fn connect(url: &str) -> Result<DatabaseConnection, DbErr> {
    let mut opts = ConnectOptions::new(url.to_owned());
    opts.sqlx_logging(false)
        .connect_timeout(Duration::from_secs(10))
        .acquire_timeout(Duration::from_secs(15))
        // A connection is checked with a round trip before it is handed out only when it sat
        // idle long enough to have been dropped (a database restart, a proxy's timeout), not on
        // every checkout: that cost a round trip per transaction and per statement outside one.
        .test_before_acquire_if_idle_for(POOL_PING_WHEN_IDLE);
    if is_sqlite(url) {
        opts.max_connections(8).map_sqlx_sqlite_opts(|o| {
            o.create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(SQLITE_BUSY_TIMEOUT)
                .foreign_keys(true)
        });
    } else {
        opts.max_connections(16);
    }
    Database::connect(opts).await
}

/// Whether a database URL names SQLite.
pub fn is_sqlite(url: &str) -> bool {
    url.starts_with("sqlite:")
}

/// The turn to write, one transaction after another in arrival order, on a database that has
/// one writer at a time (SQLite); PostgreSQL's writers run side by side, ordered by row locks
/// and constraints, and take no turn.
#[derive(Debug, Clone, Default)]
pub struct WriteQueue(Option<Arc<Mutex<()>>>);

impl WriteQueue {
    /// The queue `db` needs.
    pub fn for_database(db: &DatabaseConnection) -> Self {
        match db.get_database_backend() {
            DbBackend::Sqlite => WriteQueue(Some(Arc::default())),
            _ => WriteQueue(None),
        }
    }

    /// The turn alone, for one statement run on the pool without a transaction of its own
    /// (a statement is atomic by itself): `None` on PostgreSQL, which takes no turn.
    pub async fn turn(&self) -> Option<OwnedMutexGuard<()>> {
        match &self.0 {
            Some(queue) => Some(queue.clone().lock_owned().await),
            None => None,
        }
    }

    /// Starts a transaction for a write that reads first (`BEGIN IMMEDIATE` on SQLite, once it
    /// is this writer's turn; a normal `BEGIN` on PostgreSQL). The turn is taken before a
    /// connection, so writers waiting for it hold none, and it passes on when the transaction
    /// commits, rolls back or is dropped.
    pub async fn begin(&self, db: &DatabaseConnection) -> Result<WriteTxn, DbErr> {
        let turn = self.turn().await;
        let txn = db
            .begin_with_options(TransactionOptions {
                sqlite_transaction_mode: Some(sea_orm::SqliteTransactionMode::Immediate),
                ..Default::default()
            })
            .await?;
        Ok(WriteTxn { txn, _turn: turn })
    }
}

/// A write transaction holding its turn (see [`WriteQueue`]). It reads and writes as the
/// [`DatabaseTransaction`] it wraps; dropped without [`WriteTxn::commit`], it rolls back.
pub struct WriteTxn {
    // Declared first, so dropped first: the rollback is on its way before the turn passes on.
    txn: DatabaseTransaction,
    _turn: Option<OwnedMutexGuard<()>>,
}

impl WriteTxn {
    pub async fn commit(self) -> Result<(), DbErr> {
        self.txn.commit().await
    }
}

impl Deref for WriteTxn {
    type Target = DatabaseTransaction;

    fn deref(&self) -> &DatabaseTransaction {
        &self.txn
    }
}

#[async_trait::async_trait]
impl ConnectionTrait for WriteTxn {
    fn get_database_backend(&self) -> DbBackend {
        self.txn.get_database_backend()
    }

    async fn execute_raw(&self, stmt: Statement) -> Result<ExecResult, DbErr> {
        self.txn.execute_raw(stmt).await
    }

    async fn execute_unprepared(&self, sql: &str) -> Result<ExecResult, DbErr> {
        self.txn.execute_unprepared(sql).await
    }

    async fn query_one_raw(&self, stmt: Statement) -> Result<Option<QueryResult>, DbErr> {
        self.txn.query_one_raw(stmt).await
    }

    async fn query_all_raw(&self, stmt: Statement) -> Result<Vec<QueryResult>, DbErr> {
        self.txn.query_all_raw(stmt).await
    }
}

/// Whether the database answers a trivial query (used by `/healthz`).
pub async fn ping(db: &DatabaseConnection) -> bool {
    db.ping().await.is_ok()
}

/// Whether this server can take traffic (`/readyz`): the database answers and holds every
/// migration this build knows. `Err` says what is missing, for the operator reading the probe.
pub async fn readiness(db: &DatabaseConnection) -> Result<(), String> {
    if !ping(db).await {
        return Err("database unreachable".into());
    }
    match Migrator::get_pending_migrations(db).await {
        Ok(pending) if pending.is_empty() => Ok(()),
        Ok(pending) => Err(format!("{} database migration(s) not applied yet", pending.len())),
        Err(err) => {
            tracing::warn!(error = %err, "reading the applied migrations failed");
            Err("cannot read the applied migrations".into())
        }
    }
}

/// A rule of the schema that a write can break and the service answers for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Violation {
    /// Any unique constraint or index (SQLSTATE 23505; SQLite's `SQLITE_CONSTRAINT_UNIQUE` or
    /// `_PRIMARYKEY`).
    Unique,
    /// The named constraint: on PostgreSQL the constraint the error names; on SQLite a trigger
    /// that aborts with this name as its message (SQLite has no exclusion constraints).
    Named(&'static str),
}

impl Violation {
    /// Whether `err` is this violation.
    pub fn matches(self, err: &DbErr) -> bool {
        let (DbErr::Exec(RuntimeErr::SqlxError(err)) | DbErr::Query(RuntimeErr::SqlxError(err))) = err else {
            return false;
        };
        let sqlx::Error::Database(err) = &**err else {
            return false;
        };
        let code = err.code().unwrap_or_default();
        match self {
            Violation::Unique => matches!(code.as_ref(), "23505" | "2067" | "1555"),
            Violation::Named(name) => err.constraint() == Some(name) || err.message() == name,
        }
    }
}

/// Turns database results into service results.
pub(crate) trait DbResultExt<T> {
    /// An unexpected failure: logged once with `doing` (what the service was doing) and
    /// answered as [`AppError::Internal`].
    fn context(self, doing: &'static str) -> AppResult<T>;

    /// A broken `rule` is answered with `answer()`; any other failure as in [`Self::context`].
    fn or_violation(self, rule: Violation, answer: impl FnOnce() -> AppError, doing: &'static str) -> AppResult<T>;
}

impl<T> DbResultExt<T> for Result<T, DbErr> {
    fn context(self, doing: &'static str) -> AppResult<T> {
        self.map_err(|err| unexpected(doing, err))
    }

    fn or_violation(self, rule: Violation, answer: impl FnOnce() -> AppError, doing: &'static str) -> AppResult<T> {
        self.map_err(|err| if rule.matches(&err) { answer() } else { unexpected(doing, err) })
    }
}

fn unexpected(doing: &'static str, err: DbErr) -> AppError {
    tracing::error!(error = %err, "{doing}");
    AppError::Internal
}

/// Raw SQL with positional parameters in the backend's own syntax, for the queries the query
/// builder cannot say well (offer search, telemetry rollups, fleet views).
pub(crate) struct Sql {
    pub(crate) backend: DbBackend,
    pub(crate) text: String,
    pub(crate) values: Vec<Value>,
}

impl Sql {
    pub(crate) fn new(backend: DbBackend) -> Self {
        Sql { backend, text: String::new(), values: Vec::new() }
    }

    /// Adds `value` as the next parameter and returns its placeholder.
    pub(crate) fn bind(&mut self, value: impl Into<Value>) -> String {
        self.values.push(value.into());
        match self.backend {
            DbBackend::Postgres => format!("${}", self.values.len()),
            _ => "?".to_owned(),
        }
    }
}
