//! Settlements: whole seconds since the workload was ready, charged through the ledger in the
//! same transaction as the rental's `billed_seconds`, so nothing is billed twice or skipped
//! across a crash. On-demand and spot are charged to the wallet (stopped, after a warning, when
//! it runs dry, or at a spend limit: see `caps`); reservations are paid from their prepaid
//! funds.

use super::{
    caps::{Limit, Room, affordable_seconds, duration_limit, tell_reached, warn_duration},
    pricing::cost,
    state::{apply, load_for_update, record},
    views::dto,
};
use crate::{
    AppError, AppResult, Services,
    db::DbResultExt,
    entities::{hosts, rentals},
    ledger,
    ledger::Book,
    notify::{self, Notice},
};
use cardpool_domain::{
    money::format_dollars,
    notifications::EventKind,
    offers::RentalKind,
    rentals::{Rental, RentalState},
};
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, DatabaseTransaction, EntityTrait, IntoActiveModel, QueryFilter,
    QuerySelect,
};

/// How a low-balance notice begins.
const LOW_BALANCE: &str = "Low balance:";

/// Bills `rental` up to `now` (or its billing end) inside `txn`: whole seconds since the
/// workload was ready, at its current price. On-demand and spot are charged to the wallet
/// (stopped, after a warning, when it runs dry); reservations are paid from the prepaid funds,
/// and when a reservation ends the rest is paid to the provider (window used or given up by
/// the renter) or refunded (the host failed it).
pub(super) async fn settle_in(
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
            .context("loading host")?
            .map(|h| h.provider_id)
            .ok_or(AppError::Internal)
    };
    let mut update = rental.clone().into_active_model();
    let mut charged_now = 0;
    let mut ran_dry = false;
    // The limit that stops this rental now, if one does.
    let mut reached: Option<Limit> = None;
    let mut end = now;
    if let Some(since) = rental.running_since {
        // Seconds only move back when the billing end did (an interrupted host's last
        // heartbeat): a `now` read before this rental's lock was taken may be older than the
        // settlement that went first, and is no reason to bill its seconds again.
        let elapsed = (now.max(since) - since).num_seconds().max(rental.billed_seconds);
        let mut seconds = match rental.billing_ends_at.map(|e| (e.max(since) - since).num_seconds()) {
            Some(cap) => cap.min(elapsed),
            None => elapsed,
        };
        if let (false, Some(max), Some(limit)) = (reserved, rental.max_duration_secs, duration_limit(&rental))
            && seconds >= max
        {
            seconds = max.max(rental.billed_seconds);
            reached = Some(limit);
        }
        let mut due = cost(rental.price_micros, gpus, seconds) - cost(rental.price_micros, gpus, rental.billed_seconds);
        // Pay-as-you-go is checked against its limits even with nothing due: a cap lowered to
        // what was charged stops the rental now.
        if due > 0 || (!reserved && seconds >= rental.billed_seconds) {
            if reserved {
                let due = due.min(rental.prepaid_micros - rental.charged_micros);
                if due > 0 {
                    let (reference, description) = usage_entry(&rental, seconds);
                    ledger::capture(txn, rental.renter_id, provider().await?, due, fee, reference, description).await?;
                    charged_now = due;
                }
            } else {
                let balance = ledger::balance(txn, Book::Wallet(rental.renter_id)).await?;
                let room = Room::of(txn, &rental, now).await?;
                match room.tightest() {
                    // A limit leaves less than is due, and less than the wallet holds: bill
                    // exactly the seconds it buys, and stop there.
                    Some((limit, left)) if left < due.max(1) && left < balance.max(1) => {
                        seconds =
                            affordable_seconds(rental.price_micros, gpus, rental.billed_seconds, left).min(seconds);
                        due = cost(rental.price_micros, gpus, seconds)
                            - cost(rental.price_micros, gpus, rental.billed_seconds);
                        reached = Some(limit);
                    }
                    _ => {}
                }
                charged_now = due.min(balance);
                ran_dry = due > balance;
                if charged_now > 0 {
                    let (reference, description) = usage_entry(&rental, seconds);
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
                // A low-balance warning replaces a milder notice (an idle GPU or a limit
                // warning), never itself.
                let warned = rental.notice.as_deref().is_some_and(|n| n.starts_with(LOW_BALANCE));
                if !ran_dry && state == RentalState::Running && left < warn && !warned {
                    let per_minute = cost(rental.price_micros, gpus, 60).max(1);
                    let text = format!(
                        "{LOW_BALANCE} ${} left covers about {} more minutes; top up or this rental will be stopped.",
                        format_dollars(left),
                        left / per_minute
                    );
                    record(txn, rental.id, state, &text, now).await?;
                    let notice = Notice::new(rental.renter_id, EventKind::LowBalance, "Low balance", &text)
                        .rental(rental.id)
                        .data(serde_json::json!({ "balance_micros": left }));
                    notify::emit(txn, notice, now).await?;
                    update.notice = Set(Some(text));
                    update.notice_given_at = Set(Some(now));
                } else if reached.is_none() && !ran_dry && state == RentalState::Running {
                    let warning = match room.warn(txn, &rental, charged_now, now).await? {
                        Some(text) => Some(text),
                        None => warn_duration(txn, &rental, seconds, now).await?,
                    };
                    if let Some(text) = warning.filter(|_| rental.notice.is_none()) {
                        record(txn, rental.id, state, &text, now).await?;
                        update.notice = Set(Some(text));
                        update.notice_given_at = Set(Some(now));
                    }
                }
            }
        }
        end = since + chrono::Duration::seconds(seconds);
        // Billed past a billing end that moved back (an interrupted host's last heartbeat):
        // what was charged for seconds never delivered goes back to the renter.
        let refunded = if seconds < rental.billed_seconds {
            let over = rental.charged_micros - rental.charged_micros.min(cost(rental.price_micros, gpus, seconds));
            if over > 0 {
                let to = if reserved { Book::Held(rental.renter_id) } else { Book::Wallet(rental.renter_id) };
                let reference = format!("rental-{}-refund-s{seconds}", rental.id);
                let description = format!(
                    "Rental #{}: refund of {} s billed after the host stopped answering",
                    rental.id,
                    rental.billed_seconds - seconds
                );
                ledger::refund_usage(txn, to, provider().await?, over, fee, reference, description).await?;
            }
            over
        } else {
            0
        };
        update.billed_seconds = Set(seconds);
        update.charged_micros = Set(rental.charged_micros + charged_now - refunded);
    }
    let mut rental = update.update(txn).await.context("recording billing")?;
    if ran_dry && matches!(state, RentalState::Running | RentalState::Provisioning | RentalState::Requested) {
        rental = apply(txn, rental, RentalState::Stopping, "the renter's balance ran out", now).await?;
        let mut update = rental.into_active_model();
        update.billing_ends_at = Set(Some(end));
        update.notice = Set(Some("Stopped: your balance ran out. Top up to rent again.".into()));
        rental = update.update(txn).await.context("recording billing end")?;
    } else if let Some(limit) = reached
        && matches!(state, RentalState::Running | RentalState::Provisioning | RentalState::Requested)
    {
        let (reason, text) = tell_reached(txn, &rental, limit, now).await?;
        rental = apply(txn, rental, RentalState::Stopping, &reason, now).await?;
        let mut update = rental.into_active_model();
        update.billing_ends_at = Set(Some(end));
        update.notice = Set(Some(text));
        rental = update.update(txn).await.context("recording billing end")?;
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
            rental = update.update(txn).await.context("closing reservation")?;
        }
        let mut update = rental.into_active_model();
        update.settled = Set(true);
        rental = update.update(txn).await.context("settling rental")?;
    }
    Ok(rental)
}

/// The ledger reference and description of usage billed up to `seconds`.
fn usage_entry(rental: &rentals::Model, seconds: i64) -> (String, String) {
    let reference = format!("rental-{}-s{seconds}", rental.id);
    let description = format!(
        "Rental #{}: {}× {} for {} s",
        rental.id,
        rental.gpu_count,
        rental.gpu_model,
        seconds - rental.billed_seconds
    );
    (reference, description)
}

/// Bills one rental now (the billing worker calls this for every unsettled rental).
pub async fn settle(services: &Services, rental_id: i64) -> AppResult<Rental> {
    let now = Utc::now();
    let txn = services.begin_write().await.context("starting settlement")?;
    let before = load_for_update(&txn, rental_id).await?;
    let was = before.state.clone();
    let rental = settle_in(services, &txn, before, now).await?;
    txn.commit().await.context("committing settlement")?;
    if rental.state != was {
        services.wake_host(rental.host_id);
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
        .context("finding rentals to bill")?;
    for id in &due {
        if let Err(err) = settle(services, *id).await {
            tracing::warn!(rental.id = id, error = %err, "billing a rental failed; will retry");
        }
    }
    Ok(due.len())
}
