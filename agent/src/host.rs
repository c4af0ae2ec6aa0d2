//! Facts about the host machine, reported beside its GPUs.

use cardpool_protocol::HostFacts;
use sysinfo::{CpuRefreshKind, Disks, MemoryRefreshKind, RefreshKind, System};

/// Reads CPU, memory, disk and OS facts. Anything the OS will not tell is reported as
/// unknown/zero rather than failing: a host without disk stats can still rent out GPUs.
pub fn host_facts(location: Option<String>) -> HostFacts {
    let system = System::new_with_specifics(
        RefreshKind::nothing().with_cpu(CpuRefreshKind::nothing()).with_memory(MemoryRefreshKind::everything()),
    )
    .ok();
    let cpu_model = system
        .as_ref()
        .and_then(|s| s.cpus().first().map(|c| c.brand().trim().to_owned()))
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "unknown CPU".into());
    let cpu_cores =
        System::physical_core_count().ok().or_else(|| system.as_ref().map(|s| s.cpus().len())).unwrap_or(0) as u32;
    let disk_bytes = Disks::new_with_refreshed_list()
        .ok()
        .and_then(|disks| disks.iter().find(|d| d.mount_point() == std::path::Path::new("/")).map(|d| d.total_space()))
        .unwrap_or(0);
    HostFacts {
        hostname: System::host_name().unwrap_or_else(|_| "unknown-host".into()),
        cpu_model,
        cpu_cores,
        ram_bytes: system.as_ref().map_or(0, System::total_memory),
        disk_bytes,
        os: System::long_os_version().unwrap_or_else(|_| std::env::consts::OS.into()),
        agent_version: env!("CARGO_PKG_VERSION").into(),
        location,
    }
}
