//! Booking: turning an offer into specific GPUs held by a rental, and the rental state machine.
//!
//! Allocation happens in one write transaction: the host's GPU rows are locked (PostgreSQL;
//! SQLite's `BEGIN IMMEDIATE` already serialises writers), the free GPUs are read, the
//! allocator picks specific ones (NVLink-connected when it can), and the holds are inserted.
//! The database refuses any overlapping hold on its own (exclusion constraint / trigger, see
//! the `rentals` migration), so even a bug here cannot give one GPU to two rentals.
//!
//! Kinds: on-demand holds its GPUs from now on, open-ended; reserved holds them for a future
//! window, prepaid at booking (into held funds); spot holds them open-ended at a bid and can be
//! preempted: higher-priority demand shortens a spot rental's holds to "now + notice", the
//! rental gets its notice (state `preempting`), and the new rental's holds begin where the spot
//! holds end. So preemption, too, is just non-overlapping holds.
//!
//! The agent drives the state machine ([`record_workload_status`]); [`commands_for_host`] says
//! what the host's agent must do now. Billing ([`settle`]) charges whole seconds from the
//! workload's ready report to the billing end, through the ledger, in the same transaction as
//! the rental's `billed_seconds`, so nothing is billed twice or skipped across a crash.

use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::begin_write,
    entities::{gpus, host_prices, hosts, rental_events, rental_gpus, rentals, spot_prices},
    internal, ledger,
    ledger::Book,
    offers,
};
use cardpool_domain::{
    host::HostStatus,
    money::format_dollars,
    offers::RentalKind,
    rentals::{BookOfferRequest, Rental, RentalDetail, RentalEvent, RentalState, Workload},
};
use cardpool_protocol::{AttachSpec, ServerMessage, WorkloadStatus};
use chrono::{DateTime, Duration, TimeZone, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DatabaseTransaction, DbBackend,
    EntityTrait, IntoActiveModel, QueryFilter, QueryOrder, QuerySelect, sea_query::Expr,
};
use std::collections::{HashMap, HashSet};

/// The end of an open-ended hold.
pub fn open_end() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(9999, 12, 31, 0, 0, 0).single().unwrap_or(DateTime::<Utc>::MAX_UTC)
}

const MAX_GPUS: u32 = 64;
/// How a low-balance notice begins.
const LOW_BALANCE: &str = "Low balance:";
const MAX_COMMAND: usize = 4096;
/// The longest reservation, hours.
const MAX_RESERVED_HOURS: u32 = 24 * 31;
/// How far ahead a reservation may start, days.
const MAX_RESERVE_AHEAD_DAYS: i64 = 90;

/// Cost of `seconds` of `gpus` GPUs at `price` per GPU-hour, micro-dollars, rounded down.
/// Billing charges `cost(total) - cost(already billed)`, so splitting a rental into any number
/// of settlements charges exactly `cost(total)`.
pub fn cost(price: i64, gpus: i64, seconds: i64) -> i64 {
    let micros = i128::from(price) * i128::from(gpus) * i128::from(seconds) / 3600;
    i64::try_from(micros).unwrap_or(i64::MAX)
}

/// The spot clearing price of one host's GPUs of one model: the provider's minimum while any
/// GPU is free, otherwise the lowest bid still holding GPUs (every spot rental pays the same
/// price, never more than its bid).
pub fn clearing_price(min_bid: i64, free_gpus: usize, live_bids: &[i64]) -> i64 {
    if free_gpus > 0 {
        return min_bid;
    }
    live_bids.iter().copied().min().map_or(min_bid, |lowest| lowest.max(min_bid))
}

/// A GPU the allocator may choose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeGpu {
    pub id: i64,
    pub uuid: String,
    pub index: u32,
    /// UUIDs of the GPUs it has NVLink to.
    pub peers: Vec<String>,
}

/// Picks `n` of `free` (sorted by device index): a set whose GPUs are all NVLink-connected to
/// each other when one exists among the greedy candidates, else the lowest indexes.
pub fn choose_gpus(free: &[FreeGpu], n: usize) -> Option<Vec<i64>> {
    if n == 0 || free.len() < n {
        return None;
    }
    let linked = |a: &FreeGpu, b: &FreeGpu| a.peers.contains(&b.uuid) && b.peers.contains(&a.uuid);
    if n > 1 {
        for start in free {
            let mut clique: Vec<&FreeGpu> = vec![start];
            for candidate in free {
                if clique.len() == n {
                    break;
                }
                if candidate.id != start.id && clique.iter().all(|c| linked(c, candidate)) {
                    clique.push(candidate);
                }
            }
            if clique.len() == n {
                let mut ids: Vec<i64> = clique.iter().map(|g| g.id).collect();
                ids.sort_unstable();
                return Some(ids);
            }
        }
    }
    Some(free.iter().take(n).map(|g| g.id).collect())
}

fn validate_workload(workload: &Workload) -> AppResult<()> {
    let mut fields = cardpool_domain::FieldErrors::new();
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
    if let Some(key) = workload.ssh_public_key.as_deref().map(str::trim).filter(|k| !k.is_empty()) {
        let known = ["ssh-ed25519 ", "ssh-rsa ", "ecdsa-sha2-", "sk-ssh-ed25519@openssh.com ", "sk-ecdsa-sha2-"];
        if key.len() > 16_384 || !known.iter().any(|p| key.starts_with(p)) || key.contains('\n') {
            fields.insert("ssh_public_key".into(), "one OpenSSH public key, e.g. ssh-ed25519 AAAA…".into());
        }
    }
    if fields.is_empty() { Ok(()) } else { Err(AppError::invalid_fields(fields)) }
}

/// Every state that still holds (or is about to hold) GPUs.
const LIVE: [RentalState; 5] = [
    RentalState::Requested,
    RentalState::Provisioning,
    RentalState::Running,
    RentalState::Stopping,
    RentalState::Preempting,
];
/// Live and not on its way out: may be stopped, preempted or re-bid.
const STARTED_OR_WAITING: [RentalState; 3] = [RentalState::Requested, RentalState::Provisioning, RentalState::Running];

fn names(states: &[RentalState]) -> Vec<&'static str> {
    states.iter().map(|s| s.as_str()).collect()
}

/// Why a booking was refused for lack of GPUs.
fn not_enough(free: usize, model: &str) -> AppError {
    AppError::conflict(format!("only {free} {model} free on this host right now"))
}

fn taken(err: sea_orm::DbErr) -> AppError {
    if err.to_string().contains("rental_gpus_no_overlap") {
        AppError::conflict("those GPUs were just taken; please try again")
    } else {
        internal("holding gpus")(err)
    }
}

/// Books `request.gpu_count` GPUs of one host: on-demand (now, until stopped), reserved (a
/// future window, prepaid) or spot (at a bid, preemptible). Higher-priority demand preempts the
/// lowest spot bids when free GPUs are short.
pub async fn book_offer(services: &Services, principal: &Principal, request: &BookOfferRequest) -> AppResult<Rental> {
    if request.gpu_count == 0 || request.gpu_count > MAX_GPUS {
        return Err(AppError::invalid_field("gpu_count", format!("between 1 and {MAX_GPUS}")));
    }
    validate_workload(&request.workload)?;
    let now = Utc::now();
    let notice = Duration::seconds(i64::from(services.settings.rentals.preemption_notice_secs));
    // The window asked for.
    let (start, end) = match request.kind {
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
            let starts_at = starts_at.max(now);
            (starts_at, starts_at + Duration::hours(i64::from(hours)))
        }
        _ => {
            if request.starts_at.is_some() || request.hours.is_some() {
                return Err(AppError::invalid_field("starts_at", "only reservations have a window"));
            }
            (now, open_end())
        }
    };
    if request.kind != RentalKind::Spot && request.bid_micros.is_some() {
        return Err(AppError::invalid_field("bid_micros", "only spot rentals take a bid"));
    }

    let txn = begin_write(&services.db).await.map_err(internal("starting booking"))?;
    let host = hosts::Entity::find_by_id(request.host_id)
        .one(&txn)
        .await
        .map_err(internal("loading host"))?
        .filter(|h| h.listed && h.revoked_at.is_none())
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
        .one(&txn)
        .await
        .map_err(internal("loading price"))?
        .ok_or_else(|| AppError::not_found("offer"))?;
    let gpus_i64 = i64::from(request.gpu_count);
    let bid = match request.kind {
        RentalKind::Spot => {
            let bid =
                request.bid_micros.ok_or_else(|| AppError::invalid_field("bid_micros", "a spot rental needs a bid"))?;
            if bid < prices.spot_min_bid_micros {
                return Err(AppError::invalid_field(
                    "bid_micros",
                    format!("the provider's minimum bid is ${}/GPU-h", format_dollars(prices.spot_min_bid_micros)),
                ));
            }
            Some(bid)
        }
        _ => None,
    };
    let (price, upfront, what) = match request.kind {
        RentalKind::OnDemand => (prices.on_demand_micros, cost(prices.on_demand_micros, gpus_i64, 3600), "an hour"),
        RentalKind::Spot => (prices.spot_min_bid_micros, cost(bid.unwrap_or(0), gpus_i64, 3600), "an hour at your bid"),
        RentalKind::Reserved => {
            let secs = (end - start).num_seconds();
            (prices.reserved_micros, cost(prices.reserved_micros, gpus_i64, secs), "the reservation")
        }
    };
    let balance = ledger::balance(&txn, Book::Wallet(principal.user_id)).await?;
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

    // The candidates, locked on PostgreSQL (SQLite's IMMEDIATE transaction already is).
    let mut candidates = gpus::Entity::find()
        .filter(gpus::Column::HostId.eq(host.id))
        .filter(gpus::Column::Model.eq(&request.gpu_model))
        .filter(gpus::Column::State.eq("available"))
        .order_by_asc(gpus::Column::DeviceIndex);
    if txn.get_database_backend() == DbBackend::Postgres {
        candidates = candidates.lock_exclusive();
    }
    let candidates = candidates.all(&txn).await.map_err(internal("loading gpus"))?;
    let holds = rental_gpus::Entity::find()
        .filter(rental_gpus::Column::GpuId.is_in(candidates.iter().map(|g| g.id)))
        .filter(rental_gpus::Column::Active.eq(true))
        .filter(rental_gpus::Column::EndsAt.gt(start))
        .filter(rental_gpus::Column::StartsAt.lt(end))
        .all(&txn)
        .await
        .map_err(internal("loading holds"))?;
    // The clock is read again only now, with the GPUs locked and their holds read: a release
    // committed just before cannot end later than this booking starts (on PostgreSQL a release
    // does not wait for the GPU rows' lock, so a timestamp from before the lock could).
    let now = Utc::now();
    let start = if request.kind == RentalKind::Reserved { start.max(now) } else { now };
    let mut blockers: HashMap<i64, HashSet<i64>> = HashMap::new();
    for hold in &holds {
        blockers.entry(hold.gpu_id).or_default().insert(hold.rental_id);
    }
    // Spot rentals this booking may preempt, lowest bid (then newest) first.
    let blocking_ids: HashSet<i64> = holds.iter().map(|h| h.rental_id).collect();
    let mut victims: Vec<rentals::Model> = rentals::Entity::find()
        .filter(rentals::Column::Id.is_in(blocking_ids))
        .filter(rentals::Column::Kind.eq(RentalKind::Spot.as_str()))
        .filter(rentals::Column::State.is_in(names(&STARTED_OR_WAITING)))
        .all(&txn)
        .await
        .map_err(internal("loading spot rentals"))?
        .into_iter()
        .filter(|r| bid.is_none_or(|mine| r.bid_micros.unwrap_or(0) < mine))
        .collect();
    victims.sort_by_key(|r| (r.bid_micros.unwrap_or(0), -r.id));
    let to_free = |gpu: &gpus::Model| FreeGpu {
        id: gpu.id,
        uuid: gpu.uuid.clone(),
        index: u32::try_from(gpu.device_index).unwrap_or(0),
        peers: serde_json::from_str(&gpu.nvlink_peers).unwrap_or_default(),
    };
    let usable = |allowed: &HashSet<i64>| -> Vec<FreeGpu> {
        candidates.iter().filter(|g| blockers.get(&g.id).is_none_or(|b| b.is_subset(allowed))).map(to_free).collect()
    };
    let n = request.gpu_count as usize;
    let mut allowed = HashSet::new();
    let mut pool = usable(&allowed);
    for victim in &victims {
        if pool.len() >= n {
            break;
        }
        allowed.insert(victim.id);
        pool = usable(&allowed);
    }
    let chosen = choose_gpus(&pool, n).ok_or_else(|| not_enough(pool.len(), &request.gpu_model))?;
    let preempted: Vec<&rentals::Model> =
        victims.iter().filter(|v| chosen.iter().any(|g| blockers.get(g).is_some_and(|b| b.contains(&v.id)))).collect();

    // Preempted spot rentals end at `cut`; this booking's holds start there.
    let cut = if preempted.is_empty() { start } else { start.max(now + notice) };
    for victim in &preempted {
        rental_gpus::Entity::update_many()
            .col_expr(rental_gpus::Column::EndsAt, Expr::value(cut))
            .filter(rental_gpus::Column::RentalId.eq(victim.id))
            .filter(rental_gpus::Column::Active.eq(true))
            .exec(&txn)
            .await
            .map_err(internal("shortening spot holds"))?;
        if cut <= now + notice {
            give_preemption_notice(&txn, (*victim).clone(), cut, now).await?;
        }
    }

    let rental = rentals::ActiveModel {
        renter_id: Set(principal.user_id),
        host_id: Set(host.id),
        gpu_model: Set(request.gpu_model.clone()),
        gpu_count: Set(request.gpu_count as i32),
        kind: Set(request.kind.as_str().into()),
        state: Set(RentalState::Requested.as_str().into()),
        price_micros: Set(price),
        bid_micros: Set(bid),
        workload: Set(serde_json::to_string(&request.workload).map_err(|_| AppError::Internal)?),
        starts_at: Set(cut),
        ends_at: Set(None),
        reserved_until: Set((request.kind == RentalKind::Reserved).then_some(end)),
        prepaid_micros: Set(if request.kind == RentalKind::Reserved { upfront } else { 0 }),
        billed_seconds: Set(0),
        charged_micros: Set(0),
        settled: Set(false),
        stop_when_idle: Set(request.stop_when_idle),
        created_at: Set(now),
        updated_at: Set(now),
        ..Default::default()
    }
    .insert(&txn)
    .await
    .map_err(internal("recording rental"))?;
    for gpu_id in &chosen {
        rental_gpus::Entity::insert(rental_gpus::ActiveModel {
            rental_id: Set(rental.id),
            gpu_id: Set(*gpu_id),
            starts_at: Set(cut),
            ends_at: Set(end),
            active: Set(true),
            ..Default::default()
        })
        .exec_without_returning(&txn)
        .await
        .map_err(taken)?;
    }
    if request.kind == RentalKind::Reserved {
        ledger::hold(
            &txn,
            principal.user_id,
            upfront,
            format!("rental-{}-prepay", rental.id),
            format!("Reservation #{}: {}× {}", rental.id, request.gpu_count, request.gpu_model),
        )
        .await?;
    }
    let reason = match request.kind {
        RentalKind::OnDemand if cut > now => {
            "booked by the renter; starts when the preempted spot rentals have stopped"
        }
        RentalKind::OnDemand => "booked by the renter",
        RentalKind::Reserved => "reserved and prepaid by the renter",
        RentalKind::Spot => "spot bid placed by the renter",
    };
    record(&txn, rental.id, RentalState::Requested, reason, now).await?;
    reprice_spot(services, &txn, host.id, &request.gpu_model, now).await?;
    offers::refresh_stock(&txn, host.id).await?;
    txn.commit().await.map_err(taken)?;
    tracing::info!(rental.id = rental.id, host.id = host.id, kind = request.kind.as_str(), gpus = ?chosen, "rental booked");
    services.signals.notify(host.id);
    let rental = rentals::Entity::find_by_id(rental.id).one(&services.db).await.map_err(internal("loading rental"))?;
    dto(&services.db, rental.ok_or(AppError::Internal)?).await
}

async fn give_preemption_notice(
    txn: &DatabaseTransaction,
    victim: rentals::Model,
    stop_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> AppResult<rentals::Model> {
    let secs = (stop_at - now).num_seconds().max(0);
    let reason = format!("preempted by higher-priority demand; the workload has {secs} s before it is stopped");
    let mut victim = apply(txn, victim, RentalState::Preempting, &reason, now).await?.into_active_model();
    victim.notice = Set(Some(format!(
        "Preempted: this spot rental stops at {} UTC (SIGTERM and $CARDPOOL_PREEMPT_NOTICE_FILE were sent).",
        stop_at.format("%H:%M:%S")
    )));
    victim.notice_given_at = Set(Some(now));
    victim.update(txn).await.map_err(internal("recording preemption notice"))
}

/// Recomputes the spot clearing price of a host's GPUs of `model`, records it when it changed,
/// and bills the live spot rentals up to now at the old price before moving them to the new.
async fn reprice_spot(
    services: &Services,
    txn: &DatabaseTransaction,
    host_id: i64,
    model: &str,
    now: DateTime<Utc>,
) -> AppResult<()> {
    let Some(prices) = host_prices::Entity::find()
        .filter(host_prices::Column::HostId.eq(host_id))
        .filter(host_prices::Column::GpuModel.eq(model))
        .one(txn)
        .await
        .map_err(internal("loading price"))?
    else {
        return Ok(());
    };
    let gpus = gpus::Entity::find()
        .filter(gpus::Column::HostId.eq(host_id))
        .filter(gpus::Column::Model.eq(model))
        .filter(gpus::Column::State.eq("available"))
        .all(txn)
        .await
        .map_err(internal("loading gpus"))?;
    let held: HashSet<i64> = rental_gpus::Entity::find()
        .filter(rental_gpus::Column::GpuId.is_in(gpus.iter().map(|g| g.id)))
        .filter(rental_gpus::Column::Active.eq(true))
        .filter(rental_gpus::Column::StartsAt.lte(now))
        .filter(rental_gpus::Column::EndsAt.gt(now))
        .all(txn)
        .await
        .map_err(internal("loading holds"))?
        .into_iter()
        .map(|h| h.gpu_id)
        .collect();
    let free = gpus.iter().filter(|g| !held.contains(&g.id)).count();
    let live = rentals::Entity::find()
        .filter(rentals::Column::HostId.eq(host_id))
        .filter(rentals::Column::GpuModel.eq(model))
        .filter(rentals::Column::Kind.eq(RentalKind::Spot.as_str()))
        .filter(
            rentals::Column::State.is_in(
                [RentalState::Requested, RentalState::Provisioning, RentalState::Running, RentalState::Preempting]
                    .map(RentalState::as_str),
            ),
        )
        .all(txn)
        .await
        .map_err(internal("loading spot rentals"))?;
    let bids: Vec<i64> = live
        .iter()
        .filter(|r| r.state != RentalState::Preempting.as_str())
        .map(|r| r.bid_micros.unwrap_or(0))
        .collect();
    let price = clearing_price(prices.spot_min_bid_micros, free, &bids);
    let last = spot_prices::Entity::find()
        .filter(spot_prices::Column::HostId.eq(host_id))
        .filter(spot_prices::Column::GpuModel.eq(model))
        .order_by_desc(spot_prices::Column::At)
        .order_by_desc(spot_prices::Column::Id)
        .one(txn)
        .await
        .map_err(internal("loading spot price"))?;
    if last.is_none_or(|l| l.price_micros != price) {
        spot_prices::Entity::insert(spot_prices::ActiveModel {
            host_id: Set(host_id),
            gpu_model: Set(model.to_owned()),
            price_micros: Set(price),
            at: Set(now),
            ..Default::default()
        })
        .exec_without_returning(txn)
        .await
        .map_err(internal("recording spot price"))?;
    }
    for rental in live.into_iter().filter(|r| r.price_micros != price) {
        let settled = settle_in(services, txn, rental, now).await?;
        let mut update = settled.into_active_model();
        update.price_micros = Set(price);
        update.update(txn).await.map_err(internal("repricing spot rental"))?;
    }
    Ok(())
}

async fn record(
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
    .map_err(internal("recording rental event"))?;
    Ok(())
}

/// One step of the state machine inside `txn`, recorded with its reason. Asking to stop ends
/// billing now; a terminal state ends it too (if nothing ended it earlier) and releases the
/// GPUs.
async fn apply(
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
        // booking waiting on a preemption) collapse to nothing.
        // Holds that already ended (a reservation past its window) keep their end.
        let started =
            Condition::all().add(rental_gpus::Column::StartsAt.lte(now)).add(rental_gpus::Column::EndsAt.gt(now));
        for (column_filter, ends) in [
            (started, Expr::value(now)),
            (Condition::all().add(rental_gpus::Column::StartsAt.gt(now)), Expr::col(rental_gpus::Column::StartsAt)),
            (Condition::all().add(rental_gpus::Column::EndsAt.lte(now)), Expr::col(rental_gpus::Column::EndsAt)),
        ] {
            rental_gpus::Entity::update_many()
                .col_expr(rental_gpus::Column::Active, Expr::value(false))
                .col_expr(rental_gpus::Column::EndsAt, ends)
                .filter(rental_gpus::Column::RentalId.eq(id))
                .filter(rental_gpus::Column::Active.eq(true))
                .filter(column_filter)
                .exec(txn)
                .await
                .map_err(internal("releasing gpus"))?;
        }
    }
    let rental = update.update(txn).await.map_err(internal("updating rental"))?;
    record(txn, id, next, reason, now).await?;
    Ok(rental)
}

/// Moves a rental along the state machine, recording why; a terminal state releases its GPUs
/// and settles its bill.
pub async fn transition(services: &Services, rental_id: i64, next: RentalState, reason: &str) -> AppResult<Rental> {
    let now = Utc::now();
    let txn = begin_write(&services.db).await.map_err(internal("starting rental transition"))?;
    let rental = load_for_update(&txn, rental_id).await?;
    let host_id = rental.host_id;
    let rental = after_change(services, &txn, apply(&txn, rental, next, reason, now).await?, now).await?;
    offers::refresh_stock(&txn, host_id).await?;
    txn.commit().await.map_err(internal("committing rental transition"))?;
    services.signals.notify(host_id);
    dto(&services.db, rental).await
}

async fn load_for_update(txn: &DatabaseTransaction, rental_id: i64) -> AppResult<rentals::Model> {
    let mut query = rentals::Entity::find_by_id(rental_id);
    if txn.get_database_backend() == DbBackend::Postgres {
        query = query.lock_exclusive();
    }
    query.one(txn).await.map_err(internal("loading rental"))?.ok_or_else(|| AppError::not_found("rental"))
}

/// Bills what the change made due and, when GPUs were released, reprices the host's spot GPUs.
async fn after_change(
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

/// The renter (or an admin) asks to stop. Billing ends now; the agent detaches and the rental
/// ends. A reservation whose window has not begun is cancelled and refunded.
pub async fn stop_rental(services: &Services, principal: &Principal, rental_id: i64) -> AppResult<Rental> {
    let now = Utc::now();
    let txn = begin_write(&services.db).await.map_err(internal("starting stop"))?;
    let rental = owned_by(load_for_update(&txn, rental_id).await?, principal)?;
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
            "cancelled by the renter before the window began; refunded"
        } else {
            "cancelled by the renter before it started"
        };
        apply(&txn, rental, RentalState::Ended, reason, now).await?
    } else {
        apply(&txn, rental, RentalState::Stopping, "stop requested by the renter", now).await?
    };
    let rental = after_change(services, &txn, rental, now).await?;
    offers::refresh_stock(&txn, host_id).await?;
    txn.commit().await.map_err(internal("committing stop"))?;
    services.signals.notify(host_id);
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
        .map_err(internal("setting rental notice"))?;
    Ok(())
}

/// The rental if `principal` may act on it (its renter, or an admin); else "not found".
fn owned_by(rental: rentals::Model, principal: &Principal) -> AppResult<rentals::Model> {
    if rental.renter_id == principal.user_id || principal.roles.admin {
        Ok(rental)
    } else {
        Err(AppError::not_found("rental"))
    }
}

/// Raises or lowers a live spot rental's bid. A bid below the provider's minimum is refused;
/// the clearing price follows the new bids.
pub async fn change_bid(
    services: &Services,
    principal: &Principal,
    rental_id: i64,
    bid_micros: i64,
) -> AppResult<Rental> {
    let now = Utc::now();
    let txn = begin_write(&services.db).await.map_err(internal("starting bid change"))?;
    let rental = owned_by(load_for_update(&txn, rental_id).await?, principal)?;
    if rental.kind != RentalKind::Spot.as_str() {
        return Err(AppError::conflict("only spot rentals have a bid"));
    }
    let state = RentalState::parse(&rental.state).unwrap_or(RentalState::Failed);
    if !matches!(state, RentalState::Requested | RentalState::Provisioning | RentalState::Running) {
        return Err(AppError::conflict(format!("a {} rental's bid can no longer change", state.as_str())));
    }
    let min = host_prices::Entity::find()
        .filter(host_prices::Column::HostId.eq(rental.host_id))
        .filter(host_prices::Column::GpuModel.eq(&rental.gpu_model))
        .one(&txn)
        .await
        .map_err(internal("loading price"))?
        .map_or(0, |p| p.spot_min_bid_micros);
    if bid_micros < min {
        return Err(AppError::invalid_field(
            "bid_micros",
            format!("the provider's minimum bid is ${}/GPU-h", format_dollars(min)),
        ));
    }
    let (host_id, model) = (rental.host_id, rental.gpu_model.clone());
    let mut update = rental.into_active_model();
    update.bid_micros = Set(Some(bid_micros));
    update.updated_at = Set(now);
    update.update(&txn).await.map_err(internal("changing bid"))?;
    record(&txn, rental_id, state, &format!("bid changed to ${}/GPU-h", format_dollars(bid_micros)), now).await?;
    reprice_spot(services, &txn, host_id, &model, now).await?;
    txn.commit().await.map_err(internal("committing bid change"))?;
    get_rental(services, principal, rental_id).await.map(|d| d.rental)
}

/// Bills `rental` up to `now` (or its billing end) inside `txn`: whole seconds since the
/// workload was ready, at its current price. On-demand and spot are charged to the wallet
/// (stopped, after a warning, when it runs dry); reservations are paid from the prepaid funds,
/// and when a reservation ends the rest is paid to the provider (window used or given up by
/// the renter) or refunded (the host failed it).
async fn settle_in(
    services: &Services,
    txn: &DatabaseTransaction,
    rental: rentals::Model,
    now: DateTime<Utc>,
) -> AppResult<rentals::Model> {
    if rental.settled {
        return Ok(rental);
    }
    let state = RentalState::parse(&rental.state).unwrap_or(RentalState::Failed);
    let reserved = rental.kind == RentalKind::Reserved.as_str();
    let fee = services.settings.payments.platform_fee_bps;
    let gpus = i64::from(rental.gpu_count);
    let provider = || async {
        hosts::Entity::find_by_id(rental.host_id)
            .one(txn)
            .await
            .map_err(internal("loading host"))?
            .map(|h| h.provider_id)
            .ok_or(AppError::Internal)
    };
    let mut update = rental.clone().into_active_model();
    let mut charged_now = 0;
    let mut ran_dry = false;
    let mut end = now;
    if let Some(since) = rental.running_since {
        end = rental.billing_ends_at.map_or(now, |e| e.min(now)).max(since);
        let seconds = (end - since).num_seconds();
        let due = cost(rental.price_micros, gpus, seconds) - cost(rental.price_micros, gpus, rental.billed_seconds);
        if due > 0 {
            let reference = format!("rental-{}-s{seconds}", rental.id);
            let description = format!(
                "Rental #{}: {}× {} for {} s",
                rental.id,
                rental.gpu_count,
                rental.gpu_model,
                seconds - rental.billed_seconds
            );
            if reserved {
                let due = due.min(rental.prepaid_micros - rental.charged_micros);
                if due > 0 {
                    ledger::capture(txn, rental.renter_id, provider().await?, due, fee, reference, description).await?;
                    charged_now = due;
                }
            } else {
                let balance = ledger::balance(txn, Book::Wallet(rental.renter_id)).await?;
                charged_now = due.min(balance);
                ran_dry = due > balance;
                if charged_now > 0 {
                    ledger::charge_usage(
                        txn,
                        rental.renter_id,
                        provider().await?,
                        charged_now,
                        fee,
                        reference,
                        description,
                    )
                    .await?;
                }
                let left = balance - charged_now;
                let warn = cost(rental.price_micros, gpus, 60)
                    * i64::from(services.settings.rentals.low_balance_warning_minutes);
                // A low-balance warning replaces a milder notice (an idle GPU), never itself.
                let warned = rental.notice.as_deref().is_some_and(|n| n.starts_with(LOW_BALANCE));
                if !ran_dry && state == RentalState::Running && left < warn && !warned {
                    let per_minute = cost(rental.price_micros, gpus, 60).max(1);
                    let text = format!(
                        "{LOW_BALANCE} ${} left covers about {} more minutes; top up or this rental will be stopped.",
                        format_dollars(left),
                        left / per_minute
                    );
                    record(txn, rental.id, state, &text, now).await?;
                    update.notice = Set(Some(text));
                    update.notice_given_at = Set(Some(now));
                }
            }
        }
        update.billed_seconds = Set(seconds);
        update.charged_micros = Set(rental.charged_micros + charged_now);
    }
    let mut rental = update.update(txn).await.map_err(internal("recording billing"))?;
    if ran_dry && matches!(state, RentalState::Running | RentalState::Provisioning | RentalState::Requested) {
        rental = apply(txn, rental, RentalState::Stopping, "the renter's balance ran out", now).await?;
        let mut update = rental.into_active_model();
        update.billing_ends_at = Set(Some(end));
        update.notice = Set(Some("Stopped: your balance ran out. Top up to rent again.".into()));
        rental = update.update(txn).await.map_err(internal("recording billing end"))?;
    }
    let done = state.is_terminal() && rental.billing_ends_at.is_none_or(|e| e <= now);
    if done {
        if reserved {
            let rest = rental.prepaid_micros - rental.charged_micros;
            let delivered = state == RentalState::Ended && rental.running_since.is_some();
            if rest > 0 && delivered {
                let reference = format!("rental-{}-final", rental.id);
                let description = format!("Reservation #{}: rest of the window", rental.id);
                ledger::capture(txn, rental.renter_id, provider().await?, rest, fee, reference, description).await?;
            } else if rest > 0 {
                let reference = format!("rental-{}-refund", rental.id);
                let description = format!("Reservation #{}: refund of the unused window", rental.id);
                ledger::release(txn, rental.renter_id, rest, reference, description).await?;
            }
            let mut update = rental.into_active_model();
            if delivered {
                update.charged_micros = Set(update.prepaid_micros.clone().unwrap());
            }
            rental = update.update(txn).await.map_err(internal("closing reservation"))?;
        }
        let mut update = rental.into_active_model();
        update.settled = Set(true);
        rental = update.update(txn).await.map_err(internal("settling rental"))?;
    }
    Ok(rental)
}

/// Bills one rental now (the billing worker calls this for every unsettled rental).
pub async fn settle(services: &Services, rental_id: i64) -> AppResult<Rental> {
    let now = Utc::now();
    let txn = begin_write(&services.db).await.map_err(internal("starting settlement"))?;
    let before = load_for_update(&txn, rental_id).await?;
    let was = before.state.clone();
    let rental = settle_in(services, &txn, before, now).await?;
    txn.commit().await.map_err(internal("committing settlement"))?;
    if rental.state != was {
        services.signals.notify(rental.host_id);
    }
    dto(&services.db, rental).await
}

/// Bills every running (or ended but unsettled) rental; returns how many were looked at.
pub async fn settle_all(services: &Services) -> AppResult<usize> {
    let due: Vec<i64> = rentals::Entity::find()
        .select_only()
        .column(rentals::Column::Id)
        .filter(rentals::Column::Settled.eq(false))
        .filter(rentals::Column::RunningSince.is_not_null())
        .into_tuple()
        .all(&services.db)
        .await
        .map_err(internal("finding rentals to bill"))?;
    for id in &due {
        if let Err(err) = settle(services, *id).await {
            tracing::warn!(rental.id = id, error = %err, "billing a rental failed; will retry");
        }
    }
    Ok(due.len())
}

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
        .map_err(internal("finding ended reservations"))?;
    for rental in ending {
        let txn = begin_write(&services.db).await.map_err(internal("starting window end"))?;
        let rental = load_for_update(&txn, rental.id).await?;
        let window_end = rental.reserved_until;
        let host_id = rental.host_id;
        let next = if rental.running_since.is_some() { RentalState::Stopping } else { RentalState::Ended };
        if let Ok(rental) = apply(&txn, rental, next, "the reserved window ended", now).await {
            let mut update = rental.into_active_model();
            update.billing_ends_at = Set(window_end);
            let rental = update.update(&txn).await.map_err(internal("ending window"))?;
            after_change(services, &txn, rental, now).await?;
        }
        offers::refresh_stock(&txn, host_id).await?;
        txn.commit().await.map_err(internal("committing window end"))?;
        services.signals.notify(host_id);
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
        .map_err(internal("finding ending holds"))?;
    let ids: HashSet<i64> = soon.iter().map(|(id, _)| *id).collect();
    let spot: Vec<rentals::Model> = rentals::Entity::find()
        .filter(rentals::Column::Id.is_in(ids))
        .filter(rentals::Column::Kind.eq(RentalKind::Spot.as_str()))
        .filter(rentals::Column::State.is_in(live))
        .all(&services.db)
        .await
        .map_err(internal("finding spot rentals to preempt"))?;
    for rental in spot {
        let stop_at = soon.iter().filter(|(id, _)| *id == rental.id).map(|(_, at)| *at).min().unwrap_or(now);
        let txn = begin_write(&services.db).await.map_err(internal("starting notice"))?;
        let host_id = rental.host_id;
        let rental = load_for_update(&txn, rental.id).await?;
        if live.contains(&rental.state.as_str()) {
            give_preemption_notice(&txn, rental, stop_at.max(now), now).await?;
        }
        txn.commit().await.map_err(internal("committing notice"))?;
        services.signals.notify(host_id);
    }
    // Preemptions whose agent never confirmed: their holds have ended, so they are over.
    let overdue: Vec<rentals::Model> = rentals::Entity::find()
        .filter(rentals::Column::State.eq(RentalState::Preempting.as_str()))
        .filter(rentals::Column::NoticeGivenAt.lte(now - notice - Duration::seconds(60)))
        .all(&services.db)
        .await
        .map_err(internal("finding overdue preemptions"))?;
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
        .map_err(internal("finding starting rentals"))?;
    for host_id in starting.into_iter().collect::<HashSet<_>>() {
        services.signals.notify(host_id);
    }
    Ok(())
}

/// A host went offline: its started rentals are interrupted, billed up to its last heartbeat.
pub async fn interrupt_host(services: &Services, host_id: i64, last_heartbeat: Option<DateTime<Utc>>) -> AppResult<()> {
    let now = Utc::now();
    let affected: Vec<rentals::Model> = rentals::Entity::find()
        .filter(rentals::Column::HostId.eq(host_id))
        .filter(rentals::Column::State.is_in(names(&LIVE)))
        .filter(rentals::Column::StartsAt.lte(now))
        .all(&services.db)
        .await
        .map_err(internal("finding rentals of an offline host"))?;
    for rental in affected {
        let txn = begin_write(&services.db).await.map_err(internal("starting interruption"))?;
        let rental = load_for_update(&txn, rental.id).await?;
        if RentalState::parse(&rental.state).is_some_and(|s| s.can_become(RentalState::Interrupted)) {
            let until = last_heartbeat.unwrap_or(now).min(now);
            let mut update = rental.into_active_model();
            if update.billing_ends_at.clone().unwrap().is_none_or(|e| e > until) {
                update.billing_ends_at = Set(Some(until));
            }
            let rental = update.update(&txn).await.map_err(internal("ending billing"))?;
            let rental = apply(&txn, rental, RentalState::Interrupted, "the host went offline", now).await?;
            after_change(services, &txn, rental, now).await?;
        }
        offers::refresh_stock(&txn, host_id).await?;
        txn.commit().await.map_err(internal("committing interruption"))?;
    }
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
    let txn = begin_write(&services.db).await.map_err(internal("starting workload report"))?;
    let rental = match load_for_update(&txn, rental_id).await {
        Ok(rental) if rental.host_id == host_id => rental,
        _ => return Ok(()),
    };
    let state = RentalState::parse(&rental.state).unwrap_or(RentalState::Failed);
    use RentalState as S;
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
    let mut rental = rental;
    if next == S::Running && state == S::Requested {
        rental = apply(&txn, rental, S::Provisioning, "the agent is attaching the GPUs", now).await?;
    }
    if next == S::Running {
        let mut update = rental.into_active_model();
        update.running_since = Set(Some(now));
        rental = update.update(&txn).await.map_err(internal("starting billing"))?;
    }
    let rental = apply(&txn, rental, next, &reason, now).await?;
    after_change(services, &txn, rental, now).await?;
    offers::refresh_stock(&txn, host_id).await?;
    txn.commit().await.map_err(internal("committing workload report"))?;
    tracing::info!(rental.id = rental_id, host.id = host_id, state = next.as_str(), "rental {reason}");
    Ok(())
}

/// What the host's agent must do now, given the rentals it says it runs (`None`: unknown).
/// Sent on connect, on every change and periodically; the agent's handling is idempotent.
pub async fn commands_for_host(
    services: &Services,
    host_id: i64,
    running_on_agent: Option<&[i64]>,
) -> AppResult<Vec<ServerMessage>> {
    let now = Utc::now();
    let notice = Duration::seconds(i64::from(services.settings.rentals.preemption_notice_secs));
    let live: Vec<rentals::Model> = rentals::Entity::find()
        .filter(rentals::Column::HostId.eq(host_id))
        .filter(rentals::Column::State.is_in(names(&LIVE)))
        .all(&services.db)
        .await
        .map_err(internal("loading host rentals"))?;
    let mut commands = Vec::new();
    let attaching: Vec<&rentals::Model> = live
        .iter()
        .filter(|r| {
            (r.state == RentalState::Requested.as_str() || r.state == RentalState::Provisioning.as_str())
                && r.starts_at <= now
        })
        .collect();
    let held = rental_gpus::Entity::find()
        .filter(rental_gpus::Column::RentalId.is_in(attaching.iter().map(|r| r.id)))
        .all(&services.db)
        .await
        .map_err(internal("loading held gpus"))?;
    let devices: HashMap<i64, gpus::Model> = gpus::Entity::find()
        .filter(gpus::Column::Id.is_in(held.iter().map(|h| h.gpu_id)))
        .all(&services.db)
        .await
        .map_err(internal("loading gpus"))?
        .into_iter()
        .map(|g| (g.id, g))
        .collect();
    for rental in attaching {
        let mut mine: Vec<&gpus::Model> =
            held.iter().filter(|h| h.rental_id == rental.id).filter_map(|h| devices.get(&h.gpu_id)).collect();
        mine.sort_by_key(|g| g.device_index);
        let workload: Workload = serde_json::from_str(&rental.workload).unwrap_or_default();
        commands.push(ServerMessage::Attach(AttachSpec {
            rental_id: rental.id,
            gpu_indexes: mine.iter().map(|g| u32::try_from(g.device_index).unwrap_or(0)).collect(),
            gpu_uuids: mine.iter().map(|g| g.uuid.clone()).collect(),
            command: workload.command.filter(|c| !c.trim().is_empty()),
            image: workload.image.filter(|i| !i.trim().is_empty()),
            env: workload.env,
            ssh_public_key: workload.ssh_public_key.filter(|k| !k.trim().is_empty()),
        }));
    }
    for rental in &live {
        if rental.state == RentalState::Preempting.as_str() {
            let deadline = rental.notice_given_at.unwrap_or(now) + notice;
            let grace = (deadline - now).num_seconds().max(0);
            commands.push(ServerMessage::PreemptNotice { rental_id: rental.id, grace_secs: grace as u64 });
        } else if rental.state == RentalState::Stopping.as_str() {
            commands.push(ServerMessage::Detach { rental_id: rental.id });
        }
    }
    if let Some(running) = running_on_agent {
        let known: HashSet<i64> = live.iter().map(|r| r.id).collect();
        for id in running.iter().filter(|id| !known.contains(id)) {
            commands.push(ServerMessage::Detach { rental_id: *id });
        }
    }
    Ok(commands)
}

/// The caller's rentals, newest first.
pub async fn list_rentals(services: &Services, principal: &Principal) -> AppResult<Vec<Rental>> {
    let rows = rentals::Entity::find()
        .filter(rentals::Column::RenterId.eq(principal.user_id))
        .order_by_desc(rentals::Column::Id)
        .limit(200)
        .all(&services.db)
        .await
        .map_err(internal("listing rentals"))?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(dto(&services.db, row).await?);
    }
    Ok(out)
}

/// One rental with its timeline: for its renter, the host's provider, or an admin.
pub async fn get_rental(services: &Services, principal: &Principal, rental_id: i64) -> AppResult<RentalDetail> {
    let rental = rentals::Entity::find_by_id(rental_id)
        .one(&services.db)
        .await
        .map_err(internal("loading rental"))?
        .ok_or_else(|| AppError::not_found("rental"))?;
    if rental.renter_id != principal.user_id && !principal.roles.admin {
        let provider = hosts::Entity::find_by_id(rental.host_id)
            .one(&services.db)
            .await
            .map_err(internal("loading host"))?
            .map(|h| h.provider_id);
        if provider != Some(principal.user_id) {
            return Err(AppError::not_found("rental"));
        }
    }
    let events = rental_events::Entity::find()
        .filter(rental_events::Column::RentalId.eq(rental_id))
        .order_by_asc(rental_events::Column::Id)
        .all(&services.db)
        .await
        .map_err(internal("loading rental events"))?
        .into_iter()
        .map(|e| RentalEvent {
            state: RentalState::parse(&e.state).unwrap_or(RentalState::Failed),
            reason: e.reason,
            at: e.at,
        })
        .collect();
    Ok(RentalDetail { rental: dto(&services.db, rental).await?, events })
}

/// The spot clearing-price history of one offer (host and GPU model), oldest first.
pub async fn spot_price_history(
    services: &Services,
    host_id: i64,
    gpu_model: &str,
    since: DateTime<Utc>,
) -> AppResult<Vec<(DateTime<Utc>, i64)>> {
    let rows = spot_prices::Entity::find()
        .filter(spot_prices::Column::HostId.eq(host_id))
        .filter(spot_prices::Column::GpuModel.eq(gpu_model))
        .filter(spot_prices::Column::At.gte(since))
        .order_by_asc(spot_prices::Column::At)
        .order_by_asc(spot_prices::Column::Id)
        .limit(1000)
        .all(&services.db)
        .await
        .map_err(internal("loading spot prices"))?;
    Ok(rows.into_iter().map(|r| (r.at, r.price_micros)).collect())
}

async fn dto(conn: &impl ConnectionTrait, rental: rentals::Model) -> AppResult<Rental> {
    let held = rental_gpus::Entity::find()
        .filter(rental_gpus::Column::RentalId.eq(rental.id))
        .all(conn)
        .await
        .map_err(internal("loading rental gpus"))?;
    let mut indexes: Vec<u32> = gpus::Entity::find()
        .filter(gpus::Column::Id.is_in(held.iter().map(|h| h.gpu_id)))
        .all(conn)
        .await
        .map_err(internal("loading gpus"))?
        .into_iter()
        .map(|g| u32::try_from(g.device_index).unwrap_or(0))
        .collect();
    indexes.sort_unstable();
    let host = hosts::Entity::find_by_id(rental.host_id).one(conn).await.map_err(internal("loading host"))?;
    let host_label = host.map_or_else(
        || format!("host {}", rental.host_id),
        |h| match h.location {
            Some(location) => format!("{} · {location}", h.hostname),
            None => h.hostname,
        },
    );
    let (accrued_seconds, accrued_micros) = match rental.running_since {
        Some(since) if !rental.settled => {
            let until = rental.billing_ends_at.map_or_else(Utc::now, |e| e.min(Utc::now())).max(since);
            let seconds = (until - since).num_seconds();
            let unbilled = cost(rental.price_micros, i64::from(rental.gpu_count), seconds)
                - cost(rental.price_micros, i64::from(rental.gpu_count), rental.billed_seconds);
            (seconds, rental.charged_micros + unbilled.max(0))
        }
        _ => (rental.billed_seconds, rental.charged_micros),
    };
    Ok(Rental {
        id: rental.id,
        host_id: rental.host_id,
        host_label,
        gpu_model: rental.gpu_model,
        gpu_count: u32::try_from(rental.gpu_count).unwrap_or(0),
        kind: RentalKind::parse(&rental.kind).unwrap_or_default(),
        state: RentalState::parse(&rental.state).unwrap_or(RentalState::Failed),
        price_micros: rental.price_micros,
        bid_micros: rental.bid_micros,
        gpu_indexes: indexes,
        workload: serde_json::from_str(&rental.workload).unwrap_or_default(),
        starts_at: rental.starts_at,
        ends_at: rental.reserved_until.filter(|_| rental.ends_at.is_none()).or(rental.ends_at),
        running_since: rental.running_since,
        billed_seconds: rental.billed_seconds,
        charged_micros: rental.charged_micros,
        accrued_seconds,
        accrued_micros,
        notice: rental.notice,
        stop_when_idle: rental.stop_when_idle,
        created_at: rental.created_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `islands` groups of GPUs, each group fully NVLinked inside; `taken` marks busy ones.
    fn topology(islands: &[usize], taken: &[bool]) -> Vec<FreeGpu> {
        let mut all = Vec::new();
        let mut index = 0u32;
        for (island, &size) in islands.iter().enumerate() {
            let uuids: Vec<String> = (0..size).map(|i| format!("GPU-{island}-{i}")).collect();
            for uuid in &uuids {
                all.push(FreeGpu {
                    id: i64::from(index) + 1,
                    uuid: uuid.clone(),
                    index,
                    peers: uuids.iter().filter(|u| *u != uuid).cloned().collect(),
                });
                index += 1;
            }
        }
        all.into_iter().enumerate().filter(|(i, _)| !taken.get(*i).copied().unwrap_or(false)).map(|(_, g)| g).collect()
    }

    proptest! {
        #[test]
        fn allocator_picks_distinct_free_gpus_and_prefers_one_island(
            islands in proptest::collection::vec(1usize..5, 1..4),
            taken in proptest::collection::vec(any::<bool>(), 16),
            n in 1usize..9,
        ) {
            let free = topology(&islands, &taken);
            match choose_gpus(&free, n) {
                None => prop_assert!(free.len() < n),
                Some(ids) => {
                    prop_assert_eq!(ids.len(), n);
                    let distinct: HashSet<_> = ids.iter().collect();
                    prop_assert_eq!(distinct.len(), n);
                    prop_assert!(ids.iter().all(|id| free.iter().any(|g| g.id == *id)));
                    // If some island has n free GPUs, the choice lies within one island.
                    let island_of = |id: i64| free.iter().find(|g| g.id == id).map(|g| g.uuid.split('-').nth(1).unwrap_or("").to_owned());
                    let mut free_per_island = std::collections::HashMap::new();
                    for g in &free {
                        *free_per_island.entry(g.uuid.split('-').nth(1).unwrap_or("").to_owned()).or_insert(0usize) += 1;
                    }
                    if n > 1 && free_per_island.values().any(|&c| c >= n) {
                        let first = island_of(ids[0]);
                        prop_assert!(ids.iter().all(|id| island_of(*id) == first), "{ids:?} spans islands");
                    }
                }
            }
        }
    }

    proptest! {
        /// The clearing rule: the minimum while any GPU is free; else the lowest live bid, never
        /// below the minimum and never above any live bid that is itself at least the minimum.
        /// More demand never lowers it.
        #[test]
        fn spot_clears_at_one_fair_price(
            min in 1i64..5_000_000,
            free in 0usize..3,
            bids in proptest::collection::vec(1i64..10_000_000, 0..8),
            extra in 1i64..10_000_000,
        ) {
            let price = clearing_price(min, free, &bids);
            prop_assert!(price >= min);
            if free > 0 || bids.is_empty() {
                prop_assert_eq!(price, min);
            } else {
                prop_assert!(bids.iter().filter(|b| **b >= min).all(|b| price <= *b));
                prop_assert!(bids.contains(&price) || price == min);
            }
            let mut more = bids.clone();
            more.push(extra);
            if free == 0 && !bids.is_empty() && extra >= price {
                prop_assert_eq!(clearing_price(min, free, &more), price);
            }
        }

        /// Billing in any number of settlements charges exactly the cost of the whole.
        #[test]
        fn split_settlements_add_up_exactly(
            price in 1i64..100_000_000,
            gpus in 1i64..65,
            cuts in proptest::collection::vec(0i64..100_000, 0..12),
        ) {
            let mut cuts = cuts;
            cuts.sort_unstable();
            let mut billed = 0;
            let mut charged = 0;
            for seconds in cuts.iter().copied().chain(std::iter::once(100_000)) {
                charged += cost(price, gpus, seconds) - cost(price, gpus, billed);
                billed = seconds;
            }
            prop_assert_eq!(charged, cost(price, gpus, 100_000));
        }
    }

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
