use sea_orm::entity::prelude::*;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "users")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    #[sea_orm(unique)]
    pub email: String,
    pub password_hash: String,
    pub is_provider: bool,
    pub is_admin: bool,
    pub session_epoch: i64,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    /// When an admin suspended the account (it cannot sign in; its credentials stop working).
    pub suspended_at: Option<DateTimeUtc>,
    pub suspended_reason: Option<String>,
    /// The most this account spends on rentals per UTC day / month, micro-dollars.
    pub daily_limit_micros: Option<i64>,
    pub monthly_limit_micros: Option<i64>,
}

/// Hand-written so a password hash never reaches a log line.
impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User").field("id", &self.id).field("email", &self.email).finish_non_exhaustive()
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {
    #[sea_orm(has_many = "super::api_tokens::Entity")]
    ApiTokens,
}

impl Related<super::api_tokens::Entity> for Entity {
    fn to() -> RelationDef {
        Relation::ApiTokens.def()
    }
}

impl ActiveModelBehavior for ActiveModel {}
