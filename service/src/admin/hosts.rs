//! An admin's say over hosts: the verified badge, and delisting (maintenance, abuse) with a
//! reason. A delisted host's live rentals run on to their end; it gets no new bookings, and its
//! provider cannot list it again until an admin relists it (the provider's own listing choice
//! is kept underneath and applies again then).

use super::audit::{self, Change};
use crate::{AppError, AppResult, Services, auth::Principal, db::DbResultExt, entities::hosts};
use cardpool_domain::admin::{AuditAction, check_reason};
use cardpool_domain::host::HostSummary;
use chrono::Utc;
use sea_orm::{ActiveModelTrait, ActiveValue::Set, DatabaseTransaction, IntoActiveModel};
use serde_json::json;

/// What the audit log keeps of a host around an admin action.
pub(crate) fn snapshot(host: &hosts::Model) -> serde_json::Value {
    json!({
        "verified": host.verified_at.is_some(),
        "listed": host.listed,
        "held_reason": host.held_reason,
        "revoked": host.revoked_at.is_some(),
    })
}

/// Gives or takes away the host's verified badge.
pub async fn set_verified(
    services: &Services,
    principal: &Principal,
    host_id: i64,
    verified: bool,
    reason: &str,
) -> AppResult<HostSummary> {
    let action = if verified { AuditAction::HostVerify } else { AuditAction::HostUnverify };
    change(services, principal, host_id, action, reason, |row, _| {
        if row.verified_at.is_some() == verified {
            return Err(AppError::conflict(if verified {
                "this host is verified already"
            } else {
                "this host is not verified"
            }));
        }
        row.verified_at = if verified { Some(Utc::now()) } else { None };
        Ok(())
    })
    .await
}

/// Takes the host off the market with `reason` (shown to its provider), or puts it back.
pub async fn set_delisted(
    services: &Services,
    principal: &Principal,
    host_id: i64,
    delisted: bool,
    reason: &str,
) -> AppResult<HostSummary> {
    let action = if delisted { AuditAction::HostDelist } else { AuditAction::HostRelist };
    change(services, principal, host_id, action, reason, move |row, reason| {
        if row.held_reason.is_some() == delisted {
            return Err(AppError::conflict(if delisted {
                "this host is delisted already"
            } else {
                "this host is not delisted"
            }));
        }
        row.held_reason = delisted.then(|| reason.to_owned());
        Ok(())
    })
    .await
}

/// Applies `edit` to the host under lock, with its audit line, and refreshes its stock.
async fn change(
    services: &Services,
    principal: &Principal,
    host_id: i64,
    action: AuditAction,
    reason: &str,
    edit: impl FnOnce(&mut hosts::Model, &str) -> AppResult<()>,
) -> AppResult<HostSummary> {
    principal.require_admin()?;
    let reason = check_reason(reason)?;
    let txn = services.begin_write().await.context("starting host change")?;
    let host = locked(&txn, host_id).await?;
    if host.revoked_at.is_some() {
        return Err(AppError::conflict("this host was revoked"));
    }
    let before = snapshot(&host);
    let mut edited = host.clone();
    edit(&mut edited, &reason)?;
    let mut row = host.into_active_model();
    row.verified_at = Set(edited.verified_at);
    row.held_reason = Set(edited.held_reason.clone());
    let host = row.update(&txn).await.context("saving host")?;
    audit::record(
        &txn,
        Some(principal),
        Change { action, subject_id: host_id, reason: &reason, before, after: snapshot(&host) },
    )
    .await?;
    let stock_change = crate::stock::refresh_stock(&txn, host_id).await?;
    txn.commit().await.context("committing host change")?;
    stock_change.published(services);
    Ok(crate::hosts::get_host(services, principal, host_id).await?.host)
}

/// The host, locked for this transaction on PostgreSQL (SQLite's write transaction is already
/// exclusive).
pub(crate) async fn locked(txn: &DatabaseTransaction, host_id: i64) -> AppResult<hosts::Model> {
    use sea_orm::{ConnectionTrait, DbBackend, EntityTrait, QuerySelect};
    let mut query = hosts::Entity::find_by_id(host_id);
    if txn.get_database_backend() == DbBackend::Postgres {
        query = query.lock_exclusive();
    }
    query.one(txn).await.context("loading host")?.ok_or_else(|| AppError::not_found("host"))
}
