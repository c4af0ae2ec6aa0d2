//! Multi-node gangs: one booking of N GPUs on each of M hosts of one fabric, whose members are
//! ordinary rentals (each holds its host's GPUs with the usual no-overlap rule, is billed and
//! stopped like any rental) tied together by `gang_id` and their `gang_rank`.
//!
//! A gang's members start together: a member whose workload is up records `gang_ready_at` and
//! waits; billing starts for all of them, at the same instant, when the last one is ready. A
//! host's `fabric_addr` is where the other members reach it (rank 0's rendezvous port).

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Gangs::Table)
                    .col(big_pk_auto(Gangs::Id))
                    .col(big_integer(Gangs::RenterId))
                    .col(string_len(Gangs::FabricId, 64))
                    .col(string_len(Gangs::GpuModel, 128))
                    .col(integer(Gangs::Nodes))
                    .col(integer(Gangs::GpusPerNode))
                    .col(string_len(Gangs::Kind, 16))
                    .col(string_len(Gangs::OnMemberLoss, 16))
                    .col(integer(Gangs::MasterPort))
                    .col(timestamp_with_time_zone_null(Gangs::StartedAt))
                    .col(timestamp_with_time_zone(Gangs::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_gangs_renter")
                            .from(Gangs::Table, Gangs::RenterId)
                            .to(Users::Table, Users::Id),
                    )
                    .check(Expr::col(Gangs::Nodes).gte(2))
                    .check(Expr::col(Gangs::GpusPerNode).gte(1))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(Index::create().name("idx_gangs_renter").table(Gangs::Table).col(Gangs::RenterId).to_owned())
            .await?;
        let columns: [ColumnDef; 3] = [
            big_integer_null(Rentals::GangId),
            integer_null(Rentals::GangRank),
            timestamp_with_time_zone_null(Rentals::GangReadyAt),
        ];
        for column in columns {
            manager.alter_table(Table::alter().table(Rentals::Table).add_column(column).to_owned()).await?;
        }
        manager
            .create_index(
                Index::create()
                    .name("idx_rentals_gang_rank")
                    .table(Rentals::Table)
                    .col(Rentals::GangId)
                    .col(Rentals::GangRank)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter().table(Hosts::Table).add_column(string_len_null(Hosts::FabricAddr, 64)).to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.alter_table(Table::alter().table(Hosts::Table).drop_column(Hosts::FabricAddr).to_owned()).await?;
        manager.drop_index(Index::drop().name("idx_rentals_gang_rank").table(Rentals::Table).to_owned()).await?;
        for column in [Rentals::GangReadyAt, Rentals::GangRank, Rentals::GangId] {
            manager.alter_table(Table::alter().table(Rentals::Table).drop_column(column).to_owned()).await?;
        }
        manager.drop_table(Table::drop().table(Gangs::Table).to_owned()).await
    }
}

#[derive(DeriveIden)]
enum Gangs {
    Table,
    Id,
    RenterId,
    FabricId,
    GpuModel,
    Nodes,
    GpusPerNode,
    Kind,
    OnMemberLoss,
    MasterPort,
    StartedAt,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Rentals {
    Table,
    GangId,
    GangRank,
    GangReadyAt,
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    FabricAddr,
}
