//! Server-side glue for server functions: the shared state, and how a server function finds
//! the services, the session and the client address of the request it is serving.

use cardpool_domain::AppError;
use cardpool_service::{
    Services,
    auth::{self, ClientIp, Principal},
};
use leptos::prelude::*;
use tower_sessions::Session;

/// State shared by every handler; provided to server functions as context.
#[derive(Clone)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    pub services: Services,
    /// The URL people and agents use to reach this server, when configured.
    pub public_url: Option<String>,
}

impl AppState {
    /// Where agents should dial: the configured public URL, else the host this request came to.
    pub fn server_url(&self, headers: &http::HeaderMap) -> String {
        self.public_url.clone().map(|u| u.trim_end_matches('/').to_owned()).unwrap_or_else(|| {
            let host = headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1:3000");
            format!("http://{host}")
        })
    }
}

impl axum::extract::FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

/// What a server function needs to call the service layer on behalf of its request.
pub struct Request {
    pub state: AppState,
    pub services: Services,
    pub session: Session,
    pub client_ip: ClientIp,
}

impl Request {
    pub async fn current() -> Result<Self, AppError> {
        let state = use_context::<AppState>().ok_or(AppError::Internal)?;
        let session = leptos_axum::extract::<Session>().await.map_err(|err| {
            tracing::error!(error = %err, "no session layer on a server function request");
            AppError::Internal
        })?;
        let client_ip = leptos_axum::extract::<axum::Extension<ClientIp>>().await.map(|ext| ext.0).unwrap_or_default();
        Ok(Request { services: state.services.clone(), state, session, client_ip })
    }

    /// The signed-in account, or `Unauthorized`.
    pub async fn principal(&self) -> Result<Principal, AppError> {
        auth::require_session(&self.services, &self.session).await
    }
}

/// The bundle's file names under `pkg/`.
pub struct BundleNames {
    pub js: String,
    pub wasm: String,
    pub css: String,
}

/// The bundle's file names: content-hashed, from the `hash.txt` the options name (beside the
/// server binary, or an absolute path into the site root), when `hash_files` is on; else cargo-leptos' plain names. Read once per
/// process (the binary and its bundle do not change under it).
pub fn bundle_names(options: &LeptosOptions) -> &'static BundleNames {
    static NAMES: std::sync::OnceLock<BundleNames> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let name = &options.output_name;
        let hashes = options
            .hash_files
            .then(|| {
                let exe = std::env::current_exe().ok()?;
                std::fs::read_to_string(exe.parent()?.join(options.hash_file.as_ref())).ok()
            })
            .flatten()
            .unwrap_or_default();
        let file = |kind: &str, ext: &str| {
            let hash = hashes.lines().filter_map(|l| l.split_once(':')).find(|(k, _)| k.trim() == kind);
            match hash {
                Some((_, hash)) => format!("{name}.{}.{ext}", hash.trim()),
                None => format!("{name}.{ext}"),
            }
        };
        BundleNames { js: file("js", "js"), wasm: file("wasm", "wasm"), css: file("css", "css") }
    })
}

/// Sets this page's Content-Security-Policy, allowing only scripts carrying this response's
/// nonce (Leptos adds it to its hydration and streaming scripts).
pub fn set_content_security_policy() {
    let Some(nonce) = leptos::nonce::use_nonce() else { return };
    let Some(response) = use_context::<leptos_axum::ResponseOptions>() else { return };
    let policy = format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; style-src 'self'; \
         img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; \
         form-action 'self'; frame-ancestors 'none'"
    );
    if let Ok(value) = http::HeaderValue::from_str(&policy) {
        response.insert_header(http::header::CONTENT_SECURITY_POLICY, value);
    }
}

/// The one shape of a server function for a signed-in caller: the request (services, session,
/// client address) and the caller are found, `call` runs, and a failure is answered with the
/// API's status mapping (see [`respond`]). A visitor gets `Unauthorized`.
pub async fn signed_in<T>(call: impl AsyncFnOnce(Request, Principal) -> Result<T, AppError>) -> Result<T, AppError> {
    respond(async move {
        let req = Request::current().await?;
        let principal = req.principal().await?;
        call(req, principal).await
    })
    .await
}

/// Like [`signed_in`], for server functions open to visitors too.
pub async fn anyone<T>(call: impl AsyncFnOnce(Request) -> Result<T, AppError>) -> Result<T, AppError> {
    respond(async move { call(Request::current().await?).await }).await
}

/// Runs a server function's body and gives a failure the same HTTP status (and `Retry-After`)
/// the JSON API would, instead of server_fn's blanket 500.
pub async fn respond<T>(body: impl Future<Output = Result<T, AppError>>) -> Result<T, AppError> {
    let result = body.await;
    if let (Err(err), Some(response)) = (&result, use_context::<leptos_axum::ResponseOptions>()) {
        response
            .set_status(http::StatusCode::from_u16(err.status()).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR));
        if let AppError::RateLimited { retry_after_secs } = err {
            response.insert_header(http::header::RETRY_AFTER, http::HeaderValue::from(*retry_after_secs));
        }
    }
    result
}
