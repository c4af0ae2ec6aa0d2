//! HTTP tests against the real router on a real socket, on SQLite and PostgreSQL: auth flows,
//! token auth, the sign-in throttle, cross-site rejection, 401/403, headers and pages.

use crate::common::{PASSWORD, TestApp};
use cardpool_service::{
    Settings, backend_tests,
    rate_limit::{Limit, SignInLimits},
    testing::Backend,
};
use reqwest::{Client, StatusCode, header};
use sea_orm::ConnectionTrait;
use serde_json::{Value, json};
use std::time::Duration;

fn session_cookie(res: &reqwest::Response) -> Option<String> {
    res.headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("cardpool_session="))
        .map(str::to_owned)
}

backend_tests!(
    sign_up_sign_out_sign_in_flow,
    session_id_rotates_at_sign_in,
    bad_input_gets_field_errors_and_writes_nothing,
    bearer_tokens_authenticate_until_revoked,
    sign_in_is_rate_limited_with_retry_after,
    cross_site_state_changes_are_refused,
    unauthenticated_and_forbidden,
    password_change_ends_other_sessions,
    pages_health_and_headers,
    server_functions_work_as_plain_form_posts,
    sessions_end_at_their_absolute_lifetime,
);

async fn sign_up_sign_out_sign_in_flow(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let client = app.browser();
    let res = client
        .post(app.url("/api/v1/auth/sign-up"))
        .json(&json!({"email": "Ann@Example.com", "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let cookie = session_cookie(&res).expect("sign-up sets the session cookie");
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"), "{cookie}");
    assert!(!cookie.contains("Secure"), "plain http must not mark the cookie Secure: {cookie}");
    let me: Value = res.json().await.unwrap();
    assert_eq!(me["email"], "ann@example.com");
    assert_eq!(me["roles"], json!({"renter": true, "provider": false, "admin": false}));

    let res = client.get(app.url("/api/v1/me")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.json::<Value>().await.unwrap()["email"], "ann@example.com");

    let res = client.post(app.url("/api/v1/me/provider")).send().await.unwrap();
    assert_eq!(res.json::<Value>().await.unwrap()["roles"]["provider"], true);

    assert_eq!(client.post(app.url("/api/v1/auth/sign-out")).send().await.unwrap().status(), StatusCode::NO_CONTENT);
    assert_eq!(app.status_of_me(&client).await, StatusCode::UNAUTHORIZED);

    let res = app.sign_in(&client, "ann@example.com", PASSWORD).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(app.status_of_me(&client).await, StatusCode::OK);
}

async fn session_id_rotates_at_sign_in(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let client = app.browser();
    app.sign_up(&client, "rot@example.com").await;
    let first = session_cookie(&app.sign_in(&client, "rot@example.com", PASSWORD).await).unwrap();
    let second = session_cookie(&app.sign_in(&client, "rot@example.com", PASSWORD).await).unwrap();
    let id = |c: &str| c.split(';').next().unwrap().to_owned();
    assert_ne!(id(&first), id(&second), "sign-in must issue a new session id");

    let replay = Client::new().get(app.url("/api/v1/me")).header(header::COOKIE, id(&first)).send().await.unwrap();
    assert_eq!(replay.status(), StatusCode::UNAUTHORIZED, "the pre-sign-in session id is dead");
}

async fn bad_input_gets_field_errors_and_writes_nothing(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let client = app.browser();
    let res = client
        .post(app.url("/api/v1/auth/sign-up"))
        .json(&json!({"email": "nope", "password": "short"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = res.json().await.unwrap();
    assert_eq!(body["error"], "validation");
    assert!(body["fields"]["email"].is_string() && body["fields"]["password"].is_string(), "{body}");

    let res = client
        .post(app.url("/api/v1/auth/sign-up"))
        .header(header::CONTENT_TYPE, "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert!(res.status().is_client_error());
    assert_eq!(res.json::<Value>().await.unwrap()["error"], "validation");
    assert_eq!(app.user_count().await, 0);

    app.sign_up(&client, "dup@example.com").await;
    let res = client
        .post(app.url("/api/v1/auth/sign-up"))
        .json(&json!({"email": "DUP@example.com", "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(res.json::<Value>().await.unwrap()["fields"]["email"], "an account with this email already exists");
    assert_eq!(app.user_count().await, 1);
}

async fn bearer_tokens_authenticate_until_revoked(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let browser = app.browser();
    app.sign_up(&browser, "tok@example.com").await;
    let res = browser.post(app.url("/api/v1/tokens")).json(&json!({"name": "ci"})).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::CREATED);
    let created: Value = res.json().await.unwrap();
    let secret = created["secret"].as_str().unwrap().to_owned();
    let id = created["token"]["id"].as_i64().unwrap();

    let cli = Client::new();
    let me = cli.get(app.url("/api/v1/me")).bearer_auth(&secret).send().await.unwrap();
    assert_eq!(me.status(), StatusCode::OK);
    assert_eq!(me.json::<Value>().await.unwrap()["email"], "tok@example.com");

    let listed: Value =
        cli.get(app.url("/api/v1/tokens")).bearer_auth(&secret).send().await.unwrap().json().await.unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert!(!listed.to_string().contains(&secret), "listing never reveals a secret");

    let wrong = cli.get(app.url("/api/v1/me")).bearer_auth("cpt_not-a-real-token").send().await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);

    let revoked = cli.delete(app.url(&format!("/api/v1/tokens/{id}"))).bearer_auth(&secret).send().await.unwrap();
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        cli.get(app.url("/api/v1/me")).bearer_auth(&secret).send().await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );

    let bearer_password_change = cli
        .post(app.url("/api/v1/me/password"))
        .bearer_auth(&secret)
        .json(&json!({"current_password": PASSWORD, "new_password": "another long secret"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bearer_password_change.status(), StatusCode::UNAUTHORIZED);
}

/// Behind a proxy we trust (127.0.0.1 here), clients are told apart by `X-Forwarded-For`.
fn from(app: &TestApp, address: &str) -> Client {
    let mut headers = header::HeaderMap::new();
    headers.insert(header::ORIGIN, app.base.parse().unwrap());
    // A spoofed left-most entry must change nothing: only the hop our proxy added counts.
    headers.insert("x-forwarded-for", format!("10.66.66.66, {address}").parse().unwrap());
    Client::builder().default_headers(headers).cookie_store(true).build().unwrap()
}

async fn sign_in_is_rate_limited_with_retry_after(backend: Backend) {
    let settings = Settings {
        sign_in_limits: SignInLimits {
            per_account: Limit { max: 3, window: Duration::from_secs(300) },
            per_ip: Limit { max: 5, window: Duration::from_secs(300) },
            sign_ups_per_ip: Limit { max: 2, window: Duration::from_secs(3600) },
        },
        ..Settings::default()
    };
    let config = cardpool_server::Config { trusted_proxies: vec!["127.0.0.1".into()], ..Default::default() };
    let app = TestApp::spawn_configured(backend, settings, config).await;
    let (attacker, owner) = (from(&app, "203.0.113.66"), from(&app, "198.51.100.7"));
    app.sign_up(&owner, "lim@example.com").await;
    for _ in 0..3 {
        let res = app.sign_in(&attacker, "lim@example.com", "wrong password!").await;
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(res.json::<Value>().await.unwrap()["message"], "email or password is incorrect");
    }
    let res = app.sign_in(&attacker, "lim@example.com", PASSWORD).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = res.headers()[header::RETRY_AFTER].to_str().unwrap().parse().unwrap();
    assert!(retry > 200 && retry <= 300, "Retry-After {retry}");
    // The owner, from their own address, is not locked out by the attacker.
    assert_eq!(app.sign_in(&owner, "lim@example.com", PASSWORD).await.status(), StatusCode::OK);
    // Nor can the attacker pass as the owner by writing the owner's address first.
    let posing = from(&app, "198.51.100.7, 203.0.113.66");
    assert_eq!(app.sign_in(&posing, "lim@example.com", PASSWORD).await.status(), StatusCode::TOO_MANY_REQUESTS);

    // Per address, failures count whichever account they name; good sign-ins never do (an
    // office behind one address signs in as often as it likes).
    let office = from(&app, "192.0.2.10");
    for _ in 0..10 {
        assert_eq!(app.sign_in(&office, "lim@example.com", PASSWORD).await.status(), StatusCode::OK);
    }
    for n in 0..2 {
        assert_eq!(
            app.sign_in(&attacker, &format!("other{n}@example.com"), PASSWORD).await.status(),
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(app.sign_in(&attacker, "fresh@example.com", PASSWORD).await.status(), StatusCode::TOO_MANY_REQUESTS);

    // Sign-ups: a few per address per hour, then 429; another address is unaffected.
    for n in 0..2 {
        app.sign_up(&from(&app, "192.0.2.77"), &format!("new{n}@example.com")).await;
    }
    let res = from(&app, "192.0.2.77")
        .post(app.url("/api/v1/auth/sign-up"))
        .json(&json!({"email": "new9@example.com", "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(res.headers().contains_key(header::RETRY_AFTER));
    app.sign_up(&from(&app, "192.0.2.78"), "new9@example.com").await;
}

async fn cross_site_state_changes_are_refused(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let plain = Client::builder().cookie_store(true).build().unwrap();
    let evil = plain
        .post(app.url("/api/v1/auth/sign-up"))
        .header(header::ORIGIN, "https://evil.example")
        .json(&json!({"email": "csrf@example.com", "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(evil.status(), StatusCode::FORBIDDEN);
    let cross = plain
        .post(app.url("/rpc/sign_up"))
        .header("sec-fetch-site", "cross-site")
        .form(&[("email", "csrf@example.com"), ("password", PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), StatusCode::FORBIDDEN);
    assert_eq!(app.user_count().await, 0, "refused requests change nothing");

    // Signed in, then a cookie-carrying request without any provenance header: refused.
    let browser = app.browser();
    app.sign_up(&browser, "victim@example.com").await;
    let cookie = session_cookie(&app.sign_in(&browser, "victim@example.com", PASSWORD).await).unwrap();
    let forged = Client::new()
        .post(app.url("/api/v1/tokens"))
        .header(header::COOKIE, cookie.split(';').next().unwrap())
        .json(&json!({"name": "stolen"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let tokens: Value = app.get_json(&browser, "/api/v1/tokens").await;
    assert_eq!(tokens, json!([]));
}

async fn unauthenticated_and_forbidden(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let anon = Client::new();
    let res = anon.get(app.url("/api/v1/me")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(res.headers()[header::WWW_AUTHENTICATE], "Bearer");
    assert_eq!(anon.get(app.url("/api/v1/tokens")).send().await.unwrap().status(), StatusCode::UNAUTHORIZED);

    let renter = app.browser();
    let renter_me = app.sign_up(&renter, "plain@example.com").await;
    assert_eq!(renter.get(app.url("/api/v1/users")).send().await.unwrap().status(), StatusCode::FORBIDDEN);
    let path = format!("/api/v1/users/{}/admin", renter_me["id"]);
    let why = json!({"reason": "runs the night shift"});
    assert_eq!(renter.post(app.url(&path)).json(&why).send().await.unwrap().status(), StatusCode::FORBIDDEN);

    cardpool_service::accounts::create_admin(&app.services, "boss@example.com", Some("boss password 123"))
        .await
        .unwrap();
    let admin = app.browser();
    assert_eq!(app.sign_in(&admin, "boss@example.com", "boss password 123").await.status(), StatusCode::OK);
    let users: Value = app.get_json(&admin, "/api/v1/users").await;
    assert_eq!(users.as_array().unwrap().len(), 2);
    let promoted: Value = admin.post(app.url(&path)).json(&why).send().await.unwrap().json().await.unwrap();
    assert_eq!(promoted["roles"]["admin"], true);
    assert_eq!(renter.get(app.url("/api/v1/users")).send().await.unwrap().status(), StatusCode::OK);
    assert_eq!(anon.get(app.url("/api/v1/nothing-here")).send().await.unwrap().status(), StatusCode::NOT_FOUND);
}

async fn password_change_ends_other_sessions(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let laptop = app.browser();
    let phone = app.browser();
    app.sign_up(&laptop, "pw@example.com").await;
    assert_eq!(app.sign_in(&phone, "pw@example.com", PASSWORD).await.status(), StatusCode::OK);

    let wrong = laptop
        .post(app.url("/api/v1/me/password"))
        .json(&json!({"current_password": "not my password", "new_password": "a new long secret"}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(app.status_of_me(&phone).await, StatusCode::OK, "a failed change ends nothing");

    let res = laptop
        .post(app.url("/api/v1/me/password"))
        .json(&json!({"current_password": PASSWORD, "new_password": "a new long secret"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::NO_CONTENT);
    assert_eq!(app.status_of_me(&laptop).await, StatusCode::OK, "the changing session stays signed in");
    assert_eq!(app.status_of_me(&phone).await, StatusCode::UNAUTHORIZED, "other sessions end");
    assert_eq!(app.sign_in(&phone, "pw@example.com", "a new long secret").await.status(), StatusCode::OK);
}

async fn pages_health_and_headers(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let client = Client::new();
    let health = client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let probe = async |path: &str| {
        let res = client.get(app.url(path)).send().await.unwrap();
        (res.status(), res.text().await.unwrap())
    };
    assert_eq!(probe("/livez").await, (StatusCode::OK, "ok".to_owned()));
    assert_eq!(probe("/readyz").await, (StatusCode::OK, "ready".to_owned()));

    // Every response names its request: a new UUID, or the id a proxy in front gave it.
    let named = client.get(app.url("/livez")).send().await.unwrap();
    let id = named.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let again = client.get(app.url("/livez")).send().await.unwrap();
    assert_ne!(again.headers()["x-request-id"].to_str().unwrap(), id, "one id per request");
    let proxied = client.get(app.url("/livez")).header("x-request-id", "lb-7f3a").send().await.unwrap();
    assert_eq!(proxied.headers()["x-request-id"], "lb-7f3a");

    let home = client.get(app.url("/")).send().await.unwrap();
    assert_eq!(home.status(), StatusCode::OK);
    let csp = home.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap().to_owned();
    assert!(csp.contains("'nonce-") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(home.headers()[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    assert_eq!(home.headers()[header::REFERRER_POLICY], "strict-origin-when-cross-origin");
    let nonce = csp.split("'nonce-").nth(1).unwrap().split('\'').next().unwrap().to_owned();
    let html = home.text().await.unwrap();
    assert!(html.contains("Rent GPUs by the second"));
    assert!(html.contains(&format!("nonce=\"{nonce}\"")), "hydration script carries the nonce");

    for page in [
        "/sign-up",
        "/sign-in",
        "/account",
        "/account/tokens",
        "/offers",
        "/offers?kind=spot&min_gpus=",
        "/wallet",
        "/rentals",
        "/rentals/1",
        "/rent?host=1&model=x",
    ] {
        assert_eq!(client.get(app.url(page)).send().await.unwrap().status(), StatusCode::OK, "{page}");
    }
    // The market is public; malformed filters are a clear 422, an empty one included (the
    // page's form leaves empty fields out of its own parsing; the API says what it expects).
    let offers: Value = app.get_json(&client, "/api/v1/offers?kind=spot").await;
    assert_eq!(offers["total"], 0);
    for empty in ["kind=spot&min_gpus=", "sort=", "unit=", "verified=", "verified=on"] {
        let bad = client.get(app.url(&format!("/api/v1/offers?{empty}"))).send().await.unwrap();
        assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY, "{empty}");
    }
    let bad = client.get(app.url("/api/v1/offers?min_gpus=two")).send().await.unwrap();
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let bad = client.get(app.url("/api/v1/offers?max_price=cheap")).send().await.unwrap();
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(bad.json::<Value>().await.unwrap()["fields"]["max_price"].is_string());

    let missing = client.get(app.url("/no/such/page")).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert!(missing.text().await.unwrap().contains("Page not found"));

    // Pages and JSON go out compressed to a browser that accepts it, and plain to one that
    // does not (this client decodes neither, so it sees the encoding as sent).
    for (path, accept, expected) in [
        ("/offers", "gzip, deflate, br, zstd", Some("gzip")),
        ("/api/v1/offers", "br", None),
        ("/api/v1/offers", "gzip", Some("gzip")),
        ("/offers", "identity", None),
    ] {
        let res = client.get(app.url(path)).header(header::ACCEPT_ENCODING, accept).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        let sent = res.headers().get(header::CONTENT_ENCODING).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(sent.as_deref(), expected, "{path} with Accept-Encoding: {accept}");
    }

    let doc: Value = app.get_json(&client, "/api/v1/openapi.json").await;
    let mut ids: Vec<String> = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|ops| {
            ops.as_object().unwrap().values().filter_map(|op| op["operationId"].as_str().map(str::to_owned))
        })
        .collect();
    ids.sort();
    for expected in [
        "sign_up",
        "sign_in",
        "sign_out",
        "get_me",
        "create_api_token",
        "list_api_tokens",
        "revoke_api_token",
        "list_offers",
        "get_wallet",
        "create_top_up",
        "list_transactions",
        "get_earnings",
        "request_payout",
        "admin_credit",
    ] {
        assert!(ids.iter().any(|id| id == expected), "{expected} missing from {ids:?}");
    }
    // Every `$ref` points at a schema the document defines (generated clients break otherwise).
    fn refs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(target)) = map.get("$ref") {
                    out.push(target.clone());
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut targets = Vec::new();
    refs(&doc, &mut targets);
    assert!(!targets.is_empty());
    let missing: std::collections::BTreeSet<&String> = targets
        .iter()
        .filter(|t| {
            let name = t.strip_prefix("#/components/schemas/").unwrap_or(t);
            doc["components"]["schemas"].get(name).is_none()
        })
        .collect();
    assert!(missing.is_empty(), "the document refers to schemas it does not define: {missing:?}");
    // Parameters say where they go and whether they are needed.
    let params = doc["paths"]["/api/v1/telemetry"]["get"]["parameters"].as_array().unwrap();
    let scope = params.iter().find(|p| p["name"] == "scope").unwrap();
    assert_eq!((&scope["in"], &scope["required"]), (&json!("query"), &json!(true)), "{scope}");
    // Every operation documents the errors any request may meet.
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            for status in ["400", "413", "422", "429", "500"] {
                assert!(op["responses"].get(status).is_some(), "{method} {path} does not document {status}");
            }
            if method != "get" {
                assert!(op["responses"].get("403").is_some(), "{method} {path} does not document 403 (cross-site)");
            }
        }
    }

    // A database one migration behind this build: not ready (a load balancer routes around
    // it), yet alive (nothing to restart).
    let newest = "(SELECT MAX(version) FROM seaql_migrations)";
    let removed = app
        .services
        .db
        .execute_unprepared(&format!("DELETE FROM seaql_migrations WHERE version = {newest}"))
        .await
        .unwrap();
    assert_eq!(removed.rows_affected(), 1);
    assert_eq!(
        probe("/readyz").await,
        (StatusCode::SERVICE_UNAVAILABLE, "1 database migration(s) not applied yet".to_owned())
    );
    assert_eq!(probe("/livez").await.0, StatusCode::OK);
}

async fn server_functions_work_as_plain_form_posts(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let client = app.browser();
    let res = client
        .post(app.url("/rpc/sign_up"))
        .header(header::ACCEPT, "text/html")
        .header(header::REFERER, app.url("/sign-up"))
        .form(&[("email", "form@example.com"), ("password", PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::FOUND, "a no-JS form post is redirected back");
    assert!(session_cookie(&res).is_some());
    assert_eq!(app.status_of_me(&client).await, StatusCode::OK);

    let res = client.post(app.url("/rpc/get_me")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.json::<Value>().await.unwrap()["email"], "form@example.com");

    // The navigation's sign-out is a plain form: it lands on the home page as a visitor.
    let out = client
        .post(app.url("/rpc/sign_out"))
        .header(header::ACCEPT, "text/html")
        .header(header::REFERER, app.url("/account"))
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::FOUND);
    assert_eq!(out.headers()[header::LOCATION], "/", "wherever it was posted from");
    assert_eq!(app.status_of_me(&client).await, StatusCode::UNAUTHORIZED);

    let bad = app
        .browser()
        .post(app.url("/rpc/sign_in"))
        .form(&[("email", "form@example.com"), ("password", "wrong one!!")])
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED, "server functions answer with the error's status");
    let body: Value = bad.json().await.unwrap();
    assert_eq!(body["error"], "invalid_credentials");
}

async fn sessions_end_at_their_absolute_lifetime(backend: Backend) {
    let settings = Settings {
        session: cardpool_service::auth::SessionPolicy {
            idle: Duration::from_secs(3600),
            absolute: Duration::from_secs(1),
        },
        ..Settings::default()
    };
    let app = TestApp::spawn_with(backend, settings).await;
    let client = app.browser();
    app.sign_up(&client, "abs@example.com").await;
    assert_eq!(app.status_of_me(&client).await, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(app.status_of_me(&client).await, StatusCode::UNAUTHORIZED, "however active, a session ends");
}

/// Leptos parks, process-wide, every resource first polled while a route list is being
/// generated (a global flag in `leptos_server`, leptos-rs/leptos#4773), so a page rendering
/// while another router is built would never finish. Building routers over and over while
/// pages render must leave every page complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn building_another_router_never_stalls_pages_being_rendered() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let client = Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let builder = {
        let (services, stop) = (app.services.clone(), stop.clone());
        tokio::task::spawn_blocking(move || {
            let config = cardpool_server::Config::default();
            let mut built = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = cardpool_server::http::router(
                    services.clone(),
                    cardpool_server::http::leptos_options(&config),
                    cardpool_server::http::HttpOptions::from_config(&config),
                );
                built += 1;
            }
            built
        })
    };
    let mut stalled = None;
    'rounds: for round in 0..60 {
        for page in ["/", "/offers", "/rentals/1"] {
            let body = match client.get(app.url(page)).send().await {
                Ok(res) => res.text().await,
                Err(e) => Err(e),
            };
            match body {
                Ok(body) if body.contains("</html>") => {}
                Ok(_) => stalled = Some(format!("round {round}: {page} is cut short")),
                Err(e) => stalled = Some(format!("round {round}: {page} never finished: {e}")),
            }
            if stalled.is_some() {
                break 'rounds;
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let built = builder.await.unwrap();
    assert_eq!(stalled, None);
    assert!(built > 0, "routers were built while pages rendered");
}
