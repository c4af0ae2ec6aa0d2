//! The limits billing enforces on a pay-as-you-go rental: the account's daily and monthly spend
//! limits and the rental's own maximum cost and duration. Billing asks for the [`Room`] left
//! before charging, charges no more than it (a rental stopped at a limit is billed exactly up
//! to the second the limit buys), and tells the renter once at 80 % and once at the limit.

use super::{pricing::cost, state::owned_by};
use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::DbResultExt,
    entities::{rentals, users},
    ledger::{self, Book},
    notify::{self, Notice},
    spending::{self, Budget},
};
use cardpool_domain::{
    limits::{RentalLimits, WARN_AT_PERCENT},
    money::format_dollars,
    notifications::EventKind,
    offers::RentalKind,
    rentals::{Rental, RentalState},
};
use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ActiveValue::Set, DatabaseTransaction, EntityTrait, IntoActiveModel};

/// A limit a rental can reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Limit {
    Account(Budget),
    Cost(i64),
    Duration(i64),
}

impl Limit {
    /// `your daily spend limit ($25.00)`, `its maximum cost ($4.00)`, ...
    fn describe(self) -> String {
        match self {
            Limit::Account(b) => format!("your {} spend limit (${})", b.period.name(), format_dollars(b.limit)),
            Limit::Cost(max) => format!("its maximum cost (${})", format_dollars(max)),
            Limit::Duration(secs) => format!("its maximum duration ({})", hours(secs)),
        }
    }

    /// Names the limit for once-only notices.
    fn key(self, rental_id: i64, now: DateTime<Utc>) -> String {
        match self {
            Limit::Account(b) => format!("{}:{}", b.period.name(), b.period.key(now)),
            Limit::Cost(_) => format!("rental:{rental_id}:cost"),
            Limit::Duration(_) => format!("rental:{rental_id}:duration"),
        }
    }

    fn data(self) -> serde_json::Value {
        match self {
            Limit::Account(b) => serde_json::json!({
                "limit": format!("{}_spend", b.period.name()), "limit_micros": b.limit, "spent_micros": b.spent,
            }),
            Limit::Cost(max) => serde_json::json!({ "limit": "rental_max_cost", "limit_micros": max }),
            Limit::Duration(secs) => serde_json::json!({ "limit": "rental_max_duration", "limit_secs": secs }),
        }
    }
}

fn hours(secs: i64) -> String {
    if secs % 3600 == 0 { format!("{} h", secs / 3600) } else { format!("{} min", secs / 60) }
}

/// What the limits leave of a rental's spending, read inside the settlement's transaction.
pub(super) struct Room {
    budgets: Vec<Budget>,
    max_cost: Option<i64>,
    charged: i64,
}

impl Room {
    pub(super) async fn of(txn: &DatabaseTransaction, rental: &rentals::Model, now: DateTime<Utc>) -> AppResult<Self> {
        let user = users::Entity::find_by_id(rental.renter_id)
            .one(txn)
            .await
            .context("loading renter")?
            .ok_or(AppError::Internal)?;
        if user.daily_limit_micros.is_some() || user.monthly_limit_micros.is_some() {
            // The renter's other rentals settle one at a time from here on: each reads what
            // the last one charged, so together they cannot pass the limit (PostgreSQL; a
            // SQLite write transaction is alone anyway).
            ledger::lock(txn, Book::Wallet(rental.renter_id)).await?;
        }
        Ok(Room {
            budgets: spending::budgets(txn, &user, now).await?,
            max_cost: rental.max_cost_micros,
            charged: rental.charged_micros,
        })
    }

    /// The limit with the least left, and what it leaves.
    pub(super) fn tightest(&self) -> Option<(Limit, i64)> {
        let accounts = self.budgets.iter().map(|b| (Limit::Account(*b), b.left()));
        let rental = self.max_cost.map(|max| (Limit::Cost(max), (max - self.charged).max(0)));
        accounts.chain(rental).min_by_key(|(_, left)| *left)
    }

    /// Tells the renter, once per limit (and period), when `charged_now` brought spending to
    /// 80 % of a limit.
    pub(super) async fn warn(
        &self,
        txn: &DatabaseTransaction,
        rental: &rentals::Model,
        charged_now: i64,
        now: DateTime<Utc>,
    ) -> AppResult<Option<String>> {
        let mut near = self
            .budgets
            .iter()
            .map(|b| (Limit::Account(Budget { spent: b.spent + charged_now, ..*b }), b.spent + charged_now, b.limit))
            .collect::<Vec<_>>();
        if let Some(max) = self.max_cost {
            near.push((Limit::Cost(max), self.charged + charged_now, max));
        }
        let mut told = None;
        for (limit, spent, of) in near {
            if i128::from(spent) * 100 >= i128::from(of) * i128::from(WARN_AT_PERCENT) && spent < of {
                told = warn_once(txn, rental, limit, spent, of, now).await?.or(told);
            }
        }
        Ok(told)
    }
}

/// Tells the renter that `rental` has used `used` of `limit`'s `of`, unless this limit (in
/// this period) was told already. Returns the text when it was told now.
async fn warn_once(
    txn: &DatabaseTransaction,
    rental: &rentals::Model,
    limit: Limit,
    used: i64,
    of: i64,
    now: DateTime<Utc>,
) -> AppResult<Option<String>> {
    let percent = i128::from(used) * 100 / i128::from(of.max(1));
    let text = match limit {
        Limit::Duration(_) => format!(
            "Limit: rental #{} has run {percent} % of {}; it will be stopped there.",
            rental.id,
            limit.describe()
        ),
        _ => format!(
            "Limit: {percent} % of {} is used; rentals will be stopped when it is reached.",
            limit.describe().replace("its ", &format!("rental #{}'s ", rental.id))
        ),
    };
    let notice = Notice::new(rental.renter_id, EventKind::LimitWarning, format!("{percent} % of a limit used"), &text)
        .rental(rental.id)
        .data(limit.data())
        .once(format!("limit-warning:{}", limit.key(rental.id, now)));
    Ok(notify::emit(txn, notice, now).await?.map(|_| text))
}

/// Warns at 80 % of the rental's maximum duration (`seconds` billed of it).
pub(super) async fn warn_duration(
    txn: &DatabaseTransaction,
    rental: &rentals::Model,
    seconds: i64,
    now: DateTime<Utc>,
) -> AppResult<Option<String>> {
    match rental.max_duration_secs {
        Some(max) if i128::from(seconds) * 100 >= i128::from(max) * i128::from(WARN_AT_PERCENT) && seconds < max => {
            warn_once(txn, rental, Limit::Duration(max), seconds, max, now).await
        }
        _ => Ok(None),
    }
}

/// The most whole seconds (at least `billed`) whose cost is within `allowance` of what
/// `billed` seconds cost.
pub(super) fn affordable_seconds(price: i64, gpus: i64, billed: i64, allowance: i64) -> i64 {
    let rate = i128::from(price) * i128::from(gpus);
    if rate <= 0 {
        return i64::MAX;
    }
    let budget = i128::from(cost(price, gpus, billed)) + i128::from(allowance.max(0));
    // cost(s) = floor(rate·s / 3600) ≤ budget  ⇔  rate·s < (budget + 1)·3600.
    let most = ((budget + 1) * 3600 - 1) / rate;
    i64::try_from(most).unwrap_or(i64::MAX).max(billed)
}

/// Why a rental stopped at `limit`, for its timeline, notice and the renter's notification.
pub(super) async fn tell_reached(
    txn: &DatabaseTransaction,
    rental: &rentals::Model,
    limit: Limit,
    now: DateTime<Utc>,
) -> AppResult<(String, String)> {
    let reason = format!("the rental reached {}", limit.describe());
    let text = format!("Stopped: this rental reached {}.", limit.describe());
    let notice = Notice::new(
        rental.renter_id,
        EventKind::LimitReached,
        format!("Rental #{} stopped at a limit", rental.id),
        &text,
    )
    .rental(rental.id)
    .data(limit.data())
    .once(format!("limit-reached:rental:{}", rental.id));
    notify::emit(txn, notice, now).await?;
    Ok((reason, text))
}

/// The rental's duration cap, when it has one.
pub(super) fn duration_limit(rental: &rentals::Model) -> Option<Limit> {
    rental.max_duration_secs.map(Limit::Duration)
}

/// Changes a live pay-as-you-go rental's caps (its renter or an admin). A cap already passed
/// stops the rental at once, billed up to the cap.
pub async fn set_rental_limits(
    services: &Services,
    principal: &Principal,
    rental_id: i64,
    limits: RentalLimits,
) -> AppResult<Rental> {
    let limits = limits.checked()?;
    let txn = services.begin_write().await.context("starting limits change")?;
    let rental = owned_by(super::state::load_for_update(&txn, rental_id).await?, principal)?;
    if rental.kind == RentalKind::Reserved.as_str() {
        return Err(AppError::conflict(
            "a reservation's cost is fixed when it is booked; caps are for on-demand and spot",
        ));
    }
    if RentalState::parse(&rental.state).is_none_or(|s| s.is_terminal()) {
        return Err(AppError::conflict("this rental has ended"));
    }
    let mut update = rental.into_active_model();
    update.max_cost_micros = Set(limits.max_cost_micros);
    update.max_duration_secs = Set(limits.max_duration_secs);
    update.update(&txn).await.context("saving rental limits")?;
    txn.commit().await.context("committing limits change")?;
    tracing::info!(rental.id = rental_id, ?limits, "rental limits set");
    super::billing::settle(services, rental_id).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affordable_seconds_spend_the_allowance_and_no_more() {
        for (price, gpus, billed, allowance) in [(2_000_000, 1, 0, 1_000_000), (3_333_333, 3, 17, 12_345), (1, 1, 5, 0)]
        {
            let s = affordable_seconds(price, gpus, billed, allowance);
            assert!(cost(price, gpus, s) - cost(price, gpus, billed) <= allowance);
            assert!(cost(price, gpus, s + 1) - cost(price, gpus, billed) > allowance);
        }
        // $2/GPU-hour, $1 allowance: half an hour.
        assert_eq!(affordable_seconds(2_000_000, 1, 0, 1_000_000), 1800);
    }
}
