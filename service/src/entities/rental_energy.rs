use sea_orm::entity::prelude::*;

/// Energy one GPU used while running one rental's workload, millijoules.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "rental_energy")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub rental_id: i64,
    #[sea_orm(primary_key, auto_increment = false)]
    pub gpu_index: i32,
    pub energy_mj: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
