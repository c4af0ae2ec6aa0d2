//! Provider payouts end to end over HTTP, on SQLite and PostgreSQL, against the local
//! test-mode Stripe: onboarding and paying out, outages and refusals, a storm of concurrent
//! requests that may not pay out more than is available, and an answer from Stripe that
//! cannot be read (the transfer may have happened: never reversed, found and recorded).

use crate::{
    common::TestApp,
    payments::{assert_ledger_sound, failure, param, renter},
};
use cardpool_service::{
    Settings, backend_tests,
    ledger::{self, Book},
    testing::Backend,
};
use cardpool_stripe_local::InjectedFailure;
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

backend_tests!(
    provider_onboards_and_is_paid_out,
    payouts_survive_stripe_outages_and_refusals,
    concurrent_payouts_never_pay_out_more_than_is_available,
    an_unreadable_answer_leaves_the_payout_pending_until_stripe_is_asked,
);

fn no_redirects() -> Client {
    Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// Signs up a provider with `earned` micro-dollars of available earnings from a real usage
/// charge (renter credited by an admin first).
async fn provider_with_earnings(app: &TestApp, earned: i64) -> (Client, i64) {
    let provider = renter(app, "gpu-owner@example.com").await;
    let res = provider.post(app.url("/api/v1/me/provider")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    renter(app, "customer@example.com").await;
    let services = &app.services;
    let provider_id =
        cardpool_service::accounts::principal_for_email(services, "gpu-owner@example.com").await.unwrap().user_id;
    let renter_id =
        cardpool_service::accounts::principal_for_email(services, "customer@example.com").await.unwrap().user_id;
    let txn = services.begin_write().await.unwrap();
    ledger::post(
        &txn,
        ledger::Entry::new("credit", "test:seed", "seed").transfer(
            Book::PromotionalCredit,
            Book::Wallet(renter_id),
            1_000_000_000,
        ),
    )
    .await
    .unwrap();
    ledger::charge_usage(&txn, renter_id, provider_id, earned, 1000, "test:usage".into(), "usage".into())
        .await
        .unwrap();
    txn.commit().await.unwrap();
    (provider, provider_id)
}

async fn onboard(app: &TestApp, provider: &Client) {
    let res = provider.post(app.url("/api/v1/earnings/onboarding-link")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let link = res.json::<Value>().await.unwrap()["url"].as_str().unwrap().to_owned();
    assert!(link.starts_with(&app.stripe_url));
    let earnings: Value = app.get_json(provider, "/api/v1/earnings").await;
    assert_eq!(earnings["connect"], "onboarding");
    let res = no_redirects().post(&link).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    assert_eq!(res.headers()["location"], app.url("/provider/earnings?onboarding=return").as_str());
}

fn zero_hold() -> Settings {
    let mut settings = Settings::default();
    settings.payments.earnings_hold_hours = 0;
    settings
}

async fn provider_onboards_and_is_paid_out(backend: Backend) {
    let app = TestApp::spawn_with(backend, zero_hold()).await;
    let (provider, _) = provider_with_earnings(&app, 100_000_000).await; // $100 usage → $90 earned
    let earnings: Value = app.get_json(&provider, "/api/v1/earnings").await;
    assert_eq!(earnings["available_micros"], 90_000_000);
    assert_eq!(earnings["connect"], "not_started");

    // Payout before onboarding is refused.
    let res = provider.post(app.url("/api/v1/payouts")).json(&json!({})).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::CONFLICT);

    onboard(&app, &provider).await;
    let earnings: Value = app.get_json(&provider, "/api/v1/earnings").await;
    assert_eq!(earnings["connect"], "ready");
    let account = earnings["stripe_account_id"].as_str().unwrap().to_owned();

    // More than available is refused, with the figure.
    let res = provider.post(app.url("/api/v1/payouts")).json(&json!({"amount": "90.01"})).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::PAYMENT_REQUIRED);

    let res = provider.post(app.url("/api/v1/payouts")).json(&json!({"amount": "30"})).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let payout: Value = res.json().await.unwrap();
    assert_eq!(payout["status"], "paid");
    assert!(payout["stripe_transfer_id"].as_str().unwrap().starts_with("tr_"));
    let transfer = app.stripe.requests().into_iter().find(|r| r.path == "/v1/transfers").unwrap();
    assert_eq!(transfer.idempotency_key, Some(format!("payout-{}", payout["id"])));
    assert_eq!(param(&transfer, "amount"), Some("3000"));
    assert_eq!(param(&transfer, "destination"), Some(account.as_str()));

    // The rest, by default.
    let res = provider.post(app.url("/api/v1/payouts")).json(&json!({})).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let earnings: Value = app.get_json(&provider, "/api/v1/earnings").await;
    assert_eq!(earnings["available_micros"], 0);
    assert_eq!(earnings["paid_out_micros"], 90_000_000);
    assert_eq!(earnings["payouts"].as_array().unwrap().len(), 2);
    assert_ledger_sound(&app).await;
}

async fn payouts_survive_stripe_outages_and_refusals(backend: Backend) {
    let app = TestApp::spawn_with(backend, zero_hold()).await;
    let (provider, provider_id) = provider_with_earnings(&app, 50_000_000).await; // $45 earned
    onboard(&app, &provider).await;

    // Stripe unreachable: the payout is booked and stays pending, then the retry pays it once.
    app.stripe.fail_next(failure(503, "api_error", None, "Stripe is down", 4));
    let res = provider.post(app.url("/api/v1/payouts")).json(&json!({"amount": "20"})).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let payout: Value = res.json().await.unwrap();
    assert_eq!(payout["status"], "pending");
    let settled =
        cardpool_service::payouts::retry_pending_payouts(&app.services, std::time::Duration::ZERO).await.unwrap();
    assert_eq!(settled, 1);
    let transfers: Vec<_> = app
        .stripe
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/v1/transfers" && r.status == 200)
        .collect();
    assert_eq!(transfers.len(), 1);
    // Retrying again finds nothing to do.
    assert_eq!(
        cardpool_service::payouts::retry_pending_payouts(&app.services, std::time::Duration::ZERO).await.unwrap(),
        0
    );

    // Stripe refuses: the payout fails and the money returns to available earnings.
    app.stripe.fail_next(failure(400, "invalid_request_error", Some("balance_insufficient"), "Insufficient funds", 1));
    let res = provider.post(app.url("/api/v1/payouts")).json(&json!({"amount": "10"})).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let refused: Value = res.json().await.unwrap();
    assert_eq!(refused["status"], "failed");
    assert!(refused["failure_message"].as_str().unwrap().contains("Insufficient funds"));
    let earnings: Value = app.get_json(&provider, "/api/v1/earnings").await;
    assert_eq!(earnings["available_micros"], 25_000_000);
    assert_eq!(earnings["paid_out_micros"], 20_000_000);
    assert_eq!(ledger::balance(&app.services.db, Book::Earnings(provider_id)).await.unwrap(), 25_000_000);
    assert_ledger_sound(&app).await;
}

async fn concurrent_payouts_never_pay_out_more_than_is_available(backend: Backend) {
    let mut settings = Settings::default();
    settings.payments.earnings_hold_hours = 1;
    let app = TestApp::spawn_with(backend, settings).await;
    // $45 earned an hour and more ago (available), then $90 just now (held back).
    let (provider, provider_id) = provider_with_earnings(&app, 50_000_000).await;
    let services = &app.services;
    backdate_earnings(&app).await;
    let renter_id =
        cardpool_service::accounts::principal_for_email(services, "customer@example.com").await.unwrap().user_id;
    let txn = services.begin_write().await.unwrap();
    ledger::charge_usage(&txn, renter_id, provider_id, 100_000_000, 1000, "test:recent".into(), "usage".into())
        .await
        .unwrap();
    txn.commit().await.unwrap();
    onboard(&app, &provider).await;
    let earnings: Value = app.get_json(&provider, "/api/v1/earnings").await;
    assert_eq!(
        (earnings["available_micros"].as_i64(), earnings["pending_micros"].as_i64()),
        (Some(45_000_000), Some(90_000_000))
    );

    // 100 requests for $1 each at once, while another payout holds the earnings account: 45
    // are paid, the rest refused, nothing more. (Read before that lock, every one of them saw
    // $45 available and paid out.)
    let held = services.begin_write().await.unwrap();
    ledger::lock(&held, Book::Earnings(provider_id)).await.unwrap();
    let requests: Vec<_> = (0..100)
        .map(|_| {
            let provider = provider.clone();
            let url = app.url("/api/v1/payouts");
            tokio::spawn(async move { provider.post(url).json(&json!({"amount": "1"})).send().await.unwrap().status() })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    held.commit().await.unwrap();
    let mut statuses = Vec::new();
    for request in requests {
        statuses.push(request.await.unwrap());
    }
    let paid = statuses.iter().filter(|s| **s == StatusCode::CREATED).count();
    let refused = statuses.iter().filter(|s| **s == StatusCode::PAYMENT_REQUIRED).count();
    assert_eq!((paid, refused), (45, 55), "{statuses:?}");
    let earnings: Value = app.get_json(&provider, "/api/v1/earnings").await;
    assert_eq!(earnings["available_micros"], 0);
    assert_eq!(earnings["paid_out_micros"], 45_000_000);
    assert_eq!(ledger::balance(&services.db, Book::Earnings(provider_id)).await.unwrap(), 90_000_000);
    assert_ledger_sound(&app).await;
}

/// Moves everything booked so far two hours into the past (the provider's first earnings out
/// of the hold). All of it, not only the earnings: transaction ids grow with time, and the
/// hold is read from the first transaction of its window on.
async fn backdate_earnings(app: &TestApp) {
    use sea_orm::ConnectionTrait;
    let db = &app.services.db;
    let backend = db.get_database_backend();
    let at = if backend == sea_orm::DbBackend::Postgres { "$1" } else { "?" };
    let when = chrono::Utc::now() - chrono::Duration::hours(2);
    let sql = format!("UPDATE ledger_transactions SET created_at = {at}");
    let statement = sea_orm::Statement::from_sql_and_values(backend, sql, [when.into()]);
    assert!(db.execute_raw(statement).await.unwrap().rows_affected() > 0);
}

async fn an_unreadable_answer_leaves_the_payout_pending_until_stripe_is_asked(backend: Backend) {
    let app = TestApp::spawn_with(backend, zero_hold()).await;
    let (provider, provider_id) = provider_with_earnings(&app, 50_000_000).await; // $45 earned
    onboard(&app, &provider).await;

    // Stripe makes the transfer, but what comes back is not Stripe's JSON.
    app.stripe.fail_next(InjectedFailure { garbled: true, ..failure(200, "api_error", None, "", 1) });
    let res = provider.post(app.url("/api/v1/payouts")).json(&json!({"amount": "20"})).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let payout: Value = res.json().await.unwrap();
    assert_eq!(payout["status"], "pending", "it may have been paid: never reversed");
    assert!(payout["failure_message"].as_str().unwrap().contains("could not be read"), "{payout}");
    assert_eq!(ledger::balance(&app.services.db, Book::Earnings(provider_id)).await.unwrap(), 25_000_000);

    // Stripe cannot be asked yet either: still pending.
    app.stripe.fail_next(failure(503, "api_error", None, "Stripe is down", 4));
    cardpool_service::payouts::retry_pending_payouts(&app.services, std::time::Duration::ZERO).await.unwrap();
    let earnings: Value = app.get_json(&provider, "/api/v1/earnings").await;
    assert_eq!(earnings["payouts"][0]["status"], "pending");

    // Then the retry asks Stripe by the payout's transfer group, finds the transfer, and makes
    // no second one.
    let settled =
        cardpool_service::payouts::retry_pending_payouts(&app.services, std::time::Duration::ZERO).await.unwrap();
    assert_eq!(settled, 1);
    let earnings: Value = app.get_json(&provider, "/api/v1/earnings").await;
    assert_eq!(earnings["payouts"][0]["status"], "paid");
    assert!(earnings["payouts"][0]["stripe_transfer_id"].as_str().unwrap().starts_with("tr_"));
    assert_eq!(earnings["paid_out_micros"], 20_000_000);
    let lookup = app.stripe.requests().into_iter().rfind(|r| r.method == "GET" && r.path == "/v1/transfers").unwrap();
    assert_eq!(param(&lookup, "transfer_group"), Some(format!("payout-{}", payout["id"]).as_str()));
    let made = app.stripe.requests().into_iter().filter(|r| r.method == "POST" && r.path == "/v1/transfers").count();
    assert_eq!(made, 1, "one transfer, whatever was retried");
    assert_ledger_sound(&app).await;
}
