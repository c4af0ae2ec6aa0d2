//! The start barrier: a gang's members start billing together, when the last one is up.

use super::super::{
    lifecycle::after_change,
    state::{apply, record},
};
use crate::{
    AppResult, Services,
    db::{DbResultExt, WriteTxn},
    entities::{gangs, rentals},
    stock,
};
use cardpool_domain::rentals::RentalState;
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, EntityTrait,
    IntoActiveModel, QueryFilter, QueryOrder, QuerySelect,
};

/// A gang member's workload is up. It waits (unbilled) until every member is; the report
/// that completes the gang starts billing for all of them at once. A replacement joining a
/// gang that already started starts at once.
pub(crate) async fn member_ready(
    services: &Services,
    txn: WriteTxn,
    rental: rentals::Model,
    gang: gangs::Model,
    now: DateTime<Utc>,
) -> AppResult<()> {
    let gang_id = gang.id;
    let mut rental = rental;
    if rental.state == RentalState::Requested.as_str() {
        rental = apply(&txn, rental, RentalState::Provisioning, "the agent is attaching the GPUs", now).await?;
    }
    if rental.gang_ready_at.is_none() {
        record(
            &txn,
            rental.id,
            RentalState::Provisioning,
            "the workload is up; waiting for the gang's other members",
            now,
        )
        .await?;
        let mut update = rental.into_active_model();
        update.gang_ready_at = Set(Some(now));
        update.update(&txn).await.context("recording member ready")?;
    }
    let members = members_for_update(&txn, gang_id).await?;
    let waiting = |m: &rentals::Model| m.state == RentalState::Provisioning.as_str() && m.gang_ready_at.is_some();
    let starting: Vec<rentals::Model> = if gang.started_at.is_some() {
        members.into_iter().filter(|m| waiting(m)).collect()
    } else if members.iter().all(waiting) {
        members
    } else {
        let ready = members.iter().filter(|m| m.gang_ready_at.is_some()).count();
        txn.commit().await.context("committing member ready")?;
        tracing::info!(gang.id = gang_id, ready, of = gang.nodes, "gang member ready; waiting for the others");
        return Ok(());
    };
    let reason = format!("every member of gang #{gang_id} is up; billing started for all at once");
    let mut hosts = Vec::new();
    for member in starting {
        hosts.push(member.host_id);
        let mut update = member.into_active_model();
        update.running_since = Set(Some(now));
        let member = update.update(&txn).await.context("starting billing")?;
        let member = apply(&txn, member, RentalState::Running, &reason, now).await?;
        after_change(services, &txn, member, now).await?;
    }
    if gang.started_at.is_none() {
        let mut update = gang.into_active_model();
        update.started_at = Set(Some(now));
        update.update(&txn).await.context("starting gang")?;
    }
    let mut changes = Vec::new();
    for host in &hosts {
        changes.push(stock::refresh_stock(&txn, *host).await?);
    }
    txn.commit().await.context("committing gang start")?;
    for change in changes {
        change.published(services);
    }
    for host in hosts {
        services.telemetry.rentals_changed(host);
    }
    tracing::info!(gang.id = gang_id, "every gang member is up; billing started");
    Ok(())
}

/// The gang of a rental, if it is a member, locked on PostgreSQL (before the rental's own row:
/// see [`member_ready`]).
pub(crate) async fn lock_gang_of(txn: &DatabaseTransaction, rental_id: i64) -> AppResult<Option<gangs::Model>> {
    let gang_id = rentals::Entity::find_by_id(rental_id)
        .select_only()
        .column(rentals::Column::GangId)
        .into_tuple::<Option<i64>>()
        .one(txn)
        .await
        .context("loading rental's gang")?
        .flatten();
    let Some(gang_id) = gang_id else { return Ok(None) };
    lock_gang(txn, gang_id).await.map(Some)
}

/// A gang's row, locked on PostgreSQL: what every change to a gang's members takes first.
pub(crate) async fn lock_gang(txn: &DatabaseTransaction, gang_id: i64) -> AppResult<gangs::Model> {
    let mut query = gangs::Entity::find_by_id(gang_id);
    if txn.get_database_backend() == DbBackend::Postgres {
        query = query.lock_exclusive();
    }
    query.one(txn).await.context("loading gang")?.ok_or_else(|| crate::AppError::not_found("gang"))
}

/// The gang's members, rank order, locked on PostgreSQL (the gang's row is locked first, so
/// two members' reports take these locks one after the other).
async fn members_for_update(txn: &DatabaseTransaction, gang_id: i64) -> AppResult<Vec<rentals::Model>> {
    let mut query =
        rentals::Entity::find().filter(rentals::Column::GangId.eq(gang_id)).order_by_asc(rentals::Column::GangRank);
    if txn.get_database_backend() == DbBackend::Postgres {
        query = query.lock_exclusive();
    }
    query.all(txn).await.context("loading gang members")
}
