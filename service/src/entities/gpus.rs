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
    /// JSON array of [`cardpool_protocol::MigProfile`]: what the agent can carve this GPU into
    /// (empty where it cannot carve it).
    pub mig_profiles: String,
    /// JSON array of profile names: the layout the provider asked for that the agent has not
    /// yet reported; `None` when none is pending.
    pub mig_layout_wanted: Option<String>,
    /// Why the agent could not carve the last layout asked for.
    pub mig_layout_error: Option<String>,
    /// `available`, `reconfiguring` (a MIG layout change is pending: off the market) or
    /// `missing` (no longer in the host's inventory).
    pub state: String,
    /// The physical GPU this MIG slice is carved from; `None` for a physical GPU.
    pub parent_id: Option<i64>,
    /// A slice's MIG profile (`1g.10gb`); `None` for a physical GPU.
    pub mig_profile: Option<String>,
    /// The slots `[slot_from, slot_to)` of the physical GPU this unit covers: all eight for a
    /// whole GPU, one for a slice. Holds copy them, and no two active holds on one physical GPU
    /// may overlap in slots and time (see the `mig_slices` migration).
    pub slot_from: i32,
    pub slot_to: i32,
    /// Whether this unit is sold: a physical GPU sold whole, or a slice of a GPU sold as MIG.
    pub for_sale: bool,
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
