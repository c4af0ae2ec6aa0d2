//! Telemetry that lives in memory: the last few minutes of raw frames per host (first paints,
//! `/metrics`), the broadcast channel live dashboards subscribe to (and how many may be open,
//! [`FeedSlot`]), and ingest counters. Raw
//! frames are never stored; the database keeps one-minute rollups (see `ingest`).

use super::ingest::Ingest;
use crate::{AppError, AppResult, alerts};
use cardpool_domain::telemetry::{GpuReading, HostSample};
use cardpool_protocol::{GpuSample, TelemetryFrame};
use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex, RwLock, atomic::AtomicU64},
};
use tokio::sync::broadcast;

/// Samples kept per host for first paints (five minutes at 1 Hz).
const RECENT_FRAMES: usize = 300;

/// One host's frame as dashboards receive it, with its JSON ready for feeds that may see all
/// of the host's GPUs (serialised once however many dashboards watch). The sample is shared
/// with the host's recent ones; the JSON is not kept there (first paints are built from the
/// samples), so it lives only until the feeds have sent it: it was most of the memory five
/// minutes of frames took.
pub struct Published {
    pub sample: Arc<HostSample>,
    pub json: String,
}

/// Telemetry that lives in memory: recent frames, the live feed, counters for `/metrics`.
pub struct Hub {
    recent: RwLock<HashMap<i64, VecDeque<Arc<HostSample>>>>,
    latest: RwLock<HashMap<i64, Arc<TelemetryFrame>>>,
    /// The last XID each GPU `(host, index)` raised since start-up (DCGM reports the last one
    /// seen, not only one raised in the latest second).
    last_xid: RwLock<HashMap<(i64, u32), u64>>,
    /// Hosts whose frames last came from another replica over the bus (connected there).
    elsewhere: RwLock<HashSet<i64>>,
    feed: broadcast::Sender<Arc<Published>>,
    pub frames_stored: AtomicU64,
    pub samples_stored: AtomicU64,
    pub frames_duplicate: AtomicU64,
    /// Ingest transactions committed (each stores a batch of every agent's messages).
    pub commits: AtomicU64,
    pub(crate) alerts: alerts::Memory,
    /// Hosts' cursors and the telemetry accepted but not yet written (see `ingest`).
    pub(super) ingest: Ingest,
    /// Open live feeds per account (their sum is the server's).
    feeds: Mutex<HashMap<i64, usize>>,
}

/// One open live feed, counted until it is dropped (the feed's stream ends or its client goes).
pub struct FeedSlot {
    hub: Arc<Hub>,
    user_id: i64,
}

impl Drop for FeedSlot {
    fn drop(&mut self) {
        let mut feeds = self.hub.feeds.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(open) = feeds.get_mut(&self.user_id) {
            *open -= 1;
            if *open == 0 {
                feeds.remove(&self.user_id);
            }
        }
    }
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            recent: RwLock::default(),
            latest: RwLock::default(),
            last_xid: RwLock::default(),
            elsewhere: RwLock::default(),
            feed: broadcast::channel(4096).0,
            frames_stored: AtomicU64::new(0),
            samples_stored: AtomicU64::new(0),
            frames_duplicate: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            alerts: alerts::Memory::default(),
            ingest: Ingest::default(),
            feeds: Mutex::default(),
        }
    }
}

impl Hub {
    /// A slot for one more live feed of `user_id`, within `per_account` for them and `overall`
    /// for the server; a clear error past either.
    pub fn open_feed(self: &Arc<Self>, user_id: i64, per_account: usize, overall: usize) -> AppResult<FeedSlot> {
        let mut feeds = self.feeds.lock().unwrap_or_else(|p| p.into_inner());
        let mine = feeds.get(&user_id).copied().unwrap_or(0);
        if mine >= per_account {
            return Err(AppError::conflict(format!(
                "you already have {per_account} live feeds open; close one (a tab or a dashboard) first"
            )));
        }
        if feeds.values().sum::<usize>() >= overall {
            return Err(AppError::Unavailable(
                "the server is at its limit of live feeds; try again in a minute".into(),
            ));
        }
        *feeds.entry(user_id).or_default() += 1;
        Ok(FeedSlot { hub: self.clone(), user_id })
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Published>> {
        self.feed.subscribe()
    }

    /// Dashboards watching right now.
    pub fn watchers(&self) -> usize {
        self.feed.receiver_count()
    }

    /// The newest raw frame of every host heard from since start-up (shown as it arrived,
    /// perhaps a moment before it is stored).
    pub fn latest(&self) -> HashMap<i64, Arc<TelemetryFrame>> {
        self.latest.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The last XID GPU `index` of `host_id` raised since start-up, if any.
    pub fn last_xid(&self, host_id: i64, index: u32) -> Option<u64> {
        self.last_xid.read().unwrap_or_else(|p| p.into_inner()).get(&(host_id, index)).copied()
    }

    pub(super) fn recent(&self, host_id: i64) -> Vec<Arc<HostSample>> {
        self.recent
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&host_id)
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Frames that just arrived from `host_id`, connected here, oldest first, shown at once:
    /// those newer than the newest shown (a replay is not shown twice) are kept as recent, sent
    /// to live feeds, and the newest remembered. This happens before they are stored, so a
    /// dashboard is not held up by the database; what is stored (and billed) is decided by
    /// `ingest` alone. Returns the frames it showed (for the other replicas).
    pub(super) fn arrived<'f>(&self, host_id: i64, frames: &'f [TelemetryFrame]) -> Vec<&'f TelemetryFrame> {
        self.elsewhere.write().unwrap_or_else(|p| p.into_inner()).remove(&host_id);
        self.show(host_id, frames)
    }

    /// Frames another replica shared of a host connected there: shown like [`Hub::arrived`]'s,
    /// but this replica stores nothing of them and leaves the host out of its `/metrics`.
    pub fn arrived_from_peer(&self, host_id: i64, frames: &[TelemetryFrame]) {
        self.elsewhere.write().unwrap_or_else(|p| p.into_inner()).insert(host_id);
        self.show(host_id, frames);
    }

    /// The host's rentals changed: its next frames are observed against them afresh.
    pub fn rentals_changed(&self, host_id: i64) {
        self.ingest.rentals_changed(host_id);
    }

    /// Whether the host's frames come through this replica (so its `/metrics` exports them).
    pub fn is_connected_here(&self, host_id: i64) -> bool {
        !self.elsewhere.read().unwrap_or_else(|p| p.into_inner()).contains(&host_id)
    }

    fn show<'f>(&self, host_id: i64, frames: &'f [TelemetryFrame]) -> Vec<&'f TelemetryFrame> {
        // One write lock decides what is new and marks it shown, so two messages of a host read
        // at once (a reconnect overlapping its old socket) cannot both show the same frames.
        let new: Vec<&TelemetryFrame> = {
            let mut latest = self.latest.write().unwrap_or_else(|p| p.into_inner());
            let shown = latest.get(&host_id).map(|f| f.at_ms);
            let new: Vec<&TelemetryFrame> = frames.iter().filter(|f| shown.is_none_or(|s| f.at_ms > s)).collect();
            if let Some(newest) = new.last() {
                latest.insert(host_id, Arc::new((*newest).clone()));
            }
            new
        };
        for frame in &new {
            self.publish(host_id, frame);
        }
        let xids: Vec<(u32, u64)> =
            new.iter().flat_map(|f| &f.gpus).filter_map(|g| Some((g.index, *g.xid_errors.last()?))).collect();
        if !xids.is_empty() {
            let mut last = self.last_xid.write().unwrap_or_else(|p| p.into_inner());
            for (index, xid) in xids {
                last.insert((host_id, index), xid);
            }
        }
        new
    }

    fn publish(&self, host_id: i64, frame: &TelemetryFrame) {
        let sample = HostSample { host_id, at_ms: frame.at_ms, gpus: frame.gpus.iter().map(reading).collect() };
        let json = sample_json(&sample);
        let sample = Arc::new(sample);
        {
            let mut recent = self.recent.write().unwrap_or_else(|p| p.into_inner());
            let frames = recent.entry(host_id).or_default();
            if frames.len() == RECENT_FRAMES {
                frames.pop_front();
            }
            frames.push_back(sample.clone());
        }
        // No dashboard watching is not an error.
        let _ = self.feed.send(Arc::new(Published { sample, json }));
    }
}

/// `LiveEvent::Sample(sample)` as JSON, without copying the sample into an event first.
fn sample_json(sample: &HostSample) -> String {
    #[derive(serde::Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Borrowed<'s> {
        Sample(&'s HostSample),
    }
    serde_json::to_string(&Borrowed::Sample(sample)).unwrap_or_default()
}

pub(super) const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A raw sample as dashboards show it.
pub fn reading(gpu: &GpuSample) -> GpuReading {
    GpuReading {
        index: gpu.index,
        util_pct: gpu.utilization_pct.map(f64::from),
        memory_used_gib: gpu.memory_used_bytes.map(|b| b as f64 / GIB),
        memory_total_gib: gpu.memory_total_bytes.map(|b| b as f64 / GIB),
        temperature_c: gpu.temperature_c.map(f64::from),
        power_w: gpu.power_milliwatts.map(|mw| f64::from(mw) / 1000.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cardpool_domain::telemetry::LiveEvent;

    #[test]
    fn sample_json_is_the_live_events() {
        let gpu = GpuReading { index: 3, util_pct: Some(41.5), memory_used_gib: Some(12.25), ..Default::default() };
        let sample = HostSample { host_id: 7, at_ms: 1_765_000_000_123, gpus: vec![gpu.clone(), gpu] };
        let json = sample_json(&sample);
        assert_eq!(json, serde_json::to_string(&LiveEvent::Sample(sample.clone())).unwrap());
        assert_eq!(serde_json::from_str::<LiveEvent>(&json).unwrap(), LiveEvent::Sample(sample));
    }
}
