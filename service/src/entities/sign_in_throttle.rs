use sea_orm::entity::prelude::*;

/// One counted sign-in event (see `rate_limit`).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "sign_in_throttle")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// `account`, `source` or `sign_up`.
    pub budget: String,
    /// SHA-256 of what is counted (account and address, or the address), hex.
    pub key_digest: String,
    pub at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
