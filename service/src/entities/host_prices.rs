use sea_orm::entity::prelude::*;

/// Prices of one GPU model on one host, integer micro-dollars per GPU-hour.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "host_prices")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub host_id: i64,
    pub gpu_model: String,
    pub on_demand_micros: i64,
    pub reserved_micros: i64,
    pub spot_min_bid_micros: i64,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
