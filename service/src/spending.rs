//! Spending against an account's limits: what it committed to rentals in the current UTC day
//! and month (usage charged to the wallet and reservations prepaid, less what came back) and
//! how much more each limit allows. Billing stops a rental at a limit (see
//! `rentals::billing`); booking refuses a rental a reached limit would stop at once.

use crate::{AppError, AppResult, Services, auth::Principal, db::DbResultExt, entities::users, ledger};
use cardpool_domain::{
    limits::{SpendLimits, SpendStatus},
    money::format_dollars,
};
use chrono::{DateTime, Datelike, Duration, TimeZone, Utc};
use sea_orm::{ActiveModelTrait, ActiveValue::Set, ConnectionTrait, EntityTrait, IntoActiveModel};

/// A limit's period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Day,
    Month,
}

impl Period {
    pub fn name(self) -> &'static str {
        match self {
            Period::Day => "daily",
            Period::Month => "monthly",
        }
    }

    /// When the period holding `now` began and when the next begins.
    pub fn bounds(self, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        let day = now.date_naive();
        let midnight = |d: chrono::NaiveDate| Utc.from_utc_datetime(&d.and_hms_opt(0, 0, 0).unwrap_or_default());
        match self {
            Period::Day => (midnight(day), midnight(day) + Duration::days(1)),
            Period::Month => {
                let first = day.with_day(1).unwrap_or(day);
                let next = if first.month() == 12 {
                    chrono::NaiveDate::from_ymd_opt(first.year() + 1, 1, 1)
                } else {
                    chrono::NaiveDate::from_ymd_opt(first.year(), first.month() + 1, 1)
                }
                .unwrap_or(first);
                (midnight(first), midnight(next))
            }
        }
    }

    /// Names the period holding `now` (`2026-12-03`, `2026-12`), for once-per-period notices.
    pub fn key(self, now: DateTime<Utc>) -> String {
        match self {
            Period::Day => now.format("%Y-%m-%d").to_string(),
            Period::Month => now.format("%Y-%m").to_string(),
        }
    }
}

/// One limit of an account and what was spent against it this period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub period: Period,
    pub limit: i64,
    pub spent: i64,
}

impl Budget {
    pub fn left(&self) -> i64 {
        (self.limit - self.spent).max(0)
    }
}

/// The account's limits with what was spent against each this period.
pub async fn budgets(conn: &impl ConnectionTrait, user: &users::Model, now: DateTime<Utc>) -> AppResult<Vec<Budget>> {
    let mut budgets = Vec::new();
    for (period, limit) in [(Period::Day, user.daily_limit_micros), (Period::Month, user.monthly_limit_micros)] {
        if let Some(limit) = limit {
            let spent = ledger::rental_spend_since(conn, user.id, period.bounds(now).0).await?;
            budgets.push(Budget { period, limit, spent });
        }
    }
    Ok(budgets)
}

/// Refuses a booking that would cost `upfront` now (a reservation's prepayment; zero for
/// pay-as-you-go) when an account limit has no room for it.
pub async fn check_booking(
    conn: &impl ConnectionTrait,
    renter: i64,
    upfront: i64,
    now: DateTime<Utc>,
) -> AppResult<()> {
    let user =
        users::Entity::find_by_id(renter).one(conn).await.context("loading account")?.ok_or(AppError::Internal)?;
    for budget in budgets(conn, &user, now).await? {
        let (_, resets) = budget.period.bounds(now);
        if budget.left() == 0 || upfront > budget.left() {
            return Err(AppError::PaymentRequired(format!(
                "your {} spend limit of ${} has ${} left (it resets {} UTC){}",
                budget.period.name(),
                format_dollars(budget.limit),
                format_dollars(budget.left()),
                resets.format("%Y-%m-%d %H:%M"),
                if upfront > 0 {
                    format!("; this reservation costs ${}", format_dollars(upfront))
                } else {
                    String::new()
                }
            )));
        }
    }
    Ok(())
}

fn status(user: &users::Model, today: i64, month: i64, now: DateTime<Utc>) -> SpendStatus {
    SpendStatus {
        limits: SpendLimits {
            daily_limit_micros: user.daily_limit_micros,
            monthly_limit_micros: user.monthly_limit_micros,
        },
        spent_today_micros: today,
        spent_this_month_micros: month,
        day_resets_at: Period::Day.bounds(now).1,
        month_resets_at: Period::Month.bounds(now).1,
    }
}

/// The caller's limits and spending.
pub async fn spend_status(services: &Services, principal: &Principal) -> AppResult<SpendStatus> {
    let now = Utc::now();
    let user = users::Entity::find_by_id(principal.user_id)
        .one(&services.db)
        .await
        .context("loading account")?
        .ok_or(AppError::Unauthorized)?;
    let today = ledger::rental_spend_since(&services.db, user.id, Period::Day.bounds(now).0).await?;
    let month = ledger::rental_spend_since(&services.db, user.id, Period::Month.bounds(now).0).await?;
    Ok(status(&user, today, month, now))
}

/// Sets the caller's limits (`None`: no limit). A limit lower than what was spent already
/// stops the account's pay-as-you-go rentals at their next settlement.
pub async fn set_limits(services: &Services, principal: &Principal, limits: SpendLimits) -> AppResult<SpendStatus> {
    let limits = limits.checked()?;
    let user = users::Entity::find_by_id(principal.user_id)
        .one(&services.db)
        .await
        .context("loading account")?
        .ok_or(AppError::Unauthorized)?;
    let mut update = user.into_active_model();
    update.daily_limit_micros = Set(limits.daily_limit_micros);
    update.monthly_limit_micros = Set(limits.monthly_limit_micros);
    update.updated_at = Set(Utc::now());
    update.update(&services.db).await.context("saving spend limits")?;
    tracing::info!(user.id = principal.user_id, ?limits, "spend limits set");
    spend_status(services, principal).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_utc_days_and_calendar_months() {
        let now = Utc.with_ymd_and_hms(2026, 12, 31, 23, 59, 59).unwrap();
        assert_eq!(
            Period::Day.bounds(now),
            (Utc.with_ymd_and_hms(2026, 12, 31, 0, 0, 0).unwrap(), Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap())
        );
        assert_eq!(Period::Month.bounds(now).0, Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap());
        assert_eq!(Period::Month.bounds(now).1, Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap());
        assert_eq!(Period::Month.key(now), "2026-12");
    }
}
