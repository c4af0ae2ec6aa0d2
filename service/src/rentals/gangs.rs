//! Gangs: one job on N GPUs of each of M hosts of one fabric (see `cardpool_domain::gangs`).
//!
//! A gang is booked in one write transaction: the hosts of a fabric with enough free GPUs are
//! chosen, and each member is booked through the same pipeline as any rental
//! ([`super::booking::book_in`]), with its gang and rank; any member that cannot be held fails
//! the transaction, so either every member's GPUs are held or none are ([`book_gang`]).
//!
//! Members start together: a member whose workload is up only records that it is ready and
//! waits (unbilled); the report that makes every member ready moves all of them to `running`
//! with one `running_since`, in one transaction ([`member_ready`]). A member lost (failed,
//! interrupted or preempted) stops the others, unless the renter chose to hold them for a
//! replacement ([`tend_gangs`], run by the schedules).

use super::{
    booking::{Membership, NO_OVERLAP, Window, book_in, lock_candidates, taken, validate},
    lifecycle::{after_change, stop_for},
    pricing::cost,
    state::{LIVE, STARTED_OR_WAITING, apply, names, record},
};
use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::{DbResultExt, WriteTxn},
    entities::{gangs, host_prices, hosts, rentals},
    ledger::{self, Book},
    stock,
};
use cardpool_domain::{
    gangs::{
        BookGangRequest, DEFAULT_MASTER_PORT, Gang, GangList, GangMember, GangState, MAX_GPUS_PER_NODE, MAX_NODES,
        OnMemberLoss, rendezvous_env,
    },
    host::HostStatus,
    money::format_dollars,
    offers::RentalKind,
    rentals::{BookOfferRequest, RentalState},
};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, EntityTrait,
    IntoActiveModel, QueryFilter, QueryOrder, QuerySelect,
};
use std::collections::{BTreeMap, HashSet};

/// The member states that count as lost (a member that ended on its own finished its part).
const LOST: [RentalState; 3] = [RentalState::Failed, RentalState::Interrupted, RentalState::Preempted];

/// Books a gang all or nothing: `nodes` hosts of one fabric, `gpus_per_node` GPUs on each.
pub async fn book_gang(services: &Services, principal: &Principal, request: &BookGangRequest) -> AppResult<Gang> {
    let template = member_request(request)?;
    let window = validate(&template, Utc::now())?;
    let txn = services.begin_write().await.context("starting gang booking")?;
    let placement = place(&txn, principal, request, &template, &window).await?;
    check_wallet(&txn, principal, request, &placement, &window).await?;
    let now = Utc::now();
    let gang = gangs::ActiveModel {
        renter_id: Set(principal.user_id),
        fabric_id: Set(placement.fabric_id.clone()),
        gpu_model: Set(request.gpu_model.clone()),
        nodes: Set(request.nodes as i32),
        gpus_per_node: Set(request.gpus_per_node as i32),
        kind: Set(request.kind.as_str().into()),
        on_member_loss: Set(request.on_member_loss.as_str().into()),
        master_port: Set(i32::from(request.master_port.unwrap_or(DEFAULT_MASTER_PORT))),
        started_at: Set(None),
        created_at: Set(now),
        ..Default::default()
    }
    .insert(&txn)
    .await
    .context("recording gang")?;
    let mut changes = Vec::new();
    for (rank, host) in placement.hosts.iter().enumerate() {
        let member = BookOfferRequest { host_id: host.id, ..template.clone() };
        let membership = Membership { gang_id: gang.id, rank: rank as i32 };
        let booked = book_in(services, &txn, principal, &member, &window, Some(membership)).await?;
        changes.push(booked.stock_change);
    }
    txn.commit().await.or_violation(NO_OVERLAP, taken, "committing gang booking")?;
    for change in changes {
        change.published(services);
    }
    for host in &placement.hosts {
        services.wake_host(host.id);
    }
    tracing::info!(gang.id = gang.id, fabric = %placement.fabric_id, hosts = ?placement.hosts.iter().map(|h| h.id).collect::<Vec<_>>(), "gang booked");
    view(&services.db, gang).await
}

/// What every member books: the request's model, GPUs and workload on one host (filled in
/// per member), after the checks only a gang has.
fn member_request(request: &BookGangRequest) -> AppResult<BookOfferRequest> {
    let mut fields = cardpool_domain::FieldErrors::new();
    if request.nodes < 2 || request.nodes > MAX_NODES {
        fields.insert("nodes".into(), format!("between 2 and {MAX_NODES} hosts"));
    }
    if request.gpus_per_node == 0 || request.gpus_per_node > MAX_GPUS_PER_NODE {
        fields.insert("gpus_per_node".into(), format!("between 1 and {MAX_GPUS_PER_NODE}"));
    }
    if request.kind == RentalKind::Spot {
        fields.insert("kind".into(), "gangs are on-demand or reserved".into());
    }
    if request.master_port.is_some_and(|p| p < 1024) {
        fields.insert("master_port".into(), "a port from 1024 to 65535".into());
    }
    let model = request.gpu_model.trim();
    if model.is_empty() || model.len() > 128 {
        fields.insert("gpu_model".into(), "the GPU model every member gets".into());
    }
    if let Some(id) = &request.fabric_id
        && (id.is_empty() || id.len() > cardpool_domain::fabric::MAX_FABRIC_ID_LEN)
    {
        fields.insert("fabric_id".into(), "a fabric id such as pdx-ib-1".into());
    }
    if !fields.is_empty() {
        return Err(AppError::invalid_fields(fields));
    }
    Ok(BookOfferRequest {
        host_id: 0,
        gpu_model: model.to_owned(),
        gpu_count: request.gpus_per_node,
        kind: request.kind,
        workload: request.workload.clone(),
        bid_micros: None,
        starts_at: request.starts_at,
        hours: request.hours,
        stop_when_idle: false,
        limits: Default::default(),
    })
}

/// The fabric and hosts a gang gets, rank order.
struct Placement {
    fabric_id: String,
    hosts: Vec<hosts::Model>,
    /// Each host's price per GPU-hour for the gang's kind, same order.
    prices: Vec<i64>,
}

/// Chooses the hosts: of every fabric, its hosts (listed, reachable at a fabric address, not
/// the renter's own, online unless reserved, priced for the model) with enough GPUs free for
/// the whole window; the fabric whose cheapest `nodes` such hosts cost least wins, and its
/// hosts take ranks in price order. Every candidate's GPUs are locked (in host order, so two
/// gang bookings never wait on each other crosswise) and stay locked until the commit.
async fn place(
    txn: &DatabaseTransaction,
    principal: &Principal,
    request: &BookGangRequest,
    template: &BookOfferRequest,
    window: &Window,
) -> AppResult<Placement> {
    let mut query = hosts::Entity::find()
        .filter(hosts::Column::Listed.eq(true))
        .filter(hosts::Column::HeldReason.is_null())
        .filter(hosts::Column::RevokedAt.is_null())
        .filter(hosts::Column::FabricId.is_not_null())
        .filter(hosts::Column::FabricAddr.is_not_null())
        .filter(hosts::Column::ProviderId.ne(principal.user_id))
        .order_by_asc(hosts::Column::Id);
    if request.kind != RentalKind::Reserved {
        query = query.filter(hosts::Column::Status.eq(HostStatus::Online.as_str()));
    }
    if let Some(fabric) = &request.fabric_id {
        query = query.filter(hosts::Column::FabricId.eq(fabric.trim().to_lowercase()));
    }
    let candidates = query.all(txn).await.context("loading fabric hosts")?;
    let prices: BTreeMap<i64, host_prices::Model> = host_prices::Entity::find()
        .filter(host_prices::Column::HostId.is_in(candidates.iter().map(|h| h.id)))
        .filter(host_prices::Column::GpuModel.eq(&template.gpu_model))
        .all(txn)
        .await
        .context("loading prices")?
        .into_iter()
        .map(|p| (p.host_id, p))
        .collect();
    let mut fabrics: BTreeMap<String, Vec<(i64, hosts::Model)>> = BTreeMap::new();
    for host in candidates {
        let Some(price) = prices.get(&host.id) else { continue };
        let per_gpu = if request.kind == RentalKind::Reserved { price.reserved_micros } else { price.on_demand_micros };
        let units = lock_candidates(txn, &host, template, window).await?;
        if units.free_unless(&HashSet::new()).len() >= template.gpu_count as usize {
            fabrics.entry(host.fabric_id.clone().unwrap_or_default()).or_default().push((per_gpu, host));
        }
    }
    let nodes = request.nodes as usize;
    let best = fabrics
        .into_iter()
        .filter(|(_, hosts)| hosts.len() >= nodes)
        .map(|(fabric, mut hosts)| {
            hosts.sort_by_key(|(price, host)| (*price, host.id));
            hosts.truncate(nodes);
            let total: i64 = hosts.iter().map(|(price, _)| price).sum();
            (total, fabric, hosts)
        })
        .min_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let Some((_, fabric_id, chosen)) = best else {
        return Err(AppError::conflict(format!(
            "no fabric has {} hosts with {} {} free{}",
            request.nodes,
            request.gpus_per_node,
            template.gpu_model,
            request.fabric_id.as_deref().map(|f| format!(" on fabric {f}")).unwrap_or_default()
        )));
    };
    let (prices, hosts) = chosen.into_iter().unzip();
    Ok(Placement { fabric_id, hosts, prices })
}

/// The wallet must cover the whole gang up front: an hour of every member (on-demand) or every
/// member's reservation. Each member's booking checks its own share again as it is booked.
async fn check_wallet(
    txn: &DatabaseTransaction,
    principal: &Principal,
    request: &BookGangRequest,
    placement: &Placement,
    window: &Window,
) -> AppResult<()> {
    let secs = if request.kind == RentalKind::Reserved { (window.end - window.start).num_seconds() } else { 3600 };
    let gpus = i64::from(request.gpus_per_node);
    let upfront: i64 = placement.prices.iter().map(|price| cost(*price, gpus, secs)).sum();
    let balance = ledger::balance(txn, Book::Wallet(principal.user_id)).await?;
    if balance < upfront {
        let what = if request.kind == RentalKind::Reserved { "the reservation" } else { "an hour" };
        return Err(AppError::PaymentRequired(format!(
            "{what} of a {}×{} {} gang costs ${}; your balance is ${} (short by ${})",
            request.nodes,
            request.gpus_per_node,
            request.gpu_model,
            format_dollars(upfront),
            format_dollars(balance),
            format_dollars(upfront - balance)
        )));
    }
    Ok(())
}

/// A gang member's workload is up. It waits (unbilled) until every member is; the report
/// that completes the gang starts billing for all of them at once. A replacement joining a
/// gang that already started starts at once.
pub(super) async fn member_ready(
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
pub(super) async fn lock_gang_of(txn: &DatabaseTransaction, rental_id: i64) -> AppResult<Option<gangs::Model>> {
    let gang_id = rentals::Entity::find_by_id(rental_id)
        .select_only()
        .column(rentals::Column::GangId)
        .into_tuple::<Option<i64>>()
        .one(txn)
        .await
        .context("loading rental's gang")?
        .flatten();
    let Some(gang_id) = gang_id else { return Ok(None) };
    let mut query = gangs::Entity::find_by_id(gang_id);
    if txn.get_database_backend() == DbBackend::Postgres {
        query = query.lock_exclusive();
    }
    query.one(txn).await.context("loading gang")
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

/// One of the caller's gangs (or any, for an admin); "not found" otherwise.
async fn owned_gang(services: &Services, principal: &Principal, gang_id: i64) -> AppResult<gangs::Model> {
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

/// The caller's gangs, newest first (the latest 50).
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
        gangs.push(view(&services.db, row).await?);
    }
    Ok(GangList { gangs })
}

async fn view(conn: &impl ConnectionTrait, gang: gangs::Model) -> AppResult<Gang> {
    let rows = rentals::Entity::find()
        .filter(rentals::Column::GangId.eq(gang.id))
        .order_by_asc(rentals::Column::GangRank)
        .order_by_asc(rentals::Column::Id)
        .all(conn)
        .await
        .context("loading gang members")?;
    let addresses: BTreeMap<i64, String> = hosts::Entity::find()
        .filter(hosts::Column::Id.is_in(rows.iter().map(|r| r.host_id)))
        .all(conn)
        .await
        .context("loading gang hosts")?
        .into_iter()
        .map(|h| (h.id, h.fabric_addr.unwrap_or_default()))
        .collect();
    let mut members = Vec::with_capacity(rows.len());
    for row in rows {
        let rank = u32::try_from(row.gang_rank.unwrap_or(0)).unwrap_or(0);
        let ready_at = row.gang_ready_at;
        let rental = super::views::dto(conn, row).await?;
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
    })
}

/// The rendezvous environment of a gang member's workload (nothing for other rentals), and
/// where rank 0 listens: its host's fabric address and the gang's port.
pub(super) async fn rendezvous(
    conn: &impl ConnectionTrait,
    rental: &rentals::Model,
) -> AppResult<Option<(Vec<String>, cardpool_protocol::GangLink)>> {
    let (Some(gang_id), Some(rank)) = (rental.gang_id, rental.gang_rank) else { return Ok(None) };
    let Some(gang) = gangs::Entity::find_by_id(gang_id).one(conn).await.context("loading gang")? else {
        return Ok(None);
    };
    let master = rentals::Entity::find()
        .filter(rentals::Column::GangId.eq(gang_id))
        .filter(rentals::Column::GangRank.eq(0))
        .filter(rentals::Column::State.is_in(names(&LIVE)))
        .one(conn)
        .await
        .context("loading rank 0")?;
    let Some(master) = master else { return Ok(None) };
    let members = rentals::Entity::find()
        .filter(rentals::Column::GangId.eq(gang_id))
        .filter(rentals::Column::State.is_in(names(&LIVE)))
        .all(conn)
        .await
        .context("loading gang members")?;
    let addresses: BTreeMap<i64, String> = hosts::Entity::find()
        .filter(hosts::Column::Id.is_in(members.iter().map(|m| m.host_id)))
        .all(conn)
        .await
        .context("loading gang hosts")?
        .into_iter()
        .filter_map(|h| Some((h.id, h.fabric_addr?)))
        .collect();
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
