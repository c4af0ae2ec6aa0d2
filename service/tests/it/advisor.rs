//! The cost advisor over a recorded market, on both backends: the spot price history and the
//! preemptions it reads from the database are the ones it reports, and its mix follows them
//! (spot for a checkpointed job on a calm market; reserved once preemptions make spot a loss;
//! no spot for a job that cannot stop).

use crate::rentals::market;
use cardpool_domain::{AppError, advisor::AdviceRequest, offers::RentalKind};
use cardpool_service::{
    advisor, backend_tests,
    entities::{rentals, spot_prices},
    testing::{self, Backend},
};
use chrono::{Duration, Utc};
use sea_orm::{ActiveValue::Set, EntityTrait};

/// `runs` spot rentals of the offer that ran `hours` each, the first `preempted` of them preempted.
async fn spot_history(
    services: &cardpool_service::Services,
    host_id: i64,
    renter: i64,
    runs: u32,
    hours: i64,
    preempted: u32,
) {
    let now = Utc::now();
    for i in 0..runs {
        let state = if i < preempted { "preempted" } else { "ended" };
        rentals::Entity::insert(rentals::ActiveModel {
            renter_id: Set(renter),
            host_id: Set(host_id),
            gpu_model: Set(testing::TEST_GPU_MODEL.into()),
            gpu_count: Set(1),
            kind: Set("spot".into()),
            state: Set(state.into()),
            price_micros: Set(800_000),
            workload: Set("{}".into()),
            starts_at: Set(now - Duration::days(2)),
            ends_at: Set(Some(now - Duration::days(1))),
            created_at: Set(now - Duration::days(2)),
            updated_at: Set(now - Duration::days(1)),
            billed_seconds: Set(hours * 3600),
            charged_micros: Set(8_000_000),
            settled: Set(true),
            prepaid_micros: Set(0),
            stop_when_idle: Set(false),
            ..Default::default()
        })
        .exec(&services.db)
        .await
        .unwrap();
    }
}

async fn the_advisor_reads_the_recorded_market_and_follows_it(backend: Backend) {
    let (_db, services, _, host_id) = market(backend, 4).await;
    let renter = testing::renter(&services, "renter@example.com").await;
    let now = Utc::now();
    // Spot cleared at $0.80 for six days, then $2.00 for a day (time-weighted: $0.97).
    for (days_ago, price) in [(8, 800_000), (1, 2_000_000)] {
        spot_prices::Entity::insert(spot_prices::ActiveModel {
            host_id: Set(host_id),
            gpu_model: Set(testing::TEST_GPU_MODEL.into()),
            price_micros: Set(price),
            at: Set(now - Duration::days(days_ago)),
            ..Default::default()
        })
        .exec(&services.db)
        .await
        .unwrap();
    }
    spot_history(&services, host_id, renter.user_id, 10, 10, 1).await;
    let job = AdviceRequest {
        host_id,
        gpu_model: testing::TEST_GPU_MODEL.into(),
        gpus: 2,
        hours: 10,
        deadline_hours: 24,
        interruptible: true,
        checkpoint_minutes: 30,
    };
    let calm = advisor::advise(&services, &job).await.unwrap();
    assert_eq!(calm.parts.iter().map(|p| (p.kind, p.hours)).collect::<Vec<_>>(), [(RentalKind::Spot, 10)], "{calm:?}");
    assert!(
        calm.basis.iter().any(|b| b.contains("1 of its spot rentals were preempted in 100 rental-hours")),
        "{calm:?}"
    );
    assert!(calm.basis.iter().any(|b| b.contains("percentile $0.80–$2.00")), "{calm:?}");
    assert!(calm.saving_micros > 0 && calm.all_on_demand_micros == 40_000_000, "{calm:?}");
    // Then 80 runs preempted within their first hour: with 4-hour checkpoints spot is a loss
    // (about $1.78 per useful hour against $1.60 reserved); reserve.
    spot_history(&services, host_id, renter.user_id, 80, 1, 80).await;
    let stormy = advisor::advise(&services, &AdviceRequest { checkpoint_minutes: 240, ..job.clone() }).await.unwrap();
    assert_eq!(
        stormy.parts.iter().map(|p| (p.kind, p.hours)).collect::<Vec<_>>(),
        [(RentalKind::Reserved, 10)],
        "{stormy:?}"
    );
    assert_eq!(stormy.expected_micros, 32_000_000);
    let steady = advisor::advise(&services, &AdviceRequest { interruptible: false, ..job.clone() }).await.unwrap();
    assert!(steady.parts.iter().all(|p| p.kind != RentalKind::Spot));
    // Bad jobs and unknown offers are refused.
    let late = AdviceRequest { deadline_hours: 5, ..job.clone() };
    assert!(matches!(advisor::advise(&services, &late).await, Err(AppError::Validation { .. })));
    let nowhere = AdviceRequest { host_id: host_id + 100, ..job };
    assert!(matches!(advisor::advise(&services, &nowhere).await, Err(AppError::NotFound(_))));
}

backend_tests!(the_advisor_reads_the_recorded_market_and_follows_it);
