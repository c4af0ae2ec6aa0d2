//! The market page as visitors get it: kept between renderings (`page_cache`), yet never
//! behind a committed change, with a CSP nonce of its own on every response, and never served
//! to someone signed in. Signed-in pages stream each resource's value once, which hydration
//! relies on.

use crate::common::{H100, PASSWORD, TestApp, agent_dir};
use cardpool_domain::host::GpuModelPrice;
use cardpool_service::{Settings, backend_tests, hosts, testing::Backend};
use reqwest::{Client, StatusCode, header};
use serde_json::json;

backend_tests!(the_market_page_kept_for_visitors_follows_every_change, signed_in_pages_stream_each_resource_once);

/// `/offers` for `client`: the nonce its policy names, and the page.
async fn market_page(app: &TestApp, client: &Client) -> (String, String) {
    let res = client.get(app.url("/offers")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let csp = res.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    let nonce = csp.split("'nonce-").nth(1).unwrap().split('\'').next().unwrap().to_owned();
    let html = res.text().await.unwrap();
    assert!(html.contains(&format!("nonce=\"{nonce}\"")), "the page's scripts carry the response's nonce");
    (nonce, html)
}

async fn the_market_page_kept_for_visitors_follows_every_change(backend: Backend) {
    let app = TestApp::spawn_with(backend, Settings::default()).await;
    let (host, agent) = app.agent_host(2, agent_dir("page-cache")).await;
    let visitor = Client::new();

    let (first_nonce, first) = market_page(&app, &visitor).await;
    assert!(first.contains("$3.60/h"), "the host's on-demand price");
    let (second_nonce, second) = market_page(&app, &visitor).await;
    assert_ne!(first_nonce, second_nonce, "every response has a nonce of its own");
    assert!(!second.contains(&first_nonce), "no trace of the kept rendering's nonce");
    assert_eq!(first.replace(&first_nonce, "N"), second.replace(&second_nonce, "N"), "the same page");

    // A committed change is on the very next page.
    let price = GpuModelPrice {
        gpu_model: H100.into(),
        on_demand_micros: 2_400_000,
        reserved_micros: 2_000_000,
        spot_min_bid_micros: 500_000,
    };
    hosts::update_host_pricing(&app.services, &host.owner, host.state.host_id, &price).await.unwrap();
    let (_, repriced) = market_page(&app, &visitor).await;
    assert!(repriced.contains("$2.40/h") && !repriced.contains("$3.60/h"), "the new price, at once");

    // What a browser gets: the kept page in gzip, with a nonce of its own.
    for _ in 0..2 {
        let res =
            visitor.get(app.url("/offers")).header(header::ACCEPT_ENCODING, "gzip, deflate, br").send().await.unwrap();
        assert_eq!(res.headers()[header::CONTENT_ENCODING], "gzip");
        let csp = res.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap().to_owned();
        let mut html = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&res.bytes().await.unwrap()[..]), &mut html)
            .expect("one valid gzip stream");
        let nonce = csp.split("'nonce-").nth(1).unwrap().split('\'').next().unwrap();
        assert!(html.contains(&format!("nonce=\"{nonce}\"")) && html.contains("$2.40/h") && html.contains("</html>"));
    }
    hosts::set_host_listed(&app.services, &host.owner, host.state.host_id, false).await.unwrap();
    let (_, unlisted) = market_page(&app, &visitor).await;
    assert!(!unlisted.contains("$2.40/h"), "an unlisted host is off the market at once");

    // Someone signed in gets their own rendering, not the visitors' copy.
    let renter = app.funded_renter("renter@example.com", 5).await;
    let (_, own) = market_page(&app, &renter).await;
    assert!(own.contains("renter@example.com"), "the header names the account");
    let (_, visitors) = market_page(&app, &visitor).await;
    assert!(!visitors.contains("renter@example.com"), "and a visitor never sees it");
    agent.abort();
}

/// The ids of the values a page streamed for its resources (`__RESOLVED_RESOURCES[id] = …`).
fn streamed_resources(html: &str) -> Vec<usize> {
    html.split("__RESOLVED_RESOURCES[").skip(1).map(|rest| rest.split(']').next().unwrap().parse().unwrap()).collect()
}

/// A resource made inside a `Suspense` was made again, under a new id and with a fetch of its
/// own, each time the server walked the boundary's children; the browser made it once and
/// hydrated the first copy's value against the last copy's markup (`session`'s module doc in
/// the app). Each page here streams the current account and then its own resources, once each.
async fn signed_in_pages_stream_each_resource_once(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (host, agent) = app.agent_host(2, agent_dir("streamed-once")).await;
    let renter = app.funded_renter("renter@example.com", 50).await;
    let rental = app.book_h100(&renter, host.state.host_id, json!({"command": "sleep 30"})).await;
    cardpool_service::accounts::create_admin(&app.services, "boss@example.com", Some(PASSWORD)).await.unwrap();
    let admin = app.browser();
    assert_eq!(app.sign_in(&admin, "boss@example.com", PASSWORD).await.status(), StatusCode::OK);
    let renter_id = app.get_json(&renter, "/api/v1/me").await["id"].as_i64().unwrap();
    let host_id = host.state.host_id;
    let pages = [
        (&renter, format!("/rentals/{rental}"), 2, "the rental"),
        (&renter, "/rentals".to_owned(), 3, "rentals and gangs"),
        (&renter, "/wallet".to_owned(), 4, "wallet, history and limits"),
        (&renter, "/notifications".to_owned(), 2, "the notifications"),
        (&renter, "/account/tokens".to_owned(), 2, "the API tokens"),
        (&renter, "/account/ssh-keys".to_owned(), 2, "the SSH keys"),
        (&renter, "/account/webhooks".to_owned(), 2, "the webhooks (each one's deliveries load in the browser)"),
        (&host.provider, "/provider/hosts".to_owned(), 4, "hosts, the fleet's totals and alerts"),
        (&host.provider, format!("/provider/hosts/{host_id}"), 2, "the host"),
        (&host.provider, "/provider/earnings".to_owned(), 4, "earnings, their entries and energy"),
        (&admin, "/admin/fleet".to_owned(), 3, "the fleet and its alerts"),
        (&admin, "/admin/users".to_owned(), 2, "the accounts"),
        (&admin, format!("/admin/users/{renter_id}"), 4, "the account, its audit trail and rentals"),
        (&admin, "/admin/hosts".to_owned(), 2, "the hosts"),
        (&admin, format!("/admin/hosts/{host_id}"), 3, "the host's history and rentals"),
        (&admin, "/admin/rentals".to_owned(), 2, "the rentals"),
        (&admin, "/admin/reports".to_owned(), 2, "the report"),
        (&admin, "/admin/audit".to_owned(), 2, "the audit log"),
        (&admin, "/admin/credits".to_owned(), 2, "the credits"),
    ];
    for (client, path, resources, what) in pages {
        // Several times: how often the server walked a boundary depended on timing.
        for _ in 0..5 {
            let res = client.get(app.url(&path)).send().await.unwrap();
            assert_eq!(res.status(), StatusCode::OK, "{path}");
            let ids = streamed_resources(&res.text().await.unwrap());
            assert_eq!(ids.len(), resources, "{path}: the account, then {what}, once each: {ids:?}");
        }
    }
    // A visitor gets the sign-in prompt with a 200: the page's resources answer without calling
    // their server functions, which would set the page's status to 401.
    let visitor = Client::new();
    for path in [format!("/rentals/{rental}"), "/gangs/1".to_owned(), "/wallet".to_owned(), "/admin/rentals".to_owned()]
    {
        let res = visitor.get(app.url(&path)).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK, "{path}");
        let html = res.text().await.unwrap();
        assert!(html.contains("Sign in to continue"), "{path}: the prompt");
    }
    agent.abort();
}
