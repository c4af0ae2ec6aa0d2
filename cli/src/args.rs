//! The command line: every command, flag and default, as `--help` shows them.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "cardpool-cli",
    version,
    about = "Rent GPUs on Cardpool from a terminal: find offers, rent, ssh in, follow logs, stop.",
    after_help = crate::failure::EXIT_CODES
)]
pub struct Cli {
    /// The Cardpool server (default: the one you logged in to, else http://127.0.0.1:3000).
    #[arg(long, global = true, env = "CARDPOOL_URL")]
    pub url: Option<String>,
    /// An API token to use instead of the saved one (for scripts and CI).
    #[arg(long, global = true, env = "CARDPOOL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Where the saved login lives (default: ~/.config/cardpool).
    #[arg(long, global = true, env = "CARDPOOL_CONFIG_DIR")]
    pub config_dir: Option<PathBuf>,
    /// Print the API's JSON instead of tables and sentences.
    #[arg(long, global = true)]
    pub json: bool,
    /// Print each HTTP request made, as a curl command, on stderr.
    #[arg(long, global = true)]
    pub explain: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sign in and save an API token for this machine (readable by you only).
    Login(Login),
    /// Revoke the saved token and forget it.
    Logout,
    /// The account you are signed in as.
    Whoami,
    /// Search the market: free GPUs of online hosts, with the web's filters.
    Offers(Offers),
    /// Rent GPUs of one offer: on-demand (default), spot (--bid) or reserved (--start, --hours).
    Rent(Rent),
    /// Your rentals, newest first.
    #[command(alias = "ls")]
    List(List),
    /// One rental: its state, cost so far, timeline and how to get in.
    Show { rental: i64 },
    /// Open a shell (or run a command) inside a rental over SSH, through Cardpool's gateway.
    Ssh(Ssh),
    /// The rental's workload output; -f follows it live until it ends.
    Logs(Logs),
    /// Stop a rental: billing ends and the GPUs are released.
    Stop(Stop),
    /// Change a live spot rental's bid per GPU-hour, in dollars.
    Bid { rental: i64, bid: String },
    /// Your balance, held funds and top-ups awaiting payment.
    Wallet,
    /// Start a top-up: prints the checkout URL to pay at.
    TopUp { amount: String },
    /// Your daily and monthly spend limits and what you spent; --daily/--monthly set them.
    Limits(Limits),
    /// Cap one live on-demand or spot rental's cost or duration.
    Cap(Cap),
    /// What Cardpool told you (rental changes, limits, low balance), newest first.
    Notifications(Notifications),
    /// The cheapest mix of reserved, on-demand and spot for a job on one offer.
    Advise(Advise),
    /// Your webhooks: list them, add one (its signing secret is printed once), remove one,
    /// send one a test event, read its delivery log.
    #[command(subcommand)]
    Webhooks(Webhooks),
}

#[derive(Debug, Subcommand)]
pub enum Webhooks {
    /// Your webhooks.
    #[command(alias = "ls")]
    List,
    /// Register a URL (https, on a public address); prints its signing secret once.
    Add {
        /// Where deliveries go (named apart from the global --url, the server's).
        #[arg(value_name = "URL")]
        endpoint: String,
    },
    /// Delete a webhook: nothing more is sent to it.
    #[command(alias = "rm")]
    Remove { webhook: i64 },
    /// Send a webhook a test event (it goes out within seconds).
    Test { webhook: i64 },
    /// A webhook's delivery log, newest first.
    Log { webhook: i64 },
}

/// One offer: a host and, where it has several, the GPU model.
#[derive(Debug, Args)]
pub struct OfferChoice {
    /// The host of the offer (the HOST column of `offers`).
    #[arg(long)]
    pub host: i64,
    /// The GPU model (needed only when the host offers more than one).
    #[arg(long)]
    pub gpu_model: Option<String>,
}

#[derive(Debug, Args)]
pub struct Advise {
    #[command(flatten)]
    pub offer: OfferChoice,
    /// GPUs the job runs on at once.
    #[arg(long, default_value_t = 1)]
    pub gpus: u32,
    /// How long the job runs, hours.
    #[arg(long)]
    pub hours: u32,
    /// It must be done within this many hours (default: the job's hours, no slack).
    #[arg(long)]
    pub deadline: Option<u32>,
    /// The job can be stopped and resumed (spot may be used).
    #[arg(long)]
    pub interruptible: bool,
    /// How often it checkpoints, minutes.
    #[arg(long, default_value_t = 0)]
    pub checkpoint_minutes: u32,
}

#[derive(Debug, Args)]
pub struct Limits {
    /// The most to spend on rentals per UTC day, dollars (`none` removes the limit).
    #[arg(long)]
    pub daily: Option<String>,
    /// The most to spend on rentals per UTC month, dollars (`none` removes the limit).
    #[arg(long)]
    pub monthly: Option<String>,
}

#[derive(Debug, Args)]
pub struct Cap {
    pub rental: i64,
    /// The most the rental may cost in all, dollars (`none` removes the cap).
    #[arg(long)]
    pub max_cost: Option<String>,
    /// The most hours it may bill, e.g. 2 or 1.5 (`none` removes the cap).
    #[arg(long)]
    pub max_hours: Option<String>,
}

#[derive(Debug, Args)]
pub struct Notifications {
    /// Mark them read after showing them.
    #[arg(long)]
    pub read: bool,
}

#[derive(Debug, Args)]
pub struct Login {
    /// Your account's email (asked for when missing).
    #[arg(long)]
    pub email: Option<String>,
    /// Read the password from the first line of stdin instead of asking.
    #[arg(long, conflicts_with = "token_stdin")]
    pub password_stdin: bool,
    /// Save an existing API token (from the web's Account page), read from stdin.
    #[arg(long)]
    pub token_stdin: bool,
    /// The name the new token gets on your Account page (default: cardpool-cli on <host>).
    #[arg(long)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    OnDemand,
    Spot,
    Reserved,
}

impl Kind {
    pub fn domain(self) -> cardpool_domain::offers::RentalKind {
        use cardpool_domain::offers::RentalKind;
        match self {
            Kind::OnDemand => RentalKind::OnDemand,
            Kind::Spot => RentalKind::Spot,
            Kind::Reserved => RentalKind::Reserved,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Sort {
    Price,
    PricePerVram,
    Availability,
}

/// Whole GPUs or MIG slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Unit {
    Gpu,
    Slice,
}

/// A host's interconnect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Link {
    Infiniband,
    Roce,
    Ethernet,
}

#[derive(Debug, Args)]
pub struct Offers {
    /// Exact GPU model, e.g. "NVIDIA H100 80GB HBM3" (the GPU column).
    #[arg(long)]
    pub gpu_model: Option<String>,
    /// At least this many free GPUs on the host.
    #[arg(long)]
    pub min_gpus: Option<u32>,
    /// At least this much memory per GPU, GiB.
    #[arg(long)]
    pub min_vram: Option<u32>,
    /// At most this price per GPU-hour, dollars (of the chosen --kind).
    #[arg(long)]
    pub max_price: Option<String>,
    /// The kind of rental the price is for.
    #[arg(long, value_enum)]
    pub kind: Option<Kind>,
    /// Location containing this text, e.g. "DE".
    #[arg(long)]
    pub location: Option<String>,
    /// At least this CUDA version, e.g. 12.4.
    #[arg(long)]
    pub min_cuda: Option<String>,
    #[arg(long, value_enum)]
    pub sort: Option<Sort>,
    /// One host's offers.
    #[arg(long)]
    pub host: Option<i64>,
    /// Only hosts verified by Cardpool's admins (the ✓ column).
    #[arg(long)]
    pub verified: bool,
    /// Whole GPUs or MIG slices only (a slice's GPU column reads "MODEL MIG 1g.10gb").
    #[arg(long, value_enum)]
    pub unit: Option<Unit>,
    /// MIG slices of this profile only, e.g. 1g.10gb.
    #[arg(long)]
    pub mig_profile: Option<String>,
    /// Hosts of this fabric only (as providers declare it), e.g. pdx-ib-1.
    #[arg(long)]
    pub fabric: Option<String>,
    /// Hosts on this interconnect only.
    #[arg(long, value_enum)]
    pub interconnect: Option<Link>,
    #[arg(long)]
    pub page: Option<u32>,
    #[arg(long)]
    pub per_page: Option<u32>,
}

#[derive(Debug, Args)]
pub struct Rent {
    #[command(flatten)]
    pub offer: OfferChoice,
    /// How many GPUs.
    #[arg(long, default_value_t = 1)]
    pub gpus: u32,
    #[arg(long, value_enum, default_value_t = Kind::OnDemand)]
    pub kind: Kind,
    /// Spot: the most you pay per GPU-hour, dollars (implies --kind spot).
    #[arg(long)]
    pub bid: Option<String>,
    /// Reserved: the window's start, UTC, `YYYY-MM-DDTHH:MM` (implies --kind reserved).
    #[arg(long)]
    pub start: Option<String>,
    /// Reserved: the window's length, whole hours.
    #[arg(long)]
    pub hours: Option<String>,
    /// The command the rental runs (default: `sleep infinity`, a rental to ssh into).
    #[arg(long)]
    pub command: Option<String>,
    /// A container image to run instead of a command, where the host runs containers.
    #[arg(long)]
    pub image: Option<String>,
    /// An environment variable for the workload, NAME=value (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// An OpenSSH public key file allowed into this rental (your account's keys always are).
    #[arg(long, value_name = "FILE.pub")]
    pub ssh_key: Option<PathBuf>,
    /// Stop the rental on its own when its GPUs sit idle.
    #[arg(long)]
    pub stop_when_idle: bool,
    /// On-demand and spot: stop the rental once it has cost this much, dollars.
    #[arg(long)]
    pub max_cost: Option<String>,
    /// On-demand and spot: stop the rental after this many hours, e.g. 2 or 1.5.
    #[arg(long)]
    pub max_hours: Option<String>,
    /// Wait until the rental is running (or fails), showing its progress.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits, seconds.
    #[arg(long, default_value_t = 300)]
    pub wait_secs: u64,
}

#[derive(Debug, Args)]
pub struct List {
    /// Only rentals holding (or about to hold) GPUs.
    #[arg(long)]
    pub live: bool,
}

#[derive(Debug, Args)]
pub struct Ssh {
    pub rental: i64,
    /// The private key ssh uses (passed to ssh as -i).
    #[arg(short = 'i', value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// An ssh option, e.g. -o StrictHostKeyChecking=accept-new (repeatable).
    #[arg(short = 'o', value_name = "OPTION")]
    pub options: Vec<String>,
    /// Forward a local port into the rental, e.g. -L 8888:127.0.0.1:8888 (repeatable).
    #[arg(short = 'L', value_name = "FORWARD")]
    pub forwards: Vec<String>,
    /// Print the ssh command instead of running it.
    #[arg(long)]
    pub print: bool,
    /// A command to run instead of a shell (after `--`).
    #[arg(last = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct Logs {
    pub rental: i64,
    /// Follow the output live until the workload ends.
    #[arg(short = 'f', long)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct Stop {
    pub rental: i64,
    /// Wait until the GPUs are released and the rental is settled.
    #[arg(long)]
    pub wait: bool,
}
