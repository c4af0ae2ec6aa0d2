use sea_orm::entity::prelude::*;

/// One event on its way to one webhook, with its attempts.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_deliveries")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub webhook_id: i64,
    pub notification_id: i64,
    pub event: String,
    /// The exact body sent (and signed), JSON.
    #[sea_orm(column_type = "Text")]
    pub payload: String,
    /// `pending`, `delivered` or `failed` (gave up).
    pub state: String,
    pub attempts: i32,
    /// When to try next; `None` once delivered or given up.
    pub next_attempt_at: Option<DateTimeUtc>,
    pub last_status: Option<i32>,
    #[sea_orm(column_type = "Text", nullable)]
    pub last_error: Option<String>,
    pub created_at: DateTimeUtc,
    pub delivered_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
