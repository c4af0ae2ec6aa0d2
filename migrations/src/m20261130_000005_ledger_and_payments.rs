//! Money: a double-entry ledger (accounts, transactions, postings), Stripe top-ups, the inbox
//! of Stripe webhook events (exactly-once effects), Connect payout accounts and payouts.
//!
//! Amounts are signed integer micro-dollars. A transaction's postings sum to zero; the cached
//! `balance_micros` of a ledger account always equals the sum of its postings (checked by the
//! service). Every `reference` is unique, so no business event can be booked twice.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(LedgerAccounts::Table)
                    .if_not_exists()
                    .col(big_pk_auto(LedgerAccounts::Id))
                    .col(string_uniq(LedgerAccounts::Code))
                    .col(string(LedgerAccounts::Kind))
                    .col(big_integer_null(LedgerAccounts::UserId))
                    .col(big_integer(LedgerAccounts::BalanceMicros).default(0))
                    .col(timestamp_with_time_zone(LedgerAccounts::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(LedgerAccounts::Table, LedgerAccounts::UserId)
                            .to(Users::Table, Users::Id)
                            .on_delete(ForeignKeyAction::Restrict),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(LedgerTransactions::Table)
                    .if_not_exists()
                    .col(big_pk_auto(LedgerTransactions::Id))
                    .col(string(LedgerTransactions::Kind))
                    .col(string_uniq(LedgerTransactions::Reference))
                    .col(string(LedgerTransactions::Description))
                    .col(big_integer_null(LedgerTransactions::ActorUserId))
                    .col(string_null(LedgerTransactions::Reason))
                    .col(timestamp_with_time_zone(LedgerTransactions::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(LedgerPostings::Table)
                    .if_not_exists()
                    .col(big_pk_auto(LedgerPostings::Id))
                    .col(big_integer(LedgerPostings::TransactionId))
                    .col(big_integer(LedgerPostings::LedgerAccountId))
                    .col(big_integer(LedgerPostings::AmountMicros))
                    .foreign_key(
                        ForeignKey::create()
                            .from(LedgerPostings::Table, LedgerPostings::TransactionId)
                            .to(LedgerTransactions::Table, LedgerTransactions::Id)
                            .on_delete(ForeignKeyAction::Restrict),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(LedgerPostings::Table, LedgerPostings::LedgerAccountId)
                            .to(LedgerAccounts::Table, LedgerAccounts::Id)
                            .on_delete(ForeignKeyAction::Restrict),
                    )
                    .to_owned(),
            )
            .await?;
        for (name, col) in [
            ("idx_ledger_postings_account", LedgerPostings::LedgerAccountId),
            ("idx_ledger_postings_transaction", LedgerPostings::TransactionId),
        ] {
            manager.create_index(Index::create().name(name).table(LedgerPostings::Table).col(col).to_owned()).await?;
        }

        manager
            .create_table(
                Table::create()
                    .table(TopUps::Table)
                    .if_not_exists()
                    .col(big_pk_auto(TopUps::Id))
                    .col(big_integer(TopUps::UserId))
                    .col(big_integer(TopUps::AmountMicros))
                    .col(string(TopUps::Currency))
                    .col(string(TopUps::Status))
                    .col(string_null(TopUps::StripeSessionId))
                    .col(text_null(TopUps::CheckoutUrl))
                    .col(big_integer_null(TopUps::LedgerTransactionId))
                    .col(timestamp_with_time_zone(TopUps::CreatedAt))
                    .col(timestamp_with_time_zone(TopUps::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(TopUps::Table, TopUps::UserId)
                            .to(Users::Table, Users::Id)
                            .on_delete(ForeignKeyAction::Restrict),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(Index::create().name("idx_top_ups_user").table(TopUps::Table).col(TopUps::UserId).to_owned())
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(StripeEvents::Table)
                    .if_not_exists()
                    .col(string(StripeEvents::Id).primary_key())
                    .col(string(StripeEvents::EventType))
                    .col(big_integer(StripeEvents::StripeCreated))
                    .col(string(StripeEvents::Outcome))
                    .col(text(StripeEvents::Payload))
                    .col(timestamp_with_time_zone(StripeEvents::ReceivedAt))
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(PayoutAccounts::Table)
                    .if_not_exists()
                    .col(big_integer(PayoutAccounts::UserId).primary_key())
                    .col(string_uniq(PayoutAccounts::StripeAccountId))
                    .col(boolean(PayoutAccounts::DetailsSubmitted).default(false))
                    .col(boolean(PayoutAccounts::PayoutsEnabled).default(false))
                    .col(timestamp_with_time_zone(PayoutAccounts::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(PayoutAccounts::Table, PayoutAccounts::UserId)
                            .to(Users::Table, Users::Id)
                            .on_delete(ForeignKeyAction::Restrict),
                    )
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Payouts::Table)
                    .if_not_exists()
                    .col(big_pk_auto(Payouts::Id))
                    .col(big_integer(Payouts::UserId))
                    .col(big_integer(Payouts::AmountMicros))
                    .col(string(Payouts::Status))
                    .col(string(Payouts::StripeAccountId))
                    .col(string_null(Payouts::StripeTransferId))
                    .col(string_null(Payouts::FailureMessage))
                    .col(integer(Payouts::Attempts).default(0))
                    .col(timestamp_with_time_zone(Payouts::CreatedAt))
                    .col(timestamp_with_time_zone(Payouts::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(Payouts::Table, Payouts::UserId)
                            .to(Users::Table, Users::Id)
                            .on_delete(ForeignKeyAction::Restrict),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create().name("idx_payouts_user").table(Payouts::Table).col(Payouts::UserId).to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            Payouts::Table.into_iden(),
            PayoutAccounts::Table.into_iden(),
            StripeEvents::Table.into_iden(),
            TopUps::Table.into_iden(),
            LedgerPostings::Table.into_iden(),
            LedgerTransactions::Table.into_iden(),
            LedgerAccounts::Table.into_iden(),
        ] {
            manager.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum LedgerAccounts {
    Table,
    Id,
    Code,
    Kind,
    UserId,
    BalanceMicros,
    CreatedAt,
}

#[derive(DeriveIden)]
enum LedgerTransactions {
    Table,
    Id,
    Kind,
    Reference,
    Description,
    ActorUserId,
    Reason,
    CreatedAt,
}

#[derive(DeriveIden)]
enum LedgerPostings {
    Table,
    Id,
    TransactionId,
    LedgerAccountId,
    AmountMicros,
}

#[derive(DeriveIden)]
enum TopUps {
    Table,
    Id,
    UserId,
    AmountMicros,
    Currency,
    Status,
    StripeSessionId,
    CheckoutUrl,
    LedgerTransactionId,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum StripeEvents {
    Table,
    Id,
    EventType,
    StripeCreated,
    Outcome,
    Payload,
    ReceivedAt,
}

#[derive(DeriveIden)]
enum PayoutAccounts {
    Table,
    UserId,
    StripeAccountId,
    DetailsSubmitted,
    PayoutsEnabled,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Payouts {
    Table,
    Id,
    UserId,
    AmountMicros,
    Status,
    StripeAccountId,
    StripeTransferId,
    FailureMessage,
    Attempts,
    CreatedAt,
    UpdatedAt,
}
