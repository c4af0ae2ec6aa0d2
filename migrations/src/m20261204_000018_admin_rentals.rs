//! What the admin console's rental list, refunds and reports need of the schema.
//!
//! `rentals.refunded_micros`: what admins gave back on the rental through the ledger (the
//! ledger holds each refund; this bounds the next one at what was charged). The index on
//! `(created_at, id)` serves the admin list, newest first, and its time filter.

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
                    .add_column(big_integer(Rentals::RefundedMicros).default(0))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_rentals_created")
                    .table(Rentals::Table)
                    .col(Rentals::CreatedAt)
                    .col(Rentals::Id)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_index(Index::drop().name("idx_rentals_created").table(Rentals::Table).to_owned()).await?;
        manager.alter_table(Table::alter().table(Rentals::Table).drop_column(Rentals::RefundedMicros).to_owned()).await
    }
}

#[derive(DeriveIden)]
enum Rentals {
    Table,
    Id,
    CreatedAt,
    RefundedMicros,
}
