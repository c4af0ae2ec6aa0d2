use sea_orm::entity::prelude::*;

/// A transfer of provider earnings to their Connect account.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "payouts")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub user_id: i64,
    pub amount_micros: i64,
    pub status: String,
    pub stripe_account_id: String,
    pub stripe_transfer_id: Option<String>,
    pub failure_message: Option<String>,
    pub attempts: i32,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
