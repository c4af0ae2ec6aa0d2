use sea_orm::entity::prelude::*;

/// One GPU's readings over one minute: sums and extremes (averages are sum / samples).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "gpu_rollups")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub host_id: i64,
    #[sea_orm(primary_key, auto_increment = false)]
    pub gpu_index: i32,
    #[sea_orm(primary_key, auto_increment = false)]
    pub minute: DateTimeUtc,
    pub samples: i32,
    pub util_sum: i64,
    pub util_min: i32,
    pub util_max: i32,
    pub memory_used_sum: i64,
    pub memory_used_max: i64,
    pub temperature_sum: i64,
    pub temperature_max: i32,
    pub power_sum_mw: i64,
    pub power_max_mw: i64,
    pub energy_mj: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
