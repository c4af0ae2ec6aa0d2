//! `cardpool-agent`: runs on a provider's host, enrolls it, keeps it connected to the server
//! and reports its GPUs (NVML, or `--simulate` without a GPU).

use cardpool_agent::{
    connection, enrollment,
    gpu::{
        GpuSource,
        nvml::NvmlSource,
        simulated::{Fault, SimulatedSource},
    },
    host,
    runtime::{Runtimes, WorkloadMode},
    selftest, state,
};
use clap::{Args, Parser, Subcommand};
use std::{path::PathBuf, process::ExitCode};

#[derive(Parser)]
#[command(name = "cardpool-agent", version, about = "Cardpool provider agent: puts this host's GPUs on the market")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Enroll this host with a single-use token from your Hosts page; saves its credential.
    Enroll {
        /// The Cardpool server, e.g. http://127.0.0.1:3000
        #[arg(long)]
        server: String,
        /// The enrollment token (cpe_...).
        #[arg(long, env = "CARDPOOL_ENROLLMENT_TOKEN")]
        token: String,
        #[arg(long, env = "CARDPOOL_AGENT_STATE_DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Connect to the server and stay connected: inventory, heartbeats, reconnects.
    Run {
        #[arg(long, env = "CARDPOOL_AGENT_STATE_DIR")]
        state_dir: Option<PathBuf>,
        #[command(flatten)]
        source: SourceArgs,
        /// How often every GPU is sampled for telemetry, milliseconds.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
        sample_interval_ms: u64,
    },
    /// Print what this host would report: host facts and every GPU.
    Inventory {
        /// Print JSON (the protocol's `Inventory`) instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        source: SourceArgs,
    },
    /// Check that this host's GPUs are healthy; exits non-zero if any check fails.
    SelfTest {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        source: SourceArgs,
    },
}

#[derive(Args)]
struct SourceArgs {
    /// Simulate GPUs instead of using NVML, e.g. `8xH100-80GB` or `4xH100-80GB,2xL40S-48GB`;
    /// a MIG layout follows a group: `8xH100-80GB:mig=3g.40gb*2` or `2xA100-40GB:mig=1g.5gb*7`.
    #[arg(long, env = "CARDPOOL_SIMULATE")]
    simulate: Option<String>,
    /// Scripted fault on a simulated GPU (repeatable): xid:GPU:CODE, ecc:GPU, overheat:GPU,
    /// throttle:GPU, offbus:GPU.
    #[arg(long = "fault", requires = "simulate")]
    faults: Vec<String>,
    /// Public location label shown to renters, e.g. "Frankfurt, DE".
    #[arg(long, env = "CARDPOOL_LOCATION")]
    location: Option<String>,
}

impl SourceArgs {
    fn mode(&self) -> WorkloadMode {
        if self.simulate.is_some() { WorkloadMode::Simulate } else { WorkloadMode::Run }
    }

    fn open(&self, hostname: &str) -> Result<Box<dyn GpuSource>, String> {
        match &self.simulate {
            Some(spec) => {
                let faults = self.faults.iter().map(|f| Fault::parse(f)).collect::<Result<Vec<_>, _>>()?;
                Ok(Box::new(SimulatedSource::new(spec, hostname, faults)?))
            }
            None => NvmlSource::init().map(|s| Box::new(s) as Box<dyn GpuSource>).map_err(|e| e.to_string()),
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Cli::parse()).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("cardpool-agent: {message}");
            ExitCode::from(2)
        }
    }
}

#[allow(clippy::print_stdout)] // printing the report is this command's job
async fn run(cli: Cli) -> Result<ExitCode, String> {
    match cli.command {
        Command::Enroll { server, token, state_dir } => {
            let dir = state_dir.unwrap_or_else(state::default_dir);
            let hostname = host::host_facts(None).hostname;
            let enrolled = enrollment::enroll(&server, &token, &hostname).await?;
            let path = state::save(&dir, &enrolled)?;
            eprintln!("enrolled as host {} with {server}; credential saved to {}", enrolled.host_id, path.display());
            eprintln!("next: cardpool-agent run");
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { state_dir, source, sample_interval_ms } => {
            let dir = state_dir.unwrap_or_else(state::default_dir);
            let saved = state::load(&dir)?;
            let hostname = host::host_facts(None).hostname;
            let gpus = source.open(&hostname)?;
            let mode = source.mode();
            connection::run(
                &saved,
                gpus.as_ref(),
                source.location.clone(),
                dir.join("rentals"),
                mode,
                std::time::Duration::from_millis(sample_interval_ms),
            )
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Inventory { json, source } => {
            let host = host::host_facts(source.location.clone());
            let gpus = source.open(&host.hostname)?.gpus().map_err(|e| e.to_string())?;
            let inventory = cardpool_protocol::Inventory { protocol: cardpool_protocol::PROTOCOL_VERSION, host, gpus };
            if json {
                println!("{}", serde_json::to_string_pretty(&inventory).map_err(|e| e.to_string())?);
            } else {
                let h = &inventory.host;
                println!(
                    "{} — {} ({} cores), {} GiB RAM, {} GiB disk, {}",
                    h.hostname,
                    h.cpu_model,
                    h.cpu_cores,
                    h.ram_bytes >> 30,
                    h.disk_bytes >> 30,
                    h.os
                );
                for g in &inventory.gpus {
                    println!(
                        "  [{}] {} {} GiB  {}  {}  driver {} CUDA {}  NVLink peers: {}",
                        g.index,
                        g.name,
                        g.memory_total_bytes >> 30,
                        g.uuid,
                        g.pci_bus_id,
                        g.driver_version,
                        g.cuda_version,
                        g.nvlink_peers.len()
                    );
                    for m in &g.mig_instances {
                        println!("      MIG {} {} GiB  {}", m.profile, m.memory_bytes >> 30, m.uuid);
                    }
                    if !g.mig_profiles.is_empty() {
                        let names: Vec<&str> = g.mig_profiles.iter().map(|p| p.name.as_str()).collect();
                        println!("      can carve: {}", names.join(", "));
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::SelfTest { json, source } => {
            let host = host::host_facts(source.location.clone());
            let report = match source.open(&host.hostname) {
                Ok(gpus) => {
                    let devices = cardpool_agent::devices::DeviceMap::default();
                    devices.learn(&gpus.gpus().unwrap_or_default());
                    let runtimes = Runtimes::detect(source.mode(), connection::shares(gpus.as_ref()), devices);
                    selftest::run(gpus.as_ref(), &host, &runtimes.check)
                }
                Err(message) => cardpool_protocol::SelfTestReport {
                    source: "NVML".into(),
                    checks: vec![cardpool_protocol::SelfTestCheck {
                        name: "gpu source".into(),
                        passed: false,
                        detail: message,
                    }],
                },
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
            } else {
                print!("{}", selftest::render(&report));
            }
            Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
    }
}
