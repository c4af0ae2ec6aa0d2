//! The latest self-test report each host's agent sent, and when.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite's ALTER TABLE adds one at a time.
        manager
            .alter_table(Table::alter().table(Hosts::Table).add_column(text_null(Hosts::SelfTest)).to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Hosts::Table)
                    .add_column(timestamp_with_time_zone_null(Hosts::SelfTestAt))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.alter_table(Table::alter().table(Hosts::Table).drop_column(Hosts::SelfTestAt).to_owned()).await?;
        manager.alter_table(Table::alter().table(Hosts::Table).drop_column(Hosts::SelfTest).to_owned()).await
    }
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    SelfTest,
    SelfTestAt,
}
