//! Renters' SSH public keys, which the SSH gateway accepts for any of their rentals.
//!
//! Only public keys are stored; `fingerprint` (OpenSSH's `SHA256:...`) is what the gateway
//! looks a presented key up by, unique per account.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(SshKeys::Table)
                    .if_not_exists()
                    .col(big_pk_auto(SshKeys::Id))
                    .col(big_integer(SshKeys::UserId))
                    .col(string(SshKeys::Name))
                    .col(string(SshKeys::Algorithm))
                    .col(text(SshKeys::PublicKey))
                    .col(string(SshKeys::Fingerprint))
                    .col(timestamp_with_time_zone(SshKeys::CreatedAt))
                    .col(timestamp_with_time_zone_null(SshKeys::LastUsedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_ssh_keys_user")
                            .from(SshKeys::Table, SshKeys::UserId)
                            .to(Users::Table, Users::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_ssh_keys_user_fingerprint")
                    .table(SshKeys::Table)
                    .col(SshKeys::UserId)
                    .col(SshKeys::Fingerprint)
                    .unique()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(SshKeys::Table).to_owned()).await
    }
}

#[derive(DeriveIden)]
enum SshKeys {
    Table,
    Id,
    UserId,
    Name,
    Algorithm,
    PublicKey,
    Fingerprint,
    CreatedAt,
    LastUsedAt,
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
}
