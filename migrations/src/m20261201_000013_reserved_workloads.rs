//! A reservation outlives its workload: when the renter's command exits inside the window the
//! GPUs stay held for them (and paid for) until the window ends. `workload_exited_at` says the
//! workload is gone on purpose, so the agent's heartbeat not listing it is no lost workload.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Rentals::Table)
                    .add_column(timestamp_with_time_zone_null(Rentals::WorkloadExitedAt))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(Table::alter().table(Rentals::Table).drop_column(Rentals::WorkloadExitedAt).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Rentals {
    Table,
    WorkloadExitedAt,
}
