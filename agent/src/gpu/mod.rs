//! Where the agent learns about GPUs: a [`GpuSource`], either NVML (real hardware, through
//! `nvml-wrapper`) or [`simulated::SimulatedSource`] (demo and tests, with scripted faults).

pub mod mig;
pub mod nvml;
mod nvml_mig;
pub mod simulated;

use crate::supervisor::GpuUse;
use cardpool_protocol::{GpuInfo, GpuSample};

/// A GPU's health at one moment, as far as the source can tell.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GpuHealth {
    pub index: u32,
    pub uuid: String,
    /// `false` when the GPU has fallen off the bus (NVML: `GpuLost`).
    pub present: bool,
    pub temperature_c: Option<u32>,
    /// Temperature at which the GPU starts slowing itself down.
    pub slowdown_temperature_c: u32,
    pub uncorrectable_ecc_errors: u64,
    /// XID error codes seen (NVML reports these through an event subscription).
    pub xid_errors: Vec<u64>,
    /// Active throttle reasons that signal trouble (thermal, power brake, ...).
    pub throttle_reasons: Vec<String>,
}

/// Why a GPU source cannot answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceError(pub String);

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SourceError {}

/// A provider of GPU facts and health.
pub trait GpuSource: Send + Sync {
    /// Short description for reports ("NVML 550.54.15", "simulated 8xH100-80GB").
    fn describe(&self) -> String;
    fn gpus(&self) -> Result<Vec<GpuInfo>, SourceError>;
    fn health(&self) -> Result<Vec<GpuHealth>, SourceError>;
    /// Every GPU's readings now (telemetry, once a second). `uses` says which rentals run on
    /// which GPUs: NVML measures for itself; the simulator loads those GPUs.
    fn sample(&self, uses: &[GpuUse]) -> Result<Vec<GpuSample>, SourceError>;
    /// Carves GPU `index` into one MIG instance of each of `profiles`, replacing its layout.
    /// Only for a GPU reported with `mig_profiles`; the caller has made sure no workload runs
    /// on it.
    fn apply_mig_layout(&self, index: u32, profiles: &[String]) -> Result<(), SourceError>;
}
