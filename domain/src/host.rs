//! Provider hosts as people and agents see them: enrollment, status, GPUs.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// MIG layouts: the profiles a GPU can make and the rule a layout keeps, as the agent keeps it.
pub use cardpool_protocol::{MigProfile, mig};

/// Where a host stands. Transitions are recorded as [`HostEvent`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum HostStatus {
    /// Enrolled and heard from within the grace period.
    Online,
    /// Enrolled but silent for longer than the grace period (or never connected yet).
    Offline,
    /// Its credential was revoked; it can never connect again.
    Revoked,
}

impl HostStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            HostStatus::Online => "online",
            HostStatus::Offline => "offline",
            HostStatus::Revoked => "revoked",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [HostStatus::Online, HostStatus::Offline, HostStatus::Revoked].into_iter().find(|s| s.as_str() == raw)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateEnrollmentTokenRequest {
    /// Public location label for the host it will enroll, e.g. "Frankfurt, DE".
    #[serde(default)]
    pub location: Option<String>,
}

/// A single-use enrollment token, shown once, with the exact command to run on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedEnrollmentToken {
    pub token: String,
    pub expires_at: DateTime<Utc>,
    pub command: String,
}

#[derive(Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnrollHostRequest {
    pub token: String,
    pub hostname: String,
}

impl std::fmt::Debug for EnrollHostRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnrollHostRequest").field("hostname", &self.hostname).finish_non_exhaustive()
    }
}

/// What an agent receives at enrollment. `credential` is its secret for every later call.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EnrolledHost {
    pub host_id: i64,
    pub credential: String,
}

impl std::fmt::Debug for EnrolledHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnrolledHost").field("host_id", &self.host_id).finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostSummary {
    pub id: i64,
    pub hostname: String,
    pub location: Option<String>,
    pub status: HostStatus,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    pub agent_version: Option<String>,
    pub gpu_count: u32,
    /// e.g. "8× NVIDIA H100 80GB HBM3"
    pub gpu_summary: String,
    pub created_at: DateTime<Utc>,
    /// Offered on the market.
    pub listed: bool,
    /// Verified by an admin (the badge renters can filter on).
    pub verified: bool,
    /// Why an admin took the host off the market; while set it cannot be listed.
    pub held_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuView {
    pub index: i32,
    pub uuid: String,
    pub model: String,
    pub memory_bytes: i64,
    pub pci_bus_id: String,
    pub driver_version: String,
    pub cuda_version: String,
    pub nvlink_peers: Vec<String>,
    /// `None` where the GPU has no MIG.
    #[serde(default)]
    pub mig_enabled: Option<bool>,
    /// The MIG instances the agent reports on this GPU.
    #[serde(default)]
    pub mig_instances: Vec<cardpool_protocol::MigInstance>,
    /// How the provider sells it: whole, or as its MIG instances (each a unit of its own).
    #[serde(default)]
    pub sold_as: GpuSale,
    /// The MIG profiles the host's agent can carve this GPU into; empty where it cannot (the
    /// layout is then made on the host with `nvidia-smi mig`).
    #[serde(default)]
    pub mig_profiles: Vec<MigProfile>,
    /// The layout asked for that the agent has not yet carved (one profile per instance).
    #[serde(default)]
    pub mig_layout_pending: Option<Vec<String>>,
    /// Why the agent could not carve the last layout asked for.
    #[serde(default)]
    pub mig_layout_error: Option<String>,
    /// `available`, `reconfiguring` (a MIG layout change is pending) or `missing`.
    pub state: String,
}

/// How a GPU is sold. A GPU with MIG on can be sold whole or as its MIG instances; the choice
/// changes only while nothing is rented or reserved on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GpuSale {
    #[default]
    Whole,
    Mig,
}

impl GpuSale {
    pub fn as_str(self) -> &'static str {
        match self {
            GpuSale::Whole => "whole",
            GpuSale::Mig => "mig",
        }
    }
}

/// A provider's choice of how one GPU is sold (`PUT /api/v1/hosts/{id}/gpu-sale`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuSaleRequest {
    /// The GPU's device index on the host.
    pub gpu_index: i32,
    pub sold_as: GpuSale,
}

/// A provider's choice of one GPU's MIG layout (`PUT /api/v1/hosts/{id}/mig-layout`): one
/// profile name per instance, e.g. `["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MigLayoutRequest {
    /// The GPU's device index on the host.
    pub gpu_index: i32,
    #[cfg_attr(feature = "openapi", schema(max_items = 7))]
    pub profiles: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostEvent {
    pub status: HostStatus,
    pub reason: String,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostDetail {
    pub host: HostSummary,
    pub gpus: Vec<GpuView>,
    /// Newest first.
    pub events: Vec<HostEvent>,
    /// One entry per priced GPU model.
    pub prices: Vec<GpuModelPrice>,
    /// The agent's latest self-test, and when it arrived.
    pub self_test: Option<cardpool_protocol::SelfTestReport>,
    pub self_test_at: Option<DateTime<Utc>>,
    /// The fabric its provider declares, checked against the agent's links.
    #[serde(default)]
    pub fabric: Option<crate::fabric::FabricView>,
    /// The physical links the agent reports.
    #[serde(default)]
    pub links: Vec<cardpool_protocol::NicInfo>,
}

/// Most a provider may ask per GPU-hour: $1,000.
pub const MAX_PRICE_MICROS: i64 = 1_000 * crate::money::MICROS_PER_DOLLAR;

/// A provider's prices for one GPU model on one host, in micro-dollars per GPU-hour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuModelPrice {
    pub gpu_model: String,
    /// On-demand price per GPU-hour.
    pub on_demand_micros: i64,
    /// Reserved (prepaid) price per GPU-hour; at most the on-demand price.
    pub reserved_micros: i64,
    /// Lowest spot bid accepted per GPU-hour; at most the on-demand price.
    pub spot_min_bid_micros: i64,
}

impl GpuModelPrice {
    /// Checks bounds and ordering, reporting every bad field at once.
    pub fn validate(&self) -> Result<(), crate::AppError> {
        let mut fields = crate::FieldErrors::new();
        for (field, value) in [
            ("on_demand", self.on_demand_micros),
            ("reserved", self.reserved_micros),
            ("spot_min_bid", self.spot_min_bid_micros),
        ] {
            if value <= 0 {
                fields.insert(field.into(), "must be more than $0".into());
            } else if value > MAX_PRICE_MICROS {
                fields.insert(field.into(), "must be at most $1000 per GPU-hour".into());
            }
        }
        if fields.is_empty() {
            if self.reserved_micros > self.on_demand_micros {
                fields.insert("reserved".into(), "must not be above the on-demand price".into());
            }
            if self.spot_min_bid_micros > self.on_demand_micros {
                fields.insert("spot_min_bid".into(), "must not be above the on-demand price".into());
            }
        }
        if self.gpu_model.trim().is_empty() {
            fields.insert("gpu_model".into(), "choose a GPU model".into());
        }
        if fields.is_empty() { Ok(()) } else { Err(crate::AppError::invalid_fields(fields)) }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SetHostListedRequest {
    pub listed: bool,
}
