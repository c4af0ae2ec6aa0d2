//! Rentals and the GPUs they hold over time.
//!
//! No GPU may be held by two rentals over overlapping time, and the database itself enforces
//! it: on PostgreSQL an exclusion constraint over (GPU, time range) of active holds, on SQLite
//! triggers that refuse an overlapping active hold (SQLite writes are serialised by
//! `BEGIN IMMEDIATE`, so the trigger's check cannot race). Open-ended holds end at
//! 9999-12-31.

use sea_orm_migration::{prelude::*, schema::*, sea_orm::DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Rentals::Table)
                    .if_not_exists()
                    .col(big_pk_auto(Rentals::Id))
                    .col(big_integer(Rentals::RenterId))
                    .col(big_integer(Rentals::HostId))
                    .col(string(Rentals::GpuModel))
                    .col(integer(Rentals::GpuCount))
                    .col(string(Rentals::Kind))
                    .col(string(Rentals::State))
                    .col(big_integer(Rentals::PriceMicros))
                    .col(text(Rentals::Workload))
                    .col(timestamp_with_time_zone(Rentals::StartsAt))
                    .col(timestamp_with_time_zone_null(Rentals::EndsAt))
                    .col(timestamp_with_time_zone(Rentals::CreatedAt))
                    .col(timestamp_with_time_zone(Rentals::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(Rentals::Table, Rentals::RenterId)
                            .to(Users::Table, Users::Id)
                            .on_delete(ForeignKeyAction::Restrict),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(Rentals::Table, Rentals::HostId)
                            .to(Hosts::Table, Hosts::Id)
                            .on_delete(ForeignKeyAction::Restrict),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create().name("idx_rentals_renter").table(Rentals::Table).col(Rentals::RenterId).to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(RentalGpus::Table)
                    .if_not_exists()
                    .col(big_pk_auto(RentalGpus::Id))
                    .col(big_integer(RentalGpus::RentalId))
                    .col(big_integer(RentalGpus::GpuId))
                    .col(timestamp_with_time_zone(RentalGpus::StartsAt))
                    .col(timestamp_with_time_zone(RentalGpus::EndsAt))
                    .col(boolean(RentalGpus::Active).default(true))
                    .foreign_key(
                        ForeignKey::create()
                            .from(RentalGpus::Table, RentalGpus::RentalId)
                            .to(Rentals::Table, Rentals::Id)
                            .on_delete(ForeignKeyAction::Restrict),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(RentalGpus::Table, RentalGpus::GpuId)
                            .to(Gpus::Table, Gpus::Id)
                            .on_delete(ForeignKeyAction::Restrict),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_rental_gpus_gpu_active")
                    .table(RentalGpus::Table)
                    .col(RentalGpus::GpuId)
                    .col(RentalGpus::Active)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_rental_gpus_rental")
                    .table(RentalGpus::Table)
                    .col(RentalGpus::RentalId)
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        match manager.get_database_backend() {
            DbBackend::Postgres => {
                db.execute_unprepared(
                    "ALTER TABLE rental_gpus ADD CONSTRAINT rental_gpus_no_overlap EXCLUDE USING gist \
                     (int8range(gpu_id, gpu_id, '[]') WITH &&, tstzrange(starts_at, ends_at) WITH &&) WHERE (active)",
                )
                .await?;
            }
            _ => {
                for event in ["INSERT", "UPDATE"] {
                    db.execute_unprepared(&format!(
                        "CREATE TRIGGER rental_gpus_no_overlap_{lower} BEFORE {event} ON rental_gpus \
                         WHEN NEW.active BEGIN \
                           SELECT RAISE(ABORT, 'rental_gpus_no_overlap') WHERE EXISTS ( \
                             SELECT 1 FROM rental_gpus o WHERE o.gpu_id = NEW.gpu_id AND o.active AND o.id IS NOT NEW.id \
                             AND o.starts_at < NEW.ends_at AND NEW.starts_at < o.ends_at); \
                         END",
                        lower = event.to_lowercase()
                    ))
                    .await?;
                }
            }
        }
        manager
            .create_table(
                Table::create()
                    .table(RentalEvents::Table)
                    .if_not_exists()
                    .col(big_pk_auto(RentalEvents::Id))
                    .col(big_integer(RentalEvents::RentalId))
                    .col(string(RentalEvents::State))
                    .col(string(RentalEvents::Reason))
                    .col(timestamp_with_time_zone(RentalEvents::At))
                    .foreign_key(
                        ForeignKey::create()
                            .from(RentalEvents::Table, RentalEvents::RentalId)
                            .to(Rentals::Table, Rentals::Id)
                            .on_delete(ForeignKeyAction::Restrict),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [RentalEvents::Table.into_iden(), RentalGpus::Table.into_iden(), Rentals::Table.into_iden()] {
            manager.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Gpus {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Rentals {
    Table,
    Id,
    RenterId,
    HostId,
    GpuModel,
    GpuCount,
    Kind,
    State,
    PriceMicros,
    Workload,
    StartsAt,
    EndsAt,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum RentalGpus {
    Table,
    Id,
    RentalId,
    GpuId,
    StartsAt,
    EndsAt,
    Active,
}

#[derive(DeriveIden)]
enum RentalEvents {
    Table,
    Id,
    RentalId,
    State,
    Reason,
    At,
}
