//! The cost advisor: for a job on one offer, the mix of reserved, on-demand and spot capacity
//! that is cheapest in expectation while still meeting the deadline, from the offer's prices,
//! its spot clearing-price history (the last 7 days, time-weighted) and how often its spot
//! rentals were preempted (the last 30 days).
//!
//! The rule ([`recommend`], a pure function so it is tested on recorded histories):
//! - Spot is used only for an interruptible job and only when its price after rework (each
//!   preemption loses half a checkpoint interval and a restart) beats the reliable price.
//! - The reliable part is reserved when that is cheaper than on-demand and GPUs are free,
//!   otherwise on-demand.
//! - Spot takes as much of the work as the deadline's slack can absorb even in a bad run (the
//!   90th percentile of preemptions); the rest runs on the reliable part.
//!
//! Preemptions are counted per hour of spot rental with a prior of one per 24 hours, so an
//! offer without history is not mistaken for a safe one. All arithmetic is in integers (micro-
//! dollars, seconds, thousandths): money never becomes a float. Costs are estimates, so they
//! are given to the cent.

use crate::{
    AppError, AppResult, Services,
    db::DbResultExt,
    entities::{rentals, spot_prices},
    offers,
};
use cardpool_domain::{
    advisor::{Advice, AdvicePart, AdviceRequest},
    money::{MICROS_PER_CENT, format_dollars},
    offers::RentalKind,
    rentals::RentalState,
};
use chrono::{DateTime, Duration, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

/// The spot price window.
const PRICE_DAYS: i64 = 7;
/// The preemption history window.
const PREEMPTION_DAYS: i64 = 30;
/// What restarting after a preemption costs, seconds (reschedule, load the checkpoint).
const RESTART_SECS: i64 = 300;
/// The prior: one preemption per this many seconds of spot rental, added to the history.
const PRIOR_SECS: i64 = 24 * 3600;

/// What the advisor knows of one offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Market {
    pub on_demand_micros: i64,
    pub reserved_micros: i64,
    /// The spot clearing price now.
    pub spot_now_micros: i64,
    pub gpus_free: u32,
    /// Clearing prices and the time each held, seconds, over the window.
    pub spot_prices: Vec<(i64, i64)>,
    /// Seconds its spot rentals ran, and how many of them were preempted.
    pub spot_run_secs: i64,
    pub preemptions: i64,
}

/// The time-weighted mean and the 10th and 90th percentiles of `prices` (price, seconds held).
fn price_stats(prices: &[(i64, i64)], now: i64) -> (i64, i64, i64) {
    let total: i64 = prices.iter().map(|(_, secs)| secs.max(&0)).sum();
    if total == 0 {
        return (now, now, now);
    }
    let mean = i64::try_from(
        prices.iter().map(|(p, s)| i128::from(*p) * i128::from((*s).max(0))).sum::<i128>() / i128::from(total),
    )
    .unwrap_or(now);
    let mut sorted = prices.to_vec();
    sorted.sort_unstable();
    let percentile = |per: i64| {
        let mut seen = 0;
        for (price, secs) in &sorted {
            seen += secs.max(&0);
            if seen * 100 >= total * per {
                return *price;
            }
        }
        sorted.last().map_or(now, |(p, _)| *p)
    };
    (mean, percentile(10), percentile(90))
}

/// Thousandths of preemptions expected over `secs` of spot running.
fn expected_preemptions_milli(market: &Market, secs: i64) -> i64 {
    let rate_num = i128::from(market.preemptions.max(0) + 1) * 1000;
    let rate_den = i128::from(market.spot_run_secs.max(0) + PRIOR_SECS);
    i64::try_from(rate_num * i128::from(secs) / rate_den).unwrap_or(i64::MAX)
}

/// A Poisson count's 10th and 90th percentiles, thousandths, by the normal approximation.
fn preemption_spread_milli(expected_milli: i64) -> (i64, i64) {
    let sd_milli = i64::try_from((i128::from(expected_milli.max(0)) * 1000).isqrt()).unwrap_or(0);
    ((expected_milli - sd_milli * 128 / 100).max(0), expected_milli + sd_milli * 128 / 100 + 1000)
}

/// Seconds of work a preemption loses when the spot part runs `spot_secs`.
fn loss_secs(checkpoint_minutes: u32, spot_secs: i64) -> i64 {
    if checkpoint_minutes == 0 {
        spot_secs / 2 + RESTART_SECS
    } else {
        i64::from(checkpoint_minutes) * 30 + RESTART_SECS
    }
}

fn micros(price: i64, gpus: u32, secs: i64) -> i64 {
    i64::try_from(i128::from(price) * i128::from(gpus) * i128::from(secs) / 3600).unwrap_or(i64::MAX)
}

/// The mix for `job` on `market` (see the module's rule).
pub fn recommend(market: &Market, job: &AdviceRequest) -> Advice {
    let hours = i64::from(job.hours);
    let (work, slack) = (hours * 3600, i64::from(job.deadline_hours.saturating_sub(job.hours)) * 3600);
    let reservable = market.gpus_free >= job.gpus && market.reserved_micros < market.on_demand_micros;
    let (steady_kind, steady_price) = if reservable {
        (RentalKind::Reserved, market.reserved_micros)
    } else {
        (RentalKind::OnDemand, market.on_demand_micros)
    };
    let (mean, p10, p90) = price_stats(&market.spot_prices, market.spot_now_micros);
    let mut basis = vec![format!(
        "On-demand ${}, reserved ${}, spot now ${} per GPU-hour; {} of these GPUs free now.",
        format_dollars(market.on_demand_micros),
        format_dollars(market.reserved_micros),
        format_dollars(market.spot_now_micros),
        market.gpus_free
    )];
    if market.spot_prices.len() > 1 {
        basis.push(format!(
            "Spot cleared at ${} on average over the last {PRICE_DAYS} days (10th–90th percentile ${}–${}).",
            format_dollars(mean),
            format_dollars(p10),
            format_dollars(p90)
        ));
    } else {
        basis.push(format!("Spot held at ${} over the last {PRICE_DAYS} days.", format_dollars(mean)));
    }
    basis.push(format!(
        "{} of its spot rentals were preempted in {} rental-hours over {PREEMPTION_DAYS} days (planned with one more per 24 h, so little history is not taken for safety).",
        market.preemptions,
        market.spot_run_secs / 3600
    ));
    // The most spot work the slack absorbs in a bad run, and whether spot pays at all.
    let mut spot_secs = 0;
    if job.interruptible {
        let loss = loss_secs(job.checkpoint_minutes, work);
        let per_hour_after_rework = i64::try_from(
            i128::from(mean) * i128::from(3600 + expected_preemptions_milli(market, 3600) * loss / 1000) / 3600,
        )
        .unwrap_or(i64::MAX);
        basis.push(format!(
            "Each preemption costs about {} minutes of rework ({}), so spot comes to ${} per useful GPU-hour.",
            loss / 60,
            if job.checkpoint_minutes == 0 {
                "no checkpoints: half the run so far".to_owned()
            } else {
                format!("half a {}-minute checkpoint interval and a restart", job.checkpoint_minutes)
            },
            format_dollars(per_hour_after_rework)
        ));
        if per_hour_after_rework < steady_price {
            for hours_on_spot in (1..=hours).rev() {
                let secs = hours_on_spot * 3600;
                let (_, bad) = preemption_spread_milli(expected_preemptions_milli(market, secs));
                if bad * loss_secs(job.checkpoint_minutes, secs) / 1000 <= slack {
                    spot_secs = secs;
                    break;
                }
            }
            if spot_secs < work {
                basis.push(format!(
                    "The deadline leaves {} h of slack: {} of the {} hours go on spot, so even a bad run (90th percentile of preemptions) finishes in time.",
                    slack / 3600,
                    spot_secs / 3600,
                    hours
                ));
            }
        } else {
            basis
                .push(format!("That is no cheaper than {}: spot is not used.", steady_kind.as_str().replace('_', "-")));
        }
    } else {
        basis.push("The job cannot be interrupted: no spot.".into());
    }
    let mut parts = Vec::new();
    let (mut expected, mut low, mut high, mut wall) = (0i64, 0i64, 0i64, 0i64);
    if spot_secs > 0 {
        let loss = loss_secs(job.checkpoint_minutes, spot_secs);
        let expect = expected_preemptions_milli(market, spot_secs);
        let (good, bad) = preemption_spread_milli(expect);
        let cost = micros(mean, job.gpus, spot_secs + expect * loss / 1000);
        expected += cost;
        low += micros(p10, job.gpus, spot_secs + good * loss / 1000);
        high += micros(p90, job.gpus, spot_secs + bad * loss / 1000);
        wall += spot_secs + expect * loss / 1000;
        parts.push(AdvicePart {
            kind: RentalKind::Spot,
            hours: u32::try_from(spot_secs / 3600).unwrap_or(0),
            expected_micros: cost,
            why: format!(
                "bid at least ${}/GPU-h; checkpoint and resume when preempted",
                format_dollars(p90.max(market.spot_now_micros))
            ),
        });
    }
    let steady_secs = work - spot_secs;
    if steady_secs > 0 {
        let cost = micros(steady_price, job.gpus, steady_secs);
        expected += cost;
        low += cost;
        high += cost;
        wall += steady_secs;
        let why = match steady_kind {
            RentalKind::Reserved => "reserved: cheaper than on-demand, and it cannot be preempted".to_owned(),
            _ if market.reserved_micros < market.on_demand_micros => {
                "on-demand: not enough GPUs free to reserve them now".to_owned()
            }
            _ => "on-demand: reserving is no cheaper here".to_owned(),
        };
        parts.push(AdvicePart {
            kind: steady_kind,
            hours: u32::try_from(steady_secs / 3600).unwrap_or(0),
            expected_micros: cost,
            why,
        });
    }
    // Estimates, shown to the cent.
    let cents = |m: i64| (m + MICROS_PER_CENT / 2) / MICROS_PER_CENT * MICROS_PER_CENT;
    for part in &mut parts {
        part.expected_micros = cents(part.expected_micros);
    }
    let (expected, low, high) = (cents(expected), cents(low.min(expected)), cents(high.max(expected)));
    let all_on_demand = cents(micros(market.on_demand_micros, job.gpus, work));
    Advice {
        parts,
        expected_micros: expected,
        low_micros: low,
        high_micros: high,
        all_on_demand_micros: all_on_demand,
        saving_micros: all_on_demand - expected,
        expected_wall_hours_tenths: u32::try_from(wall / 360).unwrap_or(u32::MAX),
        basis,
    }
}

/// What the advisor knows of the offer now, read from the market and its history.
pub async fn market(services: &Services, host_id: i64, gpu_model: &str) -> AppResult<Market> {
    let detail = offers::get_offer(services, host_id, gpu_model).await?;
    let offer = detail.offer.ok_or_else(|| AppError::not_found("offer"))?;
    let now = Utc::now();
    let since = now - Duration::days(PRICE_DAYS);
    let in_force: Option<spot_prices::Model> = spot_prices::Entity::find()
        .filter(spot_prices::Column::HostId.eq(host_id))
        .filter(spot_prices::Column::GpuModel.eq(gpu_model))
        .filter(spot_prices::Column::At.lt(since))
        .order_by_desc(spot_prices::Column::At)
        .one(&services.db)
        .await
        .context("loading the spot price in force")?;
    let changes = offers::spot_price_history(services, host_id, gpu_model, since).await?;
    let mut points: Vec<(DateTime<Utc>, i64)> = in_force.map(|p| (since, p.price_micros)).into_iter().collect();
    points.extend(changes);
    let spot_prices = points
        .iter()
        .enumerate()
        .map(|(i, (at, price))| {
            let until = points.get(i + 1).map_or(now, |(next, _)| *next);
            (*price, (until - *at).num_seconds().max(0))
        })
        .collect();
    let spot: Vec<(i64, String)> = rentals::Entity::find()
        .select_only()
        .column(rentals::Column::BilledSeconds)
        .column(rentals::Column::State)
        .filter(rentals::Column::HostId.eq(host_id))
        .filter(rentals::Column::GpuModel.eq(gpu_model))
        .filter(rentals::Column::Kind.eq(RentalKind::Spot.as_str()))
        .filter(rentals::Column::CreatedAt.gte(now - Duration::days(PREEMPTION_DAYS)))
        .limit(10_000)
        .into_tuple()
        .all(&services.db)
        .await
        .context("loading spot history")?;
    Ok(Market {
        on_demand_micros: offer.on_demand_micros,
        reserved_micros: offer.reserved_micros,
        spot_now_micros: offer.spot_price_micros,
        gpus_free: offer.gpus_free,
        spot_prices,
        spot_run_secs: spot.iter().map(|(secs, _)| secs).sum(),
        preemptions: i64::try_from(spot.iter().filter(|(_, s)| s == RentalState::Preempted.as_str()).count())
            .unwrap_or(0),
    })
}

/// The advice for `job` on its offer, as it stands now.
pub async fn advise(services: &Services, job: &AdviceRequest) -> AppResult<Advice> {
    job.checked()?;
    Ok(recommend(&market(services, job.host_id, &job.gpu_model).await?, job))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(hours: u32, deadline: u32, interruptible: bool, checkpoint: u32) -> AdviceRequest {
        AdviceRequest {
            host_id: 1,
            gpu_model: "H100".into(),
            gpus: 2,
            hours,
            deadline_hours: deadline,
            interruptible,
            checkpoint_minutes: checkpoint,
        }
    }

    /// $3 on-demand, $2.40 reserved, spot a steady $1.00 for a week, 8 GPUs free.
    fn calm() -> Market {
        Market {
            on_demand_micros: 3_000_000,
            reserved_micros: 2_400_000,
            spot_now_micros: 1_000_000,
            gpus_free: 8,
            spot_prices: vec![(1_000_000, 7 * 86_400)],
            spot_run_secs: 500 * 3600,
            preemptions: 0,
        }
    }

    fn kinds(advice: &Advice) -> Vec<(RentalKind, u32)> {
        advice.parts.iter().map(|p| (p.kind, p.hours)).collect()
    }

    #[test]
    fn a_calm_spot_market_takes_an_interruptible_job_with_slack() {
        let advice = recommend(&calm(), &job(10, 24, true, 30));
        assert_eq!(kinds(&advice), [(RentalKind::Spot, 10)]);
        // 20 GPU-hours at $1 plus the expected rework of 1/524 preemptions per hour × 20 min.
        assert!((20_000_000..20_200_000).contains(&advice.expected_micros), "{advice:?}");
        assert_eq!(advice.all_on_demand_micros, 60_000_000);
        assert_eq!(advice.saving_micros, advice.all_on_demand_micros - advice.expected_micros);
        assert!(advice.low_micros <= advice.expected_micros && advice.expected_micros <= advice.high_micros);
    }

    #[test]
    fn a_job_that_cannot_stop_is_reserved_where_that_is_cheaper() {
        let advice = recommend(&calm(), &job(10, 24, false, 0));
        assert_eq!(kinds(&advice), [(RentalKind::Reserved, 10)]);
        assert_eq!(advice.expected_micros, 48_000_000);
        assert_eq!((advice.low_micros, advice.high_micros), (48_000_000, 48_000_000));
        // Too few GPUs free to reserve: on-demand.
        let busy = Market { gpus_free: 1, ..calm() };
        assert_eq!(kinds(&recommend(&busy, &job(10, 24, false, 0))), [(RentalKind::OnDemand, 10)]);
    }

    #[test]
    fn frequent_preemptions_and_rare_checkpoints_make_spot_a_loss() {
        // Preempted about every 40 minutes; a 4-hour checkpoint loses 2 h 5 min each time.
        let stormy = Market { spot_run_secs: 100 * 3600, preemptions: 150, ..calm() };
        let advice = recommend(&stormy, &job(10, 48, true, 240));
        assert_eq!(kinds(&advice), [(RentalKind::Reserved, 10)]);
        assert!(advice.basis.iter().any(|b| b.contains("spot is not used")), "{advice:?}");
        // With 10-minute checkpoints the same market is worth it again.
        let frequent = recommend(&stormy, &job(10, 48, true, 10));
        assert_eq!(frequent.parts[0].kind, RentalKind::Spot);
    }

    #[test]
    fn a_tight_deadline_keeps_only_what_its_slack_absorbs_on_spot() {
        // One preemption per ~10 h, 60-minute checkpoints (35 min lost each): 40 hours of work
        // due in 41 leaves an hour of slack, enough for a bad run of only part of it.
        let market = Market { spot_run_secs: 1_000 * 3600, preemptions: 100, ..calm() };
        let advice = recommend(&market, &job(40, 41, true, 60));
        let spot = advice.parts.iter().find(|p| p.kind == RentalKind::Spot).map_or(0, |p| p.hours);
        assert!(spot > 0 && spot < 40, "{advice:?}");
        assert_eq!(advice.parts.iter().map(|p| p.hours).sum::<u32>(), 40);
        assert!(advice.expected_wall_hours_tenths <= 410, "{advice:?}");
        // No slack at all: nothing on spot.
        let none = recommend(&market, &job(40, 40, true, 60));
        assert_eq!(kinds(&none), [(RentalKind::Reserved, 40)]);
    }

    #[test]
    fn spot_statistics_weigh_prices_by_how_long_they_held() {
        // $1 for 6 days, $4 for one: mean $1.43, p10 $1, p90 $4.
        let prices = vec![(1_000_000, 6 * 86_400), (4_000_000, 86_400)];
        assert_eq!(price_stats(&prices, 9), (1_428_571, 1_000_000, 4_000_000));
        assert_eq!(price_stats(&[], 7), (7, 7, 7));
        let spiky = Market { spot_prices: prices, ..calm() };
        let advice = recommend(&spiky, &job(10, 24, true, 30));
        assert!(advice.high_micros > 3 * advice.low_micros, "{advice:?}");
    }
}
