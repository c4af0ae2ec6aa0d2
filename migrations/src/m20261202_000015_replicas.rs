//! What running several server replicas on one PostgreSQL needs of the schema.
//!
//! `hosts.connection_id` names the agent connection that owns the host (`<replica>:<n>`, set
//! when the agent says hello): heartbeats and disconnects of any other connection change
//! nothing, so a stale socket on one replica cannot speak for a host that moved to another.
//!
//! Sign-in throttling counts its events in `sign_in_throttle` (one row per failed sign-in,
//! SSH attempt or sign-up, keyed by a digest), so every replica counts the same attempts.
//!
//! Open alerts are unique per (kind, host, GPU) in the database itself, so two replicas raising
//! the same alert at once keep one. The index is partial and on an expression (a host-wide alert
//! has no GPU); the statement is the same on SQLite and PostgreSQL. Duplicates that exist
//! already are resolved first, keeping the oldest open.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

const OPEN_ALERTS_INDEX: &str = "CREATE UNIQUE INDEX ux_alerts_open ON alerts \
     (kind, host_id, COALESCE(gpu_index, -1)) WHERE resolved_at IS NULL";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(Table::alter().table(Hosts::Table).add_column(string_null(Hosts::ConnectionId)).to_owned())
            .await?;
        let db = manager.get_connection();
        db.execute_unprepared(
            "UPDATE alerts SET resolved_at = raised_at WHERE resolved_at IS NULL AND id NOT IN \
             (SELECT MIN(id) FROM alerts WHERE resolved_at IS NULL GROUP BY kind, host_id, COALESCE(gpu_index, -1))",
        )
        .await?;
        db.execute_unprepared(OPEN_ALERTS_INDEX).await?;
        manager
            .create_table(
                Table::create()
                    .table(SignInThrottle::Table)
                    .if_not_exists()
                    .col(pk_auto(SignInThrottle::Id).big_integer())
                    .col(string(SignInThrottle::Budget))
                    .col(string(SignInThrottle::KeyDigest))
                    .col(timestamp_with_time_zone(SignInThrottle::At))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_sign_in_throttle_key")
                    .table(SignInThrottle::Table)
                    .col(SignInThrottle::Budget)
                    .col(SignInThrottle::KeyDigest)
                    .col(SignInThrottle::At)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_sign_in_throttle_at")
                    .table(SignInThrottle::Table)
                    .col(SignInThrottle::At)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(SignInThrottle::Table).to_owned()).await?;
        manager.get_connection().execute_unprepared("DROP INDEX ux_alerts_open").await?;
        manager.alter_table(Table::alter().table(Hosts::Table).drop_column(Hosts::ConnectionId).to_owned()).await
    }
}

#[derive(DeriveIden)]
enum SignInThrottle {
    Table,
    Id,
    Budget,
    KeyDigest,
    At,
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    ConnectionId,
}
