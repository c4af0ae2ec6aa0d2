//! GPU telemetry: ingest from agents, live fan-out, history, energy, and who may see what.
//!
//! An agent's frames are stored once as one-minute rollups and energy per rented GPU
//! ([`ingest`](ingest::ingest), a group commit shared by every agent sending at the time),
//! acknowledged only after the commit. Raw frames stay in memory only ([`Hub`]): the last few
//! minutes per host for first paints and `/metrics`, and a broadcast channel for live
//! dashboards, which get each frame as it arrives rather than after its transaction. Each subscriber holds a [`Grant`] ([`access`]) that is
//! re-checked while the feed runs. [`views`] are the dashboards' reads; [`retention`] deletes
//! old rollups.
//!
//! In-process only: with several replicas, a dashboard sees the hosts connected to its own
//! replica live (history and alerts come from the database and are complete); a NATS subject
//! per host would carry frames across replicas.

mod access;
mod hub;
mod ingest;
mod retention;
mod views;

pub use access::{Grant, Recheck, grant, recheck};
pub use hub::{FeedSlot, Hub, Published, reading};
pub use ingest::ingest;
pub use retention::apply_retention;
pub use views::{GpuLabels, MetricsSnapshot, fleet, metrics_snapshot, my_hosts, provider_energy, rental_energy, view};

/// History dashboards show by default.
pub const HISTORY_MINUTES: i64 = 60;

/// Telemetry tunables.
#[derive(Debug, Clone)]
pub struct TelemetrySettings {
    /// A rented GPU below this utilisation counts as idle.
    pub idle_util_pct: u32,
    /// Idle this long raises the alert (and stops rentals that asked for it).
    pub idle_minutes: u32,
    /// Days of one-minute rollups kept.
    pub retention_days: u32,
    /// Live feeds one account may hold open at once, and the whole server.
    pub feeds_per_account: usize,
    pub feeds: usize,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        TelemetrySettings { idle_util_pct: 5, idle_minutes: 30, retention_days: 30, feeds_per_account: 16, feeds: 5000 }
    }
}
