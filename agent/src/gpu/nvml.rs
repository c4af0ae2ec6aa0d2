//! Real GPUs through NVML (`libnvidia-ml.so.1`, part of the NVIDIA driver).

use super::{GpuHealth, GpuSource, SourceError};
use cardpool_protocol::GpuInfo;
use nvml_wrapper::{
    Device, Nvml,
    bitmasks::device::ThrottleReasons,
    enum_wrappers::device::{EccCounter, MemoryError, TemperatureSensor, TemperatureThreshold},
    error::NvmlError,
};

/// Default slowdown temperature when the driver does not report one.
const DEFAULT_SLOWDOWN_C: u32 = 90;
/// NVLink links a GPU may have (NVML_NVLINK_MAX_LINKS).
const MAX_NVLINKS: u32 = 18;

pub struct NvmlSource {
    nvml: Nvml,
}

impl NvmlSource {
    /// Loads NVML. Without an NVIDIA driver this fails with a message that says what is
    /// missing and how to run without a GPU.
    pub fn init() -> Result<Self, SourceError> {
        Nvml::init().map(|nvml| NvmlSource { nvml }).map_err(|err| SourceError(init_error_message(&err)))
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
                })
            })
            .collect()
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
