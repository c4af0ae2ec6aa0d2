//! Heartbeats in group commit. Every agent heartbeats every few seconds: at 50,000 GPUs that is
//! over a thousand a second, and one by one (a write, then reads of the host's rentals and
//! pending layouts) they were most of the gateway's database work, each awaited in its
//! connection's loop ahead of the telemetry queued behind it.
//!
//! So a connection hands its heartbeat to [`Heartbeats`] and goes on reading. Every [`WINDOW`]
//! the waiting heartbeats are recorded in one statement (ownership and revocation checked per
//! host, which re-checks the connection's credential too), the live rentals and pending layouts
//! of all of them are read in one query each, and each connection gets its answer: what its
//! agent must do, or that it must end. The rare heartbeat the statement does not count (a host
//! coming back online, taken over, revoked) is recorded on its own, as before.

use super::liveness;
use crate::{AppError, AppResult, Services, rentals};
use cardpool_protocol::ServerMessage;
use std::{
    future::Future,
    sync::Mutex,
    time::{Duration, Instant},
};
use tokio::sync::oneshot;

/// How long heartbeats wait to be recorded together: short beside any heartbeat interval.
const WINDOW: Duration = Duration::from_millis(50);
/// Heartbeats recorded by one statement (two bound values each).
const MAX_BATCH: usize = 2000;
/// A heartbeat recorded this long after it came in is logged, with where the time went: the
/// reaper judges hosts by when their heartbeats were recorded, so a slow batch looks like
/// silent agents.
const LATE: Duration = Duration::from_secs(1);
/// At most one line about late heartbeats this often.
const LATE_LOGGED_EVERY: Duration = Duration::from_secs(10);

/// One heartbeat, as the agent's connection received it.
pub struct Beat {
    pub host_id: i64,
    /// The connection it came through (`hosts.connection_id` while that connection owns the host).
    pub connection: String,
    /// The rentals the agent says it runs.
    pub running: Vec<i64>,
    /// Whether the agent reports every status change before the heartbeat that leaves a
    /// workload out (protocol 1.2 on), so that a workload missing from `running` is really gone.
    pub reconciles: bool,
}

/// What a heartbeat's connection must do.
#[derive(Debug)]
pub enum HeartbeatAnswer {
    /// Send these to the agent (nothing, mostly).
    Commands(Vec<ServerMessage>),
    /// Another connection owns the host now: end this one.
    TakenOver,
    /// The host's credential was revoked: end this connection.
    Revoked,
}

type Waiter = (Beat, oneshot::Sender<AppResult<HeartbeatAnswer>>);

/// Heartbeats waiting for the next batch, each with when it came in.
type Queued = (Instant, Waiter);

/// Heartbeats waiting for the next batch, and whether a task is answering them.
#[derive(Default)]
pub struct Heartbeats {
    waiting: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    beats: Vec<Queued>,
    answering: bool,
}

impl Heartbeats {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Records `beat` with the others of its window; the answer comes when the batch is done.
pub fn heartbeat(services: &Services, beat: Beat) -> impl Future<Output = AppResult<HeartbeatAnswer>> + Send + 'static {
    let (answer, answered) = oneshot::channel();
    let start = {
        let mut waiting = services.heartbeats.waiting();
        waiting.beats.push((Instant::now(), (beat, answer)));
        !std::mem::replace(&mut waiting.answering, true)
    };
    if start {
        tokio::spawn(answer_while_waiting(services.clone()));
    }
    // A dropped sender is a batch task that panicked: the connection ends and the agent retries.
    async move { answered.await.unwrap_or(Err(AppError::Internal)) }
}

/// Answers batch after batch until none waits (the next heartbeat starts another task).
async fn answer_while_waiting(services: Services) {
    let mut backlog = false;
    // Late batches not logged yet, and until when another is not logged (a loaded server has
    // a late batch every window; one line says so for them all).
    let (mut late, mut quiet_until) = (0u64, None::<Instant>);
    loop {
        if !backlog {
            tokio::time::sleep(WINDOW).await;
        }
        let (oldest, batch): (Instant, Vec<Waiter>) = {
            let mut waiting = services.heartbeats.waiting();
            if waiting.beats.is_empty() {
                waiting.answering = false;
                return;
            }
            let take = waiting.beats.len().min(MAX_BATCH);
            let oldest = waiting.beats[0].0;
            let batch = waiting.beats.drain(..take).map(|(_, waiter)| waiter).collect();
            backlog = !waiting.beats.is_empty();
            (oldest, batch)
        };
        let taken = Instant::now();
        let beats = batch.len();
        let recorded = answer(&services, batch).await;
        if recorded.duration_since(oldest) < LATE {
            continue;
        }
        late += 1;
        let now = Instant::now();
        if quiet_until.is_some_and(|until| now < until) {
            continue;
        }
        let ms = |from: Instant, to: Instant| to.duration_since(from).as_millis() as u64;
        tracing::warn!(
            late_batches = late,
            beats,
            queued_ms = ms(oldest, taken),
            recording_ms = ms(taken, recorded),
            answering_ms = ms(recorded, now),
            backlog,
            "heartbeats recorded late"
        );
        (late, quiet_until) = (0, Some(now + LATE_LOGGED_EVERY));
    }
}

/// Records and answers `batch`; returns when its heartbeats were recorded.
async fn answer(services: &Services, batch: Vec<Waiter>) -> Instant {
    let owned: Vec<(i64, &str)> = batch.iter().map(|(beat, _)| (beat.host_id, beat.connection.as_str())).collect();
    let counted = liveness::record_owned_heartbeats(services, &owned).await;
    let recorded = Instant::now();
    let counted = match counted {
        Ok(counted) => counted,
        Err(err) => {
            for (_, answer) in batch {
                let _ = answer.send(Err(err.clone()));
            }
            return recorded;
        }
    };
    // Those the statement did not count, one by one: which of them count, which must end.
    let mut heard = Vec::with_capacity(batch.len());
    for (beat, answer) in batch {
        if counted.contains(&beat.host_id) {
            heard.push((beat, answer));
            continue;
        }
        match liveness::record_connection_heartbeat(services, beat.host_id, &beat.connection).await {
            Ok(true) => heard.push((beat, answer)),
            Ok(false) => drop(answer.send(Ok(HeartbeatAnswer::TakenOver))),
            Err(AppError::Unauthorized) => drop(answer.send(Ok(HeartbeatAnswer::Revoked))),
            Err(err) => drop(answer.send(Err(err))),
        }
    }
    let (reconciling, listing): (Vec<Waiter>, Vec<Waiter>) = heard.into_iter().partition(|(beat, _)| beat.reconciles);
    let beats: Vec<(i64, &[i64])> =
        reconciling.iter().map(|(beat, _)| (beat.host_id, beat.running.as_slice())).collect();
    // Every heartbeat here is recorded. One whose answer cannot be worked out (the failure is
    // logged) gets nothing this time and keeps its connection: commands are derived from the
    // database afresh each time, so the next heartbeat asks again, and a failure of the
    // batch's shared reads does not end every connection in it.
    let mut answers = rentals::answer_heartbeats(services, &beats).await.unwrap_or_default().into_iter();
    for (_, answer) in reconciling {
        let commands = answers.next().and_then(Result::ok).unwrap_or_default();
        let _ = answer.send(Ok(HeartbeatAnswer::Commands(commands)));
    }
    // Agents before protocol 1.2: what they must do, without failing what they leave out.
    for (beat, answer) in listing {
        let commands = rentals::commands_for_host(services, beat.host_id, Some(&beat.running)).await;
        let _ = answer.send(Ok(HeartbeatAnswer::Commands(commands.unwrap_or_default())));
    }
    recorded
}
