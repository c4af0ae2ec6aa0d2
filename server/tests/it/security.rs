//! The security suite, on SQLite and PostgreSQL.
//!
//! An authorization matrix generated from the served OpenAPI document: every operation it
//! lists is called as anonymous, a renter (who owns the resources the paths name), another
//! renter, a provider (who owns the host), another provider and an admin, and what each is
//! answered must fall in the operation's allowed set below (allowed: anything but 401, 403,
//! 404; denied: one of those). An operation the document lists that the table does not name
//! fails the test, so a new route cannot ship without its row.
//!
//! A CSRF sweep: every state-changing operation of the document, and every server function,
//! called with a session cookie from a cross-site `Origin`, with `Sec-Fetch-Site: cross-site`,
//! and with no provenance at all, is refused with 403 and changes nothing.

use crate::common::{PASSWORD, TestApp};
use cardpool_domain::{
    account::{AddSshKeyRequest, CreateApiTokenRequest},
    fabric::{HostFabric, Interconnect},
    gangs::{BookGangRequest, OnMemberLoss},
    notifications::NewWebhook,
    offers::RentalKind,
    payments::{CreateTopUpRequest, HistoryQuery},
    rentals::{BookOfferRequest, Workload},
};
use cardpool_service::{
    accounts, api_tokens,
    auth::Principal,
    backend_tests,
    entities::alerts,
    hosts, payments, rentals, ssh_access,
    testing::{self, Backend},
};
use reqwest::{Client, Method, StatusCode, header};
use sea_orm::{ActiveModelTrait, ActiveValue::Set};
use serde_json::{Value, json};
use std::collections::BTreeMap;

backend_tests!(every_operation_answers_only_its_audience, cross_site_state_changes_are_refused_everywhere);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Who {
    Anonymous,
    OtherRenter,
    OtherProvider,
    Provider,
    Admin,
    Renter,
}

use Who::*;

const EVERYONE: &[Who] = &[Anonymous, OtherRenter, OtherProvider, Provider, Admin, Renter];
const SIGNED_IN: &[Who] = &[OtherRenter, OtherProvider, Provider, Admin, Renter];
const PROVIDERS: &[Who] = &[OtherProvider, Provider];
const PROVIDERS_AND_ADMIN: &[Who] = &[OtherProvider, Provider, Admin];
const ADMIN: &[Who] = &[Admin];
const RENTER: &[Who] = &[Renter];
const RENTER_AND_ADMIN: &[Who] = &[Renter, Admin];
const HOST_OWNER: &[Who] = &[Provider];
const HOST_OWNER_AND_ADMIN: &[Who] = &[Provider, Admin];
const RENTAL_PARTIES: &[Who] = &[Renter, Provider, Admin];

/// Who may pass authorization, per operation. Comments say why where it is not obvious.
fn audience(operation: &str) -> Option<&'static [Who]> {
    Some(match operation {
        // Public: signing up and in, the market, an agent's enrollment (its token is the key).
        "sign_up" | "sign_in" | "sign_out" | "list_offers" | "get_advice" | "enroll_host" => EVERYONE,
        // Anyone signed in, about themselves.
        "get_me"
        | "change_password"
        | "enable_provider"
        | "create_api_token"
        | "list_api_tokens"
        | "get_wallet"
        | "create_top_up"
        | "list_transactions"
        | "export_transactions"
        | "book_offer"
        | "list_rentals"
        | "book_gang"
        | "list_gangs"
        | "add_ssh_key"
        | "list_ssh_keys"
        | "list_notifications"
        | "mark_notifications_read"
        | "list_webhooks"
        | "create_webhook"
        | "get_limits"
        | "set_limits" => SIGNED_IN,
        // Alerts: an admin's all, a provider's own hosts' (an empty list for anyone else).
        "list_alerts" => SIGNED_IN,
        // The renter's own things; tokens, top-ups, receipts and keys are nobody else's.
        "revoke_api_token" | "get_top_up" | "get_receipt" | "remove_ssh_key" => RENTER,
        // A webhook and its delivery log are its account's alone.
        "delete_webhook" | "send_test_event" | "list_deliveries" => RENTER,
        // A rental's page: its renter, its host's provider (whose GPUs it holds), admins.
        "get_rental" => RENTAL_PARTIES,
        // Acting on a rental: its renter, and admins, who may act on any rental.
        "stop_rental" | "change_bid" | "set_rental_limits" => RENTER_AND_ADMIN,
        // A gang: its renter, and admins (its members' pages are their hosts' providers' too).
        "get_gang" | "stop_gang" | "replace_gang_member" => RENTER_AND_ADMIN,
        // What the workload prints and how its GPUs run are the renter's (the provider sees
        // the whole host's telemetry under the host's scope).
        "rental_logs" | "get_telemetry" | "live_telemetry" => RENTER_AND_ADMIN,
        // Providers' own business.
        "create_enrollment_token"
        | "get_earnings"
        | "list_earnings_entries"
        | "create_onboarding_link"
        | "request_payout" => PROVIDERS,
        // Hosts: a provider's own, every host for admins.
        "list_hosts" => PROVIDERS_AND_ADMIN,
        // One host: its provider (admins see it too, and may revoke it).
        "get_host" | "revoke_host" => HOST_OWNER_AND_ADMIN,
        "update_host_pricing" | "set_host_listed" | "set_gpu_sale" | "set_mig_layout" | "set_host_fabric" => HOST_OWNER,
        // The platform's.
        "list_users" | "grant_admin" | "admin_credit" | "list_admin_credits" | "get_fleet" | "acknowledge_alert" => {
            ADMIN
        }
        // The admin console: each action with a reason, audited.
        "revoke_admin" | "suspend_user" | "reinstate_user" | "verify_host" | "unverify_host" | "delist_host"
        | "relist_host" | "list_audit" | "get_account" | "host_history" | "list_all_rentals" | "refund_rental"
        | "get_report" => ADMIN,
        _ => return None,
    })
}

/// Operations that change who someone is or end what they name: called last, and only as
/// the first principal allowed (after that the resource is gone or the roles have changed).
const DESTRUCTIVE: &[&str] = &[
    "revoke_api_token",
    "remove_ssh_key",
    "delete_webhook",
    "stop_rental",
    "stop_gang",
    "revoke_host",
    "enable_provider",
    "grant_admin",
    "sign_out",
];

struct World {
    tokens: BTreeMap<Who, String>,
    /// Path parameter per operation.
    ids: BTreeMap<&'static str, i64>,
    rental: i64,
    host: i64,
}

async fn token(app: &TestApp, who: &Principal) -> String {
    let request = CreateApiTokenRequest { name: "matrix".into() };
    api_tokens::create_api_token(&app.services, who, &request).await.unwrap().secret
}

/// The people and the things they own: the renter's rental on the provider's host, top-up,
/// wallet transaction, token and SSH key; an alert on the host.
async fn world(app: &TestApp) -> World {
    let s = &app.services;
    let renter = testing::renter(s, "renter@example.com").dollars(100).await;
    let other_renter = testing::renter(s, "other-renter@example.com").dollars(100).await;
    let provider = testing::provider(s, "provider@example.com").await;
    let other_provider = testing::provider(s, "other-provider@example.com").await;
    // Whom the admin console's account actions are tried on (nobody else's calls depend on it).
    let suspect = testing::renter(s, "suspect@example.com").await;
    accounts::create_admin(s, "admin@example.com", Some(PASSWORD)).await.unwrap();
    let admin = accounts::principal_for_email(s, "admin@example.com").await.unwrap();
    let host = testing::host(s, &provider, "rig").gpus(2).await;
    let other_host = testing::host(s, &other_provider, "other-rig").await;
    // The renter's gang over both hosts, on one fabric.
    for (owner, id, address) in [(&provider, host, "10.8.0.1"), (&other_provider, other_host, "10.8.0.2")] {
        let fabric = HostFabric {
            fabric_id: "lab-ib".into(),
            interconnect: Interconnect::Infiniband,
            gbps: 400,
            address: Some(address.into()),
        };
        hosts::set_host_fabric(s, owner, id, Some(&fabric)).await.unwrap();
    }
    let gang = BookGangRequest {
        gpu_model: testing::TEST_GPU_MODEL.into(),
        nodes: 2,
        gpus_per_node: 1,
        kind: RentalKind::OnDemand,
        bid_micros: None,
        fabric_id: None,
        workload: Workload { command: Some("sleep 600".into()), ..Workload::default() },
        starts_at: None,
        hours: None,
        on_member_loss: OnMemberLoss::Stop,
        master_port: None,
    };
    let gang = rentals::book_gang(s, &renter, &gang).await.unwrap().id;
    let booking = BookOfferRequest {
        host_id: host,
        gpu_model: testing::TEST_GPU_MODEL.into(),
        gpu_count: 1,
        kind: RentalKind::OnDemand,
        workload: Workload { command: Some("sleep 600".into()), ..Workload::default() },
        bid_micros: None,
        starts_at: None,
        hours: None,
        stop_when_idle: false,
        limits: Default::default(),
    };
    let rental = rentals::book_offer(s, &renter, &booking).await.unwrap().id;
    let top_up = payments::create_top_up(s, &renter, &CreateTopUpRequest { amount: "20".into() }).await.unwrap();
    let transaction =
        payments::list_transactions(s, &renter, &HistoryQuery::default()).await.unwrap()[0].transaction_id;
    let key = AddSshKeyRequest {
        name: "laptop".into(),
        public_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBaDamN0R4yoNk0deoyauKxZoR4kZrmojsEBVcLk9J9h matrix".into(),
    };
    let key = ssh_access::add_ssh_key(s, &renter, &key).await.unwrap().id;
    let hook = NewWebhook { url: "https://hooks.example.com/cardpool".into() };
    let webhook = cardpool_service::notify::webhooks::create(s, &renter, &hook).await.unwrap().id;
    let alert = alerts::ActiveModel {
        kind: Set("gpu_hot".into()),
        host_id: Set(host),
        message: Set("GPU 0 is hot".into()),
        raised_at: Set(chrono::Utc::now()),
        ..Default::default()
    }
    .insert(&s.db)
    .await
    .unwrap()
    .id;
    let mut tokens = BTreeMap::new();
    let renter_token = api_tokens::create_api_token(s, &renter, &CreateApiTokenRequest { name: "doomed".into() })
        .await
        .unwrap()
        .token
        .id;
    for (who, principal) in [
        (Renter, &renter),
        (OtherRenter, &other_renter),
        (Provider, &provider),
        (OtherProvider, &other_provider),
        (Admin, &admin),
    ] {
        tokens.insert(who, token(app, principal).await);
    }
    let ids = BTreeMap::from([
        ("revoke_api_token", renter_token),
        ("get_top_up", top_up.top_up.id),
        ("get_receipt", transaction),
        ("remove_ssh_key", key),
        ("delete_webhook", webhook),
        ("send_test_event", webhook),
        ("list_deliveries", webhook),
        ("set_rental_limits", rental),
        ("get_rental", rental),
        ("stop_rental", rental),
        ("get_gang", gang),
        ("stop_gang", gang),
        ("replace_gang_member", gang),
        ("change_bid", rental),
        ("rental_logs", rental),
        ("get_host", host),
        ("revoke_host", host),
        ("update_host_pricing", host),
        ("set_host_listed", host),
        ("set_gpu_sale", host),
        ("set_mig_layout", host),
        ("set_host_fabric", host),
        ("grant_admin", other_renter.user_id),
        ("revoke_admin", suspect.user_id),
        ("suspend_user", suspect.user_id),
        ("reinstate_user", suspect.user_id),
        ("verify_host", host),
        ("unverify_host", host),
        ("delist_host", host),
        ("relist_host", host),
        ("acknowledge_alert", alert),
        ("get_account", suspect.user_id),
        ("host_history", host),
        ("refund_rental", rental),
    ]);
    World { tokens, ids, rental, host }
}

/// The document's operations: (operation id, method, path template), in document order.
async fn operations(app: &TestApp) -> Vec<(String, Method, String)> {
    let doc: Value = Client::new().get(app.url("/api/v1/openapi.json")).send().await.unwrap().json().await.unwrap();
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            out.push((op["operationId"].as_str().unwrap().to_owned(), method, path.clone()));
        }
    }
    out
}

fn url_of(app: &TestApp, world: &World, operation: &str, path: &str) -> String {
    let mut url = path.to_owned();
    if let Some(id) = world.ids.get(operation) {
        url = url.replace("{id}", &id.to_string());
    }
    if matches!(operation, "get_telemetry" | "live_telemetry") {
        url.push_str(&format!("?scope=rental&id={}", world.rental));
    }
    app.url(&url)
}

/// A body that parses, so that what answers is the authorization, not the body's shape.
/// Bodies of the operations every signed-in caller may use stay empty (their 422 is allowed).
fn body(operation: &str) -> Value {
    match operation {
        "admin_credit" => json!({"email": "renter@example.com", "amount": "1", "kind": "credit", "reason": "matrix"}),
        "set_host_listed" => json!({"listed": true}),
        "set_gpu_sale" => json!({"gpu_index": 0, "sold_as": "whole"}),
        "set_mig_layout" => json!({"gpu_index": 0, "profiles": ["1g.10gb"]}),
        "set_host_fabric" => json!({"fabric": {"fabric_id": "lab-ib", "interconnect": "infiniband", "gbps": 400}}),
        "update_host_pricing" => json!({
            "gpu_model": testing::TEST_GPU_MODEL, "on_demand_micros": 2_000_000, "reserved_micros": 1_600_000,
            "spot_min_bid_micros": 800_000
        }),
        "change_bid" => json!({"bid_micros": 900_000}),
        "replace_gang_member" => json!({"rank": 1}),
        "grant_admin" | "revoke_admin" | "suspend_user" | "reinstate_user" | "verify_host" | "unverify_host"
        | "delist_host" | "relist_host" => json!({"reason": "the matrix checks who may"}),
        "refund_rental" => json!({"amount": "0.01", "reason": "the matrix checks who may"}),
        _ => json!({}),
    }
}

async fn call(client: &Client, operation: &str, method: &Method, url: &str, token: Option<&String>) -> StatusCode {
    let mut request = client.request(method.clone(), url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if *method != Method::GET {
        request = request.json(&body(operation));
    }
    // A live feed answers its status at once; its body never ends.
    request.send().await.unwrap().status()
}

fn denied(status: StatusCode) -> bool {
    matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND)
}

async fn every_operation_answers_only_its_audience(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let world = world(&app).await;
    let client = Client::new();
    let mut operations = operations(&app).await;
    assert!(operations.len() >= 40, "{operations:?}");
    operations.sort_by_key(|(id, _, _)| DESTRUCTIVE.contains(&id.as_str()));
    let mut wrong = Vec::new();
    let mut calls = 0;
    for (operation, method, path) in &operations {
        let Some(allowed) = audience(operation) else {
            wrong.push(format!("{operation}: not in the matrix; say who may call it"));
            continue;
        };
        let url = url_of(&app, &world, operation, path);
        let destructive = DESTRUCTIVE.contains(&operation.as_str());
        // The denied first, then the allowed (a destructive operation: only the first of them).
        let mut order: Vec<Who> = EVERYONE.iter().copied().filter(|w| !allowed.contains(w)).collect();
        order.extend(allowed.iter().copied().take(if destructive { 1 } else { allowed.len() }));
        for who in order {
            let status = call(&client, operation, method, &url, world.tokens.get(&who)).await;
            calls += 1;
            let ok = if allowed.contains(&who) { !denied(status) } else { denied(status) };
            if !ok {
                wrong.push(format!("{operation} ({method} {url}) as {who:?}: {status}"));
            }
        }
    }
    eprintln!("{} operations, {calls} calls", operations.len());
    assert!(wrong.is_empty(), "authorization matrix:\n{}", wrong.join("\n"));
    // What the matrix's allowed calls did stays within their owners' reach: the host still
    // belongs to its provider, the other renter is no admin unless the admin said so.
    let detail: Value =
        app.get_json(&client_with(&world.tokens[&Provider]), &format!("/api/v1/hosts/{}", world.host)).await;
    assert_eq!(detail["host"]["status"], "revoked", "revoked by its provider, the only caller allowed");
}

fn client_with(token: &str) -> Client {
    let mut headers = header::HeaderMap::new();
    headers.insert(header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
    Client::builder().default_headers(headers).build().unwrap()
}

/// Every state-changing route, API and server functions alike, refuses a request that a
/// browser made for another site, whatever the route would otherwise have done.
async fn cross_site_state_changes_are_refused_everywhere(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let world = world(&app).await;
    let browser = app.browser();
    app.sign_in(&browser, "renter@example.com", PASSWORD).await;
    let cookie_client = Client::builder().cookie_store(true).build().unwrap();
    let res = cookie_client
        .post(app.url("/api/v1/auth/sign-in"))
        .header(header::ORIGIN, app.base.as_str())
        .json(&json!({"email": "renter@example.com", "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let mut routes: Vec<(Method, String)> = operations(&app)
        .await
        .into_iter()
        .filter(|(_, method, _)| *method != Method::GET)
        .map(|(operation, method, path)| (method, url_of(&app, &world, &operation, &path)))
        .collect();
    let server_functions: Vec<(Method, String)> = leptos::server_fn::axum::server_fn_paths()
        .filter(|(_, method)| *method != Method::GET)
        .map(|(path, method)| (method, app.url(path)))
        .collect();
    assert!(server_functions.len() >= 10, "{server_functions:?}");
    routes.extend(server_functions);
    let before = app.user_count().await;
    let mut wrong = Vec::new();
    for (method, url) in &routes {
        for (name, headers) in [
            ("cross-site Origin", vec![(header::ORIGIN, "https://evil.example")]),
            ("Sec-Fetch-Site: cross-site", vec![(header::HeaderName::from_static("sec-fetch-site"), "cross-site")]),
            ("no Origin", vec![]),
        ] {
            let mut request = cookie_client.request(method.clone(), url).json(&json!({}));
            for (header, value) in headers {
                request = request.header(header, value);
            }
            let status = request.send().await.unwrap().status();
            if status != StatusCode::FORBIDDEN {
                wrong.push(format!("{method} {url} with {name}: {status}"));
            }
        }
    }
    assert!(wrong.is_empty(), "cross-site requests not refused:\n{}", wrong.join("\n"));
    assert_eq!(app.user_count().await, before, "refused requests change nothing");
    let me: Value = app.get_json(&browser, "/api/v1/me").await;
    assert_eq!(me["email"], "renter@example.com", "the session survived the sweep");
}
