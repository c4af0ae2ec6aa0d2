//! A real server on a real socket for each test, over a per-test database.

use cardpool_server::{Config, http, workers};
use cardpool_service::{
    Services, Settings, accounts,
    entities::users,
    ledger::{self, Book},
    testing::{self, Backend, TestDb},
};
use reqwest::{Client, StatusCode, header};
use sea_orm::{EntityTrait, PaginatorTrait};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

pub const PASSWORD: &str = "correct horse battery";

pub struct TestApp {
    pub base: String,
    pub services: Services,
    /// The local test-mode Stripe this app talks to.
    pub stripe: cardpool_stripe_local::LocalStripe,
    pub stripe_url: String,
    pub webhook_secret: String,
    /// The SSH gateway's port (on 127.0.0.1).
    pub ssh_port: u16,
    /// The HTTP server; it ends once `services.stopping` begins and its connections drained.
    pub serving: tokio::task::JoinHandle<()>,
    /// The database, dropped with the app that made it (a replica shares its first app's).
    db: Option<std::sync::Arc<TestDb>>,
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> Self {
        Self::spawn_with(backend, Settings::default()).await
    }

    pub async fn spawn_with(backend: Backend, settings: Settings) -> Self {
        Self::spawn_configured(backend, settings, Config::default()).await
    }

    /// With background workers (liveness) and fast agent pacing: heartbeat every second,
    /// offline after two silent seconds.
    pub async fn spawn_with_agents(backend: Backend) -> Self {
        let config = Config { heartbeat_interval_secs: 1, host_offline_grace_secs: 2, ..Config::default() };
        let app = Self::spawn_configured(backend, Settings::default(), config).await;
        workers::spawn(&app.services, Duration::from_secs(2), Duration::ZERO, Duration::from_secs(1));
        app
    }

    pub async fn spawn_configured(backend: Backend, settings: Settings, config: Config) -> Self {
        Self::spawn_full(backend, settings, config, true).await
    }

    /// `deliver_webhooks: false` leaves Stripe's events in its log for the test to deliver
    /// (in whatever order, as often as it likes).
    pub async fn spawn_full(backend: Backend, mut settings: Settings, config: Config, deliver_webhooks: bool) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let base = format!("http://{addr}");
        let (running, stripe) = cardpool_server::local_stripe::start_with(
            deliver_webhooks.then(|| base.clone()).as_deref(),
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        let webhook_secret = stripe.webhook_secret.clone();
        settings.payments.stripe = stripe;
        settings.payments.public_url = base.clone();
        let config = Config { addr, ..config };
        // The SSH gateway, as `serve` runs it, with a host key made for this app.
        let ssh_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ssh_port = ssh_listener.local_addr().unwrap().port();
        let key_path = std::env::temp_dir().join(format!("cardpool-ssh-host-key-{}-{ssh_port}", std::process::id()));
        let key = cardpool_server::ssh::load_or_create_host_key(&key_path).unwrap();
        assert_eq!(cardpool_server::ssh::load_or_create_host_key(&key_path).unwrap(), key, "the key is kept");
        let _ = std::fs::remove_file(&key_path);
        settings.ssh = Some(cardpool_server::ssh::endpoint(&config, ssh_listener.local_addr().unwrap(), &key));
        let (db, services) = testing::services(backend, settings).await;
        tokio::spawn(cardpool_server::ssh::serve(services.clone(), key, ssh_listener));
        let serving = serve_http(&services, &config, listener);
        TestApp {
            base,
            services,
            stripe: running.stripe,
            stripe_url: running.url,
            webhook_secret,
            ssh_port,
            serving,
            db: Some(std::sync::Arc::new(db)),
        }
    }

    /// A second replica beside this app: its own server, services and bus on this app's
    /// database, with its settings (so the same Stripe and NATS) and `config`'s pacing.
    pub async fn replica(&self, config: Config) -> TestApp {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let db = self.db.clone().expect("the first app holds the database");
        let conn = db.connect().await;
        let settings = Settings::clone(&self.services.settings);
        let services = Services::new(conn, settings).await.expect("build the replica's services");
        let config = Config { addr, ..config };
        let serving = serve_http(&services, &config, listener);
        TestApp {
            base: format!("http://{addr}"),
            services,
            stripe: self.stripe.clone(),
            stripe_url: self.stripe_url.clone(),
            webhook_secret: self.webhook_secret.clone(),
            ssh_port: self.ssh_port,
            serving,
            db: Some(db),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A browser-like client: keeps cookies and sends this site's Origin, as browsers do. Like
    /// a browser it never sends a request on a kept-alive connection the server is about to
    /// close: the server closes one idle for `serve::HEADER_READ_TIMEOUT` (10 s), and a request
    /// written at that very moment failed with "IncompleteMessage" (seen once, in the survival
    /// test, whose polls pause exactly 10 s). Its connections idle for 5 s at most.
    pub fn browser(&self) -> Client {
        let mut headers = header::HeaderMap::new();
        headers.insert(header::ORIGIN, self.base.parse().unwrap());
        Client::builder()
            .cookie_store(true)
            .default_headers(headers)
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    }

    pub async fn sign_up(&self, client: &Client, email: &str) -> Value {
        let res = client
            .post(self.url("/api/v1/auth/sign-up"))
            .json(&json!({"email": email, "password": PASSWORD}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
        res.json().await.unwrap()
    }

    pub async fn sign_in(&self, client: &Client, email: &str, password: &str) -> reqwest::Response {
        client
            .post(self.url("/api/v1/auth/sign-in"))
            .json(&json!({"email": email, "password": password}))
            .send()
            .await
            .unwrap()
    }

    /// A signed-in provider's browser.
    pub async fn provider(&self, email: &str) -> Client {
        let client = self.browser();
        self.sign_up(&client, email).await;
        let me: Value = client.post(self.url("/api/v1/me/provider")).send().await.unwrap().json().await.unwrap();
        assert_eq!(me["roles"]["provider"], true);
        client
    }

    /// A fresh enrollment token from `provider` for a host in `location`.
    pub async fn enrollment_token(&self, provider: &Client, location: &str) -> String {
        let res = provider
            .post(self.url("/api/v1/enrollment-tokens"))
            .json(&json!({"location": location}))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
        let body: Value = res.json().await.unwrap();
        assert!(
            body["command"].as_str().unwrap().starts_with(&format!("cardpool-agent enroll --server {}", self.base))
        );
        body["token"].as_str().unwrap().to_owned()
    }

    /// A signed-in renter's browser with `dollars` of promotional credit.
    pub async fn funded_renter(&self, email: &str, dollars: i64) -> Client {
        let client = self.browser();
        self.sign_up(&client, email).await;
        let id = accounts::principal_for_email(&self.services, email).await.unwrap().user_id;
        let txn = self.services.begin_write().await.unwrap();
        let entry = ledger::Entry::new("credit", format!("seed:{email}"), "seed").transfer(
            Book::PromotionalCredit,
            Book::Wallet(id),
            dollars * 1_000_000,
        );
        ledger::post(&txn, entry).await.unwrap();
        txn.commit().await.unwrap();
        client
    }

    /// `GET path` as `client`, as JSON.
    /// Books one H100 (see [`TestApp::agent_host`]) on-demand for `renter` with `workload`;
    /// returns the rental's id.
    pub async fn book_h100(&self, renter: &Client, host_id: i64, workload: Value) -> i64 {
        let body = json!({"host_id": host_id, "gpu_model": H100, "gpu_count": 1, "workload": workload});
        let res = renter.post(self.url("/api/v1/rentals")).json(&body).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::CREATED);
        res.json::<Value>().await.unwrap()["id"].as_i64().unwrap()
    }

    pub async fn get_json(&self, client: &Client, path: &str) -> Value {
        client.get(self.url(path)).send().await.unwrap().json().await.unwrap()
    }

    /// The rental as its renter sees it over the API.
    pub async fn rental(&self, client: &Client, id: i64) -> Value {
        self.get_json(client, &format!("/api/v1/rentals/{id}")).await
    }

    /// Polls the rental until it is in `state`, failing after `within`.
    pub async fn wait_for_rental_state(&self, client: &Client, id: i64, state: &str, within: Duration) -> Value {
        eventually(within, &format!("rental {id} becoming {state}"), async || {
            Some(self.rental(client, id).await).filter(|detail| detail["rental"]["state"] == state)
        })
        .await
    }

    pub async fn status_of_me(&self, client: &Client) -> StatusCode {
        client.get(self.url("/api/v1/me")).send().await.unwrap().status()
    }

    pub async fn user_count(&self) -> u64 {
        users::Entity::find().count(&self.services.db).await.unwrap()
    }
}

/// The HTTP server as `serve` runs it, until `services.stopping` begins.
fn serve_http(services: &Services, config: &Config, listener: tokio::net::TcpListener) -> tokio::task::JoinHandle<()> {
    let app = http::router(services.clone(), http::leptos_options(config), http::HttpOptions::from_config(config));
    let stopping = services.stopping.clone();
    tokio::spawn(cardpool_server::serve::serve(
        listener,
        app,
        config.max_connections,
        async move { stopping.wait().await },
    ))
}

/// Polls `check` until it yields a value, failing after `within` with `what` did not happen.
pub async fn eventually<T>(within: Duration, what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what} did not happen within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A fresh directory of its own for an agent's rentals (kept after the test, for its traces).
/// Never derive it from a host id: both backends' runs of a test share a process and both
/// number their first host 1, and an agent adopts what it finds running in its directory.
pub fn agent_dir(what: &str) -> std::path::PathBuf {
    tempfile::Builder::new().prefix(&format!("cardpool-{what}-")).tempdir().unwrap().keep()
}

/// The model the agent hosts of [`TestApp::agent_host`] have.
pub const H100: &str = "NVIDIA H100 80GB HBM3";

/// A provider's ("provider@example.com") host with a real agent, see [`TestApp::agent_host`].
pub struct AgentHost {
    /// The provider, signed in.
    pub provider: Client,
    pub state: cardpool_agent::state::AgentState,
    pub owner: cardpool_service::auth::Principal,
    pub gpus: usize,
    pub dir: std::path::PathBuf,
}

impl AgentHost {
    /// Its agent, as `cardpool-agent run` would be (its sandbox runtime running workloads in
    /// `dir`); dying with its task as with kill -9, the sandboxes left running.
    pub fn run_agent(&self) -> tokio::task::JoinHandle<Result<(), String>> {
        use cardpool_agent::{connection, gpu::simulated::SimulatedSource, runtime::WorkloadMode};
        let (state, dir, spec) = (self.state.clone(), self.dir.clone(), format!("{}xH100-80GB", self.gpus));
        tokio::spawn(async move {
            let source = SimulatedSource::new(&spec, "rig", vec![]).unwrap();
            connection::run(&state, &source, None, dir, WorkloadMode::Run, Duration::from_secs(1)).await
        })
    }
}

impl TestApp {
    /// A host of `gpus` simulated H100s on the market: enrolled, its agent connected (see
    /// [`AgentHost::run_agent`]) with its inventory in, priced $3.60 on-demand, $3.00 reserved
    /// and $1.00 minimum spot bid per GPU-hour, and listed. Workloads run in a fresh `dir`.
    pub async fn agent_host(
        &self,
        gpus: usize,
        dir: std::path::PathBuf,
    ) -> (AgentHost, tokio::task::JoinHandle<Result<(), String>>) {
        use cardpool_service::hosts;
        let provider = self.provider("provider@example.com").await;
        let token = self.enrollment_token(&provider, "Lab").await;
        let state = cardpool_agent::enrollment::enroll(&self.base, &token, "rig").await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let owner = accounts::principal_for_email(&self.services, "provider@example.com").await.unwrap();
        let host = AgentHost { provider, state, owner, gpus, dir };
        let agent = host.run_agent();
        let (services, owner, host_id) = (&self.services, &host.owner, host.state.host_id);
        eventually(Duration::from_secs(10), "inventory arriving", async || {
            (hosts::get_host(services, owner, host_id).await.unwrap().gpus.len() == gpus).then_some(())
        })
        .await;
        let price = cardpool_domain::host::GpuModelPrice {
            gpu_model: H100.into(),
            on_demand_micros: 3_600_000,
            reserved_micros: 3_000_000,
            spot_min_bid_micros: 1_000_000,
        };
        hosts::update_host_pricing(services, owner, host_id, &price).await.unwrap();
        hosts::set_host_listed(services, owner, host_id, true).await.unwrap();
        (host, agent)
    }
}
