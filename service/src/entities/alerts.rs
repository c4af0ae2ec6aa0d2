use sea_orm::entity::prelude::*;

/// Something about a host or GPU that needs a person: raised by telemetry or the liveness
/// reaper, resolved when the condition ends, acknowledged by an admin.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "alerts")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// `cardpool_domain::telemetry::AlertKind` as text.
    pub kind: String,
    pub host_id: i64,
    pub gpu_index: Option<i32>,
    pub rental_id: Option<i64>,
    #[sea_orm(column_type = "Text")]
    pub message: String,
    pub raised_at: DateTimeUtc,
    pub resolved_at: Option<DateTimeUtc>,
    pub acknowledged_at: Option<DateTimeUtc>,
    pub acknowledged_by: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
