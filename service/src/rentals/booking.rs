//! Booking: turning an offer into specific GPUs held by a new rental, in one write transaction.
//!
//! [`book_offer`] is a pipeline of named steps: [`validate`] the request into a window,
//! [`quote`] it (host, price, bid, what must be in the wallet), [`lock_candidates`] (the host's
//! GPUs of the model, locked, with who holds each during the window), [`choose`] GPUs with
//! preemption of lower spot bids when free ones are short, [`preempt`] those spot rentals,
//! [`hold`] the chosen GPUs for the new rental, and [`prepay`] a reservation. The database
//! refuses any overlapping hold on its own, so even a bug here cannot give one GPU to two
//! rentals.

use super::{
    allocation::{FreeGpu, blockers, choose_gpus, physical_gpu},
    pricing::cost,
    spot::{DEMAND, check_bid, give_preemption_notice, reprice_spot_at},
    state::{STARTED_OR_WAITING, names, open_end, record},
    views::dto,
};
use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::{DbResultExt, Violation},
    entities::{gpus, host_prices, hosts, rental_gpus, rentals},
    ledger::{self, Book},
    stock,
};
use cardpool_domain::{
    FieldErrors,
    host::HostStatus,
    money::format_dollars,
    offers::RentalKind,
    rentals::{BookOfferRequest, Rental, RentalState, Workload},
};
use chrono::{DateTime, Duration, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, sea_query::Expr,
};
use std::collections::{HashMap, HashSet};

const MAX_GPUS: u32 = 64;
const MAX_COMMAND: usize = 4096;
/// The longest reservation, hours.
const MAX_RESERVED_HOURS: u32 = 24 * 31;
/// How far ahead a reservation may start, days.
const MAX_RESERVE_AHEAD_DAYS: i64 = 90;
/// The database's own guarantee that no GPU is held twice (see the `rentals` migration).
pub(super) const NO_OVERLAP: Violation = Violation::Named("rental_gpus_no_overlap");

/// Books `request.gpu_count` GPUs of one host: on-demand (now, until stopped), reserved (a
/// future window, prepaid) or spot (at a bid, preemptible). Higher-priority demand preempts the
/// lowest spot bids when free GPUs are short.
pub async fn book_offer(services: &Services, principal: &Principal, request: &BookOfferRequest) -> AppResult<Rental> {
    let window = validate(request, Utc::now())?;
    let txn = services.begin_write().await.context("starting booking")?;
    let booked = book_in(services, &txn, principal, request, &window, None).await?;
    txn.commit().await.or_violation(NO_OVERLAP, taken, "committing booking")?;
    booked.stock_change.published(services);
    services.wake_host(booked.rental.host_id);
    // The row as inserted is the row committed: nothing later in the transaction changed it.
    dto(&services.db, booked.rental).await
}

/// A rental booked inside a transaction, and the stock change to publish once it commits.
pub(super) struct Booked {
    pub rental: rentals::Model,
    pub stock_change: stock::StockChange,
}

/// A gang member's place: the gang and its rank there (and the lost member it replaces).
#[derive(Clone, Copy)]
pub(super) struct Membership {
    pub gang_id: i64,
    pub rank: i32,
    pub replacing: Option<i64>,
}

/// Everything a booking does inside the caller's write transaction, from the quote to the
/// stock refresh: a gang books each of its members through here, in one transaction.
pub(super) async fn book_in(
    services: &Services,
    txn: &DatabaseTransaction,
    principal: &Principal,
    request: &BookOfferRequest,
    window: &Window,
    gang: Option<Membership>,
) -> AppResult<Booked> {
    let quote = quote(txn, principal, request, window).await?;
    let prepaid = if request.kind == RentalKind::Reserved { quote.upfront } else { 0 };
    crate::spending::check_booking(txn, principal.user_id, prepaid, Utc::now()).await?;
    let candidates = lock_candidates(txn, &quote.host, request, window).await?;
    // The clock is read again only now, with the GPUs locked and their holds read: a release
    // committed just before cannot end later than this booking starts (on PostgreSQL a release
    // does not wait for the GPU rows' lock, so a timestamp from before the lock could).
    let now = Utc::now();
    let start = if request.kind == RentalKind::Reserved { window.start.max(now) } else { now };
    let choice = choose(txn, &candidates, request, quote.bid).await?;
    let notice = Duration::seconds(i64::from(services.settings.rentals.preemption_notice_secs));
    // Preempted spot rentals end at `cut`; this booking's holds start there.
    let cut = if choice.preempted.is_empty() { start } else { start.max(now + notice) };
    preempt(txn, &choice.preempted, cut, now, notice, DEMAND).await?;
    let held = Window { start: cut, end: window.end };
    let chosen: Vec<&gpus::Model> =
        choice.gpus.iter().filter_map(|id| candidates.gpus.iter().find(|g| g.id == *id)).collect();
    let rental = hold(txn, principal, request, &quote, &chosen, held, now, gang).await?;
    if request.kind == RentalKind::Reserved {
        prepay(txn, principal, request, rental.id, quote.upfront).await?;
    }
    let reason = match (request.kind, gang) {
        (_, Some(m)) => match m.replacing {
            None => format!("booked by the renter as rank {} of gang #{}", m.rank, m.gang_id),
            Some(lost) => {
                format!("booked by the renter as rank {} of gang #{}, replacing rental #{lost}", m.rank, m.gang_id)
            }
        },
        (RentalKind::OnDemand, _) if cut > now => {
            "booked by the renter; starts when the preempted spot rentals have stopped".to_owned()
        }
        (RentalKind::OnDemand, _) => "booked by the renter".to_owned(),
        (RentalKind::Reserved, _) => "reserved and prepaid by the renter".to_owned(),
        (RentalKind::Spot, _) => "spot bid placed by the renter".to_owned(),
    };
    record(txn, rental.id, RentalState::Requested, &reason, now).await?;
    let host_id = quote.host.id;
    reprice_spot_at(services, txn, &quote.prices, now).await?;
    let stock_change = stock::refresh_stock(txn, host_id).await?;
    tracing::info!(rental.id = rental.id, host.id = host_id, kind = request.kind.as_str(), gpus = ?choice.gpus, "rental booked");
    Ok(Booked { rental, stock_change })
}

/// The window a booking asks its GPUs for.
pub(super) struct Window {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

/// Checks everything that needs no database: the GPU count, the workload, the window (only
/// reservations have one: not in the past, not too far ahead, not too long) and the bid.
pub(super) fn validate(request: &BookOfferRequest, now: DateTime<Utc>) -> AppResult<Window> {
    if request.gpu_count == 0 || request.gpu_count > MAX_GPUS {
        return Err(AppError::invalid_field("gpu_count", format!("between 1 and {MAX_GPUS}")));
    }
    validate_workload(&request.workload)?;
    let window = match request.kind {
        RentalKind::Reserved => {
            let starts_at = request
                .starts_at
                .ok_or_else(|| AppError::invalid_field("starts_at", "a reservation needs a start time"))?;
            let hours = request.hours.unwrap_or(0);
            if hours == 0 || hours > MAX_RESERVED_HOURS {
                return Err(AppError::invalid_field("hours", format!("between 1 and {MAX_RESERVED_HOURS} hours")));
            }
            if starts_at < now - Duration::minutes(1) {
                return Err(AppError::invalid_field("starts_at", "a reservation starts in the future"));
            }
            if starts_at > now + Duration::days(MAX_RESERVE_AHEAD_DAYS) {
                return Err(AppError::invalid_field(
                    "starts_at",
                    format!("at most {MAX_RESERVE_AHEAD_DAYS} days ahead"),
                ));
            }
            let start = starts_at.max(now);
            Window { start, end: start + Duration::hours(i64::from(hours)) }
        }
        _ => {
            if request.starts_at.is_some() || request.hours.is_some() {
                return Err(AppError::invalid_field("starts_at", "only reservations have a window"));
            }
            Window { start: now, end: open_end() }
        }
    };
    if request.kind != RentalKind::Spot && request.bid_micros.is_some() {
        return Err(AppError::invalid_field("bid_micros", "only spot rentals take a bid"));
    }
    request.limits.checked()?;
    if request.kind == RentalKind::Reserved && !request.limits.is_empty() {
        return Err(AppError::invalid_field(
            "limits",
            "a reservation's cost is fixed when it is booked; caps are for on-demand and spot",
        ));
    }
    Ok(window)
}

fn validate_workload(workload: &Workload) -> AppResult<()> {
    let mut fields = FieldErrors::new();
    let command = workload.command.as_deref().map(str::trim).filter(|c| !c.is_empty());
    let image = workload.image.as_deref().map(str::trim).filter(|c| !c.is_empty());
    match (command, image) {
        (None, None) => {
            fields.insert("workload".into(), "give a command to run or a container image".into());
        }
        (Some(_), Some(_)) => {
            fields.insert("workload".into(), "give a command or an image, not both".into());
        }
        (Some(c), None) if c.len() > MAX_COMMAND => {
            fields.insert("command".into(), format!("at most {MAX_COMMAND} characters"));
        }
        (None, Some(i)) if i.len() > 255 || i.chars().any(char::is_whitespace) => {
            fields.insert("image".into(), "an image reference such as nvcr.io/nvidia/pytorch:24.05-py3".into());
        }
        _ => {}
    }
    for entry in &workload.env {
        let valid = entry.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        });
        if !valid {
            fields.insert("env".into(), format!("{entry:?} is not NAME=value"));
        }
    }
    if let Some(key) = workload.ssh_public_key.as_deref().map(str::trim).filter(|k| !k.is_empty())
        && let Err(why) = crate::ssh_access::parse_public_key(key)
    {
        fields.insert("ssh_public_key".into(), why);
    }
    if fields.is_empty() { Ok(()) } else { Err(AppError::invalid_fields(fields)) }
}

/// The offer as booked: its host, the price the rental starts at, the spot bid, and what the
/// wallet must hold before it starts (an hour, or the whole reservation).
pub(super) struct Quote {
    pub host: hosts::Model,
    /// The host's prices of the model, read once for the quote and the spot repricing.
    pub prices: host_prices::Model,
    pub price: i64,
    pub bid: Option<i64>,
    pub upfront: i64,
}

/// Prices the booking and checks the host (listed, not held by an admin, online unless
/// reserved, not the renter's own) and the renter's balance.
pub(super) async fn quote(
    txn: &DatabaseTransaction,
    principal: &Principal,
    request: &BookOfferRequest,
    window: &Window,
) -> AppResult<Quote> {
    let host = hosts::Entity::find_by_id(request.host_id)
        .one(txn)
        .await
        .context("loading host")?
        .filter(|h| h.listed && h.held_reason.is_none() && h.revoked_at.is_none())
        .ok_or_else(|| AppError::not_found("offer"))?;
    if host.status != HostStatus::Online.as_str() && request.kind != RentalKind::Reserved {
        return Err(AppError::conflict("this host is offline right now"));
    }
    if host.provider_id == principal.user_id {
        return Err(AppError::conflict("you cannot rent your own host"));
    }
    let prices = host_prices::Entity::find()
        .filter(host_prices::Column::HostId.eq(host.id))
        .filter(host_prices::Column::GpuModel.eq(&request.gpu_model))
        .one(txn)
        .await
        .context("loading price")?
        .ok_or_else(|| AppError::not_found("offer"))?;
    let gpus = i64::from(request.gpu_count);
    let bid = match request.kind {
        RentalKind::Spot => {
            let bid =
                request.bid_micros.ok_or_else(|| AppError::invalid_field("bid_micros", "a spot rental needs a bid"))?;
            check_bid(&prices, bid)?;
            Some(bid)
        }
        _ => None,
    };
    let (price, upfront, what) = match request.kind {
        RentalKind::OnDemand => (prices.on_demand_micros, cost(prices.on_demand_micros, gpus, 3600), "an hour"),
        RentalKind::Spot => (prices.spot_min_bid_micros, cost(bid.unwrap_or(0), gpus, 3600), "an hour at your bid"),
        RentalKind::Reserved => {
            let secs = (window.end - window.start).num_seconds();
            (prices.reserved_micros, cost(prices.reserved_micros, gpus, secs), "the reservation")
        }
    };
    let balance = ledger::balance(txn, Book::Wallet(principal.user_id)).await?;
    if balance < upfront {
        return Err(AppError::PaymentRequired(format!(
            "{what} of {}× {} costs ${}; your balance is ${} (short by ${})",
            request.gpu_count,
            request.gpu_model,
            format_dollars(upfront),
            format_dollars(balance),
            format_dollars(upfront - balance)
        )));
    }
    Ok(Quote { host, prices, price, bid, upfront })
}

/// The host's units of the model for sale (whole GPUs, or slices of one profile), in device
/// order, and for each the rentals holding it (or what covers it) at some time in the window.
pub(super) struct Candidates {
    gpus: Vec<gpus::Model>,
    blockers: HashMap<i64, HashSet<i64>>,
}

impl Candidates {
    /// The GPUs free once the rentals in `yielding` have given theirs up.
    pub(super) fn free_unless(&self, yielding: &HashSet<i64>) -> Vec<FreeGpu> {
        self.gpus
            .iter()
            .filter(|g| self.blockers.get(&g.id).is_none_or(|b| b.is_subset(yielding)))
            .map(FreeGpu::from)
            .collect()
    }
}

/// Locks the candidates on PostgreSQL (SQLite's IMMEDIATE transaction already is) and reads
/// their holds overlapping the window.
pub(super) async fn lock_candidates(
    txn: &DatabaseTransaction,
    host: &hosts::Model,
    request: &BookOfferRequest,
    window: &Window,
) -> AppResult<Candidates> {
    let mut query = gpus::Entity::find()
        .filter(gpus::Column::HostId.eq(host.id))
        .filter(gpus::Column::Model.eq(&request.gpu_model))
        .filter(gpus::Column::State.eq("available"))
        .filter(gpus::Column::ForSale.eq(true))
        .order_by_asc(gpus::Column::DeviceIndex)
        .order_by_asc(gpus::Column::SlotFrom);
    if txn.get_database_backend() == DbBackend::Postgres {
        query = query.lock_exclusive();
    }
    let gpus = query.all(txn).await.context("loading gpus")?;
    let blockers = blockers(txn, &gpus, window.start, window.end).await?;
    Ok(Candidates { gpus, blockers })
}

/// The GPUs chosen and the spot rentals that must give some of them up.
struct Choice {
    gpus: Vec<i64>,
    preempted: Vec<rentals::Model>,
}

/// The live spot rentals holding some of the candidates that a booking at `bid` (none: on-demand
/// or reserved) may preempt: every spot rental, or those bidding less; lowest bid first, then
/// the newest.
pub(super) async fn preemptible(
    txn: &DatabaseTransaction,
    candidates: &Candidates,
    bid: Option<i64>,
) -> AppResult<Vec<rentals::Model>> {
    let blocking: HashSet<i64> = candidates.blockers.values().flatten().copied().collect();
    if blocking.is_empty() {
        return Ok(Vec::new());
    }
    let mut victims: Vec<rentals::Model> = rentals::Entity::find()
        .filter(rentals::Column::Id.is_in(blocking))
        .filter(rentals::Column::Kind.eq(RentalKind::Spot.as_str()))
        .filter(rentals::Column::State.is_in(names(&STARTED_OR_WAITING)))
        .all(txn)
        .await
        .context("loading spot rentals")?
        .into_iter()
        .filter(|r| bid.is_none_or(|mine| r.bid_micros.unwrap_or(0) < mine))
        .collect();
    victims.sort_by_key(|r| (r.bid_micros.unwrap_or(0), -r.id));
    Ok(victims)
}

/// Chooses the GPUs, preempting the lowest spot bids below this booking's (then the newest)
/// only as far as free GPUs are short.
async fn choose(
    txn: &DatabaseTransaction,
    candidates: &Candidates,
    request: &BookOfferRequest,
    bid: Option<i64>,
) -> AppResult<Choice> {
    let mut victims = preemptible(txn, candidates, bid).await?;
    let n = request.gpu_count as usize;
    let mut yielding = HashSet::new();
    let mut pool = candidates.free_unless(&yielding);
    for victim in &victims {
        if pool.len() >= n {
            break;
        }
        yielding.insert(victim.id);
        pool = candidates.free_unless(&yielding);
    }
    let chosen = choose_gpus(&pool, n).ok_or_else(|| not_enough(pool.len(), &request.gpu_model))?;
    let holds =
        |victim: &rentals::Model, gpu: &i64| candidates.blockers.get(gpu).is_some_and(|b| b.contains(&victim.id));
    victims.retain(|v| chosen.iter().any(|g| holds(v, g)));
    Ok(Choice { gpus: chosen, preempted: victims })
}

/// Why a booking was refused for lack of GPUs.
fn not_enough(free: usize, model: &str) -> AppError {
    AppError::conflict(format!("only {free} {model} free on this host right now"))
}

pub(super) fn taken() -> AppError {
    AppError::conflict("those GPUs were just taken; please try again")
}

/// Shortens the preempted spot rentals' holds to `cut`, and gives them their notice (saying
/// `why`) when the cut is within the notice period (a later cut, by a reservation, is noticed
/// by the schedule).
pub(super) async fn preempt(
    txn: &DatabaseTransaction,
    preempted: &[rentals::Model],
    cut: DateTime<Utc>,
    now: DateTime<Utc>,
    notice: Duration,
    why: &str,
) -> AppResult<()> {
    for victim in preempted {
        rental_gpus::Entity::update_many()
            .col_expr(rental_gpus::Column::EndsAt, Expr::value(cut))
            .filter(rental_gpus::Column::RentalId.eq(victim.id))
            .filter(rental_gpus::Column::Active.eq(true))
            .exec(txn)
            .await
            .context("shortening spot holds")?;
        if cut <= now + notice {
            give_preemption_notice(txn, victim.clone(), cut, now, why).await?;
        }
    }
    Ok(())
}

/// Records the rental and its holds on the chosen units for `held` (which starts at the cut
/// when spot rentals were preempted), each with its physical GPU and slots for the database's
/// no-overlap rule. A gang member also records its gang and rank.
#[allow(clippy::too_many_arguments)]
async fn hold(
    txn: &DatabaseTransaction,
    principal: &Principal,
    request: &BookOfferRequest,
    quote: &Quote,
    chosen: &[&gpus::Model],
    held: Window,
    now: DateTime<Utc>,
    gang: Option<Membership>,
) -> AppResult<rentals::Model> {
    let Window { start, end } = held;
    let reserved = request.kind == RentalKind::Reserved;
    let rental = rentals::ActiveModel {
        renter_id: Set(principal.user_id),
        host_id: Set(quote.host.id),
        gpu_model: Set(request.gpu_model.clone()),
        gpu_count: Set(request.gpu_count as i32),
        kind: Set(request.kind.as_str().into()),
        state: Set(RentalState::Requested.as_str().into()),
        price_micros: Set(quote.price),
        bid_micros: Set(quote.bid),
        workload: Set(serde_json::to_string(&request.workload).map_err(|_| AppError::Internal)?),
        starts_at: Set(start),
        ends_at: Set(None),
        reserved_until: Set(reserved.then_some(end)),
        prepaid_micros: Set(if reserved { quote.upfront } else { 0 }),
        billed_seconds: Set(0),
        charged_micros: Set(0),
        refunded_micros: Set(0),
        gang_id: Set(gang.map(|m| m.gang_id)),
        gang_rank: Set(gang.map(|m| m.rank)),
        settled: Set(false),
        stop_when_idle: Set(request.stop_when_idle),
        max_cost_micros: Set(request.limits.max_cost_micros),
        max_duration_secs: Set(request.limits.max_duration_secs),
        created_at: Set(now),
        updated_at: Set(now),
        ..Default::default()
    }
    .insert(txn)
    .await
    .context("recording rental")?;
    // One statement for all the holds (a booking holds at most `MAX_GPUS`).
    rental_gpus::Entity::insert_many(chosen.iter().map(|unit| rental_gpus::ActiveModel {
        rental_id: Set(rental.id),
        gpu_id: Set(unit.id),
        starts_at: Set(start),
        ends_at: Set(end),
        active: Set(true),
        physical_gpu_id: Set(physical_gpu(unit)),
        slot_from: Set(unit.slot_from),
        slot_to: Set(unit.slot_to),
        ..Default::default()
    }))
    .exec_without_returning(txn)
    .await
    .or_violation(NO_OVERLAP, taken, "holding gpus")?;
    Ok(rental)
}

/// Moves a reservation's price from the renter's wallet into held funds.
async fn prepay(
    txn: &DatabaseTransaction,
    principal: &Principal,
    request: &BookOfferRequest,
    rental_id: i64,
    amount: i64,
) -> AppResult<()> {
    ledger::hold(
        txn,
        principal.user_id,
        amount,
        format!("rental-{rental_id}-prepay"),
        format!("Reservation #{rental_id}: {}× {}", request.gpu_count, request.gpu_model),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_are_validated() {
        let ok =
            Workload { command: Some("python train.py".into()), env: vec!["EPOCHS=3".into()], ..Workload::default() };
        assert!(validate_workload(&ok).is_ok());
        let none = Workload::default();
        assert!(validate_workload(&none).unwrap_err().field("workload").is_some());
        let bad_env = Workload { env: vec!["1X=y".into(), "noequals".into()], ..ok.clone() };
        assert!(validate_workload(&bad_env).unwrap_err().field("env").is_some());
        let bad_key = Workload { ssh_public_key: Some("-----BEGIN PRIVATE KEY-----".into()), ..ok };
        assert!(validate_workload(&bad_key).unwrap_err().field("ssh_public_key").is_some());
    }
}
