use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "gpus")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub host_id: i64,
    pub device_index: i32,
    pub uuid: String,
    pub model: String,
    pub memory_bytes: i64,
    pub pci_bus_id: String,
    pub driver_version: String,
    pub cuda_version: String,
    /// `cuda_version` as major × 1000 + minor ("12.4" → 12004), for comparisons in SQL.
    pub cuda_version_num: i32,
    /// JSON array of peer GPU UUIDs.
    pub nvlink_peers: String,
    /// `None` where the GPU has no MIG.
    pub mig_enabled: Option<bool>,
    /// JSON array of [`cardpool_protocol::MigInstance`], the instances the agent reported.
    pub mig_instances: String,
    /// `available` or `missing` (no longer in the host's inventory).
    pub state: String,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(
        belongs_to = "super::hosts::Entity",
        from = "Column::HostId",
        to = "super::hosts::Column::Id",
        on_delete = "Cascade"
    )]
    Host,
}

impl Related<super::hosts::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::Host.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
