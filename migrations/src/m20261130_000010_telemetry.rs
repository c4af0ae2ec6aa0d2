//! Telemetry that outlives the server's memory: one-minute rollups per GPU (history charts,
//! `/metrics` has the live values), the per-host cursor that makes ingest exactly-once, energy
//! per GPU per rental, and alerts.
//!
//! Rollups keep sums and counts rather than averages so that frames arriving in several
//! batches (or replayed after a reconnect) add up to the same minute as one batch would.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(GpuRollups::Table)
                    .if_not_exists()
                    .col(big_integer(GpuRollups::HostId))
                    .col(integer(GpuRollups::GpuIndex))
                    .col(timestamp_with_time_zone(GpuRollups::Minute))
                    .col(integer(GpuRollups::Samples))
                    .col(big_integer(GpuRollups::UtilSum))
                    .col(integer(GpuRollups::UtilMin))
                    .col(integer(GpuRollups::UtilMax))
                    .col(big_integer(GpuRollups::MemoryUsedSum))
                    .col(big_integer(GpuRollups::MemoryUsedMax))
                    .col(big_integer(GpuRollups::TemperatureSum))
                    .col(integer(GpuRollups::TemperatureMax))
                    .col(big_integer(GpuRollups::PowerSumMw))
                    .col(big_integer(GpuRollups::PowerMaxMw))
                    .col(big_integer(GpuRollups::EnergyMj))
                    .primary_key(
                        Index::create().col(GpuRollups::HostId).col(GpuRollups::GpuIndex).col(GpuRollups::Minute),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(GpuRollups::Table, GpuRollups::HostId)
                            .to(Hosts::Table, Hosts::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_gpu_rollups_minute")
                    .table(GpuRollups::Table)
                    .col(GpuRollups::Minute)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(TelemetryCursors::Table)
                    .if_not_exists()
                    .col(big_integer(TelemetryCursors::HostId).primary_key())
                    .col(big_integer(TelemetryCursors::Stream))
                    .col(big_integer(TelemetryCursors::Sequence))
                    .col(big_integer(TelemetryCursors::Frames))
                    .col(big_integer(TelemetryCursors::Dropped))
                    .col(timestamp_with_time_zone(TelemetryCursors::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(TelemetryCursors::Table, TelemetryCursors::HostId)
                            .to(Hosts::Table, Hosts::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(RentalEnergy::Table)
                    .if_not_exists()
                    .col(big_integer(RentalEnergy::RentalId))
                    .col(integer(RentalEnergy::GpuIndex))
                    .col(big_integer(RentalEnergy::EnergyMj))
                    .primary_key(Index::create().col(RentalEnergy::RentalId).col(RentalEnergy::GpuIndex))
                    .foreign_key(
                        ForeignKey::create()
                            .from(RentalEnergy::Table, RentalEnergy::RentalId)
                            .to(Rentals::Table, Rentals::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Alerts::Table)
                    .if_not_exists()
                    .col(pk_auto(Alerts::Id).big_integer())
                    .col(string(Alerts::Kind))
                    .col(big_integer(Alerts::HostId))
                    .col(integer_null(Alerts::GpuIndex))
                    .col(big_integer_null(Alerts::RentalId))
                    .col(text(Alerts::Message))
                    .col(timestamp_with_time_zone(Alerts::RaisedAt))
                    .col(timestamp_with_time_zone_null(Alerts::ResolvedAt))
                    .col(timestamp_with_time_zone_null(Alerts::AcknowledgedAt))
                    .col(big_integer_null(Alerts::AcknowledgedBy))
                    .foreign_key(
                        ForeignKey::create()
                            .from(Alerts::Table, Alerts::HostId)
                            .to(Hosts::Table, Hosts::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_alerts_host_kind")
                    .table(Alerts::Table)
                    .col(Alerts::HostId)
                    .col(Alerts::Kind)
                    .col(Alerts::ResolvedAt)
                    .to_owned(),
            )
            .await?;
        let mut column = boolean(Rentals::StopWhenIdle).default(false).to_owned();
        manager.alter_table(Table::alter().table(Rentals::Table).add_column(&mut column).to_owned()).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.alter_table(Table::alter().table(Rentals::Table).drop_column(Rentals::StopWhenIdle).to_owned()).await?;
        for table in [
            Alerts::Table.into_iden(),
            RentalEnergy::Table.into_iden(),
            TelemetryCursors::Table.into_iden(),
            GpuRollups::Table.into_iden(),
        ] {
            manager.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Rentals {
    Table,
    Id,
    StopWhenIdle,
}

#[derive(DeriveIden)]
enum GpuRollups {
    Table,
    HostId,
    GpuIndex,
    Minute,
    Samples,
    UtilSum,
    UtilMin,
    UtilMax,
    MemoryUsedSum,
    MemoryUsedMax,
    TemperatureSum,
    TemperatureMax,
    PowerSumMw,
    PowerMaxMw,
    EnergyMj,
}

#[derive(DeriveIden)]
enum TelemetryCursors {
    Table,
    HostId,
    Stream,
    Sequence,
    Frames,
    Dropped,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum RentalEnergy {
    Table,
    RentalId,
    GpuIndex,
    EnergyMj,
}

#[derive(DeriveIden)]
enum Alerts {
    Table,
    Id,
    Kind,
    HostId,
    GpuIndex,
    RentalId,
    Message,
    RaisedAt,
    ResolvedAt,
    AcknowledgedAt,
    AcknowledgedBy,
}
