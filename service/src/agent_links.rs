//! What the server keeps per connected agent, for as long as that connection lasts: the log
//! reads waiting for it (`logs`), the SSH channels it carries (`tunnels`), and which connection
//! is the host's live one ([`AgentConnections`]).
//!
//! The newest connection of a host wins: [`AgentLinks::connect`] replaces whatever an older
//! one left, and the older one's [`Hooked`] guard, dropped when it finally closes, removes
//! nothing that is not its own. Connections have generations for that, so a stale socket
//! closing late can never unhook a host that has already reconnected.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

/// Each host's one live agent connection: a newer connection's arrival drops the older one's
/// sender, and the older connection, waiting on the other end, ends.
pub type AgentConnections = AgentLinks<tokio::sync::oneshot::Sender<()>>;

struct Entry<L> {
    generation: u64,
    link: L,
}

pub struct AgentLinks<L> {
    entries: Mutex<HashMap<i64, Entry<L>>>,
    generations: AtomicU64,
}

impl<L> Default for AgentLinks<L> {
    fn default() -> Self {
        AgentLinks { entries: Mutex::default(), generations: AtomicU64::new(0) }
    }
}

/// A connection's hold on its host's link; dropped with the connection, it removes the link
/// unless a newer connection of the host has taken over.
pub struct Hooked<L> {
    links: Arc<AgentLinks<L>>,
    host_id: i64,
    pub generation: u64,
}

impl<L> Drop for Hooked<L> {
    fn drop(&mut self) {
        let mut entries = self.links.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.get(&self.host_id).is_some_and(|e| e.generation == self.generation) {
            entries.remove(&self.host_id);
        }
    }
}

impl<L> AgentLinks<L> {
    /// Hooks up a host's new connection with its `link`, dropping any older one's.
    pub fn connect(self: &Arc<Self>, host_id: i64, link: L) -> Hooked<L> {
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).insert(host_id, Entry { generation, link });
        Hooked { links: self.clone(), host_id, generation }
    }

    /// Runs `f` on the host's current link and its generation, if it is connected.
    pub fn with<R>(&self, host_id: i64, f: impl FnOnce(&mut L, u64) -> R) -> Option<R> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.get_mut(&host_id).map(|e| f(&mut e.link, e.generation))
    }

    /// Ends connection `generation` of the host (its link is dropped), if it is still the
    /// host's live one here.
    pub fn disconnect(&self, host_id: i64, generation: u64) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.get(&host_id).is_some_and(|e| e.generation == generation) {
            entries.remove(&host_id);
        }
    }

    /// Runs `f` on the host's link only if it is still that of connection `generation`.
    pub fn with_generation<R>(&self, host_id: i64, generation: u64, f: impl FnOnce(&mut L) -> R) -> Option<R> {
        self.with(host_id, |link, current| (current == generation).then(|| f(link))).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_connection_closing_late_unhooks_nothing_of_the_newer_one() {
        let links = Arc::new(AgentLinks::<&str>::default());
        let old = links.connect(7, "old");
        let new = links.connect(7, "new");
        assert_eq!(links.with(7, |l, _| *l), Some("new"));
        drop(old);
        assert_eq!(links.with_generation(7, new.generation, |l| *l), Some("new"));
        assert_eq!(links.with_generation(7, new.generation - 1, |l| *l), None);
        drop(new);
        assert_eq!(links.with(7, |l, _| *l), None);
    }
}
