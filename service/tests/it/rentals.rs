//! Booking at the service level, on both backends: a storm of concurrent bookings against few
//! GPUs never gives a GPU to two rentals; stopping and ending release GPUs; the database
//! itself refuses an overlapping hold even when the service is bypassed. Then the life of a
//! rental as the agent drives it: billing to the micro-dollar, balance running out, the host
//! going offline, spot preemption and clearing prices, reservations.

use cardpool_domain::{
    AppError,
    offers::{OfferQuery, RentalKind},
    rentals::{BookOfferRequest, RentalDetail, RentalState, Workload},
};
use cardpool_protocol::{ServerMessage, WorkloadStatus};
use cardpool_service::{
    Services, Settings,
    auth::Principal,
    backend_tests, db,
    entities::{rental_gpus, rentals as rentals_rows},
    hosts,
    ledger::{self, Book},
    offers, rentals,
    testing::{self, Backend, TestDb},
};
use sea_orm::{ActiveModelTrait, ActiveValue::Set, EntityTrait, IntoActiveModel};

pub(crate) const MODEL: &str = testing::TEST_GPU_MODEL;

/// Services over a fresh database with one provider ("owner@example.com") and their listed,
/// online host of `gpus` GPUs in two NVLink islands. Keep the `TestDb`: dropping it drops the
/// database.
pub(crate) async fn market(backend: Backend, gpus: usize) -> (TestDb, Services, Principal, i64) {
    let (db, services) = testing::services(backend, Settings::default()).await;
    let provider = testing::provider(&services, "owner@example.com").await;
    let host_id = testing::host(&services, &provider, "storm").gpus(gpus).islands(2).await;
    (db, services, provider, host_id)
}

pub(crate) fn request(host_id: i64, gpu_count: u32) -> BookOfferRequest {
    BookOfferRequest {
        host_id,
        gpu_model: MODEL.into(),
        gpu_count,
        kind: RentalKind::OnDemand,
        workload: Workload { command: Some("python train.py".into()), ..Workload::default() },
        bid_micros: None,
        starts_at: None,
        hours: None,
        stop_when_idle: false,
        limits: Default::default(),
    }
}

pub(crate) fn spot(host_id: i64, gpu_count: u32, bid: i64) -> BookOfferRequest {
    BookOfferRequest { kind: RentalKind::Spot, bid_micros: Some(bid), ..request(host_id, gpu_count) }
}

/// Pretends the workload has been running for `secs` seconds.
pub(crate) async fn backdate(services: &Services, rental_id: i64, secs: i64) {
    let row = rentals_rows::Entity::find_by_id(rental_id).one(&services.db).await.unwrap().unwrap();
    let since = row.running_since.expect("running") - chrono::Duration::seconds(secs);
    let mut update = row.into_active_model();
    update.running_since = Set(Some(since));
    update.update(&services.db).await.unwrap();
}

pub(crate) async fn wallet(services: &Services, who: &Principal) -> i64 {
    ledger::balance(&services.db, Book::Wallet(who.user_id)).await.unwrap()
}

pub(crate) async fn report(services: &Services, host_id: i64, rental_id: i64, status: WorkloadStatus) {
    rentals::record_workload_status(services, host_id, rental_id, &status).await.unwrap();
}

pub(crate) async fn state_of(services: &Services, who: &Principal, rental_id: i64) -> RentalDetail {
    rentals::get_rental(services, who, rental_id).await.unwrap()
}

/// No two holds on the same GPU overlap in time: active ones, and released ones over the time
/// they really held it. Returns how many holds are active.
async fn assert_no_overlaps(services: &Services) -> usize {
    let holds: Vec<rental_gpus::Model> = rental_gpus::Entity::find().all(&services.db).await.unwrap();
    for (i, a) in holds.iter().enumerate() {
        for b in &holds[i + 1..] {
            assert!(
                a.gpu_id != b.gpu_id || a.ends_at <= b.starts_at || b.ends_at <= a.starts_at,
                "GPU {} held twice: {a:?} {b:?}",
                a.gpu_id
            );
        }
    }
    holds.iter().filter(|h| h.active).count()
}

async fn booking_storm_never_overbooks(backend: Backend) {
    let (_db, services, _, host_id) = market(backend, 8).await;
    let mut renters = Vec::new();
    for i in 0..4 {
        renters.push(testing::renter(&services, &format!("renter{i}@example.com")).dollars(1_000).await);
    }
    let attempts = 40;
    let tasks: Vec<_> = (0..attempts)
        .map(|i| {
            let services = services.clone();
            let renter = renters[i % renters.len()].clone();
            let count = 1 + (i % 3) as u32;
            tokio::spawn(
                async move { (count, rentals::book_offer(&services, &renter, &request(host_id, count)).await) },
            )
        })
        .collect();
    let (mut accepted, mut rejected, mut gpus_given) = (0, 0, 0u32);
    let mut booked = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            (count, Ok(rental)) => {
                accepted += 1;
                gpus_given += count;
                assert_eq!(rental.gpu_indexes.len(), count as usize);
                booked.push((rental.id, count));
            }
            (_, Err(AppError::Conflict(_))) => rejected += 1,
            (_, Err(other)) => panic!("unexpected failure: {other:?}"),
        }
    }
    assert_eq!(accepted + rejected, attempts);
    assert!(gpus_given <= 8, "{gpus_given} GPUs handed out of 8");
    assert!(accepted >= 1);
    assert_eq!(assert_no_overlaps(&services).await as u32, gpus_given);
    // The market shows what is left, live.
    let left: u32 =
        offers::list_offers(&services, &OfferQuery::default()).await.unwrap().offers.iter().map(|o| o.gpus_free).sum();
    assert_eq!(left, 8 - gpus_given);

    // Releases racing new bookings: the market's stock still matches the holds exactly.
    let mut tasks = Vec::new();
    for (i, (rental_id, _)) in booked.iter().enumerate() {
        let (releaser, rental_id) = (services.clone(), *rental_id);
        tasks.push(tokio::spawn(async move {
            rentals::transition(&releaser, rental_id, RentalState::Ended, "released").await.map(|_| ())
        }));
        let (services, renter) = (services.clone(), renters[i % renters.len()].clone());
        tasks.push(tokio::spawn(async move {
            match rentals::book_offer(&services, &renter, &request(host_id, 1)).await {
                Ok(_) | Err(AppError::Conflict(_)) => Ok(()),
                Err(other) => Err(other),
            }
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let held = assert_no_overlaps(&services).await as u32;
    let left: u32 =
        offers::list_offers(&services, &OfferQuery::default()).await.unwrap().offers.iter().map(|o| o.gpus_free).sum();
    assert_eq!(left, 8 - held);
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

async fn bookings_prefer_nvlink_and_release_on_end(backend: Backend) {
    let (_db, services, provider, host_id) = market(backend, 8).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(100).await;

    // GPU 0 taken alone, then 4 more: they come from the untouched island (4..8), all NVLinked.
    let one = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    assert_eq!(one.gpu_indexes, vec![0]);
    let four = rentals::book_offer(&services, &renter, &request(host_id, 4)).await.unwrap();
    assert_eq!(four.gpu_indexes, vec![4, 5, 6, 7]);
    assert_eq!(four.state, RentalState::Requested);
    let refused = rentals::book_offer(&services, &renter, &request(host_id, 4)).await.unwrap_err();
    assert_eq!(refused, AppError::conflict(format!("only 3 {MODEL} free on this host right now")));

    // Stopping goes through the machine; ending releases the GPUs.
    let stopping = rentals::stop_rental(&services, &renter, four.id).await.unwrap();
    assert_eq!(stopping.state, RentalState::Stopping);
    assert!(rentals::transition(&services, four.id, RentalState::Running, "bad").await.is_err());
    rentals::transition(&services, four.id, RentalState::Ended, "agent detached").await.unwrap();
    let again = rentals::book_offer(&services, &renter, &request(host_id, 4)).await.unwrap();
    assert_eq!(again.gpu_indexes, vec![4, 5, 6, 7]);

    // Someone else's rental is invisible to stop.
    let other = testing::renter(&services, "other@example.com").await;
    assert!(matches!(rentals::stop_rental(&services, &other, again.id).await, Err(AppError::NotFound(_))));
    // No money, no booking: the shortfall is named.
    let poor = rentals::book_offer(&services, &other, &request(host_id, 1)).await.unwrap_err();
    assert!(matches!(&poor, AppError::PaymentRequired(m) if m.contains("short by $2.00")), "{poor:?}");
    // Providers cannot rent their own hosts.
    let provider_rich = provider.clone();
    assert!(matches!(
        rentals::book_offer(&services, &provider_rich, &request(host_id, 1)).await,
        Err(AppError::Conflict(_))
    ));
}

async fn the_database_refuses_overlapping_holds(backend: Backend) {
    let (_db, services, _, host_id) = market(backend, 2).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(100).await;
    let rental = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    let held = rental_gpus::Entity::find().one(&services.db).await.unwrap().unwrap();
    // Bypass the service: insert a second hold on the same GPU over an overlapping window.
    let overlapping = rental_gpus::Entity::insert(rental_gpus::ActiveModel {
        rental_id: Set(rental.id),
        gpu_id: Set(held.gpu_id),
        starts_at: Set(held.starts_at + chrono::Duration::hours(1)),
        ends_at: Set(held.starts_at + chrono::Duration::hours(2)),
        active: Set(true),
        physical_gpu_id: Set(held.physical_gpu_id),
        slot_from: Set(held.slot_from),
        slot_to: Set(held.slot_to),
        ..Default::default()
    })
    .exec(&services.db)
    .await;
    let err = overlapping.expect_err("the database accepted an overlapping hold");
    assert!(err.to_string().contains("rental_gpus_no_overlap"), "{err}");
    // ...and the service recognises it by constraint name (PostgreSQL) / trigger (SQLite).
    assert!(db::Violation::Named("rental_gpus_no_overlap").matches(&err), "{err:?}");
    assert!(!db::Violation::Unique.matches(&err), "{err:?}");
    // An inactive (released) hold does not count.
    rental_gpus::Entity::insert(rental_gpus::ActiveModel {
        rental_id: Set(rental.id),
        gpu_id: Set(held.gpu_id),
        starts_at: Set(held.starts_at),
        ends_at: Set(held.starts_at + chrono::Duration::hours(1)),
        active: Set(false),
        physical_gpu_id: Set(held.physical_gpu_id),
        slot_from: Set(held.slot_from),
        slot_to: Set(held.slot_to),
        ..Default::default()
    })
    .exec(&services.db)
    .await
    .unwrap();
}

async fn an_on_demand_rental_runs_and_is_billed_to_the_second(backend: Backend) {
    let (_db, services, provider, host_id) = market(backend, 4).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(50).await;
    let before = wallet(&services, &renter).await;
    let rental = rentals::book_offer(&services, &renter, &request(host_id, 2)).await.unwrap();

    // The host's agent is told to attach exactly the allocated GPUs.
    let commands = rentals::commands_for_host(&services, host_id, Some(&[])).await.unwrap();
    let [ServerMessage::Attach(spec)] = commands.as_slice() else { panic!("{commands:?}") };
    assert_eq!((spec.rental_id, spec.gpu_indexes.clone()), (rental.id, rental.gpu_indexes.clone()));
    assert_eq!(spec.command.as_deref(), Some("python train.py"));

    report(&services, host_id, rental.id, WorkloadStatus::Provisioning).await;
    assert_eq!(state_of(&services, &renter, rental.id).await.rental.state, RentalState::Provisioning);
    report(&services, host_id, rental.id, WorkloadStatus::Ready).await;
    // A report from another host's agent changes nothing.
    rentals::record_workload_status(&services, host_id + 100, rental.id, &WorkloadStatus::Exited { code: Some(0) })
        .await
        .unwrap();
    let running = state_of(&services, &renter, rental.id).await.rental;
    assert_eq!(running.state, RentalState::Running);
    assert!(running.running_since.is_some());

    // 10 minutes and 7 seconds later, settled in two steps: exactly 607 s of 2 GPUs at $2/h.
    backdate(&services, rental.id, 300).await;
    rentals::settle(&services, rental.id).await.unwrap();
    backdate(&services, rental.id, 307).await;
    let stopped = rentals::stop_rental(&services, &renter, rental.id).await.unwrap();
    assert_eq!(stopped.state, RentalState::Stopping);
    let billed = stopped.billed_seconds;
    assert!((607..=608).contains(&billed), "{billed}");
    assert_eq!(stopped.charged_micros, rentals::cost(2_000_000, 2, billed));
    assert_eq!(stopped.charged_micros, 2_000_000 * 2 * billed / 3600);
    assert!(matches!(
        rentals::commands_for_host(&services, host_id, Some(&[rental.id])).await.unwrap().as_slice(),
        [ServerMessage::Detach { rental_id }] if *rental_id == rental.id
    ));
    report(&services, host_id, rental.id, WorkloadStatus::Exited { code: None }).await;
    let ended = state_of(&services, &renter, rental.id).await;
    assert_eq!(ended.rental.state, RentalState::Ended);
    // Time passing after the stop costs nothing.
    rentals::settle(&services, rental.id).await.unwrap();
    assert_eq!(state_of(&services, &renter, rental.id).await.rental.charged_micros, stopped.charged_micros);
    assert_eq!(before - wallet(&services, &renter).await, stopped.charged_micros);
    let earned = ledger::balance(&services.db, Book::Earnings(provider.user_id)).await.unwrap();
    assert_eq!(earned, ledger::split_fee(stopped.charged_micros, 1000).0);
    let states: Vec<RentalState> = ended.events.iter().map(|e| e.state).collect();
    assert_eq!(
        states,
        [
            RentalState::Requested,
            RentalState::Provisioning,
            RentalState::Running,
            RentalState::Stopping,
            RentalState::Ended
        ]
    );
    // The agent no longer runs it; a stray workload it still reports is detached.
    assert!(matches!(
        rentals::commands_for_host(&services, host_id, Some(&[rental.id])).await.unwrap().as_slice(),
        [ServerMessage::Detach { .. }]
    ));
    assert!(rentals::commands_for_host(&services, host_id, Some(&[])).await.unwrap().is_empty());
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

async fn running_out_of_money_warns_then_stops(backend: Backend) {
    let (_db, services, _, host_id) = market(backend, 1).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(3).await;
    let rental = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    report(&services, host_id, rental.id, WorkloadStatus::Ready).await;
    // After 85 minutes at $2/h, $0.17 is left: less than 10 minutes' worth → a warning.
    backdate(&services, rental.id, 85 * 60).await;
    let warned = rentals::settle(&services, rental.id).await.unwrap();
    assert_eq!(warned.state, RentalState::Running);
    assert!(warned.notice.as_deref().is_some_and(|n| n.starts_with("Low balance")), "{warned:?}");
    // After two hours the $3 is gone: charged what there was, and stopped.
    backdate(&services, rental.id, 35 * 60).await;
    let stopped = rentals::settle(&services, rental.id).await.unwrap();
    assert_eq!(stopped.state, RentalState::Stopping);
    assert_eq!(stopped.charged_micros, 3_000_000);
    assert_eq!(wallet(&services, &renter).await, 0);
    assert!(stopped.notice.unwrap().contains("balance ran out"));
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

async fn a_host_going_offline_interrupts_its_rentals(backend: Backend) {
    let (_db, services, _, host_id) = market(backend, 2).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(50).await;
    let rental = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    report(&services, host_id, rental.id, WorkloadStatus::Ready).await;
    backdate(&services, rental.id, 600).await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let marked = hosts::mark_silent_hosts_offline(&services, std::time::Duration::from_millis(500)).await.unwrap();
    assert_eq!(marked, vec![host_id]);
    let detail = state_of(&services, &renter, rental.id).await;
    assert_eq!(detail.rental.state, RentalState::Interrupted);
    // Billed up to the last heartbeat (just before the workload's backdated start + 600 s),
    // not to now (a second later).
    assert!((599..=600).contains(&detail.rental.billed_seconds), "{:?}", detail.rental);
    assert_eq!(detail.rental.charged_micros, rentals::cost(2_000_000, 1, detail.rental.billed_seconds));
    assert!(offers::list_offers(&services, &OfferQuery::default()).await.unwrap().offers.is_empty());
}

async fn revoking_a_host_ends_and_settles_its_rentals_at_once(backend: Backend) {
    let (_db, services, provider, host_id) = market(backend, 2).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(50).await;
    let rental = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    report(&services, host_id, rental.id, WorkloadStatus::Ready).await;
    backdate(&services, rental.id, 60).await;
    hosts::revoke_host(&services, &provider, host_id).await.unwrap();
    let detail = state_of(&services, &renter, rental.id).await;
    assert_eq!(detail.rental.state, RentalState::Interrupted);
    assert!(detail.events.iter().any(|e| e.reason.contains("revoked")), "{:?}", detail.events);
    // Billed to the revocation, and no further: settling again later charges nothing more.
    let charged = detail.rental.charged_micros;
    assert!((60..=62).contains(&detail.rental.billed_seconds), "{:?}", detail.rental);
    assert_eq!(charged, rentals::cost(2_000_000, 1, detail.rental.billed_seconds));
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    rentals::settle_all(&services).await.unwrap();
    assert_eq!(state_of(&services, &renter, rental.id).await.rental.charged_micros, charged);
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

async fn spot_rentals_clear_at_one_price_and_are_preempted_by_on_demand(backend: Backend) {
    let (_db, services, _, host_id) = market(backend, 2).await;
    let low = testing::renter(&services, "low@example.com").dollars(50).await;
    let high = testing::renter(&services, "high@example.com").dollars(50).await;
    let od = testing::renter(&services, "od@example.com").dollars(50).await;

    let below = rentals::book_offer(&services, &low, &spot(host_id, 1, 700_000)).await.unwrap_err();
    assert!(below.field("bid_micros").is_some_and(|m| m.contains("$0.80")), "{below:?}");
    // One GPU still free: the clearing price is the provider's minimum.
    let a = rentals::book_offer(&services, &low, &spot(host_id, 1, 1_000_000)).await.unwrap();
    assert_eq!(a.price_micros, 800_000);
    // Capacity full: everyone pays the lowest winning bid, never more than their own bid.
    let b = rentals::book_offer(&services, &high, &spot(host_id, 1, 1_500_000)).await.unwrap();
    assert_eq!(state_of(&services, &low, a.id).await.rental.price_micros, 1_000_000);
    assert_eq!(state_of(&services, &high, b.id).await.rental.price_micros, 1_000_000);
    // A lower bid cannot take GPUs from higher ones.
    let outbid = rentals::book_offer(&services, &od, &spot(host_id, 1, 900_000)).await.unwrap_err();
    assert!(matches!(outbid, AppError::Conflict(_)), "{outbid:?}");
    for r in [&a, &b] {
        report(&services, host_id, r.id, WorkloadStatus::Ready).await;
    }

    // On-demand needs one GPU: the lowest bid gets its notice; the booking starts after it.
    let booked = rentals::book_offer(&services, &od, &request(host_id, 1)).await.unwrap();
    let notified = state_of(&services, &low, a.id).await;
    assert_eq!(notified.rental.state, RentalState::Preempting);
    assert!(notified.rental.notice.as_deref().is_some_and(|n| n.starts_with("Preempted")));
    assert_eq!(state_of(&services, &high, b.id).await.rental.state, RentalState::Running);
    assert_eq!(booked.gpu_indexes, a.gpu_indexes);
    assert!(booked.starts_at >= chrono::Utc::now() + chrono::Duration::seconds(25));
    let commands = rentals::commands_for_host(&services, host_id, Some(&[a.id, b.id])).await.unwrap();
    assert!(
        commands.iter().any(|c| matches!(c, ServerMessage::PreemptNotice { rental_id, grace_secs } if *rental_id == a.id && (28..=30).contains(grace_secs))),
        "{commands:?}"
    );
    assert!(
        !commands.iter().any(|c| matches!(c, ServerMessage::Attach(_))),
        "not before the notice ends: {commands:?}"
    );
    report(&services, host_id, a.id, WorkloadStatus::Exited { code: Some(0) }).await;
    assert_eq!(state_of(&services, &low, a.id).await.rental.state, RentalState::Preempted);
    assert_no_overlaps(&services).await;
    // The price history shows the minimum, then the lowest winning bid.
    let history =
        offers::spot_price_history(&services, host_id, MODEL, chrono::Utc::now() - chrono::Duration::hours(1))
            .await
            .unwrap();
    let prices: Vec<i64> = history.iter().map(|(_, p)| *p).collect();
    assert_eq!(&prices[..2], &[800_000, 1_000_000]);
    let detail = offers::get_offer(&services, host_id, MODEL).await.unwrap();
    assert_eq!(detail.spot_prices.len(), history.len());
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

async fn reservations_are_prepaid_exclusive_and_refunded_when_cancelled(backend: Backend) {
    let (_db, services, _, host_id) = market(backend, 2).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(50).await;
    let other = testing::renter(&services, "other@example.com").dollars(50).await;
    let start = chrono::Utc::now() + chrono::Duration::hours(1);
    let reserve = |hours| BookOfferRequest {
        kind: RentalKind::Reserved,
        starts_at: Some(start),
        hours: Some(hours),
        ..request(host_id, 2)
    };
    let too_long = rentals::book_offer(&services, &renter, &reserve(0)).await.unwrap_err();
    assert!(too_long.field("hours").is_some());
    let reserved = rentals::book_offer(&services, &renter, &reserve(3)).await.unwrap();
    // 2 GPUs × 3 h × $1.60 prepaid into held funds.
    assert_eq!(wallet(&services, &renter).await, 50_000_000 - 9_600_000);
    assert_eq!(ledger::balance(&services.db, Book::Held(renter.user_id)).await.unwrap(), 9_600_000);
    // The reserved GPUs are not sold open-ended to anyone else, nor reserved twice.
    let od = rentals::book_offer(&services, &other, &request(host_id, 1)).await.unwrap_err();
    assert!(matches!(od, AppError::Conflict(_)), "{od:?}");
    assert!(rentals::book_offer(&services, &other, &BookOfferRequest { ..reserve(1) }).await.is_err());
    // A window before it is still free.
    let early = BookOfferRequest {
        kind: RentalKind::Reserved,
        starts_at: Some(chrono::Utc::now() + chrono::Duration::minutes(1)),
        hours: Some(0),
        ..request(host_id, 2)
    };
    assert!(rentals::book_offer(&services, &other, &early).await.is_err());
    // Nothing to attach before the window begins, and search shows nothing free (booking
    // would refuse it too).
    assert!(rentals::commands_for_host(&services, host_id, None).await.unwrap().is_empty());
    assert!(offers::get_offer(&services, host_id, MODEL).await.unwrap().offer.is_none());
    // Cancelled before it began: refunded in full, GPUs free again.
    let cancelled = rentals::stop_rental(&services, &renter, reserved.id).await.unwrap();
    assert_eq!(cancelled.state, RentalState::Ended);
    assert_eq!(wallet(&services, &renter).await, 50_000_000);
    assert_eq!(ledger::balance(&services.db, Book::Held(renter.user_id)).await.unwrap(), 0);
    rentals::book_offer(&services, &other, &request(host_id, 2)).await.unwrap();
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

async fn a_reserved_window_runs_ends_on_time_and_pays_the_provider(backend: Backend) {
    let (_db, services, provider, host_id) = market(backend, 2).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(50).await;
    let request = BookOfferRequest {
        kind: RentalKind::Reserved,
        starts_at: Some(chrono::Utc::now()),
        hours: Some(2),
        ..request(host_id, 1)
    };
    let rental = rentals::book_offer(&services, &renter, &request).await.unwrap();
    // The window has begun: the agent is told to attach, and the workload runs.
    let commands = rentals::commands_for_host(&services, host_id, None).await.unwrap();
    assert!(matches!(commands.as_slice(), [ServerMessage::Attach(spec)] if spec.rental_id == rental.id));
    report(&services, host_id, rental.id, WorkloadStatus::Ready).await;
    // Pretend the two hours are over: the scheduler stops it at the window's end.
    let row = rentals_rows::Entity::find_by_id(rental.id).one(&services.db).await.unwrap().unwrap();
    let end = chrono::Utc::now() - chrono::Duration::seconds(5);
    let mut update = row.into_active_model();
    update.reserved_until = Set(Some(end));
    update.running_since = Set(Some(end - chrono::Duration::hours(2)));
    update.update(&services.db).await.unwrap();
    rentals::run_schedules(&services).await.unwrap();
    let stopping = state_of(&services, &renter, rental.id).await;
    assert_eq!(stopping.rental.state, RentalState::Stopping);
    assert!(stopping.events.iter().any(|e| e.reason == "the reserved window ended"));
    assert_eq!(stopping.rental.billed_seconds, 7200);
    report(&services, host_id, rental.id, WorkloadStatus::Detached).await;
    let ended = state_of(&services, &renter, rental.id).await.rental;
    assert_eq!(ended.state, RentalState::Ended);
    // 2 h × $1.60, all from the prepaid funds, all to the provider (less the fee).
    assert_eq!(ended.charged_micros, 3_200_000);
    assert_eq!(wallet(&services, &renter).await, 50_000_000 - 3_200_000);
    assert_eq!(ledger::balance(&services.db, Book::Held(renter.user_id)).await.unwrap(), 0);
    let earned = ledger::balance(&services.db, Book::Earnings(provider.user_id)).await.unwrap();
    assert_eq!(earned, ledger::split_fee(3_200_000, 1000).0);
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

backend_tests!(
    a_reserved_window_runs_ends_on_time_and_pays_the_provider,
    booking_storm_never_overbooks,
    bookings_prefer_nvlink_and_release_on_end,
    the_database_refuses_overlapping_holds,
    an_on_demand_rental_runs_and_is_billed_to_the_second,
    running_out_of_money_warns_then_stops,
    a_host_going_offline_interrupts_its_rentals,
    revoking_a_host_ends_and_settles_its_rentals_at_once,
    spot_rentals_clear_at_one_price_and_are_preempted_by_on_demand,
    reservations_are_prepaid_exclusive_and_refunded_when_cancelled
);
