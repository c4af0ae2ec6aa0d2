use sea_orm::entity::prelude::*;

/// A renter's wallet top-up through Stripe Checkout.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "top_ups")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub user_id: i64,
    pub amount_micros: i64,
    pub currency: String,
    pub status: String,
    pub stripe_session_id: Option<String>,
    #[sea_orm(column_type = "Text", nullable)]
    pub checkout_url: Option<String>,
    pub ledger_transaction_id: Option<i64>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
