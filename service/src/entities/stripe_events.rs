use sea_orm::entity::prelude::*;

/// The webhook inbox: one row per Stripe event id, written in the same transaction as its effect.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "stripe_events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub event_type: String,
    pub stripe_created: i64,
    pub outcome: String,
    #[sea_orm(column_type = "Text")]
    pub payload: String,
    pub received_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
