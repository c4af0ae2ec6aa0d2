//! Hostile workloads against the real sandbox (bubblewrap, installed by `scripts/bootstrap.sh`):
//! each tries to reach what is not its own, and the test shows every attempt fail. Run as root
//! (as CI does and as a provider's agent service does) it also checks that each rental runs as
//! its own host uid and that a fork bomb hits the rental's process cap.

use cardpool_agent::{
    runtime::Runtime,
    sandbox::{SandboxRuntime, arguments, host_processes, rental_uid},
    shares::HostShares,
    state::{self, AgentState},
    supervisor::{StatusUpdate, Supervisor},
};
use cardpool_protocol::{AttachSpec, WorkloadStatus};
use std::{path::Path, sync::Arc, time::Duration};
use tokio::sync::mpsc::UnboundedReceiver;

/// Processes a rental may have per GPU in this test (the fork bomb's ceiling).
const PIDS_PER_GPU: u64 = 48;

fn spec(rental_id: i64, gpu: u32, command: &str, env: &[&str]) -> AttachSpec {
    AttachSpec {
        rental_id,
        gpu_indexes: vec![gpu],
        gpu_uuids: vec![format!("GPU-stand-in-{gpu}")],
        command: Some(command.into()),
        image: None,
        env: env.iter().map(|e| (*e).to_owned()).collect(),
        ssh_public_key: None,
        share_sevenths: None,
        gang: None,
    }
}

async fn until(
    rx: &mut UnboundedReceiver<StatusUpdate>,
    rental_id: i64,
    wanted: fn(&WorkloadStatus) -> bool,
) -> WorkloadStatus {
    loop {
        let (id, status) =
            tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.expect("status in time").expect("open");
        if id == rental_id && wanted(&status) {
            return status;
        }
    }
}

async fn log_contains(dir: &Path, rental_id: i64, needle: &str) -> String {
    let path = dir.join(rental_id.to_string()).join("workload.log");
    for _ in 0..200 {
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        if log.contains(needle) {
            return log;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} never showed {needle:?}: {}", path.display(), std::fs::read_to_string(&path).unwrap_or_default());
}

/// Host pids in the rental's sandbox (its pid namespace) whose command line is `marker`.
fn in_sandbox(rentals: &Path, rental_id: i64, marker: &str) -> Vec<i32> {
    let ns = cardpool_agent::sandbox::SandboxStatus::read(&rentals.join(rental_id.to_string())).pid_namespace;
    let ns = ns.map(|n| format!("pid:[{n}]"));
    processes_with(marker)
        .into_iter()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok().map(|l| l.to_string_lossy().into_owned()) == ns
        })
        .collect()
}

/// Host pids whose command line is exactly `marker` (words separated by spaces).
fn processes_with(marker: &str) -> Vec<i32> {
    host_processes().filter(|pid| arguments(*pid).join(&b' ') == marker.as_bytes()).collect()
}

/// The cpu quota, memory and pids limits of `pid`'s cgroups (v1 or v2), as the kernel holds
/// them; empty where the process is in no rental cgroup.
fn cgroup_limits(pid: i32) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let mut limits = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        if !path.contains("cardpool-rental-") {
            continue;
        }
        let read = |dir: &str, file: &str| std::fs::read_to_string(format!("/sys/fs/cgroup/{dir}{path}/{file}")).ok();
        let mut push = |name: &str, value: Option<String>| {
            if let Some(value) = value {
                limits.push((name.to_owned(), value.trim().to_owned()));
            }
        };
        if controllers.is_empty() {
            push("memory", read("", "memory.max"));
            push("pids", read("", "pids.max"));
            push("cpu", read("", "cpu.max"));
        } else {
            let dir = controllers.to_owned();
            for controller in controllers.split(',') {
                match controller {
                    "memory" => push("memory", read(&dir, "memory.limit_in_bytes")),
                    "pids" => push("pids", read(&dir, "pids.max")),
                    "cpu" => push("cpu", read(&dir, "cpu.cfs_quota_us")),
                    _ => {}
                }
            }
        }
    }
    limits
}

fn host_uid(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}

#[tokio::test]
async fn hostile_workloads_reach_nothing_that_is_not_theirs() {
    let root = std::env::temp_dir().join(format!("cardpool-sandbox-it-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    // The agent's state directory with its credential, and stand-in GPU device nodes.
    let state_dir = root.join("state");
    let credential = state::save(
        &state_dir,
        &AgentState { server: "http://x".into(), host_id: 1, credential: "cph_top_secret".into() },
    )
    .unwrap();
    let dev = root.join("dev");
    std::fs::create_dir_all(&dev).unwrap();
    for node in ["nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl"] {
        std::fs::write(dev.join(node), format!("stand-in {node}\n")).unwrap();
    }
    let rentals = state_dir.join("rentals");
    let runtime =
        SandboxRuntime::detect(HostShares { pids_per_gpu: PIDS_PER_GPU, ..HostShares::new(2000, 4 << 30, 4) })
            .unwrap_or_else(|why| panic!("{why}; run scripts/bootstrap.sh"))
            .with_dev_root(dev.clone());
    eprintln!("{}", runtime.describe());
    let process: Arc<dyn Runtime> = Arc::new(runtime);
    let (supervisor, mut rx) = Supervisor::new(rentals.clone(), Some(process), None);

    // The victim: another renter with a secret in its workspace and its environment.
    supervisor.attach(spec(
        21,
        2,
        "echo victim-data > secret; echo ready; exec sleep 3121",
        &["TOKEN=victim-env-secret"],
    ));
    until(&mut rx, 21, |s| *s == WorkloadStatus::Ready).await;
    log_contains(&rentals, 21, "ready").await;

    // A service on the host's loopback (a database in trust mode, say).
    let service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = service.local_addr().unwrap().port();
    // And one on every address of the host (a provider's SSH, a database on its LAN address).
    let exposed = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let exposed_port = exposed.local_addr().unwrap().port();
    let host_address = cardpool_agent::firewall::host_networks()
        .into_iter()
        .find(|(ip, _)| ip.is_ipv4())
        .map(|(ip, _)| ip.to_string())
        .expect("the host has a network address");
    let credential_path = credential.display().to_string();
    let victim = rentals.join("21/workspace/secret").display().to_string();
    let hostile = format!(
        r#"try() {{ name=$1; shift; if "$@" >/dev/null 2>&1; then echo "LEAK: $name"; else echo "blocked: $name"; fi; }}
try credential cat {credential_path}
try credential-search sh -c 'find / -path /proc -prune -o -name host.json -print 2>/dev/null | grep -q .'
try other-workspace cat {victim}
try other-environment sh -c 'cat /proc/*/environ 2>/dev/null | tr "\0" "\n" | grep -q victim-env-secret'
try other-processes sh -c 'ls /proc | grep -E "^[0-9]+$" | wc -l | grep -qvE "^[1-9]$"'
try widen-gpus env -u CUDA_VISIBLE_DEVICES cat /dev/nvidia2
try other-gpu cat /dev/nvidia0
try write-system touch /usr/bin/planted
try write-etc touch /etc/planted
try started-descriptor sh -c 'echo forged >&4'
try host-loopback timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'
try host-loopback-via-gateway timeout 3 bash -c 'exec 3<>/dev/tcp/10.0.2.2/{port}'
try host-address timeout 3 bash -c 'exec 3<>/dev/tcp/{host_address}/{exposed_port}'
echo "own-network: $(grep -c tap0 /proc/net/dev)"
try redirect-notice ln -sf /workspace/owned "$CARDPOOL_PREEMPT_NOTICE_FILE"
echo "own-gpu: $(cat /dev/nvidia1)"
echo "visible: $CUDA_VISIBLE_DEVICES"
echo "devices: $(ls /dev | grep nvidia | tr '\n' ' ')"
echo "inside-uid: $(id -u)"
setsid sh -c 'exec sleep 3131' >/dev/null 2>&1 &
( sh -c 'sleep 3132 &' & ) 
echo probed
exec sleep 3133
"#
    );
    supervisor.attach(spec(22, 1, &hostile, &[]));
    until(&mut rx, 22, |s| *s == WorkloadStatus::Ready).await;
    let log = log_contains(&rentals, 22, "probed").await;
    eprintln!("{log}");
    for attempt in [
        "credential",
        "credential-search",
        "other-workspace",
        "other-environment",
        "other-processes",
        "widen-gpus",
        "other-gpu",
        "write-system",
        "write-etc",
        "started-descriptor",
        "host-loopback",
        "host-loopback-via-gateway",
        "host-address",
        "redirect-notice",
    ] {
        assert!(log.contains(&format!("blocked: {attempt}\n")), "{attempt} not blocked:\n{log}");
    }
    assert!(!log.contains("LEAK"), "{log}");
    assert!(log.contains("own-gpu: stand-in nvidia1"), "{log}");
    assert!(log.contains("visible: GPU-stand-in-1\n"), "{log}");
    assert!(log.contains("devices: nvidia1 nvidiactl \n"), "{log}");
    assert!(log.contains("inside-uid: 1000"), "{log}");
    assert!(log.contains("own-network: 1"), "a network of its own (slirp4netns: scripts/bootstrap.sh): {log}");
    drop(service);
    drop(exposed);
    let escapees = ["sleep 3131", "sleep 3132", "sleep 3133"];
    for marker in escapees {
        // They are being started as the log says "probed".
        let mut pids = in_sandbox(&rentals, 22, marker);
        for _ in 0..100 {
            if !pids.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            pids = in_sandbox(&rentals, 22, marker);
        }
        assert_eq!(pids.len(), 1, "{marker}: {pids:?}");
        if let Some(uid) = rental_uid(22).filter(|_| nix::unistd::geteuid().is_root()) {
            assert_eq!(host_uid(pids[0]), Some(uid), "{marker} runs as the rental's own uid");
        }
    }

    let init = cardpool_agent::sandbox::SandboxStatus::read(&rentals.join("22")).init_pid.unwrap();
    let network = format!("/proc/{init}/ns/net");
    let helpers = || host_processes().filter(|pid| arguments(*pid).iter().any(|a| a == network.as_bytes())).count();
    assert_eq!(helpers(), 1, "one network helper per sandbox");

    // Its share of the host, enforced by its cgroups where the agent can create them: one GPU
    // of four is a quarter of 2 cores and 4 GiB, and its process cap.
    let member = in_sandbox(&rentals, 22, "sleep 3133")[0];
    let limits = cgroup_limits(member);
    eprintln!("rental 22's cgroup limits: {limits:?}");
    if !limits.is_empty() {
        for (name, wanted) in [("memory", "1073741824"), ("pids", "48"), ("cpu", "50000")] {
            if let Some(value) = limits.iter().find(|(n, _)| n == name).map(|(_, v)| v) {
                assert!(value.starts_with(wanted), "{name}: {value}, wanted {wanted}");
            }
        }
    }

    // A preemption notice lands in the agent's directory, not where a link would send it.
    supervisor.preempt(22, Duration::from_secs(1)).await;
    until(&mut rx, 22, |s| matches!(s, WorkloadStatus::Exited { .. })).await;
    let notice = rentals.join("22/cardpool/preempt-notice");
    assert!(std::fs::symlink_metadata(&notice).unwrap().file_type().is_file());
    assert!(std::fs::read_to_string(&notice).unwrap().contains("\"reason\":\"preempted\""));
    assert!(!rentals.join("22/workspace/owned").exists());
    assert_eq!(helpers(), 0, "the network helper ended with its sandbox");
    // Stopped means gone, anywhere on the host: the setsid child and the double fork too.
    for marker in escapees {
        assert!(processes_with(marker).is_empty(), "{marker} outlived the rental");
    }
    // The victim never noticed.
    assert_eq!(supervisor.running(), vec![21]);

    // A fork bomb hits the rental's process cap and takes nothing else down.
    let capped = nix::unistd::geteuid().is_root();
    if capped {
        supervisor.attach(spec(23, 3, "bomb() { bomb | bomb & }; bomb; sleep 3141", &[]));
        until(&mut rx, 23, |s| *s == WorkloadStatus::Ready).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let uid = rental_uid(23).unwrap();
        let count = host_processes().filter(|pid| host_uid(*pid) == Some(uid)).count() as u64;
        eprintln!("fork bomb: {count} processes (cap {PIDS_PER_GPU})");
        assert!(count > 0 && count <= PIDS_PER_GPU, "{count} processes");
        supervisor.detach(23);
        until(&mut rx, 23, |s| matches!(s, WorkloadStatus::Exited { .. })).await;
        let left = host_processes().filter(|pid| host_uid(*pid) == Some(uid)).count();
        assert_eq!(left, 0, "the bomb's processes outlived the rental");
    } else {
        eprintln!("not root: no per-rental uid, so the fork-bomb cap is the cgroup's (not checked here)");
    }
    supervisor.detach(21);
    until(&mut rx, 21, |s| matches!(s, WorkloadStatus::Exited { .. })).await;
    assert!(in_sandbox(&rentals, 21, "sleep 3121").is_empty());
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn a_new_agent_adopts_the_workloads_of_the_last_one() {
    let root = std::env::temp_dir().join(format!("cardpool-sandbox-adopt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let runtime = || -> Option<Arc<dyn Runtime>> {
        let runtime = SandboxRuntime::detect(HostShares::new(2000, 4 << 30, 4))
            .unwrap_or_else(|why| panic!("{why}; run scripts/bootstrap.sh"));
        Some(Arc::new(runtime))
    };
    // The first agent starts a workload, then goes away (a crash or an upgrade).
    let (first, mut rx) = Supervisor::new(root.clone(), runtime(), None);
    first.attach(spec(31, 0, "trap 'echo got-term; exit 7' TERM; echo up; while :; do sleep 1; done", &[]));
    until(&mut rx, 31, |s| *s == WorkloadStatus::Ready).await;
    log_contains(&root, 31, "up").await;
    drop((first, rx));

    // The next agent finds it running, reports it ready and can still stop it.
    let (second, mut rx) = Supervisor::new(root.clone(), runtime(), None);
    assert_eq!(second.adopt(), vec![31]);
    assert_eq!(until(&mut rx, 31, |_| true).await, WorkloadStatus::Ready);
    assert_eq!(second.running(), vec![31]);
    assert_eq!(second.gpu_use()[0].gpu_indexes, vec![0]);
    // Attaching again (the server repeats its commands) does not start a second copy.
    second.attach(spec(31, 0, "echo second-copy", &[]));
    assert_eq!(until(&mut rx, 31, |_| true).await, WorkloadStatus::Ready);
    second.detach(31);
    assert_eq!(until(&mut rx, 31, |_| true).await, WorkloadStatus::Exited { code: Some(7) });
    let log = std::fs::read_to_string(root.join("31/workload.log")).unwrap();
    assert!(log.contains("got-term") && !log.contains("second-copy"), "{log}");
    // A third agent has nothing to adopt.
    let (third, _rx) = Supervisor::new(root.clone(), runtime(), None);
    assert!(third.adopt().is_empty());
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn a_sandbox_that_cannot_start_fails_with_its_reason_and_is_never_ready() {
    if !nix::unistd::geteuid().is_root() {
        return eprintln!("needs root: the unreadable device directory is what stops the sandbox here");
    }
    let root = std::env::temp_dir().join(format!("cardpool-sandbox-fail-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    // Device nodes the rental's uid cannot reach: bubblewrap refuses to build the sandbox.
    let dev = root.join("private/dev");
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::write(dev.join("nvidia0"), "x").unwrap();
    std::fs::set_permissions(root.join("private"), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let runtime = SandboxRuntime::detect(HostShares::new(2000, 4 << 30, 4)).unwrap().with_dev_root(dev);
    let (supervisor, mut rx) = Supervisor::new(root.join("rentals"), Some(Arc::new(runtime)), None);
    supervisor.attach(spec(41, 0, "echo never", &[]));
    assert_eq!(until(&mut rx, 41, |_| true).await, WorkloadStatus::Provisioning);
    match until(&mut rx, 41, |_| true).await {
        WorkloadStatus::Failed { reason } => {
            assert!(reason.contains("did not start") && reason.contains("Permission denied"), "{reason}")
        }
        other => panic!("expected a failure before ready, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn a_mig_slice_sees_its_own_caps_nodes_and_no_other_slice() {
    let root = std::env::temp_dir().join(format!("cardpool-sandbox-mig-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    // Stand-in device nodes and the driver's capability files, laid out as the driver does:
    // two 3g.40gb slices of GPU 1, and the config and monitor capabilities.
    let (dev, driver) = (root.join("dev"), root.join("driver"));
    std::fs::create_dir_all(dev.join("nvidia-caps")).unwrap();
    for node in ["nvidia0", "nvidia1", "nvidiactl"] {
        std::fs::write(dev.join(node), format!("stand-in {node}\n")).unwrap();
    }
    for (path, minor) in [
        ("mig/config", 1),
        ("mig/monitor", 2),
        ("gpu1/mig/gi1/access", 129),
        ("gpu1/mig/gi1/ci0/access", 130),
        ("gpu1/mig/gi2/access", 138),
        ("gpu1/mig/gi2/ci0/access", 139),
    ] {
        let file = driver.join("capabilities").join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n")).unwrap();
        std::fs::write(dev.join(format!("nvidia-caps/nvidia-cap{minor}")), format!("cap {minor}\n")).unwrap();
    }
    let source =
        cardpool_agent::gpu::simulated::SimulatedSource::new("2xH100-80GB:mig=3g.40gb*2", "h", vec![]).unwrap();
    let gpus = cardpool_agent::gpu::GpuSource::gpus(&source).unwrap();
    let devices = cardpool_agent::devices::DeviceMap::default();
    devices.learn(&gpus);
    let (mine, other) = (gpus[1].mig_instances[0].uuid.clone(), gpus[1].mig_instances[1].uuid.clone());
    let runtime = SandboxRuntime::detect(HostShares::new(2000, 4 << 30, 4))
        .unwrap_or_else(|why| panic!("{why}; run scripts/bootstrap.sh"))
        .with_dev_root(dev.clone())
        .with_devices(devices.clone(), driver.clone());
    let rentals = root.join("rentals");
    let (supervisor, mut rx) = Supervisor::new(rentals.clone(), Some(Arc::new(runtime)), None);
    let slice = |rental_id: i64, uuid: &str, command: &str| AttachSpec {
        gpu_uuids: vec![uuid.to_owned()],
        share_sevenths: Some(3),
        ..spec(rental_id, 1, command, &[])
    };
    let probe = r#"try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "LEAK: $name"; else echo "blocked: $name"; fi; }
try other-slice-gi cat /dev/nvidia-caps/nvidia-cap138
try other-slice-ci cat /dev/nvidia-caps/nvidia-cap139
try mig-config cat /dev/nvidia-caps/nvidia-cap1
try mig-monitor cat /dev/nvidia-caps/nvidia-cap2
echo "caps: $(ls /dev/nvidia-caps | tr '\n' ' ')"
echo "own: $(cat /dev/nvidia-caps/nvidia-cap129 /dev/nvidia-caps/nvidia-cap130 | tr '\n' ' ')"
echo "visible: $CUDA_VISIBLE_DEVICES"
echo probed
exec sleep 3141"#;
    supervisor.attach(slice(51, &mine, probe));
    until(&mut rx, 51, |s| *s == WorkloadStatus::Ready).await;
    let log = log_contains(&rentals, 51, "probed").await;
    for attempt in ["other-slice-gi", "other-slice-ci", "mig-config", "mig-monitor"] {
        assert!(log.contains(&format!("blocked: {attempt}")), "{attempt} was not blocked: {log}");
    }
    assert!(!log.contains("LEAK"), "{log}");
    assert!(log.contains("caps: nvidia-cap129 nvidia-cap130 \n"), "{log}");
    assert!(log.contains("own: cap 129 cap 130 \n"), "{log}");
    assert!(log.contains(&format!("visible: {mine}\n")), "{log}");
    supervisor.detach(51);
    until(&mut rx, 51, |s| matches!(s, WorkloadStatus::Exited { .. } | WorkloadStatus::Failed { .. })).await;

    // A whole GPU gets no caps at all.
    supervisor.attach(spec(
        52,
        0,
        "echo \"caps: $(ls /dev/nvidia-caps 2>&1 | wc -l)\"; echo probed; exec sleep 3142",
        &[],
    ));
    let log = log_contains(&rentals, 52, "probed").await;
    assert!(log.contains("caps: 1\n") && !log.contains("nvidia-cap"), "only ls's complaint: {log}");
    supervisor.detach(52);

    // A slice the source no longer reports (re-carved), or whose node is gone: never started
    // with a wider grant, failed with the reason.
    devices.learn(&[]);
    supervisor.attach(slice(53, &other, "echo never"));
    assert_eq!(until(&mut rx, 53, |_| true).await, WorkloadStatus::Provisioning);
    match until(&mut rx, 53, |_| true).await {
        WorkloadStatus::Failed { reason } => assert!(reason.contains("did not say"), "{reason}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    devices.learn(&gpus);
    std::fs::remove_file(dev.join("nvidia-caps/nvidia-cap139")).unwrap();
    supervisor.attach(slice(54, &other, "echo never"));
    assert_eq!(until(&mut rx, 54, |_| true).await, WorkloadStatus::Provisioning);
    match until(&mut rx, 54, |_| true).await {
        WorkloadStatus::Failed { reason } => assert!(reason.contains("nvidia-cap139 is missing"), "{reason}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&root);
}
