//! An admin's say over accounts: roles, and suspension.
//!
//! A suspended account cannot sign in, and every session and token it has stops working at
//! its next request (the session epoch moves on; token and session checks read the
//! suspension). Its live rentals are stopped, so billing ends now and they settle as any stop
//! does; its hosts are delisted (their running rentals finish, nobody books them) until it is
//! reinstated, which lifts exactly those delistings.

use super::{
    audit::{self, Change},
    hosts::locked,
};
use crate::{
    AppError, AppResult, Services,
    auth::{Principal, roles_of},
    db::DbResultExt,
    entities::{hosts, users},
};
use cardpool_domain::{
    account::UserSummary,
    admin::{AuditAction, check_reason},
};
use chrono::Utc;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, EntityTrait,
    IntoActiveModel, QueryFilter, QuerySelect,
};
use serde_json::json;

/// The start of the reason on hosts delisted because their provider was suspended; reinstating
/// the provider lifts these and no other.
const SUSPENDED_PROVIDER: &str = "its provider's account is suspended";

pub(crate) fn summary(user: &users::Model) -> UserSummary {
    UserSummary {
        id: user.id,
        email: user.email.clone(),
        roles: roles_of(user),
        created_at: user.created_at,
        suspended_at: user.suspended_at,
        suspended_reason: user.suspended_reason.clone(),
    }
}

fn snapshot(user: &users::Model) -> serde_json::Value {
    json!({
        "provider": user.is_provider,
        "admin": user.is_admin,
        "suspended": user.suspended_at.is_some(),
        "suspended_reason": user.suspended_reason,
    })
}

async fn locked_user(txn: &DatabaseTransaction, user_id: i64) -> AppResult<users::Model> {
    let mut query = users::Entity::find_by_id(user_id);
    if txn.get_database_backend() == DbBackend::Postgres {
        query = query.lock_exclusive();
    }
    query.one(txn).await.context("loading account")?.ok_or_else(|| AppError::not_found("account"))
}

/// A role change and why, for the audit log.
pub(crate) struct RoleChange<'a> {
    pub provider: Option<bool>,
    pub admin: Option<bool>,
    pub action: AuditAction,
    pub reason: &'a str,
}

/// Applies `change` to the account under lock and writes its audit line, by `actor` (an admin,
/// the account itself, or `None`: the operator's command line); a change that changes nothing
/// is a conflict (and writes none).
pub(crate) async fn change_roles(
    services: &Services,
    actor: Option<&Principal>,
    user_id: i64,
    change: RoleChange<'_>,
) -> AppResult<users::Model> {
    let txn = services.begin_write().await.context("starting role change")?;
    let user = locked_user(&txn, user_id).await?;
    let same = change.provider.is_none_or(|p| p == user.is_provider) && change.admin.is_none_or(|a| a == user.is_admin);
    if same {
        return Err(AppError::conflict("the account has these roles already"));
    }
    let before = snapshot(&user);
    let mut row = user.into_active_model();
    if let Some(provider) = change.provider {
        row.is_provider = Set(provider);
    }
    if let Some(admin) = change.admin {
        row.is_admin = Set(admin);
    }
    row.updated_at = Set(Utc::now());
    let user = row.update(&txn).await.context("saving roles")?;
    let line =
        Change { action: change.action, subject_id: user.id, reason: change.reason, before, after: snapshot(&user) };
    audit::record(&txn, actor, line).await?;
    txn.commit().await.context("committing role change")?;
    Ok(user)
}

/// Makes another account an admin, or takes the role away (admins only; never their own).
pub async fn set_admin(
    services: &Services,
    principal: &Principal,
    user_id: i64,
    admin: bool,
    reason: &str,
) -> AppResult<UserSummary> {
    principal.require_admin()?;
    let reason = check_reason(reason)?;
    if user_id == principal.user_id {
        return Err(AppError::conflict("another admin has to change your own admin role"));
    }
    let action = if admin { AuditAction::UserGrantAdmin } else { AuditAction::UserRevokeAdmin };
    let change = RoleChange { provider: None, admin: Some(admin), action, reason: &reason };
    let user = change_roles(services, Some(principal), user_id, change).await?;
    Ok(summary(&user))
}

/// Suspends an account: it is signed out everywhere, its rentals stop and its hosts leave the
/// market (admins only; never their own).
pub async fn suspend(services: &Services, principal: &Principal, user_id: i64, reason: &str) -> AppResult<UserSummary> {
    principal.require_admin()?;
    let reason = check_reason(reason)?;
    if user_id == principal.user_id {
        return Err(AppError::conflict("you cannot suspend your own account"));
    }
    let txn = services.begin_write().await.context("starting suspension")?;
    let user = locked_user(&txn, user_id).await?;
    if user.suspended_at.is_some() {
        return Err(AppError::conflict("this account is suspended already"));
    }
    let before = snapshot(&user);
    let epoch = user.session_epoch + 1;
    let mut row = user.into_active_model();
    row.suspended_at = Set(Some(Utc::now()));
    row.suspended_reason = Set(Some(reason.clone()));
    // Every session of the account dies at its next request.
    row.session_epoch = Set(epoch);
    row.updated_at = Set(Utc::now());
    let user = row.update(&txn).await.context("suspending account")?;
    let held = hold_hosts(&txn, user.id, &format!("{SUSPENDED_PROVIDER}: {reason}")).await?;
    let mut after = snapshot(&user);
    after["hosts_delisted"] = json!(held);
    audit::record(
        &txn,
        Some(principal),
        Change { action: AuditAction::UserSuspend, subject_id: user.id, reason: &reason, before, after },
    )
    .await?;
    let mut stock_changes = Vec::new();
    for host_id in &held {
        stock_changes.push(crate::stock::refresh_stock(&txn, *host_id).await?);
    }
    txn.commit().await.context("committing suspension")?;
    for change in stock_changes {
        change.published(services);
    }
    let stopped =
        crate::rentals::stop_renters_rentals(services, user.id, &format!("an admin (account suspended: {reason})"))
            .await?;
    tracing::info!(
        user.id = user.id,
        by = principal.user_id,
        rentals.stopped = stopped,
        hosts.delisted = held.len(),
        "account suspended"
    );
    Ok(summary(&user))
}

/// Lifts a suspension: the account can sign in again and the hosts its suspension delisted
/// are back on the market (their provider's listing choice applies again).
pub async fn reinstate(
    services: &Services,
    principal: &Principal,
    user_id: i64,
    reason: &str,
) -> AppResult<UserSummary> {
    principal.require_admin()?;
    let reason = check_reason(reason)?;
    let txn = services.begin_write().await.context("starting reinstatement")?;
    let user = locked_user(&txn, user_id).await?;
    if user.suspended_at.is_none() {
        return Err(AppError::conflict("this account is not suspended"));
    }
    let before = snapshot(&user);
    let mut row = user.into_active_model();
    row.suspended_at = Set(None);
    row.suspended_reason = Set(None);
    row.updated_at = Set(Utc::now());
    let user = row.update(&txn).await.context("reinstating account")?;
    let held: Vec<hosts::Model> = hosts::Entity::find()
        .filter(hosts::Column::ProviderId.eq(user.id))
        .filter(hosts::Column::HeldReason.starts_with(SUSPENDED_PROVIDER))
        .all(&txn)
        .await
        .context("loading delisted hosts")?;
    let mut stock_changes = Vec::new();
    let mut relisted = Vec::new();
    for host in held {
        let mut row = host.into_active_model();
        row.held_reason = Set(None);
        let host = row.update(&txn).await.context("relisting host")?;
        stock_changes.push(crate::stock::refresh_stock(&txn, host.id).await?);
        relisted.push(host.id);
    }
    let mut after = snapshot(&user);
    after["hosts_relisted"] = json!(relisted);
    audit::record(
        &txn,
        Some(principal),
        Change { action: AuditAction::UserReinstate, subject_id: user.id, reason: &reason, before, after },
    )
    .await?;
    txn.commit().await.context("committing reinstatement")?;
    for change in stock_changes {
        change.published(services);
    }
    Ok(summary(&user))
}

/// Delists every host of `provider` that is not revoked or delisted already; their ids.
async fn hold_hosts(txn: &DatabaseTransaction, provider: i64, reason: &str) -> AppResult<Vec<i64>> {
    let ids: Vec<i64> = hosts::Entity::find()
        .filter(hosts::Column::ProviderId.eq(provider))
        .filter(hosts::Column::RevokedAt.is_null())
        .filter(hosts::Column::HeldReason.is_null())
        .all(txn)
        .await
        .context("loading the provider's hosts")?
        .into_iter()
        .map(|h| h.id)
        .collect();
    for id in &ids {
        let host = locked(txn, *id).await?;
        let mut row = host.into_active_model();
        row.held_reason = Set(Some(reason.to_owned()));
        row.update(txn).await.context("delisting host")?;
    }
    Ok(ids)
}
