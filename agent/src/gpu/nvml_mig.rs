//! MIG on real GPUs through NVML: the instances a GPU holds, the profiles it can make, and
//! carving it into a layout the provider chose.
//!
//! nvml-wrapper 0.13 wraps none of NVML's GPU/compute instance calls, so this module makes
//! them through the wrapper's own loaded library (`Nvml::lib`). It is the one place in the
//! workspace allowed `unsafe`: each call passes a live handle of this NVML and a valid place
//! for what the function writes, as NVML's header declares.
//!
//! A layout is carved as `nvidia-smi mig -dci; -dgi; -cgi …; -cci` would: every compute and
//! GPU instance is destroyed, then one GPU instance per wanted profile is made (largest first,
//! so the driver can place them) with one compute instance spanning it. Only an agent running
//! as root on a GPU with MIG on can do this; elsewhere [`profiles`] is empty and the server
//! offers no layout change, and the layout is whatever the provider made by hand.
#![allow(unsafe_code)]

use super::SourceError;
use cardpool_protocol::{MigInstance, MigProfile, mig};
use nvml_wrapper::{Device, error::nvml_try};
use nvml_wrapper_sys::bindings::{
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, NVML_COMPUTE_INSTANCE_PROFILE_COUNT, NVML_GPU_INSTANCE_PROFILE_COUNT,
    nvmlComputeInstanceProfileInfo_t, nvmlGpuInstance_t, nvmlGpuInstanceProfileInfo_v2_t,
};
use std::{ffi::CStr, os::raw::c_uint};

/// The MIG devices now carved out of `device`: empty when MIG is off or unsupported. The GPU
/// and compute instance ids name the slice's `/dev/nvidia-caps` nodes (see [`crate::devices`]).
pub(super) fn instances(device: &Device<'_>) -> Vec<MigInstance> {
    if !mig_on(device) {
        return vec![];
    }
    // The count is the most the GPU can hold; an index without an instance answers NotFound.
    let slots = device.mig_device_count().unwrap_or(0);
    (0..slots)
        .filter_map(|slot| {
            let mig = device.mig_device_by_index(slot).ok()?;
            let attributes = mig.attributes().ok();
            let memory_bytes = mig
                .memory_info()
                .map(|m| m.total)
                .ok()
                .or(attributes.as_ref().map(|a| a.memory_size_mb << 20))
                .unwrap_or(0);
            let compute_slices = attributes.as_ref().map_or(0, |a| a.gpu_instance_slice_count);
            Some(MigInstance {
                uuid: mig.uuid().ok()?,
                profile: profile_name(mig.name().ok().as_deref(), compute_slices, memory_bytes),
                compute_slices,
                memory_bytes,
                gpu_instance_id: instance_id(&mig, InstanceId::Gpu),
                compute_instance_id: instance_id(&mig, InstanceId::Compute),
            })
        })
        .collect()
}

/// The profiles `device` can be carved into, where this agent may carve it (MIG on, root);
/// empty elsewhere.
pub(super) fn profiles(device: &Device<'_>) -> Vec<MigProfile> {
    if !mig_on(device) || !nix::unistd::geteuid().is_root() {
        return vec![];
    }
    gpu_instance_profiles(device).into_iter().map(|(_, profile)| profile).collect()
}

/// Carves `device` into one instance of each of `wanted` (profile names), replacing what it
/// holds. Refused before anything changes when the layout does not fit or the GPU has MIG
/// off; a failure midway (a process still on the GPU, a placement the driver refuses) leaves
/// whatever was made, which the next inventory reports.
pub(super) fn apply(device: &Device<'_>, wanted: &[String]) -> Result<(), SourceError> {
    if !mig_on(device) {
        return Err(SourceError("MIG is off on this GPU; turn it on with nvidia-smi -mig 1 first".into()));
    }
    let known = gpu_instance_profiles(device);
    let profiles: Vec<MigProfile> = known.iter().map(|(_, p)| p.clone()).collect();
    let mut chosen: Vec<&MigProfile> = mig::check_layout(&profiles, wanted).map_err(SourceError)?;
    chosen.sort_by_key(|p| std::cmp::Reverse((p.compute_slices, p.memory_slices)));
    let lib = device.nvml().lib();
    let failed = |what: &str, status| {
        SourceError(format!("{what}: {}", nvml_try(status).err().map(|e| e.to_string()).unwrap_or_default()))
    };
    let symbol = |name: &str| SourceError(format!("this driver's NVML lacks {name}"));

    // Tear down: every compute instance, then every GPU instance.
    let get_gis = lib.nvmlDeviceGetGpuInstances.as_ref().map_err(|_| symbol("nvmlDeviceGetGpuInstances"))?;
    let destroy_gi = lib.nvmlGpuInstanceDestroy.as_ref().map_err(|_| symbol("nvmlGpuInstanceDestroy"))?;
    for (info, _) in &known {
        let mut handles: Vec<nvmlGpuInstance_t> = vec![std::ptr::null_mut(); info.instanceCount as usize];
        let mut count: c_uint = info.instanceCount;
        // SAFETY: a live device handle; `handles` has room for `count` handles.
        let status = unsafe { get_gis(device.handle(), info.id, handles.as_mut_ptr(), &mut count) };
        if status != 0 {
            return Err(failed("listing GPU instances", status));
        }
        for &gi in handles.iter().take(count as usize) {
            destroy_compute_instances(device, gi)?;
            // SAFETY: `gi` was just returned by NVML for this device and is destroyed once.
            let status = unsafe { destroy_gi(gi) };
            if status != 0 {
                return Err(failed("destroying a GPU instance (is a process still using it?)", status));
            }
        }
    }

    // Build: one GPU instance per profile, with one compute instance spanning it.
    let create_gi = lib.nvmlDeviceCreateGpuInstance.as_ref().map_err(|_| symbol("nvmlDeviceCreateGpuInstance"))?;
    let ci_info = lib
        .nvmlGpuInstanceGetComputeInstanceProfileInfo
        .as_ref()
        .map_err(|_| symbol("nvmlGpuInstanceGetComputeInstanceProfileInfo"))?;
    let create_ci = lib
        .nvmlGpuInstanceCreateComputeInstance
        .as_ref()
        .map_err(|_| symbol("nvmlGpuInstanceCreateComputeInstance"))?;
    for profile in chosen {
        let Some((info, _)) = known.iter().find(|(_, p)| p.name == profile.name) else { continue };
        let mut gi: nvmlGpuInstance_t = std::ptr::null_mut();
        // SAFETY: a live device handle and a valid place for the new instance's handle.
        let status = unsafe { create_gi(device.handle(), info.id, &mut gi) };
        if status != 0 {
            return Err(failed(&format!("creating a {} GPU instance", profile.name), status));
        }
        let mut spanning = None;
        for ci_profile in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
            // SAFETY: all-zero is a valid value of this plain C struct of integers.
            let mut ci: nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `gi` is the live instance made above; `ci` is a valid place to write.
            let status = unsafe { ci_info(gi, ci_profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &mut ci) };
            if status == 0 && ci.sliceCount == info.sliceCount {
                spanning = Some(ci.id);
                break;
            }
        }
        let mut made = std::ptr::null_mut();
        let status = match spanning {
            // SAFETY: `gi` is live; `made` is a valid place for the compute instance's handle.
            Some(id) => unsafe { create_ci(gi, id, &mut made) },
            None => 3, // NVML_ERROR_NOT_SUPPORTED
        };
        if status != 0 {
            // SAFETY: `gi` was made above, holds nothing and is destroyed once.
            unsafe { destroy_gi(gi) };
            return Err(failed(&format!("creating the compute instance of a {} GPU instance", profile.name), status));
        }
    }
    Ok(())
}

/// Destroys every compute instance of the GPU instance `gi`.
fn destroy_compute_instances(device: &Device<'_>, gi: nvmlGpuInstance_t) -> Result<(), SourceError> {
    let lib = device.nvml().lib();
    let (Ok(info), Ok(list), Ok(destroy)) = (
        lib.nvmlGpuInstanceGetComputeInstanceProfileInfo.as_ref(),
        lib.nvmlGpuInstanceGetComputeInstances.as_ref(),
        lib.nvmlComputeInstanceDestroy.as_ref(),
    ) else {
        return Err(SourceError("this driver's NVML lacks the compute instance calls".into()));
    };
    for ci_profile in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        // SAFETY: all-zero is a valid value of this plain C struct of integers.
        let mut profile: nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `gi` is a live GPU instance; `profile` is a valid place to write.
        if unsafe { info(gi, ci_profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &mut profile) } != 0 {
            continue;
        }
        let mut handles = vec![std::ptr::null_mut(); profile.instanceCount as usize];
        let mut count: c_uint = profile.instanceCount;
        // SAFETY: `handles` has room for `count` handles.
        let status = unsafe { list(gi, profile.id, handles.as_mut_ptr(), &mut count) };
        if status != 0 {
            continue;
        }
        for &ci in handles.iter().take(count as usize) {
            // SAFETY: `ci` was just returned by NVML and is destroyed once.
            let status = unsafe { destroy(ci) };
            if status != 0 {
                let why = nvml_try(status).err().map(|e| e.to_string()).unwrap_or_default();
                return Err(SourceError(format!(
                    "destroying a compute instance (is a process still using it?): {why}"
                )));
            }
        }
    }
    Ok(())
}

/// The GPU instance profiles `device` offers, with NVML's own description of each.
fn gpu_instance_profiles(device: &Device<'_>) -> Vec<(nvmlGpuInstanceProfileInfo_v2_t, MigProfile)> {
    let lib = device.nvml().lib();
    let Ok(get) = lib.nvmlDeviceGetGpuInstanceProfileInfoV.as_ref() else { return vec![] };
    let total_mb = device.memory_info().map(|m| m.total >> 20).unwrap_or(0).max(1);
    let version = std::mem::size_of::<nvmlGpuInstanceProfileInfo_v2_t>() as c_uint | (2 << 24);
    (0..NVML_GPU_INSTANCE_PROFILE_COUNT)
        .filter_map(|which| {
            // SAFETY: all-zero is a valid value of this plain C struct of integers and chars.
            let mut info: nvmlGpuInstanceProfileInfo_v2_t = unsafe { std::mem::zeroed() };
            info.version = version;
            // SAFETY: a live device handle; `info` is a valid place, versioned as NVML asks.
            let status = unsafe { get(device.handle(), which, &mut info) };
            if status != 0 || info.instanceCount == 0 {
                return None;
            }
            // SAFETY: NVML writes a NUL-terminated name into the 96-byte array (zeroed before).
            let name = unsafe { CStr::from_ptr(info.name.as_ptr()) }.to_string_lossy().into_owned();
            let memory_bytes = info.memorySizeMB << 20;
            let profile = MigProfile {
                name: profile_name(Some(&name), info.sliceCount, memory_bytes),
                compute_slices: info.sliceCount,
                memory_slices: ((info.memorySizeMB * u64::from(mig::MEMORY_SLICES)).div_ceil(total_mb) as u32)
                    .clamp(1, mig::MEMORY_SLICES),
                memory_bytes,
                max_instances: info.instanceCount,
            };
            Some((info, profile))
        })
        .collect()
}

fn mig_on(device: &Device<'_>) -> bool {
    device.mig_mode().is_ok_and(|mode| mode.current == 1)
}

/// Which of a MIG device's two ids to read.
enum InstanceId {
    Gpu,
    Compute,
}

/// A MIG device's GPU or compute instance id; `None` where the driver lacks the call or says no.
fn instance_id(mig: &Device<'_>, which: InstanceId) -> Option<u32> {
    let lib = mig.nvml().lib();
    let function = match which {
        InstanceId::Gpu => lib.nvmlDeviceGetGpuInstanceId.as_ref().ok()?,
        InstanceId::Compute => lib.nvmlDeviceGetComputeInstanceId.as_ref().ok()?,
    };
    let mut id: c_uint = 0;
    // SAFETY: the handle is a live MIG device of this NVML (borrowed for the call), the
    // function is the library's own symbol of the signature NVML declares, and `id` is a
    // valid place for the one integer it writes.
    let status = unsafe { function(mig.handle(), &mut id) };
    (status == 0).then_some(id)
}

/// A profile's name: the last word of NVML's name for it ("MIG 3g.40gb", "NVIDIA H100 80GB
/// HBM3 MIG 3g.40gb"), else made from its slices and memory as NVIDIA names them.
fn profile_name(name: Option<&str>, compute_slices: u32, memory_bytes: u64) -> String {
    name.and_then(|n| n.rsplit(' ').next())
        .filter(|word| MigInstance::profile_memory_gb(word.split('+').next().unwrap_or(word)).is_some())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{compute_slices}g.{}gb", memory_bytes.div_ceil(1 << 30)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mig_profile_comes_from_the_device_name_or_its_slices() {
        assert_eq!(profile_name(Some("NVIDIA H100 80GB HBM3 MIG 3g.40gb"), 3, 40_192 << 20), "3g.40gb");
        assert_eq!(profile_name(Some("MIG 1g.10gb+me"), 1, 9_856 << 20), "1g.10gb+me");
        assert_eq!(profile_name(Some("NVIDIA H100 MIG"), 1, 9_856 << 20), "1g.10gb");
        assert_eq!(profile_name(None, 7, 80 << 30), "7g.80gb");
    }
}
