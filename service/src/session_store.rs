//! A tower-sessions store over our own sea-orm connection.
//!
//! The published stores pin an older sqlx than sea-orm 2 uses, which would mean two pools and
//! two drivers; this one shares the application's pool and works on SQLite and PostgreSQL.
//!
//! Rows are keyed by the SHA-256 of the session id, never the id itself, so a copy of the
//! table signs nobody in. Only [`SessionStore::create`] inserts: saving a session updates its
//! row if it still exists, so a request that was in flight while its session signed out (or
//! rotated at sign-in) cannot bring the session back when it finishes.

use crate::{db::Violation, entities::sessions};
use chrono::{DateTime, Utc};
use sea_orm::{ActiveValue::Set, ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter};
use std::collections::HashMap;
use tower_sessions::{
    ExpiredDeletion, SessionStore,
    session::{Id, Record},
    session_store,
};

#[derive(Clone, Debug)]
pub struct DbSessionStore {
    db: DatabaseConnection,
}

impl DbSessionStore {
    pub fn new(db: DatabaseConnection) -> Self {
        DbSessionStore { db }
    }

    fn row(record: &Record) -> session_store::Result<sessions::ActiveModel> {
        let data = serde_json::to_string(&record.data).map_err(|e| session_store::Error::Encode(e.to_string()))?;
        Ok(sessions::ActiveModel {
            id: Set(key(&record.id)),
            data: Set(data),
            expires_at: Set(to_chrono(record.expiry_date)),
        })
    }
}

/// The row key of session `id`.
fn key(id: &Id) -> String {
    crate::secrets::digest(&id.to_string())
}

fn to_chrono(t: time::OffsetDateTime) -> DateTime<Utc> {
    DateTime::from_timestamp(t.unix_timestamp(), t.nanosecond()).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

fn to_time(t: DateTime<Utc>) -> session_store::Result<time::OffsetDateTime> {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(t.timestamp_nanos_opt().unwrap_or(0)))
        .map_err(|e| session_store::Error::Decode(e.to_string()))
}

fn backend(err: DbErr) -> session_store::Error {
    session_store::Error::Backend(err.to_string())
}

#[async_trait::async_trait]
impl SessionStore for DbSessionStore {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        // Ids are 128 random bits; a collision is astronomically unlikely, but never overwrite.
        loop {
            match sessions::Entity::insert(Self::row(record)?).exec(&self.db).await {
                Ok(_) => return Ok(()),
                Err(err) if Violation::Unique.matches(&err) => {
                    record.id = Id::default();
                }
                Err(err) => return Err(backend(err)),
            }
        }
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        let row = Self::row(record)?;
        sessions::Entity::update_many()
            .set(row)
            .filter(sessions::Column::Id.eq(key(&record.id)))
            .exec(&self.db)
            .await
            .map(|_| ())
            .map_err(backend)
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let row = sessions::Entity::find_by_id(key(id))
            .filter(sessions::Column::ExpiresAt.gt(Utc::now()))
            .one(&self.db)
            .await
            .map_err(backend)?;
        let Some(row) = row else { return Ok(None) };
        let data: HashMap<String, serde_json::Value> =
            serde_json::from_str(&row.data).map_err(|e| session_store::Error::Decode(e.to_string()))?;
        Ok(Some(Record { id: *id, data, expiry_date: to_time(row.expires_at)? }))
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        sessions::Entity::delete_by_id(key(id)).exec(&self.db).await.map(|_| ()).map_err(backend)
    }
}

#[async_trait::async_trait]
impl ExpiredDeletion for DbSessionStore {
    async fn delete_expired(&self) -> session_store::Result<()> {
        sessions::Entity::delete_many()
            .filter(sessions::Column::ExpiresAt.lte(Utc::now()))
            .exec(&self.db)
            .await
            .map(|_| ())
            .map_err(backend)
    }
}
