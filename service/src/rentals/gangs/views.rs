//! Reading gangs (a gang and its members, the caller's list) and a member's rendezvous.

use super::super::state::{LIVE, names};
use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::DbResultExt,
    entities::{gangs, hosts, rental_events, rentals},
};
use cardpool_domain::{
    gangs::{DEFAULT_MASTER_PORT, Gang, GangEvent, GangList, GangMember, GangState, OnMemberLoss, rendezvous_env},
    offers::RentalKind,
    rentals::RentalState,
};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use std::collections::BTreeMap;

/// One of the caller's gangs (or any, for an admin); "not found" otherwise.
pub(super) async fn owned_gang(services: &Services, principal: &Principal, gang_id: i64) -> AppResult<gangs::Model> {
    gangs::Entity::find_by_id(gang_id)
        .one(&services.db)
        .await
        .context("loading gang")?
        .filter(|g| g.renter_id == principal.user_id || principal.roles.admin)
        .ok_or_else(|| AppError::not_found("gang"))
}

pub async fn get_gang(services: &Services, principal: &Principal, gang_id: i64) -> AppResult<Gang> {
    view(&services.db, owned_gang(services, principal, gang_id).await?).await
}

/// The caller's gangs, newest first (the latest 50), without their timelines (the list shows
/// none; each gang's page has its own).
pub async fn list_gangs(services: &Services, principal: &Principal) -> AppResult<GangList> {
    let rows = gangs::Entity::find()
        .filter(gangs::Column::RenterId.eq(principal.user_id))
        .order_by_desc(gangs::Column::Id)
        .limit(50)
        .all(&services.db)
        .await
        .context("listing gangs")?;
    let mut gangs = Vec::with_capacity(rows.len());
    for row in rows {
        gangs.push(view_with(&services.db, row, false).await?);
    }
    Ok(GangList { gangs })
}

/// A gang as its page shows it, timeline included.
pub(super) async fn view(conn: &impl ConnectionTrait, gang: gangs::Model) -> AppResult<Gang> {
    view_with(conn, gang, true).await
}

/// The fabric addresses of `hosts` (a host without one is left out).
async fn fabric_addresses(
    conn: &impl ConnectionTrait,
    hosts: impl IntoIterator<Item = i64>,
) -> AppResult<BTreeMap<i64, String>> {
    Ok(hosts::Entity::find()
        .filter(hosts::Column::Id.is_in(hosts))
        .all(conn)
        .await
        .context("loading gang hosts")?
        .into_iter()
        .filter_map(|h| Some((h.id, h.fabric_addr?)))
        .collect())
}

async fn view_with(conn: &impl ConnectionTrait, gang: gangs::Model, with_timeline: bool) -> AppResult<Gang> {
    let rows = rentals::Entity::find()
        .filter(rentals::Column::GangId.eq(gang.id))
        .order_by_asc(rentals::Column::GangRank)
        .order_by_asc(rentals::Column::Id)
        .all(conn)
        .await
        .context("loading gang members")?;
    let addresses = fabric_addresses(conn, rows.iter().map(|r| r.host_id)).await?;
    let ready: Vec<_> = rows.iter().map(|r| r.gang_ready_at).collect();
    let mut members = Vec::with_capacity(rows.len());
    for (rental, ready_at) in super::super::views::dtos(conn, rows).await?.into_iter().zip(ready) {
        let rank = rental.gang_rank.unwrap_or(0);
        members.push(GangMember {
            rank,
            rental_id: rental.id,
            host_id: rental.host_id,
            host_label: rental.host_label,
            address: addresses.get(&rental.host_id).cloned().unwrap_or_default(),
            state: rental.state,
            gpu_indexes: rental.gpu_indexes,
            ready_at,
            billed_seconds: rental.accrued_seconds,
            charged_micros: rental.accrued_micros,
        });
    }
    let ranks: BTreeMap<i64, u32> = members.iter().map(|m| (m.rental_id, m.rank)).collect();
    let timeline = if with_timeline { timeline(conn, &ranks).await? } else { Vec::new() };
    // The current member of each rank (a replacement follows the member it replaced).
    let mut current: BTreeMap<u32, &GangMember> = BTreeMap::new();
    for member in &members {
        current.insert(member.rank, member);
    }
    let states: Vec<RentalState> = current.values().map(|m| m.state).collect();
    let master_addr = current.get(&0).map(|m| m.address.clone()).unwrap_or_default();
    Ok(Gang {
        id: gang.id,
        state: GangState::of(&states, gang.started_at.is_some()),
        fabric_id: gang.fabric_id,
        gpu_model: gang.gpu_model,
        nodes: u32::try_from(gang.nodes).unwrap_or(0),
        gpus_per_node: u32::try_from(gang.gpus_per_node).unwrap_or(0),
        kind: RentalKind::parse(&gang.kind).unwrap_or_default(),
        on_member_loss: OnMemberLoss::parse(&gang.on_member_loss).unwrap_or_default(),
        master_addr,
        master_port: u16::try_from(gang.master_port).unwrap_or(DEFAULT_MASTER_PORT),
        started_at: gang.started_at,
        created_at: gang.created_at,
        charged_micros: members.iter().map(|m| m.charged_micros).sum(),
        members,
        timeline,
    })
}

/// The members' steps (`ranks`: each member's rental id and rank), oldest first, the latest 200.
async fn timeline(conn: &impl ConnectionTrait, ranks: &BTreeMap<i64, u32>) -> AppResult<Vec<GangEvent>> {
    let mut timeline: Vec<GangEvent> = rental_events::Entity::find()
        .filter(rental_events::Column::RentalId.is_in(ranks.keys().copied()))
        .order_by_desc(rental_events::Column::Id)
        .limit(200)
        .all(conn)
        .await
        .context("loading the gang's timeline")?
        .into_iter()
        .map(|e| GangEvent {
            rank: ranks.get(&e.rental_id).copied().unwrap_or(0),
            rental_id: e.rental_id,
            state: RentalState::parse(&e.state).unwrap_or(RentalState::Failed),
            reason: e.reason,
            at: e.at,
        })
        .collect();
    timeline.reverse();
    Ok(timeline)
}

/// The rendezvous environment of a gang member's workload (nothing for other rentals), and
/// where rank 0 listens: its host's fabric address and the gang's port.
pub(crate) async fn rendezvous(
    conn: &impl ConnectionTrait,
    rental: &rentals::Model,
) -> AppResult<Option<(Vec<String>, cardpool_protocol::GangLink)>> {
    let (Some(gang_id), Some(rank)) = (rental.gang_id, rental.gang_rank) else { return Ok(None) };
    let Some(gang) = gangs::Entity::find_by_id(gang_id).one(conn).await.context("loading gang")? else {
        return Ok(None);
    };
    let members = rentals::Entity::find()
        .filter(rentals::Column::GangId.eq(gang_id))
        .filter(rentals::Column::State.is_in(names(&LIVE)))
        .all(conn)
        .await
        .context("loading gang members")?;
    let Some(master) = members.iter().find(|m| m.gang_rank == Some(0)) else { return Ok(None) };
    let addresses = fabric_addresses(conn, members.iter().map(|m| m.host_id)).await?;
    let address = addresses.get(&master.host_id).cloned().unwrap_or_default();
    let port = u16::try_from(gang.master_port).unwrap_or(DEFAULT_MASTER_PORT);
    let rank = u32::try_from(rank).unwrap_or(0);
    let env = rendezvous_env(
        rank,
        u32::try_from(gang.nodes).unwrap_or(0),
        u32::try_from(gang.gpus_per_node).unwrap_or(0),
        &address,
        port,
        gang_id,
    );
    let peers = addresses.into_values().collect();
    Ok(Some((env, cardpool_protocol::GangLink { rank, master_addr: address, master_port: port, peers })))
}
