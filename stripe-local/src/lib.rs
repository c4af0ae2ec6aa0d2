//! A local Stripe-compatible server: what Cardpool runs against when it has no Stripe keys
//! (the demo, development, every test).
//!
//! It answers the calls Cardpool makes (Checkout sessions, Connect Express accounts and
//! onboarding links, transfers) with objects built from Stripe's own fixtures
//! (`fixtures/fixtures3.json`, MIT, from stripe-mock), checks the secret key and idempotency
//! keys the way Stripe does (same key + same body replays the stored answer; same key + other
//! body is an `idempotency_error`), serves a clearly marked test checkout page and test Connect
//! onboarding page, and sends webhooks signed exactly as Stripe signs them
//! (`Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.payload">`), retrying deliveries
//! that fail. Under `/_test/` it records every API request and can be told to fail the next
//! ones with Stripe error bodies, which is how Cardpool's adapter contract tests check what we
//! send and how we react.

mod objects;
mod pages;

use axum::{
    Json, Router,
    body::Bytes,
    extract::{Path, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use chrono::Utc;
use hmac::{Hmac, Mac};
use rand::{Rng, distr::Alphanumeric};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::Sha256;
use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

/// The API version our fixtures and Cardpool's async-stripe speak.
pub const API_VERSION: &str = "2026-09-30.endive";
const FIXTURES: &str = include_str!("../fixtures/fixtures3.json");

/// Signs a webhook payload the way Stripe does: `t=<timestamp>,v1=<hex HMAC-SHA256>` over
/// `"<timestamp>.<payload>"` with the endpoint's signing secret.
pub fn sign(payload: &str, secret: &str, timestamp: i64) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(format!("{timestamp}.{payload}").as_bytes());
    format!("t={timestamp},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// How the local server behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// The secret key clients must present (`Authorization: Bearer ...`).
    pub secret_key: String,
    /// The webhook signing secret (`whsec_...`).
    pub webhook_secret: String,
    /// Where events are delivered; `None` keeps them only in the event log.
    pub webhook_url: Option<String>,
}

/// One API request as the server received it (for contract tests).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub idempotency_key: Option<String>,
    pub stripe_version: Option<String>,
    /// Form parameters in the order sent, e.g. `("line_items[0][quantity]", "1")`.
    pub params: Vec<(String, String)>,
    /// HTTP status answered.
    pub status: u16,
}

/// A failure to answer instead of the next API request(s).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InjectedFailure {
    pub status: u16,
    /// Stripe error type: `card_error`, `rate_limit_error`, `api_error`, `invalid_request_error`.
    #[serde(rename = "type")]
    pub error_type: String,
    #[serde(default)]
    pub code: Option<String>,
    pub message: String,
    /// How many requests in a row fail this way.
    #[serde(default = "one")]
    pub times: u32,
    /// The request is carried out, but its answer arrives garbled (`status` with a body that
    /// is not JSON, as from a proxy in between): the caller cannot know what happened.
    #[serde(default)]
    pub garbled: bool,
}

fn one() -> u32 {
    1
}

/// An event the server generated, with its delivery state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SentEvent {
    pub id: String,
    #[serde(rename = "type")]
    pub event_type: String,
    pub payload: String,
    pub delivered: bool,
    pub attempts: u32,
}

#[derive(Default)]
struct Store {
    sessions: HashMap<String, Value>,
    accounts: HashMap<String, Value>,
    /// Onboarding link token → (account, return_url, refresh_url).
    links: HashMap<String, (String, String, String)>,
    transfers: HashMap<String, Value>,
    /// Idempotency key → (request fingerprint, status, body).
    idempotency: HashMap<String, (String, u16, Value)>,
    requests: Vec<RecordedRequest>,
    failures: VecDeque<InjectedFailure>,
    events: Vec<SentEvent>,
}

struct Shared {
    config: Config,
    fixtures: HashMap<String, Value>,
    public_url: RwLock<String>,
    store: Mutex<Store>,
    http: reqwest::Client,
}

/// A handle on a running (or routable) local Stripe.
#[derive(Clone)]
pub struct LocalStripe {
    shared: Arc<Shared>,
}

/// A local Stripe listening on a socket.
pub struct Running {
    pub stripe: LocalStripe,
    pub addr: SocketAddr,
    /// `http://addr/`, what Cardpool's Stripe client takes as its API base.
    pub url: String,
}

impl LocalStripe {
    pub fn new(config: Config) -> Self {
        let fixtures: Value = serde_json::from_str(FIXTURES).expect("bundled fixtures are valid JSON");
        let fixtures = fixtures["resources"].as_object().cloned().unwrap_or_default().into_iter().collect();
        LocalStripe {
            shared: Arc::new(Shared {
                config,
                fixtures,
                public_url: RwLock::new("http://127.0.0.1".into()),
                store: Mutex::new(Store::default()),
                http: reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("HTTP client"),
            }),
        }
    }

    /// Binds `addr` (port 0 for any) and serves until the runtime stops.
    pub async fn spawn(config: Config, addr: SocketAddr) -> std::io::Result<Running> {
        let stripe = LocalStripe::new(config);
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let url = format!("http://{addr}/");
        *stripe.shared.public_url.write().expect("lock") = format!("http://{addr}");
        let router = stripe.router();
        tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, router).await {
                tracing::error!(error = %err, "local Stripe stopped");
            }
        });
        tracing::info!(%url, "local Stripe (test mode) listening");
        Ok(Running { stripe, addr, url })
    }

    /// Where browsers and Stripe's clients reach this Stripe, when that is not the address it
    /// listens on (`0.0.0.0:12111` in a container published as `localhost:12111`): the URL in
    /// checkout sessions and account links.
    pub fn set_public_url(&self, url: &str) {
        *self.shared.public_url.write().expect("lock") = url.trim_end_matches('/').to_owned();
    }

    pub fn router(&self) -> Router {
        Router::new()
            .route("/v1/checkout/sessions", post(objects::create_checkout_session))
            .route("/v1/checkout/sessions/{id}", get(objects::retrieve_checkout_session))
            .route("/v1/accounts", post(objects::create_account))
            .route("/v1/accounts/{id}", get(objects::retrieve_account))
            .route("/v1/account_links", post(objects::create_account_link))
            .route("/v1/transfers", post(objects::create_transfer).get(objects::list_transfers))
            .route("/v1/{*rest}", get(objects::unknown_endpoint).post(objects::unknown_endpoint))
            .route("/checkout/{id}", get(pages::checkout_page))
            .route("/checkout/{id}/pay", post(pages::pay))
            .route("/checkout/{id}/cancel", post(pages::cancel))
            .route("/connect/onboarding/{token}", get(pages::onboarding_page).post(pages::complete_onboarding))
            .route("/_test/requests", get(recorded_requests))
            .route("/_test/failures", post(inject_failure))
            .route("/_test/events", get(sent_events))
            .route("/_test/checkout/{id}/expire", post(expire_session))
            .with_state(self.clone())
    }

    /// Every API request received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.store.lock().expect("lock").requests.clone()
    }

    /// Every event generated so far, oldest first.
    pub fn events(&self) -> Vec<SentEvent> {
        self.shared.store.lock().expect("lock").events.clone()
    }

    /// Makes the next `failure.times` API requests fail with `failure`.
    pub fn fail_next(&self, failure: InjectedFailure) {
        self.shared.store.lock().expect("lock").failures.push_back(failure);
    }

    /// Completes a Checkout session as if the test card was paid, and delivers its event.
    pub async fn pay_session(&self, id: &str) -> Option<String> {
        let session = {
            let mut store = self.shared.store.lock().expect("lock");
            let session = store.sessions.get_mut(id)?;
            if session["status"] != "open" {
                return None;
            }
            session["status"] = json!("complete");
            session["payment_status"] = json!("paid");
            session["payment_intent"] = json!(random_id("pi"));
            session.clone()
        };
        self.emit("checkout.session.completed", session.clone()).await;
        session["success_url"].as_str().map(|u| u.replace("{CHECKOUT_SESSION_ID}", id))
    }

    /// Expires an open Checkout session and delivers `checkout.session.expired`.
    pub async fn expire_session(&self, id: &str) -> bool {
        let session = {
            let mut store = self.shared.store.lock().expect("lock");
            let Some(session) = store.sessions.get_mut(id).filter(|s| s["status"] == "open") else { return false };
            session["status"] = json!("expired");
            session.clone()
        };
        self.emit("checkout.session.expired", session).await;
        true
    }

    /// Marks a Connect account onboarded and delivers `account.updated`.
    pub async fn complete_onboarding(&self, account_id: &str) -> bool {
        let account = {
            let mut store = self.shared.store.lock().expect("lock");
            let Some(account) = store.accounts.get_mut(account_id) else { return false };
            account["details_submitted"] = json!(true);
            account["charges_enabled"] = json!(true);
            account["payouts_enabled"] = json!(true);
            account["requirements"]["currently_due"] = json!([]);
            account["requirements"]["eventually_due"] = json!([]);
            account["requirements"]["past_due"] = json!([]);
            account["requirements"]["disabled_reason"] = Value::Null;
            account.clone()
        };
        self.emit("account.updated", account).await;
        true
    }

    fn fixture(&self, name: &str) -> Value {
        self.shared.fixtures.get(name).cloned().unwrap_or_else(|| json!({}))
    }

    fn public_url(&self) -> String {
        self.shared.public_url.read().expect("lock").clone()
    }

    /// Builds an event around `object`, logs it and delivers it (retrying in the background).
    async fn emit(&self, event_type: &str, object: Value) {
        let mut event = self.fixture("event");
        let id = random_id("evt");
        event["id"] = json!(id);
        event["type"] = json!(event_type);
        event["created"] = json!(Utc::now().timestamp());
        event["api_version"] = json!(API_VERSION);
        event["livemode"] = json!(false);
        event["pending_webhooks"] = json!(1);
        event["data"] = json!({ "object": object });
        let payload = event.to_string();
        self.shared.store.lock().expect("lock").events.push(SentEvent {
            id: id.clone(),
            event_type: event_type.to_owned(),
            payload: payload.clone(),
            delivered: false,
            attempts: 0,
        });
        let Some(url) = self.shared.config.webhook_url.clone() else { return };
        // The first attempt is awaited, so a redirect after payment finds the effect applied
        // in the common case; failures are retried in the background like Stripe does.
        if self.deliver(&url, &id, &payload).await {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(500);
            for _ in 0..6 {
                tokio::time::sleep(backoff).await;
                if this.deliver(&url, &id, &payload).await {
                    return;
                }
                backoff *= 2;
            }
            tracing::warn!(event = %id, "webhook delivery gave up");
        });
    }

    async fn deliver(&self, url: &str, id: &str, payload: &str) -> bool {
        let signature = sign(payload, &self.shared.config.webhook_secret, Utc::now().timestamp());
        let result = self
            .shared
            .http
            .post(url)
            .header("content-type", "application/json")
            .header("stripe-signature", signature)
            .body(payload.to_owned())
            .send()
            .await;
        let ok = matches!(&result, Ok(r) if r.status().is_success());
        if let Err(err) = &result {
            tracing::warn!(event = %id, error = %err, "webhook delivery failed");
        }
        let mut store = self.shared.store.lock().expect("lock");
        if let Some(e) = store.events.iter_mut().find(|e| e.id == id) {
            e.attempts += 1;
            e.delivered |= ok;
        }
        ok
    }
}

fn random_id(prefix: &str) -> String {
    let tail: String = rand::rng().sample_iter(&Alphanumeric).take(24).map(char::from).collect();
    format!("{prefix}_test_{tail}")
}

/// Stripe's error body.
fn stripe_error(
    status: StatusCode,
    error_type: &str,
    code: Option<&str>,
    message: &str,
    param: Option<&str>,
) -> Response {
    let mut error = json!({ "type": error_type, "message": message });
    if let Some(code) = code {
        error["code"] = json!(code);
        if code == "card_declined" {
            error["decline_code"] = json!("generic_decline");
        }
    }
    if let Some(param) = param {
        error["param"] = json!(param);
    }
    (status, Json(json!({ "error": error }))).into_response()
}

fn invalid(message: &str, param: &str) -> Response {
    stripe_error(StatusCode::BAD_REQUEST, "invalid_request_error", Some("parameter_missing"), message, Some(param))
}

/// Form parameters of a Stripe request.
struct Form(Vec<(String, String)>);

impl Form {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// `metadata[k]=v` pairs under `prefix` as a JSON object.
    fn map(&self, prefix: &str) -> Value {
        let open = format!("{prefix}[");
        let map: serde_json::Map<String, Value> = self
            .0
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(&open)?.strip_suffix(']').map(|k| (k.to_owned(), json!(v))))
            .collect();
        Value::Object(map)
    }
}

/// What every API endpoint does first: authenticate, record, maybe fail on purpose, and
/// answer from the idempotency store when the key was seen. `handler` computes a fresh answer.
async fn api(
    stripe: &LocalStripe,
    method: &str,
    path: &str,
    headers: &HeaderMap,
    body: &Bytes,
    handler: impl FnOnce(&LocalStripe, &Form) -> Response,
) -> Response {
    let params: Vec<(String, String)> = serde_urlencoded::from_bytes(body).unwrap_or_default();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let idempotency_key = header("idempotency-key");
    let mut record = RecordedRequest {
        method: method.to_owned(),
        path: path.to_owned(),
        idempotency_key: idempotency_key.clone(),
        stripe_version: header("stripe-version"),
        params: params.clone(),
        status: 0,
    };
    let expected = format!("Bearer {}", stripe.shared.config.secret_key);
    let authorized = header("authorization").as_deref() == Some(expected.as_str());
    let failure = if authorized { take_failure(stripe) } else { None };
    let garble = failure.as_ref().filter(|f| f.garbled).map(|f| f.status);
    let response = if !authorized {
        stripe_error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            None,
            "Invalid API Key provided. This is the local test-mode Stripe.",
            None,
        )
    } else if let Some(failure) = failure.filter(|f| !f.garbled) {
        stripe_error(
            StatusCode::from_u16(failure.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            &failure.error_type,
            failure.code.as_deref(),
            &failure.message,
            None,
        )
    } else {
        let fingerprint = format!("{method} {path} {}", String::from_utf8_lossy(body));
        let replay = idempotency_key.as_ref().and_then(|key| {
            let store = stripe.shared.store.lock().expect("lock");
            store.idempotency.get(key).cloned()
        });
        match replay {
            Some((seen, status, body)) if seen == fingerprint => {
                let mut response = (StatusCode::from_u16(status).unwrap_or(StatusCode::OK), Json(body)).into_response();
                response.headers_mut().insert("idempotent-replayed", "true".parse().expect("header value"));
                response
            }
            Some(_) => stripe_error(
                StatusCode::BAD_REQUEST,
                "idempotency_error",
                None,
                "Keys for idempotent requests can only be used with the same parameters they were first used with.",
                None,
            ),
            None => {
                let response = handler(stripe, &Form(params));
                let (parts, body) = response.into_parts();
                let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default();
                if let (Some(key), true) = (idempotency_key, method == "POST" && parts.status.as_u16() < 500) {
                    let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                    stripe
                        .shared
                        .store
                        .lock()
                        .expect("lock")
                        .idempotency
                        .insert(key, (fingerprint, parts.status.as_u16(), value));
                }
                Response::from_parts(parts, axum::body::Body::from(bytes))
            }
        }
    };
    let response = match garble {
        Some(status) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            (status, "<html><body>upstream connect error or disconnect/reset before headers</body></html>")
                .into_response()
        }
        None => response,
    };
    record.status = response.status().as_u16();
    stripe.shared.store.lock().expect("lock").requests.push(record);
    response
}

fn take_failure(stripe: &LocalStripe) -> Option<InjectedFailure> {
    let mut store = stripe.shared.store.lock().expect("lock");
    let failure = store.failures.front_mut()?;
    failure.times = failure.times.saturating_sub(1);
    let answer = failure.clone();
    if failure.times == 0 {
        store.failures.pop_front();
    }
    Some(answer)
}

async fn recorded_requests(State(stripe): State<LocalStripe>) -> Json<Vec<RecordedRequest>> {
    Json(stripe.requests())
}

async fn inject_failure(State(stripe): State<LocalStripe>, Json(failure): Json<InjectedFailure>) -> StatusCode {
    stripe.fail_next(failure);
    StatusCode::NO_CONTENT
}

async fn sent_events(State(stripe): State<LocalStripe>) -> Json<Vec<SentEvent>> {
    Json(stripe.events())
}

async fn expire_session(State(stripe): State<LocalStripe>, Path(id): Path<String>) -> StatusCode {
    if stripe.expire_session(&id).await { StatusCode::NO_CONTENT } else { StatusCode::NOT_FOUND }
}

/// Redirect after a form post on the test pages.
fn see_other(url: &str) -> Response {
    Redirect::to(url).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_stripe_documented_scheme() {
        // HMAC-SHA256("whsec_test", "1700000000.{}") computed independently.
        let header = sign("{}", "whsec_test", 1_700_000_000);
        assert!(header.starts_with("t=1700000000,v1="));
        assert_eq!(header.len(), "t=1700000000,v1=".len() + 64);
        assert_ne!(sign("{}", "whsec_other", 1_700_000_000), header);
        assert_ne!(sign("{ }", "whsec_test", 1_700_000_000), header);
    }

    #[test]
    fn fixtures_hold_what_we_build_on() {
        let stripe =
            LocalStripe::new(Config { secret_key: "sk".into(), webhook_secret: "wh".into(), webhook_url: None });
        for name in ["checkout.session", "account", "account_link", "transfer", "event"] {
            assert!(stripe.fixture(name).is_object(), "fixture {name} missing");
        }
    }
}
