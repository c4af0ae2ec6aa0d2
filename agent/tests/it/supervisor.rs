//! The supervisor with real workloads: exits and their codes, preemption notices, the stand-in
//! of simulated hosts, stops of workloads that ignore SIGTERM, and pruning of ended rentals.

use cardpool_agent::{
    logs::LOG_FILE,
    runtime::{Runtime, SimulatedRuntime},
    sandbox::SandboxRuntime,
    shares::HostShares,
    supervisor::{STOP_GRACE, StatusUpdate, Supervisor},
};
use cardpool_protocol::{AttachSpec, WorkloadStatus};
use std::{path::PathBuf, sync::Arc, time::Duration};
use tokio::sync::mpsc;

/// The process runtime every host uses (bubblewrap: `scripts/bootstrap.sh` installs it).
fn sandbox() -> Option<Arc<dyn Runtime>> {
    let runtime = SandboxRuntime::detect(HostShares::new(2000, 1 << 30, 4))
        .unwrap_or_else(|why| panic!("{why}; run scripts/bootstrap.sh"));
    Some(Arc::new(runtime))
}

fn spec(rental_id: i64, command: &str) -> AttachSpec {
    AttachSpec {
        rental_id,
        gpu_indexes: vec![1, 3],
        gpu_uuids: vec!["GPU-b".into(), "GPU-d".into()],
        command: Some(command.into()),
        image: None,
        env: vec!["GREETING=hi".into(), "CUDA_VISIBLE_DEVICES=0,1,2,3".into()],
        ssh_public_key: None,
        share_sevenths: None,
        gang: None,
    }
}

async fn next(rx: &mut mpsc::UnboundedReceiver<StatusUpdate>) -> StatusUpdate {
    tokio::time::timeout(Duration::from_secs(20), rx.recv()).await.expect("status in time").expect("open")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cardpool-supervisor-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[tokio::test]
async fn a_command_sees_only_its_gpus_and_its_exit_is_reported() {
    let dir = temp_dir("exit");
    let (supervisor, mut rx) = Supervisor::new(dir.clone(), sandbox(), None);
    supervisor.attach(spec(1, "echo \"$CUDA_VISIBLE_DEVICES|$NVIDIA_VISIBLE_DEVICES|$GREETING\"; exit 3"));
    assert_eq!(next(&mut rx).await, (1, WorkloadStatus::Provisioning));
    assert_eq!(next(&mut rx).await, (1, WorkloadStatus::Ready));
    assert_eq!(next(&mut rx).await, (1, WorkloadStatus::Exited { code: Some(3) }));
    let log = std::fs::read_to_string(dir.join("1/workload.log")).unwrap();
    assert_eq!(log.trim(), "GPU-b,GPU-d|GPU-b,GPU-d|hi");
    // A repeated attach re-reports, it does not start the workload again.
    supervisor.attach(spec(1, "echo again"));
    assert_eq!(next(&mut rx).await, (1, WorkloadStatus::Exited { code: Some(3) }));
    assert_eq!(std::fs::read_to_string(dir.join("1/workload.log")).unwrap().lines().count(), 1);
    // Detaching something unknown is answered, so the server can end the rental.
    supervisor.detach(99);
    assert_eq!(next(&mut rx).await, (99, WorkloadStatus::Detached));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_preempted_workload_gets_sigterm_and_the_notice_file() {
    let dir = temp_dir("preempt");
    let (supervisor, mut rx) = Supervisor::new(dir.clone(), sandbox(), None);
    // Traps SIGTERM, copies the notice into its log and exits 0.
    supervisor.attach(spec(
        2,
        "trap 'cat \"$CARDPOOL_PREEMPT_NOTICE_FILE\"; exit 0' TERM; echo started; while true; do sleep 0.1; done",
    ));
    assert_eq!(next(&mut rx).await, (2, WorkloadStatus::Provisioning));
    assert_eq!(next(&mut rx).await, (2, WorkloadStatus::Ready));
    assert_eq!(supervisor.running(), vec![2]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    supervisor.preempt(2, Duration::from_secs(30)).await;
    assert_eq!(next(&mut rx).await, (2, WorkloadStatus::Exited { code: Some(0) }));
    let log = std::fs::read_to_string(dir.join("2/workload.log")).unwrap();
    assert!(log.contains("\"reason\":\"preempted\""), "{log}");
    assert!(supervisor.running().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_simulated_host_stands_in_and_never_runs_the_renters_code() {
    let dir = temp_dir("simulated");
    let sim: Arc<dyn Runtime> = Arc::new(SimulatedRuntime);
    let (supervisor, mut rx) = Supervisor::new(dir.clone(), Some(sim.clone()), Some(sim));
    supervisor.attach(spec(5, "touch pwned"));
    assert_eq!(next(&mut rx).await, (5, WorkloadStatus::Provisioning));
    assert_eq!(next(&mut rx).await, (5, WorkloadStatus::Ready));
    tokio::time::sleep(Duration::from_millis(300)).await;
    // It takes the notice and runs on until the deadline, when it is killed.
    let noticed = std::time::Instant::now();
    supervisor.preempt(5, Duration::from_secs(2)).await;
    assert_eq!(next(&mut rx).await, (5, WorkloadStatus::Exited { code: None }));
    assert!(noticed.elapsed() >= Duration::from_secs(2));
    let log = std::fs::read_to_string(dir.join("5/workload.log")).unwrap();
    assert!(log.contains("standing in for: touch pwned (GPUs 1,3)"), "{log}");
    assert!(log.contains("\"reason\":\"preempted\""), "{log}");
    assert!(!dir.join("5/pwned").exists(), "the renter's command ran");
    // A plain stop ends it at once.
    supervisor.attach(spec(6, "x"));
    assert_eq!(next(&mut rx).await, (6, WorkloadStatus::Provisioning));
    assert_eq!(next(&mut rx).await, (6, WorkloadStatus::Ready));
    tokio::time::sleep(Duration::from_millis(300)).await;
    supervisor.detach(6);
    assert_eq!(next(&mut rx).await, (6, WorkloadStatus::Exited { code: Some(0) }));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn ended_rentals_directories_go_after_a_while_running_ones_never() {
    let dir = temp_dir("prune");
    let (supervisor, mut rx) = Supervisor::new(dir.clone(), sandbox(), None);
    supervisor.attach(spec(8, "echo old; exit 0"));
    supervisor.attach(spec(9, "echo running; while :; do sleep 1; done"));
    loop {
        if next(&mut rx).await == (8, WorkloadStatus::Exited { code: Some(0) }) {
            break;
        }
    }
    let week_ago = std::time::SystemTime::now() - Duration::from_secs(8 * 24 * 3600);
    for id in [8, 9] {
        let log = std::fs::OpenOptions::new().append(true).open(dir.join(format!("{id}/{LOG_FILE}"))).unwrap();
        log.set_modified(week_ago).unwrap();
    }
    std::fs::create_dir_all(dir.join("10")).unwrap(); // ended just now
    assert_eq!(supervisor.prune(Duration::from_secs(7 * 24 * 3600)), 1);
    assert!(!dir.join("8").exists() && dir.join("9").exists() && dir.join("10").exists());
    supervisor.detach(9);
    while !matches!(next(&mut rx).await, (9, WorkloadStatus::Exited { .. })) {}
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn detach_stops_a_workload_that_ignores_sigterm() {
    let dir = temp_dir("detach");
    let (supervisor, mut rx) = Supervisor::new(dir.clone(), sandbox(), None);
    supervisor.attach(spec(3, "trap '' TERM; while :; do sleep 1; done"));
    assert_eq!(next(&mut rx).await, (3, WorkloadStatus::Provisioning));
    assert_eq!(next(&mut rx).await, (3, WorkloadStatus::Ready));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = std::time::Instant::now();
    supervisor.detach(3);
    let (id, status) = next(&mut rx).await;
    assert_eq!(id, 3);
    // SIGTERM was ignored; SIGKILL came after the grace period.
    assert!(matches!(status, WorkloadStatus::Exited { code: None | Some(137) }), "{status:?}");
    assert!(asked.elapsed() >= STOP_GRACE, "{:?}", asked.elapsed());
    // An image on a host without Docker fails clearly.
    let mut container = spec(4, "");
    container.command = None;
    container.image = Some("pytorch".into());
    supervisor.attach(container);
    assert_eq!(next(&mut rx).await, (4, WorkloadStatus::Provisioning));
    assert!(matches!(next(&mut rx).await, (4, WorkloadStatus::Failed { .. })));
    let _ = std::fs::remove_dir_all(&dir);
}
