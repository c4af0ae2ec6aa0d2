use sea_orm::entity::prelude::*;

/// One recorded transition of a rental.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "rental_events")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub rental_id: i64,
    pub state: String,
    pub reason: String,
    pub at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
