//! Admins over rentals, on both backends: the list filters by state, kind, host, renter and
//! day; a refund goes through the ledger split as the charge was, is bounded by what the rental
//! charged, writes one audit line and changes nothing when refused; and the revenue and
//! occupancy report adds up to the ledger and to the GPU-time billed and online.

use crate::rentals::{backdate, market, report, request, spot};
use cardpool_domain::{
    AppError,
    admin::{AdminRentalQuery, AuditQuery, RentalRefundRequest},
    rentals::RentalState,
    reports::{Period, ReportQuery},
};
use cardpool_protocol::WorkloadStatus;
use cardpool_service::{
    Services, accounts, admin,
    auth::Principal,
    backend_tests,
    entities::host_events,
    ledger::{self, Book},
    payments, rentals,
    testing::{self, Backend},
};
use chrono::{Duration, Utc};
use sea_orm::{ActiveModelTrait, ActiveValue::Set};

backend_tests!(
    rentals_are_listed_by_filter_and_refunded_through_the_ledger,
    the_report_adds_up_to_the_ledger_and_the_gpu_time,
);

async fn boss(services: &Services) -> Principal {
    accounts::create_admin(services, "boss@example.com", Some("boss password 123")).await.unwrap();
    accounts::principal_for_email(services, "boss@example.com").await.unwrap()
}

async fn listed(services: &Services, boss: &Principal, query: AdminRentalQuery) -> Vec<i64> {
    admin::rentals::list(services, boss, &query).await.unwrap().rentals.iter().map(|r| r.id).collect()
}

/// Books `gpus` GPUs for `renter`, runs them for `secs` seconds and stops them, settled.
async fn ran(services: &Services, renter: &Principal, host_id: i64, gpus: u32, secs: i64) -> i64 {
    let rental = rentals::book_offer(services, renter, &request(host_id, gpus)).await.unwrap();
    report(services, host_id, rental.id, WorkloadStatus::Ready).await;
    backdate(services, rental.id, secs).await;
    rentals::stop_rental(services, renter, rental.id).await.unwrap();
    report(services, host_id, rental.id, WorkloadStatus::Exited { code: None }).await;
    rentals::settle(services, rental.id).await.unwrap();
    rental.id
}

fn refund(amount: &str, reason: &str) -> RentalRefundRequest {
    RentalRefundRequest { amount: amount.into(), reason: reason.into() }
}

async fn rentals_are_listed_by_filter_and_refunded_through_the_ledger(backend: Backend) {
    let (_db, services, provider, host_id) = market(backend, 4).await;
    let boss = boss(&services).await;
    let ada = testing::renter(&services, "ada@example.com").dollars(100).await;
    let bob = testing::renter(&services, "bob@example.com").dollars(100).await;
    let ended = ran(&services, &ada, host_id, 2, 3_600).await;
    let live = rentals::book_offer(&services, &bob, &spot(host_id, 1, 1_000_000)).await.unwrap().id;

    // Filters.
    let all = |q: AdminRentalQuery| listed(&services, &boss, q);
    assert_eq!(all(AdminRentalQuery::default()).await, vec![live, ended], "newest first");
    assert_eq!(all(AdminRentalQuery { state: Some("ended".into()), ..Default::default() }).await, vec![ended]);
    assert_eq!(all(AdminRentalQuery { kind: Some("spot".into()), ..Default::default() }).await, vec![live]);
    assert_eq!(all(AdminRentalQuery { renter: Some("ADA@".into()), ..Default::default() }).await, vec![ended]);
    assert_eq!(all(AdminRentalQuery { renter_id: Some(bob.user_id), ..Default::default() }).await, vec![live]);
    assert_eq!(all(AdminRentalQuery { host_id: Some(host_id + 1), ..Default::default() }).await, Vec::<i64>::new());
    let today = Utc::now().date_naive();
    let (yesterday, tomorrow) = ((today - Duration::days(1)).to_string(), (today + Duration::days(1)).to_string());
    assert_eq!(all(AdminRentalQuery { until: Some(yesterday.clone()), ..Default::default() }).await, Vec::<i64>::new());
    let window =
        AdminRentalQuery { since: Some(yesterday.clone()), until: Some(tomorrow.clone()), ..Default::default() };
    assert_eq!(all(window).await.len(), 2);
    let page = admin::rentals::list(
        &services,
        &boss,
        &AdminRentalQuery { per_page: Some(1), page: Some(2), ..Default::default() },
    )
    .await
    .unwrap();
    assert_eq!((page.total, page.rentals.len(), page.rentals[0].id), (2, 1, ended));
    let bad = AdminRentalQuery {
        state: Some("sleeping".into()),
        kind: Some("forever".into()),
        since: Some(tomorrow),
        until: Some(yesterday),
        per_page: Some(0),
        ..Default::default()
    };
    let err = admin::rentals::list(&services, &boss, &bad).await.unwrap_err();
    for field in ["state", "kind", "until", "per_page"] {
        assert!(err.field(field).is_some(), "{field}: {err:?}");
    }
    let refused = admin::rentals::list(&services, &ada, &AdminRentalQuery::default()).await;
    assert!(matches!(refused, Err(AppError::Forbidden(_))), "{refused:?}");

    // The refund: bounded by what the rental charged, split as the charge was.
    let row = &admin::rentals::list(
        &services,
        &boss,
        &AdminRentalQuery { renter_id: Some(ada.user_id), ..Default::default() },
    )
    .await
    .unwrap()
    .rentals[0];
    assert_eq!(row.state, RentalState::Ended);
    let charged = row.charged_micros;
    assert!(charged >= rentals::cost(2_000_000, 2, 3_600), "{charged}");
    assert_eq!(row.refundable_micros(), charged);
    let balances = || async {
        (
            ledger::balance(&services.db, Book::Wallet(ada.user_id)).await.unwrap(),
            ledger::balance(&services.db, Book::Earnings(provider.user_id)).await.unwrap(),
            ledger::balance(&services.db, Book::PlatformFees).await.unwrap(),
        )
    };
    let audit_lines = || async {
        let query = AuditQuery { subject_kind: Some("rental".into()), subject_id: Some(ended), ..Default::default() };
        admin::audit::list(&services, &boss, &query).await.unwrap().entries
    };
    let before = balances().await;
    for (who, request, field) in [
        (&boss, refund("0", "goodwill"), Some("amount")),
        (&boss, refund("ten", "goodwill"), Some("amount")),
        (&boss, refund("1.00", "  "), Some("reason")),
        (&boss, refund(&format!("{}.01", charged / 1_000_000 + 1), "too much"), Some("amount")),
        (&ada, refund("1.00", "refund myself"), None),
    ] {
        let err = admin::rentals::refund(&services, who, ended, &request).await.unwrap_err();
        match field {
            Some(field) => assert!(err.field(field).is_some(), "{field}: {err:?}"),
            None => assert!(matches!(err, AppError::Forbidden(_)), "{err:?}"),
        }
    }
    assert_eq!(balances().await, before, "a refused refund moves nothing");
    assert!(audit_lines().await.is_empty());
    let missing = admin::rentals::refund(&services, &boss, live + 100, &refund("1", "no such")).await;
    assert!(matches!(missing, Err(AppError::NotFound(_))), "{missing:?}");

    let refunded =
        admin::rentals::refund(&services, &boss, ended, &refund("2.50", "the GPU ran throttled")).await.unwrap();
    assert_eq!(refunded.refunded_micros, 2_500_000);
    let (share, fee) = ledger::split_fee(2_500_000, 1000);
    let after = balances().await;
    assert_eq!(after, (before.0 + 2_500_000, before.1 - share, before.2 - fee));
    let lines = audit_lines().await;
    assert_eq!(lines.len(), 1);
    assert_eq!((lines[0].action.as_str(), lines[0].reason.as_str()), ("rental.refund", "the GPU ran throttled"));
    let line: serde_json::Value = serde_json::from_str(lines[0].after.as_deref().unwrap()).unwrap();
    assert_eq!(line["refunded_micros"], 2_500_000);
    let adjustments = payments::list_adjustments(&services, &boss).await.unwrap();
    assert!(
        adjustments
            .iter()
            .any(|a| a.kind == "rental_refund" && a.amount_micros == 2_500_000 && a.account_email == "ada@example.com"),
        "{adjustments:?}"
    );
    // What is left, and not a micro-dollar more.
    let rest = cardpool_domain::money::format_dollars(charged - 2_500_000);
    let one_more = cardpool_domain::money::format_dollars(charged - 2_500_000 + 1);
    let over = admin::rentals::refund(&services, &boss, ended, &refund(&one_more, "a bit more")).await.unwrap_err();
    assert!(over.field("amount").is_some(), "{over:?}");
    let all_of_it = admin::rentals::refund(&services, &boss, ended, &refund(&rest, "the rest")).await.unwrap();
    assert_eq!(all_of_it.refundable_micros(), 0);
    let none_left = admin::rentals::refund(&services, &boss, ended, &refund("0.01", "once more")).await.unwrap_err();
    assert!(none_left.field("amount").unwrap().contains("$0.00"), "{none_left:?}");
    assert_eq!(balances().await.0, before.0 + charged);
    assert_eq!(audit_lines().await.len(), 2);
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

async fn the_report_adds_up_to_the_ledger_and_the_gpu_time(backend: Backend) {
    let (_db, services, _provider, host_id) = market(backend, 4).await;
    let boss = boss(&services).await;
    let ada = testing::renter(&services, "ada@example.com").dollars(100).await;
    let now = Utc::now();
    // The host has been up for 2 hours, but for half an hour of it.
    for (status, ago) in [("online", 120), ("offline", 90), ("online", 60)] {
        host_events::ActiveModel {
            host_id: Set(host_id),
            status: Set(status.into()),
            reason: Set("test history".into()),
            at: Set(now - Duration::minutes(ago)),
            ..Default::default()
        }
        .insert(&services.db)
        .await
        .unwrap();
    }
    let first = ran(&services, &ada, host_id, 2, 1_800).await;
    let second = ran(&services, &ada, host_id, 1, 600).await;
    admin::rentals::refund(&services, &boss, first, &RentalRefundRequest { amount: "1".into(), reason: "slow".into() })
        .await
        .unwrap();

    let query = ReportQuery { period: Some("day".into()), buckets: Some(3) };
    let report = admin::reports::report(&services, &boss, &query).await.unwrap();
    assert_eq!(report.period, Period::Day);
    assert_eq!(report.buckets.len(), 3);
    assert!(report.buckets.windows(2).all(|w| w[0].end == w[1].start));
    let total = report.totals();
    let (mut charged, mut billed) = (0, 0);
    for id in [first, second] {
        let row = rentals::get_rental(&services, &ada, id).await.unwrap().rental;
        charged += row.charged_micros;
        billed += i64::from(row.gpu_count) * row.billed_seconds;
    }
    assert_eq!(total.gross_micros, charged);
    assert_eq!(total.refunds_micros, 1_000_000);
    assert_eq!(total.fees_micros, ledger::balance(&services.db, Book::PlatformFees).await.unwrap());
    assert_eq!(total.fees_micros, ledger::split_fee(charged, 1000).1 - ledger::split_fee(1_000_000, 1000).1);
    assert_eq!(total.rented_gpu_seconds, billed);
    // 4 GPUs online for 90 of the last 120 minutes, and the seconds the test took. The
    // host's own enrollment (offline, then online a few milliseconds later when it heartbeat)
    // sits in that last stretch; counted on whole seconds, that gap can cost one second.
    let online = total.online_gpu_seconds;
    assert!((4 * (90 * 60 - 1)..4 * 90 * 60 + 4 * 120).contains(&online), "{online}");
    let occupancy = total.occupancy_bps();
    let expected = billed * 10_000 / (4 * 90 * 60);
    assert!((expected - 20..=expected + 1).contains(&occupancy), "{occupancy} vs {expected}");

    // Weeks and months hold the same totals; bad queries and non-admins are refused.
    for period in ["week", "month"] {
        let query = ReportQuery { period: Some(period.into()), buckets: Some(2) };
        let other = admin::reports::report(&services, &boss, &query).await.unwrap().totals();
        assert_eq!(
            (other.gross_micros, other.fees_micros, other.rented_gpu_seconds),
            (charged, total.fees_micros, billed)
        );
    }
    let bad =
        admin::reports::report(&services, &boss, &ReportQuery { period: Some("year".into()), buckets: None }).await;
    assert!(bad.unwrap_err().field("period").is_some());
    let bad = admin::reports::report(&services, &boss, &ReportQuery { period: None, buckets: Some(0) }).await;
    assert!(bad.unwrap_err().field("buckets").is_some());
    let refused = admin::reports::report(&services, &ada, &ReportQuery::default()).await;
    assert!(matches!(refused, Err(AppError::Forbidden(_))), "{refused:?}");
}
