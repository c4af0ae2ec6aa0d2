//! Who ended a rental, and when, decides the money (issue 14's money findings), on both
//! backends: a reservation outlives its workload and is paid as its window elapses; time billed
//! past an interrupted host's last heartbeat goes back to the renter; bids are capped and
//! raising one needs the money; repricing and billing racing on a full host never bill a second
//! twice.

use crate::rentals::{backdate, market, report, request, spot, state_of, wallet};
use cardpool_domain::{
    AppError,
    offers::RentalKind,
    rentals::{BookOfferRequest, RentalState},
};
use cardpool_protocol::WorkloadStatus;
use cardpool_service::{
    backend_tests,
    entities::rentals as rentals_rows,
    ledger::{self, Book},
    rentals, testing,
    testing::Backend,
};
use chrono::{Duration, Utc};
use sea_orm::{ActiveModelTrait, ActiveValue::Set, EntityTrait, IntoActiveModel};

backend_tests!(
    a_reservation_outlives_its_workload_and_is_paid_as_it_elapses,
    time_billed_after_the_last_heartbeat_is_refunded,
    bids_are_capped_and_raising_one_needs_the_money,
    repricing_and_billing_never_bill_a_second_twice,
);

const FEE_BPS: u32 = 1000;

async fn a_reservation_outlives_its_workload_and_is_paid_as_it_elapses(backend: Backend) {
    let (_db, services, provider, host_id) = market(backend, 2).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(50).await;
    let other = testing::renter(&services, "other@example.com").dollars(50).await;
    let reserve = BookOfferRequest {
        kind: RentalKind::Reserved,
        starts_at: Some(Utc::now()),
        hours: Some(2),
        ..request(host_id, 2)
    };
    let rental = rentals::book_offer(&services, &renter, &reserve).await.unwrap();
    report(&services, host_id, rental.id, WorkloadStatus::Ready).await;
    backdate(&services, rental.id, 600).await;

    // The renter's command finishes ten minutes in (or the provider's agent says it did).
    report(&services, host_id, rental.id, WorkloadStatus::Exited { code: Some(0) }).await;
    let detail = state_of(&services, &renter, rental.id).await;
    assert_eq!(detail.rental.state, RentalState::Running, "the window is the renter's: {:?}", detail.events);
    assert!(detail.rental.notice.as_deref().is_some_and(|n| n.contains("stay reserved")), "{:?}", detail.rental);
    // Paid as it elapses: the ten minutes so far, not the whole window.
    let billed = rentals::settle(&services, rental.id).await.unwrap();
    assert!((600..=602).contains(&billed.billed_seconds), "{billed:?}");
    assert_eq!(billed.charged_micros, rentals::cost(1_600_000, 2, billed.billed_seconds));
    let earned = ledger::balance(&services.db, Book::Earnings(provider.user_id)).await.unwrap();
    assert_eq!(earned, ledger::split_fee(billed.charged_micros, FEE_BPS).0);
    // The GPUs stay held for the renter: nobody else gets them.
    let taken = rentals::book_offer(&services, &other, &request(host_id, 1)).await.unwrap_err();
    assert!(matches!(taken, AppError::Conflict(_)), "{taken:?}");
    // The agent no longer runs it, on purpose: that is no lost workload. Told twice, nothing new.
    assert!(rentals::reconcile_running(&services, host_id, &[]).await.unwrap().is_empty());
    report(&services, host_id, rental.id, WorkloadStatus::Exited { code: Some(0) }).await;
    let again = state_of(&services, &renter, rental.id).await;
    assert_eq!(again.rental.state, RentalState::Running);
    assert_eq!(again.events.len(), detail.events.len());

    // The window ends: the agent is told to let go, and the whole window is the provider's.
    let row = rentals_rows::Entity::find_by_id(rental.id).one(&services.db).await.unwrap().unwrap();
    let end = Utc::now() - Duration::seconds(5);
    let mut update = row.into_active_model();
    update.reserved_until = Set(Some(end));
    update.running_since = Set(Some(end - Duration::hours(2)));
    update.update(&services.db).await.unwrap();
    rentals::run_schedules(&services).await.unwrap();
    report(&services, host_id, rental.id, WorkloadStatus::Detached).await;
    let ended = state_of(&services, &renter, rental.id).await.rental;
    assert_eq!(ended.state, RentalState::Ended);
    assert_eq!(ended.charged_micros, 6_400_000);
    assert_eq!(wallet(&services, &renter).await, 50_000_000 - 6_400_000);
    assert_eq!(ledger::balance(&services.db, Book::Held(renter.user_id)).await.unwrap(), 0);
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());

    // A window the host fails (its agent cannot run the workload) refunds what was not delivered.
    let failing =
        rentals::book_offer(&services, &other, &BookOfferRequest { hours: Some(1), ..reserve }).await.unwrap();
    report(&services, host_id, failing.id, WorkloadStatus::Ready).await;
    backdate(&services, failing.id, 60).await;
    let reason = "the GPU fell off the bus".to_owned();
    report(&services, host_id, failing.id, WorkloadStatus::Failed { reason }).await;
    let failed = state_of(&services, &other, failing.id).await.rental;
    assert_eq!(failed.state, RentalState::Failed);
    assert_eq!(failed.charged_micros, rentals::cost(1_600_000, 2, failed.billed_seconds));
    assert_eq!(wallet(&services, &other).await, 50_000_000 - failed.charged_micros);
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

async fn time_billed_after_the_last_heartbeat_is_refunded(backend: Backend) {
    let (_db, services, _, host_id) = market(backend, 2).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(50).await;
    let rental = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    report(&services, host_id, rental.id, WorkloadStatus::Ready).await;
    backdate(&services, rental.id, 600).await;
    // The billing worker bills the ten minutes; the host had gone quiet two minutes before.
    let billed = rentals::settle(&services, rental.id).await.unwrap();
    assert!(billed.billed_seconds >= 600);
    let last_heartbeat = Utc::now() - Duration::seconds(120);
    rentals::interrupt_host(&services, host_id, Some(last_heartbeat), "the host went offline").await.unwrap();
    let interrupted = state_of(&services, &renter, rental.id).await.rental;
    assert_eq!(interrupted.state, RentalState::Interrupted);
    assert!((479..=482).contains(&interrupted.billed_seconds), "{interrupted:?}");
    assert_eq!(interrupted.charged_micros, rentals::cost(2_000_000, 1, interrupted.billed_seconds));
    assert_eq!(wallet(&services, &renter).await, 50_000_000 - interrupted.charged_micros);
    // Settling again changes nothing.
    rentals::settle_all(&services).await.unwrap();
    assert_eq!(wallet(&services, &renter).await, 50_000_000 - interrupted.charged_micros);
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

async fn bids_are_capped_and_raising_one_needs_the_money(backend: Backend) {
    let (_db, services, _, host_id) = market(backend, 2).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(1).await;
    // Above the on-demand price ($2.00) a bid buys nothing but immunity from other bids.
    for bid in [2_000_001, i64::MAX] {
        let refused = rentals::book_offer(&services, &renter, &spot(host_id, 1, bid)).await.unwrap_err();
        assert!(refused.field("bid_micros").is_some_and(|m| m.contains("$2.00")), "{refused:?}");
    }
    let rental = rentals::book_offer(&services, &renter, &spot(host_id, 1, 900_000)).await.unwrap();
    let capped = rentals::change_bid(&services, &renter, rental.id, i64::MAX).await.unwrap_err();
    assert!(capped.field("bid_micros").is_some(), "{capped:?}");
    // An hour at $1.50 is more than the $1 in the wallet.
    let poor = rentals::change_bid(&services, &renter, rental.id, 1_500_000).await.unwrap_err();
    assert!(matches!(&poor, AppError::PaymentRequired(m) if m.contains("short by $0.50")), "{poor:?}");
    let detail = state_of(&services, &renter, rental.id).await.rental;
    assert_eq!(detail.bid_micros, Some(900_000), "a refused bid changes nothing");
    // Lowering never needs money; raising within the wallet works.
    assert_eq!(rentals::change_bid(&services, &renter, rental.id, 800_000).await.unwrap().bid_micros, Some(800_000));
    assert_eq!(
        rentals::change_bid(&services, &renter, rental.id, 1_000_000).await.unwrap().bid_micros,
        Some(1_000_000)
    );
}

/// Four spot renters fill a host and keep changing their bids (each change reprices, and
/// settles, everyone's rental) while the billing worker settles them too. Whatever the
/// interleaving, each renter's wallet lost exactly what their rental says it charged, and no
/// more than its seconds can cost at the highest bid.
async fn repricing_and_billing_never_bill_a_second_twice(backend: Backend) {
    let (_db, services, _, host_id) = market(backend, 4).await;
    let mut renters = Vec::new();
    for i in 0..4 {
        let renter = testing::renter(&services, &format!("spot{i}@example.com")).dollars(100).await;
        let rental = rentals::book_offer(&services, &renter, &spot(host_id, 1, 1_000_000 + i * 10_000)).await.unwrap();
        report(&services, host_id, rental.id, WorkloadStatus::Ready).await;
        backdate(&services, rental.id, 3600).await;
        renters.push((renter, rental.id));
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(4);
    let mut tasks = Vec::new();
    for (i, (renter, id)) in renters.iter().cloned().enumerate() {
        let services = services.clone();
        tasks.push(tokio::spawn(async move {
            let mut step = 0i64;
            while std::time::Instant::now() < until {
                step += 1;
                let bid = 900_000 + (step % 7) * 50_000 + i as i64 * 1_000;
                rentals::change_bid(&services, &renter, id, bid).await.unwrap();
            }
            step
        }));
    }
    let biller = {
        let services = services.clone();
        tokio::spawn(async move {
            let mut rounds = 0;
            while std::time::Instant::now() < until {
                rentals::settle_all(&services).await.unwrap();
                rounds += 1;
            }
            rounds
        })
    };
    let mut changes = 0;
    for task in tasks {
        changes += task.await.unwrap();
    }
    let rounds = biller.await.unwrap();
    eprintln!("{changes} bid changes and {rounds} billing rounds raced");
    for (renter, id) in &renters {
        let rental = rentals::settle(&services, *id).await.unwrap();
        let spent = 100_000_000 - wallet(&services, renter).await;
        assert_eq!(spent, rental.charged_micros, "rental {id}: the wallet paid what the rental charged");
        assert!(spent <= rentals::cost(1_250_000, 1, rental.billed_seconds), "rental {id}: {spent} for {rental:?}");
        assert!(spent >= rentals::cost(800_000, 1, rental.billed_seconds), "rental {id}: {spent} for {rental:?}");
    }
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}
