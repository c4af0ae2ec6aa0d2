//! MIG layouts for the simulated source: which profiles each model offers and whether a
//! requested layout fits in one GPU.
//!
//! A layout is written `PROFILE*COUNT[+PROFILE*COUNT…]` (`3g.40gb*2`, `4g.40gb+3g.40gb`,
//! `1g.10gb*7`). The fit rule is NVIDIA's budget in its simplest form: at most seven compute
//! slices and eight memory eighths per GPU. NVIDIA's placement rules are stricter for a few
//! mixes; the simulator does not model them. Real GPUs report their instances through NVML
//! ([`super::nvml`]), and the layout is whatever the provider made with `nvidia-smi mig`.

use cardpool_protocol::MigInstance;
use sha2::{Digest, Sha256};

/// Compute slices a MIG-capable GPU has.
const COMPUTE_SLICES: u32 = 7;
/// Memory is split in eighths.
const MEMORY_EIGHTHS: u32 = 8;

/// A model's profiles: (name, compute slices, memory eighths). From NVIDIA's MIG user guide.
type Profiles = &'static [(&'static str, u32, u32)];

const A100_40GB: Profiles =
    &[("1g.5gb", 1, 1), ("1g.10gb", 1, 2), ("2g.10gb", 2, 2), ("3g.20gb", 3, 4), ("4g.20gb", 4, 4), ("7g.40gb", 7, 8)];
const GPU_80GB: Profiles =
    &[("1g.10gb", 1, 1), ("1g.20gb", 1, 2), ("2g.20gb", 2, 2), ("3g.40gb", 3, 4), ("4g.40gb", 4, 4), ("7g.80gb", 7, 8)];
const H200_141GB: Profiles = &[
    ("1g.18gb", 1, 1),
    ("1g.35gb", 1, 2),
    ("2g.35gb", 2, 2),
    ("3g.71gb", 3, 4),
    ("4g.71gb", 4, 4),
    ("7g.141gb", 7, 8),
];

/// The profiles of a simulated model (its spec name), or `None` when it has no MIG.
pub fn profiles(model: &str) -> Option<Profiles> {
    match model.to_ascii_uppercase().as_str() {
        "H200-141GB" => Some(H200_141GB),
        "H100-80GB" | "A100-80GB" => Some(GPU_80GB),
        "A100-40GB" => Some(A100_40GB),
        _ => None,
    }
}

/// One requested instance: its profile, compute slices and memory eighths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub profile: &'static str,
    pub compute_slices: u32,
    pub memory_eighths: u32,
}

/// Parses `layout` for `model` and checks that it fits one GPU.
pub fn parse_layout(model: &str, layout: &str) -> Result<Vec<Slot>, String> {
    let known = profiles(model)
        .ok_or_else(|| format!("{model} has no MIG; MIG models: H200-141GB, H100-80GB, A100-80GB, A100-40GB"))?;
    let names = || known.iter().map(|(name, ..)| *name).collect::<Vec<_>>().join(", ");
    let mut slots = Vec::new();
    for part in layout.split('+').map(str::trim) {
        let (name, count) = match part.split_once('*') {
            Some((name, count)) => {
                (name.trim(), count.trim().parse::<u32>().map_err(|_| format!("{part:?}: {count:?} is not a count"))?)
            }
            None => (part, 1),
        };
        let &(profile, compute_slices, memory_eighths) = known
            .iter()
            .find(|(known, ..)| known.eq_ignore_ascii_case(name))
            .ok_or_else(|| format!("{name:?} is not a MIG profile of {model}; its profiles: {}", names()))?;
        if count == 0 || count > COMPUTE_SLICES {
            return Err(format!("{part:?}: a GPU holds 1 to {COMPUTE_SLICES} instances of a profile"));
        }
        slots.extend((0..count).map(|_| Slot { profile, compute_slices, memory_eighths }));
    }
    let compute: u32 = slots.iter().map(|s| s.compute_slices).sum();
    let memory: u32 = slots.iter().map(|s| s.memory_eighths).sum();
    if compute > COMPUTE_SLICES || memory > MEMORY_EIGHTHS {
        return Err(format!(
            "MIG layout {layout:?} needs {compute} compute slices and {memory} memory eighths; one {model} has {COMPUTE_SLICES} and {MEMORY_EIGHTHS}"
        ));
    }
    Ok(slots)
}

/// The instances `slots` make on the GPU `gpu_uuid` of `memory_total_bytes`.
pub fn instances(gpu_uuid: &str, memory_total_bytes: u64, slots: &[Slot]) -> Vec<MigInstance> {
    slots
        .iter()
        .enumerate()
        .map(|(n, slot)| {
            let digest = hex::encode(Sha256::digest(format!("{gpu_uuid}/mig/{n}/{}", slot.profile).as_bytes()));
            MigInstance {
                uuid: format!(
                    "MIG-{}-{}-{}-{}-{}",
                    &digest[0..8],
                    &digest[8..12],
                    &digest[12..16],
                    &digest[16..20],
                    &digest[20..32]
                ),
                profile: slot.profile.to_owned(),
                compute_slices: slot.compute_slices,
                memory_bytes: memory_total_bytes / u64::from(MEMORY_EIGHTHS) * u64::from(slot.memory_eighths),
                gpu_instance_id: Some(n as u32 + 1),
                compute_instance_id: Some(0),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_that_fit_parse_and_others_say_why() {
        let two = parse_layout("H100-80GB", "3g.40gb*2").unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(two[0].profile, "3g.40gb");
        assert_eq!(parse_layout("h100-80gb", "1G.10GB*7").unwrap().len(), 7);
        assert_eq!(parse_layout("A100-40GB", "4g.20gb+2g.10gb+1g.5gb").unwrap().len(), 3);
        let full = parse_layout("H100-80GB", "7g.80gb+1g.10gb").unwrap_err();
        assert!(full.contains("8 compute slices") && full.contains("has 7"), "{full}");
        assert!(parse_layout("H100-80GB", "3g.40gb*3").unwrap_err().contains("12 memory eighths"));
        assert!(parse_layout("H100-80GB", "5g.50gb").unwrap_err().contains("its profiles: 1g.10gb"));
        assert!(parse_layout("H100-80GB", "1g.10gb*x").unwrap_err().contains("not a count"));
        assert!(parse_layout("H100-80GB", "1g.10gb*0").is_err());
        assert!(parse_layout("L40S-48GB", "1g.10gb").unwrap_err().contains("has no MIG"));
    }

    #[test]
    fn instances_have_mig_uuids_memory_by_eighths_and_ids() {
        let slots = parse_layout("H100-80GB", "3g.40gb+1g.10gb").unwrap();
        let made = instances("GPU-a", 80 << 30, &slots);
        assert!(made.iter().all(|i| i.uuid.starts_with("MIG-") && i.uuid.len() == 40));
        assert_ne!(made[0].uuid, made[1].uuid);
        assert_eq!(made[0].memory_bytes, 40 << 30);
        assert_eq!(made[1].memory_bytes, 10 << 30);
        assert_eq!(
            (made[0].compute_slices, made[0].gpu_instance_id, made[0].compute_instance_id),
            (3, Some(1), Some(0))
        );
        assert_eq!(instances("GPU-a", 80 << 30, &slots), made, "stable per GPU");
        assert_ne!(instances("GPU-b", 80 << 30, &slots)[0].uuid, made[0].uuid, "distinct between GPUs");
    }
}
