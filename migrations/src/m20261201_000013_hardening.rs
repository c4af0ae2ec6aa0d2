//! What issue 14's hardening needs of the schema.
//!
//! A reservation outlives its workload: when the renter's command exits inside the window the
//! GPUs stay held for them (and paid for) until the window ends. `workload_exited_at` says the
//! workload is gone on purpose, so the agent's heartbeat not listing it is no lost workload.
//!
//! Offer search reads each host's status transitions of the last week only: an index by host
//! and time keeps that a range scan however long a host's history grows. Ledger histories are
//! read a page at a time in transaction order per account, and recent credits from the first
//! transaction of a time on: an index on postings by (account, transaction) replaces the one
//! on the account alone, and transactions get one on their time.

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
                    .add_column(timestamp_with_time_zone_null(Rentals::WorkloadExitedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_host_events_host_at")
                    .table(HostEvents::Table)
                    .col(HostEvents::HostId)
                    .col(HostEvents::At)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_ledger_postings_account_transaction")
                    .table(LedgerPostings::Table)
                    .col(LedgerPostings::LedgerAccountId)
                    .col(LedgerPostings::TransactionId)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(Index::drop().name("idx_ledger_postings_account").table(LedgerPostings::Table).to_owned())
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_ledger_transactions_created")
                    .table(LedgerTransactions::Table)
                    .col(LedgerTransactions::CreatedAt)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop().name("idx_ledger_transactions_created").table(LedgerTransactions::Table).to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_ledger_postings_account")
                    .table(LedgerPostings::Table)
                    .col(LedgerPostings::LedgerAccountId)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(
                Index::drop().name("idx_ledger_postings_account_transaction").table(LedgerPostings::Table).to_owned(),
            )
            .await?;
        manager.drop_index(Index::drop().name("idx_host_events_host_at").table(HostEvents::Table).to_owned()).await?;
        manager
            .alter_table(Table::alter().table(Rentals::Table).drop_column(Rentals::WorkloadExitedAt).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Rentals {
    Table,
    WorkloadExitedAt,
}

#[derive(DeriveIden)]
enum HostEvents {
    Table,
    HostId,
    At,
}

#[derive(DeriveIden)]
enum LedgerPostings {
    Table,
    LedgerAccountId,
    TransactionId,
}

#[derive(DeriveIden)]
enum LedgerTransactions {
    Table,
    CreatedAt,
}
