//! Rentals: who holds which GPUs, in which state.
//!
//! One state machine serves every rental kind. Each transition is recorded with its time and
//! reason; billing reads the transitions (ready → stop), never telemetry.

use crate::{
    limits::{RentalLimits, parse_optional_dollars, parse_optional_hours},
    offers::RentalKind,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RentalState {
    /// Booked; GPUs allocated; waiting for the agent.
    Requested,
    /// The agent is attaching the GPUs and starting the workload.
    Provisioning,
    /// The workload reported ready; billing runs.
    Running,
    /// Stop requested; the agent is detaching.
    Stopping,
    Ended,
    /// A spot rental got its preemption notice.
    Preempting,
    Preempted,
    /// The workload or the agent failed before or while running.
    Failed,
    /// The host went offline under a running rental.
    Interrupted,
}

impl RentalState {
    pub const ALL: [RentalState; 9] = [
        RentalState::Requested,
        RentalState::Provisioning,
        RentalState::Running,
        RentalState::Stopping,
        RentalState::Ended,
        RentalState::Preempting,
        RentalState::Preempted,
        RentalState::Failed,
        RentalState::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RentalState::Requested => "requested",
            RentalState::Provisioning => "provisioning",
            RentalState::Running => "running",
            RentalState::Stopping => "stopping",
            RentalState::Ended => "ended",
            RentalState::Preempting => "preempting",
            RentalState::Preempted => "preempted",
            RentalState::Failed => "failed",
            RentalState::Interrupted => "interrupted",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }

    /// No way out: the GPUs are released.
    pub fn is_terminal(self) -> bool {
        matches!(self, RentalState::Ended | RentalState::Preempted | RentalState::Failed | RentalState::Interrupted)
    }

    /// The edges of the state machine (a workload that finishes on its own ends its rental
    /// from provisioning or running).
    pub fn can_become(self, next: RentalState) -> bool {
        use RentalState::*;
        matches!(
            (self, next),
            (Requested, Provisioning | Stopping | Ended | Failed | Interrupted | Preempting)
                | (Provisioning, Running | Stopping | Ended | Failed | Interrupted | Preempting)
                | (Running, Stopping | Ended | Failed | Interrupted | Preempting)
                | (Preempting, Preempted | Failed | Interrupted)
                | (Stopping, Ended | Failed | Interrupted)
        )
    }
}

/// What the renter runs on the GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Workload {
    /// A command line (process runtime) ...
    #[serde(default)]
    pub command: Option<String>,
    /// ... or a container image (container runtime).
    #[serde(default)]
    pub image: Option<String>,
    /// Environment variables, `NAME=value`.
    #[serde(default)]
    pub env: Vec<String>,
    /// OpenSSH public key allowed into the workload.
    #[serde(default)]
    pub ssh_public_key: Option<String>,
}

impl RentalState {
    /// Words for people.
    pub fn label(self) -> &'static str {
        match self {
            RentalState::Requested => "Requested",
            RentalState::Provisioning => "Provisioning",
            RentalState::Running => "Running",
            RentalState::Stopping => "Stopping",
            RentalState::Ended => "Ended",
            RentalState::Preempting => "Preempting",
            RentalState::Preempted => "Preempted",
            RentalState::Failed => "Failed",
            RentalState::Interrupted => "Interrupted",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BookOfferRequest {
    pub host_id: i64,
    pub gpu_model: String,
    pub gpu_count: u32,
    #[serde(default)]
    pub kind: RentalKind,
    pub workload: Workload,
    /// Spot only: the most the renter pays per GPU-hour, micro-dollars.
    #[serde(default)]
    pub bid_micros: Option<i64>,
    /// Reserved only: the window, whole hours, starting in the future.
    #[serde(default)]
    pub starts_at: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(default)]
    pub hours: Option<u32>,
    /// Stop the rental on its own when its GPUs sit idle (see the idle alert).
    #[serde(default)]
    pub stop_when_idle: bool,
    /// On-demand and spot: stop the rental at this cost or billed duration.
    #[serde(default)]
    pub limits: RentalLimits,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Rental {
    pub id: i64,
    pub host_id: i64,
    /// The host's name and location, as renters see it.
    pub host_label: String,
    pub gpu_model: String,
    pub gpu_count: u32,
    pub kind: RentalKind,
    pub state: RentalState,
    /// Price per GPU-hour the rental is billed at now, micro-dollars (spot: the clearing price).
    pub price_micros: i64,
    /// Spot: the renter's bid per GPU-hour.
    pub bid_micros: Option<i64>,
    /// Device indexes of the allocated GPUs on the host.
    pub gpu_indexes: Vec<u32>,
    pub workload: Workload,
    pub starts_at: chrono::DateTime<chrono::Utc>,
    pub ends_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When the agent reported the workload ready (billing starts).
    pub running_since: Option<chrono::DateTime<chrono::Utc>>,
    /// Seconds billed so far and what they cost, micro-dollars.
    pub billed_seconds: i64,
    pub charged_micros: i64,
    /// Seconds run so far and what they cost, up to now: settled into the ledger at least
    /// every minute, so these lead `billed_seconds`/`charged_micros` by less than that.
    pub accrued_seconds: i64,
    pub accrued_micros: i64,
    /// A warning for the renter (low balance, preemption notice), if any.
    pub notice: Option<String>,
    pub stop_when_idle: bool,
    /// The renter's caps on this rental's cost and duration.
    #[serde(default)]
    pub limits: RentalLimits,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// The gang this rental is a member of, and its rank there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang_rank: Option<u32>,
}

impl Rental {
    /// Holding or about to hold GPUs.
    pub fn is_live(&self) -> bool {
        !self.state.is_terminal()
    }
}

/// The booking form as the browser sends it: every field a string.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookingForm {
    pub host_id: i64,
    pub gpu_model: String,
    pub kind: String,
    pub gpu_count: String,
    pub command: String,
    pub image: String,
    /// One `NAME=value` per line.
    pub env: String,
    pub ssh_public_key: String,
    /// Spot bid, dollars per GPU-hour.
    pub bid: String,
    /// Reservation start, `YYYY-MM-DDTHH:MM` in UTC (an `<input type="datetime-local">`).
    pub starts_at: String,
    pub hours: String,
    /// A checkbox: present ("on") when ticked.
    #[serde(default)]
    pub stop_when_idle: Option<String>,
    /// On-demand and spot: the most the rental may cost, dollars; blank for no cap.
    #[serde(default)]
    pub max_cost: String,
    /// On-demand and spot: the most hours it may bill; blank for no cap.
    #[serde(default)]
    pub max_hours: String,
}

/// A booking form's spot bid (dollars per GPU-hour), required for spot and ignored otherwise.
pub(crate) fn spot_bid(kind: RentalKind, raw: &str, fields: &mut crate::FieldErrors) -> Option<i64> {
    match (kind, raw.trim()) {
        (RentalKind::Spot, "") => {
            fields.insert("bid".into(), "your bid per GPU-hour, e.g. 1.20".into());
            None
        }
        (RentalKind::Spot, raw) => crate::money::parse_dollars(raw).map_err(|e| fields.insert("bid".into(), e)).ok(),
        _ => None,
    }
}

/// A form's reservation window (only reservations have one): the start, `YYYY-MM-DDTHH:MM` in
/// UTC as an `<input type="datetime-local">` sends it, and whole hours; each problem goes into
/// `fields`.
pub(crate) fn reserved_window(
    kind: RentalKind,
    starts_at: &str,
    hours: &str,
    fields: &mut crate::FieldErrors,
) -> (Option<chrono::DateTime<chrono::Utc>>, Option<u32>) {
    if kind != RentalKind::Reserved {
        return (None, None);
    }
    let start = chrono::NaiveDateTime::parse_from_str(starts_at.trim(), "%Y-%m-%dT%H:%M")
        .map(|t| t.and_utc())
        .map_err(|_| fields.insert("starts_at".into(), "a start date and time (UTC)".into()))
        .ok();
    let hours =
        hours.trim().parse::<u32>().map_err(|_| fields.insert("hours".into(), "a whole number of hours".into())).ok();
    (start, hours)
}

impl BookingForm {
    /// The request, or every field's problem at once.
    pub fn parse(&self) -> Result<BookOfferRequest, crate::AppError> {
        let mut fields = crate::FieldErrors::new();
        let kind = RentalKind::parse(self.kind.trim()).unwrap_or_default();
        let gpu_count = self.gpu_count.trim().parse::<u32>().unwrap_or_else(|_| {
            fields.insert("gpu_count".into(), "a whole number of GPUs".into());
            0
        });
        let text = |raw: &str| Some(raw.trim().to_owned()).filter(|v| !v.is_empty());
        let bid_micros = spot_bid(kind, &self.bid, &mut fields);
        let (starts_at, hours) = reserved_window(kind, &self.starts_at, &self.hours, &mut fields);
        let limits = RentalLimits {
            max_cost_micros: parse_optional_dollars(&self.max_cost, "max_cost", &mut fields),
            max_duration_secs: parse_optional_hours(&self.max_hours, "max_hours", &mut fields),
        };
        if let Err(crate::AppError::Validation { fields: wrong, .. }) = limits.checked() {
            for (name, message) in wrong {
                let name = if name == "max_cost_micros" { "max_cost" } else { "max_hours" };
                fields.insert(name.into(), message);
            }
        }
        if !fields.is_empty() {
            return Err(crate::AppError::invalid_fields(fields));
        }
        Ok(BookOfferRequest {
            host_id: self.host_id,
            gpu_model: self.gpu_model.trim().to_owned(),
            gpu_count,
            kind,
            workload: Workload {
                command: text(&self.command),
                image: text(&self.image),
                env: self.env.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect(),
                ssh_public_key: text(&self.ssh_public_key),
            },
            bid_micros,
            starts_at,
            hours,
            stop_when_idle: self.stop_when_idle.is_some(),
            limits,
        })
    }
}

/// A new bid for a spot rental.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChangeBidRequest {
    /// Per GPU-hour, micro-dollars.
    pub bid_micros: i64,
}

/// One recorded transition of a rental.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RentalEvent {
    pub state: RentalState,
    pub reason: String,
    pub at: chrono::DateTime<chrono::Utc>,
}

/// A rental with its timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RentalDetail {
    pub rental: Rental,
    pub events: Vec<RentalEvent>,
    /// How to get into the rental over SSH, when this server runs its SSH gateway.
    #[serde(default)]
    pub ssh: Option<SshAccess>,
}

/// The way into a rental: `ssh -p PORT rID@HOST`, through Cardpool's gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SshAccess {
    /// The command to copy, e.g. `ssh -p 2222 r42@cardpool.example`.
    pub command: String,
    pub user: String,
    pub host: String,
    pub port: u16,
    /// The gateway's host key, `SHA256:...`: what `ssh` asks you to confirm the first time.
    pub host_key_fingerprint: String,
}

/// One event of a followed log (`GET /api/v1/rentals/{id}/logs?follow=true`, Server-Sent
/// Events, each event's id the offset to resume from).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LogEvent {
    /// New output.
    Chunk(cardpool_protocol::LogChunk),
    /// The host's agent cannot be reached just now; the feed goes on when it can.
    Waiting { reason: String },
    /// Nothing more will come (the workload ended, or the log is gone).
    End { reason: String },
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any walk along allowed edges ends somewhere sensible: terminal states have no way
        /// out, and nothing ever returns to `requested`.
        #[test]
        fn walks_respect_the_machine(choices in proptest::collection::vec(0usize..9, 0..30)) {
            let mut state = RentalState::Requested;
            for choice in choices {
                let next = RentalState::ALL[choice];
                if state.can_become(next) {
                    prop_assert!(!state.is_terminal());
                    prop_assert_ne!(next, RentalState::Requested);
                    state = next;
                }
            }
            for next in RentalState::ALL {
                if state.is_terminal() {
                    prop_assert!(!state.can_become(next));
                }
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for s in RentalState::ALL {
            assert_eq!(RentalState::parse(s.as_str()), Some(s));
        }
    }
}
