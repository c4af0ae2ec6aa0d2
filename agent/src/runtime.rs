//! How a renter's workload is started on the rental's GPUs, and only those.
//!
//! A [`Runtime`] turns an [`AttachSpec`] into the command that runs the workload and knows how
//! to signal what that command started; the [`crate::supervisor`] owns the child, its logs,
//! notices and exit. Three runtimes:
//! - [`crate::sandbox::SandboxRuntime`] runs a shell command inside a bubblewrap sandbox: the
//!   process runtime of every host, real or simulated.
//! - [`ContainerRuntime`] runs an image with Docker and the NVIDIA container runtime, passing
//!   only the rental's GPUs, as a non-root user with no capabilities.
//! - [`SimulatedRuntime`], a stand-in process, takes the workload's place on simulated hosts
//!   where bubblewrap is missing: attach, signals, notices and exits are real, but no renter's
//!   code runs outside a sandbox.
//!
//! Every runtime tells the workload where a preemption notice will appear
//! (`CARDPOOL_PREEMPT_NOTICE_FILE`): a file in the rental's `cardpool/` directory, which the
//! agent owns and the workload sees read-only, so it cannot redirect the agent's write.

use crate::{
    devices::DeviceMap,
    sandbox::{SandboxRuntime, WORKSPACE_DIR},
    shares::HostShares,
};
use cardpool_protocol::{AttachSpec, SelfTestCheck};
use nix::sys::signal::Signal;
use std::{
    path::{Path, PathBuf},
    sync::Arc,
};
use tokio::process::Command;

/// The directory (in the rental's directory, and `/cardpool` inside) that holds the notice.
pub const NOTICE_DIR: &str = "cardpool";
/// Name of the notice file written when the rental is preempted.
pub const NOTICE_FILE: &str = "preempt-notice";

pub trait Runtime: Send + Sync {
    fn name(&self) -> &'static str;
    /// The command that runs `spec`'s workload; `dir` is the rental's private directory
    /// (working directory, logs, notice file).
    fn command(&self, spec: &AttachSpec, dir: &Path) -> Result<Command, String>;
    /// Sends `signal` to the workload: SIGTERM asks everything it runs to stop, SIGKILL ends
    /// everything it started. `pgid` is the process group of the command, while the agent
    /// that started it runs.
    fn signal(&self, _rental_id: i64, _dir: &Path, pgid: Option<i32>, signal: Signal) {
        if let Some(pgid) = pgid.filter(|p| *p > 0) {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), signal);
        }
    }
    /// Whether the workload really runs yet (its sandbox is up): only then is it reported
    /// ready, and billed.
    fn started(&self, _dir: &Path) -> bool {
        true
    }
    /// Whether the workload keeps running when the agent exits (and can be adopted again).
    fn survives_agent(&self) -> bool {
        false
    }
    /// Whether a workload an earlier agent process started in `dir` still runs.
    fn adopt(&self, _dir: &Path) -> bool {
        false
    }
    /// For an adopted workload: `Some(exit code)` once it has ended.
    fn finished(&self, _dir: &Path) -> Option<Option<i32>> {
        Some(None)
    }
    /// What to run after the child ended or was killed, to remove anything left behind.
    fn cleanup(&self, _rental_id: i64, _dir: &Path) -> Option<Command> {
        None
    }
    /// The argv that runs `argv` inside the running rental (its namespaces, user, limits and
    /// environment), for an SSH channel. The caller clears the environment and sets its own.
    fn enter(&self, _rental_id: i64, _dir: &Path, _gpus: usize, _argv: &[String]) -> Result<Vec<String>, String> {
        Err(format!("the {} runtime offers no shell on this host", self.name()))
    }
    /// The rental's own network namespace (`/proc/PID/ns/net`), for a forwarded port.
    fn network(&self, _dir: &Path) -> Result<PathBuf, String> {
        Err(format!("the {} runtime offers no port forwarding on this host", self.name()))
    }
}

pub(crate) fn rental_env(spec: &AttachSpec, notice: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = spec
        .env
        .iter()
        .filter_map(|entry| entry.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .filter(|(k, _)| !k.starts_with("CARDPOOL_") && k != "CUDA_VISIBLE_DEVICES" && k != "NVIDIA_VISIBLE_DEVICES")
        .collect();
    env.push(("CARDPOOL_RENTAL_ID".into(), spec.rental_id.to_string()));
    env.push(("CARDPOOL_PREEMPT_NOTICE_FILE".into(), notice.into()));
    if let Some(key) = &spec.ssh_public_key {
        env.push(("CARDPOOL_SSH_PUBLIC_KEY".into(), key.clone()));
    }
    env
}

/// Runs an image with `docker run --runtime nvidia --gpus device=UUIDS` as a non-root user with
/// no capabilities, no privilege gain and the rental's share of CPU, memory and processes. The
/// rental's workspace is `/workspace`, its notice directory `/cardpool` (read-only); the
/// agent's state directory is never mounted. The container is named after the rental so a
/// stop can always remove it, even after an agent restart.
pub struct ContainerRuntime {
    pub docker: PathBuf,
    pub shares: HostShares,
}

impl ContainerRuntime {
    pub fn container_name(rental_id: i64) -> String {
        format!("cardpool-rental-{rental_id}")
    }

    /// Docker with the NVIDIA runtime, if this host has both.
    pub fn detect(shares: HostShares) -> Option<ContainerRuntime> {
        let output =
            std::process::Command::new("docker").args(["info", "--format", "{{json .Runtimes}}"]).output().ok()?;
        (output.status.success() && String::from_utf8_lossy(&output.stdout).contains("nvidia"))
            .then(|| ContainerRuntime { docker: PathBuf::from("docker"), shares })
    }
}

/// An image reference Docker will read as an image, never as an option: `[registry/]name[:tag][@digest]`.
pub fn check_image(image: &str) -> Result<&str, String> {
    let ok = !image.is_empty()
        && image.len() <= 255
        && image.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && image.chars().all(|c| c.is_ascii_alphanumeric() || "._-/:@".contains(c));
    if ok {
        Ok(image)
    } else {
        Err(format!("{image:?} is not an image reference (like nvcr.io/nvidia/pytorch:24.05-py3)"))
    }
}

impl Runtime for ContainerRuntime {
    fn name(&self) -> &'static str {
        "container"
    }

    fn command(&self, spec: &AttachSpec, dir: &Path) -> Result<Command, String> {
        let image = check_image(spec.image.as_deref().ok_or("the container runtime needs an image")?)?;
        let (cpu_millis, memory, pids) = self.shares.for_sevenths(u64::from(spec.sevenths()));
        let workspace = dir.join(WORKSPACE_DIR);
        std::fs::create_dir_all(&workspace).map_err(|e| format!("cannot create {}: {e}", workspace.display()))?;
        if nix::unistd::geteuid().is_root() {
            let _ = std::os::unix::fs::chown(&workspace, Some(CONTAINER_USER), Some(CONTAINER_USER));
        }
        let mut command = Command::new(&self.docker);
        command.args(["run", "--rm", "--init", "--runtime", "nvidia", "--name"]);
        command.arg(Self::container_name(spec.rental_id));
        command.arg("--user").arg(format!("{CONTAINER_USER}:{CONTAINER_USER}"));
        command.args(["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]);
        command.arg("--pids-limit").arg(pids.to_string());
        command.arg("--cpus").arg(format!("{}.{:03}", cpu_millis / 1000, cpu_millis % 1000));
        if memory > 0 {
            command.arg("--memory").arg(memory.to_string());
        }
        command.arg("--gpus").arg(format!("\"device={}\"", spec.gpu_uuids.join(",")));
        command.arg("-v").arg(format!("{}:/workspace", workspace.display()));
        command.arg("-v").arg(format!("{}:/{NOTICE_DIR}:ro", dir.join(NOTICE_DIR).display()));
        command.args(["-w", "/workspace", "-e", "HOME=/workspace"]);
        // `-e NAME` takes the value from the client's environment: the renter's values (API
        // keys, say) never appear in a command line that anyone on the host can read.
        for (key, value) in rental_env(spec, &format!("/{NOTICE_DIR}/{NOTICE_FILE}")) {
            command.arg("-e").arg(&key);
            command.env(key, value);
        }
        command.arg("-e").arg(format!("NVIDIA_VISIBLE_DEVICES={}", spec.gpu_uuids.join(",")));
        command.arg("--").arg(image);
        command.current_dir(dir).process_group(0);
        Ok(command)
    }

    fn cleanup(&self, rental_id: i64, _dir: &Path) -> Option<Command> {
        let mut command = Command::new(&self.docker);
        command.args(["rm", "--force"]).arg(Self::container_name(rental_id));
        Some(command)
    }
}

/// The uid and gid containers run as.
const CONTAINER_USER: u32 = 1000;

/// Which runtimes an agent uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadMode {
    /// A real host: renters' commands run sandboxed and images in containers; a host with
    /// neither never runs a renter's code (its self-test fails).
    Run,
    /// Simulated GPUs: commands run in the same sandbox when bubblewrap is here, else a
    /// stand-in process takes their place.
    Simulate,
}

/// The runtimes this host offers, and the self-test's word on them.
pub struct Runtimes {
    /// Runs commands; `None` on a real host without a sandbox (such a host runs no commands).
    pub process: Option<Arc<dyn Runtime>>,
    pub container: Option<Arc<dyn Runtime>>,
    pub check: SelfTestCheck,
}

impl Runtimes {
    /// `devices` says which GPU and MIG slice is where, for the sandbox to give each rental its
    /// own nodes.
    pub fn detect(mode: WorkloadMode, shares: HostShares, devices: DeviceMap) -> Runtimes {
        let sandbox =
            SandboxRuntime::detect(shares).map(|s| s.with_devices(devices, PathBuf::from(crate::devices::DRIVER_ROOT)));
        let check = |passed: bool, detail: String| SelfTestCheck { name: "isolation".into(), passed, detail };
        match mode {
            WorkloadMode::Simulate => match sandbox {
                Ok(sandbox) => Runtimes {
                    check: check(true, format!("commands run sandboxed: {}", sandbox.describe())),
                    process: Some(Arc::new(sandbox)),
                    container: Some(Arc::new(SimulatedRuntime)),
                },
                Err(why) => Runtimes {
                    check: check(true, format!("simulated host: a stand-in runs in place of workloads ({why})")),
                    process: Some(Arc::new(SimulatedRuntime)),
                    container: Some(Arc::new(SimulatedRuntime)),
                },
            },
            WorkloadMode::Run => {
                let container = ContainerRuntime::detect(shares).map(|r| Arc::new(r) as Arc<dyn Runtime>);
                let images = if container.is_some() {
                    "images run in Docker with NVIDIA"
                } else {
                    "no Docker with NVIDIA: no images"
                };
                match sandbox {
                    Ok(sandbox) => Runtimes {
                        check: check(true, format!("commands run sandboxed: {}; {images}", sandbox.describe())),
                        process: Some(Arc::new(sandbox)),
                        container,
                    },
                    Err(why) => Runtimes {
                        check: check(
                            container.is_some(),
                            format!("commands cannot run sandboxed ({why}), so this host runs none; {images}"),
                        ),
                        process: None,
                        container,
                    },
                }
            }
        }
    }
}

/// A stand-in for the workload on simulated hosts: logs what it would run and waits. On
/// SIGTERM with a preemption notice it logs the notice and keeps going until it is stopped at
/// the deadline (as a checkpointing job would); on a plain SIGTERM (a stop) it exits 0.
pub struct SimulatedRuntime;

impl Runtime for SimulatedRuntime {
    fn name(&self) -> &'static str {
        "simulated"
    }

    fn command(&self, spec: &AttachSpec, dir: &Path) -> Result<Command, String> {
        let what = spec.command.clone().or_else(|| spec.image.clone()).unwrap_or_default();
        let script = "echo \"simulated host: standing in for: $CARDPOOL_WORKLOAD (GPUs $CUDA_VISIBLE_DEVICES)\"; \
             trap 'if [ -f \"$CARDPOOL_PREEMPT_NOTICE_FILE\" ]; then echo \"notice: $(cat \"$CARDPOOL_PREEMPT_NOTICE_FILE\")\"; else exit 0; fi' TERM; \
             while :; do sleep 1; done";
        let mut command = Command::new("/bin/sh");
        command.arg("-c").arg(script).current_dir(dir).env_clear();
        command.env("PATH", "/usr/local/bin:/usr/bin:/bin");
        command.env("CARDPOOL_WORKLOAD", what);
        for (key, value) in rental_env(spec, &dir.join(NOTICE_DIR).join(NOTICE_FILE).to_string_lossy()) {
            command.env(key, value);
        }
        let indexes: Vec<String> = spec.gpu_indexes.iter().map(u32::to_string).collect();
        command.env("CUDA_VISIBLE_DEVICES", indexes.join(","));
        command.process_group(0);
        Ok(command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> AttachSpec {
        AttachSpec {
            rental_id: 7,
            gpu_indexes: vec![2, 3],
            gpu_uuids: vec!["GPU-a".into(), "GPU-b".into()],
            command: Some("env".into()),
            image: Some("nvcr.io/nvidia/pytorch:24.05-py3".into()),
            env: vec!["EPOCHS=3".into(), "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7".into()],
            ssh_public_key: None,
            share_sevenths: None,
            gang: None,
        }
    }

    #[test]
    fn container_gets_only_the_rentals_gpus() {
        let shares = HostShares::new(64_000, 512 << 30, 8);
        let runtime = ContainerRuntime { docker: "docker".into(), shares };
        let dir = std::env::temp_dir().join(format!("cardpool-container-{}", std::process::id()));
        let command = runtime.command(&spec(), &dir).unwrap();
        let args: Vec<String> = command.as_std().get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let joined = args.join(" ");
        assert!(joined.contains("--gpus \"device=GPU-a,GPU-b\""), "{joined}");
        assert!(joined.contains("--name cardpool-rental-7"), "{joined}");
        assert!(
            joined.contains("-e EPOCHS ") && !joined.contains("EPOCHS=3"),
            "values stay off the command line: {joined}"
        );
        let env: Vec<(String, String)> = command
            .as_std()
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_string_lossy().into_owned(), v?.to_string_lossy().into_owned())))
            .collect();
        assert!(env.contains(&("EPOCHS".into(), "3".into())), "{env:?}");
        assert!(!joined.contains("0,1,2,3,4,5,6,7"), "renter env must not widen the GPUs: {joined}");
        assert!(joined.contains("--user 1000:1000 --cap-drop ALL --security-opt no-new-privileges"), "{joined}");
        assert!(joined.contains("--pids-limit 8192 --cpus 16.000 --memory 137438953472"), "{joined}");
        assert!(joined.contains(":/cardpool:ro"), "{joined}");
        assert_eq!(args[args.len() - 2..], ["--", "nvcr.io/nvidia/pytorch:24.05-py3"]);
        let _ = std::fs::remove_dir_all(&dir);
        // Nothing that Docker could read as an option is an image.
        let mut hostile = spec();
        hostile.image = Some("--privileged".into());
        assert!(runtime.command(&hostile, &dir).unwrap_err().contains("not an image reference"));
        assert!(check_image("ubuntu:24.04").is_ok() && check_image("reg.io/a/b@sha256:00ff").is_ok());
        assert!(check_image("").is_err() && check_image("a b").is_err() && check_image("-v").is_err());
    }
}
