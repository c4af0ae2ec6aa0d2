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
//! replacement ([`tend_gangs`], run by the schedules). A spot gang is preempted as a whole: a
//! member's preemption notice is given to every member, with its deadline.

mod barrier;
mod loss;
mod views;

pub(super) use barrier::{lock_gang_of, member_ready};
pub use loss::{stop_gang, tend_gangs};
pub(super) use views::rendezvous;
pub use views::{get_gang, list_gangs};

use super::{
    booking::{Membership, NO_OVERLAP, Window, book_in, lock_candidates, preemptible, taken, validate},
    pricing::cost,
    spot::check_bid,
    state::{LIVE, STARTED_OR_WAITING, names},
};
use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::DbResultExt,
    entities::{gangs, host_prices, hosts, rentals},
    ledger::{self, Book},
};
use cardpool_domain::{
    gangs::{BookGangRequest, DEFAULT_MASTER_PORT, Gang, MAX_GPUS_PER_NODE, MAX_NODES, OnMemberLoss},
    host::HostStatus,
    money::format_dollars,
    offers::RentalKind,
    rentals::{BookOfferRequest, RentalState},
};
use chrono::Utc;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseTransaction, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};
use std::collections::{BTreeMap, HashSet};
use views::view;

/// The member states that count as lost (a member that ended on its own finished its part).
const LOST: [RentalState; 3] = [RentalState::Failed, RentalState::Interrupted, RentalState::Preempted];

/// Books a gang all or nothing: `nodes` hosts of one fabric, `gpus_per_node` GPUs on each.
pub async fn book_gang(services: &Services, principal: &Principal, request: &BookGangRequest) -> AppResult<Gang> {
    let template = member_request(request)?;
    let window = validate(&template, Utc::now())?;
    let txn = services.begin_write().await.context("starting gang booking")?;
    let placement = place(&txn, principal, request, &template, &window, &HashSet::new()).await?;
    check_wallet(&txn, principal, request, &placement, &window).await?;
    let master_port = free_port(&txn, placement.hosts[0].id, request.master_port).await?;
    let now = Utc::now();
    let gang = gangs::ActiveModel {
        renter_id: Set(principal.user_id),
        fabric_id: Set(placement.fabric_id.clone()),
        gpu_model: Set(request.gpu_model.clone()),
        nodes: Set(request.nodes as i32),
        gpus_per_node: Set(request.gpus_per_node as i32),
        kind: Set(request.kind.as_str().into()),
        on_member_loss: Set(request.on_member_loss.as_str().into()),
        master_port: Set(i32::from(master_port)),
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
        let membership = Membership { gang_id: gang.id, rank: rank as i32, replacing: None };
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
    let host_ids: Vec<i64> = placement.hosts.iter().map(|h| h.id).collect();
    tracing::info!(gang.id = gang.id, fabric = %placement.fabric_id, hosts = ?host_ids, "gang booked");
    view(&services.db, gang).await
}

/// The rendezvous port on rank 0's host: the one asked for, or the first from 29500 up, and
/// not one a live gang whose rank 0 is on that host already listens on (both would bind it).
async fn free_port(txn: &DatabaseTransaction, host_id: i64, asked: Option<u16>) -> AppResult<u16> {
    let live: Vec<i64> = rentals::Entity::find()
        .select_only()
        .column(rentals::Column::GangId)
        .filter(rentals::Column::HostId.eq(host_id))
        .filter(rentals::Column::GangRank.eq(0))
        .filter(rentals::Column::State.is_in(names(&LIVE)))
        .into_tuple::<Option<i64>>()
        .all(txn)
        .await
        .context("finding the host's rendezvous ports")?
        .into_iter()
        .flatten()
        .collect();
    let taken: HashSet<u16> = gangs::Entity::find()
        .filter(gangs::Column::Id.is_in(live))
        .all(txn)
        .await
        .context("loading the host's gangs")?
        .into_iter()
        .filter_map(|g| u16::try_from(g.master_port).ok())
        .collect();
    match asked {
        Some(port) if taken.contains(&port) => Err(AppError::conflict(format!(
            "port {port} is taken on rank 0's host by another gang; leave the port empty to get a free one"
        ))),
        Some(port) => Ok(port),
        None => (DEFAULT_MASTER_PORT..=u16::MAX)
            .find(|p| !taken.contains(p))
            .ok_or_else(|| AppError::conflict("no rendezvous port is free on rank 0's host")),
    }
}

/// Books a replacement for a lost member of one of the caller's gangs that holds its other
/// members (`on_member_loss: hold`): a host of the gang's fabric that holds none of its live
/// members, with the lost member's rank, GPUs and workload. It starts billing as soon as its
/// workload is up (the gang already started). Rank 0 cannot be replaced: the others' workloads
/// were told its address.
pub async fn replace_member(services: &Services, principal: &Principal, gang_id: i64, rank: u32) -> AppResult<Gang> {
    let gang = views::owned_gang(services, principal, gang_id).await?;
    if RentalKind::parse(&gang.kind) != Some(RentalKind::OnDemand) {
        return Err(AppError::conflict("only an on-demand gang's members can be replaced"));
    }
    if rank == 0 {
        return Err(AppError::conflict(
            "rank 0 hosts the rendezvous the others were told of; stop this gang and book a new one",
        ));
    }
    let txn = services.begin_write().await.context("starting replacement")?;
    let gang = barrier::lock_gang(&txn, gang.id).await?;
    let members = rentals::Entity::find()
        .filter(rentals::Column::GangId.eq(gang_id))
        .order_by_asc(rentals::Column::Id)
        .all(&txn)
        .await
        .context("loading gang members")?;
    let live = |m: &&rentals::Model| names(&STARTED_OR_WAITING).contains(&m.state.as_str());
    if !members.iter().any(|m| live(&m)) {
        return Err(AppError::conflict("this gang has no members left to hold"));
    }
    let current = members.iter().rev().find(|m| m.gang_rank == i32::try_from(rank).ok());
    let lost = match current {
        None => return Err(AppError::not_found("gang member")),
        Some(m) if RentalState::parse(&m.state).is_some_and(|s| LOST.contains(&s)) => m,
        Some(m) => return Err(AppError::conflict(format!("rank {rank} is not lost (it is {})", m.state))),
    };
    let template = BookOfferRequest {
        host_id: 0,
        gpu_model: gang.gpu_model.clone(),
        gpu_count: u32::try_from(gang.gpus_per_node).unwrap_or(1),
        kind: RentalKind::OnDemand,
        workload: serde_json::from_str(&lost.workload).map_err(|_| AppError::Internal)?,
        bid_micros: None,
        starts_at: None,
        hours: None,
        stop_when_idle: false,
        limits: Default::default(),
    };
    let window = validate(&template, Utc::now())?;
    let one = BookGangRequest {
        gpu_model: gang.gpu_model.clone(),
        nodes: 1,
        gpus_per_node: template.gpu_count,
        kind: RentalKind::OnDemand,
        bid_micros: None,
        fabric_id: Some(gang.fabric_id.clone()),
        workload: template.workload.clone(),
        starts_at: None,
        hours: None,
        on_member_loss: OnMemberLoss::Hold,
        master_port: None,
    };
    let busy: HashSet<i64> = members.iter().filter(|m| live(m)).map(|m| m.host_id).collect();
    let placement = place(&txn, principal, &one, &template, &window, &busy).await?;
    check_wallet(&txn, principal, &one, &placement, &window).await?;
    let host = placement.hosts[0].id;
    let membership = Membership { gang_id, rank: i32::try_from(rank).unwrap_or(0), replacing: Some(lost.id) };
    let booked =
        book_in(services, &txn, principal, &BookOfferRequest { host_id: host, ..template }, &window, Some(membership))
            .await?;
    txn.commit().await.or_violation(NO_OVERLAP, taken, "committing replacement")?;
    booked.stock_change.published(services);
    services.wake_host(host);
    // Rank 0's agent learns the new member's address (its rendezvous takes connections from
    // the gang's hosts only).
    for member in members.iter().filter(|m| live(m)) {
        services.wake_host(member.host_id);
    }
    tracing::info!(gang.id = gang_id, rank, host.id = host, replacing = lost.id, "gang member replaced");
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
    if request.kind == RentalKind::Spot && request.bid_micros.is_none_or(|b| b <= 0) {
        fields.insert("bid_micros".into(), "a spot gang needs a bid per GPU-hour".into());
    }
    if request.kind == RentalKind::Spot && request.on_member_loss == OnMemberLoss::Hold {
        fields
            .insert("on_member_loss".into(), "a spot gang is preempted as a whole; it cannot hold its members".into());
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
        bid_micros: request.bid_micros,
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
/// the renter's own, online unless reserved, priced for the model, within a spot bid's range)
/// with enough GPUs free for the whole window, or free once the spot rentals this booking
/// outbids yield them; the fabric whose best `nodes` such hosts preempt least and then cost
/// least wins, and its hosts take ranks in that order (hosts that preempt nobody first). Every
/// candidate's GPUs are locked (in host order, so two gang bookings never wait on each other
/// crosswise) and stay locked until the commit.
async fn place(
    txn: &DatabaseTransaction,
    principal: &Principal,
    request: &BookGangRequest,
    template: &BookOfferRequest,
    window: &Window,
    exclude: &HashSet<i64>,
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
    let mut candidates = query.all(txn).await.context("loading fabric hosts")?;
    candidates.retain(|h| !exclude.contains(&h.id));
    let prices: BTreeMap<i64, host_prices::Model> = host_prices::Entity::find()
        .filter(host_prices::Column::HostId.is_in(candidates.iter().map(|h| h.id)))
        .filter(host_prices::Column::GpuModel.eq(&template.gpu_model))
        .all(txn)
        .await
        .context("loading prices")?
        .into_iter()
        .map(|p| (p.host_id, p))
        .collect();
    // Per fabric: each candidate with its rank (whether it preempts, its price per GPU-hour).
    type Ranked = ((bool, i64), hosts::Model);
    let mut fabrics: BTreeMap<String, Vec<Ranked>> = BTreeMap::new();
    for host in candidates {
        let Some(price) = prices.get(&host.id) else { continue };
        let per_gpu = match (request.kind, template.bid_micros) {
            (RentalKind::Reserved, _) => price.reserved_micros,
            (RentalKind::OnDemand, _) => price.on_demand_micros,
            // A host the bid cannot book is no candidate.
            (RentalKind::Spot, Some(bid)) if check_bid(price, bid).is_ok() => price.spot_min_bid_micros,
            (RentalKind::Spot, _) => continue,
        };
        let units = lock_candidates(txn, &host, template, window).await?;
        let wanted = template.gpu_count as usize;
        // What the member's booking may preempt counts as free (it preempts as a single
        // booking would), but a host where nothing must yield comes first.
        let preempts = units.free_unless(&HashSet::new()).len() < wanted;
        // Only a host short of free GPUs asks which spot rentals would yield.
        let fits = !preempts || {
            let yielding = preemptible(txn, &units, template.bid_micros).await?.into_iter().map(|r| r.id).collect();
            units.free_unless(&yielding).len() >= wanted
        };
        if fits {
            fabrics.entry(host.fabric_id.clone().unwrap_or_default()).or_default().push(((preempts, per_gpu), host));
        }
    }
    let nodes = request.nodes as usize;
    let best = fabrics
        .into_iter()
        .filter(|(_, hosts)| hosts.len() >= nodes)
        .map(|(fabric, mut hosts)| {
            hosts.sort_by_key(|(rank, host)| (*rank, host.id));
            hosts.truncate(nodes);
            let preempting = hosts.iter().filter(|((preempts, _), _)| *preempts).count();
            let total: i64 = hosts.iter().map(|((_, price), _)| price).sum();
            ((preempting, total), fabric, hosts)
        })
        .min_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let Some((_, fabric_id, chosen)) = best else {
        return Err(AppError::conflict(format!(
            "no fabric has {} hosts with {} {} free{}{}",
            request.nodes,
            request.gpus_per_node,
            template.gpu_model,
            request.fabric_id.as_deref().map(|f| format!(" on fabric {f}")).unwrap_or_default(),
            template.bid_micros.map(|b| format!(" at a bid of ${}/GPU-h", format_dollars(b))).unwrap_or_default()
        )));
    };
    let (prices, hosts) = chosen.into_iter().map(|((_, price), host)| (price, host)).unzip();
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
    // A spot member may cost up to the bid.
    let rate = |price: i64| request.bid_micros.filter(|_| request.kind == RentalKind::Spot).unwrap_or(price);
    let upfront: i64 = placement.prices.iter().map(|price| cost(rate(*price), gpus, secs)).sum();
    let balance = ledger::balance(txn, Book::Wallet(principal.user_id)).await?;
    if balance < upfront {
        let what = match request.kind {
            RentalKind::Reserved => "the reservation",
            RentalKind::Spot => "an hour at your bid",
            RentalKind::OnDemand => "an hour",
        };
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
