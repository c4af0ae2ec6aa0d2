use sea_orm::entity::prelude::*;

/// One recorded status transition of a host.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "host_events")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub host_id: i64,
    pub status: String,
    pub reason: String,
    pub at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
