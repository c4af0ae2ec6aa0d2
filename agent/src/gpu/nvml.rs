//! Real GPUs through NVML (`libnvidia-ml.so.1`, part of the NVIDIA driver).
//!
//! XID errors are events, not readings: the first telemetry sample starts a thread that waits
//! on an NVML event set and queues each XID for the next sample of its GPU.

use super::nvml_mig;
use super::{GpuHealth, GpuSource, SourceError};
use crate::supervisor::GpuUse;
use cardpool_protocol::{GpuInfo, GpuProcess, GpuSample, THROTTLE_REASONS};
use nvml_wrapper::{
    Device, Nvml,
    bitmasks::{device::ThrottleReasons, event::EventTypes},
    enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor, TemperatureThreshold},
    enums::device::UsedGpuMemory,
    enums::event::XidError,
    error::NvmlError,
};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
};

/// Default slowdown temperature when the driver does not report one.
const DEFAULT_SLOWDOWN_C: u32 = 90;
/// NVLink links a GPU may have (NVML_NVLINK_MAX_LINKS).
const MAX_NVLINKS: u32 = 18;

/// XID codes seen per GPU index since the last sample.
type XidQueue = Arc<Mutex<HashMap<u32, Vec<u64>>>>;

pub struct NvmlSource {
    /// NVML lives as long as the agent; `'static` lets the XID thread borrow it.
    nvml: &'static Nvml,
    xids: OnceLock<XidQueue>,
}

impl NvmlSource {
    /// Loads NVML. Without an NVIDIA driver this fails with a message that says what is
    /// missing and how to run without a GPU.
    pub fn init() -> Result<Self, SourceError> {
        let nvml = Nvml::init().map_err(|err| SourceError(init_error_message(&err)))?;
        Ok(NvmlSource { nvml: Box::leak(Box::new(nvml)), xids: OnceLock::new() })
    }

    /// The queue the XID thread fills, started on first use.
    fn xid_queue(&self) -> &XidQueue {
        self.xids.get_or_init(|| {
            let queue = XidQueue::default();
            let nvml = self.nvml;
            let sink = queue.clone();
            let started = std::thread::Builder::new().name("nvml-xid".into()).spawn(move || watch_xids(nvml, &sink));
            if let Err(err) = started {
                eprintln!("cardpool-agent: cannot watch XID errors: {err}");
            }
            queue
        })
    }

    fn driver(&self) -> (String, String) {
        let driver = self.nvml.sys_driver_version().unwrap_or_else(|_| "unknown".into());
        let cuda = self
            .nvml
            .sys_cuda_driver_version()
            .map(|v| {
                format!("{}.{}", nvml_wrapper::cuda_driver_version_major(v), nvml_wrapper::cuda_driver_version_minor(v))
            })
            .unwrap_or_else(|_| "unknown".into());
        (driver, cuda)
    }

    fn devices(&self) -> Result<Vec<Device<'_>>, SourceError> {
        let count = self.nvml.device_count().map_err(|e| SourceError(format!("NVML device count: {e}")))?;
        (0..count)
            .map(|i| self.nvml.device_by_index(i).map_err(|e| SourceError(format!("NVML device {i}: {e}"))))
            .collect()
    }
}

/// The message for a failed `Nvml::init`.
pub fn init_error_message(err: &NvmlError) -> String {
    match err {
        NvmlError::LibloadingError(inner) => format!(
            "cannot load NVML (libnvidia-ml.so.1): {inner}. Is the NVIDIA driver installed? \
             To try Cardpool without a GPU, pass --simulate 8xH100-80GB"
        ),
        NvmlError::DriverNotLoaded => {
            "the NVIDIA kernel driver is not loaded (NVML: DriverNotLoaded); load it or pass --simulate 8xH100-80GB"
                .into()
        }
        NvmlError::NoPermission => {
            "no permission to use NVML; run the agent as a user that can access /dev/nvidia*".into()
        }
        other => format!("NVML failed to start: {other}; pass --simulate 8xH100-80GB to run without a GPU"),
    }
}

impl GpuSource for NvmlSource {
    fn describe(&self) -> String {
        let (driver, cuda) = self.driver();
        format!("NVML, driver {driver}, CUDA {cuda}")
    }

    fn gpus(&self) -> Result<Vec<GpuInfo>, SourceError> {
        let (driver_version, cuda_version) = self.driver();
        let devices = self.devices()?;
        let bus_to_uuid: Vec<(String, String)> =
            devices.iter().filter_map(|d| Some((d.pci_info().ok()?.bus_id.to_lowercase(), d.uuid().ok()?))).collect();
        devices
            .iter()
            .enumerate()
            .map(|(i, device)| {
                let err = |what: &str, e: NvmlError| SourceError(format!("GPU {i} {what}: {e}"));
                let nvlink_peers = (0..MAX_NVLINKS)
                    .filter_map(|link| {
                        let wrapper = device.link_wrapper_for(link);
                        if !wrapper.is_active().ok()? {
                            return None;
                        }
                        let remote = wrapper.remote_pci_info().ok()?.bus_id.to_lowercase();
                        bus_to_uuid.iter().find(|(bus, _)| *bus == remote).map(|(_, uuid)| uuid.clone())
                    })
                    .fold(Vec::<String>::new(), |mut peers, uuid| {
                        if !peers.contains(&uuid) {
                            peers.push(uuid);
                        }
                        peers
                    });
                Ok(GpuInfo {
                    index: device.index().unwrap_or(i as u32),
                    uuid: device.uuid().map_err(|e| err("uuid", e))?,
                    name: device.name().map_err(|e| err("name", e))?,
                    pci_bus_id: device.pci_info().map_err(|e| err("pci info", e))?.bus_id,
                    memory_total_bytes: device.memory_info().map_err(|e| err("memory info", e))?.total,
                    driver_version: driver_version.clone(),
                    cuda_version: cuda_version.clone(),
                    power_limit_milliwatts: device.power_management_limit().ok(),
                    mig_enabled: device.mig_mode().ok().map(|m| m.current == 1),
                    nvlink_peers,
                    mig_instances: nvml_mig::instances(device),
                    mig_profiles: nvml_mig::profiles(device),
                })
            })
            .collect()
    }

    fn apply_mig_layout(&self, index: u32, profiles: &[String]) -> Result<(), SourceError> {
        let device = self.nvml.device_by_index(index).map_err(|e| SourceError(format!("NVML device {index}: {e}")))?;
        nvml_mig::apply(&device, profiles)
    }

    fn sample(&self, _uses: &[GpuUse]) -> Result<Vec<GpuSample>, SourceError> {
        let count = self.nvml.device_count().map_err(|e| SourceError(format!("NVML device count: {e}")))?;
        let mut xids = std::mem::take(&mut *self.xid_queue().lock().unwrap_or_else(|p| p.into_inner()));
        Ok((0..count)
            .map(|i| match self.nvml.device_by_index(i) {
                Ok(device) => sample_of(i, &device, xids.remove(&i).unwrap_or_default()),
                Err(_) => GpuSample { index: i, ..GpuSample::default() },
            })
            .collect())
    }

    fn health(&self) -> Result<Vec<GpuHealth>, SourceError> {
        let count = self.nvml.device_count().map_err(|e| SourceError(format!("NVML device count: {e}")))?;
        Ok((0..count)
            .map(|i| match self.nvml.device_by_index(i) {
                Ok(device) => health_of(i, &device),
                Err(_) => GpuHealth {
                    index: i,
                    uuid: String::new(),
                    present: false,
                    temperature_c: None,
                    slowdown_temperature_c: DEFAULT_SLOWDOWN_C,
                    uncorrectable_ecc_errors: 0,
                    xid_errors: vec![],
                    throttle_reasons: vec![],
                },
            })
            .collect())
    }
}

/// Waits on NVML's XID event set for as long as the agent runs.
fn watch_xids(nvml: &'static Nvml, sink: &XidQueue) {
    let Ok(mut set) = nvml.create_event_set() else {
        eprintln!("cardpool-agent: NVML cannot create an event set; XID errors will not be reported");
        return;
    };
    let count = nvml.device_count().unwrap_or(0);
    for i in 0..count {
        let Ok(device) = nvml.device_by_index(i) else { continue };
        set = match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
            Ok(set) => set,
            Err(err) => {
                eprintln!("cardpool-agent: GPU {i} cannot report XID errors: {}", err.error);
                match nvml.create_event_set() {
                    Ok(set) => set,
                    Err(_) => return,
                }
            }
        };
    }
    loop {
        match set.wait(1000) {
            Ok(event) => {
                let code = match event.event_data {
                    Some(XidError::Value(code)) => code,
                    Some(XidError::Unknown) => 999,
                    None => continue,
                };
                let index = event.device.index().unwrap_or(u32::MAX);
                sink.lock().unwrap_or_else(|p| p.into_inner()).entry(index).or_default().push(code);
            }
            Err(NvmlError::Timeout) => {}
            Err(err) => {
                eprintln!("cardpool-agent: stopped watching XID errors: {err}");
                return;
            }
        }
    }
}

fn sample_of(index: u32, device: &Device<'_>, xids: Vec<u64>) -> GpuSample {
    let memory = device.memory_info().ok();
    let throttle = device.current_throttle_reasons().unwrap_or(ThrottleReasons::empty());
    let mut processes: Vec<GpuProcess> = device
        .running_compute_processes()
        .unwrap_or_default()
        .into_iter()
        .chain(device.running_graphics_processes().unwrap_or_default())
        .map(|p| GpuProcess {
            pid: p.pid,
            name: std::fs::read_to_string(format!("/proc/{}/comm", p.pid))
                .map(|n| n.trim().to_owned())
                .unwrap_or_else(|_| "?".into()),
            memory_used_bytes: match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            },
        })
        .collect();
    processes.sort_by_key(|p| p.pid);
    processes.dedup_by_key(|p| p.pid);
    GpuSample {
        index,
        uuid: device.uuid().unwrap_or_default(),
        utilization_pct: device.utilization_rates().ok().map(|u| u.gpu),
        memory_used_bytes: memory.as_ref().map(|m| m.used),
        memory_total_bytes: memory.as_ref().map(|m| m.total),
        temperature_c: device.temperature(TemperatureSensor::Gpu).ok(),
        slowdown_temperature_c: device.temperature_threshold(TemperatureThreshold::Slowdown).ok(),
        power_milliwatts: device.power_usage().ok(),
        power_limit_milliwatts: device.enforced_power_limit().ok(),
        energy_millijoules: device.total_energy_consumption().ok(),
        sm_clock_mhz: device.clock_info(Clock::SM).ok(),
        memory_clock_mhz: device.clock_info(Clock::Memory).ok(),
        fan_pct: device.fan_speed(0).ok(),
        ecc_corrected: device.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile).ok(),
        ecc_uncorrected: device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).ok(),
        xid_errors: xids,
        throttle_reasons: throttle_names(throttle),
        processes,
    }
}

fn throttle_names(throttle: ThrottleReasons) -> Vec<String> {
    THROTTLE_REASONS.iter().filter(|(bit, _)| throttle.bits() & bit != 0).map(|(_, name)| (*name).to_owned()).collect()
}

fn health_of(index: u32, device: &Device<'_>) -> GpuHealth {
    let uuid = device.uuid();
    let present = !matches!(uuid, Err(NvmlError::GpuLost));
    let throttle = device.current_throttle_reasons().unwrap_or(ThrottleReasons::empty());
    let alarming = [
        (ThrottleReasons::HW_SLOWDOWN, "hardware slowdown"),
        (ThrottleReasons::HW_THERMAL_SLOWDOWN, "thermal slowdown (hardware)"),
        (ThrottleReasons::SW_THERMAL_SLOWDOWN, "thermal slowdown (software)"),
        (ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN, "power brake"),
    ];
    GpuHealth {
        index,
        uuid: uuid.unwrap_or_default(),
        present,
        temperature_c: device.temperature(TemperatureSensor::Gpu).ok(),
        slowdown_temperature_c: device
            .temperature_threshold(TemperatureThreshold::Slowdown)
            .unwrap_or(DEFAULT_SLOWDOWN_C),
        uncorrectable_ecc_errors: device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).unwrap_or(0),
        xid_errors: vec![],
        throttle_reasons: alarming
            .iter()
            .filter(|(flag, _)| throttle.contains(*flag))
            .map(|(_, name)| (*name).to_owned())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_init_fails_with_a_clear_message_and_no_panic() {
        // On machines without the NVIDIA driver (CI) this is the path; on a GPU host it loads.
        match NvmlSource::init() {
            Ok(source) => assert!(source.describe().starts_with("NVML")),
            Err(err) => {
                assert!(err.0.contains("libnvidia-ml") || err.0.contains("NVIDIA"), "{err}");
                assert!(err.0.contains("--simulate"), "{err}");
            }
        }
    }
}
