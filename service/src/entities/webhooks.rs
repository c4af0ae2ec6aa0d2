use sea_orm::entity::prelude::*;

/// A URL an account asked to receive its events at, signed with `secret`.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhooks")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub user_id: i64,
    #[sea_orm(column_type = "Text")]
    pub url: String,
    /// The HMAC key deliveries are signed with (`whsec_...`). Kept as is: signing needs it.
    #[sea_orm(column_type = "Text")]
    pub secret: String,
    pub created_at: DateTimeUtc,
    /// Removed: no new deliveries; its log stays.
    pub deleted_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
