//! The audit log: one append-only row per admin action and role change, written in the same
//! transaction as the change it records, so a change is never without its line nor a line
//! without its change. The table refuses UPDATE and DELETE itself (see the migration).

use crate::{AppError, AppResult, Services, auth::Principal, db::DbResultExt, entities::audit_log};
use cardpool_domain::admin::{AuditAction, AuditEntry, AuditPage, AuditQuery, SUBJECT_KINDS};
use chrono::Utc;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
};

const DEFAULT_PER_PAGE: u32 = 50;
const MAX_PER_PAGE: u32 = 100;

/// One change to record: what was done to which subject, why, and its state around it.
pub(crate) struct Change<'a> {
    pub action: AuditAction,
    pub subject_id: i64,
    pub reason: &'a str,
    pub before: serde_json::Value,
    pub after: serde_json::Value,
}

/// Appends `change`, made by `actor` (`None`: the operator's command line), inside `txn`.
pub(crate) async fn record(
    conn: &impl ConnectionTrait,
    actor: Option<&Principal>,
    change: Change<'_>,
) -> AppResult<()> {
    let row = audit_log::ActiveModel {
        at: Set(Utc::now()),
        actor_id: Set(actor.map(|a| a.user_id)),
        actor: Set(actor.map_or_else(|| "operator".to_owned(), |a| a.email.clone())),
        action: Set(change.action.as_str().to_owned()),
        subject_kind: Set(change.action.subject_kind().to_owned()),
        subject_id: Set(change.subject_id),
        reason: Set(change.reason.to_owned()),
        before: Set(Some(change.before.to_string())),
        after: Set(Some(change.after.to_string())),
        ..Default::default()
    };
    audit_log::Entity::insert(row).exec(conn).await.context("writing the audit log")?;
    tracing::info!(
        audit = change.action.as_str(),
        admin.id = actor.map(|a| a.user_id),
        subject.id = change.subject_id,
        "admin action"
    );
    Ok(())
}

/// The audit log, newest first, filtered by subject and action (admins only).
pub async fn list(services: &Services, principal: &Principal, query: &AuditQuery) -> AppResult<AuditPage> {
    principal.require_admin()?;
    let per_page = query.per_page.unwrap_or(DEFAULT_PER_PAGE);
    if !(1..=MAX_PER_PAGE).contains(&per_page) {
        return Err(AppError::invalid_field("per_page", format!("1 to {MAX_PER_PAGE}")));
    }
    let page = query.page.unwrap_or(1).clamp(1, 10_000);
    let mut select = audit_log::Entity::find();
    if let Some(kind) = query.subject_kind.as_deref().filter(|k| !k.is_empty()) {
        if !SUBJECT_KINDS.contains(&kind) {
            return Err(AppError::invalid_field("subject_kind", "host, user or rental"));
        }
        select = select.filter(audit_log::Column::SubjectKind.eq(kind));
    }
    if let Some(id) = query.subject_id {
        select = select.filter(audit_log::Column::SubjectId.eq(id));
    }
    if let Some(action) = query.action.as_deref().filter(|a| !a.is_empty()) {
        let action =
            AuditAction::parse(action).ok_or_else(|| AppError::invalid_field("action", "not an audited action"))?;
        select = select.filter(audit_log::Column::Action.eq(action.as_str()));
    }
    let total = select.clone().count(&services.db).await.context("counting the audit log")?;
    let rows = select
        .order_by_desc(audit_log::Column::Id)
        .limit(u64::from(per_page))
        .offset(u64::from(page - 1) * u64::from(per_page))
        .all(&services.db)
        .await
        .context("reading the audit log")?;
    let entries = rows
        .into_iter()
        .map(|r| AuditEntry {
            id: r.id,
            at: r.at,
            actor_id: r.actor_id,
            actor: r.actor,
            action: r.action,
            subject_kind: r.subject_kind,
            subject_id: r.subject_id,
            reason: r.reason,
            before: r.before,
            after: r.after,
        })
        .collect();
    Ok(AuditPage { entries, total, page, per_page })
}
