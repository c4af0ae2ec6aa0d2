//! GPU telemetry: ingest from agents, live fan-out, history, energy, and who may see what.
//!
//! An agent's frames are taken by [`accept`](ingest::accept): shown to live dashboards at once,
//! observed for alerts, and summed into the open batch in memory, which is written every
//! `flush_interval` in one transaction for every agent at once (one-minute rollups, energy per
//! rented GPU, hosts' cursors; see `flush`) and only then acknowledged. Raw frames stay in
//! memory only ([`Hub`]): the last few minutes per host for first paints and `/metrics`, and a
//! broadcast channel for live dashboards. Each subscriber holds a [`Grant`] ([`access`]) that is
//! re-checked while the feed runs. [`views`] are the dashboards' reads; [`retention`] deletes
//! old rollups.
//!
//! Replicas: each stores the hosts connected to it; their frames reach the other replicas'
//! dashboards over the bus (`crate::bus`), and a host's cursor moves only from where the
//! replica storing it left it, so an agent that moves is never stored twice.

mod access;
mod flush;
mod hub;
mod ingest;
mod retention;
mod views;

pub use access::{Grant, Recheck, grant, recheck};
pub use hub::{FeedSlot, Hub, Published, reading};
pub use ingest::{Receipt, accept, ingest};
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
    /// How often accepted telemetry is written (and acknowledged): each GPU-minute's rollup is
    /// written once per flush, so a longer interval writes less for the same fleet.
    pub flush_interval: std::time::Duration,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        TelemetrySettings {
            idle_util_pct: 5,
            idle_minutes: 30,
            retention_days: 30,
            feeds_per_account: 16,
            feeds: 5000,
            flush_interval: std::time::Duration::from_secs(2),
        }
    }
}
