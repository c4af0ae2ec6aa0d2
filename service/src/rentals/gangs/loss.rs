//! Losing a member: the gang stops, or holds the others for a replacement, or (spot) is
//! preempted as a whole; and the renter's stop of a whole gang.

use super::super::{
    booking::preempt,
    lifecycle::stop_for,
    state::{STARTED_OR_WAITING, load_for_update, names},
};
use super::{
    LOST,
    views::{owned_gang, view},
};
use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::DbResultExt,
    entities::{gangs, rental_gpus, rentals},
    stock,
};
use cardpool_domain::{
    gangs::{Gang, OnMemberLoss},
    offers::RentalKind,
    rentals::RentalState,
};
use chrono::{DateTime, Duration, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

/// Gangs whose member was lost: with `stop` (the default), every other live member is stopped,
/// saying which rank was lost and why. With `hold`, the others keep running (the gang shows
/// as degraded). Run by the schedules, so it catches losses from every path (a failed
/// workload, a host gone past its grace, a preemption). Returns the members it stopped.
pub async fn tend_gangs(services: &Services) -> AppResult<usize> {
    let live_gangs: Vec<i64> = rentals::Entity::find()
        .select_only()
        .column(rentals::Column::GangId)
        .filter(rentals::Column::GangId.is_not_null())
        .filter(rentals::Column::State.is_in(names(&STARTED_OR_WAITING)))
        .distinct()
        .into_tuple::<Option<i64>>()
        .all(&services.db)
        .await
        .context("finding live gangs")?
        .into_iter()
        .flatten()
        .collect();
    let mut stopped = 0;
    for gang_id in live_gangs {
        let Some(gang) = gangs::Entity::find_by_id(gang_id).one(&services.db).await.context("loading gang")? else {
            continue;
        };
        let members = rentals::Entity::find()
            .filter(rentals::Column::GangId.eq(gang_id))
            .order_by_asc(rentals::Column::GangRank)
            .all(&services.db)
            .await
            .context("loading gang members")?;
        // A spot gang being preempted goes as a whole; one that lost a member otherwise stops.
        if RentalKind::parse(&gang.kind) == Some(RentalKind::Spot)
            && let Some(noticed) = preempt_whole(services, gang_id, &members).await?
        {
            stopped += noticed;
            continue;
        }
        if OnMemberLoss::parse(&gang.on_member_loss) != Some(OnMemberLoss::Stop) {
            continue;
        }
        let lost = members.iter().find(|m| RentalState::parse(&m.state).is_some_and(|s| LOST.contains(&s)));
        let Some(lost) = lost else { continue };
        let by = format!(
            "gang #{gang_id}: its rank {} (rental #{}) was lost ({})",
            lost.gang_rank.unwrap_or(0),
            lost.id,
            lost.state
        );
        for member in members.iter().filter(|m| names(&STARTED_OR_WAITING).contains(&m.state.as_str())) {
            match stop_for(services, member.id, &by).await {
                Ok(_) => stopped += 1,
                // Stopped or ended meanwhile.
                Err(AppError::Conflict(_)) => {}
                Err(err) => return Err(err),
            }
        }
    }
    Ok(stopped)
}

/// A spot gang one of whose members is being preempted (or was): every other live member gets
/// the same notice, its holds cut at the same deadline (or now, when the first is already
/// gone), so the gang stops as one and its GPUs go to the demand that preempted it. Returns
/// how many members it gave notice, or `None` when no member is being preempted.
async fn preempt_whole(services: &Services, gang_id: i64, members: &[rentals::Model]) -> AppResult<Option<usize>> {
    let preempted = [RentalState::Preempting.as_str(), RentalState::Preempted.as_str()];
    let Some(first) = members.iter().find(|m| preempted.contains(&m.state.as_str())) else {
        return Ok(None);
    };
    let now = Utc::now();
    let deadline: Option<DateTime<Utc>> = rental_gpus::Entity::find()
        .select_only()
        .column_as(rental_gpus::Column::EndsAt.min(), "deadline")
        .filter(rental_gpus::Column::RentalId.eq(first.id))
        .filter(rental_gpus::Column::Active.eq(true))
        .into_tuple::<Option<DateTime<Utc>>>()
        .one(&services.db)
        .await
        .context("reading the preemption deadline")?
        .flatten();
    let cut = deadline.filter(|_| first.state == RentalState::Preempting.as_str()).unwrap_or(now).max(now);
    let notice = Duration::seconds(i64::from(services.settings.rentals.preemption_notice_secs));
    let reason = format!("gang #{gang_id} is preempted as a whole (its rank {} was)", first.gang_rank.unwrap_or(0));
    let mut noticed = 0;
    for member in members.iter().filter(|m| names(&STARTED_OR_WAITING).contains(&m.state.as_str())) {
        let txn = services.begin_write().await.context("starting gang preemption")?;
        let current = load_for_update(&txn, member.id).await?;
        if !names(&STARTED_OR_WAITING).contains(&current.state.as_str()) {
            continue;
        }
        preempt(&txn, std::slice::from_ref(&current), cut, now, notice, &reason).await?;
        let stock_change = stock::refresh_stock(&txn, current.host_id).await?;
        txn.commit().await.context("committing gang preemption")?;
        stock_change.published(services);
        services.wake_host(current.host_id);
        noticed += 1;
    }
    Ok(Some(noticed))
}

/// Stops every live member of one of the caller's gangs.
pub async fn stop_gang(services: &Services, principal: &Principal, gang_id: i64) -> AppResult<Gang> {
    let gang = owned_gang(services, principal, gang_id).await?;
    let members = rentals::Entity::find()
        .filter(rentals::Column::GangId.eq(gang_id))
        .filter(rentals::Column::State.is_in(names(&STARTED_OR_WAITING)))
        .all(&services.db)
        .await
        .context("loading gang members")?;
    if members.is_empty() {
        return Err(AppError::conflict("this gang has no members left to stop"));
    }
    for member in members {
        match stop_for(services, member.id, "the renter (the whole gang)").await {
            Ok(_) | Err(AppError::Conflict(_)) => {}
            Err(err) => return Err(err),
        }
    }
    view(&services.db, gang).await
}
