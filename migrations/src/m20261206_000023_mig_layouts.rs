//! MIG layouts a provider picks and the agent carves: the profiles each GPU's agent can make
//! (JSON of `cardpool_protocol::MigProfile`, empty where the agent cannot carve it), the layout
//! the provider asked for and the agent has not yet reported (`NULL` when none is pending:
//! while one is, the GPU and its slices are `reconfiguring`, off the market), and why the last
//! one failed.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let columns: [ColumnDef; 3] = [
            text(Gpus::MigProfiles).default("[]").to_owned(),
            text_null(Gpus::MigLayoutWanted),
            text_null(Gpus::MigLayoutError),
        ];
        for column in columns {
            manager.alter_table(Table::alter().table(Gpus::Table).add_column(column).to_owned()).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [Gpus::MigLayoutError, Gpus::MigLayoutWanted, Gpus::MigProfiles] {
            manager.alter_table(Table::alter().table(Gpus::Table).drop_column(column).to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Gpus {
    Table,
    MigProfiles,
    MigLayoutWanted,
    MigLayoutError,
}
