//! Layered configuration: built-in defaults, then an optional TOML file, then `CARDPOOL_*`
//! environment variables (and `DATABASE_URL`), then command-line flags.
//!
//! Secrets (the database URL may carry a password) live in [`Secret`], which never prints.

use figment::{
    Figment,
    providers::{Env, Format, Serialized, Toml},
};
use serde::{Deserialize, Serialize};
use std::{net::SocketAddr, path::PathBuf};

/// A value that must not reach logs. `Debug` and `Display` print `***`.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Config {
    /// Where to listen.
    pub addr: SocketAddr,
    /// `sqlite://cardpool.db?mode=rwc` (default) or `postgres://user@host/db`.
    pub database_url: Secret,
    /// The URL people use to reach Cardpool (`https://...` turns on Secure cookies and HSTS).
    pub public_url: Option<String>,
    /// Where cargo-leptos put the site (the wasm bundle, CSS, public assets).
    pub site_root: PathBuf,
    /// The reverse proxies in front of Cardpool (addresses or ranges such as `10.0.0.0/8`):
    /// only a request from one of them has its `X-Forwarded-For` read, right to left, for the
    /// client address. Empty (the default): the connection's own address.
    pub trusted_proxies: Vec<String>,
    /// Idle session lifetime, seconds.
    pub session_idle_secs: u64,
    /// Absolute session lifetime, seconds.
    pub session_absolute_secs: u64,
    /// Failed sign-ins allowed per account from one client address per window.
    pub sign_in_failures_per_account: u32,
    /// Failed sign-ins (and SSH logins) allowed per client address per window.
    pub sign_in_attempts_per_ip: u32,
    /// Accounts one client address may create per hour.
    pub sign_ups_per_ip_per_hour: u32,
    /// Window of both sign-in limits, seconds.
    pub sign_in_window_secs: u64,
    /// How often agents send a heartbeat, seconds.
    pub heartbeat_interval_secs: u64,
    /// A host silent for this long is marked offline (its rentals interrupted), seconds. A
    /// dropped connection alone does not: the agent reconnects within it and rentals go on.
    pub host_offline_grace_secs: u64,
    /// How long agents may take to reconnect after the server starts (their backoff reaches
    /// 60 s), seconds: no host is judged before the grace plus this has passed.
    pub agent_reconnect_secs: u64,
    /// The platform's cut of usage, basis points (1000 = 10 %).
    pub platform_fee_bps: u32,
    /// Provider earnings stay pending this many hours before they can be paid out.
    pub earnings_hold_hours: u32,
    /// Stripe secret key (`sk_live_...` / `sk_test_...`). Without one, Cardpool only starts with
    /// the bundled local test-mode Stripe (`--demo` or `stripe_local = true`).
    pub stripe_secret_key: Option<Secret>,
    /// Signing secret of the webhook endpoint (`whsec_...`) pointed at `/stripe/webhook`.
    pub stripe_webhook_secret: Option<Secret>,
    /// Stripe API base URL; only for a Stripe-compatible server of your own.
    pub stripe_api_base: Option<String>,
    /// NATS server the replicas of a cluster share notes and live telemetry through
    /// (`nats://host:4222`). Set it only for several replicas on one PostgreSQL database.
    pub nats_url: Option<Secret>,
    /// Run the bundled local test-mode Stripe when no key is set, outside `--demo` too.
    pub stripe_local: bool,
    /// Seconds a preempted spot workload gets between its notice and being stopped.
    pub preemption_notice_secs: u32,
    /// Warn a renter when their balance covers less than this many minutes of a rental.
    pub low_balance_warning_minutes: u32,
    /// How often running rentals are billed, seconds (at most 60).
    pub billing_interval_secs: u64,
    /// Bearer token Prometheus scrapes `/metrics` with; without one `/metrics` answers 404.
    pub metrics_token: Option<Secret>,
    /// Days of one-minute GPU rollups kept.
    pub telemetry_retention_days: u32,
    /// How often accepted telemetry is written and acknowledged, milliseconds (50 to 30,000).
    pub telemetry_flush_ms: u64,
    /// Live telemetry feeds one account may hold open at once.
    pub live_feeds_per_account: usize,
    /// Live telemetry feeds the server holds open at once.
    pub live_feeds: usize,
    /// TCP connections the server holds open at once (agents, browsers, live feeds). Past it,
    /// new connections wait in the kernel's accept queue until one closes. Keep it below the
    /// process's open-file limit (`ulimit -n`).
    pub max_connections: usize,
    /// A rented GPU below this utilisation, percent, counts as idle.
    pub idle_gpu_util_pct: u32,
    /// Where the SSH gateway listens (`ssh -p PORT r42@host` reaches rental 42); port 0 picks
    /// a free one.
    pub ssh_addr: SocketAddr,
    /// Run the SSH gateway.
    pub ssh_enabled: bool,
    /// The gateway's host key (OpenSSH format), generated there on first start.
    pub ssh_host_key: PathBuf,
    /// The host name renters are told to connect to (default: the public URL's host).
    pub ssh_public_host: Option<String>,
    /// The port renters are told (default: the one listened on), e.g. behind port mapping.
    pub ssh_public_port: Option<u16>,
    /// Minutes a rented GPU may sit idle before the renter is told (or the rental stopped,
    /// if they asked for that at booking).
    pub idle_gpu_minutes: u32,
    /// Let webhooks use `http://` and addresses on this machine or its private networks (for
    /// development; in production it would let accounts make the server call its neighbours).
    pub webhooks_allow_local: bool,
    /// The first webhook retry's delay, seconds (each later one waits three times longer).
    pub webhook_retry_base_secs: u64,
    /// Attempts before a webhook delivery is given up.
    pub webhook_max_attempts: u32,
}

impl Default for Config {
    fn default() -> Self {
        let session = cardpool_service::auth::SessionPolicy::default();
        Config {
            addr: SocketAddr::from(([127, 0, 0, 1], 3000)),
            database_url: Secret::new("sqlite://cardpool.db?mode=rwc"),
            public_url: None,
            site_root: PathBuf::from("target/site"),
            trusted_proxies: Vec::new(),
            session_idle_secs: session.idle.as_secs(),
            session_absolute_secs: session.absolute.as_secs(),
            sign_in_failures_per_account: 5,
            sign_in_attempts_per_ip: 30,
            sign_ups_per_ip_per_hour: 10,
            sign_in_window_secs: 15 * 60,
            heartbeat_interval_secs: 5,
            host_offline_grace_secs: 20,
            agent_reconnect_secs: 60,
            platform_fee_bps: 1000,
            earnings_hold_hours: 24,
            stripe_secret_key: None,
            stripe_webhook_secret: None,
            stripe_api_base: None,
            stripe_local: false,
            nats_url: None,
            preemption_notice_secs: 30,
            low_balance_warning_minutes: 10,
            billing_interval_secs: 15,
            metrics_token: None,
            telemetry_retention_days: 30,
            telemetry_flush_ms: 2000,
            live_feeds_per_account: 16,
            live_feeds: 5000,
            max_connections: 20_000,
            idle_gpu_util_pct: 5,
            idle_gpu_minutes: 30,
            ssh_addr: SocketAddr::from(([127, 0, 0, 1], 2222)),
            ssh_enabled: true,
            ssh_host_key: PathBuf::from("cardpool-ssh-host-key"),
            ssh_public_host: None,
            ssh_public_port: None,
            webhooks_allow_local: false,
            webhook_retry_base_secs: 10,
            webhook_max_attempts: 8,
        }
    }
}

impl Config {
    /// Defaults ← `file` (if given, or `cardpool.toml` if present) ← environment.
    pub fn load(file: Option<&std::path::Path>) -> Result<Self, Box<figment::Error>> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        match file {
            Some(path) => figment = figment.merge(Toml::file_exact(path)),
            None => figment = figment.merge(Toml::file("cardpool.toml")),
        }
        figment.merge(Env::raw().only(&["DATABASE_URL"])).merge(Env::prefixed("CARDPOOL_")).extract().map_err(Box::new)
    }

    /// [`Config::trusted_proxies`], parsed; an entry that is no address or range is an error.
    pub fn trusted_proxies(&self) -> Result<crate::limits::TrustedProxies, String> {
        let nets = self.trusted_proxies.iter().map(|p| p.parse()).collect::<Result<Vec<_>, String>>();
        nets.map(crate::limits::TrustedProxies::new).map_err(|e| format!("trusted_proxies: {e}"))
    }

    /// Whether people reach us over https (cookies get `Secure`, responses HSTS).
    pub fn served_over_https(&self) -> bool {
        self.public_url.as_deref().is_some_and(|url| url.starts_with("https://"))
    }

    /// The service layer's share of the configuration.
    pub fn service_settings(&self) -> cardpool_service::Settings {
        use cardpool_service::rate_limit::{Limit, SignInLimits};
        use std::time::Duration;
        let window = Duration::from_secs(self.sign_in_window_secs);
        cardpool_service::Settings {
            session: cardpool_service::auth::SessionPolicy {
                idle: Duration::from_secs(self.session_idle_secs),
                absolute: Duration::from_secs(self.session_absolute_secs),
            },
            sign_in_limits: SignInLimits {
                per_account: Limit { max: self.sign_in_failures_per_account, window },
                per_ip: Limit { max: self.sign_in_attempts_per_ip, window },
                sign_ups_per_ip: Limit { max: self.sign_ups_per_ip_per_hour, window: Duration::from_secs(3600) },
            },
            payments: cardpool_service::PaymentSettings {
                platform_fee_bps: self.platform_fee_bps.min(10_000),
                earnings_hold_hours: self.earnings_hold_hours,
                public_url: self
                    .public_url
                    .clone()
                    .unwrap_or_else(|| format!("http://{}", self.addr))
                    .trim_end_matches('/')
                    .to_owned(),
                stripe: cardpool_service::stripe::StripeSettings {
                    secret_key: self.stripe_secret_key.as_ref().map(|s| s.expose().to_owned()).unwrap_or_default(),
                    webhook_secret: self
                        .stripe_webhook_secret
                        .as_ref()
                        .map(|s| s.expose().to_owned())
                        .unwrap_or_default(),
                    api_base: self.stripe_api_base.clone(),
                },
            },
            rentals: cardpool_service::RentalSettings {
                preemption_notice_secs: self.preemption_notice_secs,
                low_balance_warning_minutes: self.low_balance_warning_minutes,
            },
            telemetry: cardpool_service::telemetry::TelemetrySettings {
                idle_util_pct: self.idle_gpu_util_pct,
                idle_minutes: self.idle_gpu_minutes.max(1),
                retention_days: self.telemetry_retention_days.max(1),
                feeds_per_account: self.live_feeds_per_account.max(1),
                feeds: self.live_feeds.max(1),
                flush_interval: Duration::from_millis(self.telemetry_flush_ms.clamp(50, 30_000)),
            },
            // Set once the gateway is listening (see `crate::ssh::endpoint`).
            ssh: None,
            nats_url: self.nats_url.as_ref().map(|url| url.expose().to_owned()),
            webhooks: cardpool_service::notify::webhooks::WebhookSettings {
                allow_local_targets: self.webhooks_allow_local,
                retry_base_secs: self.webhook_retry_base_secs.max(1),
                max_attempts: self.webhook_max_attempts.clamp(1, 20),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_do_not_print() {
        let config = Config {
            database_url: Secret::new("postgres://u:hunter2@db/x"),
            stripe_secret_key: Some(Secret::new("sk_live_hunter3")),
            stripe_webhook_secret: Some(Secret::new("whsec_hunter4")),
            metrics_token: Some(Secret::new("hunter5")),
            ..Config::default()
        };
        let printed = format!("{config:?} {:?}", config.service_settings());
        for secret in ["hunter2", "hunter3", "hunter4", "hunter5"] {
            assert!(!printed.contains(secret), "{secret} printed");
        }
    }

    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail API fixes the closure's error type
    fn layers_apply_in_order() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("cardpool.toml", "addr = \"127.0.0.1:4000\"\npublic_url = \"https://gpu.example\"")?;
            jail.set_env("CARDPOOL_ADDR", "0.0.0.0:5000");
            jail.set_env("DATABASE_URL", "postgres://db/cardpool");
            let config = Config::load(None).expect("config loads");
            assert_eq!(config.addr.to_string(), "0.0.0.0:5000");
            assert_eq!(config.database_url.expose(), "postgres://db/cardpool");
            assert!(config.served_over_https());
            assert_eq!(config.site_root, PathBuf::from("target/site"));
            Ok(())
        });
    }

    /// `cardpool.example.toml` names every key (set, or commented out where the default is
    /// "none") and, as shipped, loads to exactly the defaults.
    #[test]
    #[allow(clippy::result_large_err)] // figment's Jail API fixes the closure's error type
    fn the_example_file_names_every_key_at_its_default() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../cardpool.example.toml");
        let text = std::fs::read_to_string(path).expect("the example file");
        let keys = serde_json::to_value(Config::default()).expect("config serialises");
        for key in keys.as_object().expect("a table").keys() {
            let named = text.lines().any(|l| {
                let l = l.trim_start_matches(['#', ' ']);
                l.strip_prefix(key.as_str()).is_some_and(|rest| rest.trim_start().starts_with('='))
            });
            assert!(named, "cardpool.example.toml does not mention `{key}`");
        }
        figment::Jail::expect_with(|_jail| {
            let loaded = Config::load(Some(std::path::Path::new(path))).expect("the example loads");
            assert_eq!(loaded, Config::default());
            Ok(())
        });
    }
}
