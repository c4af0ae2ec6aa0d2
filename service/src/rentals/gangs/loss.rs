//! Losing a member: the gang stops, or holds the others for a replacement; and the renter's
//! stop of a whole gang.

use super::super::{
    lifecycle::stop_for,
    state::{STARTED_OR_WAITING, names},
};
use super::{
    LOST,
    views::{owned_gang, view},
};
use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::DbResultExt,
    entities::{gangs, rentals},
};
use cardpool_domain::{
    gangs::{Gang, OnMemberLoss},
    rentals::RentalState,
};
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
        if OnMemberLoss::parse(&gang.on_member_loss) != Some(OnMemberLoss::Stop) {
            continue;
        }
        let members = rentals::Entity::find()
            .filter(rentals::Column::GangId.eq(gang_id))
            .order_by_asc(rentals::Column::GangRank)
            .all(&services.db)
            .await
            .context("loading gang members")?;
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
