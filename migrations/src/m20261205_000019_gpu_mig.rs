//! What each GPU's agent says of MIG: whether it is on (`NULL` where the GPU has no MIG) and
//! the instances carved out of it now, as JSON like `nvlink_peers`. Slices are not yet sold;
//! this is the record the slice offers will be built from.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(Table::alter().table(Gpus::Table).add_column(boolean_null(Gpus::MigEnabled)).to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter().table(Gpus::Table).add_column(text(Gpus::MigInstances).default("[]")).to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.alter_table(Table::alter().table(Gpus::Table).drop_column(Gpus::MigInstances).to_owned()).await?;
        manager.alter_table(Table::alter().table(Gpus::Table).drop_column(Gpus::MigEnabled).to_owned()).await
    }
}

#[derive(DeriveIden)]
enum Gpus {
    Table,
    MigEnabled,
    MigInstances,
}
