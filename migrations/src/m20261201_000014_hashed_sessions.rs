//! Session rows are keyed by the SHA-256 of the session id from now on (a copy of the table
//! signs nobody in). Rows keyed by the bare id cannot be converted portably, so they go: people
//! signed in before the upgrade sign in once more.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.exec_stmt(Query::delete().from_table(Sessions::Table).to_owned()).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.exec_stmt(Query::delete().from_table(Sessions::Table).to_owned()).await
    }
}

#[derive(DeriveIden)]
enum Sessions {
    Table,
}
