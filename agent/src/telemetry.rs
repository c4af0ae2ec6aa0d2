//! Telemetry on the agent's side: a sampler that reads every GPU once a second whether or not
//! the server is reachable, and the bounded buffer it fills.
//!
//! Frames stay in the buffer until the server acknowledges them (after it has stored them), so
//! a dropped connection or a server crash loses nothing: the next connection replays whatever
//! is unacknowledged, and the server ignores what it already has by `(stream, sequence)`.
//! When the server stays away longer than the buffer holds, the oldest frames go first and
//! `dropped` counts them, so the loss is visible rather than silent.

use crate::{gpu::GpuSource, supervisor::Supervisor};
use cardpool_protocol::{GpuSample, TelemetryFrame};
use std::{
    collections::VecDeque,
    sync::Mutex,
    time::{Duration, SystemTime, UNIX_EPOCH},
};
use tokio::sync::Notify;

/// Frames kept while the server is unreachable: 15 minutes at one frame a second.
pub const BUFFER_FRAMES: usize = 900;
/// Frames sent in one message (a replay goes out in pieces this size).
pub const FRAMES_PER_MESSAGE: usize = 60;
/// Frames sent but not yet acknowledged before the sender waits for an ack.
pub const IN_FLIGHT_FRAMES: u64 = 300;

/// Unacknowledged frames, oldest first.
pub struct TelemetryBuffer {
    /// This agent process's stream id: its start time in ms, so a restart counts as newer.
    pub stream: u64,
    next_sequence: u64,
    frames: VecDeque<TelemetryFrame>,
    capacity: usize,
    dropped: u64,
}

impl TelemetryBuffer {
    pub fn new(capacity: usize) -> Self {
        TelemetryBuffer {
            stream: now_ms().max(0) as u64,
            next_sequence: 1,
            frames: VecDeque::with_capacity(capacity.min(BUFFER_FRAMES)),
            capacity: capacity.max(1),
            dropped: 0,
        }
    }

    /// Adds a frame, dropping the oldest when full; returns its sequence number.
    pub fn push(&mut self, at_ms: i64, gpus: Vec<GpuSample>) -> u64 {
        if self.frames.len() == self.capacity {
            self.frames.pop_front();
            self.dropped += 1;
        }
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        self.frames.push_back(TelemetryFrame { sequence, at_ms, gpus });
        sequence
    }

    /// Forgets every frame up to `sequence` of `stream` (the server has them).
    pub fn ack(&mut self, stream: u64, sequence: u64) {
        if stream != self.stream {
            return;
        }
        while self.frames.front().is_some_and(|f| f.sequence <= sequence) {
            self.frames.pop_front();
        }
    }

    /// Up to `max` frames after `sequence`, oldest first.
    pub fn after(&self, sequence: u64, max: usize) -> Vec<TelemetryFrame> {
        self.frames.iter().filter(|f| f.sequence > sequence).take(max).cloned().collect()
    }

    /// The sequence of the oldest frame still held, minus one (what a new connection has "sent").
    pub fn acked(&self) -> u64 {
        self.frames.front().map_or(self.next_sequence - 1, |f| f.sequence - 1)
    }

    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
}

pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or_default()
}

/// Samples every GPU each `interval`, forever, into `buffer`; wakes `fresh` after each frame.
pub async fn sample_forever(
    source: &dyn GpuSource,
    supervisor: &Supervisor,
    buffer: &Mutex<TelemetryBuffer>,
    fresh: &Notify,
    interval: Duration,
) {
    let mut every = tokio::time::interval(interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut complained = false;
    loop {
        every.tick().await;
        match source.sample(&supervisor.gpu_use()) {
            Ok(gpus) => {
                buffer.lock().unwrap_or_else(|p| p.into_inner()).push(now_ms(), gpus);
                fresh.notify_one();
                complained = false;
            }
            Err(err) if !complained => {
                eprintln!("cardpool-agent: cannot sample the GPUs: {err}");
                complained = true;
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ten_minutes_of_eight_gpus_fit_and_overflow_drops_the_oldest_with_a_count() {
        let gpus = || (0..8).map(|index| GpuSample { index, ..GpuSample::default() }).collect::<Vec<_>>();
        let mut buffer = TelemetryBuffer::new(BUFFER_FRAMES);
        for t in 0..600 {
            buffer.push(t, gpus());
        }
        assert_eq!((buffer.len(), buffer.dropped()), (600, 0), "10 minutes at 1 Hz fit");
        for t in 600..1000 {
            buffer.push(t, gpus());
        }
        assert_eq!(buffer.len(), BUFFER_FRAMES);
        assert_eq!(buffer.dropped(), 100);
        assert_eq!(buffer.after(0, 1)[0].sequence, 101, "the oldest went first");
        assert_eq!(buffer.acked(), 100);
    }

    proptest! {
        /// Whatever the acks, the frames left are exactly those after the highest ack, in order.
        #[test]
        fn acks_drop_exactly_the_acknowledged_prefix(pushes in 1usize..200, acks in proptest::collection::vec(0u64..250, 0..10)) {
            let mut buffer = TelemetryBuffer::new(1000);
            for t in 0..pushes {
                buffer.push(t as i64, vec![]);
            }
            let stream = buffer.stream;
            buffer.ack(stream + 1, 1_000_000);
            prop_assert_eq!(buffer.len(), pushes, "another stream's ack changes nothing");
            let mut highest = 0;
            for ack in acks {
                buffer.ack(stream, ack);
                highest = highest.max(ack);
            }
            let left: Vec<u64> = buffer.after(0, usize::MAX).iter().map(|f| f.sequence).collect();
            let expected: Vec<u64> = ((highest + 1)..=(pushes as u64)).collect();
            prop_assert_eq!(left, expected);
        }
    }
}
