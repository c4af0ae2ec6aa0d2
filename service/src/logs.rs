//! Workload logs, read through the host's agent: they stay on the host (the agent keeps the
//! last 8 MiB of each rental's stdout and stderr), and the server asks for a piece by offset
//! over the agent's existing connection whenever a renter reads or follows them. Nothing is
//! copied to the server, and a reader that goes on from a piece's `end` neither misses nor
//! repeats a byte, whichever side reconnects in between.
//!
//! The gateway [`LogRelay::connect`]s each agent connection (see `agent_links`: the newest
//! connection of a host wins) and hands the agent's answers to [`LogRelay::answer`]. With
//! several replicas, a read for a host connected to another replica goes to it over the bus
//! (`bus::read_logs`, a NATS request the holding replica answers).

use crate::{
    AppResult, Services,
    agent_links::{AgentLinks, Hooked},
    auth::Principal,
    rentals::{Audience, visible_rental},
};
use cardpool_domain::{AppError, rentals::RentalState};
use cardpool_protocol::{LOG_CHUNK_BYTES, LogChunk, ServerMessage};
use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};
use tokio::sync::{mpsc, oneshot};

/// How long an agent has to answer a read.
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_secs(10);
/// Why a read found no agent to ask.
pub(crate) const OFFLINE: &str = "the host's agent is not connected; its logs are back when it is";
/// Reads waiting for one agent at once; more are refused rather than queued.
const IN_FLIGHT_PER_HOST: usize = 32;

type Answer = oneshot::Sender<Result<LogChunk, String>>;

struct Link {
    requests: mpsc::Sender<ServerMessage>,
    pending: HashMap<u64, Answer>,
}

#[derive(Default)]
pub struct LogRelay {
    links: Arc<AgentLinks<Link>>,
    ids: AtomicU64,
}

/// An agent connection's side of the relay: the reads to send it. Dropped with the
/// connection, it unhooks it, unless a newer connection of the host has taken over.
pub struct Connected {
    pub reads: mpsc::Receiver<ServerMessage>,
    _hooked: Hooked<Link>,
}

impl LogRelay {
    /// Hooks up a host's new agent connection (replacing any older one).
    pub fn connect(&self, host_id: i64) -> Connected {
        let (requests, reads) = mpsc::channel(IN_FLIGHT_PER_HOST);
        let hooked = self.links.connect(host_id, Link { requests, pending: HashMap::new() });
        Connected { reads, _hooked: hooked }
    }

    /// The agent's answer to read `request_id`.
    pub fn answer(&self, host_id: i64, request_id: u64, chunk: Result<LogChunk, String>) {
        let waiting = self.links.with(host_id, |l, _| l.pending.remove(&request_id)).flatten();
        if let Some(waiting) = waiting {
            let _ = waiting.send(chunk);
        }
    }

    /// Asks the host's agent, if it is connected here (`None` otherwise); `Ok(Err(why))` when
    /// the agent has no such log.
    pub(crate) async fn read(
        &self,
        host_id: i64,
        rental_id: i64,
        offset: Option<u64>,
        max_bytes: u32,
    ) -> Option<AppResult<Result<LogChunk, String>>> {
        self.links.with(host_id, |_, _| ())?;
        Some(self.read_here(host_id, rental_id, offset, max_bytes).await)
    }

    async fn read_here(
        &self,
        host_id: i64,
        rental_id: i64,
        offset: Option<u64>,
        max_bytes: u32,
    ) -> AppResult<Result<LogChunk, String>> {
        let request_id = self.ids.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = oneshot::channel();
        let offline = || AppError::Unavailable(OFFLINE.into());
        let read = ServerMessage::ReadLogs { request_id, rental_id, offset, max_bytes };
        self.links
            .with(host_id, |link, _| {
                link.requests
                    .try_send(read)
                    .map_err(|_| AppError::Unavailable("the host is busy; try again".into()))?;
                link.pending.insert(request_id, tx);
                Ok::<(), AppError>(())
            })
            .ok_or_else(offline)??;
        let answer = tokio::time::timeout(ANSWER_WITHIN, rx).await;
        self.links.with(host_id, |link, _| link.pending.remove(&request_id));
        match answer {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(offline()),
            Err(_) => Err(AppError::Unavailable("the host's agent did not answer in time (is it up to date?)".into())),
        }
    }
}

/// A piece of the rental's workload log, for its renter (or an admin): from `offset`, or the
/// last `max_bytes` when there is none.
pub async fn read_rental_log(
    services: &Services,
    principal: &Principal,
    rental_id: i64,
    offset: Option<u64>,
    max_bytes: Option<u32>,
) -> AppResult<LogChunk> {
    let rental = visible_rental(services, principal, rental_id, Audience::Renter).await?;
    let max_bytes = max_bytes.unwrap_or(LOG_CHUNK_BYTES).clamp(1, LOG_CHUNK_BYTES);
    let answer = match services.logs.read(rental.host_id, rental.id, offset, max_bytes).await {
        Some(answer) => answer?,
        None => {
            let read = crate::bus::LogRead { rental_id: rental.id, offset, max_bytes };
            crate::bus::read_logs(services, rental.host_id, &read).await?
        }
    };
    match answer {
        Ok(chunk) => Ok(chunk),
        // Not started yet: nothing written so far, more to come.
        Err(_) if RentalState::parse(&rental.state).is_some_and(|s| !s.is_terminal()) => {
            let at = offset.unwrap_or(0);
            Ok(LogChunk { offset: at, end: at, skipped: 0, data: String::new(), running: true })
        }
        Err(why) => Err(AppError::not_found(format!("this rental's log ({why})"))),
    }
}
