//! What the admin console needs of the schema.
//!
//! `audit_log` is append-only: one row per admin action and role change (who, what, on
//! which subject, why, the state before and after as JSON). Triggers refuse UPDATE and DELETE
//! on both databases, so not even a bug in the service can rewrite history.
//!
//! `hosts.verified_at` is the admin's badge (renters can filter on it); `hosts.held_reason`
//! an admin's delisting (maintenance, abuse): while set, the host is off the market and its
//! provider cannot list it again. `users.suspended_at` / `suspended_reason`: a suspended
//! account cannot sign in and its sessions and tokens stop working.

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

const SQLITE_TRIGGERS: [&str; 2] = [
    "CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log \
     BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END",
    "CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log \
     BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END",
];

const POSTGRES_TRIGGERS: [&str; 2] = [
    "CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS \
     $$ BEGIN RAISE EXCEPTION 'the audit log is append-only'; END $$",
    "CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log \
     FOR EACH ROW EXECUTE FUNCTION audit_log_append_only()",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(AuditLog::Table)
                    .if_not_exists()
                    .col(pk_auto(AuditLog::Id).big_integer())
                    .col(timestamp_with_time_zone(AuditLog::At))
                    .col(big_integer_null(AuditLog::ActorId))
                    .col(string(AuditLog::Actor))
                    .col(string(AuditLog::Action))
                    .col(string(AuditLog::SubjectKind))
                    .col(big_integer(AuditLog::SubjectId))
                    .col(text(AuditLog::Reason))
                    .col(text_null(AuditLog::Before))
                    .col(text_null(AuditLog::After))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_audit_log_subject")
                    .table(AuditLog::Table)
                    .col(AuditLog::SubjectKind)
                    .col(AuditLog::SubjectId)
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        let triggers =
            if manager.get_database_backend() == DbBackend::Postgres { POSTGRES_TRIGGERS } else { SQLITE_TRIGGERS };
        for statement in triggers {
            db.execute_unprepared(statement).await?;
        }
        manager
            .alter_table(
                Table::alter()
                    .table(Hosts::Table)
                    .add_column(timestamp_with_time_zone_null(Hosts::VerifiedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(Table::alter().table(Hosts::Table).add_column(text_null(Hosts::HeldReason)).to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Users::Table)
                    .add_column(timestamp_with_time_zone_null(Users::SuspendedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(Table::alter().table(Users::Table).add_column(text_null(Users::SuspendedReason)).to_owned())
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (table, column) in [
            (Users::Table.into_iden(), Users::SuspendedReason.into_iden()),
            (Users::Table.into_iden(), Users::SuspendedAt.into_iden()),
            (Hosts::Table.into_iden(), Hosts::HeldReason.into_iden()),
            (Hosts::Table.into_iden(), Hosts::VerifiedAt.into_iden()),
        ] {
            manager.alter_table(Table::alter().table(table).drop_column(column).to_owned()).await?;
        }
        manager.drop_table(Table::drop().table(AuditLog::Table).to_owned()).await?;
        if manager.get_database_backend() == DbBackend::Postgres {
            manager.get_connection().execute_unprepared("DROP FUNCTION audit_log_append_only()").await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum AuditLog {
    Table,
    Id,
    At,
    ActorId,
    Actor,
    Action,
    SubjectKind,
    SubjectId,
    Reason,
    Before,
    After,
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    VerifiedAt,
    HeldReason,
}

#[derive(DeriveIden)]
enum Users {
    Table,
    SuspendedAt,
    SuspendedReason,
}
