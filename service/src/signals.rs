//! Wake-ups for connected agents: when a rental on a host changes in a way its agent must act
//! on (booked, stop requested, preempted), the service pokes that host's gateway connection so
//! the command goes out now rather than at the next periodic reconcile. And [`Stopping`]: the
//! server is shutting down, so connections that never end on their own (agent sockets, live
//! feeds) end now, and their clients reconnect (to another replica, if there is one).
//!
//! These are this process's connections; `Services::wake_host` also tells the other replicas
//! over the bus (see `bus`), and without the bus a connection still picks the change up at its
//! agent's next heartbeat.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};
use tokio::sync::{Notify, watch};

/// Whether the server has begun to stop. Long-lived connections wait on [`Stopping::wait`].
pub struct Stopping(watch::Sender<bool>);

impl Default for Stopping {
    fn default() -> Self {
        Stopping(watch::channel(false).0)
    }
}

impl Stopping {
    /// Starts the stop: every waiter wakes.
    pub fn begin(&self) {
        self.0.send_replace(true);
    }

    /// Completes once the stop has begun (at once if it already has).
    pub async fn wait(&self) {
        let mut stopping = self.0.subscribe();
        // The sender lives in `self`, which outlives this borrow: the wait cannot fail.
        let _ = stopping.wait_for(|stopping| *stopping).await;
    }
}

#[derive(Default)]
pub struct HostSignals {
    hosts: Mutex<HashMap<i64, Arc<Notify>>>,
}

impl HostSignals {
    /// The notifier a host's connection waits on.
    pub fn subscribe(&self, host_id: i64) -> Arc<Notify> {
        self.hosts.lock().unwrap_or_else(|p| p.into_inner()).entry(host_id).or_default().clone()
    }

    /// Wakes the host's connection (or the next one to wait, if it is between waits).
    pub fn notify(&self, host_id: i64) {
        if let Some(notify) = self.hosts.lock().unwrap_or_else(|p| p.into_inner()).get(&host_id) {
            notify.notify_one();
        }
    }
}
