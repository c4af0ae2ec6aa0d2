//! MIG layouts for the simulated source: which profiles each model offers (NVIDIA's, from
//! [`cardpool_protocol::mig::nvidia_profiles`]) and the instances a layout makes. A layout on the command line is written as everywhere
//! ([`cardpool_protocol::mig::parse_layout`]: `3g.40gb*2`, `4g.40gb+3g.40gb`, `1g.10gb*7`) and
//! must fit one GPU by the rule both agent and server keep
//! ([`cardpool_protocol::mig::check_layout`]). Real GPUs report their profiles and instances
//! through NVML ([`super::nvml`]).

use cardpool_protocol::{MigInstance, MigProfile, mig};
use sha2::{Digest, Sha256};

/// The profiles of a simulated model (its spec name, e.g. `H100-80GB`), or `None` when it has
/// no MIG: NVIDIA's, as a real GPU of that model reports them.
pub fn profiles(model: &str, memory_total_bytes: u64) -> Option<Vec<MigProfile>> {
    mig::nvidia_profiles(model, memory_total_bytes)
}

/// The instances the profiles `layout` make on the GPU `gpu_uuid`, with UUIDs stable per GPU,
/// place and profile.
pub fn instances(gpu_uuid: &str, layout: &[&MigProfile]) -> Vec<MigInstance> {
    layout
        .iter()
        .enumerate()
        .map(|(n, profile)| {
            let digest = hex::encode(Sha256::digest(format!("{gpu_uuid}/mig/{n}/{}", profile.name)));
            MigInstance {
                uuid: format!(
                    "MIG-{}-{}-{}-{}-{}",
                    &digest[0..8],
                    &digest[8..12],
                    &digest[12..16],
                    &digest[16..20],
                    &digest[20..32]
                ),
                profile: profile.name.clone(),
                compute_slices: profile.compute_slices,
                memory_bytes: profile.memory_bytes,
                gpu_instance_id: Some(n as u32 + 1),
                compute_instance_id: Some(0),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn carve(model: &str, layout: &str) -> Result<Vec<MigProfile>, String> {
        let known = profiles(model, 80 << 30).ok_or("no MIG")?;
        let names = mig::parse_layout(layout)?;
        Ok(mig::check_layout(&known, &names)?.into_iter().cloned().collect())
    }

    #[test]
    fn layouts_parse_into_profiles_that_fit() {
        let two = carve("H100-80GB", "3g.40gb*2").unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(two[0].name, "3g.40gb");
        assert_eq!(carve("h100-80gb", "1G.10GB*7").unwrap().len(), 7);
        assert!(carve("H100-80GB", "7g.80gb+1g.10gb").unwrap_err().contains("8 compute slices"));
        assert!(carve("H100-80GB", "1g.10gb*x").unwrap_err().contains("not a count"));
        assert!(carve("H100-80GB", "1g.10gb*0").is_err());
        assert!(profiles("L40S-48GB", 48 << 30).is_none());
    }

    #[test]
    fn instances_have_mig_uuids_memory_by_eighths_and_ids() {
        let known = profiles("H100-80GB", 80 << 30).unwrap();
        let layout = mig::check_layout(&known, &mig::parse_layout("3g.40gb+1g.10gb").unwrap()).unwrap();
        let made = instances("GPU-a", &layout);
        assert!(made.iter().all(|i| i.uuid.starts_with("MIG-") && i.uuid.len() == 40));
        assert_ne!(made[0].uuid, made[1].uuid);
        assert_eq!(made[0].memory_bytes, 40 << 30);
        assert_eq!(made[1].memory_bytes, 10 << 30);
        assert_eq!(
            (made[0].compute_slices, made[0].gpu_instance_id, made[0].compute_instance_id),
            (3, Some(1), Some(0))
        );
        assert_eq!(instances("GPU-a", &layout), made, "stable per GPU");
        assert_ne!(instances("GPU-b", &layout)[0].uuid, made[0].uuid, "distinct between GPUs");
        let recut = mig::check_layout(&known, &mig::parse_layout("3g.40gb+1g.20gb").unwrap()).unwrap();
        assert_ne!(instances("GPU-a", &recut)[1].uuid, made[1].uuid, "another profile is another instance");
    }
}
