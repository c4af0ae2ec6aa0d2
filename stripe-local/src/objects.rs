//! The Stripe objects Cardpool creates and reads (Checkout sessions, Connect accounts and
//! account links, transfers), answered from Stripe's fixtures with our ids and amounts, plus
//! the answer to any endpoint we do not implement. Every call goes through [`crate::api`]:
//! the secret key, idempotency replay, request recording and injected failures.

use crate::{LocalStripe, api, invalid, random_id, stripe_error};
use axum::{
    Json,
    body::Bytes,
    extract::{Path, RawQuery, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use chrono::Utc;
use serde_json::{Value, json};

pub(crate) async fn create_checkout_session(
    State(stripe): State<LocalStripe>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    api(&stripe, "POST", "/v1/checkout/sessions", &headers, &body, |stripe, form| {
        let Some(success_url) = form.get("success_url") else {
            return invalid("Missing required param: success_url.", "success_url");
        };
        let Some(unit_amount) = form.get("line_items[0][price_data][unit_amount]").and_then(|a| a.parse::<i64>().ok())
        else {
            return invalid("Missing required param: line_items[0][price_data][unit_amount].", "line_items");
        };
        let quantity = form.get("line_items[0][quantity]").and_then(|q| q.parse::<i64>().ok()).unwrap_or(1);
        if unit_amount < 50 {
            return stripe_error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("amount_too_small"),
                "The Checkout Session's total amount due must add up to at least $0.50 usd",
                Some("line_items"),
            );
        }
        let id = random_id("cs");
        let now = Utc::now().timestamp();
        let mut session = stripe.fixture("checkout.session");
        session["id"] = json!(id);
        session["object"] = json!("checkout.session");
        session["created"] = json!(now);
        session["expires_at"] = json!(now + 24 * 3600);
        session["livemode"] = json!(false);
        session["mode"] = json!(form.get("mode").unwrap_or("payment"));
        session["status"] = json!("open");
        session["payment_status"] = json!("unpaid");
        session["payment_intent"] = Value::Null;
        session["amount_subtotal"] = json!(unit_amount * quantity);
        session["amount_total"] = json!(unit_amount * quantity);
        session["currency"] = json!(form.get("line_items[0][price_data][currency]").unwrap_or("usd"));
        session["client_reference_id"] = json!(form.get("client_reference_id"));
        session["customer_email"] = json!(form.get("customer_email"));
        session["customer_details"]["email"] = json!(form.get("customer_email"));
        session["metadata"] = form.map("metadata");
        session["success_url"] = json!(success_url);
        session["cancel_url"] = json!(form.get("cancel_url"));
        session["url"] = json!(format!("{}/checkout/{id}", stripe.public_url()));
        session["shipping_address_collection"] = Value::Null;
        session["shipping_cost"] = Value::Null;
        session["total_details"] = json!({"amount_discount": 0, "amount_shipping": 0, "amount_tax": 0});
        session["currency_conversion"] = Value::Null;
        session["line_item_name"] = json!(form.get("line_items[0][price_data][product_data][name]"));
        stripe.shared.store.lock().expect("lock").sessions.insert(id, session.clone());
        (StatusCode::OK, Json(session)).into_response()
    })
    .await
}

pub(crate) async fn retrieve_checkout_session(
    State(stripe): State<LocalStripe>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/v1/checkout/sessions/{id}");
    api(&stripe, "GET", &path, &headers, &Bytes::new(), |stripe, _| {
        match stripe.shared.store.lock().expect("lock").sessions.get(&id) {
            Some(s) => (StatusCode::OK, Json(s.clone())).into_response(),
            None => no_such("checkout.session", &id),
        }
    })
    .await
}

fn no_such(kind: &str, id: &str) -> Response {
    stripe_error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        Some("resource_missing"),
        &format!("No such {kind}: '{id}'"),
        Some("id"),
    )
}

pub(crate) async fn create_account(State(stripe): State<LocalStripe>, headers: HeaderMap, body: Bytes) -> Response {
    api(&stripe, "POST", "/v1/accounts", &headers, &body, |stripe, form| {
        let id = random_id("acct").replace("_test_", "_");
        let mut account = stripe.fixture("account");
        account["id"] = json!(id);
        account["type"] = json!(form.get("type").unwrap_or("express"));
        account["email"] = json!(form.get("email"));
        account["metadata"] = form.map("metadata");
        account["created"] = json!(Utc::now().timestamp());
        account["details_submitted"] = json!(false);
        account["charges_enabled"] = json!(false);
        account["payouts_enabled"] = json!(false);
        account["external_accounts"]["url"] = json!(format!("/v1/accounts/{id}/external_accounts"));
        stripe.shared.store.lock().expect("lock").accounts.insert(id, account.clone());
        (StatusCode::OK, Json(account)).into_response()
    })
    .await
}

pub(crate) async fn retrieve_account(
    State(stripe): State<LocalStripe>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/v1/accounts/{id}");
    api(&stripe, "GET", &path, &headers, &Bytes::new(), |stripe, _| {
        match stripe.shared.store.lock().expect("lock").accounts.get(&id) {
            Some(a) => (StatusCode::OK, Json(a.clone())).into_response(),
            None => no_such("account", &id),
        }
    })
    .await
}

pub(crate) async fn create_account_link(
    State(stripe): State<LocalStripe>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    api(&stripe, "POST", "/v1/account_links", &headers, &body, |stripe, form| {
        let (Some(account), Some(return_url), Some(refresh_url)) =
            (form.get("account"), form.get("return_url"), form.get("refresh_url"))
        else {
            return invalid("Missing required param: account, return_url and refresh_url.", "account");
        };
        if !stripe.shared.store.lock().expect("lock").accounts.contains_key(account) {
            return no_such("account", account);
        }
        let token = random_id("link");
        let now = Utc::now().timestamp();
        let mut link = stripe.fixture("account_link");
        link["created"] = json!(now);
        link["expires_at"] = json!(now + 300);
        link["url"] = json!(format!("{}/connect/onboarding/{token}", stripe.public_url()));
        stripe
            .shared
            .store
            .lock()
            .expect("lock")
            .links
            .insert(token, (account.to_owned(), return_url.to_owned(), refresh_url.to_owned()));
        (StatusCode::OK, Json(link)).into_response()
    })
    .await
}

pub(crate) async fn create_transfer(State(stripe): State<LocalStripe>, headers: HeaderMap, body: Bytes) -> Response {
    api(&stripe, "POST", "/v1/transfers", &headers, &body, |stripe, form| {
        let Some(destination) = form.get("destination") else {
            return invalid("Missing required param: destination.", "destination");
        };
        let amount = form.get("amount").and_then(|a| a.parse::<i64>().ok()).unwrap_or(0);
        if amount < 1 {
            return stripe_error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some("parameter_invalid_integer"),
                "This value must be greater than or equal to 1.",
                Some("amount"),
            );
        }
        let ready = stripe
            .shared
            .store
            .lock()
            .expect("lock")
            .accounts
            .get(destination)
            .map(|a| a["payouts_enabled"] == json!(true));
        match ready {
            None => return no_such("destination", destination),
            Some(false) => {
                return stripe_error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    Some("insufficient_capabilities_for_transfer"),
                    "Your destination account needs to have at least one of the following capabilities enabled: transfers, crypto_transfers, legacy_payments",
                    Some("destination"),
                );
            }
            Some(true) => {}
        }
        let id = random_id("tr");
        let mut transfer = stripe.fixture("transfer");
        transfer["id"] = json!(id);
        transfer["amount"] = json!(amount);
        transfer["currency"] = json!(form.get("currency").unwrap_or("usd"));
        transfer["destination"] = json!(destination);
        transfer["created"] = json!(Utc::now().timestamp());
        transfer["metadata"] = form.map("metadata");
        transfer["transfer_group"] = json!(form.get("transfer_group"));
        transfer["reversals"]["url"] = json!(format!("/v1/transfers/{id}/reversals"));
        stripe.shared.store.lock().expect("lock").transfers.insert(id, transfer.clone());
        (StatusCode::OK, Json(transfer)).into_response()
    })
    .await
}

pub(crate) async fn unknown_endpoint(State(stripe): State<LocalStripe>, headers: HeaderMap, body: Bytes) -> Response {
    api(&stripe, "ANY", "/v1/?", &headers, &body, |_, _| {
        stripe_error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            None,
            "Unrecognized request URL. The local test-mode Stripe implements only what Cardpool uses.",
            None,
        )
    })
    .await
}

/// `GET /v1/transfers`: the transfers made, newest first, filtered by `transfer_group` and
/// `destination` when given (how a caller finds out whether an unanswered transfer happened).
pub(crate) async fn list_transfers(
    State(stripe): State<LocalStripe>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let query = Bytes::from(query.unwrap_or_default());
    api(&stripe, "GET", "/v1/transfers", &headers, &query, |stripe, form| {
        let store = stripe.shared.store.lock().expect("lock");
        let mut data: Vec<Value> = store
            .transfers
            .values()
            .filter(|t| form.get("transfer_group").is_none_or(|g| t["transfer_group"] == json!(g)))
            .filter(|t| form.get("destination").is_none_or(|d| t["destination"] == json!(d)))
            .cloned()
            .collect();
        data.sort_by_key(|t| std::cmp::Reverse(t["created"].as_i64().unwrap_or(0)));
        let limit = form.get("limit").and_then(|l| l.parse::<usize>().ok()).unwrap_or(10).clamp(1, 100);
        let has_more = data.len() > limit;
        data.truncate(limit);
        (StatusCode::OK, Json(json!({"object": "list", "data": data, "has_more": has_more, "url": "/v1/transfers"})))
            .into_response()
    })
    .await
}
