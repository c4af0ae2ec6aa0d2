//! What running and billing a rental needs: when billing started and ends, what has been
//! charged so far, the spot bid, notices for the renter, and the spot clearing-price history.
//!
//! `charged_micros`/`billed_seconds` move in the same transaction as the ledger entry that
//! charges them, so a crash can never bill a second twice or skip one.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite cannot add several in one ALTER TABLE.
        let columns = [
            big_integer_null(Rentals::BidMicros),
            timestamp_with_time_zone_null(Rentals::RunningSince),
            timestamp_with_time_zone_null(Rentals::BillingEndsAt),
            big_integer(Rentals::BilledSeconds).default(0).to_owned(),
            big_integer(Rentals::ChargedMicros).default(0).to_owned(),
            boolean(Rentals::Settled).default(false).to_owned(),
            text_null(Rentals::Notice),
            timestamp_with_time_zone_null(Rentals::NoticeGivenAt),
            timestamp_with_time_zone_null(Rentals::ReservedUntil),
            big_integer(Rentals::PrepaidMicros).default(0).to_owned(),
        ];
        for mut column in columns {
            manager.alter_table(Table::alter().table(Rentals::Table).add_column(&mut column).to_owned()).await?;
        }
        manager
            .create_index(
                Index::create()
                    .name("idx_rentals_host_state")
                    .table(Rentals::Table)
                    .col(Rentals::HostId)
                    .col(Rentals::State)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create().name("idx_rentals_unsettled").table(Rentals::Table).col(Rentals::Settled).to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(SpotPrices::Table)
                    .if_not_exists()
                    .col(big_pk_auto(SpotPrices::Id))
                    .col(big_integer(SpotPrices::HostId))
                    .col(string(SpotPrices::GpuModel))
                    .col(big_integer(SpotPrices::PriceMicros))
                    .col(timestamp_with_time_zone(SpotPrices::At))
                    .foreign_key(
                        ForeignKey::create()
                            .from(SpotPrices::Table, SpotPrices::HostId)
                            .to(Hosts::Table, Hosts::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_spot_prices_offer")
                    .table(SpotPrices::Table)
                    .col(SpotPrices::HostId)
                    .col(SpotPrices::GpuModel)
                    .col(SpotPrices::At)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(SpotPrices::Table).to_owned()).await?;
        for column in [
            Rentals::BidMicros,
            Rentals::RunningSince,
            Rentals::BillingEndsAt,
            Rentals::BilledSeconds,
            Rentals::ChargedMicros,
            Rentals::Settled,
            Rentals::Notice,
            Rentals::NoticeGivenAt,
            Rentals::ReservedUntil,
            Rentals::PrepaidMicros,
        ] {
            manager.alter_table(Table::alter().table(Rentals::Table).drop_column(column).to_owned()).await?;
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
    HostId,
    State,
    BidMicros,
    RunningSince,
    BillingEndsAt,
    BilledSeconds,
    ChargedMicros,
    Settled,
    Notice,
    NoticeGivenAt,
    ReservedUntil,
    PrepaidMicros,
}

#[derive(DeriveIden)]
enum SpotPrices {
    Table,
    Id,
    HostId,
    GpuModel,
    PriceMicros,
    At,
}
