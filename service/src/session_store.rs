//! A tower-sessions store over our own sea-orm connection.
//!
//! The published stores pin an older sqlx than sea-orm 2 uses, which would mean two pools and
//! two drivers; this one shares the application's pool and works on SQLite and PostgreSQL.

use crate::{db::Violation, entities::sessions};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, sea_query::OnConflict,
};
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
            id: Set(record.id.to_string()),
            data: Set(data),
            expires_at: Set(to_chrono(record.expiry_date)),
        })
    }
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
        sessions::Entity::insert(Self::row(record)?)
            .on_conflict(
                OnConflict::column(sessions::Column::Id)
                    .update_columns([sessions::Column::Data, sessions::Column::ExpiresAt])
                    .to_owned(),
            )
            .exec(&self.db)
            .await
            .map(|_| ())
            .map_err(backend)
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let row = sessions::Entity::find_by_id(id.to_string())
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
        sessions::Entity::delete_by_id(id.to_string()).exec(&self.db).await.map(|_| ()).map_err(backend)
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
