use sea_orm::entity::prelude::*;

/// One thing Cardpool told a person (the bell, and the source of webhook deliveries).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "notifications")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub user_id: i64,
    /// e.g. `rental.state_changed` (see `cardpool_domain::notifications::EventKind`).
    pub event: String,
    pub rental_id: Option<i64>,
    #[sea_orm(column_type = "Text")]
    pub title: String,
    #[sea_orm(column_type = "Text")]
    pub body: String,
    /// The event's data as JSON (what a webhook receives under `data`).
    #[sea_orm(column_type = "Text")]
    pub data: String,
    /// Unique per account: the same event is never told twice.
    pub dedupe_key: Option<String>,
    pub created_at: DateTimeUtc,
    pub read_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
