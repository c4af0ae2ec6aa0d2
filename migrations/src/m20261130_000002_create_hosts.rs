//! Provider hosts: single-use enrollment tokens, enrolled hosts with their hashed credential,
//! their GPUs, and every online/offline transition.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(EnrollmentTokens::Table)
                    .if_not_exists()
                    .col(big_pk_auto(EnrollmentTokens::Id))
                    .col(big_integer(EnrollmentTokens::ProviderId))
                    .col(string_uniq(EnrollmentTokens::TokenHash))
                    .col(string_null(EnrollmentTokens::Location))
                    .col(timestamp_with_time_zone(EnrollmentTokens::CreatedAt))
                    .col(timestamp_with_time_zone(EnrollmentTokens::ExpiresAt))
                    .col(timestamp_with_time_zone_null(EnrollmentTokens::UsedAt))
                    .col(big_integer_null(EnrollmentTokens::HostId))
                    .foreign_key(
                        ForeignKey::create()
                            .from(EnrollmentTokens::Table, EnrollmentTokens::ProviderId)
                            .to(Users::Table, Users::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Hosts::Table)
                    .if_not_exists()
                    .col(big_pk_auto(Hosts::Id))
                    .col(big_integer(Hosts::ProviderId))
                    .col(string(Hosts::Hostname))
                    .col(string_null(Hosts::Location))
                    .col(string_uniq(Hosts::CredentialHash))
                    .col(string(Hosts::Status))
                    .col(string_null(Hosts::AgentVersion))
                    .col(text_null(Hosts::Facts))
                    .col(timestamp_with_time_zone_null(Hosts::LastHeartbeatAt))
                    .col(timestamp_with_time_zone(Hosts::CreatedAt))
                    .col(timestamp_with_time_zone_null(Hosts::RevokedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(Hosts::Table, Hosts::ProviderId)
                            .to(Users::Table, Users::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create().name("idx_hosts_provider").table(Hosts::Table).col(Hosts::ProviderId).to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Gpus::Table)
                    .if_not_exists()
                    .col(big_pk_auto(Gpus::Id))
                    .col(big_integer(Gpus::HostId))
                    .col(integer(Gpus::DeviceIndex))
                    .col(string(Gpus::Uuid))
                    .col(string(Gpus::Model))
                    .col(big_integer(Gpus::MemoryBytes))
                    .col(string(Gpus::PciBusId))
                    .col(string(Gpus::DriverVersion))
                    .col(string(Gpus::CudaVersion))
                    .col(text(Gpus::NvlinkPeers))
                    .col(string(Gpus::State))
                    .col(timestamp_with_time_zone(Gpus::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(Gpus::Table, Gpus::HostId)
                            .to(Hosts::Table, Hosts::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_gpus_host_uuid")
                    .table(Gpus::Table)
                    .col(Gpus::HostId)
                    .col(Gpus::Uuid)
                    .unique()
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(HostEvents::Table)
                    .if_not_exists()
                    .col(big_pk_auto(HostEvents::Id))
                    .col(big_integer(HostEvents::HostId))
                    .col(string(HostEvents::Status))
                    .col(string(HostEvents::Reason))
                    .col(timestamp_with_time_zone(HostEvents::At))
                    .foreign_key(
                        ForeignKey::create()
                            .from(HostEvents::Table, HostEvents::HostId)
                            .to(Hosts::Table, Hosts::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_host_events_host")
                    .table(HostEvents::Table)
                    .col(HostEvents::HostId)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            HostEvents::Table.into_iden(),
            Gpus::Table.into_iden(),
            Hosts::Table.into_iden(),
            EnrollmentTokens::Table.into_iden(),
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
enum EnrollmentTokens {
    Table,
    Id,
    ProviderId,
    TokenHash,
    Location,
    CreatedAt,
    ExpiresAt,
    UsedAt,
    HostId,
}

#[derive(DeriveIden)]
enum Hosts {
    Table,
    Id,
    ProviderId,
    Hostname,
    Location,
    CredentialHash,
    Status,
    AgentVersion,
    Facts,
    LastHeartbeatAt,
    CreatedAt,
    RevokedAt,
}

#[derive(DeriveIden)]
enum Gpus {
    Table,
    Id,
    HostId,
    DeviceIndex,
    Uuid,
    Model,
    MemoryBytes,
    PciBusId,
    DriverVersion,
    CudaVersion,
    NvlinkPeers,
    State,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum HostEvents {
    Table,
    Id,
    HostId,
    Status,
    Reason,
    At,
}
