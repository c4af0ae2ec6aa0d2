//! The workloads this host runs for rentals: started on `Attach`, told on `PreemptNotice`,
//! stopped on `Detach`, each reporting its [`WorkloadStatus`] back to the server.
//!
//! Commands are idempotent because the server repeats them until it sees the outcome: a
//! repeated attach re-reports the current status, a detach of something unknown answers
//! `Detached`. The supervisor outlives connections, so a workload keeps running through a
//! reconnect and its status changes are queued until the next connection sends them.
//!
//! Sandboxed workloads also outlive the agent process: each rental's directory keeps its
//! [`AttachSpec`] (`spec.json`), and a new agent [`Supervisor::adopt`]s every workload that
//! still runs there, so an agent crash or upgrade does not end anybody's rental.

use crate::{
    logs::LOG_FILE,
    runtime::{NOTICE_DIR, NOTICE_FILE, Runtime},
};
use cardpool_protocol::{AttachSpec, LogChunk, WorkloadStatus};
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
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// Finished workloads remembered (to answer repeated commands), oldest forgotten first.
const REMEMBERED: usize = 256;

/// A status change to send to the server.
pub type StatusUpdate = (i64, WorkloadStatus);

/// The rental's spec, kept in its directory for the next agent process.
const SPEC_FILE: &str = "spec.json";

struct Workload {
    status: WorkloadStatus,
    runtime: Option<Arc<dyn Runtime>>,
    /// Process group of the running child (none for an adopted workload).
    pgid: Option<i32>,
    noticed: bool,
    stop: Option<oneshot::Sender<Duration>>,
    finished_order: u64,
    gpu_indexes: Vec<u32>,
    /// A gang member's peers (rank 0's rendezvous admits them), kept current by repeated attaches.
    peers: Option<crate::rendezvous::Peers>,
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
    process: Option<Arc<dyn Runtime>>,
    container: Option<Arc<dyn Runtime>>,
    workloads: Mutex<HashMap<i64, Workload>>,
    updates: mpsc::UnboundedSender<StatusUpdate>,
    finished: Mutex<u64>,
}

impl Supervisor {
    /// `dir` holds one directory per rental (working directory, `workload.log`, notice file).
    pub fn new(
        dir: PathBuf,
        process: Option<Arc<dyn Runtime>>,
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
                    w.runtime = None;
                    let mut counter = self.inner.finished.lock().unwrap_or_else(|p| p.into_inner());
                    *counter += 1;
                    w.finished_order = *counter;
                }
            }
            if finished {
                let done: Vec<(u64, i64)> = workloads
                    .iter()
                    .filter(|(_, w)| w.finished_order > 0)
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

    /// A piece of the rental's log (see [`crate::logs::read`]).
    pub fn read_log(&self, rental_id: i64, offset: Option<u64>, max_bytes: u32) -> Result<LogChunk, String> {
        let running = self.running().contains(&rental_id);
        crate::logs::read(&self.inner.dir.join(rental_id.to_string()), offset, max_bytes, running)
    }

    /// The running rental's runtime, directory and number of GPUs, for an SSH channel into it.
    pub fn entry(&self, rental_id: i64) -> Result<(Arc<dyn Runtime>, PathBuf, usize), String> {
        let workloads = self.inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
        match workloads.get(&rental_id) {
            Some(w) if w.status == WorkloadStatus::Ready => match &w.runtime {
                Some(runtime) => Ok((runtime.clone(), self.inner.dir.join(rental_id.to_string()), w.gpu_indexes.len())),
                None => Err("the rental's workload is stopping".into()),
            },
            Some(w) if w.status == WorkloadStatus::Provisioning => {
                Err("the rental's workload is still starting".into())
            }
            _ => Err("this host runs no workload for that rental".into()),
        }
    }

    /// Removes the directories (log, workspace) of rentals that ended more than `kept` ago:
    /// their log stays downloadable that long. Returns how many went.
    pub fn prune(&self, kept: Duration) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.inner.dir) else { return 0 };
        let running = self.running();
        let mut pruned = 0;
        for entry in entries.flatten() {
            let Some(rental_id) = entry.file_name().to_str().and_then(|n| n.parse::<i64>().ok()) else { continue };
            let dir = entry.path();
            let last_written = std::fs::metadata(dir.join(LOG_FILE)).or_else(|_| std::fs::metadata(&dir));
            let old = last_written.and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().is_ok_and(|age| age > kept));
            let alive = self.inner.process.as_ref().is_some_and(|r| r.adopt(&dir));
            if old && !running.contains(&rental_id) && !alive && std::fs::remove_dir_all(&dir).is_ok() {
                pruned += 1;
            }
        }
        pruned
    }

    /// Keeps every running workload's log to its ring.
    pub fn trim_logs(&self) {
        for rental_id in self.running() {
            crate::logs::trim(&self.inner.dir.join(rental_id.to_string()));
        }
    }

    pub fn attach(&self, spec: AttachSpec) {
        let rental_id = spec.rental_id;
        {
            let mut workloads = self.inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(existing) = workloads.get(&rental_id) {
                if let Some(peers) = &existing.peers {
                    peers.update(&spec);
                }
                let status = existing.status.clone();
                drop(workloads);
                return self.report(rental_id, status);
            }
            workloads.insert(rental_id, Workload::new(WorkloadStatus::Provisioning, &spec));
        }
        self.report(rental_id, WorkloadStatus::Provisioning);
        let this = self.clone();
        tokio::spawn(async move { this.run(spec).await });
    }

    fn peers_of(&self, rental_id: i64) -> Option<crate::rendezvous::Peers> {
        let workloads = self.inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
        workloads.get(&rental_id).and_then(|w| w.peers.clone())
    }

    /// Takes over the workloads an earlier agent process left running in this supervisor's
    /// directory (an agent restart or upgrade), reporting each as ready; returns their rentals.
    pub fn adopt(&self) -> Vec<i64> {
        let Ok(entries) = std::fs::read_dir(&self.inner.dir) else { return vec![] };
        let mut adopted = Vec::new();
        for entry in entries.flatten() {
            let Some(rental_id) = entry.file_name().to_str().and_then(|n| n.parse::<i64>().ok()) else { continue };
            let dir = entry.path();
            let Some(spec) = std::fs::read(dir.join(SPEC_FILE))
                .ok()
                .and_then(|bytes| serde_json::from_slice::<AttachSpec>(&bytes).ok())
                .filter(|spec| spec.rental_id == rental_id)
            else {
                continue;
            };
            let runtime = self.runtime_for(&spec).ok();
            let Some(runtime) = runtime.filter(|r| r.adopt(&dir)) else { continue };
            let (stop_tx, stop_rx) = oneshot::channel::<Duration>();
            {
                let mut workloads = self.inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
                if workloads.contains_key(&rental_id) {
                    continue;
                }
                let mut workload = Workload::new(WorkloadStatus::Ready, &spec);
                workload.runtime = Some(runtime.clone());
                workload.stop = Some(stop_tx);
                workloads.insert(rental_id, workload);
            }
            self.report(rental_id, WorkloadStatus::Ready);
            adopted.push(rental_id);
            let this = self.clone();
            let rendezvous =
                crate::rendezvous::forward(&spec, this.peers_of(rental_id), &runtime, dir.clone(), tell_log(&dir));
            tokio::spawn(async move {
                this.watch_adopted(rental_id, dir, runtime, stop_rx).await;
                if let Some(rendezvous) = rendezvous {
                    rendezvous.abort();
                }
            });
        }
        adopted.sort_unstable();
        adopted
    }

    /// Follows an adopted workload (not our child: its end is read from its directory).
    async fn watch_adopted(
        &self,
        rental_id: i64,
        dir: PathBuf,
        runtime: Arc<dyn Runtime>,
        mut stop_rx: oneshot::Receiver<Duration>,
    ) {
        const POLL: Duration = Duration::from_millis(250);
        let code = loop {
            tokio::select! {
                () = tokio::time::sleep(POLL) => {
                    if let Some(code) = runtime.finished(&dir) {
                        break code;
                    }
                }
                grace = &mut stop_rx => {
                    let deadline = tokio::time::Instant::now() + grace.unwrap_or(STOP_GRACE);
                    runtime.signal(rental_id, &dir, None, Signal::SIGTERM);
                    while runtime.finished(&dir).is_none() && tokio::time::Instant::now() < deadline {
                        tokio::time::sleep(POLL).await;
                    }
                    runtime.signal(rental_id, &dir, None, Signal::SIGKILL);
                    while runtime.finished(&dir).is_none() {
                        tokio::time::sleep(POLL).await;
                    }
                    break runtime.finished(&dir).flatten();
                }
            }
        };
        runtime.signal(rental_id, &dir, None, Signal::SIGKILL);
        settle(runtime.as_ref(), &dir).await;
        if let Some(mut cleanup) = runtime.cleanup(rental_id, &dir) {
            let _ = cleanup.stdout(Stdio::null()).stderr(Stdio::null()).status().await;
        }
        self.set_status(rental_id, WorkloadStatus::Exited { code });
    }

    fn runtime_for(&self, spec: &AttachSpec) -> Result<Arc<dyn Runtime>, String> {
        if spec.image.is_some() {
            self.inner.container.clone().ok_or_else(|| "this host has no container runtime (Docker with NVIDIA)".into())
        } else {
            self.inner.process.clone().ok_or_else(|| {
                "this host cannot run commands safely: bubblewrap is missing (see `cardpool-agent self-test`)".into()
            })
        }
    }

    async fn run(&self, spec: AttachSpec) {
        let rental_id = spec.rental_id;
        let fail = |reason: String| self.set_status(rental_id, WorkloadStatus::Failed { reason });
        let runtime = match self.runtime_for(&spec) {
            Ok(runtime) => runtime,
            Err(reason) => return fail(reason),
        };
        let dir = self.inner.dir.join(rental_id.to_string());
        // A directory left by an earlier life of this id (a demo's fresh database) is not this
        // rental's: its log and workspace go (links inside are removed, never followed).
        if tokio::fs::try_exists(&dir).await.unwrap_or(false)
            && let Err(err) = tokio::fs::remove_dir_all(&dir).await
        {
            return fail(format!("cannot clear {}: {err}", dir.display()));
        }
        if let Err(err) = tokio::fs::create_dir_all(dir.join(NOTICE_DIR)).await {
            return fail(format!("cannot create {}: {err}", dir.display()));
        }
        // Nobody else lists the rental's directory or reads its log; its sandbox only passes
        // through to its workspace.
        let _ = std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o711));
        let _ = tokio::fs::remove_file(dir.join(NOTICE_DIR).join(NOTICE_FILE)).await;
        match serde_json::to_vec(&spec) {
            Ok(json) => {
                if let Err(err) = write_private(&dir.join(SPEC_FILE), &json) {
                    return fail(format!("cannot save the rental's spec: {err}"));
                }
            }
            Err(err) => return fail(err.to_string()),
        }
        // A start that fails before the workload runs is tried once more: bubblewrap's setup
        // can trip over a passing kernel hiccup (seen: "loopback: Failed RTM_NEWADDR" once in
        // many runs), and a paid rental should not fail for it. A real fault fails twice.
        let started = match self.start(&runtime, &spec, &dir).await {
            Ok(started) => Ok(started),
            Err(first) => {
                eprintln!("cardpool-agent: rental {rental_id} did not start ({first}); trying once more");
                tokio::time::sleep(Duration::from_millis(250)).await;
                self.start(&runtime, &spec, &dir).await
            }
        };
        let (mut child, pgid, stop_rx) = match started {
            Ok(started) => started,
            Err(reason) => return fail(reason),
        };
        self.set_status(rental_id, WorkloadStatus::Ready);
        let peers = self.peers_of(rental_id);
        let rendezvous = crate::rendezvous::forward(&spec, peers, &runtime, dir.clone(), tell_log(&dir));
        let status = tokio::select! {
            status = child.wait() => status.ok(),
            grace = stop_rx => {
                let grace = grace.unwrap_or(STOP_GRACE);
                runtime.signal(rental_id, &dir, pgid, Signal::SIGTERM);
                match tokio::time::timeout(grace, child.wait()).await {
                    Ok(status) => status.ok(),
                    Err(_) => {
                        runtime.signal(rental_id, &dir, pgid, Signal::SIGKILL);
                        child.wait().await.ok()
                    }
                }
            }
        };
        if let Some(rendezvous) = rendezvous {
            rendezvous.abort();
        }
        // Whatever the workload started goes with it, before its end is reported.
        runtime.signal(rental_id, &dir, pgid, Signal::SIGKILL);
        settle(runtime.as_ref(), &dir).await;
        if let Some(mut cleanup) = runtime.cleanup(rental_id, &dir) {
            let _ = cleanup.stdout(Stdio::null()).stderr(Stdio::null()).status().await;
        }
        self.set_status(rental_id, WorkloadStatus::Exited { code: status.and_then(|s| s.code()) });
    }

    /// Starts the workload and waits until it really runs: its child, process group and
    /// stop channel, or why it did not start.
    async fn start(
        &self,
        runtime: &Arc<dyn Runtime>,
        spec: &AttachSpec,
        dir: &std::path::Path,
    ) -> Result<(tokio::process::Child, Option<i32>, oneshot::Receiver<Duration>), String> {
        let rental_id = spec.rental_id;
        use std::os::unix::fs::OpenOptionsExt;
        let log = match std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(dir.join(LOG_FILE)) {
            Ok(log) => log,
            Err(err) => return Err(format!("cannot open log: {err}")),
        };
        let mut command = match runtime.command(spec, dir) {
            Ok(command) => command,
            Err(reason) => return Err(reason),
        };
        let stderr = match log.try_clone() {
            Ok(f) => Stdio::from(f),
            Err(_) => Stdio::null(),
        };
        command.stdin(Stdio::null()).stdout(Stdio::from(log)).stderr(stderr);
        command.kill_on_drop(!runtime.survives_agent());
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) => return Err(format!("cannot start the workload: {err}")),
        };
        drop(command);
        let pgid = child.id().and_then(|id| i32::try_from(id).ok());
        let (stop_tx, stop_rx) = oneshot::channel::<Duration>();
        {
            let mut workloads = self.inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(w) = workloads.get_mut(&rental_id) {
                w.pgid = pgid;
                w.runtime = Some(runtime.clone());
                w.stop = Some(stop_tx);
            }
        }
        // Ready (and billed) only once the workload really runs; a start that fails is a
        // failure with its reason, never billed time.
        while !runtime.started(dir) {
            tokio::select! {
                status = child.wait() => {
                    if runtime.started(dir) {
                        break;
                    }
                    runtime.signal(rental_id, dir, pgid, Signal::SIGKILL);
                    if let Some(mut cleanup) = runtime.cleanup(rental_id, dir) {
                        let _ = cleanup.stdout(Stdio::null()).stderr(Stdio::null()).status().await;
                    }
                    let code = status.ok().and_then(|s| s.code()).map_or_else(|| "a signal".to_owned(), |c| format!("code {c}"));
                    let log = crate::logs::read(dir, None, 4096, false).map(|c| c.data).unwrap_or_default();
                    let last = log.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output");
                    return Err(format!("the workload did not start ({code}): {}", last.chars().take(300).collect::<String>()));
                }
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        Ok((child, pgid, stop_rx))
    }

    /// Writes the notice file and sends SIGTERM now; the workload is killed when `grace` ends.
    pub async fn preempt(&self, rental_id: i64, grace: Duration) {
        let (runtime, pgid, first) = {
            let mut workloads = self.inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
            match workloads.get_mut(&rental_id) {
                Some(w) if w.stop.is_some() && w.runtime.is_some() => {
                    let first = !w.noticed;
                    w.noticed = true;
                    (w.runtime.clone(), w.pgid, first)
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
        let Some(runtime) = runtime.filter(|_| first) else { return };
        let deadline = std::time::SystemTime::now()
            .checked_add(grace)
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let notice = format!("{{\"rental_id\":{rental_id},\"reason\":\"preempted\",\"stop_at_unix\":{deadline}}}\n");
        let dir = self.inner.dir.join(rental_id.to_string());
        let path = dir.join(NOTICE_DIR).join(NOTICE_FILE);
        if let Err(err) = write_notice(&path, notice.as_bytes()) {
            eprintln!("cardpool-agent: cannot write {}: {err}", path.display());
        }
        runtime.signal(rental_id, &dir, pgid, Signal::SIGTERM);
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

impl Workload {
    fn new(status: WorkloadStatus, spec: &AttachSpec) -> Workload {
        Workload {
            status,
            runtime: None,
            pgid: None,
            noticed: false,
            stop: None,
            finished_order: 0,
            gpu_indexes: spec.gpu_indexes.clone(),
            peers: crate::rendezvous::Peers::of(spec),
        }
    }
}

/// Waits (a few seconds at most) until nothing of a killed workload is left.
async fn settle(runtime: &dyn Runtime, dir: &std::path::Path) {
    for _ in 0..100 {
        if runtime.finished(dir).is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes a file only the agent can read (the spec holds the renter's environment).
/// Appends a line of the agent's to the workload's log, where the renter reads it.
fn tell_log(dir: &std::path::Path) -> impl Fn(String) + Send + 'static {
    let log = dir.join(LOG_FILE);
    move |line: String| {
        use std::io::Write;
        if let Ok(mut file) = std::fs::OpenOptions::new().append(true).open(&log) {
            let _ = writeln!(file, "{line}");
        }
    }
}

fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(bytes)
}

/// Writes the notice without following a link planted at its path: the notice directory is
/// the agent's and read-only to the workload, and a link there is refused, never followed.
fn write_notice(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::{io::Write, os::unix::fs::OpenOptionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)?;
    file.write_all(bytes)
}
