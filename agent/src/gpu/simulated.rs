//! Simulated GPUs for demos and tests, described like `8xH100-80GB` or
//! `4xH100-80GB,2xL40S-48GB` (a MIG layout after a group: `8xH100-80GB:mig=3g.40gb*2`, see
//! [`super::mig`]; such GPUs have MIG on and take any other layout the server sends), with
//! scripted faults (`xid:0:79`, `ecc:1`, `overheat:2`,
//! `throttle:3`, `offbus:4`) so every failure path can be exercised without hardware.

use super::{GpuHealth, GpuSource, SourceError, mig};
use crate::supervisor::GpuUse;
use cardpool_protocol::{GpuInfo, GpuProcess, GpuSample};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::sync::{
    Mutex,
    atomic::{AtomicBool, Ordering},
};

/// Models the simulator knows: (spec name, marketing name, power limit W, MIG, NVLink).
const CATALOG: &[(&str, &str, u32, bool, bool)] = &[
    ("H200-141GB", "NVIDIA H200", 700, true, true),
    ("H100-80GB", "NVIDIA H100 80GB HBM3", 700, true, true),
    ("A100-80GB", "NVIDIA A100-SXM4-80GB", 400, true, true),
    ("A100-40GB", "NVIDIA A100-SXM4-40GB", 400, true, true),
    ("L40S-48GB", "NVIDIA L40S", 350, false, false),
    ("RTX4090-24GB", "NVIDIA GeForce RTX 4090", 450, false, false),
    ("RTX3090-24GB", "NVIDIA GeForce RTX 3090", 350, false, false),
];

const DRIVER_VERSION: &str = "550.54.15";
const CUDA_VERSION: &str = "12.4";
const SLOWDOWN_C: u32 = 87;
const IDLE_TEMPERATURE_C: u32 = 34;

/// A scripted fault on one simulated GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    Xid { gpu: u32, code: u64 },
    Ecc { gpu: u32 },
    Overheat { gpu: u32 },
    Throttle { gpu: u32 },
    OffBus { gpu: u32 },
}

impl Fault {
    /// Parses `xid:GPU:CODE`, `ecc:GPU`, `overheat:GPU`, `throttle:GPU` or `offbus:GPU`.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let parts: Vec<&str> = raw.split(':').collect();
        let gpu = |s: &str| s.parse::<u32>().map_err(|_| format!("{raw:?}: {s:?} is not a GPU index"));
        match parts.as_slice() {
            ["xid", g, code] => Ok(Fault::Xid {
                gpu: gpu(g)?,
                code: code.parse().map_err(|_| format!("{raw:?}: {code:?} is not an XID code"))?,
            }),
            ["ecc", g] => Ok(Fault::Ecc { gpu: gpu(g)? }),
            ["overheat", g] => Ok(Fault::Overheat { gpu: gpu(g)? }),
            ["throttle", g] => Ok(Fault::Throttle { gpu: gpu(g)? }),
            ["offbus", g] => Ok(Fault::OffBus { gpu: gpu(g)? }),
            _ => Err(format!(
                "unknown fault {raw:?}; use xid:GPU:CODE, ecc:GPU, overheat:GPU, throttle:GPU or offbus:GPU"
            )),
        }
    }

    fn gpu(&self) -> u32 {
        match self {
            Fault::Xid { gpu, .. }
            | Fault::Ecc { gpu }
            | Fault::Overheat { gpu }
            | Fault::Throttle { gpu }
            | Fault::OffBus { gpu } => *gpu,
        }
    }
}

#[derive(Debug, Clone)]
pub struct SimulatedSource {
    spec: String,
    /// The GPUs as they are now (a MIG layout the server sends re-carves one).
    gpus: Arc<Mutex<Vec<GpuInfo>>>,
    faults: Vec<Fault>,
    /// XID faults are events: reported in the first sample only.
    xids_reported: std::sync::Arc<AtomicBool>,
    /// Each GPU's energy counter, as NVML keeps one: (when it was last advanced, seconds since
    /// the epoch; millijoules so far).
    energy: std::sync::Arc<Mutex<Vec<(f64, u64)>>>,
}

impl SimulatedSource {
    /// Builds the GPUs of `spec`; `seed` (e.g. the hostname) makes UUIDs stable per host and
    /// distinct between hosts.
    pub fn new(spec: &str, seed: &str, faults: Vec<Fault>) -> Result<Self, String> {
        let mut gpus = Vec::new();
        for group in spec.split(',').map(str::trim).filter(|g| !g.is_empty()) {
            let (group_spec, layout) = match group.split_once(':') {
                Some((head, options)) => {
                    let layout = options.strip_prefix("mig=").ok_or_else(|| {
                        format!("{group:?}: after ':' comes a MIG layout, e.g. 8xH100-80GB:mig=3g.40gb*2")
                    })?;
                    (head, Some(layout))
                }
                None => (group, None),
            };
            let (count, model) = group_spec.split_once(['x', 'X']).ok_or_else(|| bad_spec(group))?;
            let count: u32 = count.parse().map_err(|_| bad_spec(group))?;
            if count == 0 || count > 16 {
                return Err(format!("{group:?}: a host has 1 to 16 GPUs of a model"));
            }
            let &(_, name, power_w, has_mig, nvlink) = CATALOG
                .iter()
                .find(|(key, ..)| key.eq_ignore_ascii_case(model))
                .ok_or_else(|| format!("unknown GPU model {model:?}; known: {}", known_models()))?;
            let memory_gib: u64 =
                model.rsplit_once('-').and_then(|(_, m)| m.trim_end_matches("GB").parse().ok()).unwrap_or(0);
            let memory_total_bytes = memory_gib * 1024 * 1024 * 1024;
            let profiles = mig::profiles(model, memory_total_bytes);
            let layout = match (layout, &profiles) {
                (None, _) => None,
                (Some(_), None) => {
                    return Err(format!("{model} has no MIG; MIG models: H200-141GB, H100-80GB, A100-80GB, A100-40GB"));
                }
                (Some(layout), Some(known)) => {
                    let names = cardpool_protocol::mig::parse_layout(layout)?;
                    let chosen = cardpool_protocol::mig::check_layout(known, &names)
                        .map_err(|why| format!("MIG layout {layout:?} of {model}: {why}"))?;
                    Some(chosen.into_iter().cloned().collect::<Vec<_>>())
                }
            };
            let first = gpus.len() as u32;
            let uuids: Vec<String> = (first..first + count).map(|i| uuid_for(seed, i)).collect();
            for (offset, uuid) in uuids.iter().enumerate() {
                let index = first + offset as u32;
                gpus.push(GpuInfo {
                    index,
                    uuid: uuid.clone(),
                    name: name.to_owned(),
                    pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + index * 8),
                    memory_total_bytes,
                    driver_version: DRIVER_VERSION.to_owned(),
                    cuda_version: CUDA_VERSION.to_owned(),
                    power_limit_milliwatts: Some(power_w * 1000),
                    mig_enabled: has_mig.then_some(layout.is_some()),
                    nvlink_peers: if nvlink { uuids.iter().filter(|u| *u != uuid).cloned().collect() } else { vec![] },
                    mig_instances: layout
                        .as_deref()
                        .map(|layout| mig::instances(uuid, &layout.iter().collect::<Vec<_>>()))
                        .unwrap_or_default(),
                    // MIG on: the simulator can carve it, as an agent with root and NVML can.
                    mig_profiles: if layout.is_some() { profiles.clone().unwrap_or_default() } else { vec![] },
                });
            }
        }
        if gpus.is_empty() {
            return Err(bad_spec(spec));
        }
        if gpus.len() > 16 {
            return Err(format!("{spec:?}: at most 16 GPUs per host"));
        }
        if let Some(fault) = faults.iter().find(|f| f.gpu() as usize >= gpus.len()) {
            return Err(format!("fault {fault:?} names a GPU this host does not have ({} GPUs)", gpus.len()));
        }
        Ok(SimulatedSource {
            spec: spec.to_owned(),
            gpus: Arc::new(Mutex::new(gpus)),
            faults,
            xids_reported: Default::default(),
            energy: Default::default(),
        })
    }
}

fn bad_spec(group: &str) -> String {
    format!("{group:?} is not a GPU spec; write COUNTxMODEL, e.g. 8xH100-80GB (models: {})", known_models())
}

fn known_models() -> String {
    CATALOG.iter().map(|(key, ..)| *key).collect::<Vec<_>>().join(", ")
}

fn uuid_for(seed: &str, index: u32) -> String {
    let digest = hex::encode(Sha256::digest(format!("{seed}/{index}").as_bytes()));
    format!("GPU-{}-{}-{}-{}-{}", &digest[0..8], &digest[8..12], &digest[12..16], &digest[16..20], &digest[20..32])
}

impl GpuSource for SimulatedSource {
    fn describe(&self) -> String {
        format!("simulated {}, driver {DRIVER_VERSION}, CUDA {CUDA_VERSION}", self.spec)
    }

    fn gpus(&self) -> Result<Vec<GpuInfo>, SourceError> {
        Ok(self.now().iter().filter(|g| !self.faults.contains(&Fault::OffBus { gpu: g.index })).cloned().collect())
    }

    fn apply_mig_layout(&self, index: u32, profiles: &[String]) -> Result<(), SourceError> {
        let mut gpus = self.gpus.lock().unwrap_or_else(|p| p.into_inner());
        let gpu = gpus.iter_mut().find(|g| g.index == index).ok_or_else(|| SourceError(format!("no GPU {index}")))?;
        if gpu.mig_profiles.is_empty() {
            return Err(SourceError(format!("GPU {index} has MIG off; the agent cannot carve it")));
        }
        let layout = cardpool_protocol::mig::check_layout(&gpu.mig_profiles, profiles).map_err(SourceError)?;
        gpu.mig_instances = mig::instances(&gpu.uuid, &layout);
        Ok(())
    }

    fn sample(&self, uses: &[GpuUse]) -> Result<Vec<GpuSample>, SourceError> {
        let t_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        let report_xids = !self.xids_reported.swap(true, Ordering::Relaxed);
        let mut samples: Vec<GpuSample> =
            self.now().iter().map(|gpu| self.sample_gpu(gpu, t_secs, uses, report_xids)).collect();
        // The energy counter advances by the power drawn since the previous sample.
        let mut energy = self.energy.lock().unwrap_or_else(|p| p.into_inner());
        energy.resize(samples.len(), (t_secs, 0));
        for (sample, (at, total)) in samples.iter_mut().zip(energy.iter_mut()) {
            let Some(power) = sample.power_milliwatts else { continue };
            *total += (f64::from(power) * (t_secs - *at).max(0.0)) as u64;
            *at = t_secs;
            sample.energy_millijoules = Some(*total);
        }
        Ok(samples)
    }

    fn health(&self) -> Result<Vec<GpuHealth>, SourceError> {
        Ok(self
            .now()
            .iter()
            .map(|gpu| {
                let mut health = GpuHealth {
                    index: gpu.index,
                    uuid: gpu.uuid.clone(),
                    present: true,
                    temperature_c: Some(IDLE_TEMPERATURE_C + gpu.index % 5),
                    slowdown_temperature_c: SLOWDOWN_C,
                    uncorrectable_ecc_errors: 0,
                    xid_errors: vec![],
                    throttle_reasons: vec![],
                };
                for fault in self.faults.iter().filter(|f| f.gpu() == gpu.index) {
                    match fault {
                        Fault::Xid { code, .. } => health.xid_errors.push(*code),
                        Fault::Ecc { .. } => health.uncorrectable_ecc_errors += 1,
                        Fault::Overheat { .. } => {
                            health.temperature_c = Some(SLOWDOWN_C + 6);
                            health.throttle_reasons.push("thermal slowdown (hardware)".into());
                        }
                        Fault::Throttle { .. } => health.throttle_reasons.push("power brake".into()),
                        Fault::OffBus { .. } => {
                            health.present = false;
                            health.temperature_c = None;
                        }
                    }
                }
                health
            })
            .collect())
    }
}

/// A smooth, repeatable load curve: around `base` percent, swinging with time and GPU.
fn wave(t_secs: f64, index: u32, base: f64, swing: f64) -> f64 {
    let phase = f64::from(index) * 0.7;
    (base + swing * (t_secs / 23.0 + phase).sin() + swing * 0.4 * (t_secs / 5.0 + phase * 2.0).sin()).clamp(0.0, 100.0)
}

impl SimulatedSource {
    fn now(&self) -> Vec<GpuInfo> {
        self.gpus.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn sample_gpu(&self, gpu: &GpuInfo, t_secs: f64, uses: &[GpuUse], report_xids: bool) -> GpuSample {
        let mut sample = GpuSample { index: gpu.index, uuid: gpu.uuid.clone(), ..GpuSample::default() };
        let faults: Vec<&Fault> = self.faults.iter().filter(|f| f.gpu() == gpu.index).collect();
        if faults.contains(&&Fault::OffBus { gpu: gpu.index }) {
            return sample;
        }
        let user = uses.iter().find(|u| u.gpu_indexes.contains(&gpu.index));
        let util = if user.is_some() { wave(t_secs, gpu.index, 82.0, 12.0) } else { wave(t_secs, gpu.index, 1.0, 1.0) };
        let limit_mw = gpu.power_limit_milliwatts.unwrap_or(300_000);
        let total = gpu.memory_total_bytes;
        let used_fraction = if user.is_some() { 0.55 + util / 400.0 } else { 0.006 };
        let pcie_card = gpu.nvlink_peers.is_empty() && gpu.mig_enabled.is_none();
        sample.utilization_pct = Some(util.round() as u32);
        sample.memory_total_bytes = Some(total);
        sample.memory_used_bytes = Some((total as f64 * used_fraction) as u64);
        sample.temperature_c = Some(IDLE_TEMPERATURE_C + gpu.index % 5 + (util * 0.38) as u32);
        sample.slowdown_temperature_c = Some(SLOWDOWN_C);
        sample.power_milliwatts = Some((f64::from(limit_mw) * (0.1 + 0.8 * util / 100.0)) as u32);
        sample.power_limit_milliwatts = Some(limit_mw);
        sample.sm_clock_mhz = Some(if util > 5.0 { 1980 } else { 345 });
        sample.memory_clock_mhz = Some(2619);
        sample.fan_pct = pcie_card.then_some(30 + (util * 0.5) as u32);
        sample.ecc_corrected = Some(0);
        sample.ecc_uncorrected = Some(0);
        if let Some(user) = user {
            sample.processes.push(GpuProcess {
                pid: user.pid.unwrap_or(0),
                name: format!("rental-{}", user.rental_id),
                memory_used_bytes: sample.memory_used_bytes,
            });
        }
        for fault in faults {
            match fault {
                Fault::Xid { code, .. } if report_xids => sample.xid_errors.push(*code),
                Fault::Xid { .. } | Fault::OffBus { .. } => {}
                Fault::Ecc { .. } => sample.ecc_uncorrected = Some(1),
                Fault::Overheat { .. } => {
                    sample.temperature_c = Some(SLOWDOWN_C + 6);
                    sample.throttle_reasons.push("thermal slowdown (hardware)".into());
                }
                Fault::Throttle { .. } => sample.throttle_reasons.push("power brake".into()),
            }
        }
        sample
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_mixed_specs_with_nvlink_within_a_model() {
        let source = SimulatedSource::new("4xH100-80GB, 2xL40S-48GB", "host-a", vec![]).unwrap();
        let gpus = source.gpus().unwrap();
        assert_eq!(gpus.len(), 6);
        assert_eq!(gpus[0].name, "NVIDIA H100 80GB HBM3");
        assert_eq!(gpus[0].memory_total_bytes, 80 * 1024 * 1024 * 1024);
        assert_eq!(gpus[0].nvlink_peers.len(), 3);
        assert!(gpus[5].nvlink_peers.is_empty(), "L40S is PCIe only");
        assert_eq!(gpus.iter().map(|g| g.index).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn bad_specs_and_faults_are_explained() {
        assert!(SimulatedSource::new("8xB9000-1GB", "h", vec![]).unwrap_err().contains("unknown GPU model"));
        assert!(SimulatedSource::new("eightxH100-80GB", "h", vec![]).unwrap_err().contains("COUNTxMODEL"));
        assert!(SimulatedSource::new("0xH100-80GB", "h", vec![]).is_err());
        assert!(SimulatedSource::new("2xH100-80GB", "h", vec![Fault::Ecc { gpu: 2 }]).unwrap_err().contains("2 GPUs"));
        assert!(Fault::parse("melt:1").is_err());
        assert_eq!(Fault::parse("xid:3:79").unwrap(), Fault::Xid { gpu: 3, code: 79 });
    }

    #[test]
    fn faults_show_up_in_health_and_inventory() {
        let faults = ["xid:0:79", "ecc:1", "overheat:2", "offbus:3"].map(|f| Fault::parse(f).unwrap()).to_vec();
        let source = SimulatedSource::new("4xA100-80GB", "h", faults).unwrap();
        let health = source.health().unwrap();
        assert_eq!(health[0].xid_errors, vec![79]);
        assert_eq!(health[1].uncorrectable_ecc_errors, 1);
        assert!(health[2].temperature_c.unwrap() > health[2].slowdown_temperature_c);
        assert!(!health[3].present);
        assert_eq!(source.gpus().unwrap().len(), 3, "a GPU off the bus is not in the inventory");
    }

    #[test]
    fn samples_load_rented_gpus_and_carry_faults_once() {
        let faults = ["xid:0:79", "ecc:1", "overheat:2", "offbus:3"].map(|f| Fault::parse(f).unwrap()).to_vec();
        let source = SimulatedSource::new("4xA100-80GB,1xL40S-48GB", "h", faults).unwrap();
        let uses = [GpuUse { rental_id: 7, gpu_indexes: vec![1, 4], pid: Some(42) }];
        let first = source.sample(&uses).unwrap();
        assert_eq!(first.len(), 5);
        assert_eq!(first[0].xid_errors, vec![79]);
        assert!(first[4].utilization_pct.unwrap() > 50 && first[0].utilization_pct.unwrap() < 10);
        assert_eq!(first[4].processes[0].name, "rental-7");
        assert_eq!(first[4].processes[0].pid, 42);
        assert!(first[4].fan_pct.is_some() && first[0].fan_pct.is_none(), "only PCIe cards report a fan");
        assert!(first[4].power_milliwatts.unwrap() > first[0].power_milliwatts.unwrap());
        assert_eq!(first[1].ecc_uncorrected, Some(1));
        assert!(first[2].temperature_c.unwrap() > first[2].slowdown_temperature_c.unwrap());
        assert_eq!(first[3].utilization_pct, None, "off the bus reads nothing");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let second = source.sample(&uses).unwrap();
        assert!(second[0].xid_errors.is_empty(), "an XID is an event, reported once");
        // The energy counter starts at zero and grows by at least the idle power × 20 ms.
        assert_eq!(first[4].energy_millijoules, Some(0));
        let grown = second[4].energy_millijoules.unwrap();
        assert!(grown >= u64::from(first[4].power_milliwatts.unwrap()) / 100, "{grown} mJ");
        assert_eq!(second[3].energy_millijoules, None, "off the bus reads nothing");
    }

    #[test]
    fn a_mig_layout_gives_each_gpu_of_its_group_those_instances() {
        let source = SimulatedSource::new("2xH100-80GB:mig=3g.40gb*2,1xH100-80GB", "h", vec![]).unwrap();
        let gpus = source.gpus().unwrap();
        assert_eq!(gpus.len(), 3);
        for gpu in &gpus[..2] {
            assert_eq!(gpu.mig_enabled, Some(true));
            let profiles: Vec<&str> = gpu.mig_instances.iter().map(|i| i.profile.as_str()).collect();
            assert_eq!(profiles, ["3g.40gb", "3g.40gb"]);
        }
        assert_ne!(gpus[0].mig_instances[0].uuid, gpus[1].mig_instances[0].uuid);
        assert_eq!((gpus[2].mig_enabled, gpus[2].mig_instances.len()), (Some(false), 0));
        assert!(
            SimulatedSource::new("2xH100-80GB:mig=3g.40gb*3", "h", vec![]).unwrap_err().contains("at most 2 instances")
        );
        assert!(SimulatedSource::new("2xL40S-48GB:mig=1g.10gb", "h", vec![]).unwrap_err().contains("has no MIG"));
        assert!(SimulatedSource::new("2xH100-80GB:fast", "h", vec![]).unwrap_err().contains("MIG layout"));
    }

    #[test]
    fn a_gpu_with_mig_on_takes_a_new_layout_and_one_that_does_not_fit_is_refused() {
        let source = SimulatedSource::new("1xH100-80GB:mig=3g.40gb*2,1xH100-80GB", "h", vec![]).unwrap();
        let before = source.gpus().unwrap();
        assert_eq!(before[0].mig_profiles.len(), 6, "MIG on: the simulator can carve it");
        assert!(before[1].mig_profiles.is_empty(), "MIG off: nothing to carve");
        let seven = vec!["1g.10gb".to_owned(); 7];
        source.apply_mig_layout(0, &seven).unwrap();
        let after = source.gpus().unwrap();
        assert_eq!(after[0].mig_instances.len(), 7);
        assert!(after[0].mig_instances.iter().all(|i| i.profile == "1g.10gb" && i.memory_bytes == 10 << 30));
        let too_much = source.apply_mig_layout(0, &["7g.80gb".to_owned(), "1g.10gb".to_owned()]).unwrap_err();
        assert!(too_much.0.contains("8 compute slices"), "{too_much}");
        assert_eq!(source.gpus().unwrap()[0].mig_instances.len(), 7, "a refused layout changes nothing");
        assert!(source.apply_mig_layout(1, &seven).unwrap_err().0.contains("MIG off"));
        assert!(source.apply_mig_layout(9, &seven).is_err());
    }

    proptest! {
        #[test]
        fn any_valid_spec_yields_unique_uuids_and_dense_indexes(
            groups in proptest::collection::vec((1u32..=4, 0usize..CATALOG.len()), 1..4),
            seed in "[a-z0-9-]{1,12}",
        ) {
            let spec = groups.iter().map(|(n, m)| format!("{n}x{}", CATALOG[*m].0)).collect::<Vec<_>>().join(",");
            let total: u32 = groups.iter().map(|(n, _)| n).sum();
            let source = SimulatedSource::new(&spec, &seed, vec![]).unwrap();
            let gpus = source.gpus().unwrap();
            prop_assert_eq!(gpus.len() as u32, total);
            let mut uuids: Vec<_> = gpus.iter().map(|g| g.uuid.clone()).collect();
            uuids.sort();
            uuids.dedup();
            prop_assert_eq!(uuids.len() as u32, total);
            for (i, gpu) in gpus.iter().enumerate() {
                prop_assert_eq!(gpu.index, i as u32);
                prop_assert!(gpu.nvlink_peers.iter().all(|p| gpus.iter().any(|g| &g.uuid == p) && p != &gpu.uuid));
            }
            let healthy = source.health().unwrap();
            prop_assert!(healthy.iter().all(|h| h.present && h.xid_errors.is_empty() && h.uncorrectable_ecc_errors == 0));
        }

        #[test]
        fn uuids_are_stable_per_seed(seed in "[a-z]{1,8}") {
            let a = SimulatedSource::new("2xH100-80GB", &seed, vec![]).unwrap().gpus().unwrap();
            let b = SimulatedSource::new("2xH100-80GB", &seed, vec![]).unwrap().gpus().unwrap();
            prop_assert_eq!(a, b);
        }
    }
}
