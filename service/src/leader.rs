//! One replica of a cluster runs the background workers (billing, schedules, the liveness
//! reaper, cleanups): the leader, which holds a PostgreSQL advisory lock on a connection of its
//! own. When the leader dies its connection closes, PostgreSQL frees the lock, and the replica
//! that asks next (each asks every second) takes over. A leader whose connection fails stops
//! leading at once: it cannot tell whether it still holds the lock.
//!
//! Migrations and the start-up stock rebuild run under another advisory lock, so replicas can
//! start together. On SQLite there is one process: it always leads and never waits.

use crate::{AppError, AppResult};
use sea_orm::{
    DatabaseConnection, DbBackend, DbErr,
    sqlx::{self, Connection, postgres::PgConnection},
};
use std::time::Duration;

/// The advisory-lock keys (two-int form, which never meets the one-bigint keys of `stock`).
const LOCK_CLASS: i32 = 0x4350_4f4c; // "CPOL"
const WORKERS: i32 = 1;
const START_UP: i32 = 2;

/// How often a follower asks for the lock, and a leader checks it still holds it.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// This replica leads the cluster's workers for as long as this lives.
pub struct Leadership {
    /// The connection holding the lock; `None` on SQLite.
    held_by: Option<PgConnection>,
}

impl Leadership {
    /// Waits until this replica leads (at once on SQLite).
    pub async fn campaign(db: &DatabaseConnection) -> Leadership {
        if db.get_database_backend() != DbBackend::Postgres {
            return Leadership { held_by: None };
        }
        // One connection asks every second until it holds the lock (reopened if it fails).
        let mut asking: Option<PgConnection> = None;
        loop {
            if asking.is_none() {
                asking = open(db).await.ok();
            }
            if let Some(conn) = asking.as_mut() {
                match try_lock(conn, WORKERS).await {
                    Ok(true) => return Leadership { held_by: asking },
                    Ok(false) => {}
                    Err(_) => asking = None,
                }
            }
            tokio::time::sleep(CHECK_EVERY).await;
        }
    }

    /// Completes when this replica stops leading: its lock connection failed (never on SQLite).
    pub async fn lost(&mut self) {
        let Some(conn) = self.held_by.as_mut() else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(CHECK_EVERY).await;
            let check = tokio::time::timeout(CHECK_EVERY * 3, sqlx::query("SELECT 1").execute(&mut *conn)).await;
            if !matches!(check, Ok(Ok(_))) {
                tracing::warn!("lost the connection holding the workers' lock: no longer leading");
                return;
            }
        }
    }
}

/// Runs `work` (migrations, the stock rebuild) while holding the start-up lock, so replicas
/// starting together do it one after the other. Without PostgreSQL, just runs it.
pub async fn one_at_a_time<T, F>(db: &DatabaseConnection, work: F) -> Result<T, DbErr>
where
    F: Future<Output = Result<T, DbErr>>,
{
    if db.get_database_backend() != DbBackend::Postgres {
        return work.await;
    }
    let mut conn = open(db).await.map_err(|e| DbErr::Custom(format!("opening a lock connection: {e}")))?;
    sqlx::query("SELECT pg_advisory_lock($1, $2)")
        .bind(LOCK_CLASS)
        .bind(START_UP)
        .execute(&mut conn)
        .await
        .map_err(|e| DbErr::Custom(format!("taking the start-up lock: {e}")))?;
    let result = work.await;
    // Closing the connection frees the lock whatever happened.
    let _ = conn.close().await;
    result
}

/// A connection of its own (not the pool's: a session lock must stay on one connection).
async fn open(db: &DatabaseConnection) -> Result<PgConnection, sqlx::Error> {
    PgConnection::connect_with(&db.get_postgres_connection_pool().connect_options()).await
}

/// Whether `conn` now holds lock `key` (`false`: another session does).
async fn try_lock(conn: &mut PgConnection, key: i32) -> AppResult<bool> {
    sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
        .bind(LOCK_CLASS)
        .bind(key)
        .fetch_one(conn)
        .await
        .map_err(|err| internal("asking for the workers' lock", err))
}

fn internal(doing: &str, err: sqlx::Error) -> AppError {
    tracing::error!(error = %err, "{doing}");
    AppError::Internal
}
