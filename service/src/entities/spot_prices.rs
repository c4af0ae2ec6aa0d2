use sea_orm::entity::prelude::*;

/// The spot clearing price of one host's GPUs of one model, from `at` until the next row.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "spot_prices")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub host_id: i64,
    pub gpu_model: String,
    pub price_micros: i64,
    pub at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
