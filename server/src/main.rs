//! `cardpool`: the Cardpool server and its operator commands. Parses the command line and
//! hands over to the library; nothing else lives here.

use anyhow::Context;
use cardpool_server::{Config, demo, http, local_stripe, workers};
use cardpool_service::{Services, accounts, db};
use clap::{Args, Parser, Subcommand};
use std::{io::Read, net::SocketAddr, path::PathBuf};

#[derive(Parser)]
#[command(name = "cardpool", version, about = "Cardpool: the open GPU compute marketplace")]
struct Cli {
    /// Configuration file (TOML). Default: ./cardpool.toml if it exists.
    #[arg(long, global = true, env = "CARDPOOL_CONFIG")]
    config: Option<PathBuf>,
    /// How logs are written: `text` for people, `json` (one object per line, with each
    /// request's id) for log collectors.
    #[arg(long, global = true, env = "CARDPOOL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the web server (pages, JSON API, background work).
    Serve(ServeArgs),
    /// Operator commands for accounts.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Apply pending database migrations and exit.
    Migrate(DbArgs),
    /// Run the local test-mode Stripe on its own, for a cluster of replicas to share (no real
    /// money moves). Prints the settings the replicas need.
    StripeLocal(StripeLocalArgs),
}

#[derive(Args)]
struct StripeLocalArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:12111")]
    addr: SocketAddr,
    /// Where webhooks go: Cardpool's public URL (a replica or the load balancer before them).
    #[arg(long)]
    cardpool_url: String,
    /// Also write the settings, as `KEY=value` lines, to this file (for scripts).
    #[arg(long)]
    env_file: Option<PathBuf>,
    /// The URL replicas and browsers reach it at, when not the address it listens on (in a
    /// container listening on 0.0.0.0:12111 and published as http://localhost:12111).
    #[arg(long)]
    public_url: Option<String>,
}

#[derive(Args)]
struct DbArgs {
    /// Database URL (default: a SQLite file `cardpool.db` in the working directory).
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:3000].
    #[arg(long, env = "CARDPOOL_ADDR")]
    addr: Option<SocketAddr>,
    #[command(flatten)]
    db: DbArgs,
    /// Seed demo accounts if the database is empty.
    #[arg(long)]
    demo: bool,
    /// Directory with the built site (wasm, CSS, assets) [default: target/site].
    #[arg(long, env = "CARDPOOL_SITE_ROOT")]
    site_root: Option<PathBuf>,
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Create an admin account, or promote the existing account with this email.
    Create {
        #[arg(long)]
        email: String,
        /// Read the new account's password from standard input (one line).
        #[arg(long)]
        password_stdin: bool,
        #[command(flatten)]
        db: DbArgs,
    },
}

fn config_with(cli_config: Option<&std::path::Path>, db: &DbArgs) -> anyhow::Result<Config> {
    let mut config = Config::load(cli_config).context("reading configuration")?;
    if let Some(url) = &db.database_url {
        config.database_url = cardpool_server::config::Secret::new(url.clone());
    }
    Ok(config)
}

async fn services(config: &Config) -> anyhow::Result<Services> {
    services_with(config, config.service_settings()).await
}

async fn services_with(config: &Config, settings: cardpool_service::Settings) -> anyhow::Result<Services> {
    let conn = db::connect_and_migrate(config.database_url.expose())
        .await
        .context("opening the database (check --database-url / DATABASE_URL)")?;
    Services::new(conn, settings).await.map_err(|e| anyhow::anyhow!("{e}"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,sqlx=warn,sea_orm=warn".into());
    match cli.log_format {
        LogFormat::Text => tracing_subscriber::fmt().with_env_filter(filter).init(),
        LogFormat::Json => tracing_subscriber::fmt().json().with_env_filter(filter).init(),
    }
    match cli.command {
        Command::Serve(args) => serve(cli.config.as_deref(), args).await,
        Command::StripeLocal(args) => stripe_local(args).await,
        Command::Migrate(db_args) => {
            let config = config_with(cli.config.as_deref(), &db_args)?;
            db::connect_and_migrate(config.database_url.expose()).await.context("migrating")?;
            tracing::info!("database is up to date");
            Ok(())
        }
        Command::Admin { command: AdminCommand::Create { email, password_stdin, db } } => {
            let config = config_with(cli.config.as_deref(), &db)?;
            let services = services(&config).await?;
            let password = if password_stdin {
                let mut line = String::new();
                std::io::stdin().read_to_string(&mut line).context("reading the password from stdin")?;
                Some(line.trim_end_matches(['\r', '\n']).to_owned())
            } else {
                None
            };
            match accounts::create_admin(&services, &email, password.as_deref()).await {
                Ok(accounts::AdminCreated::Created) => eprintln!("created admin account {email}"),
                Ok(accounts::AdminCreated::Promoted) => eprintln!("{email} is now an admin"),
                Err(err) => {
                    let detail = match &err {
                        cardpool_domain::AppError::Validation { fields, .. } => {
                            fields.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join("; ")
                        }
                        other => other.to_string(),
                    };
                    anyhow::bail!("{detail} (a new account needs --password-stdin)");
                }
            }
            Ok(())
        }
    }
}

async fn serve(config_file: Option<&std::path::Path>, args: ServeArgs) -> anyhow::Result<()> {
    let mut config = config_with(config_file, &args.db)?;
    if let Some(addr) = args.addr {
        config.addr = addr;
    }
    if let Some(site_root) = args.site_root {
        config.site_root = site_root;
    }
    tracing::info!(?config, "starting");
    config.trusted_proxies().map_err(|e| anyhow::anyhow!(e))?;
    if config.nats_url.is_some() {
        // Replicas share exact state through one PostgreSQL, and each would otherwise run a
        // Stripe of its own that the others' checkouts never reach.
        anyhow::ensure!(
            !db::is_sqlite(config.database_url.expose()),
            "nats_url is set (a cluster) but the database is SQLite: replicas need one PostgreSQL (DATABASE_URL)"
        );
        anyhow::ensure!(
            config.stripe_secret_key.is_some(),
            "a cluster cannot use the in-process local Stripe: set CARDPOOL_STRIPE_SECRET_KEY and \
             CARDPOOL_STRIPE_WEBHOOK_SECRET (for a test-mode cluster, those `cardpool stripe-local` prints)"
        );
    }
    let listener =
        tokio::net::TcpListener::bind(config.addr).await.with_context(|| format!("binding {}", config.addr))?;
    let local = listener.local_addr().unwrap_or(config.addr);
    // What this process dials to reach itself (demo agents, local Stripe's webhooks).
    let dial = if local.ip().is_unspecified() {
        format!("http://127.0.0.1:{}", local.port())
    } else {
        format!("http://{local}")
    };
    let url = config.public_url.clone().unwrap_or_else(|| format!("http://{local}"));
    let mut settings = config.service_settings();
    settings.payments.public_url = url.trim_end_matches('/').to_owned();
    if args.demo {
        // The demo runs on one machine: its webhooks go to receivers on it.
        settings.webhooks.allow_local_targets = true;
    }
    let ssh = if config.ssh_enabled {
        let key = cardpool_server::ssh::load_or_create_host_key(&config.ssh_host_key)?;
        let listener = tokio::net::TcpListener::bind(config.ssh_addr)
            .await
            .with_context(|| format!("binding the SSH gateway to {} (set CARDPOOL_SSH_ADDR)", config.ssh_addr))?;
        let endpoint = cardpool_server::ssh::endpoint(&config, listener.local_addr()?, &key);
        eprintln!("SSH gateway on {} (host key {}).", listener.local_addr()?, endpoint.host_key_fingerprint);
        settings.ssh = Some(endpoint);
        Some((key, listener))
    } else {
        None
    };
    let _local_stripe = match (&config.stripe_secret_key, &config.stripe_webhook_secret) {
        (Some(_), Some(_)) => None,
        (Some(_), None) => anyhow::bail!(
            "a Stripe secret key is set but no webhook signing secret: set CARDPOOL_STRIPE_WEBHOOK_SECRET"
        ),
        (None, _) if args.demo || config.stripe_local => {
            let (running, stripe) = local_stripe::start(&dial, std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
                .await
                .context("starting the local test-mode Stripe")?;
            eprintln!("Payments use the local test-mode Stripe at {} (no real money moves).", running.url);
            settings.payments.stripe = stripe;
            Some(running)
        }
        (None, _) => anyhow::bail!(
            "no Stripe keys configured: set CARDPOOL_STRIPE_SECRET_KEY and CARDPOOL_STRIPE_WEBHOOK_SECRET, \
             or run with --demo (or CARDPOOL_STRIPE_LOCAL=true) to use the local test-mode Stripe"
        ),
    };
    let services = services_with(&config, settings).await?;
    // Holds may have ended while the server was down: the market's stock is recomputed once.
    cardpool_service::stock::rebuild_at_start_up(&services.db).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.demo && demo::seed(&services).await.map_err(|e| anyhow::anyhow!("{e}"))? {
        tracing::info!("seeded demo accounts");
        eprintln!("\nDemo accounts (password: {}):", demo::DEMO_PASSWORD);
        for (email, roles) in demo::DEMO_ACCOUNTS {
            eprintln!("  {email:<30} {roles}");
        }
    }

    workers::spawn(
        &services,
        std::time::Duration::from_secs(config.host_offline_grace_secs),
        std::time::Duration::from_secs(config.host_offline_grace_secs + config.agent_reconnect_secs),
        std::time::Duration::from_secs(config.billing_interval_secs),
    );

    if let Some((key, listener)) = ssh {
        tokio::spawn(cardpool_server::ssh::serve(services.clone(), key, listener));
    }
    let app = http::router(services.clone(), http::leptos_options(&config), http::HttpOptions::from_config(&config));
    if args.demo {
        demo::start_agents(&services, &dial, std::path::Path::new(".cardpool/demo-agents"))
            .await
            .map_err(|e| anyhow::anyhow!("starting demo agents: {e}"))?;
        eprintln!("Started {} simulated hosts for the demo providers.", demo::DEMO_HOSTS.len());
    }
    eprintln!("\nCardpool is running: open {url}\n");
    let stopping = services.stopping.clone();
    let shutdown = async move {
        shutdown_signal().await;
        tracing::info!("stopping: agent sockets and live feeds are closed so their clients reconnect");
        stopping.begin();
    };
    cardpool_server::serve::serve(listener, app, config.max_connections, shutdown).await;
    tracing::info!("stopped");
    Ok(())
}

async fn stripe_local(args: StripeLocalArgs) -> anyhow::Result<()> {
    let (running, mut stripe) = local_stripe::start(&args.cardpool_url, args.addr)
        .await
        .with_context(|| format!("starting the local test-mode Stripe on {}", args.addr))?;
    if let Some(url) = &args.public_url {
        anyhow::ensure!(
            url.starts_with("http://") || url.starts_with("https://"),
            "--public-url must be an http:// or https:// URL, not {url:?}"
        );
        running.stripe.set_public_url(url);
        stripe.api_base = Some(format!("{}/", url.trim_end_matches('/')));
    }
    let settings = format!(
        "CARDPOOL_STRIPE_SECRET_KEY={}\nCARDPOOL_STRIPE_WEBHOOK_SECRET={}\nCARDPOOL_STRIPE_API_BASE={}\n",
        stripe.secret_key,
        stripe.webhook_secret,
        stripe.api_base.unwrap_or_default()
    );
    if let Some(path) = &args.env_file {
        let mut file = std::fs::OpenOptions::new();
        std::os::unix::fs::OpenOptionsExt::mode(file.write(true).create(true).truncate(true), 0o600);
        std::io::Write::write_all(&mut file.open(path)?, settings.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!(
        "Local test-mode Stripe at {} (no real money moves), webhooks to {}.\nStart each replica with:\n{settings}",
        args.public_url.as_deref().unwrap_or(&running.url),
        args.cardpool_url
    );
    shutdown_signal().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
