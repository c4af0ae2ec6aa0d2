use sea_orm::entity::prelude::*;

/// A booking of GPUs on one host (see `cardpool_domain::rentals`).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "rentals")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub renter_id: i64,
    pub host_id: i64,
    pub gpu_model: String,
    pub gpu_count: i32,
    pub kind: String,
    pub state: String,
    pub price_micros: i64,
    /// `cardpool_domain::rentals::Workload` as JSON.
    #[sea_orm(column_type = "Text")]
    pub workload: String,
    pub starts_at: DateTimeUtc,
    pub ends_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
