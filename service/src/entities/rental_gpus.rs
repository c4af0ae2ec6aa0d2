use sea_orm::entity::prelude::*;

/// One GPU held by one rental over `[starts_at, ends_at)` while `active`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "rental_gpus")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub rental_id: i64,
    pub gpu_id: i64,
    pub starts_at: DateTimeUtc,
    pub ends_at: DateTimeUtc,
    pub active: bool,
    /// The physical GPU of the unit held (`gpu_id` itself for a whole GPU, its parent for a
    /// MIG slice) and the unit's slots on it, copied from `gpus` at booking.
    pub physical_gpu_id: i64,
    pub slot_from: i32,
    pub slot_to: i32,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
