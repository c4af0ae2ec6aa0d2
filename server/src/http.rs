//! The HTTP stack: routes, sessions and the middleware every request passes through.

use crate::{
    Config, api,
    assets::Assets,
    edges::{ApiError, SESSION_COOKIE},
    page_cache::PageCache,
};
use axum::{
    Router,
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header},
    middleware::{Next, from_fn_with_state},
    response::{IntoResponse, Response},
    routing::get,
};
use cardpool_app::{App, shell, ssr::AppState};
use cardpool_service::{Services, db, session_store::DbSessionStore};
use leptos::prelude::*;
use leptos_axum::{AxumRouteListing, LeptosRoutes, generate_route_list};
use std::sync::{Arc, OnceLock};
use tower_http::{
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    trace::TraceLayer,
};
use tower_sessions::{Expiry, SessionManagerLayer, cookie::SameSite};

/// Options of the HTTP layer that come from configuration.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    pub https: bool,
    pub heartbeat_interval: std::time::Duration,
    pub trusted_proxies: crate::limits::TrustedProxies,
    pub public_origin: Option<String>,
    pub metrics_token: Option<String>,
}

impl HttpOptions {
    pub fn from_config(config: &Config) -> Self {
        HttpOptions {
            https: config.served_over_https(),
            heartbeat_interval: std::time::Duration::from_secs(config.heartbeat_interval_secs.max(1)),
            trusted_proxies: config.trusted_proxies().unwrap_or_default(),
            public_origin: config.public_url.as_deref().map(|u| u.trim_end_matches('/').to_owned()),
            metrics_token: config.metrics_token.as_ref().map(|t| t.expose().to_owned()).filter(|t| !t.is_empty()),
        }
    }
}

/// The bundle's name under `pkg/` (cargo-leptos `output-name`).
const OUTPUT_NAME: &str = "cardpool";

/// Leptos options for serving the site cargo-leptos built under `site_root`. The bundle's
/// files carry content hashes when cargo-leptos left a `hash.txt` (Leptos reads the names from
/// it): beside this binary, where cargo-leptos writes it, or in the site root, where an installed
/// copy keeps it (the Dockerfile, the systemd unit) so the binary can live in a `bin` of its own.
/// A binary with neither (tests, examples) links the plain names.
pub fn leptos_options(config: &Config) -> LeptosOptions {
    let hashes = hash_file(&config.site_root);
    LeptosOptions::builder()
        .output_name(OUTPUT_NAME)
        .site_root(config.site_root.to_string_lossy().into_owned())
        .site_pkg_dir("pkg")
        .site_addr(config.addr)
        .hash_files(hashes.is_some())
        // Leptos joins this to the binary's folder; an absolute path replaces that folder.
        .hash_file(hashes.map_or_else(|| "hash.txt".into(), |f| f.to_string_lossy().into()))
        .build()
}

/// Where cargo-leptos's `hash.txt` is, if the site was built with content-hashed names.
fn hash_file(site_root: &std::path::Path) -> Option<std::path::PathBuf> {
    let beside_binary = std::env::current_exe().ok().and_then(|exe| Some(exe.parent()?.join("hash.txt")));
    let in_site = std::path::absolute(site_root.join("hash.txt")).ok();
    beside_binary.into_iter().chain(in_site).find(|f| f.is_file())
}

/// The whole application as one router.
pub fn router(services: Services, leptos_options: LeptosOptions, options: HttpOptions) -> Router {
    let idle = time::Duration::try_from(services.settings.session.idle).unwrap_or(time::Duration::hours(12));
    let sessions = SessionManagerLayer::new(DbSessionStore::new(services.db.clone()))
        .with_name(SESSION_COOKIE)
        .with_http_only(true)
        .with_same_site(SameSite::Lax)
        .with_secure(options.https)
        .with_expiry(Expiry::OnInactivity(idle));
    let state = AppState { leptos_options, services, public_url: options.public_origin.clone() };
    let routes = page_routes().to_vec();
    let metrics = Arc::new(crate::metrics::ServerMetrics::default());
    let _ = metrics.started.set(std::time::Instant::now());
    let gateway =
        crate::gateway::GatewayOptions { heartbeat_interval: options.heartbeat_interval, metrics: metrics.clone() };
    let metrics_token = crate::metrics::MetricsToken(options.metrics_token.as_deref().map(Arc::from));
    let options = Arc::new(options);
    let hashed_dir = state.leptos_options.hash_files.then_some(&*state.leptos_options.site_pkg_dir);
    let assets = Assets::load(std::path::Path::new(&*state.leptos_options.site_root), hashed_dir);

    Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(crate::metrics::scrape))
        .nest("/api/v1", api::router())
        .route("/agent/v1/connect", get(crate::gateway::connect))
        .route("/stripe/webhook", axum::routing::post(api::payments::stripe_webhook))
        .leptos_routes(&state, routes, {
            let leptos_options = state.leptos_options.clone();
            move || shell(leptos_options.clone())
        })
        .fallback(move |state: State<AppState>, req: Request| static_file_or_not_found(assets.clone(), state, req))
        .layer(from_fn_with_state(
            (PageCache::default(), state.services.stock_version.clone()),
            crate::page_cache::serve,
        ))
        .layer(compression())
        .layer(axum::Extension(gateway))
        .layer(axum::Extension(metrics_token))
        .layer(axum::middleware::from_fn(crate::metrics::count_requests))
        .layer(axum::Extension(metrics))
        .layer(sessions)
        .layer(from_fn_with_state(options.clone(), reject_cross_site))
        .layer(axum::middleware::from_fn(crate::limits::limit_body))
        .layer(from_fn_with_state(options.trusted_proxies.clone(), crate::limits::client_ip))
        .layer(from_fn_with_state(options, security_headers))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        // Outermost: every request has an id (the proxy's, or a new UUID) before it is traced,
        // and the response carries it back.
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .with_state(state)
}

/// Each request's span: method, path and request id, so every line logged while serving it
/// (JSON logs included) says which request it belongs to.
fn request_span(request: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let id = request.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("");
    tracing::info_span!("request", method = %request.method(), path = %request.uri().path(), request_id = %id)
}

/// The app's page routes, generated once per process.
///
/// While Leptos generates a route list it sets a process-wide flag that parks, forever, every
/// resource first polled anywhere in the process (leptos-rs/leptos#4773). Generating it again
/// for every router (each test server, each benchmark server) would hang pages that another
/// server is rendering at that moment, so this one process-wide cache is the guard: callers
/// wait here while it is built, and nothing renders through a router that is not built yet.
fn page_routes() -> &'static [AxumRouteListing] {
    static ROUTES: OnceLock<Vec<AxumRouteListing>> = OnceLock::new();
    ROUTES.get_or_init(|| generate_route_list(App))
}

/// Pages and JSON are gzipped on the fly when the browser accepts it. Not brotli: its encoder
/// allocates and zeroes megabytes of window and hash tables per response, which profiled as a
/// third of the CPU time of a server-rendered `/offers`; gzip's 32 KB window costs little, and
/// a page shrinks about as much. Static files are not compressed here (they carry their
/// precompressed brotli already), nor are live feeds (SSE must not be buffered).
fn compression() -> tower_http::compression::CompressionLayer<impl tower_http::compression::Predicate> {
    use tower_http::compression::{CompressionLayer, DefaultPredicate, Predicate};
    let text = |_: StatusCode, _: http::Version, headers: &HeaderMap, _: &http::Extensions| {
        headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("text/html") || t.starts_with("application/json"))
    };
    CompressionLayer::new().no_br().no_deflate().no_zstd().gzip(true).compress_when(DefaultPredicate::new().and(text))
}

/// A file of the built site, from memory; anything else is Leptos' 404 page.
async fn static_file_or_not_found(assets: Assets, state: State<AppState>, req: Request) -> Response {
    if let Some(response) = assets.respond(req.method(), req.uri().path(), req.headers()).await {
        return response;
    }
    let uri = req.uri().clone();
    leptos_axum::file_and_error_handler::<AppState, _>(shell)(uri, state, req).await
}

/// `200 ok` when the database answers, `503` otherwise.
async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    if db::ping(&state.services.db).await {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "database unreachable")
    }
}

/// `200 ready` when this server can take traffic (database reachable, migrations applied, and
/// in a cluster NATS connected), `503` with the reason otherwise. `/livez` answers as long as
/// the process serves at all: an orchestrator restarts on a failed liveness probe and only
/// routes around a failed readiness one.
async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let ready = match db::readiness(&state.services.db).await {
        Ok(()) => state.services.bus.readiness(),
        Err(reason) => Err(reason),
    };
    match ready {
        Ok(()) => (StatusCode::OK, "ready".to_owned()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

/// Refuses state-changing requests that a browser sent on behalf of another site.
///
/// Browsers label every request with `Sec-Fetch-Site` and send `Origin` on every POST; we
/// accept only same-origin ones. A request with neither header is not from a modern browser
/// (curl, an SDK with a bearer token) and is accepted only if it carries no session cookie,
/// since the cookie is the one thing a forged request could borrow.
async fn reject_cross_site(State(options): State<Arc<HttpOptions>>, req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    match cross_site_verdict(req.headers(), options.public_origin.as_deref()) {
        Ok(()) => next.run(req).await,
        Err(reason) => {
            tracing::warn!(path = %req.uri().path(), reason, "cross-site request refused");
            ApiError(cardpool_domain::AppError::forbidden(format!("cross-site request refused: {reason}")))
                .into_response()
        }
    }
}

fn cross_site_verdict(headers: &HeaderMap, public_origin: Option<&str>) -> Result<(), &'static str> {
    let fetch_site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if fetch_site.is_some_and(|site| site != "same-origin" && site != "none") {
        return Err("Sec-Fetch-Site is not same-origin");
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().map_err(|_| "malformed Origin")?;
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
        let origin_host = origin.split_once("://").map(|(_, rest)| rest).unwrap_or("");
        let matches_host = !host.is_empty() && origin_host == host;
        let matches_public = public_origin.is_some_and(|p| p == origin);
        return if matches_host || matches_public { Ok(()) } else { Err("Origin does not match this site") };
    }
    if fetch_site.is_some() {
        return Ok(());
    }
    if crate::edges::has_session_cookie(headers) { Err("no Origin on a cookie-authenticated request") } else { Ok(()) }
}

/// Headers every response gets. Pages set their own nonce-based Content-Security-Policy; any
/// other response gets one that allows nothing.
async fn security_headers(State(options): State<Arc<HttpOptions>>, req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let headers = response.headers_mut();
    let defaults = [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "strict-origin-when-cross-origin"),
        (header::HeaderName::from_static("cross-origin-opener-policy"), "same-origin"),
        (header::HeaderName::from_static("permissions-policy"), "camera=(), microphone=(), geolocation=(), payment=()"),
        (header::CONTENT_SECURITY_POLICY, "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"),
    ];
    for (name, value) in defaults {
        headers.entry(name).or_insert(HeaderValue::from_static(value));
    }
    if options.https {
        headers
            .insert(header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static("max-age=31536000; includeSubDomains"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (header::HeaderName::from_static(k), HeaderValue::from_static(v))).collect()
    }

    #[test]
    fn cross_site_rules() {
        let same = headers(&[("host", "app.test"), ("origin", "http://app.test"), ("sec-fetch-site", "same-origin")]);
        assert!(cross_site_verdict(&same, None).is_ok());
        let evil = headers(&[("host", "app.test"), ("origin", "https://evil.test")]);
        assert!(cross_site_verdict(&evil, None).is_err());
        let fetch_cross = headers(&[("host", "app.test"), ("sec-fetch-site", "cross-site")]);
        assert!(cross_site_verdict(&fetch_cross, None).is_err());
        let same_site =
            headers(&[("host", "app.test"), ("sec-fetch-site", "same-site"), ("origin", "http://app.test")]);
        assert!(cross_site_verdict(&same_site, None).is_err());
        let cli = headers(&[("host", "app.test"), ("authorization", "Bearer cpt_x")]);
        assert!(cross_site_verdict(&cli, None).is_ok());
        let cookie_only = headers(&[("host", "app.test"), ("cookie", "cardpool_session=abc")]);
        assert!(cross_site_verdict(&cookie_only, None).is_err());
        let proxied = headers(&[("host", "10.0.0.5:3000"), ("origin", "https://gpu.example")]);
        assert!(cross_site_verdict(&proxied, Some("https://gpu.example")).is_ok());
    }
}
