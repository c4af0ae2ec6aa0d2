//! A MIG slice's own device nodes, and no other slice's.
//!
//! With MIG on, a GPU's instances are reached through `/dev/nvidia-caps/nvidia-cap<N>`
//! nodes: one per GPU instance, one per compute instance, and two more (`config`, `monitor`)
//! that manage and watch every instance. A workload that could open the whole directory could
//! run on any slice of its GPU by naming it in `CUDA_VISIBLE_DEVICES`, so a sandbox gets the
//! two nodes of each of its slices and nothing else of that directory (a whole GPU, MIG off,
//! needs none). The driver says which minor each capability has in
//! `<capabilities>/gpu<minor>/mig/gi<G>/access` and `…/gi<G>/ci<C>/access`
//! (`DeviceFileMinor: N`), where the NVIDIA container toolkit reads it too; a slice's GPU
//! and compute instance ids come from the GPU source's inventory ([`MigPlaces`]).
//!
//! The parent GPU's NVML index is taken as its device minor, as for the whole-GPU nodes
//! (`/dev/nvidia<index>`).

use cardpool_protocol::GpuInfo;
use std::{
    collections::HashMap,
    path::Path,
    sync::{Arc, RwLock},
};

/// Where the driver lists its capabilities.
pub const CAPABILITIES_ROOT: &str = "/proc/driver/nvidia/capabilities";

/// Which GPU and instances a MIG slice is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigPlace {
    pub gpu_index: u32,
    pub gpu_instance: u32,
    pub compute_instance: u32,
}

/// Every MIG slice the GPU source last reported, by UUID; shared by the agent's connection,
/// which learns each inventory, and the sandbox, which reads it as it builds one.
#[derive(Debug, Clone, Default)]
pub struct MigPlaces(Arc<RwLock<HashMap<String, MigPlace>>>);

impl MigPlaces {
    /// Replaces what is known with `gpus`' slices (a slice whose ids the source did not say is
    /// left out, so it cannot be given its nodes).
    pub fn learn(&self, gpus: &[GpuInfo]) {
        let places = gpus
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
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = places;
    }

    pub fn get(&self, uuid: &str) -> Option<MigPlace> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).get(uuid).copied()
    }
}

/// The caps nodes (paths below the device root, `nvidia-caps/nvidia-cap<N>`) that give the
/// slices among `uuids` and only them. None where the host has no caps directory (MIG is off
/// everywhere, or the GPUs are simulated): no slice can be reached there. Where it has one, a
/// slice whose place, capability or node is unknown is an error, never a wider grant.
pub fn caps_nodes(
    places: &MigPlaces,
    capabilities: &Path,
    dev_root: &Path,
    uuids: &[String],
) -> Result<Vec<String>, String> {
    let slices: Vec<&String> = uuids.iter().filter(|u| u.starts_with("MIG-")).collect();
    if slices.is_empty() || !dev_root.join("nvidia-caps").is_dir() {
        return Ok(Vec::new());
    }
    let mut nodes = Vec::new();
    for uuid in slices {
        let place = places.get(uuid).ok_or_else(|| {
            format!("the GPU source did not say which GPU and compute instance {uuid} is, so it cannot be given alone")
        })?;
        let gpu_instance =
            capabilities.join(format!("gpu{}/mig/gi{}", place.gpu_index, place.gpu_instance));
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
            pci_bus_id: String::new(),
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
        }
    }

    /// A driver's capability files and caps nodes, as the driver lays them out.
    fn driver(root: &Path, entries: &[(&str, u32)]) -> (std::path::PathBuf, std::path::PathBuf) {
        let (capabilities, dev) = (root.join("capabilities"), root.join("dev"));
        std::fs::create_dir_all(dev.join("nvidia-caps")).unwrap();
        for (path, minor) in entries {
            let file = capabilities.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, format!("DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"))
                .unwrap();
            std::fs::write(dev.join(format!("nvidia-caps/nvidia-cap{minor}")), "").unwrap();
        }
        (capabilities, dev)
    }

    #[test]
    fn a_slice_gets_its_own_instance_nodes_and_nothing_else() {
        let root = std::env::temp_dir().join(format!("cardpool-slices-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (capabilities, dev) = driver(
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
        let places = MigPlaces::default();
        places.learn(&[gpu(1, &[("MIG-a", Some(1), Some(0)), ("MIG-b", Some(2), Some(0)), ("MIG-c", None, None)])]);
        let nodes = |uuids: &[&str]| {
            let uuids: Vec<String> = uuids.iter().map(|u| (*u).to_owned()).collect();
            caps_nodes(&places, &capabilities, &dev, &uuids)
        };
        assert_eq!(nodes(&["MIG-b"]).unwrap(), ["nvidia-caps/nvidia-cap138", "nvidia-caps/nvidia-cap139"]);
        assert_eq!(nodes(&["MIG-a"]).unwrap(), ["nvidia-caps/nvidia-cap129", "nvidia-caps/nvidia-cap130"]);
        assert!(nodes(&["GPU-1"]).unwrap().is_empty(), "a whole GPU needs no caps");
        // Unknown ids, an unknown slice, a missing capability or node: refused, not widened.
        assert!(nodes(&["MIG-c"]).unwrap_err().contains("did not say"));
        assert!(nodes(&["MIG-z"]).unwrap_err().contains("did not say"));
        places.learn(&[gpu(1, &[("MIG-a", Some(3), Some(0))])]);
        assert!(nodes(&["MIG-a"]).unwrap_err().contains("cannot read the MIG capability"));
        assert!(nodes(&["MIG-b"]).unwrap_err().contains("did not say"), "what the source no longer reports is forgotten");
        places.learn(&[gpu(1, &[("MIG-a", Some(1), Some(0))])]);
        std::fs::remove_file(dev.join("nvidia-caps/nvidia-cap130")).unwrap();
        assert!(nodes(&["MIG-a"]).unwrap_err().contains("nvidia-cap130 is missing"));
        // No caps directory (simulated GPUs): nothing to bind, nothing reachable.
        std::fs::remove_dir_all(dev.join("nvidia-caps")).unwrap();
        assert!(nodes(&["MIG-z"]).unwrap().is_empty());
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
