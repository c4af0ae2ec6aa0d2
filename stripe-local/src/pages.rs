//! The test-mode pages a person sees instead of Stripe's hosted ones: Checkout and Connect
//! onboarding. Plain server-rendered HTML, unmistakably marked as test mode.

use crate::{LocalStripe, see_other};
use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::{Html, IntoResponse, Response},
};
use serde_json::Value;

fn escape(raw: &str) -> String {
    raw.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;").replace('\'', "&#39;")
}

fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · Stripe test mode</title>
<style>
body{{margin:0;font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;background:#f6f9fc;color:#1a1f36}}
.banner{{background:#ffb020;color:#3d2600;text-align:center;padding:.5rem;font-weight:600;letter-spacing:.02em}}
main{{max-width:28rem;margin:3rem auto;padding:0 1rem}}
.card{{background:#fff;border-radius:12px;box-shadow:0 2px 12px rgba(50,50,93,.1);padding:2rem}}
h1{{font-size:1.25rem;margin:0 0 .25rem}} .muted{{color:#697386;font-size:.9rem}}
.amount{{font-size:2.25rem;font-weight:700;margin:1rem 0}}
label{{display:block;font-size:.85rem;color:#3c4257;margin:1rem 0 .25rem}}
input{{width:100%;box-sizing:border-box;padding:.6rem;border:1px solid #cfd7df;border-radius:6px;font-size:1rem;background:#f6f9fc}}
button{{width:100%;margin-top:1.5rem;padding:.8rem;border:0;border-radius:6px;background:#635bff;color:#fff;font-size:1rem;font-weight:600;cursor:pointer}}
button:focus-visible{{outline:3px solid #a5a1ff;outline-offset:2px}}
.secondary{{background:#fff;color:#635bff;border:1px solid #cfd7df;margin-top:.75rem}}
</style></head><body><div class="banner" role="note">TEST MODE — local Stripe for Cardpool. No real money moves.</div>
<main><div class="card">{body}</div></main></body></html>"#
    ))
}

fn not_found(what: &str) -> Response {
    (StatusCode::NOT_FOUND, page("Not found", &format!("<h1>{what} not found</h1>"))).into_response()
}

fn cents(amount: &Value) -> String {
    let cents = amount.as_i64().unwrap_or(0);
    format!("${}.{:02}", cents / 100, cents % 100)
}

pub(crate) async fn checkout_page(State(stripe): State<LocalStripe>, Path(id): Path<String>) -> Response {
    let Some(session) = stripe.shared.store.lock().expect("lock").sessions.get(&id).cloned() else {
        return not_found("Checkout session");
    };
    let item = session["line_item_name"].as_str().unwrap_or("Payment");
    let email = session["customer_email"].as_str().unwrap_or("");
    let body = match session["status"].as_str() {
        Some("open") => format!(
            r#"<p class="muted">Pay Cardpool</p><h1>{item}</h1><p class="amount" data-testid="amount">{amount}</p>
<form method="post" action="/checkout/{id}/pay">
<label for="email">Email</label><input id="email" value="{email}" readonly>
<label for="card">Card information</label><input id="card" value="4242 4242 4242 4242   12/34   123" readonly>
<button type="submit">Pay {amount}</button></form>
<form method="post" action="/checkout/{id}/cancel"><button class="secondary" type="submit">Cancel and go back</button></form>"#,
            item = escape(item),
            amount = cents(&session["amount_total"]),
            email = escape(email),
            id = escape(&id),
        ),
        Some(status) => format!("<h1>This checkout is {}</h1>", escape(status)),
        None => "<h1>Unknown session</h1>".into(),
    };
    page("Checkout", &body).into_response()
}

pub(crate) async fn pay(State(stripe): State<LocalStripe>, Path(id): Path<String>) -> Response {
    match stripe.pay_session(&id).await {
        Some(success_url) => see_other(&success_url),
        None => not_found("Open checkout session"),
    }
}

pub(crate) async fn cancel(State(stripe): State<LocalStripe>, Path(id): Path<String>) -> Response {
    let cancel_url = stripe
        .shared
        .store
        .lock()
        .expect("lock")
        .sessions
        .get(&id)
        .and_then(|s| s["cancel_url"].as_str().map(str::to_owned));
    match cancel_url {
        Some(url) => see_other(&url),
        None => not_found("Checkout session"),
    }
}

pub(crate) async fn onboarding_page(State(stripe): State<LocalStripe>, Path(token): Path<String>) -> Response {
    let Some((account, _, _)) = stripe.shared.store.lock().expect("lock").links.get(&token).cloned() else {
        return not_found("Onboarding link");
    };
    let body = format!(
        r#"<p class="muted">Stripe Connect · Express</p><h1>Set up payouts for Cardpool</h1>
<p class="muted">Account <code>{account}</code>. In test mode no identity or bank details are needed.</p>
<form method="post" action="/connect/onboarding/{token}"><button type="submit">Complete test onboarding</button></form>"#,
        account = escape(&account),
        token = escape(&token),
    );
    page("Connect onboarding", &body).into_response()
}

pub(crate) async fn complete_onboarding(State(stripe): State<LocalStripe>, Path(token): Path<String>) -> Response {
    let link = stripe.shared.store.lock().expect("lock").links.remove(&token);
    let Some((account, return_url, _)) = link else {
        return not_found("Onboarding link");
    };
    stripe.complete_onboarding(&account).await;
    see_other(&return_url)
}
