//! The market's stock: free GPUs per (host, GPU model), kept by the service in the same
//! transaction as every change to a host's GPUs or holds, so a search reads one small row per
//! offer instead of aggregating every GPU and its holds on each request.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(OfferStock::Table)
                    .if_not_exists()
                    .col(big_integer(OfferStock::HostId))
                    .col(string(OfferStock::GpuModel))
                    .col(big_integer(OfferStock::GpusFree))
                    .col(big_integer(OfferStock::VramBytes))
                    .col(string(OfferStock::CudaVersion))
                    .col(integer(OfferStock::CudaVersionNum))
                    .col(string(OfferStock::DriverVersion))
                    .col(big_integer(OfferStock::Linked))
                    .primary_key(Index::create().col(OfferStock::HostId).col(OfferStock::GpuModel))
                    .foreign_key(
                        ForeignKey::create()
                            .from(OfferStock::Table, OfferStock::HostId)
                            .to(Hosts::Table, Hosts::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_offer_stock_model")
                    .table(OfferStock::Table)
                    .col(OfferStock::GpuModel)
                    .col(OfferStock::GpusFree)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(OfferStock::Table).to_owned()).await
    }
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum OfferStock {
    Table,
    HostId,
    GpuModel,
    GpusFree,
    VramBytes,
    CudaVersion,
    CudaVersionNum,
    DriverVersion,
    Linked,
}
