//! `cardpool-agent self-test`: can this host rent out its GPUs right now?

use crate::gpu::{GpuHealth, GpuSource};
use cardpool_protocol::{HostFacts, SelfTestCheck as Check, SelfTestReport as Report};

/// The human-readable report.
pub fn render(report: &Report) -> String {
    let mut out = format!("Cardpool agent self-test ({})\n", report.source);
    for check in &report.checks {
        out.push_str(&format!("  [{}] {}: {}\n", if check.passed { " ok " } else { "FAIL" }, check.name, check.detail));
    }
    let failed = report.checks.iter().filter(|c| !c.passed).count();
    out.push_str(&if failed == 0 {
        format!("PASSED: {} checks\n", report.checks.len())
    } else {
        format!("FAILED: {failed} of {} checks\n", report.checks.len())
    });
    out
}

fn check(name: impl Into<String>, passed: bool, detail: impl Into<String>) -> Check {
    Check { name: name.into(), passed, detail: detail.into() }
}

/// Runs every check against `source`; `isolation` is how this host isolates workloads (a host
/// that cannot isolate them fails, and cannot be listed).
pub fn run(source: &dyn GpuSource, host: &HostFacts, isolation: &Check) -> Report {
    let mut checks = vec![
        check(
            "host",
            host.cpu_cores > 0 && host.ram_bytes > 0,
            format!("{}, {} cores, {} GiB RAM, {}", host.cpu_model, host.cpu_cores, host.ram_bytes >> 30, host.os),
        ),
        isolation.clone(),
    ];
    match source.gpus() {
        Ok(gpus) if gpus.is_empty() => checks.push(check("gpus", false, "no GPUs found")),
        Ok(gpus) => checks.push(check(
            "gpus",
            true,
            format!("{} found: {}", gpus.len(), gpus.iter().map(|g| g.name.as_str()).collect::<Vec<_>>().join(", ")),
        )),
        Err(err) => checks.push(check("gpus", false, err.to_string())),
    }
    match source.health() {
        Ok(health) => checks.extend(health.iter().map(gpu_check)),
        Err(err) => checks.push(check("health", false, err.to_string())),
    }
    Report { source: source.describe(), checks }
}

fn gpu_check(h: &GpuHealth) -> Check {
    let name = format!("gpu {}", h.index);
    if !h.present {
        return check(name, false, "fallen off the bus (GPU lost)");
    }
    let mut problems = Vec::new();
    if let Some(t) = h.temperature_c.filter(|t| *t >= h.slowdown_temperature_c) {
        problems.push(format!("overheating: {t} °C (slowdown at {} °C)", h.slowdown_temperature_c));
    }
    if h.uncorrectable_ecc_errors > 0 {
        problems.push(format!("{} uncorrectable ECC error(s)", h.uncorrectable_ecc_errors));
    }
    if !h.xid_errors.is_empty() {
        problems.push(format!("XID error(s) {:?}", h.xid_errors));
    }
    if !h.throttle_reasons.is_empty() {
        problems.push(format!("throttled: {}", h.throttle_reasons.join(", ")));
    }
    if problems.is_empty() {
        let temp = h.temperature_c.map_or_else(|| "temperature unknown".to_owned(), |t| format!("{t} °C"));
        check(name, true, format!("healthy, {temp}"))
    } else {
        check(name, false, problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::simulated::{Fault, SimulatedSource};

    fn isolated() -> Check {
        check("isolation", true, "sandboxed")
    }

    #[test]
    fn a_host_that_cannot_isolate_workloads_fails() {
        let source = SimulatedSource::new("1xH100-80GB", "h", vec![]).unwrap();
        let report = run(&source, &host(), &check("isolation", false, "bubblewrap is not installed"));
        assert!(!report.passed());
        assert!(render(&report).contains("[FAIL] isolation: bubblewrap is not installed"), "{}", render(&report));
    }

    fn host() -> HostFacts {
        crate::host::host_facts(None)
    }

    #[test]
    fn a_healthy_simulated_host_passes() {
        let source = SimulatedSource::new("2xH100-80GB", "h", vec![]).unwrap();
        let report = run(&source, &host(), &isolated());
        assert!(report.passed(), "{}", render(&report));
        assert!(render(&report).contains("PASSED"));
    }

    #[test]
    fn each_fault_fails_its_gpu_with_a_reason() {
        let faults =
            ["xid:0:79", "ecc:1", "overheat:2", "offbus:3", "throttle:4"].map(|f| Fault::parse(f).unwrap()).to_vec();
        let source = SimulatedSource::new("6xH100-80GB", "h", faults).unwrap();
        let report = run(&source, &host(), &isolated());
        assert!(!report.passed());
        let detail = |i: usize| report.checks.iter().find(|c| c.name == format!("gpu {i}")).unwrap().clone();
        assert!(detail(0).detail.contains("XID") && !detail(0).passed);
        assert!(detail(1).detail.contains("ECC"));
        assert!(detail(2).detail.contains("overheating"));
        assert!(detail(3).detail.contains("off the bus"));
        assert!(detail(4).detail.contains("throttled"));
        assert!(detail(5).passed);
        assert!(render(&report).contains("FAILED: 5 of"));
    }
}
