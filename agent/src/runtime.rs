//! How a renter's workload is started on the rental's GPUs, and only those.
//!
//! A [`Runtime`] turns an [`AttachSpec`] into the command that runs the workload; the
//! [`crate::supervisor`] owns the child process, its logs, notices and exit. Two runtimes:
//! [`ProcessRuntime`] runs a shell command with `CUDA_VISIBLE_DEVICES` and
//! `NVIDIA_VISIBLE_DEVICES` narrowed to the rental's GPUs; [`ContainerRuntime`] runs an image
//! with Docker and the NVIDIA container runtime, passing only those GPUs (`--gpus device=`).
//! Both tell the workload where a preemption notice will appear
//! (`CARDPOOL_PREEMPT_NOTICE_FILE`). Hosts with simulated GPUs (the demo, `--simulate`) use
//! [`SimulatedRuntime`]: a stand-in process takes the workload's place, so attach, signals,
//! notices and exits are real but no renter's code runs on a machine that has no GPUs to give.

use cardpool_protocol::AttachSpec;
use std::path::{Path, PathBuf};
use tokio::process::Command;

/// Name of the notice file written into the rental's directory when it is preempted.
pub const NOTICE_FILE: &str = "preempt-notice";

pub trait Runtime: Send + Sync {
    fn name(&self) -> &'static str;
    /// The command that runs `spec`'s workload; `dir` is the rental's private directory
    /// (working directory, logs, notice file).
    fn command(&self, spec: &AttachSpec, dir: &Path) -> Result<Command, String>;
    /// What to run after the child ended or was killed, to remove anything left behind.
    fn cleanup(&self, _rental_id: i64) -> Option<Command> {
        None
    }
}

fn rental_env(spec: &AttachSpec, notice: &str) -> Vec<(String, String)> {
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

/// Runs `sh -c COMMAND` in the rental's directory with a clean environment: only the rental's
/// GPUs are visible. The child leads its own process group so a notice or a stop reaches
/// everything it started.
pub struct ProcessRuntime;

impl Runtime for ProcessRuntime {
    fn name(&self) -> &'static str {
        "process"
    }

    fn command(&self, spec: &AttachSpec, dir: &Path) -> Result<Command, String> {
        let script = spec.command.as_deref().ok_or("this host runs commands, and the rental has no command")?;
        let mut command = Command::new("/bin/sh");
        command.arg("-c").arg(script).current_dir(dir).env_clear();
        command.env("PATH", std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()));
        command.env("HOME", dir);
        command.env("LANG", "C.UTF-8");
        for (key, value) in rental_env(spec, &dir.join(NOTICE_FILE).to_string_lossy()) {
            command.env(key, value);
        }
        let indexes: Vec<String> = spec.gpu_indexes.iter().map(u32::to_string).collect();
        command.env("CUDA_VISIBLE_DEVICES", indexes.join(","));
        command.env("NVIDIA_VISIBLE_DEVICES", spec.gpu_uuids.join(","));
        command.process_group(0);
        Ok(command)
    }
}

/// Runs an image with `docker run --runtime nvidia --gpus device=UUIDS`, the rental directory
/// mounted at `/cardpool` (notice file). The container is named after the rental so a stop can
/// always remove it, even after an agent restart.
pub struct ContainerRuntime {
    pub docker: PathBuf,
}

impl ContainerRuntime {
    pub fn container_name(rental_id: i64) -> String {
        format!("cardpool-rental-{rental_id}")
    }

    /// Docker with the NVIDIA runtime, if this host has both.
    pub fn detect() -> Option<ContainerRuntime> {
        let output =
            std::process::Command::new("docker").args(["info", "--format", "{{json .Runtimes}}"]).output().ok()?;
        (output.status.success() && String::from_utf8_lossy(&output.stdout).contains("nvidia"))
            .then(|| ContainerRuntime { docker: PathBuf::from("docker") })
    }
}

impl Runtime for ContainerRuntime {
    fn name(&self) -> &'static str {
        "container"
    }

    fn command(&self, spec: &AttachSpec, dir: &Path) -> Result<Command, String> {
        let image = spec.image.as_deref().ok_or("the container runtime needs an image")?;
        let mut command = Command::new(&self.docker);
        command.args(["run", "--rm", "--init", "--runtime", "nvidia", "--name"]);
        command.arg(Self::container_name(spec.rental_id));
        command.arg("--gpus").arg(format!("\"device={}\"", spec.gpu_uuids.join(",")));
        command.arg("-v").arg(format!("{}:/cardpool", dir.display()));
        for (key, value) in rental_env(spec, &format!("/cardpool/{NOTICE_FILE}")) {
            command.arg("-e").arg(format!("{key}={value}"));
        }
        command.arg("-e").arg(format!("NVIDIA_VISIBLE_DEVICES={}", spec.gpu_uuids.join(",")));
        command.arg(image);
        command.current_dir(dir).process_group(0);
        Ok(command)
    }

    fn cleanup(&self, rental_id: i64) -> Option<Command> {
        let mut command = Command::new(&self.docker);
        command.args(["rm", "--force"]).arg(Self::container_name(rental_id));
        Some(command)
    }
}

/// Which runtimes an agent uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadMode {
    /// Run renters' commands (process runtime) and images (Docker, when present).
    Run,
    /// Simulated hosts: a stand-in process per rental, renters' code never runs.
    Simulate,
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
        for (key, value) in rental_env(spec, &dir.join(NOTICE_FILE).to_string_lossy()) {
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
        }
    }

    #[test]
    fn container_gets_only_the_rentals_gpus() {
        let runtime = ContainerRuntime { docker: "docker".into() };
        let command = runtime.command(&spec(), Path::new("/tmp/r7")).unwrap();
        let args: Vec<String> = command.as_std().get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let joined = args.join(" ");
        assert!(joined.contains("--gpus \"device=GPU-a,GPU-b\""), "{joined}");
        assert!(joined.contains("--name cardpool-rental-7"), "{joined}");
        assert!(joined.contains("-e EPOCHS=3"), "{joined}");
        assert!(!joined.contains("0,1,2,3,4,5,6,7"), "renter env must not widen the GPUs: {joined}");
        assert_eq!(args.last().unwrap(), "nvcr.io/nvidia/pytorch:24.05-py3");
    }
}
