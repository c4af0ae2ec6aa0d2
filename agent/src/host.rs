//! Facts about the host machine, reported beside its GPUs.

use cardpool_protocol::{HostFacts, NicInfo};
use std::path::Path;
use sysinfo::{CpuRefreshKind, Disks, MemoryRefreshKind, RefreshKind, System};

/// The most links reported (a host with more reports its first ones, by name).
const MAX_NICS: usize = 32;

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
        nics: nics(Path::new("/sys/class")),
    }
}

/// The host's physical links as the kernel shows them under `sys_class` (`/sys/class`):
/// every InfiniBand/RDMA port (`infiniband/DEV/ports/N`: its `link_layer` says InfiniBand or
/// Ethernet, i.e. RoCE; `rate` like "400 Gb/sec (4X NDR)"; `state` like "4: ACTIVE"), and every
/// Ethernet interface backed by a device (`net/IF` with a `device` link; `speed` in Mb/s,
/// `operstate`). Virtual interfaces (bridges, veths, loopback) have no device and are skipped.
pub fn nics(sys_class: &Path) -> Vec<NicInfo> {
    let read = |path: &Path| std::fs::read_to_string(path).map(|s| s.trim().to_owned()).ok();
    let entries = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        names.sort();
        names
    };
    let mut found = Vec::new();
    for device in entries(&sys_class.join("infiniband")) {
        let ports = sys_class.join("infiniband").join(&device).join("ports");
        for port in entries(&ports) {
            let dir = ports.join(&port);
            let link = match read(&dir.join("link_layer")).as_deref() {
                Some("Ethernet") => "roce",
                _ => "infiniband",
            };
            let speed_mbps = read(&dir.join("rate"))
                .and_then(|r| r.split_whitespace().next().and_then(|g| g.parse::<f64>().ok()))
                .map(|gbps| (gbps * 1000.0) as u32);
            let up = read(&dir.join("state")).is_some_and(|s| s.contains("ACTIVE"));
            found.push(NicInfo { name: format!("{device}/{port}"), link: link.into(), speed_mbps, up });
        }
    }
    for interface in entries(&sys_class.join("net")) {
        let dir = sys_class.join("net").join(&interface);
        // ARPHRD_ETHER (1) with a device behind it; IPoIB (32) is the port already listed.
        if read(&dir.join("type")).as_deref() != Some("1") || !dir.join("device").exists() {
            continue;
        }
        let speed_mbps =
            read(&dir.join("speed")).and_then(|s| s.parse::<i64>().ok()).and_then(|s| u32::try_from(s).ok());
        let up = read(&dir.join("operstate")).as_deref() == Some("up");
        found.push(NicInfo { name: interface, link: "ethernet".into(), speed_mbps, up });
    }
    found.truncate(MAX_NICS);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_read_from_sysfs_and_virtual_ones_skipped() {
        let root = std::env::temp_dir().join(format!("cardpool-sysfs-{}", std::process::id()));
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n");
        write("infiniband/mlx5_0/ports/1/rate", "400 Gb/sec (4X NDR)\n");
        write("infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
        write("infiniband/mlx5_1/ports/1/link_layer", "Ethernet\n");
        write("infiniband/mlx5_1/ports/1/rate", "200 Gb/sec (4X HDR)\n");
        write("infiniband/mlx5_1/ports/1/state", "1: DOWN\n");
        write("net/eth0/type", "1\n");
        write("net/eth0/speed", "25000\n");
        write("net/eth0/operstate", "up\n");
        std::fs::create_dir_all(root.join("net/eth0/device")).unwrap();
        write("net/veth1/type", "1\n");
        write("net/veth1/speed", "10000\n");
        write("net/ib0/type", "32\n");
        std::fs::create_dir_all(root.join("net/ib0/device")).unwrap();
        let found = nics(&root);
        let _ = std::fs::remove_dir_all(&root);
        let nic = |name: &str, link: &str, speed: u32, up: bool| NicInfo {
            name: name.into(),
            link: link.into(),
            speed_mbps: Some(speed),
            up,
        };
        assert_eq!(
            found,
            vec![
                nic("mlx5_0/1", "infiniband", 400_000, true),
                nic("mlx5_1/1", "roce", 200_000, false),
                nic("eth0", "ethernet", 25_000, true)
            ]
        );
        assert!(nics(Path::new("/nonexistent")).is_empty());
    }
}
