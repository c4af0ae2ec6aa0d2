use sea_orm::entity::prelude::*;

/// One balanced movement of money; its postings sum to zero. Never updated or deleted.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "ledger_transactions")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub kind: String,
    #[sea_orm(unique)]
    pub reference: String,
    pub description: String,
    pub actor_user_id: Option<i64>,
    pub reason: Option<String>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
