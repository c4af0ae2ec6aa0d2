//! The rental state machine's primitives: one step ([`apply`]) recorded with its reason
//! ([`record`]), the row lock every change takes first ([`load_for_update`]), who may act on a
//! rental ([`owned_by`]), and the state sets the other steps select by. The renter is told of
//! the steps that matter to them (a notification and their webhooks) in the step's own
//! transaction. Nothing here bills or
//! reprices; the callers do that after a step (see `lifecycle::after_change`).

use crate::{
    AppError, AppResult,
    auth::Principal,
    db::DbResultExt,
    entities::{rental_events, rental_gpus, rentals},
    notify::{self, Notice},
};
use cardpool_domain::{notifications::EventKind, rentals::RentalState};
use chrono::{DateTime, TimeZone, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, EntityTrait,
    IntoActiveModel, QueryFilter, QuerySelect, sea_query::Expr,
};

/// The end of an open-ended hold.
pub fn open_end() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(9999, 12, 31, 0, 0, 0).single().unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Every state that still holds (or is about to hold) GPUs.
pub(super) const LIVE: [RentalState; 5] = [
    RentalState::Requested,
    RentalState::Provisioning,
    RentalState::Running,
    RentalState::Stopping,
    RentalState::Preempting,
];

/// Live and not on its way out: may be stopped, preempted or re-bid.
pub(super) const STARTED_OR_WAITING: [RentalState; 3] =
    [RentalState::Requested, RentalState::Provisioning, RentalState::Running];

pub(super) fn names(states: &[RentalState]) -> Vec<&'static str> {
    states.iter().map(|s| s.as_str()).collect()
}

pub(super) async fn record(
    conn: &impl ConnectionTrait,
    rental_id: i64,
    state: RentalState,
    reason: &str,
    at: DateTime<Utc>,
) -> AppResult<()> {
    rental_events::Entity::insert(rental_events::ActiveModel {
        rental_id: Set(rental_id),
        state: Set(state.as_str().into()),
        reason: Set(reason.into()),
        at: Set(at),
        ..Default::default()
    })
    .exec_without_returning(conn)
    .await
    .context("recording rental event")?;
    Ok(())
}

/// One step of the state machine inside `txn`, recorded with its reason. Asking to stop ends
/// billing now; a terminal state ends it too (if nothing ended it earlier) and releases the
/// GPUs.
pub(super) async fn apply(
    txn: &DatabaseTransaction,
    rental: rentals::Model,
    next: RentalState,
    reason: &str,
    now: DateTime<Utc>,
) -> AppResult<rentals::Model> {
    let current = RentalState::parse(&rental.state).unwrap_or(RentalState::Failed);
    if !current.can_become(next) {
        return Err(AppError::conflict(format!("a {} rental cannot become {}", current.as_str(), next.as_str())));
    }
    let id = rental.id;
    let billing_ends_at = rental.billing_ends_at;
    let mut update = rental.into_active_model();
    update.state = Set(next.as_str().into());
    update.updated_at = Set(now);
    if (next == RentalState::Stopping || next.is_terminal()) && billing_ends_at.is_none() {
        update.billing_ends_at = Set(Some(now));
    }
    if next.is_terminal() {
        update.ends_at = Set(Some(now));
        // Holds that began end now; holds still in the future (a cancelled reservation, a
        // booking waiting on a preemption) collapse to nothing; holds that already ended (a
        // reservation past its window) keep their end.
        let ends = Expr::case(rental_gpus::Column::StartsAt.gt(now), Expr::col(rental_gpus::Column::StartsAt))
            .case(rental_gpus::Column::EndsAt.lte(now), Expr::col(rental_gpus::Column::EndsAt))
            .finally(Expr::value(now));
        rental_gpus::Entity::update_many()
            .col_expr(rental_gpus::Column::Active, Expr::value(false))
            .col_expr(rental_gpus::Column::EndsAt, ends.into())
            .filter(rental_gpus::Column::RentalId.eq(id))
            .filter(rental_gpus::Column::Active.eq(true))
            .exec(txn)
            .await
            .context("releasing gpus")?;
    }
    let rental = update.update(txn).await.context("updating rental")?;
    record(txn, id, next, reason, now).await?;
    if let Some(title) = told(next) {
        let notice =
            Notice::new(rental.renter_id, EventKind::RentalStateChanged, format!("Rental #{id} {title}"), reason)
                .rental(id)
                .data(serde_json::json!({
                    "state": next.as_str(),
                    "previous_state": current.as_str(),
                    "reason": reason,
                    "gpu_model": rental.gpu_model,
                    "gpu_count": rental.gpu_count,
                }));
        notify::emit(txn, notice, now).await?;
    }
    Ok(rental)
}

/// The states a renter is told of (the others pass within seconds), as a title's verb.
fn told(state: RentalState) -> Option<&'static str> {
    match state {
        RentalState::Running => Some("is running"),
        RentalState::Ended => Some("ended"),
        RentalState::Failed => Some("failed"),
        RentalState::Interrupted => Some("was interrupted"),
        RentalState::Preempted => Some("was preempted"),
        _ => None,
    }
}

pub(crate) async fn load_for_update(txn: &DatabaseTransaction, rental_id: i64) -> AppResult<rentals::Model> {
    let mut query = rentals::Entity::find_by_id(rental_id);
    if txn.get_database_backend() == DbBackend::Postgres {
        query = query.lock_exclusive();
    }
    query.one(txn).await.context("loading rental")?.ok_or_else(|| AppError::not_found("rental"))
}

/// The rental if `principal` may act on it (its renter, or an admin); else "not found".
pub(super) fn owned_by(rental: rentals::Model, principal: &Principal) -> AppResult<rentals::Model> {
    if rental.renter_id == principal.user_id || principal.roles.admin {
        Ok(rental)
    } else {
        Err(AppError::not_found("rental"))
    }
}
