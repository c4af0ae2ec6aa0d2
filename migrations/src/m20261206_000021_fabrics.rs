//! The network fabric a host sits on, as its provider declares it: a fabric id shared by the
//! hosts that can reach each other over it (a cluster, an InfiniBand subnet), the interconnect
//! (`infiniband`, `roce`, `ethernet`) and its speed. Renters filter offers by it and, for gangs,
//! book hosts of one fabric; the agent's reported links check the declaration.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let columns: [ColumnDef; 3] = [
            string_len_null(Hosts::FabricId, 64),
            string_len_null(Hosts::Interconnect, 16),
            integer_null(Hosts::FabricGbps),
        ];
        for column in columns {
            manager.alter_table(Table::alter().table(Hosts::Table).add_column(column).to_owned()).await?;
        }
        manager
            .create_index(Index::create().name("idx_hosts_fabric").table(Hosts::Table).col(Hosts::FabricId).to_owned())
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_index(Index::drop().name("idx_hosts_fabric").table(Hosts::Table).to_owned()).await?;
        for column in [Hosts::FabricGbps, Hosts::Interconnect, Hosts::FabricId] {
            manager.alter_table(Table::alter().table(Hosts::Table).drop_column(column).to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    FabricId,
    Interconnect,
    FabricGbps,
}
