//! The workloads this host runs for rentals: started on `Attach`, told on `PreemptNotice`,
//! stopped on `Detach`, each reporting its [`WorkloadStatus`] back to the server.
//!
//! Commands are idempotent because the server repeats them until it sees the outcome: a
//! repeated attach re-reports the current status, a detach of something unknown answers
//! `Detached`. The supervisor outlives connections, so a workload keeps running through a
//! reconnect and its status changes are queued until the next connection sends them.

use crate::runtime::{NOTICE_FILE, Runtime};
use cardpool_protocol::{AttachSpec, WorkloadStatus};
use nix::sys::signal::Signal;
use std::{
    collections::HashMap,
    path::PathBuf,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::sync::{mpsc, oneshot};

/// How long a stopped workload gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Finished workloads remembered (to answer repeated commands), oldest forgotten first.
const REMEMBERED: usize = 256;

/// A status change to send to the server.
pub type StatusUpdate = (i64, WorkloadStatus);

struct Workload {
    status: WorkloadStatus,
    /// Process group of the running child.
    pgid: Option<i32>,
    noticed: bool,
    stop: Option<oneshot::Sender<Duration>>,
    finished_order: u64,
    gpu_indexes: Vec<u32>,
}

/// A workload that holds GPUs right now, as telemetry reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuUse {
    pub rental_id: i64,
    pub gpu_indexes: Vec<u32>,
    /// Process group leader of the workload, when it runs as a process here.
    pub pid: Option<u32>,
}

#[derive(Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    process: Arc<dyn Runtime>,
    container: Option<Arc<dyn Runtime>>,
    workloads: Mutex<HashMap<i64, Workload>>,
    updates: mpsc::UnboundedSender<StatusUpdate>,
    finished: Mutex<u64>,
}

impl Supervisor {
    /// `dir` holds one directory per rental (working directory, `workload.log`, notice file).
    pub fn new(
        dir: PathBuf,
        process: Arc<dyn Runtime>,
        container: Option<Arc<dyn Runtime>>,
    ) -> (Supervisor, mpsc::UnboundedReceiver<StatusUpdate>) {
        let (updates, receiver) = mpsc::unbounded_channel();
        // Workloads run in their own directory: paths handed to them must not be relative.
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        let inner =
            Inner { dir, process, container, workloads: Mutex::new(HashMap::new()), updates, finished: Mutex::new(0) };
        (Supervisor { inner: Arc::new(inner) }, receiver)
    }

    fn report(&self, rental_id: i64, status: WorkloadStatus) {
        let _ = self.inner.updates.send((rental_id, status));
    }

    fn set_status(&self, rental_id: i64, status: WorkloadStatus) {
        let finished = matches!(status, WorkloadStatus::Exited { .. } | WorkloadStatus::Failed { .. });
        {
            let mut workloads = self.inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(w) = workloads.get_mut(&rental_id) {
                w.status = status.clone();
                if finished {
                    w.pgid = None;
                    w.stop = None;
                    let mut counter = self.inner.finished.lock().unwrap_or_else(|p| p.into_inner());
                    *counter += 1;
                    w.finished_order = *counter;
                }
            }
            if finished {
                let done: Vec<(u64, i64)> = workloads
                    .iter()
                    .filter(|(_, w)| w.pgid.is_none() && w.finished_order > 0)
                    .map(|(id, w)| (w.finished_order, *id))
                    .collect();
                if done.len() > REMEMBERED {
                    let mut done = done;
                    done.sort_unstable();
                    for (_, id) in done.iter().take(done.len() - REMEMBERED) {
                        workloads.remove(id);
                    }
                }
            }
        }
        self.report(rental_id, status);
    }

    /// Rentals whose workloads are starting or running.
    pub fn running(&self) -> Vec<i64> {
        let workloads = self.inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
        let mut ids: Vec<i64> = workloads
            .iter()
            .filter(|(_, w)| matches!(w.status, WorkloadStatus::Provisioning | WorkloadStatus::Ready))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// The running workloads and the GPUs each holds.
    pub fn gpu_use(&self) -> Vec<GpuUse> {
        let workloads = self.inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
        let mut uses: Vec<GpuUse> = workloads
            .iter()
            .filter(|(_, w)| matches!(w.status, WorkloadStatus::Provisioning | WorkloadStatus::Ready))
            .map(|(id, w)| GpuUse {
                rental_id: *id,
                gpu_indexes: w.gpu_indexes.clone(),
                pid: w.pgid.and_then(|p| u32::try_from(p).ok()),
            })
            .collect();
        uses.sort_by_key(|u| u.rental_id);
        uses
    }

    pub fn attach(&self, spec: AttachSpec) {
        let rental_id = spec.rental_id;
        {
            let mut workloads = self.inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(existing) = workloads.get(&rental_id) {
                let status = existing.status.clone();
                drop(workloads);
                return self.report(rental_id, status);
            }
            workloads.insert(
                rental_id,
                Workload {
                    status: WorkloadStatus::Provisioning,
                    pgid: None,
                    noticed: false,
                    stop: None,
                    finished_order: 0,
                    gpu_indexes: spec.gpu_indexes.clone(),
                },
            );
        }
        self.report(rental_id, WorkloadStatus::Provisioning);
        let this = self.clone();
        tokio::spawn(async move { this.run(spec).await });
    }

    async fn run(&self, spec: AttachSpec) {
        let rental_id = spec.rental_id;
        let runtime = if spec.image.is_some() {
            match &self.inner.container {
                Some(runtime) => runtime.clone(),
                None => {
                    return self.set_status(
                        rental_id,
                        WorkloadStatus::Failed {
                            reason: "this host has no container runtime (Docker with NVIDIA)".into(),
                        },
                    );
                }
            }
        } else {
            self.inner.process.clone()
        };
        let dir = self.inner.dir.join(rental_id.to_string());
        if let Err(err) = tokio::fs::create_dir_all(&dir).await {
            return self.set_status(
                rental_id,
                WorkloadStatus::Failed { reason: format!("cannot create {}: {err}", dir.display()) },
            );
        }
        let _ = tokio::fs::remove_file(dir.join(NOTICE_FILE)).await;
        let log = match std::fs::OpenOptions::new().create(true).append(true).open(dir.join("workload.log")) {
            Ok(log) => log,
            Err(err) => {
                return self
                    .set_status(rental_id, WorkloadStatus::Failed { reason: format!("cannot open log: {err}") });
            }
        };
        let mut command = match runtime.command(&spec, &dir) {
            Ok(command) => command,
            Err(reason) => return self.set_status(rental_id, WorkloadStatus::Failed { reason }),
        };
        let stderr = match log.try_clone() {
            Ok(f) => Stdio::from(f),
            Err(_) => Stdio::null(),
        };
        command.stdin(Stdio::null()).stdout(Stdio::from(log)).stderr(stderr).kill_on_drop(true);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) => {
                return self.set_status(
                    rental_id,
                    WorkloadStatus::Failed { reason: format!("cannot start the workload: {err}") },
                );
            }
        };
        let (stop_tx, stop_rx) = oneshot::channel::<Duration>();
        {
            let mut workloads = self.inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(w) = workloads.get_mut(&rental_id) {
                w.pgid = child.id().and_then(|id| i32::try_from(id).ok());
                w.stop = Some(stop_tx);
            }
        }
        self.set_status(rental_id, WorkloadStatus::Ready);
        let pgid = child.id().and_then(|id| i32::try_from(id).ok());
        let status = tokio::select! {
            status = child.wait() => status.ok(),
            grace = stop_rx => {
                let grace = grace.unwrap_or(STOP_GRACE);
                signal(pgid, Signal::SIGTERM);
                match tokio::time::timeout(grace, child.wait()).await {
                    Ok(status) => status.ok(),
                    Err(_) => {
                        signal(pgid, Signal::SIGKILL);
                        child.wait().await.ok()
                    }
                }
            }
        };
        // Whatever the workload left in its process group goes with it.
        signal(pgid, Signal::SIGKILL);
        if let Some(mut cleanup) = runtime.cleanup(rental_id) {
            let _ = cleanup.stdout(Stdio::null()).stderr(Stdio::null()).status().await;
        }
        self.set_status(rental_id, WorkloadStatus::Exited { code: status.and_then(|s| s.code()) });
    }

    /// Writes the notice file and sends SIGTERM now; the workload is killed when `grace` ends.
    pub async fn preempt(&self, rental_id: i64, grace: Duration) {
        let (pgid, first) = {
            let mut workloads = self.inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
            match workloads.get_mut(&rental_id) {
                Some(w) if w.pgid.is_some() => {
                    let first = !w.noticed;
                    w.noticed = true;
                    (w.pgid, first)
                }
                Some(w) => {
                    let status = w.status.clone();
                    drop(workloads);
                    return self.report(rental_id, status);
                }
                None => {
                    drop(workloads);
                    return self.report(rental_id, WorkloadStatus::Detached);
                }
            }
        };
        if !first {
            return;
        }
        let deadline = std::time::SystemTime::now()
            .checked_add(grace)
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let notice = format!("{{\"rental_id\":{rental_id},\"reason\":\"preempted\",\"stop_at_unix\":{deadline}}}\n");
        let path = self.inner.dir.join(rental_id.to_string()).join(NOTICE_FILE);
        if let Err(err) = tokio::fs::write(&path, notice).await {
            eprintln!("cardpool-agent: cannot write {}: {err}", path.display());
        }
        signal(pgid, Signal::SIGTERM);
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            this.stop(rental_id, Duration::ZERO);
        });
    }

    /// Stops the workload (SIGTERM, then SIGKILL after `grace`).
    fn stop(&self, rental_id: i64, grace: Duration) -> bool {
        let mut workloads = self.inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
        match workloads.get_mut(&rental_id).and_then(|w| w.stop.take()) {
            Some(stop) => stop.send(grace).is_ok(),
            None => false,
        }
    }

    pub fn detach(&self, rental_id: i64) {
        if self.stop(rental_id, STOP_GRACE) {
            return; // its `Exited` follows
        }
        let status = {
            let workloads = self.inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
            workloads.get(&rental_id).map(|w| w.status.clone())
        };
        match status {
            // Stopping already: the exit will be reported.
            Some(WorkloadStatus::Ready | WorkloadStatus::Provisioning) => {}
            _ => self.report(rental_id, WorkloadStatus::Detached),
        }
    }
}

fn signal(pgid: Option<i32>, signal: Signal) {
    if let Some(pgid) = pgid.filter(|p| *p > 0) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::ProcessRuntime;

    fn spec(rental_id: i64, command: &str) -> AttachSpec {
        AttachSpec {
            rental_id,
            gpu_indexes: vec![1, 3],
            gpu_uuids: vec!["GPU-b".into(), "GPU-d".into()],
            command: Some(command.into()),
            image: None,
            env: vec!["GREETING=hi".into(), "CUDA_VISIBLE_DEVICES=0,1,2,3".into()],
            ssh_public_key: None,
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
        let (supervisor, mut rx) = Supervisor::new(dir.clone(), Arc::new(ProcessRuntime), None);
        supervisor.attach(spec(1, "echo \"$CUDA_VISIBLE_DEVICES|$NVIDIA_VISIBLE_DEVICES|$GREETING\"; exit 3"));
        assert_eq!(next(&mut rx).await, (1, WorkloadStatus::Provisioning));
        assert_eq!(next(&mut rx).await, (1, WorkloadStatus::Ready));
        assert_eq!(next(&mut rx).await, (1, WorkloadStatus::Exited { code: Some(3) }));
        let log = std::fs::read_to_string(dir.join("1/workload.log")).unwrap();
        assert_eq!(log.trim(), "1,3|GPU-b,GPU-d|hi");
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
        let (supervisor, mut rx) = Supervisor::new(dir.clone(), Arc::new(ProcessRuntime), None);
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
        let sim: Arc<dyn Runtime> = Arc::new(crate::runtime::SimulatedRuntime);
        let (supervisor, mut rx) = Supervisor::new(dir.clone(), sim.clone(), Some(sim));
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
    async fn detach_stops_a_workload_that_ignores_sigterm() {
        let dir = temp_dir("detach");
        let (supervisor, mut rx) = Supervisor::new(dir.clone(), Arc::new(ProcessRuntime), None);
        supervisor.attach(spec(3, "trap '' TERM; sleep 600"));
        assert_eq!(next(&mut rx).await, (3, WorkloadStatus::Provisioning));
        assert_eq!(next(&mut rx).await, (3, WorkloadStatus::Ready));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let asked = std::time::Instant::now();
        supervisor.detach(3);
        let (id, status) = next(&mut rx).await;
        assert_eq!(id, 3);
        // SIGTERM was ignored; SIGKILL came after the grace period.
        assert_eq!(status, WorkloadStatus::Exited { code: None });
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
}
