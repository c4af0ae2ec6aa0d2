//! Moving a rental along: transitions (the renter's stop, the agent's workload reports, the
//! admin's and workers' steps), each followed by billing what became due and repricing spot.

use super::{
    billing::settle_in,
    spot::reprice_spot,
    state::{LIVE, apply, load_for_update, names, owned_by, record},
    views::dto,
};
use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::{DbResultExt, WriteTxn},
    entities::rentals,
    stock,
};
use cardpool_domain::{
    offers::RentalKind,
    rentals::{Rental, RentalState},
};
use cardpool_protocol::WorkloadStatus;
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseTransaction, EntityTrait, IntoActiveModel, QueryFilter,
    sea_query::Expr,
};

/// Bills what the change made due and, when GPUs were released, reprices the host's spot GPUs.
pub(super) async fn after_change(
    services: &Services,
    txn: &DatabaseTransaction,
    rental: rentals::Model,
    now: DateTime<Utc>,
) -> AppResult<rentals::Model> {
    let rental = settle_in(services, txn, rental, now).await?;
    if RentalState::parse(&rental.state).is_some_and(RentalState::is_terminal) {
        reprice_spot(services, txn, rental.host_id, &rental.gpu_model, now).await?;
    }
    Ok(rental)
}

/// Refreshes the host's offer stock when `rental` has just released its GPUs. Only a terminal
/// state does (see `apply`): any other step leaves the holds, and so the stock, as they were,
/// and skips the refresh's statements.
async fn refresh_if_released(
    txn: &DatabaseTransaction,
    rental: &rentals::Model,
) -> AppResult<Option<stock::StockChange>> {
    if RentalState::parse(&rental.state).is_some_and(RentalState::is_terminal) {
        Ok(Some(stock::refresh_stock(txn, rental.host_id).await?))
    } else {
        Ok(None)
    }
}

fn published(change: Option<stock::StockChange>, services: &Services) {
    if let Some(change) = change {
        change.published(services);
    }
}

/// Moves a rental along the state machine, recording why; a terminal state releases its GPUs
/// and settles its bill.
pub async fn transition(services: &Services, rental_id: i64, next: RentalState, reason: &str) -> AppResult<Rental> {
    let now = Utc::now();
    let txn = services.begin_write().await.context("starting rental transition")?;
    let rental = load_for_update(&txn, rental_id).await?;
    let host_id = rental.host_id;
    let rental = after_change(services, &txn, apply(&txn, rental, next, reason, now).await?, now).await?;
    let stock_change = refresh_if_released(&txn, &rental).await?;
    txn.commit().await.context("committing rental transition")?;
    published(stock_change, services);
    services.wake_host(host_id);
    dto(&services.db, rental).await
}

/// The renter (or an admin) asks to stop. Billing ends now; the agent detaches and the rental
/// ends. A reservation whose window has not begun is cancelled and refunded.
pub async fn stop_rental(services: &Services, principal: &Principal, rental_id: i64) -> AppResult<Rental> {
    stop(services, rental_id, "the renter", |rental| owned_by(rental, principal)).await
}

/// Stops every live rental of `renter` as [`stop_rental`] does, `by` saying who and why (an
/// account suspension); returns how many it stopped. Rentals being preempted stop on their own.
pub async fn stop_renters_rentals(services: &Services, renter: i64, by: &str) -> AppResult<usize> {
    let live: Vec<i64> = rentals::Entity::find()
        .filter(rentals::Column::RenterId.eq(renter))
        .filter(rentals::Column::State.is_in(names(&LIVE)))
        .all(&services.db)
        .await
        .context("finding the renter's rentals")?
        .into_iter()
        .map(|r| r.id)
        .collect();
    let mut stopped = 0;
    for id in live {
        match stop(services, id, by, Ok).await {
            Ok(_) => stopped += 1,
            // Ended, stopping or preempting meanwhile: nothing more to do.
            Err(AppError::Conflict(_)) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(stopped)
}

/// Stops a rental on behalf of the platform (`by` says who and why: a gang whose member was
/// lost, a renter stopping a whole gang), as the renter's stop does.
pub(super) async fn stop_for(services: &Services, rental_id: i64, by: &str) -> AppResult<Rental> {
    stop(services, rental_id, by, Ok).await
}

async fn stop(
    services: &Services,
    rental_id: i64,
    by: &str,
    allowed: impl FnOnce(rentals::Model) -> AppResult<rentals::Model>,
) -> AppResult<Rental> {
    let now = Utc::now();
    let txn = services.begin_write().await.context("starting stop")?;
    let rental = allowed(load_for_update(&txn, rental_id).await?)?;
    let state = RentalState::parse(&rental.state).unwrap_or(RentalState::Failed);
    if state.is_terminal() || state == RentalState::Stopping {
        return Err(AppError::conflict(format!("this rental is already {}", state.as_str())));
    }
    if state == RentalState::Preempting {
        return Err(AppError::conflict("this rental is being preempted and stops on its own"));
    }
    let host_id = rental.host_id;
    let rental = if rental.starts_at > now && state == RentalState::Requested {
        let reason = if rental.kind == RentalKind::Reserved.as_str() {
            format!("cancelled by {by} before the window began; refunded")
        } else {
            format!("cancelled by {by} before it started")
        };
        apply(&txn, rental, RentalState::Ended, &reason, now).await?
    } else {
        apply(&txn, rental, RentalState::Stopping, &format!("stop requested by {by}"), now).await?
    };
    let rental = after_change(services, &txn, rental, now).await?;
    let stock_change = refresh_if_released(&txn, &rental).await?;
    txn.commit().await.context("committing stop")?;
    published(stock_change, services);
    services.wake_host(host_id);
    dto(&services.db, rental).await
}

/// Tells the renter something on the rental's page (an idle GPU, say), unless a notice that
/// matters more (preemption, low balance) is showing.
pub async fn set_notice(services: &Services, rental_id: i64, notice: &str) -> AppResult<()> {
    rentals::Entity::update_many()
        .col_expr(rentals::Column::Notice, Expr::value(notice))
        .filter(rentals::Column::Id.eq(rental_id))
        .filter(rentals::Column::Notice.is_null())
        .exec(&services.db)
        .await
        .context("setting rental notice")?;
    Ok(())
}

/// What a host's agent reported about a rental's workload. Reports about rentals of other
/// hosts are ignored.
pub async fn record_workload_status(
    services: &Services,
    host_id: i64,
    rental_id: i64,
    status: &WorkloadStatus,
) -> AppResult<()> {
    let now = Utc::now();
    if matches!(status, WorkloadStatus::Ready) {
        // Said again of a running rental (an agent answering a repeated attach, which a running
        // gang member gets for its peers): nothing to change, so no write transaction.
        let current = rentals::Entity::find_by_id(rental_id).one(&services.db).await.context("loading rental")?;
        if current.is_some_and(|r| r.host_id == host_id && r.state == RentalState::Running.as_str()) {
            return Ok(());
        }
    }
    let txn = services.begin_write().await.context("starting workload report")?;
    // A gang member's report may start the whole gang: its gang's row is locked before any
    // member's, by every report alike, so two members' reports never wait on each other.
    let gang = super::gangs::lock_gang_of(&txn, rental_id).await?;
    let rental = match load_for_update(&txn, rental_id).await {
        Ok(rental) if rental.host_id == host_id => rental,
        _ => return Ok(()),
    };
    let state = RentalState::parse(&rental.state).unwrap_or(RentalState::Failed);
    use RentalState as S;
    if rental.kind == RentalKind::Reserved.as_str() && state == S::Running {
        // The renter's window, not their workload, decides how long a reservation holds its GPUs.
        if matches!(status, WorkloadStatus::Exited { .. }) {
            return keep_reservation(txn, rental, status, now).await;
        }
    }
    let step: Option<(RentalState, String)> = match (status, state) {
        (WorkloadStatus::Provisioning, S::Requested) => {
            Some((S::Provisioning, "the agent is attaching the GPUs".into()))
        }
        (WorkloadStatus::Ready, S::Requested | S::Provisioning) => {
            Some((S::Running, "the workload is up; billing started".into()))
        }
        (WorkloadStatus::Exited { code }, S::Requested | S::Provisioning | S::Running) => Some(match code {
            Some(0) => (S::Ended, "the workload finished (exit code 0)".into()),
            Some(code) => (S::Failed, format!("the workload exited with code {code}")),
            None => (S::Failed, "the workload was killed by a signal".into()),
        }),
        (WorkloadStatus::Exited { .. } | WorkloadStatus::Detached, S::Stopping) => {
            Some((S::Ended, "the agent stopped the workload and released the GPUs".into()))
        }
        (WorkloadStatus::Exited { .. } | WorkloadStatus::Detached, S::Preempting) => {
            Some((S::Preempted, "the agent stopped the preempted workload".into()))
        }
        (WorkloadStatus::Failed { reason }, s) if !s.is_terminal() => {
            Some((S::Failed, format!("the workload could not run: {reason}")))
        }
        (WorkloadStatus::Detached, S::Requested | S::Provisioning | S::Running) => {
            Some((S::Failed, "the agent has no workload for this rental".into()))
        }
        _ => None,
    };
    let Some((next, reason)) = step else {
        return Ok(());
    };
    if let (S::Running, Some(gang)) = (next, gang) {
        return super::gangs::member_ready(services, txn, rental, gang, now).await;
    }
    let mut rental = rental;
    if next == S::Running && state == S::Requested {
        rental = apply(&txn, rental, S::Provisioning, "the agent is attaching the GPUs", now).await?;
    }
    if next == S::Running {
        let mut update = rental.into_active_model();
        update.running_since = Set(Some(now));
        rental = update.update(&txn).await.context("starting billing")?;
    }
    let rental = apply(&txn, rental, next, &reason, now).await?;
    let rental = after_change(services, &txn, rental, now).await?;
    let stock_change = refresh_if_released(&txn, &rental).await?;
    txn.commit().await.context("committing workload report")?;
    published(stock_change, services);
    services.telemetry.rentals_changed(host_id);
    tracing::info!(rental.id = rental_id, host.id = host_id, state = next.as_str(), "rental {reason}");
    Ok(())
}

/// A reserved workload exited inside its window: the rental stays running (billed as the
/// window elapses), its GPUs stay held for the renter until the window ends, and the renter is
/// told so. Told again (the agent repeats itself after a reconnect), nothing changes.
async fn keep_reservation(
    txn: WriteTxn,
    rental: rentals::Model,
    status: &WorkloadStatus,
    now: DateTime<Utc>,
) -> AppResult<()> {
    if rental.workload_exited_at.is_some() {
        return Ok(());
    }
    let how = match status {
        WorkloadStatus::Exited { code: Some(code) } => format!("exited with code {code}"),
        _ => "was killed by a signal".to_owned(),
    };
    let until = rental.reserved_until.map_or_else(String::new, |t| format!(" at {} UTC", t.format("%Y-%m-%d %H:%M")));
    let text = format!("Your workload {how}. The GPUs stay reserved for you until the window ends{until}.");
    record(&txn, rental.id, RentalState::Running, &text, now).await?;
    let id = rental.id;
    let mut update = rental.into_active_model();
    update.workload_exited_at = Set(Some(now));
    update.notice = Set(Some(text));
    update.notice_given_at = Set(Some(now));
    update.updated_at = Set(now);
    update.update(&txn).await.context("recording the reserved workload's exit")?;
    txn.commit().await.context("committing workload report")?;
    tracing::info!(rental.id = id, "reserved workload {how}; the window stays held");
    Ok(())
}

/// How long a running rental may be missing from its agent's heartbeats before it counts as
/// gone (a heartbeat may have been composed just before its workload started).
const GONE_AFTER: chrono::Duration = chrono::Duration::seconds(10);

/// The agent's heartbeat lists the workloads it runs. A rental the server has running on that
/// host for a while that the agent does not run any more (the host rebooted, the workload was
/// killed outside the agent) has lost its workload: it fails, billed to now. Returns those.
pub async fn reconcile_running(services: &Services, host_id: i64, running_on_agent: &[i64]) -> AppResult<Vec<i64>> {
    let running = rentals::Entity::find()
        .filter(rentals::Column::HostId.eq(host_id))
        .filter(rentals::Column::State.eq(RentalState::Running.as_str()))
        .all(&services.db)
        .await
        .context("loading running rentals")?;
    reconcile_loaded(services, host_id, running_on_agent, &running).await
}

/// [`reconcile_running`] over the host's rentals already read (any states; the running ones
/// are looked at), so a heartbeat reads them once for this and for its commands.
pub(super) async fn reconcile_loaded(
    services: &Services,
    host_id: i64,
    running_on_agent: &[i64],
    rentals_here: &[rentals::Model],
) -> AppResult<Vec<i64>> {
    let now = Utc::now();
    let missing: Vec<i64> = rentals_here
        .iter()
        .filter(|r| r.state == RentalState::Running.as_str())
        .filter(|r| r.running_since.is_some_and(|since| since < now - GONE_AFTER))
        // A reservation whose workload exited keeps its window; nothing runs for it on purpose.
        .filter(|r| r.workload_exited_at.is_none())
        .map(|r| r.id)
        .filter(|id| !running_on_agent.contains(id))
        .collect();
    for &rental_id in &missing {
        let txn = services.begin_write().await.context("starting reconciliation")?;
        let rental = load_for_update(&txn, rental_id).await?;
        let mut stock_change = None;
        if rental.state == RentalState::Running.as_str() && rental.workload_exited_at.is_none() {
            let reason = "the workload is no longer running on the host (did the host restart?)";
            let rental = apply(&txn, rental, RentalState::Failed, reason, now).await?;
            after_change(services, &txn, rental, now).await?;
            stock_change = Some(stock::refresh_stock(&txn, host_id).await?);
        }
        txn.commit().await.context("committing reconciliation")?;
        if let Some(change) = stock_change {
            change.published(services);
        }
        tracing::warn!(rental.id = rental_id, host.id = host_id, "rental's workload vanished from its host");
    }
    Ok(missing)
}
