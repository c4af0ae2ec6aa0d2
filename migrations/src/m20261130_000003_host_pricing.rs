//! Provider pricing per host and GPU model (integer micro-dollars per GPU-hour), and whether
//! a host is listed on the market.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter().table(Hosts::Table).add_column(boolean(Hosts::Listed).default(false)).to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(HostPrices::Table)
                    .if_not_exists()
                    .col(big_pk_auto(HostPrices::Id))
                    .col(big_integer(HostPrices::HostId))
                    .col(string(HostPrices::GpuModel))
                    .col(big_integer(HostPrices::OnDemandMicros))
                    .col(big_integer(HostPrices::ReservedMicros))
                    .col(big_integer(HostPrices::SpotMinBidMicros))
                    .col(timestamp_with_time_zone(HostPrices::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(HostPrices::Table, HostPrices::HostId)
                            .to(Hosts::Table, Hosts::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_host_prices_host_model")
                    .table(HostPrices::Table)
                    .col(HostPrices::HostId)
                    .col(HostPrices::GpuModel)
                    .unique()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(HostPrices::Table).to_owned()).await?;
        manager.alter_table(Table::alter().table(Hosts::Table).drop_column(Hosts::Listed).to_owned()).await
    }
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    Id,
    Listed,
}

#[derive(DeriveIden)]
enum HostPrices {
    Table,
    Id,
    HostId,
    GpuModel,
    OnDemandMicros,
    ReservedMicros,
    SpotMinBidMicros,
    UpdatedAt,
}
