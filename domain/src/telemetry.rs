//! What dashboards show of GPU telemetry: readings as browsers receive them (live over SSE and
//! as history), energy per rental GPU, fleet totals and alerts.
//!
//! Readings are display values (percent, GiB, °C, W) and may be floats; money never is.

use serde::{Deserialize, Serialize};

/// Whose GPUs a dashboard shows. The service decides whether the caller may see them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "scope", content = "id", rename_all = "snake_case")]
pub enum TelemetryScope {
    /// A rental's GPUs, while it holds them (its own window for history).
    Rental(i64),
    /// One host (its provider or an admin).
    Host(i64),
    /// Every host of the calling provider.
    Mine,
    /// Every host (admins).
    Fleet,
}

impl TelemetryScope {
    /// The query string of the live feed and history endpoints.
    pub fn query(&self) -> String {
        match self {
            TelemetryScope::Rental(id) => format!("scope=rental&id={id}"),
            TelemetryScope::Host(id) => format!("scope=host&id={id}"),
            TelemetryScope::Mine => "scope=mine".into(),
            TelemetryScope::Fleet => "scope=fleet".into(),
        }
    }

    pub fn parse(scope: &str, id: Option<i64>) -> Result<Self, crate::AppError> {
        match (scope, id) {
            ("rental", Some(id)) => Ok(TelemetryScope::Rental(id)),
            ("host", Some(id)) => Ok(TelemetryScope::Host(id)),
            ("mine", _) => Ok(TelemetryScope::Mine),
            ("fleet", _) => Ok(TelemetryScope::Fleet),
            _ => Err(crate::AppError::invalid_field("scope", "rental or host (with id), mine or fleet")),
        }
    }
}

/// One GPU's readings at one time (live) or averaged over one minute (history).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuReading {
    pub index: u32,
    pub util_pct: Option<f64>,
    pub memory_used_gib: Option<f64>,
    pub memory_total_gib: Option<f64>,
    pub temperature_c: Option<f64>,
    pub power_w: Option<f64>,
}

/// Readings of some GPUs of one host at one time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostSample {
    pub host_id: i64,
    /// Unix time, milliseconds.
    pub at_ms: i64,
    pub gpus: Vec<GpuReading>,
}

/// Energy one GPU used for one rental.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GpuEnergy {
    pub gpu_index: u32,
    /// Millijoules (1 kWh = 3.6e9 mJ).
    pub energy_mj: i64,
}

/// Energy a provider's host delivered to one rental, all its GPUs together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeliveredEnergy {
    pub rental_id: i64,
    pub hostname: String,
    pub energy_mj: i64,
}

/// Watt-hours, for display.
pub fn watt_hours(energy_mj: i64) -> f64 {
    energy_mj as f64 / 3_600_000.0
}

/// A dashboard's first paint: the last hour (minute averages, then the raw recent seconds),
/// and whether a live feed follows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TelemetryView {
    pub scope: TelemetryScope,
    /// Oldest first.
    pub samples: Vec<HostSample>,
    /// Rentals only: energy per GPU so far.
    pub energy: Vec<GpuEnergy>,
    /// A live feed is available (a rental that still holds its GPUs, any host scope).
    pub live: bool,
    pub now_ms: i64,
}

/// What a live feed sends: one host's readings, or the end of the feed (rental over).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LiveEvent {
    Sample(HostSample),
    End { reason: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    HostOffline,
    OverTemperature,
    XidError,
    UncorrectableEcc,
    GpuIdle,
}

impl AlertKind {
    pub const ALL: [AlertKind; 5] = [
        AlertKind::HostOffline,
        AlertKind::OverTemperature,
        AlertKind::XidError,
        AlertKind::UncorrectableEcc,
        AlertKind::GpuIdle,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::HostOffline => "host_offline",
            AlertKind::OverTemperature => "over_temperature",
            AlertKind::XidError => "xid_error",
            AlertKind::UncorrectableEcc => "uncorrectable_ecc",
            AlertKind::GpuIdle => "gpu_idle",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == raw)
    }

    pub fn label(self) -> &'static str {
        match self {
            AlertKind::HostOffline => "Host offline",
            AlertKind::OverTemperature => "Over temperature",
            AlertKind::XidError => "XID error",
            AlertKind::UncorrectableEcc => "Uncorrectable ECC",
            AlertKind::GpuIdle => "GPU idle on a rental",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Alert {
    pub id: i64,
    pub kind: AlertKind,
    pub host_id: i64,
    pub host_label: String,
    pub gpu_index: Option<u32>,
    pub rental_id: Option<i64>,
    pub message: String,
    pub raised_at: chrono::DateTime<chrono::Utc>,
    /// The condition ended (GPU cooled down, host back); `None` while it lasts.
    pub resolved_at: Option<chrono::DateTime<chrono::Utc>>,
    pub acknowledged_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// One GPU on the fleet dashboard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FleetGpu {
    pub index: u32,
    pub rented: bool,
    pub latest: Option<GpuReading>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FleetHost {
    pub host_id: i64,
    pub name: String,
    pub provider: String,
    pub online: bool,
    pub gpu_model: String,
    pub gpus: Vec<FleetGpu>,
}

/// The whole fleet at a glance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FleetOverview {
    pub hosts: Vec<FleetHost>,
    pub gpus_total: u32,
    pub gpus_online: u32,
    pub gpus_rented: u32,
    /// What running rentals pay per hour, all together, micro-dollars.
    pub revenue_per_hour_micros: i64,
    pub open_alerts: u32,
}
