//! Telemetry that lives in memory: the last few minutes of raw frames per host (first paints,
//! `/metrics`), the broadcast channel live dashboards subscribe to (and how many may be open,
//! [`FeedSlot`]), and ingest counters. Raw
//! frames are never stored; the database keeps one-minute rollups (see `ingest`).

use crate::{AppError, AppResult, alerts};
use cardpool_domain::telemetry::{GpuReading, HostSample, LiveEvent};
use cardpool_protocol::{GpuSample, TelemetryFrame};
use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU64, Ordering},
    },
};
use tokio::sync::broadcast;

/// Raw frames kept per host for first paints (five minutes at 1 Hz).
const RECENT_FRAMES: usize = 300;

/// One host's frame as dashboards receive it, with its JSON ready for feeds that may see all
/// of the host's GPUs (serialised once however many dashboards watch).
pub struct Published {
    pub sample: HostSample,
    pub json: String,
}

/// Telemetry that lives in memory: recent frames, the live feed, counters for `/metrics`.
pub struct Hub {
    recent: RwLock<HashMap<i64, VecDeque<Arc<Published>>>>,
    latest: RwLock<HashMap<i64, Arc<TelemetryFrame>>>,
    feed: broadcast::Sender<Arc<Published>>,
    pub frames_stored: AtomicU64,
    pub samples_stored: AtomicU64,
    pub frames_duplicate: AtomicU64,
    pub(crate) alerts: alerts::Memory,
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
            feed: broadcast::channel(4096).0,
            frames_stored: AtomicU64::new(0),
            samples_stored: AtomicU64::new(0),
            frames_duplicate: AtomicU64::new(0),
            alerts: alerts::Memory::default(),
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

    /// The newest raw frame of every host heard from since start-up.
    pub fn latest(&self) -> HashMap<i64, Arc<TelemetryFrame>> {
        self.latest.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn recent(&self, host_id: i64) -> Vec<Arc<Published>> {
        self.recent
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&host_id)
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub(super) fn last_at_ms(&self, host_id: i64) -> Option<i64> {
        self.latest.read().unwrap_or_else(|p| p.into_inner()).get(&host_id).map(|f| f.at_ms)
    }

    /// Frames just stored for `host_id`, oldest first: counted, kept as recent, sent to live
    /// feeds, the newest remembered.
    pub(super) fn stored(&self, host_id: i64, fresh: &[&TelemetryFrame]) {
        self.frames_stored.fetch_add(fresh.len() as u64, Ordering::Relaxed);
        self.samples_stored.fetch_add(fresh.iter().map(|f| f.gpus.len() as u64).sum(), Ordering::Relaxed);
        for frame in fresh {
            self.publish(host_id, frame);
        }
        if let Some(newest) = fresh.last() {
            self.latest.write().unwrap_or_else(|p| p.into_inner()).insert(host_id, Arc::new((*newest).clone()));
        }
    }

    fn publish(&self, host_id: i64, frame: &TelemetryFrame) {
        let sample = HostSample { host_id, at_ms: frame.at_ms, gpus: frame.gpus.iter().map(reading).collect() };
        let json = serde_json::to_string(&LiveEvent::Sample(sample.clone())).unwrap_or_default();
        let published = Arc::new(Published { sample, json });
        {
            let mut recent = self.recent.write().unwrap_or_else(|p| p.into_inner());
            let frames = recent.entry(host_id).or_default();
            if frames.len() == RECENT_FRAMES {
                frames.pop_front();
            }
            frames.push_back(published.clone());
        }
        // No dashboard watching is not an error.
        let _ = self.feed.send(published);
    }
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
