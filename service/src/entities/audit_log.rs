use sea_orm::entity::prelude::*;

/// One admin action or role change (append-only; see `admin::audit`).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "audit_log")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub at: DateTimeUtc,
    /// The admin's account; `None` for the operator's command line (`cardpool admin ...`).
    pub actor_id: Option<i64>,
    /// The admin's email then, or `operator`.
    pub actor: String,
    /// e.g. `host.verify`, `user.suspend` (see `cardpool_domain::admin::AuditAction`).
    pub action: String,
    /// `host`, `user` or `rental`.
    pub subject_kind: String,
    pub subject_id: i64,
    pub reason: String,
    /// The subject's state before and after, as JSON.
    pub before: Option<String>,
    pub after: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
