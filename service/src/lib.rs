//! Cardpool's service layer: every rule of the marketplace, behind plain async functions that
//! take [`Services`] (or a connection) and return [`AppError`].
//!
//! The adapters (Leptos server functions in `app`, REST handlers and the agent gateway in
//! `server`, the CLI) only find out who is asking, call one function here and map the result.
//! Authorization is checked here too, against the [`auth::Principal`] the adapter passes in, so
//! no adapter can forget it.
//!
//! The rooms: accounts, sessions and credentials (`accounts`, `auth`, `api_tokens`,
//! `passwords`, `rate_limit`, `session_store`); providers' hosts and their agents (`hosts`,
//! `signals`, `logs`); the market (`offers`, `stock`); rentals from booking to settlement (`rentals`);
//! money (`ledger`, `payments`, `payouts`, `stripe`); telemetry and alerts (`telemetry`,
//! `alerts`). `db` opens the database and turns its errors into [`AppError`]s.

pub mod accounts;
pub mod admin;
pub mod advisor;
pub mod agent_links;
pub mod alerts;
pub mod api_tokens;
pub mod auth;
pub mod bus;
pub mod db;
pub mod entities;
#[cfg(any(test, feature = "test-support"))]
pub mod fuzzing;
pub mod hosts;
pub mod leader;
pub mod ledger;
pub mod logs;
pub mod notify;
pub mod offers;
pub mod passwords;
pub mod payments;
pub mod payouts;
pub mod rate_limit;
pub mod rentals;
pub mod secrets;
pub mod session_store;
pub mod signals;
pub mod spending;
pub mod ssh_access;
pub mod stock;
pub mod stripe;
pub mod telemetry;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod tunnels;

pub use cardpool_domain::AppError;
use sea_orm::DatabaseConnection;
use std::sync::Arc;

/// Result type of every service function.
pub type AppResult<T> = Result<T, AppError>;

/// Tunables of the service layer, filled from the server's layered configuration.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub session: auth::SessionPolicy,
    pub sign_in_limits: rate_limit::SignInLimits,
    pub payments: PaymentSettings,
    pub rentals: RentalSettings,
    pub telemetry: telemetry::TelemetrySettings,
    /// Where renters reach the SSH gateway; `None` when it does not run.
    pub ssh: Option<ssh_access::SshEndpoint>,
    /// The NATS server replicas share notes and telemetry through; `None` for one process.
    pub nats_url: Option<String>,
    pub webhooks: notify::webhooks::WebhookSettings,
}

/// Rental tunables.
#[derive(Debug, Clone)]
pub struct RentalSettings {
    /// How long a preempted spot workload gets between its notice and being stopped.
    pub preemption_notice_secs: u32,
    /// A running rental whose balance covers less than this many minutes gets a warning.
    pub low_balance_warning_minutes: u32,
}

impl Default for RentalSettings {
    fn default() -> Self {
        RentalSettings { preemption_notice_secs: 30, low_balance_warning_minutes: 10 }
    }
}

/// Money tunables.
#[derive(Debug, Clone)]
pub struct PaymentSettings {
    /// The platform's cut of usage, in basis points (1000 = 10 %).
    pub platform_fee_bps: u32,
    /// Earnings stay pending this long before they can be paid out.
    pub earnings_hold_hours: u32,
    /// Where Stripe sends people back to (Checkout, Connect onboarding), without trailing slash.
    pub public_url: String,
    pub stripe: stripe::StripeSettings,
}

impl Default for PaymentSettings {
    fn default() -> Self {
        PaymentSettings {
            platform_fee_bps: 1000,
            earnings_hold_hours: 24,
            public_url: "http://127.0.0.1:3000".into(),
            stripe: stripe::StripeSettings::default(),
        }
    }
}

/// Everything a service function may need, shared by all adapters and cheap to clone.
#[derive(Clone)]
pub struct Services {
    pub db: DatabaseConnection,
    /// Whose turn it is to write, on a database with one writer at a time (see `db`).
    pub writes: db::WriteQueue,
    pub passwords: Arc<passwords::PasswordHasher>,
    pub sign_in_limiter: Arc<rate_limit::SignInLimiter>,
    pub settings: Arc<Settings>,
    pub stripe: Arc<stripe::StripeGateway>,
    /// Wakes agent connections when their rentals change.
    pub signals: Arc<signals::HostSignals>,
    /// Recent telemetry in memory and the live feed to dashboards.
    pub telemetry: Arc<telemetry::Hub>,
    /// Reads of workload logs, relayed to the hosts' agents.
    pub logs: Arc<logs::LogRelay>,
    pub tunnels: Arc<tunnels::TunnelHub>,
    /// Agents' heartbeats waiting to be recorded together (see `hosts::heartbeat`).
    pub heartbeats: Arc<hosts::Heartbeats>,
    /// Each host's one live agent connection (a newer one ends the older).
    pub connections: Arc<agent_links::AgentConnections>,
    /// Committed changes to the offer stock (see `stock`).
    pub stock_version: Arc<stock::StockVersion>,
    /// Set when the server begins to stop: agent sockets and live feeds end.
    pub stopping: Arc<signals::Stopping>,
    /// What this replica tells the others (nothing, in one process).
    pub bus: Arc<bus::Bus>,
}

impl Services {
    /// Builds the services over an already migrated database.
    pub async fn new(db: DatabaseConnection, settings: Settings) -> AppResult<Self> {
        let passwords = passwords::PasswordHasher::new().await?;
        let stripe = stripe::StripeGateway::new(&settings.payments.stripe)?;
        let bus = match &settings.nats_url {
            Some(url) => bus::Bus::connect(url, &bus::cluster_name(&db)).await?,
            None => bus::Bus::in_process(),
        };
        let sign_in_limiter = rate_limit::SignInLimiter::new(db.clone(), settings.sign_in_limits);
        let services = Services {
            stripe: Arc::new(stripe),
            writes: db::WriteQueue::for_database(&db),
            db,
            passwords: Arc::new(passwords),
            sign_in_limiter: Arc::new(sign_in_limiter),
            settings: Arc::new(settings),
            signals: Arc::default(),
            telemetry: Arc::default(),
            logs: Arc::default(),
            tunnels: Arc::default(),
            heartbeats: Arc::default(),
            connections: Arc::default(),
            stock_version: Arc::default(),
            stopping: Arc::default(),
            bus: Arc::new(bus),
        };
        bus::listen(&services);
        Ok(services)
    }

    /// Starts a write transaction that reads first, in its turn (see [`db::WriteQueue`]).
    pub async fn begin_write(&self) -> Result<db::WriteTxn, sea_orm::DbErr> {
        self.writes.begin(&self.db).await
    }

    /// Wakes the host's agent connection, on whichever replica holds it, so it sends its
    /// rentals' commands now.
    pub fn wake_host(&self, host_id: i64) {
        self.telemetry.rentals_changed(host_id);
        self.signals.notify(host_id);
        self.bus.tell(bus::Note::Wake { host_id });
    }
}
