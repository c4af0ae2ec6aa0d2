//! What offer search filters and sorts on, in SQL: the CUDA version as a comparable number,
//! and indexes for "available GPUs of listed, online hosts".

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter().table(Gpus::Table).add_column(integer(Gpus::CudaVersionNum).default(0)).to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_gpus_host_state")
                    .table(Gpus::Table)
                    .col(Gpus::HostId)
                    .col(Gpus::State)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(Index::create().name("idx_gpus_model").table(Gpus::Table).col(Gpus::Model).to_owned())
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_hosts_market")
                    .table(Hosts::Table)
                    .col(Hosts::Listed)
                    .col(Hosts::Status)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (name, table) in [
            ("idx_hosts_market", Hosts::Table.into_iden()),
            ("idx_gpus_model", Gpus::Table.into_iden()),
            ("idx_gpus_host_state", Gpus::Table.into_iden()),
        ] {
            manager.drop_index(Index::drop().name(name).table(table).to_owned()).await?;
        }
        manager.alter_table(Table::alter().table(Gpus::Table).drop_column(Gpus::CudaVersionNum).to_owned()).await
    }
}

#[derive(DeriveIden)]
enum Gpus {
    Table,
    HostId,
    Model,
    State,
    CudaVersionNum,
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    Listed,
    Status,
}
