//! Opening the database: SQLite by default, PostgreSQL by URL, migrated before first use.
//!
//! SQLite runs in WAL mode with a busy timeout and foreign keys on. Writes that read first go
//! through [`begin_write`], which on SQLite is `BEGIN IMMEDIATE`: the write lock is taken up
//! front, so two such transactions queue instead of failing with `SQLITE_BUSY` halfway.

use cardpool_migrations::{Migrator, MigratorTrait};
use sea_orm::{
    ConnectOptions, Database, DatabaseConnection, DatabaseTransaction, DbErr, TransactionOptions, TransactionTrait,
    sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous},
};
use std::time::Duration;

/// How long a SQLite writer waits for the lock before giving up.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Connects to `url` (`sqlite://path?mode=rwc` or `postgres://...`) and runs pending migrations.
pub async fn connect_and_migrate(url: &str) -> Result<DatabaseConnection, DbErr> {
    let db = connect(url).await?;
    Migrator::up(&db, None).await?;
    Ok(db)
}

/// Connects without migrating.
pub async fn connect(url: &str) -> Result<DatabaseConnection, DbErr> {
    let mut opts = ConnectOptions::new(url.to_owned());
    opts.sqlx_logging(false).connect_timeout(Duration::from_secs(10)).acquire_timeout(Duration::from_secs(15));
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

/// Starts a transaction for a write that reads first (`BEGIN IMMEDIATE` on SQLite; a normal
/// `BEGIN` on PostgreSQL, where row locks and constraints do the same job).
pub async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    db.begin_with_options(TransactionOptions {
        sqlite_transaction_mode: Some(sea_orm::SqliteTransactionMode::Immediate),
        ..Default::default()
    })
    .await
}

/// Whether the database answers a trivial query (used by `/healthz`).
pub async fn ping(db: &DatabaseConnection) -> bool {
    db.ping().await.is_ok()
}
