//! Which device nodes a rental's sandbox gets: its GPUs' `/dev/nvidia<minor>`, and for a MIG
//! slice its own `/dev/nvidia-caps` nodes, and no other GPU's or slice's.
//!
//! **GPUs by minor number.** NVML numbers GPUs by PCI order; the driver's device nodes are
//! numbered by its own minor numbers, which usually match and need not. The driver says each
//! GPU's minor in `<driver>/gpus/<pci bus id>/information` (`Device Minor: N`); where it says
//! nothing (simulated GPUs, stand-in nodes) the NVML index is taken.
//!
//! **Slices by capability.** With MIG on, a GPU's instances are reached through
//! `/dev/nvidia-caps/nvidia-cap<N>` nodes: one per GPU instance, one per compute instance, and
//! two more (`config`, `monitor`) that manage and watch every instance. A workload that could
//! open the whole directory could run on any slice of its GPU by naming it in
//! `CUDA_VISIBLE_DEVICES`, so a sandbox gets the two nodes of each of its slices and nothing
//! else of that directory (a whole GPU, MIG off, needs none). The driver says which minor
//! each capability has in `<driver>/capabilities/gpu<minor>/mig/gi<G>/access` and
//! `…/gi<G>/ci<C>/access` (`DeviceFileMinor: N`), where the NVIDIA container toolkit reads
//! it too; a slice's GPU and compute instance ids come from the GPU source ([`DeviceMap`]).

use cardpool_protocol::GpuInfo;
use std::{
    collections::HashMap,
    path::Path,
    sync::{Arc, RwLock},
};

/// Where the driver describes its GPUs and capabilities.
pub const DRIVER_ROOT: &str = "/proc/driver/nvidia";

/// Which GPU and instances a MIG slice is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigPlace {
    pub gpu_index: u32,
    pub gpu_instance: u32,
    pub compute_instance: u32,
}

#[derive(Debug, Default)]
struct Known {
    /// NVML index → PCI bus id.
    buses: HashMap<u32, String>,
    /// MIG UUID → its place.
    slices: HashMap<String, MigPlace>,
}

/// The GPUs and MIG slices the GPU source last reported; shared by the agent's connection,
/// which learns each inventory, and the sandbox, which reads it as it builds one.
#[derive(Debug, Clone, Default)]
pub struct DeviceMap(Arc<RwLock<Known>>);

impl DeviceMap {
    /// Replaces what is known with `gpus` (a slice whose ids the source did not say is left
    /// out, so it cannot be given its nodes).
    pub fn learn(&self, gpus: &[GpuInfo]) {
        let buses = gpus.iter().map(|gpu| (gpu.index, gpu.pci_bus_id.clone())).collect();
        let slices = gpus
            .iter()
            .flat_map(|gpu| gpu.mig_instances.iter().map(move |slice| (gpu.index, slice)))
            .filter_map(|(gpu_index, slice)| {
                Some((
                    slice.uuid.clone(),
                    MigPlace {
                        gpu_index,
                        gpu_instance: slice.gpu_instance_id?,
                        compute_instance: slice.compute_instance_id?,
                    },
                ))
            })
            .collect();
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Known { buses, slices };
    }

    pub fn slice(&self, uuid: &str) -> Option<MigPlace> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).slices.get(uuid).copied()
    }

    /// The device minor of the GPU NVML numbers `index`: the driver's word where it gives one,
    /// else the index.
    pub fn minor(&self, driver: &Path, index: u32) -> u32 {
        let bus = self.0.read().unwrap_or_else(|e| e.into_inner()).buses.get(&index).cloned();
        bus.and_then(|bus| {
            let text = std::fs::read_to_string(driver.join("gpus").join(proc_bus_id(&bus)).join("information")).ok()?;
            text.lines().find_map(|l| l.strip_prefix("Device Minor:")).and_then(|m| m.trim().parse().ok())
        })
        .unwrap_or(index)
    }
}

/// NVML's bus id (`00000000:17:00.0`, an eight-digit domain) as the driver's directory names
/// it (`0000:17:00.0`, lower case).
fn proc_bus_id(nvml: &str) -> String {
    let lower = nvml.to_ascii_lowercase();
    match lower.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => format!("{}:{rest}", &domain[domain.len() - 4..]),
        _ => lower,
    }
}

/// The GPU nodes (below the device root, `nvidia<minor>`) of the GPUs NVML numbers `indexes`.
pub fn gpu_nodes(map: &DeviceMap, driver: &Path, indexes: &[u32]) -> Vec<String> {
    indexes.iter().map(|i| format!("nvidia{}", map.minor(driver, *i))).collect()
}

/// The caps nodes (paths below the device root, `nvidia-caps/nvidia-cap<N>`) that give the
/// slices among `uuids` and only them. None where the host has no caps directory (MIG is off
/// everywhere, or the GPUs are simulated): no slice can be reached there. Where it has one, a
/// slice whose place, capability or node is unknown is an error, never a wider grant.
pub fn caps_nodes(map: &DeviceMap, driver: &Path, dev_root: &Path, uuids: &[String]) -> Result<Vec<String>, String> {
    let slices: Vec<&String> = uuids.iter().filter(|u| u.starts_with("MIG-")).collect();
    if slices.is_empty() || !dev_root.join("nvidia-caps").is_dir() {
        return Ok(Vec::new());
    }
    let mut nodes = Vec::new();
    for uuid in slices {
        let place = map.slice(uuid).ok_or_else(|| {
            format!("the GPU source did not say which GPU and compute instance {uuid} is, so it cannot be given alone")
        })?;
        let gpu = map.minor(driver, place.gpu_index);
        let gpu_instance = driver.join(format!("capabilities/gpu{gpu}/mig/gi{}", place.gpu_instance));
        let compute_instance = gpu_instance.join(format!("ci{}", place.compute_instance));
        for capability in [gpu_instance.join("access"), compute_instance.join("access")] {
            let node = format!("nvidia-caps/nvidia-cap{}", device_file_minor(&capability)?);
            if !dev_root.join(&node).exists() {
                return Err(format!(
                    "{uuid}'s device node /dev/{node} is missing (nvidia-modprobe -f {} makes it)",
                    capability.display()
                ));
            }
            nodes.push(node);
        }
    }
    Ok(nodes)
}

/// The `DeviceFileMinor` a capability file names.
fn device_file_minor(capability: &Path) -> Result<u32, String> {
    let text = std::fs::read_to_string(capability)
        .map_err(|e| format!("cannot read the MIG capability {}: {e}", capability.display()))?;
    text.lines()
        .find_map(|line| line.strip_prefix("DeviceFileMinor:"))
        .and_then(|minor| minor.trim().parse().ok())
        .ok_or_else(|| format!("{} names no DeviceFileMinor", capability.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cardpool_protocol::MigInstance;

    fn gpu(index: u32, slices: &[(&str, Option<u32>, Option<u32>)]) -> GpuInfo {
        GpuInfo {
            index,
            uuid: format!("GPU-{index}"),
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: format!("00000000:{:02X}:00.0", 0x17 + index),
            memory_total_bytes: 80 << 30,
            driver_version: String::new(),
            cuda_version: String::new(),
            power_limit_milliwatts: None,
            mig_enabled: Some(true),
            nvlink_peers: vec![],
            mig_instances: slices
                .iter()
                .map(|(uuid, gi, ci)| MigInstance {
                    uuid: (*uuid).into(),
                    profile: "3g.40gb".into(),
                    compute_slices: 3,
                    memory_bytes: 40 << 30,
                    gpu_instance_id: *gi,
                    compute_instance_id: *ci,
                })
                .collect(),
            mig_profiles: vec![],
        }
    }

    /// A driver's capability files and caps nodes, as the driver lays them out.
    fn driver(root: &Path, entries: &[(&str, u32)]) -> (std::path::PathBuf, std::path::PathBuf) {
        let (driver, dev) = (root.join("driver"), root.join("dev"));
        let capabilities = driver.join("capabilities");
        std::fs::create_dir_all(dev.join("nvidia-caps")).unwrap();
        for (path, minor) in entries {
            let file = capabilities.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"))
                .unwrap();
            std::fs::write(dev.join(format!("nvidia-caps/nvidia-cap{minor}")), "").unwrap();
        }
        (driver, dev)
    }

    #[test]
    fn a_slice_gets_its_own_instance_nodes_and_nothing_else() {
        let root = std::env::temp_dir().join(format!("cardpool-slices-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (driver, dev) = driver(
            &root,
            &[
                ("mig/config", 1),
                ("mig/monitor", 2),
                ("gpu1/mig/gi1/access", 129),
                ("gpu1/mig/gi1/ci0/access", 130),
                ("gpu1/mig/gi2/access", 138),
                ("gpu1/mig/gi2/ci0/access", 139),
            ],
        );
        let places = DeviceMap::default();
        places.learn(&[gpu(1, &[("MIG-a", Some(1), Some(0)), ("MIG-b", Some(2), Some(0)), ("MIG-c", None, None)])]);
        let nodes = |uuids: &[&str]| {
            let uuids: Vec<String> = uuids.iter().map(|u| (*u).to_owned()).collect();
            caps_nodes(&places, &driver, &dev, &uuids)
        };
        assert_eq!(nodes(&["MIG-b"]).unwrap(), ["nvidia-caps/nvidia-cap138", "nvidia-caps/nvidia-cap139"]);
        assert_eq!(nodes(&["MIG-a"]).unwrap(), ["nvidia-caps/nvidia-cap129", "nvidia-caps/nvidia-cap130"]);
        assert!(nodes(&["GPU-1"]).unwrap().is_empty(), "a whole GPU needs no caps");
        // Unknown ids, an unknown slice, a missing capability or node: refused, not widened.
        assert!(nodes(&["MIG-c"]).unwrap_err().contains("did not say"));
        assert!(nodes(&["MIG-z"]).unwrap_err().contains("did not say"));
        places.learn(&[gpu(1, &[("MIG-a", Some(3), Some(0))])]);
        assert!(nodes(&["MIG-a"]).unwrap_err().contains("cannot read the MIG capability"));
        assert!(
            nodes(&["MIG-b"]).unwrap_err().contains("did not say"),
            "what the source no longer reports is forgotten"
        );
        places.learn(&[gpu(1, &[("MIG-a", Some(1), Some(0))])]);
        std::fs::remove_file(dev.join("nvidia-caps/nvidia-cap130")).unwrap();
        assert!(nodes(&["MIG-a"]).unwrap_err().contains("nvidia-cap130 is missing"));
        // No caps directory (simulated GPUs): nothing to bind, nothing reachable.
        std::fs::remove_dir_all(dev.join("nvidia-caps")).unwrap();
        assert!(nodes(&["MIG-z"]).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn gpus_are_given_by_the_drivers_minor_numbers() {
        let root = std::env::temp_dir().join(format!("cardpool-minors-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (driver, dev) = driver(&root, &[("gpu3/mig/gi1/access", 50), ("gpu3/mig/gi1/ci0/access", 51)]);
        // NVML's GPU 1 (bus 18) is the driver's minor 3; GPU 0 has no word from the driver.
        let info = driver.join("gpus/0000:18:00.0");
        std::fs::create_dir_all(&info).unwrap();
        std::fs::write(info.join("information"), "Model: \t\t NVIDIA H100\nDevice Minor: \t 3\nBus Type: \t PCIe\n")
            .unwrap();
        let map = DeviceMap::default();
        map.learn(&[gpu(0, &[]), gpu(1, &[("MIG-a", Some(1), Some(0))])]);
        assert_eq!(gpu_nodes(&map, &driver, &[1, 0]), ["nvidia3", "nvidia0"]);
        assert_eq!(gpu_nodes(&map, &driver, &[7]), ["nvidia7"], "unknown to the map: its index");
        // The slice's capabilities are read under the GPU's minor.
        let uuids = vec!["MIG-a".to_owned()];
        assert_eq!(
            caps_nodes(&map, &driver, &dev, &uuids).unwrap(),
            ["nvidia-caps/nvidia-cap50", "nvidia-caps/nvidia-cap51"]
        );
        assert_eq!(proc_bus_id("00000000:AB:00.0"), "0000:ab:00.0");
        assert_eq!(proc_bus_id("0000:ab:00.0"), "0000:ab:00.0");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_capability_file_names_its_minor() {
        let root = std::env::temp_dir().join(format!("cardpool-slices-minor-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let file = root.join("access");
        std::fs::write(&file, "DeviceFileMinor: 42\nDeviceFileMode: 292\n").unwrap();
        assert_eq!(device_file_minor(&file), Ok(42));
        std::fs::write(&file, "DeviceFileMode: 292\n").unwrap();
        assert!(device_file_minor(&file).unwrap_err().contains("names no DeviceFileMinor"));
        let _ = std::fs::remove_dir_all(&root);
    }
}
