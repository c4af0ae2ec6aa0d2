//! Spend limits, notifications and webhooks, on both backends: an account's daily limit warns
//! at 80 % and stops its rental billed exactly to the limit; a rental's own maximum cost and
//! duration do the same for it alone; the bell shows what happened; a webhook receives each
//! event signed, a failed delivery is retried until the receiver takes it, and a receiver that
//! never does is given up.

use crate::rentals::{backdate, market, report, request};
use cardpool_domain::{
    AppError,
    limits::{RentalLimits, SpendLimits},
    notifications::{DeliveryState, EventKind, NewWebhook, SIGNATURE_HEADER},
    offers::RentalKind,
    rentals::{BookOfferRequest, RentalState},
};
use cardpool_protocol::WorkloadStatus;
use cardpool_service::{
    Services, Settings,
    auth::Principal,
    backend_tests,
    ledger::{self, Book},
    notify::{self, delivery, webhooks::WebhookSettings},
    rentals, spending,
    testing::{self, Backend},
};
use chrono::Utc;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn events(services: &Services, who: &Principal) -> Vec<EventKind> {
    notify::list(services, who, None).await.unwrap().items.into_iter().map(|n| n.event).collect()
}

async fn a_daily_limit_warns_at_80_percent_and_stops_at_the_limit(backend: Backend) {
    let (_db, services, _, host_id) = market(backend, 2).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(100).await;
    let limits = SpendLimits { daily_limit_micros: Some(3_000_000), monthly_limit_micros: None };
    spending::set_limits(&services, &renter, limits).await.unwrap();
    let rental = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    report(&services, host_id, rental.id, WorkloadStatus::Ready).await;
    // 75 minutes at $2/h: $2.50, 83 % of the day's $3.
    backdate(&services, rental.id, 75 * 60).await;
    let warned = rentals::settle(&services, rental.id).await.unwrap();
    assert_eq!(warned.state, RentalState::Running);
    assert!(warned.notice.as_deref().is_some_and(|n| n.starts_with("Limit: 83 %")), "{warned:?}");
    assert_eq!(events(&services, &renter).await, [EventKind::LimitWarning, EventKind::RentalStateChanged]);
    // Settling again tells nothing twice.
    rentals::settle(&services, rental.id).await.unwrap();
    assert_eq!(events(&services, &renter).await.len(), 2);
    // 105 minutes would be $3.50: billed exactly the 90 minutes the limit buys, and stopped.
    backdate(&services, rental.id, 30 * 60).await;
    let stopped = rentals::settle(&services, rental.id).await.unwrap();
    assert_eq!(stopped.state, RentalState::Stopping);
    assert_eq!((stopped.billed_seconds, stopped.charged_micros), (5400, 3_000_000));
    assert!(stopped.notice.as_deref().is_some_and(|n| n.contains("daily spend limit ($3.00)")), "{stopped:?}");
    assert_eq!(ledger::balance(&services.db, Book::Wallet(renter.user_id)).await.unwrap(), 97_000_000);
    assert_eq!(events(&services, &renter).await[0], EventKind::LimitReached);
    // The stop settles at the limit; nothing more is charged after it.
    report(&services, host_id, rental.id, WorkloadStatus::Exited { code: Some(0) }).await;
    let ended = rentals::settle(&services, rental.id).await.unwrap();
    assert_eq!((ended.state, ended.charged_micros), (RentalState::Ended, 3_000_000));
    let status = spending::spend_status(&services, &renter).await.unwrap();
    assert_eq!((status.spent_today_micros, status.spent_this_month_micros), (3_000_000, 3_000_000));
    // A new rental would stop at once: refused, saying which limit and when it resets.
    let refused = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap_err();
    assert!(
        matches!(&refused, AppError::PaymentRequired(m) if m.contains("daily spend limit of $3.00")),
        "{refused:?}"
    );
    // Raising the limit lets the renter go on.
    let raised = SpendLimits { daily_limit_micros: Some(10_000_000), monthly_limit_micros: Some(50_000_000) };
    spending::set_limits(&services, &renter, raised).await.unwrap();
    rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    // Bad limits change nothing.
    let bad = SpendLimits { daily_limit_micros: Some(0), monthly_limit_micros: None };
    assert!(matches!(spending::set_limits(&services, &renter, bad).await, Err(AppError::Validation { .. })));
    let status = spending::spend_status(&services, &renter).await.unwrap();
    assert_eq!(status.limits, raised);
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

async fn a_rentals_own_caps_stop_it_alone(backend: Backend) {
    let (_db, services, _, host_id) = market(backend, 4).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(100).await;
    let capped = |limits| BookOfferRequest { limits, ..request(host_id, 1) };
    let by_cost = RentalLimits { max_cost_micros: Some(1_000_000), max_duration_secs: None };
    let by_time = RentalLimits { max_cost_micros: None, max_duration_secs: Some(3600) };
    let cost = rentals::book_offer(&services, &renter, &capped(by_cost)).await.unwrap();
    let time = rentals::book_offer(&services, &renter, &capped(by_time)).await.unwrap();
    let free = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    assert_eq!(time.limits, by_time);
    for id in [cost.id, time.id, free.id] {
        report(&services, host_id, id, WorkloadStatus::Ready).await;
    }
    // 50 minutes: the hour cap is 83 % used, the $1 cap passed ($1.67).
    for id in [cost.id, time.id, free.id] {
        backdate(&services, id, 50 * 60).await;
    }
    let cost = rentals::settle(&services, cost.id).await.unwrap();
    assert_eq!((cost.state, cost.billed_seconds, cost.charged_micros), (RentalState::Stopping, 1800, 1_000_000));
    let time = rentals::settle(&services, time.id).await.unwrap();
    assert_eq!(time.state, RentalState::Running);
    assert!(time.notice.as_deref().is_some_and(|n| n.contains("maximum duration (1 h)")), "{time:?}");
    // 70 minutes: stopped at exactly the hour, $2.00.
    backdate(&services, time.id, 20 * 60).await;
    let time = rentals::settle(&services, time.id).await.unwrap();
    assert_eq!((time.state, time.billed_seconds, time.charged_micros), (RentalState::Stopping, 3600, 2_000_000));
    // The uncapped rental runs on; a cap set now below what it cost stops it at once.
    let free = rentals::settle(&services, free.id).await.unwrap();
    assert_eq!(free.state, RentalState::Running);
    let lowered = RentalLimits { max_cost_micros: Some(free.charged_micros), max_duration_secs: None };
    let free = rentals::set_rental_limits(&services, &renter, free.id, lowered).await.unwrap();
    assert_eq!(free.state, RentalState::Stopping);
    // Caps are for pay-as-you-go; others may not touch a rental; bad caps are refused.
    let start = Utc::now() + chrono::Duration::hours(2);
    let reserved = BookOfferRequest {
        kind: RentalKind::Reserved,
        starts_at: Some(start),
        hours: Some(1),
        limits: by_cost,
        ..request(host_id, 1)
    };
    assert!(matches!(rentals::book_offer(&services, &renter, &reserved).await, Err(AppError::Validation { .. })));
    let stranger = testing::renter(&services, "stranger@example.com").await;
    let other = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    let err = rentals::set_rental_limits(&services, &stranger, other.id, by_cost).await.unwrap_err();
    assert!(matches!(err, AppError::NotFound(_)), "{err:?}");
    let bad = RentalLimits { max_cost_micros: None, max_duration_secs: Some(10) };
    assert!(matches!(
        rentals::set_rental_limits(&services, &renter, other.id, bad).await,
        Err(AppError::Validation { .. })
    ));
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

/// One request a receiver took: its headers (lower-cased names) and body.
type Received = Arc<Mutex<Vec<(Vec<(String, String)>, String)>>>;

/// A webhook receiver on a local port, answering `statuses` in turn (then 200), recording
/// what it received. Plain HTTP/1.1 over tokio, one request per connection.
async fn receiver(statuses: Vec<u16>) -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks/cardpool", listener.local_addr().unwrap());
    let received: Received = Arc::default();
    let log = received.clone();
    tokio::spawn(async move {
        let mut statuses = statuses.into_iter();
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            let (headers, body) = loop {
                let n = socket.read(&mut buf).await.unwrap();
                raw.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&raw).to_string();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let headers: Vec<(String, String)> = head
                        .lines()
                        .skip(1)
                        .filter_map(|l| l.split_once(':'))
                        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                        .collect();
                    let length: usize =
                        headers.iter().find(|(k, _)| k == "content-length").map_or(0, |(_, v)| v.parse().unwrap());
                    if body.len() >= length {
                        break (headers, body[..length].to_owned());
                    }
                }
                assert!(n > 0, "the request ended early");
            };
            log.lock().unwrap().push((headers, body));
            let status = statuses.next().unwrap_or(200);
            let answer = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
            socket.write_all(answer.as_bytes()).await.unwrap();
        }
    });
    (url, received)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    headers.iter().find(|(k, _)| k == &name.to_ascii_lowercase()).map_or("", |(_, v)| v.as_str())
}

async fn webhooks_receive_signed_events_and_failures_are_retried(backend: Backend) {
    let webhooks = WebhookSettings { allow_local_targets: true, retry_base_secs: 1, max_attempts: 2 };
    let (_db, services) =
        testing::services(backend, Settings { webhooks: webhooks.clone(), ..Settings::default() }).await;
    let provider = testing::provider(&services, "owner@example.com").await;
    let host_id = testing::host(&services, &provider, "hooks").gpus(1).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(50).await;
    let sender = delivery::Sender::new(&webhooks).unwrap();
    // One receiver fails once, then takes it; the other port answers nothing at all.
    let (url, received) = receiver(vec![500]).await;
    let hook = notify::webhooks::create(&services, &renter, &NewWebhook { url: url.clone() }).await.unwrap();
    let secret = hook.secret.clone().expect("the secret, once");
    assert!(secret.starts_with("whsec_"));
    assert_eq!(notify::webhooks::list(&services, &renter).await.unwrap()[0].secret, None);
    let dead = {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dead = NewWebhook { url: format!("http://127.0.0.1:{port}/gone") };
        notify::webhooks::create(&services, &renter, &dead).await.unwrap()
    };
    let rental = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
    report(&services, host_id, rental.id, WorkloadStatus::Ready).await;
    // The first attempt: 500 here, refused there; both wait for their retry.
    assert_eq!(delivery::deliver_due(&services, &sender).await.unwrap(), 2);
    let log = notify::webhooks::deliveries(&services, &renter, hook.id, None).await.unwrap();
    assert_eq!((log[0].state, log[0].attempts, log[0].last_status), (DeliveryState::Pending, 1, Some(500)));
    assert!(log[0].next_attempt_at.is_some_and(|at| at > Utc::now()));
    assert_eq!(delivery::deliver_due(&services, &sender).await.unwrap(), 0, "not due yet");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    delivery::deliver_due(&services, &sender).await.unwrap();
    let log = notify::webhooks::deliveries(&services, &renter, hook.id, None).await.unwrap();
    assert_eq!((log[0].state, log[0].attempts, log[0].last_status), (DeliveryState::Delivered, 2, Some(200)));
    let gone = notify::webhooks::deliveries(&services, &renter, dead.id, None).await.unwrap();
    assert_eq!((gone[0].state, gone[0].attempts), (DeliveryState::Failed, 2), "{gone:?}");
    assert!(gone[0].last_error.as_deref().is_some_and(|e| e.contains("could not connect")), "{gone:?}");
    // Both attempts carried the same event, signed with the webhook's secret.
    let got = received.lock().unwrap().clone();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1, got[1].1);
    let (headers, body) = &got[1];
    assert!(delivery::verify(&secret, header(headers, SIGNATURE_HEADER), body, Utc::now()));
    assert!(!delivery::verify(&dead.secret.clone().unwrap(), header(headers, SIGNATURE_HEADER), body, Utc::now()));
    assert_eq!(header(headers, "Cardpool-Event"), "rental.state_changed");
    let event: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(
        (event["type"].as_str(), event["data"]["state"].as_str()),
        (Some("rental.state_changed"), Some("running"))
    );
    assert_eq!(event["data"]["rental_id"], rental.id);
    // "Send test event" goes to that webhook only, and is not left unread under the bell.
    let unread = notify::list(&services, &renter, None).await.unwrap().unread;
    let test = notify::webhooks::send_test(&services, &renter, hook.id).await.unwrap();
    assert_eq!(test.state, DeliveryState::Pending);
    let again = notify::webhooks::send_test(&services, &renter, hook.id).await.unwrap_err();
    assert!(matches!(again, AppError::RateLimited { retry_after_secs: 1..=5 }), "one test per 5 s: {again:?}");
    delivery::deliver_due(&services, &sender).await.unwrap();
    assert_eq!(received.lock().unwrap().len(), 3);
    assert_eq!(notify::webhooks::deliveries(&services, &renter, dead.id, None).await.unwrap().len(), 1);
    let page = notify::list(&services, &renter, None).await.unwrap();
    assert_eq!(page.unread, unread);
    assert_eq!((page.items[0].event, page.items[0].read), (EventKind::Test, true));
    // The bell: marking read up to the newest seen.
    assert_eq!(notify::mark_read(&services, &renter, Some(page.items[0].id)).await.unwrap(), unread);
    assert_eq!(notify::unread_count(&services, &renter).await.unwrap(), 0);
    // A deleted webhook gets nothing more; another account cannot see or test one.
    let stranger = testing::renter(&services, "stranger@example.com").await;
    assert!(matches!(notify::webhooks::send_test(&services, &stranger, hook.id).await, Err(AppError::NotFound(_))));
    assert!(matches!(
        notify::webhooks::deliveries(&services, &stranger, hook.id, None).await,
        Err(AppError::NotFound(_))
    ));
    notify::webhooks::delete(&services, &renter, hook.id).await.unwrap();
    rentals::stop_rental(&services, &renter, rental.id).await.unwrap();
    assert!(matches!(notify::webhooks::send_test(&services, &renter, hook.id).await, Err(AppError::NotFound(_))));
    delivery::deliver_due(&services, &sender).await.unwrap();
    assert_eq!(received.lock().unwrap().len(), 3);
    // Old finished deliveries and old read notifications are deleted; unread ones stay.
    let long_ago = Utc::now() - chrono::Duration::days(100);
    use cardpool_service::entities::{notifications, webhook_deliveries};
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
    webhook_deliveries::Entity::update_many()
        .col_expr(webhook_deliveries::Column::CreatedAt, Expr::value(long_ago))
        .exec(&services.db)
        .await
        .unwrap();
    notifications::Entity::update_many()
        .col_expr(notifications::Column::ReadAt, Expr::value(long_ago))
        .filter(notifications::Column::ReadAt.is_not_null())
        .exec(&services.db)
        .await
        .unwrap();
    let before = notify::list(&services, &renter, None).await.unwrap();
    assert!(notify::apply_retention(&services).await.unwrap() > 0);
    let after = notify::list(&services, &renter, None).await.unwrap();
    assert_eq!(after.unread, before.unread);
    assert!(after.items.iter().all(|n| !n.read) && after.items.len() as u64 == before.unread, "{after:?}");
    assert!(notify::webhooks::deliveries(&services, &renter, dead.id, None).await.unwrap().is_empty());
    // A URL inside the platform is refused where the operator did not allow it.
    let strict = Settings::default();
    let (_db2, strict) = testing::services(backend, strict).await;
    let someone = testing::renter(&strict, "someone@example.com").await;
    let inside = NewWebhook { url: url.clone() };
    assert!(matches!(notify::webhooks::create(&strict, &someone, &inside).await, Err(AppError::Validation { .. })));
}

async fn rentals_settled_at_once_share_one_limit(backend: Backend) {
    let (_db, services, _, host_id) = market(backend, 4).await;
    let renter = testing::renter(&services, "renter@example.com").dollars(100).await;
    let limits = SpendLimits { daily_limit_micros: Some(3_000_000), monthly_limit_micros: None };
    spending::set_limits(&services, &renter, limits).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let rental = rentals::book_offer(&services, &renter, &request(host_id, 1)).await.unwrap();
        report(&services, host_id, rental.id, WorkloadStatus::Ready).await;
        // An hour each at $2/h: $6 due in all against the day's $3.
        backdate(&services, rental.id, 3600).await;
        ids.push(rental.id);
    }
    let settled = futures_util::future::join_all(ids.iter().map(|id| rentals::settle(&services, *id))).await;
    let charged: i64 = settled.into_iter().map(|r| r.unwrap().charged_micros).sum();
    assert_eq!(charged, 3_000_000, "together they spend the limit, and no more");
    assert_eq!(spending::spend_status(&services, &renter).await.unwrap().spent_today_micros, 3_000_000);
    assert!(ledger::verify(&services.db).await.unwrap().is_sound());
}

backend_tests!(
    rentals_settled_at_once_share_one_limit,
    a_daily_limit_warns_at_80_percent_and_stops_at_the_limit,
    a_rentals_own_caps_stop_it_alone,
    webhooks_receive_signed_events_and_failures_are_retried
);
