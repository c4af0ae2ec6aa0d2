//! Spend limits, notifications and webhooks.
//!
//! `users.daily_limit_micros` / `monthly_limit_micros`: the most an account spends on rentals
//! per UTC day and month (none: no limit). `rentals.max_cost_micros` / `max_duration_secs`:
//! one rental's own cap. Billing enforces all of them.
//!
//! `notifications` is the outbox of everything Cardpool tells a person (a rental's state, a
//! preemption notice, a low balance, a limit, a host offline, a payout): written in the same
//! transaction as the change it tells of, so nothing that happened is lost or told twice
//! (`dedupe_key`, unique per account). The bell reads it; `webhook_deliveries` are made from it
//! in that same transaction for each of the account's `webhooks` and retried until delivered.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [Users::DailyLimitMicros, Users::MonthlyLimitMicros] {
            manager
                .alter_table(Table::alter().table(Users::Table).add_column(big_integer_null(column)).to_owned())
                .await?;
        }
        for column in [Rentals::MaxCostMicros, Rentals::MaxDurationSecs] {
            manager
                .alter_table(Table::alter().table(Rentals::Table).add_column(big_integer_null(column)).to_owned())
                .await?;
        }
        manager
            .create_table(
                Table::create()
                    .table(Notifications::Table)
                    .if_not_exists()
                    .col(pk_auto(Notifications::Id).big_integer())
                    .col(big_integer(Notifications::UserId))
                    .col(string(Notifications::Event))
                    .col(big_integer_null(Notifications::RentalId))
                    .col(text(Notifications::Title))
                    .col(text(Notifications::Body))
                    .col(text(Notifications::Data))
                    .col(string_null(Notifications::DedupeKey))
                    .col(timestamp_with_time_zone(Notifications::CreatedAt))
                    .col(timestamp_with_time_zone_null(Notifications::ReadAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(Notifications::Table, Notifications::UserId)
                            .to(Users::Table, Users::Id),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_notifications_user")
                    .table(Notifications::Table)
                    .col(Notifications::UserId)
                    .col(Notifications::Id)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_notifications_dedupe")
                    .table(Notifications::Table)
                    .col(Notifications::UserId)
                    .col(Notifications::DedupeKey)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Webhooks::Table)
                    .if_not_exists()
                    .col(pk_auto(Webhooks::Id).big_integer())
                    .col(big_integer(Webhooks::UserId))
                    .col(text(Webhooks::Url))
                    .col(text(Webhooks::Secret))
                    .col(timestamp_with_time_zone(Webhooks::CreatedAt))
                    .col(timestamp_with_time_zone_null(Webhooks::DeletedAt))
                    .foreign_key(
                        ForeignKey::create().from(Webhooks::Table, Webhooks::UserId).to(Users::Table, Users::Id),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create().name("idx_webhooks_user").table(Webhooks::Table).col(Webhooks::UserId).to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WebhookDeliveries::Table)
                    .if_not_exists()
                    .col(pk_auto(WebhookDeliveries::Id).big_integer())
                    .col(big_integer(WebhookDeliveries::WebhookId))
                    .col(big_integer(WebhookDeliveries::NotificationId))
                    .col(string(WebhookDeliveries::Event))
                    .col(text(WebhookDeliveries::Payload))
                    .col(string(WebhookDeliveries::State))
                    .col(integer(WebhookDeliveries::Attempts))
                    .col(timestamp_with_time_zone_null(WebhookDeliveries::NextAttemptAt))
                    .col(integer_null(WebhookDeliveries::LastStatus))
                    .col(text_null(WebhookDeliveries::LastError))
                    .col(timestamp_with_time_zone(WebhookDeliveries::CreatedAt))
                    .col(timestamp_with_time_zone_null(WebhookDeliveries::DeliveredAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(WebhookDeliveries::Table, WebhookDeliveries::WebhookId)
                            .to(Webhooks::Table, Webhooks::Id),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(WebhookDeliveries::Table, WebhookDeliveries::NotificationId)
                            .to(Notifications::Table, Notifications::Id),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_webhook_deliveries_due")
                    .table(WebhookDeliveries::Table)
                    .col(WebhookDeliveries::State)
                    .col(WebhookDeliveries::NextAttemptAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_webhook_deliveries_webhook")
                    .table(WebhookDeliveries::Table)
                    .col(WebhookDeliveries::WebhookId)
                    .col(WebhookDeliveries::Id)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in
            [WebhookDeliveries::Table.into_iden(), Webhooks::Table.into_iden(), Notifications::Table.into_iden()]
        {
            manager.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        for (table, column) in [
            (Rentals::Table.into_iden(), Rentals::MaxDurationSecs.into_iden()),
            (Rentals::Table.into_iden(), Rentals::MaxCostMicros.into_iden()),
            (Users::Table.into_iden(), Users::MonthlyLimitMicros.into_iden()),
            (Users::Table.into_iden(), Users::DailyLimitMicros.into_iden()),
        ] {
            manager.alter_table(Table::alter().table(table).drop_column(column).to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
    DailyLimitMicros,
    MonthlyLimitMicros,
}

#[derive(DeriveIden)]
enum Rentals {
    Table,
    MaxCostMicros,
    MaxDurationSecs,
}

#[derive(DeriveIden)]
enum Notifications {
    Table,
    Id,
    UserId,
    Event,
    RentalId,
    Title,
    Body,
    Data,
    DedupeKey,
    CreatedAt,
    ReadAt,
}

#[derive(DeriveIden)]
enum Webhooks {
    Table,
    Id,
    UserId,
    Url,
    Secret,
    CreatedAt,
    DeletedAt,
}

#[derive(DeriveIden)]
enum WebhookDeliveries {
    Table,
    Id,
    WebhookId,
    NotificationId,
    Event,
    Payload,
    State,
    Attempts,
    NextAttemptAt,
    LastStatus,
    LastError,
    CreatedAt,
    DeliveredAt,
}
