//! Time-driven changes: reserved windows that end, spot holds cut short by a coming
//! reservation, preemptions whose agent never answered, rentals due to start, and hosts that
//! went offline (their rentals are interrupted and billed up to the last heartbeat).

use super::{
    lifecycle::{after_change, transition},
    spot::give_preemption_notice,
    state::{LIVE, STARTED_OR_WAITING, apply, load_for_update, names},
};
use crate::{
    AppResult, Services,
    db::DbResultExt,
    entities::{rental_gpus, rentals},
    stock,
};
use cardpool_domain::{offers::RentalKind, rentals::RentalState};
use chrono::{DateTime, Duration, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, IntoActiveModel, QueryFilter, QuerySelect,
};
use std::collections::HashSet;

/// Time-driven changes: reservations whose window ended stop; spot rentals whose holds end
/// within the notice period get their notice; preemptions past their deadline whose agent
/// never answered end; hosts with rentals due to start are woken.
pub async fn run_schedules(services: &Services) -> AppResult<()> {
    let now = Utc::now();
    let notice = Duration::seconds(i64::from(services.settings.rentals.preemption_notice_secs));
    let live = STARTED_OR_WAITING.map(RentalState::as_str);
    let ending: Vec<rentals::Model> = rentals::Entity::find()
        .filter(rentals::Column::Kind.eq(RentalKind::Reserved.as_str()))
        .filter(rentals::Column::State.is_in(live))
        .filter(rentals::Column::ReservedUntil.lte(now))
        .all(&services.db)
        .await
        .context("finding ended reservations")?;
    for rental in ending {
        let txn = services.begin_write().await.context("starting window end")?;
        let rental = load_for_update(&txn, rental.id).await?;
        let window_end = rental.reserved_until;
        let host_id = rental.host_id;
        let next = if rental.running_since.is_some() { RentalState::Stopping } else { RentalState::Ended };
        if let Ok(rental) = apply(&txn, rental, next, "the reserved window ended", now).await {
            let mut update = rental.into_active_model();
            update.billing_ends_at = Set(window_end);
            let rental = update.update(&txn).await.context("ending window")?;
            after_change(services, &txn, rental, now).await?;
        }
        let stock_change = stock::refresh_stock(&txn, host_id).await?;
        txn.commit().await.context("committing window end")?;
        stock_change.published(services);
        services.wake_host(host_id);
    }
    // Spot rentals whose holds were shortened by a future reservation.
    let soon: Vec<(i64, DateTime<Utc>)> = rental_gpus::Entity::find()
        .select_only()
        .column(rental_gpus::Column::RentalId)
        .column(rental_gpus::Column::EndsAt)
        .filter(rental_gpus::Column::Active.eq(true))
        .filter(rental_gpus::Column::EndsAt.lte(now + notice))
        .into_tuple()
        .all(&services.db)
        .await
        .context("finding ending holds")?;
    let ids: HashSet<i64> = soon.iter().map(|(id, _)| *id).collect();
    let spot: Vec<rentals::Model> = rentals::Entity::find()
        .filter(rentals::Column::Id.is_in(ids))
        .filter(rentals::Column::Kind.eq(RentalKind::Spot.as_str()))
        .filter(rentals::Column::State.is_in(live))
        .all(&services.db)
        .await
        .context("finding spot rentals to preempt")?;
    for rental in spot {
        let stop_at = soon.iter().filter(|(id, _)| *id == rental.id).map(|(_, at)| *at).min().unwrap_or(now);
        let txn = services.begin_write().await.context("starting notice")?;
        let host_id = rental.host_id;
        let rental = load_for_update(&txn, rental.id).await?;
        if live.contains(&rental.state.as_str()) {
            give_preemption_notice(&txn, rental, stop_at.max(now), now, super::spot::DEMAND).await?;
        }
        txn.commit().await.context("committing notice")?;
        services.wake_host(host_id);
    }
    // Preemptions whose agent never confirmed: their holds have ended, so they are over.
    let overdue: Vec<rentals::Model> = rentals::Entity::find()
        .filter(rentals::Column::State.eq(RentalState::Preempting.as_str()))
        .filter(rentals::Column::NoticeGivenAt.lte(now - notice - Duration::seconds(60)))
        .all(&services.db)
        .await
        .context("finding overdue preemptions")?;
    for rental in overdue {
        let _ =
            transition(services, rental.id, RentalState::Preempted, "the agent did not confirm the stop in time").await;
    }
    let starting: Vec<i64> = rentals::Entity::find()
        .select_only()
        .column(rentals::Column::HostId)
        .filter(rentals::Column::State.eq(RentalState::Requested.as_str()))
        .filter(rentals::Column::StartsAt.lte(now))
        .into_tuple()
        .all(&services.db)
        .await
        .context("finding starting rentals")?;
    for host_id in starting.into_iter().collect::<HashSet<_>>() {
        services.wake_host(host_id);
    }
    // Gangs that lost a member stop the others (unless the renter chose to hold them).
    super::gangs::tend_gangs(services).await?;
    Ok(())
}

/// A host went offline (or was revoked): its started rentals are interrupted, billed up to its
/// last heartbeat.
pub async fn interrupt_host(
    services: &Services,
    host_id: i64,
    last_heartbeat: Option<DateTime<Utc>>,
    reason: &str,
) -> AppResult<()> {
    let now = Utc::now();
    let affected: Vec<rentals::Model> = rentals::Entity::find()
        .filter(rentals::Column::HostId.eq(host_id))
        .filter(rentals::Column::State.is_in(names(&LIVE)))
        .filter(rentals::Column::StartsAt.lte(now))
        .all(&services.db)
        .await
        .context("finding rentals of an offline host")?;
    for rental in affected {
        let txn = services.begin_write().await.context("starting interruption")?;
        let rental = load_for_update(&txn, rental.id).await?;
        if RentalState::parse(&rental.state).is_some_and(|s| s.can_become(RentalState::Interrupted)) {
            let until = last_heartbeat.unwrap_or(now).min(now);
            let mut update = rental.into_active_model();
            if update.billing_ends_at.clone().unwrap().is_none_or(|e| e > until) {
                update.billing_ends_at = Set(Some(until));
            }
            let rental = update.update(&txn).await.context("ending billing")?;
            let rental = apply(&txn, rental, RentalState::Interrupted, reason, now).await?;
            after_change(services, &txn, rental, now).await?;
        }
        let stock_change = stock::refresh_stock(&txn, host_id).await?;
        txn.commit().await.context("committing interruption")?;
        stock_change.published(services);
    }
    Ok(())
}
