use sea_orm::entity::prelude::*;

/// The newest telemetry frame stored per host: `(stream, sequence)` orders frames, so a replay
/// or duplicate is recognised and stored once.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "telemetry_cursors")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub host_id: i64,
    pub stream: i64,
    pub sequence: i64,
    /// Frames stored from this host, all time.
    pub frames: i64,
    /// Frames the agent reports it had to drop (buffer full while disconnected).
    pub dropped: i64,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
