//! The process runtime: a renter's command runs inside a bubblewrap sandbox, never beside the
//! agent.
//!
//! Why bubblewrap: it is the sandbox Flatpak ships, works unprivileged, and needs no daemon.
//! Each rental gets new user, pid, ipc, uts, mount, cgroup and network namespaces (its network
//! through slirp4netns: outbound NAT, the host's loopback refused, other rentals unreachable;
//! without slirp4netns it shares the host's network, and the self-test says so); the system
//! directories read-only; one writable workspace (`/workspace`); a private `/tmp`; a private
//! `/proc` that shows only its own processes; a `/dev` with only its own GPUs' device nodes
//! (plus the driver's control nodes); and no capabilities. The agent's state directory and
//! other rentals are simply not there.
//!
//! When the agent runs as root (as a provider's service does), each rental also runs as its
//! own unprivileged uid outside the sandbox ([`rental_uid`]), so even a kernel-level escape
//! lands as a user that owns nothing, and the per-uid process limit bounds a fork bomb.
//! CPU, memory and process limits come from the rental's share of the host (its GPUs' share
//! of cores and RAM) through cgroups, where the agent may create them ([`Cgroups`]).
//!
//! The sandbox is not a child that dies with the agent: an agent restart leaves it running,
//! and the new agent finds it again through the status bubblewrap writes into the rental's
//! directory (`sandbox.json`: the sandbox's pid-namespace init and, later, the exit code).
//! Stopping a sandbox kills its pid namespace's init, which takes every process inside with
//! it, `setsid` and double forks included.

use crate::{
    devices::DeviceMap,
    runtime::{NOTICE_DIR, NOTICE_FILE, Runtime, rental_env},
    shares::HostShares,
};
use cardpool_protocol::AttachSpec;
use nix::sys::signal::Signal;
use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};
use tokio::process::Command;

/// Where bubblewrap writes the sandbox's status (JSON documents, one per event).
pub const STATUS_FILE: &str = "sandbox.json";
/// The rental's writable directory, `/workspace` inside.
pub const WORKSPACE_DIR: &str = "workspace";
/// The rental's environment, as shell exports, in its notice directory.
const ENVIRONMENT_FILE: &str = "environment";
/// Written (through an inherited descriptor) by the sandbox's first command once the sandbox is
/// built: bubblewrap reports its init before it sets up the mounts, and may still fail then.
const STARTED_FILE: &str = "started";
/// Shell that moves itself into the `$n` cgroups whose `cgroup.procs` files come first in its
/// arguments (writing 0 moves the writer, and what it starts stays there), then shifts them.
macro_rules! join_cgroups {
    () => {
        "while [ \"$n\" -gt 0 ]; do echo 0 > \"$1\" || exit 125; shift; n=$((n - 1)); done; "
    };
}
/// Run as root before the sandbox: `$1` the status file, `$2` the started file, `$3`
/// slirp4netns (empty: the sandbox shares the host's network), `$4` nftables and `$5` the
/// rental's firewall rules (both empty: none), `$6` how many cgroup.procs files follow, then
/// those files, then the command. Writing 0 to cgroup.procs moves the writer, and what it
/// starts stays there. With slirp4netns, the sandbox gets its own network: outbound through
/// user-mode NAT, the host's loopback refused, and (with its rules) the host's addresses and
/// LAN refused; rules that cannot be loaded leave it without a network. The helper ends with
/// the sandbox.
const JOIN_AND_EXEC: &str = concat!(
    "status=$1; started=$2; slirp=$3; nft=$4; rules=$5; n=$6; shift 6; ",
    join_cgroups!(),
    "exec 3>\"$status\" 4>\"$started\"; \
    if [ -z \"$slirp\" ]; then exec \"$@\"; fi; \
    \"$@\" & sandbox=$!; exec 3>&- 4>&-; \
    i=0; pid=; while [ -z \"$pid\" ] && [ $i -lt 1000 ]; do \
        pid=$(sed -n 's/.*\"child-pid\": *\\([0-9]*\\).*/\\1/p' \"$status\" | head -n 1); \
        [ -n \"$pid\" ] || sleep 0.01; i=$((i + 1)); done; \
    walled=yes; if [ -n \"$pid\" ] && [ -n \"$nft\" ] && \
        ! /usr/bin/nsenter --net=\"/proc/$pid/ns/net\" \"$nft\" -f \"$rules\" >/dev/null 2>&1; then walled=; \
        [ ! -e \"/proc/$pid\" ] || echo 'cardpool: the rental has no network: its firewall could not be set up' >&2; fi; \
    net=; if [ -n \"$pid\" ] && [ -n \"$walled\" ]; then \"$slirp\" --configure --mtu=65520 --disable-host-loopback \
        --netns-type=path \"/proc/$pid/ns/net\" tap0 >/dev/null 2>&1 & net=$!; fi; \
    wait \"$sandbox\"; code=$?; [ -z \"$net\" ] || { kill \"$net\"; wait \"$net\"; } 2>/dev/null; exit \"$code\""
);
/// Run as root before entering a running sandbox (an SSH channel): `$1` how many cgroup.procs
/// files follow, then those files, then the command.
const JOIN: &str = concat!("n=$1; shift; ", join_cgroups!(), "exec \"$@\"");
/// Inside a sandbox that was entered: the renter's environment, then the command (`$@`).
const ENTERED: &str = ". /cardpool/environment; cd /workspace 2>/dev/null; exec \"$@\"";
/// The sandbox's first command: waits (5 s at most) for its network when it has its own, says
/// it is up, lets go of that descriptor, takes the renter's environment and runs the renter's
/// command (`$0`).
const ENTER: &str = "if [ \"$1\" = private ]; then i=0; \
    while ! grep -q tap0 /proc/net/dev && [ $i -lt 200 ]; do sleep 0.025; i=$((i + 1)); done; fi; \
    echo up >&4; exec 4>&-; . /cardpool/environment && exec /bin/sh -c \"$0\"";
/// The rental's nftables rules (see [`crate::firewall`]).
const FIREWALL_FILE: &str = "firewall.nft";
/// Rentals run as `RENTAL_UID_BASE + rental id` (and the same gid) when the agent is root.
const RENTAL_UID_BASE: u32 = 1_500_000_000;
/// The uid and gid the workload sees inside its sandbox.
const INSIDE_ID: &str = "1000";
/// Driver nodes every CUDA process needs, beside its GPUs' `/dev/nvidiaN` (and a MIG slice's
/// own caps nodes, see [`crate::devices`]).
const CONTROL_NODES: [&str; 4] = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"];

/// The host uid a rental's processes run as, when the agent can switch users.
pub fn rental_uid(rental_id: i64) -> Option<u32> {
    u32::try_from(rental_id).ok().and_then(|id| RENTAL_UID_BASE.checked_add(id)).filter(|uid| *uid < u32::MAX - 1)
}

/// Where cgroups can be created for rentals, if anywhere.
#[derive(Debug, Clone)]
pub enum Cgroups {
    /// The unified hierarchy: one directory with `cpu.max`, `memory.max`, `pids.max`.
    V2(PathBuf),
    /// Legacy hierarchies, one directory per controller.
    V1 { cpu: Option<PathBuf>, memory: Option<PathBuf>, pids: Option<PathBuf> },
    /// None can be created here; the reason is shown by the self-test.
    Unavailable(String),
}

impl Cgroups {
    /// The agent's own cgroups, if it may create children under them.
    pub fn detect() -> Cgroups {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let path_of = |controller: &str| {
            own.lines().find_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
                list.split(',').any(|c| c == controller).then(|| path.trim_start_matches('/').to_owned())
            })
        };
        let writable = |dir: &Path| {
            let probe = dir.join(format!("cardpool-probe-{}", std::process::id()));
            let ok = std::fs::create_dir(&probe).is_ok();
            let _ = std::fs::remove_dir(&probe);
            ok
        };
        let root = Path::new("/sys/fs/cgroup");
        if root.join("cgroup.controllers").exists() {
            let own = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("/").trim_start_matches('/');
            let dir = root.join(own);
            let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            return if !writable(&dir) {
                Cgroups::Unavailable(format!("{} is not writable by the agent", dir.display()))
            } else if !["cpu", "memory", "pids"].iter().all(|c| enabled.split_whitespace().any(|e| e == *c)) {
                Cgroups::Unavailable(format!("cpu, memory and pids are not all delegated to {}", dir.display()))
            } else {
                Cgroups::V2(dir)
            };
        }
        let controller = |name: &str| {
            let dir = root.join(name).join(path_of(name)?);
            writable(&dir).then_some(dir)
        };
        let (cpu, memory, pids) = (controller("cpu"), controller("memory"), controller("pids"));
        if cpu.is_none() && memory.is_none() && pids.is_none() {
            return Cgroups::Unavailable("no cgroup controller is writable by the agent".into());
        }
        Cgroups::V1 { cpu, memory, pids }
    }

    pub fn describe(&self) -> String {
        match self {
            Cgroups::V2(dir) => format!("cgroup v2 limits (cpu, memory, pids) under {}", dir.display()),
            Cgroups::V1 { cpu, memory, pids } => {
                let names: Vec<&str> = [("cpu", cpu), ("memory", memory), ("pids", pids)]
                    .into_iter()
                    .filter_map(|(n, d)| d.as_ref().map(|_| n))
                    .collect();
                format!("cgroup v1 limits ({})", names.join(", "))
            }
            Cgroups::Unavailable(why) => format!("no cgroup limits ({why})"),
        }
    }

    /// Creates the rental's cgroups with its limits; returns the `cgroup.procs` files the
    /// sandbox must join before it starts.
    fn create(&self, rental_id: i64, (cpu_millis, memory, pids): (u64, u64, u64)) -> Result<Vec<PathBuf>, String> {
        let name = format!("cardpool-rental-{rental_id}");
        let mut procs = Vec::new();
        let mut make = |parent: &Path, settings: &[(&str, String)]| -> Result<(), String> {
            let dir = parent.join(&name);
            if let Err(err) = std::fs::create_dir(&dir)
                && err.kind() != std::io::ErrorKind::AlreadyExists
            {
                return Err(format!("cannot create cgroup {}: {err}", dir.display()));
            }
            for (file, value) in settings {
                std::fs::write(dir.join(file), value)
                    .map_err(|e| format!("cannot set {} in {}: {e}", file, dir.display()))?;
            }
            procs.push(dir.join("cgroup.procs"));
            Ok(())
        };
        match self {
            Cgroups::V2(parent) => make(
                parent,
                &[
                    ("cpu.max", format!("{} 100000", cpu_millis * 100)),
                    ("memory.max", memory.to_string()),
                    ("pids.max", pids.to_string()),
                ],
            )?,
            Cgroups::V1 { cpu, memory: mem, pids: pid } => {
                if let Some(parent) = cpu {
                    make(
                        parent,
                        &[("cpu.cfs_period_us", "100000".into()), ("cpu.cfs_quota_us", (cpu_millis * 100).to_string())],
                    )?;
                }
                if let Some(parent) = mem {
                    make(parent, &[("memory.limit_in_bytes", memory.to_string())])?;
                }
                if let Some(parent) = pid {
                    make(parent, &[("pids.max", pids.to_string())])?;
                }
            }
            Cgroups::Unavailable(_) => {}
        }
        Ok(procs)
    }

    /// The rental's cgroup directories (one per hierarchy).
    fn rental_dirs(&self, rental_id: i64) -> Vec<PathBuf> {
        let name = format!("cardpool-rental-{rental_id}");
        let parents: Vec<&PathBuf> = match self {
            Cgroups::V2(parent) => vec![parent],
            Cgroups::V1 { cpu, memory, pids } => [cpu, memory, pids].into_iter().flatten().collect(),
            Cgroups::Unavailable(_) => vec![],
        };
        parents.into_iter().map(|p| p.join(&name)).collect()
    }

    /// The `cgroup.procs` files of the rental's cgroups, where they exist.
    fn procs(&self, rental_id: i64) -> Vec<PathBuf> {
        self.rental_dirs(rental_id).into_iter().map(|d| d.join("cgroup.procs")).filter(|p| p.exists()).collect()
    }

    /// Removes the rental's (now empty) cgroups.
    fn remove(&self, rental_id: i64) {
        for dir in self.rental_dirs(rental_id) {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// What bubblewrap reported about a running (or finished) sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SandboxStatus {
    /// The sandbox's pid-namespace init, as the host sees it.
    pub init_pid: Option<i32>,
    pub pid_namespace: Option<u64>,
    /// Set once the workload ended.
    pub exit_code: Option<i32>,
}

impl SandboxStatus {
    pub fn read(rental_dir: &Path) -> SandboxStatus {
        let text = std::fs::read_to_string(rental_dir.join(STATUS_FILE)).unwrap_or_default();
        let mut status = SandboxStatus::default();
        for doc in serde_json::Deserializer::from_str(&text).into_iter::<serde_json::Value>().map_while(Result::ok) {
            if let Some(pid) = doc.get("child-pid").and_then(serde_json::Value::as_i64) {
                status.init_pid = i32::try_from(pid).ok();
            }
            if let Some(ns) = doc.get("pid-namespace").and_then(serde_json::Value::as_u64) {
                status.pid_namespace = Some(ns);
            }
            if let Some(code) = doc.get("exit-code").and_then(serde_json::Value::as_i64) {
                status.exit_code = i32::try_from(code).ok();
            }
        }
        status
    }

    /// Whether the sandbox's init still runs: same pid, same pid namespace (a reused pid is
    /// somebody else's process and is never signalled).
    pub fn alive(&self) -> bool {
        match (self.init_pid, self.pid_namespace) {
            (Some(pid), Some(ns)) => pid_namespace_of(pid) == Some(ns),
            _ => false,
        }
    }

    /// Host pids of every process inside the sandbox except its init.
    fn members(&self) -> Vec<i32> {
        let (Some(init), Some(ns)) = (self.init_pid, self.pid_namespace) else { return vec![] };
        host_processes().filter(|pid| *pid != init && pid_namespace_of(*pid) == Some(ns)).collect()
    }
}

/// Every process on the host, by pid: a snapshot of `/proc`.
pub fn host_processes() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc").into_iter().flatten().filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
}

/// `pid`'s arguments (empty once it is gone).
pub fn arguments(pid: i32) -> Vec<Vec<u8>> {
    let line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    line.split(|b| *b == 0).filter(|a| !a.is_empty()).map(<[u8]>::to_vec).collect()
}

/// The inode of `pid`'s pid namespace (for processes inside a sandbox, the sandbox's).
fn pid_namespace_of(pid: i32) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    let text = link.to_str()?;
    text.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// Runs renters' commands in bubblewrap sandboxes.
#[derive(Debug, Clone)]
pub struct SandboxRuntime {
    bwrap: PathBuf,
    /// Where the host's device nodes are (`/dev`; tests use stand-in nodes elsewhere).
    dev_root: PathBuf,
    /// Where the driver describes its GPUs and capabilities, and which GPU and slice is where
    /// (see [`crate::devices`]).
    driver: PathBuf,
    devices: DeviceMap,
    /// Whether each rental runs as its own host uid (the agent is root).
    own_uids: bool,
    cgroups: Cgroups,
    shares: HostShares,
    /// slirp4netns, which gives each sandbox a network of its own; without it sandboxes share
    /// the host's.
    slirp: Option<PathBuf>,
    /// nftables, which keeps that network off the host's addresses and LAN (root only).
    nft: Option<PathBuf>,
}

impl SandboxRuntime {
    /// Bubblewrap, if installed and able to build a sandbox here; else why not.
    pub fn detect(shares: HostShares) -> Result<SandboxRuntime, String> {
        let bwrap = ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or("bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")?;
        let probe = std::process::Command::new(&bwrap)
            .args(["--unshare-all", "--unshare-user", "--disable-userns", "--ro-bind", "/", "/", "--", "/bin/true"])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", bwrap.display()))?;
        if !probe.status.success() {
            return Err(format!(
                "bubblewrap cannot create namespaces here: {} (are unprivileged user namespaces disabled?)",
                String::from_utf8_lossy(&probe.stderr).trim()
            ));
        }
        let own_uids = nix::unistd::geteuid().is_root();
        let slirp =
            ["/usr/bin/slirp4netns", "/usr/local/bin/slirp4netns"].into_iter().map(PathBuf::from).find(|p| p.exists());
        Ok(SandboxRuntime {
            bwrap,
            dev_root: PathBuf::from("/dev"),
            driver: PathBuf::from(crate::devices::DRIVER_ROOT),
            devices: DeviceMap::default(),
            own_uids,
            cgroups: Cgroups::detect(),
            shares,
            slirp,
            nft: crate::firewall::detect().filter(|_| own_uids),
        })
    }

    /// Takes device nodes from `dev_root` instead of `/dev`.
    pub fn with_dev_root(mut self, dev_root: PathBuf) -> SandboxRuntime {
        self.dev_root = dev_root;
        self
    }

    /// Gives GPUs and MIG slices their nodes by `devices` and what the driver says in `driver`
    /// (`/proc/driver/nvidia`; tests lay out a stand-in).
    pub fn with_devices(mut self, devices: DeviceMap, driver: PathBuf) -> SandboxRuntime {
        self.devices = devices;
        self.driver = driver;
        self
    }

    /// Uses these cgroups instead of the detected ones.
    pub fn with_cgroups(mut self, cgroups: Cgroups) -> SandboxRuntime {
        self.cgroups = cgroups;
        self
    }

    /// One line for the self-test: what isolates rentals on this host.
    pub fn describe(&self) -> String {
        format!(
            "bubblewrap ({}): own namespaces, read-only system, GPUs by device node; {}; {}; {}",
            self.bwrap.display(),
            if self.slirp.is_some() && self.nft.is_some() {
                "a network of its own per rental (slirp4netns; the host's loopback, addresses and LAN refused by nftables)"
            } else if self.slirp.is_some() {
                "a network of its own per rental (slirp4netns; the host's loopback refused, but not its other addresses and LAN: run the agent as root with nftables)"
            } else {
                "rentals share the host's network (install slirp4netns for one of their own)"
            },
            if self.own_uids {
                "each rental runs as its own uid".to_owned()
            } else {
                "rentals share the agent's uid (run the agent as root for a uid per rental)".to_owned()
            },
            self.cgroups.describe()
        )
    }

    fn mounts(&self, spec: &AttachSpec, workspace: &Path, notices: &Path) -> Result<Vec<String>, String> {
        let mut args: Vec<String> = Vec::new();
        let mut push = |items: &[&str]| args.extend(items.iter().map(|s| (*s).to_owned()));
        push(&["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]);
        for dir in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
            let host = Path::new("/").join(dir);
            match std::fs::read_link(&host) {
                Ok(target) => push(&["--symlink", &target.to_string_lossy(), &host.to_string_lossy()]),
                Err(_) if host.is_dir() => push(&["--ro-bind", &host.to_string_lossy(), &host.to_string_lossy()]),
                Err(_) => {}
            }
        }
        push(&["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run"]);
        let gpus = crate::devices::gpu_nodes(&self.devices, &self.driver, &spec.gpu_indexes);
        let devices = gpus.into_iter().chain(CONTROL_NODES.map(String::from));
        for node in devices {
            let host = self.dev_root.join(&node);
            push(&["--dev-bind-try", &host.to_string_lossy(), &format!("/dev/{node}")]);
        }
        for node in crate::devices::caps_nodes(&self.devices, &self.driver, &self.dev_root, &spec.gpu_uuids)? {
            push(&["--dev-bind", &self.dev_root.join(&node).to_string_lossy(), &format!("/dev/{node}")]);
        }
        push(&["--bind", &workspace.to_string_lossy(), "/workspace"]);
        push(&["--ro-bind", &notices.to_string_lossy(), &format!("/{NOTICE_DIR}")]);
        Ok(args)
    }
}

/// Where rentals' directories go: `wanted`, unless a rental's own uid could not pass through
/// its ancestors to its workspace (a state directory under `/root`, say), in which case a
/// directory of the agent's own under `/var/lib/cardpool-sandboxes`, named after `wanted` so
/// the agent finds it again after a restart. Only an agent running as root gives rentals their
/// own uids; any other keeps `wanted`.
pub fn reachable_rentals_dir(wanted: &Path) -> PathBuf {
    let wanted = std::path::absolute(wanted).unwrap_or_else(|_| wanted.to_path_buf());
    if !nix::unistd::geteuid().is_root() {
        return wanted;
    }
    // The rentals directory and the state directory above it are made passable by the agent.
    let passable = |dir: &Path| std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 != 0);
    let above = wanted.parent().and_then(Path::parent);
    if above.is_none_or(|a| a.ancestors().all(passable)) {
        return wanted;
    }
    use sha2::Digest;
    let digest = hex::encode(sha2::Sha256::digest(wanted.as_os_str().as_encoded_bytes()));
    Path::new(SANDBOXES_ROOT).join(&digest[..16]).join("rentals")
}

/// See [`reachable_rentals_dir`].
const SANDBOXES_ROOT: &str = "/var/lib/cardpool-sandboxes";

/// Makes `dir` and its parent passable (not listable) by other users, so a rental's own uid
/// reaches its workspace; nothing else there is readable to it (the credential is 0600).
fn make_passable(dir: &Path) -> Result<(), String> {
    for path in [Some(dir), dir.parent()].into_iter().flatten() {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o011 != 0o011 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode | 0o011))
                .map_err(|e| format!("cannot make {} passable: {e}", path.display()))?;
        }
    }
    Ok(())
}

impl Runtime for SandboxRuntime {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    fn command(&self, spec: &AttachSpec, dir: &Path) -> Result<Command, String> {
        let script = spec.command.as_deref().ok_or("this host runs commands, and the rental has no command")?;
        let uid = if self.own_uids {
            Some(rental_uid(spec.rental_id).ok_or("the rental id is out of the range of rental uids")?)
        } else {
            None
        };
        let workspace = dir.join(WORKSPACE_DIR);
        let notices = dir.join(NOTICE_DIR);
        let mounts = self.mounts(spec, &workspace, &notices)?;
        for sub in [&workspace, &notices] {
            std::fs::create_dir_all(sub).map_err(|e| format!("cannot create {}: {e}", sub.display()))?;
        }
        std::fs::set_permissions(&workspace, std::fs::Permissions::from_mode(0o700)).map_err(|e| e.to_string())?;
        if let Some(uid) = uid {
            make_passable(dir)?;
            if let Some(rentals) = dir.parent() {
                make_passable(rentals)?;
            }
            std::os::unix::fs::chown(&workspace, Some(uid), Some(uid))
                .map_err(|e| format!("cannot give {} to the rental: {e}", workspace.display()))?;
        }
        // The renter's environment reaches the sandbox through a file its shell reads, never
        // through the environment of the tools that run as root before the sandbox exists.
        let mut environment = String::new();
        for (key, value) in rental_env(spec, &format!("/{NOTICE_DIR}/{NOTICE_FILE}")) {
            if !key.is_empty()
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !key.starts_with(|c: char| c.is_ascii_digit())
            {
                environment.push_str(&format!("export {key}='{}'\n", value.replace('\'', "'\\''")));
            }
        }
        // CUDA and NVML number GPUs differently; UUIDs name the same devices for both.
        let uuids = spec.gpu_uuids.join(",");
        environment.push_str(&format!("export CUDA_VISIBLE_DEVICES='{uuids}' NVIDIA_VISIBLE_DEVICES='{uuids}'\n"));
        std::fs::write(notices.join(ENVIRONMENT_FILE), environment)
            .map_err(|e| format!("cannot write the environment: {e}"))?;

        let (cpu_millis, memory, pids) = self.shares.for_sevenths(u64::from(spec.sevenths()));
        let cgroup_procs = self.cgroups.create(spec.rental_id, (cpu_millis, memory, pids))?;

        // Root's part, before the sandbox: join the rental's cgroups, open the status file,
        // cap the rental uid's processes, become that uid; then bubblewrap.
        let mut command = Command::new("/bin/sh");
        command.arg("-c").arg(JOIN_AND_EXEC).arg("cardpool-sandbox");
        command.arg(dir.join(STATUS_FILE)).arg(dir.join(STARTED_FILE));
        command.arg(self.slirp.as_deref().unwrap_or(Path::new("")));
        match self.nft.as_ref().filter(|_| self.slirp.is_some()) {
            Some(nft) => {
                command.arg(nft).arg(crate::firewall::write(dir, FIREWALL_FILE, &crate::rendezvous::open(spec))?)
            }
            None => command.args(["", ""]),
        };
        command.arg(cgroup_procs.len().to_string()).args(&cgroup_procs);
        if let Some(uid) = uid {
            command.args(["/usr/bin/prlimit", &format!("--nproc={pids}:{pids}"), "--"]);
            command.args([
                "/usr/bin/setpriv",
                &format!("--reuid={uid}"),
                &format!("--regid={uid}"),
                "--clear-groups",
                "--",
            ]);
        }
        command.arg(&self.bwrap);
        command.args(["--unshare-all", "--unshare-user", "--disable-userns", "--new-session"]);
        if self.slirp.is_none() {
            command.arg("--share-net");
        }
        command.args(["--cap-drop", "ALL", "--uid", INSIDE_ID, "--gid", INSIDE_ID]);
        command.arg("--hostname").arg(format!("rental-{}", spec.rental_id));
        command.args(mounts);
        command.args(["--chdir", "/workspace", "--json-status-fd", "3"]);
        command.args(["--", "/bin/sh", "-c", ENTER, script, if self.slirp.is_some() { "private" } else { "shared" }]);
        command.env_clear();
        command.env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        command.env("HOME", "/workspace");
        command.env("LANG", "C.UTF-8");
        command.process_group(0);
        Ok(command)
    }

    fn signal(&self, _rental_id: i64, dir: &Path, pgid: Option<i32>, signal: Signal) {
        let status = SandboxStatus::read(dir);
        if !status.alive() {
            // Not up yet (or gone): what the agent started is still one process group.
            if let Some(pgid) = pgid.filter(|p| *p > 0) {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), signal);
            }
            return;
        }
        if signal == Signal::SIGKILL {
            // The namespace's init going takes every process inside with it.
            if let Some(init) = status.init_pid {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(init), Signal::SIGKILL);
            }
            return;
        }
        for pid in status.members() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        }
    }

    fn started(&self, dir: &Path) -> bool {
        std::fs::metadata(dir.join(STARTED_FILE)).is_ok_and(|m| m.len() > 0)
    }

    fn survives_agent(&self) -> bool {
        true
    }

    fn adopt(&self, dir: &Path) -> bool {
        SandboxStatus::read(dir).alive()
    }

    fn finished(&self, dir: &Path) -> Option<Option<i32>> {
        let status = SandboxStatus::read(dir);
        (!status.alive()).then_some(status.exit_code)
    }

    fn enter(&self, rental_id: i64, dir: &Path, gpus: usize, argv: &[String]) -> Result<Vec<String>, String> {
        // The sandbox's namespaces belong to an outer user namespace of which only the
        // rental's own uid is the owner, and its processes run in a nested one (that is what
        // keeps them from making user namespaces of their own). So root joins the namespaces
        // first, then becomes the rental's uid without privileges, and only then joins the
        // nested user namespace: an agent that is not root cannot do the first step.
        if !self.own_uids {
            return Err("shells inside sandboxes need the agent to run as root (as its service does)".into());
        }
        let status = SandboxStatus::read(dir);
        let init = status.init_pid.filter(|_| status.alive()).ok_or("the rental's sandbox is not running")?;
        let uid = rental_uid(rental_id).ok_or("the rental id is out of the range of rental uids")?;
        let (_, _, pids) = self.shares.for_gpus(gpus);
        let procs = self.cgroups.procs(rental_id);
        let mut command: Vec<String> = vec!["/bin/sh".into(), "-c".into(), JOIN.into(), "cardpool-enter".into()];
        command.push(procs.len().to_string());
        command.extend(procs.iter().map(|p| p.to_string_lossy().into_owned()));
        command.extend(["/usr/bin/prlimit".into(), format!("--nproc={pids}:{pids}"), "--".into()]);
        command.extend(["/usr/bin/nsenter".into(), format!("--target={init}")]);
        for namespace in ["--mount", "--pid", "--net", "--ipc", "--uts", "--cgroup", "--root", "--wd", "--"] {
            command.push(namespace.into());
        }
        command.extend(["/usr/bin/setpriv".into(), format!("--reuid={uid}"), format!("--regid={uid}")]);
        command.extend(["--clear-groups".into(), "--no-new-privs".into(), "--".into()]);
        // Inside the sandbox's pid namespace now: its init is pid 1.
        command.extend([
            "/usr/bin/nsenter".into(),
            "--target=1".into(),
            "--user".into(),
            "--preserve-credentials".into(),
        ]);
        command.extend(["--".into(), "/bin/sh".into(), "-c".into(), ENTERED.into(), "cardpool-shell".into()]);
        command.extend(argv.iter().cloned());
        Ok(command)
    }

    fn network(&self, dir: &Path) -> Result<PathBuf, String> {
        let status = SandboxStatus::read(dir);
        let init = status.init_pid.filter(|_| status.alive()).ok_or("the rental's sandbox is not running")?;
        let netns = PathBuf::from(format!("/proc/{init}/ns/net"));
        let inode = |path: &Path| std::fs::metadata(path).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).ok();
        if inode(&netns).is_none() || inode(&netns) == inode(Path::new("/proc/self/ns/net")) {
            // Without a network of its own, "localhost" would be the provider's.
            return Err("this host's sandboxes share its network (no slirp4netns), so ports are not forwarded".into());
        }
        Ok(netns)
    }

    fn cleanup(&self, rental_id: i64, dir: &Path) -> Option<Command> {
        // The network helper ends with its sandbox; should its parent have been killed
        // first, it is ended here (it names the sandbox's init in its arguments).
        if let Some(init) = SandboxStatus::read(dir).init_pid {
            let netns = format!("/proc/{init}/ns/net");
            for pid in host_processes() {
                let args = arguments(pid);
                let slirp = args.first().is_some_and(|a| a.ends_with(b"slirp4netns"));
                if slirp && args.iter().any(|a| a == netns.as_bytes()) {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
        }
        self.cgroups.remove(rental_id);
        None
    }
}
