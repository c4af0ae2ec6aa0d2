//! Money end to end over HTTP, on SQLite and PostgreSQL, against the local test-mode Stripe:
//! top-ups credited only by signed webhooks, webhook chaos, the Stripe adapter's contract
//! (parameters, idempotency keys, error mapping, retries), admin credits (payouts: `payouts.rs`).

use crate::common::TestApp;
use cardpool_server::Config;
use cardpool_service::{
    Settings, backend_tests,
    entities::{stripe_events, top_ups},
    ledger::{self, Book},
    testing::Backend,
};
use cardpool_stripe_local::{InjectedFailure, sign};
use reqwest::{Client, StatusCode};
use sea_orm::{EntityTrait, PaginatorTrait, QueryOrder};
use serde_json::{Value, json};

backend_tests!(
    top_up_is_credited_by_the_webhook_not_the_redirect,
    webhook_chaos_ends_like_one_in_order_delivery,
    webhook_refuses_bad_deliveries_and_writes_nothing,
    stripe_requests_carry_our_parameters_and_keys,
    stripe_errors_map_to_clear_errors_and_retries,
    admins_credit_and_refund_with_a_reason,
    money_pages_are_private,
);

fn no_redirects() -> Client {
    Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

pub(crate) async fn renter(app: &TestApp, email: &str) -> Client {
    let client = app.browser();
    app.sign_up(&client, email).await;
    client
}

async fn wallet(app: &TestApp, client: &Client) -> Value {
    let res = client.get(app.url("/api/v1/wallet")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    res.json().await.unwrap()
}

async fn start_top_up(app: &TestApp, client: &Client, amount: &str) -> (i64, String) {
    let res = client.post(app.url("/api/v1/wallet/top-ups")).json(&json!({"amount": amount})).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::CREATED, "{}", res.text().await.unwrap());
    let body: Value = res.json().await.unwrap();
    (body["top_up"]["id"].as_i64().unwrap(), body["checkout_url"].as_str().unwrap().to_owned())
}

fn session_id(checkout_url: &str) -> String {
    checkout_url.rsplit('/').next().unwrap().to_owned()
}

pub(crate) async fn assert_ledger_sound(app: &TestApp) {
    let check = ledger::verify(&app.services.db).await.unwrap();
    assert!(check.is_sound(), "ledger unsound: {check:?}");
}

async fn deliver(app: &TestApp, payload: &str, signature: &str) -> reqwest::Response {
    Client::new()
        .post(app.url("/stripe/webhook"))
        .header("stripe-signature", signature)
        .header("content-type", "application/json")
        .body(payload.to_owned())
        .send()
        .await
        .unwrap()
}

async fn deliver_signed(app: &TestApp, payload: &str) -> reqwest::Response {
    deliver(app, payload, &sign(payload, &app.webhook_secret, chrono::Utc::now().timestamp())).await
}

async fn top_up_statuses(app: &TestApp) -> Vec<(i64, String)> {
    top_ups::Entity::find()
        .order_by_asc(top_ups::Column::Id)
        .all(&app.services.db)
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.id, t.status))
        .collect()
}

async fn top_up_is_credited_by_the_webhook_not_the_redirect(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let client = renter(&app, "payer@example.com").await;
    let (id, checkout_url) = start_top_up(&app, &client, "25").await;
    assert!(checkout_url.starts_with(&app.stripe_url), "{checkout_url}");
    let wallet0 = wallet(&app, &client).await;
    assert_eq!(wallet0["balance_micros"], 0);
    assert_eq!(wallet0["pending_top_ups"][0]["id"], id);

    // Coming back from Checkout without paying credits nothing.
    let page = client.get(app.url(&format!("/wallet?top_up={id}"))).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(wallet(&app, &client).await["balance_micros"], 0);

    // The test checkout page is clearly marked and shows the amount.
    let html = no_redirects().get(&checkout_url).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("TEST MODE") && html.contains("$25.00"), "{html}");

    // Paying: Stripe sends the signed webhook, then redirects back to Cardpool.
    let res = no_redirects().post(format!("{checkout_url}/pay")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::SEE_OTHER);
    let location = res.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(location, app.url(&format!("/wallet?top_up={id}")));

    let after = wallet(&app, &client).await;
    assert_eq!(after["balance_micros"], 25_000_000);
    assert_eq!(after["pending_top_ups"].as_array().unwrap().len(), 0);
    let top_up: Value = app.get_json(&client, &format!("/api/v1/wallet/top-ups/{id}")).await;
    assert_eq!(top_up["status"], "credited");

    let history: Value = app.get_json(&client, "/api/v1/wallet/transactions").await;
    assert_eq!(history[0]["kind"], "top_up");
    assert_eq!(history[0]["amount_micros"], 25_000_000);
    assert_eq!(history[0]["balance_after_micros"], 25_000_000);
    let tx = history[0]["transaction_id"].as_i64().unwrap();

    let receipt: Value = app.get_json(&client, &format!("/api/v1/wallet/transactions/{tx}/receipt")).await;
    assert_eq!(receipt["amount_micros"], 25_000_000);
    assert_eq!(receipt["stripe_session_id"], session_id(&checkout_url));
    assert_eq!(receipt["account_email"], "payer@example.com");

    let csv = client.get(app.url("/api/v1/wallet/transactions.csv")).send().await.unwrap();
    assert!(csv.headers()["content-type"].to_str().unwrap().starts_with("text/csv"));
    let csv = csv.text().await.unwrap();
    assert!(
        csv.lines().nth(1).unwrap().ends_with(",top_up,\"Wallet top-up via Stripe Checkout\",25.00,25.00"),
        "{csv}"
    );

    // Stripe delivering the same event again changes nothing.
    let event = app.stripe.events().pop().unwrap();
    let res = deliver_signed(&app, &event.payload).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.json::<Value>().await.unwrap()["outcome"], "duplicate");
    assert_eq!(wallet(&app, &client).await["balance_micros"], 25_000_000);
    assert_ledger_sound(&app).await;
}

/// Rewrites an event as a different one about the same object (what Stripe would send later).
fn variant(payload: &str, event_type: &str, id: &str, patch: &[(&str, Value)]) -> String {
    let mut event: Value = serde_json::from_str(payload).unwrap();
    event["id"] = json!(id);
    event["type"] = json!(event_type);
    for (key, value) in patch {
        event["data"]["object"][key] = value.clone();
    }
    event.to_string()
}

async fn webhook_chaos_ends_like_one_in_order_delivery(backend: Backend) {
    // One scenario, delivered several ways; the outcome must equal the plain in-order run.
    let orders: [&[usize]; 4] = [
        &[0, 1, 2, 3],          // in order, once each
        &[3, 2, 1, 0],          // reversed
        &[1, 1, 0, 3, 0, 2, 3], // duplicates mixed in
        &[2, 0, 0, 0, 1, 3, 1], // late expiry first, heavy duplication
    ];
    let mut outcomes = Vec::new();
    for order in orders {
        let app = TestApp::spawn_full(backend, Settings::default(), Config::default(), false).await;
        let client = renter(&app, "chaos@example.com").await;
        let (_, paid_url) = start_top_up(&app, &client, "40").await;
        let (_, expired_url) = start_top_up(&app, &client, "15").await;
        app.stripe.pay_session(&session_id(&paid_url)).await.unwrap();
        assert!(app.stripe.expire_session(&session_id(&expired_url)).await);
        let log = app.stripe.events();
        let completed = log.iter().find(|e| e.event_type == "checkout.session.completed").unwrap().payload.clone();
        let expired = log.iter().find(|e| e.event_type == "checkout.session.expired").unwrap().payload.clone();
        let events = [
            completed.clone(),
            expired,
            // A stale expiry of the session that was paid, arriving late.
            variant(&completed, "checkout.session.expired", "evt_late_expiry", &[("status", json!("expired"))]),
            // An event type Cardpool does not act on.
            variant(&completed, "cardpool.made_up.event", "evt_unknown", &[]),
        ];
        for &i in order {
            let res = deliver_signed(&app, &events[i]).await;
            assert_eq!(res.status(), StatusCode::OK, "{}", res.text().await.unwrap());
        }
        // Concurrent duplicate deliveries of the payment race each other.
        let racers: Vec<_> = (0..6).map(|_| deliver_signed(&app, &completed)).collect();
        for res in futures_util::future::join_all(racers).await {
            assert!(res.status().is_success() || res.status().is_server_error(), "{}", res.status());
        }
        assert_eq!(stripe_events::Entity::find().count(&app.services.db).await.unwrap(), 4);
        assert_ledger_sound(&app).await;
        let user = app.services.db.clone();
        let user_id =
            cardpool_service::accounts::principal_for_email(&app.services, "chaos@example.com").await.unwrap().user_id;
        let statuses: Vec<String> = top_up_statuses(&app).await.into_iter().map(|(_, s)| s).collect();
        outcomes.push((
            ledger::balance(&user, Book::Wallet(user_id)).await.unwrap(),
            ledger::balance(&user, Book::StripeClearing).await.unwrap(),
            statuses,
        ));
    }
    assert_eq!(outcomes[0], (40_000_000, -40_000_000, vec!["credited".to_owned(), "expired".to_owned()]));
    for outcome in &outcomes[1..] {
        assert_eq!(outcome, &outcomes[0]);
    }
}

async fn webhook_refuses_bad_deliveries_and_writes_nothing(backend: Backend) {
    let app = TestApp::spawn_full(backend, Settings::default(), Config::default(), false).await;
    let client = renter(&app, "strict@example.com").await;
    let (_, url) = start_top_up(&app, &client, "10").await;
    app.stripe.pay_session(&session_id(&url)).await.unwrap();
    let payload = app.stripe.events().pop().unwrap().payload;
    let now = chrono::Utc::now().timestamp();

    let cases = [
        ("wrong secret", payload.clone(), sign(&payload, "whsec_not_ours", now)),
        ("stale timestamp", payload.clone(), sign(&payload, &app.webhook_secret, now - 3600)),
        ("future timestamp", payload.clone(), sign(&payload, &app.webhook_secret, now + 3600)),
        ("tampered body", format!("{payload} "), sign(&payload, &app.webhook_secret, now)),
        ("garbage header", payload.clone(), "t=abc,v1=zzz".to_owned()),
        ("malformed body", "{not json".to_owned(), sign("{not json", &app.webhook_secret, now)),
    ];
    for (what, body, signature) in cases {
        let res = deliver(&app, &body, &signature).await;
        assert_eq!(res.status(), StatusCode::BAD_REQUEST, "{what}");
    }
    let res = Client::new().post(app.url("/stripe/webhook")).body(payload.clone()).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::BAD_REQUEST, "missing signature");
    assert_eq!(stripe_events::Entity::find().count(&app.services.db).await.unwrap(), 0);
    assert_eq!(wallet(&app, &client).await["balance_micros"], 0);

    // The genuine delivery still works afterwards.
    assert_eq!(deliver_signed(&app, &payload).await.status(), StatusCode::OK);
    assert_eq!(wallet(&app, &client).await["balance_micros"], 10_000_000);
}

pub(crate) fn param<'a>(request: &'a cardpool_stripe_local::RecordedRequest, key: &str) -> Option<&'a str> {
    request.params.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

async fn stripe_requests_carry_our_parameters_and_keys(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let client = renter(&app, "contract@example.com").await;
    let (id, _) = start_top_up(&app, &client, "12.34").await;
    let requests = app.stripe.requests();
    let create = requests.iter().find(|r| r.path == "/v1/checkout/sessions").unwrap();
    assert_eq!(create.method, "POST");
    assert_eq!(create.idempotency_key.as_deref(), Some(format!("top-up-{id}").as_str()));
    assert_eq!(create.stripe_version.as_deref(), Some(cardpool_stripe_local::API_VERSION));
    assert_eq!(param(create, "mode"), Some("payment"));
    assert_eq!(param(create, "client_reference_id"), Some(id.to_string().as_str()));
    assert_eq!(param(create, "metadata[top_up_id]"), Some(id.to_string().as_str()));
    assert_eq!(param(create, "customer_email"), Some("contract@example.com"));
    assert_eq!(param(create, "line_items[0][price_data][unit_amount]"), Some("1234"));
    assert_eq!(param(create, "line_items[0][price_data][currency]"), Some("usd"));
    assert_eq!(param(create, "line_items[0][quantity]"), Some("1"));
    assert_eq!(param(create, "success_url"), Some(app.url(&format!("/wallet?top_up={id}")).as_str()));

    // Amounts are validated before anything reaches Stripe.
    let before = app.stripe.requests().len();
    for bad in ["4.99", "10.001", "-5", "abc", "10001"] {
        let res = client.post(app.url("/api/v1/wallet/top-ups")).json(&json!({"amount": bad})).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
        assert!(res.json::<Value>().await.unwrap()["fields"]["amount"].is_string());
    }
    assert_eq!(app.stripe.requests().len(), before);
}

pub(crate) fn failure(status: u16, error_type: &str, code: Option<&str>, message: &str, times: u32) -> InjectedFailure {
    InjectedFailure {
        status,
        error_type: error_type.into(),
        code: code.map(str::to_owned),
        message: message.into(),
        times,
        garbled: false,
    }
}

async fn stripe_errors_map_to_clear_errors_and_retries(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let client = renter(&app, "errors@example.com").await;
    let post = |amount: &'static str| client.post(app.url("/api/v1/wallet/top-ups")).json(&json!({"amount": amount}));

    // A decline is a clear 402 and the top-up is marked failed.
    app.stripe.fail_next(failure(402, "card_error", Some("card_declined"), "Your card was declined.", 1));
    let res = post("20").send().await.unwrap();
    assert_eq!(res.status(), StatusCode::PAYMENT_REQUIRED);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["message"], "payment declined: Your card was declined.");

    // 429 then success: retried with the same idempotency key, one session created.
    app.stripe.fail_next(failure(429, "rate_limit_error", Some("rate_limit"), "Too many requests", 1));
    let (id, _) = start_top_up(&app, &client, "21").await;
    let key = format!("top-up-{id}");
    let attempts: Vec<_> =
        app.stripe.requests().into_iter().filter(|r| r.idempotency_key.as_deref() == Some(&key)).collect();
    assert_eq!(attempts.iter().map(|r| r.status).collect::<Vec<_>>(), vec![429, 200]);

    // Stripe down for longer than our retries: 503, all attempts with one key.
    app.stripe.fail_next(failure(500, "api_error", None, "Something went wrong on Stripe's end.", 10));
    let res = post("22").send().await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    let keys: Vec<_> =
        app.stripe.requests().into_iter().filter(|r| r.status == 500).map(|r| r.idempotency_key.unwrap()).collect();
    assert_eq!(keys.len(), 4);
    assert!(keys.iter().all(|k| k == &keys[0]));

    let statuses: Vec<String> = top_up_statuses(&app).await.into_iter().map(|(_, s)| s).collect();
    assert_eq!(statuses, vec!["failed", "open", "failed"]);
    assert_eq!(wallet(&app, &client).await["balance_micros"], 0);
}

async fn admins_credit_and_refund_with_a_reason(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let client = renter(&app, "lucky@example.com").await;
    let res = client
        .post(app.url("/api/v1/admin/credits"))
        .json(&json!({"email": "lucky@example.com", "amount": "5", "kind": "credit", "reason": "self-service"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);

    cardpool_service::accounts::create_admin(&app.services, "boss@example.com", Some(crate::common::PASSWORD))
        .await
        .unwrap();
    let admin = app.browser();
    assert_eq!(app.sign_in(&admin, "boss@example.com", crate::common::PASSWORD).await.status(), StatusCode::OK);
    let res = admin
        .post(app.url("/api/v1/admin/credits"))
        .json(&json!({"email": "nobody@example.com", "amount": "-1", "kind": "credit", "reason": ""}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let fields = res.json::<Value>().await.unwrap()["fields"].clone();
    for field in ["email", "amount", "reason"] {
        assert!(fields[field].is_string(), "{field} not flagged: {fields}");
    }
    for (kind, amount) in [("credit", "7.50"), ("refund", "2.25")] {
        let res = admin
            .post(app.url("/api/v1/admin/credits"))
            .json(&json!({"email": "Lucky@Example.com", "amount": amount, "kind": kind, "reason": "GPU fell off the bus"}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
    }
    assert_eq!(wallet(&app, &client).await["balance_micros"], 9_750_000);
    let audit: Value = app.get_json(&admin, "/api/v1/admin/credits").await;
    assert_eq!(audit.as_array().unwrap().len(), 2);
    assert_eq!(audit[0]["kind"], "refund");
    assert_eq!(audit[0]["reason"], "GPU fell off the bus");
    assert_eq!(audit[0]["actor_email"], "boss@example.com");
    assert_eq!(audit[0]["account_email"], "lucky@example.com");
    assert_eq!(audit[1]["amount_micros"], 7_500_000);
    assert_ledger_sound(&app).await;
}

async fn money_pages_are_private(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let anonymous = Client::new();
    for path in ["/api/v1/wallet", "/api/v1/wallet/transactions", "/api/v1/earnings"] {
        assert_eq!(anonymous.get(app.url(path)).send().await.unwrap().status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let alice = renter(&app, "alice@example.com").await;
    assert_eq!(alice.get(app.url("/api/v1/earnings")).send().await.unwrap().status(), StatusCode::FORBIDDEN);
    assert_eq!(
        alice.post(app.url("/api/v1/payouts")).json(&json!({})).send().await.unwrap().status(),
        StatusCode::FORBIDDEN
    );

    // Bob's top-up and receipt are not Alice's to see.
    let bob = renter(&app, "bob@example.com").await;
    let (id, url) = start_top_up(&app, &bob, "9").await;
    no_redirects().post(format!("{url}/pay")).send().await.unwrap();
    let history: Value = app.get_json(&bob, "/api/v1/wallet/transactions").await;
    let tx = history[0]["transaction_id"].as_i64().unwrap();
    let res = alice.get(app.url(&format!("/api/v1/wallet/transactions/{tx}/receipt"))).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let res = alice.get(app.url(&format!("/api/v1/wallet/top-ups/{id}"))).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);

    // A cross-site top-up is refused before it reaches Stripe.
    let before = app.stripe.requests().len();
    let res = alice
        .post(app.url("/api/v1/wallet/top-ups"))
        .header("origin", "https://evil.example")
        .json(&json!({"amount": "50"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FORBIDDEN);
    assert_eq!(app.stripe.requests().len(), before);
}
