//! The spot market: one clearing price per host and model (recorded when it changes, with live
//! spot rentals billed at the old price first), bids, and preemption notices.

use super::{
    billing::settle_in,
    pricing::{clearing_price, cost},
    state::{apply, load_for_update, owned_by, record},
    views::get_rental,
};
use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::{DbResultExt, Sql},
    entities::{gpus, host_prices, rentals},
    ledger::{self, Book},
    notify::Notice,
};
use cardpool_domain::{
    money::format_dollars,
    notifications::EventKind,
    offers::RentalKind,
    rentals::{Rental, RentalState},
};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, EntityTrait,
    IntoActiveModel, QueryFilter, QueryOrder, QuerySelect, Statement,
};

/// Why a spot rental is preempted, unless said otherwise (a gang's member for its gang).
pub(super) const DEMAND: &str = "preempted by higher-priority demand";

/// Gives the spot rental its notice: it stops at `stop_at`, for the reason `why`.
pub(super) async fn give_preemption_notice(
    txn: &DatabaseTransaction,
    victim: rentals::Model,
    stop_at: DateTime<Utc>,
    now: DateTime<Utc>,
    why: &str,
) -> AppResult<rentals::Model> {
    let secs = (stop_at - now).num_seconds().max(0);
    let reason = format!("{why}; the workload has {secs} s before it is stopped");
    let mut victim = apply(txn, victim, RentalState::Preempting, &reason, now).await?.into_active_model();
    victim.notice = Set(Some(format!(
        "Preempted: this spot rental stops at {} UTC (SIGTERM and $CARDPOOL_PREEMPT_NOTICE_FILE were sent).",
        stop_at.format("%H:%M:%S")
    )));
    victim.notice_given_at = Set(Some(now));
    let victim = victim.update(txn).await.context("recording preemption notice")?;
    let notice = Notice::new(
        victim.renter_id,
        EventKind::PreemptionNotice,
        format!("Rental #{} will be preempted", victim.id),
        format!(
            "Higher-priority demand needs this spot rental's GPUs: it stops at {} UTC.",
            stop_at.format("%H:%M:%S")
        ),
    )
    .rental(victim.id)
    .data(serde_json::json!({ "deadline": stop_at, "notice_secs": secs }));
    crate::notify::emit(txn, notice, now).await?;
    Ok(victim)
}

/// Recomputes the spot clearing price of a host's GPUs of `model`, records it when it changed,
/// and bills the live spot rentals up to now at the old price before moving them to the new.
pub(super) async fn reprice_spot(
    services: &Services,
    txn: &DatabaseTransaction,
    host_id: i64,
    model: &str,
    now: DateTime<Utc>,
) -> AppResult<()> {
    let prices = host_prices::Entity::find()
        .filter(host_prices::Column::HostId.eq(host_id))
        .filter(host_prices::Column::GpuModel.eq(model))
        .one(txn)
        .await
        .context("loading price")?;
    match prices {
        Some(prices) => reprice_spot_at(services, txn, &prices, now).await,
        None => Ok(()),
    }
}

/// [`reprice_spot`] with the host's prices of the model already read in this transaction.
pub(super) async fn reprice_spot_at(
    services: &Services,
    txn: &DatabaseTransaction,
    prices: &host_prices::Model,
    now: DateTime<Utc>,
) -> AppResult<()> {
    let (host_id, model) = (prices.host_id, prices.gpu_model.as_str());
    let live = lock_spot_rentals(txn, host_id, model).await?;
    let bids: Vec<i64> = live
        .iter()
        .filter(|r| r.state != RentalState::Preempting.as_str())
        .map(|r| r.bid_micros.unwrap_or(0))
        .collect();
    // Without bids the price is the minimum however many GPUs are free: only bids need the count.
    let free = if bids.is_empty() { 0 } else { free_now(txn, host_id, model, now).await? };
    let price = clearing_price(prices.spot_min_bid_micros, free, &bids);
    record_price(txn, host_id, model, price, now).await?;
    for rental in live.into_iter().filter(|r| r.price_micros != price) {
        let settled = settle_in(services, txn, rental, now).await?;
        let mut update = settled.into_active_model();
        update.price_micros = Set(price);
        update.update(txn).await.context("repricing spot rental")?;
    }
    Ok(())
}

/// Records the clearing price of a host's `model` at `now` unless it is the one last recorded,
/// in one statement (every booking and release reprices, and the price seldom moves).
async fn record_price(
    txn: &DatabaseTransaction,
    host_id: i64,
    model: &str,
    price: i64,
    now: DateTime<Utc>,
) -> AppResult<()> {
    // Bound in the order they appear (SQLite's `?` are positional).
    let mut sql = Sql::new(txn.get_database_backend());
    let new_row = [sql.bind(host_id), sql.bind(model), sql.bind(price), sql.bind(now)].join(", ");
    let (host, gpu_model, same) = (sql.bind(host_id), sql.bind(model), sql.bind(price));
    let text = format!(
        "INSERT INTO spot_prices (host_id, gpu_model, price_micros, at) SELECT {new_row} \
         WHERE NOT EXISTS (SELECT 1 FROM (SELECT price_micros FROM spot_prices WHERE host_id = {host} \
         AND gpu_model = {gpu_model} ORDER BY at DESC, id DESC LIMIT 1) last WHERE last.price_micros = {same})"
    );
    txn.execute_raw(Statement::from_sql_and_values(sql.backend, text, sql.values))
        .await
        .context("recording spot price")?;
    Ok(())
}

/// A spot bid must be at least the provider's minimum and at most their on-demand price: above
/// it a spot rental would buy nothing spot is for, and an unbounded bid would make a rental no
/// other bid can ever preempt.
pub(super) fn check_bid(prices: &host_prices::Model, bid_micros: i64) -> AppResult<()> {
    let (min, max) = (prices.spot_min_bid_micros, prices.on_demand_micros.max(prices.spot_min_bid_micros));
    if bid_micros < min {
        return Err(AppError::invalid_field(
            "bid_micros",
            format!("the provider's minimum bid is ${}/GPU-h", format_dollars(min)),
        ));
    }
    if bid_micros > max {
        return Err(AppError::invalid_field(
            "bid_micros",
            format!(
                "bid at most the on-demand price, ${}/GPU-h (rent on-demand to never be preempted)",
                format_dollars(max)
            ),
        ));
    }
    Ok(())
}

/// How many of the host's GPUs of the model no rental holds at `now`.
async fn free_now(txn: &DatabaseTransaction, host_id: i64, model: &str, now: DateTime<Utc>) -> AppResult<usize> {
    let gpus = gpus::Entity::find()
        .filter(gpus::Column::HostId.eq(host_id))
        .filter(gpus::Column::Model.eq(model))
        .filter(gpus::Column::State.eq("available"))
        .filter(gpus::Column::ForSale.eq(true))
        .all(txn)
        .await
        .context("loading gpus")?;
    // Held at `now`: a hold over `[now, now + 1 µs)`.
    let held = super::allocation::blockers(txn, &gpus, now, now + chrono::Duration::microseconds(1)).await?;
    Ok(gpus.iter().filter(|g| !held.contains_key(&g.id)).count())
}

/// The live spot rentals of a host's GPUs of `model`, locked (PostgreSQL) in id order and read
/// after the locks are taken. Repricing settles them, so it must see what the billing worker
/// last committed (a stale row would bill an interval twice), and everything that reprices
/// takes these locks in the same order, so two repricings of one host never wait crosswise.
pub(super) async fn lock_spot_rentals(
    txn: &DatabaseTransaction,
    host_id: i64,
    model: &str,
) -> AppResult<Vec<rentals::Model>> {
    let mut query = rentals::Entity::find()
        .filter(rentals::Column::HostId.eq(host_id))
        .filter(rentals::Column::GpuModel.eq(model))
        .filter(rentals::Column::Kind.eq(RentalKind::Spot.as_str()))
        .filter(
            rentals::Column::State.is_in(
                [RentalState::Requested, RentalState::Provisioning, RentalState::Running, RentalState::Preempting]
                    .map(RentalState::as_str),
            ),
        )
        .order_by_asc(rentals::Column::Id);
    if txn.get_database_backend() == DbBackend::Postgres {
        query = query.lock_exclusive();
    }
    query.all(txn).await.context("loading spot rentals")
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
    let txn = services.begin_write().await.context("starting bid change")?;
    let peek = owned_by(
        rentals::Entity::find_by_id(rental_id)
            .one(&txn)
            .await
            .context("loading rental")?
            .ok_or_else(|| AppError::not_found("rental"))?,
        principal,
    )?;
    // The host's spot rentals are repriced below: take their locks first, in their order.
    lock_spot_rentals(&txn, peek.host_id, &peek.gpu_model).await?;
    let rental = load_for_update(&txn, rental_id).await?;
    if rental.kind != RentalKind::Spot.as_str() {
        return Err(AppError::conflict("only spot rentals have a bid"));
    }
    let state = RentalState::parse(&rental.state).unwrap_or(RentalState::Failed);
    if !matches!(state, RentalState::Requested | RentalState::Provisioning | RentalState::Running) {
        return Err(AppError::conflict(format!("a {} rental's bid can no longer change", state.as_str())));
    }
    let prices = host_prices::Entity::find()
        .filter(host_prices::Column::HostId.eq(rental.host_id))
        .filter(host_prices::Column::GpuModel.eq(&rental.gpu_model))
        .one(&txn)
        .await
        .context("loading price")?
        .ok_or_else(|| AppError::conflict("the provider no longer prices these GPUs"))?;
    check_bid(&prices, bid_micros)?;
    // Raising a bid needs what booking at it would: an hour of it in the wallet.
    if bid_micros > rental.bid_micros.unwrap_or(0) {
        let hour = cost(bid_micros, i64::from(rental.gpu_count), 3600);
        let balance = ledger::balance(&txn, Book::Wallet(rental.renter_id)).await?;
        if balance < hour {
            return Err(AppError::PaymentRequired(format!(
                "an hour at ${}/GPU-h for {} GPUs costs ${}; your balance is ${} (short by ${})",
                format_dollars(bid_micros),
                rental.gpu_count,
                format_dollars(hour),
                format_dollars(balance),
                format_dollars(hour - balance)
            )));
        }
    }
    let (host_id, model) = (rental.host_id, rental.gpu_model.clone());
    let mut update = rental.into_active_model();
    update.bid_micros = Set(Some(bid_micros));
    update.updated_at = Set(now);
    update.update(&txn).await.context("changing bid")?;
    record(&txn, rental_id, state, &format!("bid changed to ${}/GPU-h", format_dollars(bid_micros)), now).await?;
    reprice_spot(services, &txn, host_id, &model, now).await?;
    txn.commit().await.context("committing bid change")?;
    get_rental(services, principal, rental_id).await.map(|d| d.rental)
}
