//! `/metrics` for Prometheus: every connected GPU under dcgm-exporter's metric names, units and
//! labels (`gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`, plus `host`,
//! Cardpool's host id), so stock DCGM Grafana dashboards work, and the server's own counters.
//! As in DCGM, the XID gauge is the last XID the GPU raised (not only one in the latest
//! second), throttle reasons are NVML's bitmask, and energy is the driver's running counter.
//! With several replicas each GPU is exported by the replica its agent is connected to only,
//! so scraping every replica counts each GPU once.
//!
//! Protected by a bearer token (`metrics_token`); without one configured the endpoint does not
//! exist (404), so a default install exposes nothing.

use axum::{
    Extension,
    extract::{Request, State},
    http::{HeaderMap, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use cardpool_app::ssr::AppState;
use cardpool_protocol::{GpuSample, throttle_mask};
use cardpool_service::telemetry;
use std::{
    fmt::Write,
    sync::{
        Arc,
        atomic::{AtomicI64, AtomicU64, Ordering},
    },
};

/// Counters the HTTP layer and the gateway keep.
#[derive(Default)]
pub struct ServerMetrics {
    pub requests: AtomicU64,
    pub agents_connected: AtomicI64,
    pub started: std::sync::OnceLock<std::time::Instant>,
}

/// The token, if `/metrics` is on.
#[derive(Clone)]
pub struct MetricsToken(pub Option<Arc<str>>);

/// Counts every request.
pub async fn count_requests(Extension(metrics): Extension<Arc<ServerMetrics>>, req: Request, next: Next) -> Response {
    metrics.requests.fetch_add(1, Ordering::Relaxed);
    next.run(req).await
}

fn authorised(headers: &HeaderMap, token: &str) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .trim();
    // Constant time in the token's length: no early exit on the first differing byte.
    given.len() == token.len() && given.bytes().zip(token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// Escapes a Prometheus label value.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// What the server knows of one GPU: its newest sample and the last XID it raised.
struct Seen<'a> {
    sample: &'a GpuSample,
    last_xid: Option<u64>,
}

/// One dcgm-exporter metric: its name, Prometheus type, help text and how to read it off what
/// is known of a GPU (`None`: this GPU does not report it).
struct DcgmGauge {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    read: fn(&Seen<'_>) -> Option<f64>,
}

const MIB: u64 = 1024 * 1024;

const DCGM_GAUGES: [DcgmGauge; 14] = [
    DcgmGauge {
        name: "DCGM_FI_DEV_GPU_UTIL",
        kind: "gauge",
        help: "GPU utilization (in %).",
        read: |g| g.sample.utilization_pct.map(f64::from),
    },
    DcgmGauge {
        name: "DCGM_FI_DEV_FB_USED",
        kind: "gauge",
        help: "Framebuffer memory used (in MiB).",
        read: |g| g.sample.memory_used_bytes.map(|b| (b / MIB) as f64),
    },
    DcgmGauge {
        name: "DCGM_FI_DEV_FB_FREE",
        kind: "gauge",
        help: "Framebuffer memory free (in MiB).",
        read: |g| {
            g.sample.memory_total_bytes.zip(g.sample.memory_used_bytes).map(|(t, u)| (t.saturating_sub(u) / MIB) as f64)
        },
    },
    DcgmGauge {
        name: "DCGM_FI_DEV_GPU_TEMP",
        kind: "gauge",
        help: "GPU temperature (in C).",
        read: |g| g.sample.temperature_c.map(f64::from),
    },
    DcgmGauge {
        name: "DCGM_FI_DEV_POWER_USAGE",
        kind: "gauge",
        help: "Power draw (in W).",
        read: |g| g.sample.power_milliwatts.map(|mw| f64::from(mw) / 1000.0),
    },
    DcgmGauge {
        name: "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        kind: "gauge",
        help: "Power management limit (in W).",
        read: |g| g.sample.power_limit_milliwatts.map(|mw| f64::from(mw) / 1000.0),
    },
    DcgmGauge {
        name: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        kind: "counter",
        help: "Total energy consumption since boot (in mJ).",
        read: |g| g.sample.energy_millijoules.map(|mj| mj as f64),
    },
    DcgmGauge {
        name: "DCGM_FI_DEV_SM_CLOCK",
        kind: "gauge",
        help: "SM clock frequency (in MHz).",
        read: |g| g.sample.sm_clock_mhz.map(f64::from),
    },
    DcgmGauge {
        name: "DCGM_FI_DEV_MEM_CLOCK",
        kind: "gauge",
        help: "Memory clock frequency (in MHz).",
        read: |g| g.sample.memory_clock_mhz.map(f64::from),
    },
    DcgmGauge {
        name: "DCGM_FI_DEV_FAN_SPEED",
        kind: "gauge",
        help: "Fan speed (in %).",
        read: |g| g.sample.fan_pct.map(f64::from),
    },
    DcgmGauge {
        name: "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        kind: "counter",
        help: "Total number of single-bit volatile ECC errors.",
        read: |g| g.sample.ecc_corrected.map(|v| v as f64),
    },
    DcgmGauge {
        name: "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        kind: "counter",
        help: "Total number of double-bit volatile ECC errors.",
        read: |g| g.sample.ecc_uncorrected.map(|v| v as f64),
    },
    DcgmGauge {
        name: "DCGM_FI_DEV_XID_ERRORS",
        kind: "gauge",
        help: "Value of the last XID error encountered.",
        read: |g| Some(g.last_xid.unwrap_or(0) as f64),
    },
    DcgmGauge {
        name: "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        kind: "gauge",
        help: "Current clock throttle reasons (bitmask of NVML's reasons).",
        read: |g| Some(throttle_mask(&g.sample.throttle_reasons) as f64),
    },
];

pub async fn scrape(
    State(state): State<AppState>,
    Extension(token): Extension<MetricsToken>,
    Extension(metrics): Extension<Arc<ServerMetrics>>,
    headers: HeaderMap,
) -> Response {
    let Some(token) = token.0 else {
        return (StatusCode::NOT_FOUND, "metrics are off: set metrics_token").into_response();
    };
    if !authorised(&headers, &token) {
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "bearer token required")
            .into_response();
    }
    let services = &state.services;
    let Ok(snapshot) = telemetry::metrics_snapshot(services).await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "database unreachable").into_response();
    };
    let mut out = String::new();
    let latest = services.telemetry.latest();
    // Each GPU is exported by one replica: the one its agent is connected to.
    let mut hosts: Vec<_> = latest
        .iter()
        .filter(|(id, _)| snapshot.online_hosts.contains(id) && services.telemetry.is_connected_here(**id))
        .collect();
    hosts.sort_by_key(|(id, _)| **id);
    // Each GPU's labels and what is known of it, worked out once for every gauge.
    let gpus: Vec<(Seen<'_>, String)> = hosts
        .iter()
        .flat_map(|(host_id, frame)| frame.gpus.iter().map(move |gpu| (**host_id, gpu)))
        .map(|(host_id, gpu)| {
            let known = snapshot.gpus.get(&(host_id, gpu.index));
            let (pci_bus_id, model, hostname) =
                known.map_or(("", "", ""), |l| (l.pci_bus_id.as_str(), l.model.as_str(), l.hostname.as_str()));
            let labels = format!(
                "gpu=\"{}\",UUID=\"{}\",pci_bus_id=\"{}\",device=\"nvidia{}\",modelName=\"{}\",Hostname=\"{}\",host=\"{host_id}\"",
                gpu.index,
                label(&gpu.uuid),
                label(pci_bus_id),
                gpu.index,
                label(model),
                label(hostname),
            );
            (Seen { sample: gpu, last_xid: services.telemetry.last_xid(host_id, gpu.index) }, labels)
        })
        .collect();
    for gauge in DCGM_GAUGES {
        let (name, kind, help) = (gauge.name, gauge.kind, gauge.help);
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (seen, labels) in &gpus {
            let Some(value) = (gauge.read)(seen) else { continue };
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
    let hub = &services.telemetry;
    let counters: [(&str, &str, &str, f64); 8] = [
        (
            "cardpool_http_requests_total",
            "counter",
            "HTTP requests served.",
            metrics.requests.load(Ordering::Relaxed) as f64,
        ),
        (
            "cardpool_agents_connected",
            "gauge",
            "Agents connected to this server.",
            metrics.agents_connected.load(Ordering::Relaxed) as f64,
        ),
        (
            "cardpool_bus_dropped_total",
            "counter",
            "Notes and frames this replica could not hand to NATS (its outbox was full).",
            services.bus.dropped.load(Ordering::Relaxed) as f64,
        ),
        (
            "cardpool_telemetry_frames_total",
            "counter",
            "Telemetry frames stored (each host's GPUs at one instant).",
            hub.frames_stored.load(Ordering::Relaxed) as f64,
        ),
        (
            "cardpool_telemetry_samples_total",
            "counter",
            "GPU samples stored.",
            hub.samples_stored.load(Ordering::Relaxed) as f64,
        ),
        (
            "cardpool_telemetry_duplicate_frames_total",
            "counter",
            "Replayed telemetry frames recognised and not stored again.",
            hub.frames_duplicate.load(Ordering::Relaxed) as f64,
        ),
        (
            "cardpool_telemetry_commits_total",
            "counter",
            "Telemetry transactions committed (each stores every agent message that arrived during the one before).",
            hub.commits.load(Ordering::Relaxed) as f64,
        ),
        ("cardpool_dashboards_watching", "gauge", "Live dashboard feeds open.", hub.watchers() as f64),
    ];
    for (name, kind, help, value) in counters {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
    }
    if let Some(started) = metrics.started.get() {
        let uptime = started.elapsed().as_secs_f64();
        let rate = hub.samples_stored.load(Ordering::Relaxed) as f64 / uptime.max(1.0);
        let _ = writeln!(
            out,
            "# HELP cardpool_telemetry_ingest_rate GPU samples stored per second since start.\n# TYPE cardpool_telemetry_ingest_rate gauge\ncardpool_telemetry_ingest_rate {rate:.3}"
        );
    }
    let _ = writeln!(out, "# HELP cardpool_rentals Rentals by kind and state.\n# TYPE cardpool_rentals gauge");
    for (kind, state_name, n) in &snapshot.rentals {
        let _ = writeln!(out, "cardpool_rentals{{kind=\"{}\",state=\"{}\"}} {n}", label(kind), label(state_name));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn token_must_match_exactly() {
        let mut headers = HeaderMap::new();
        assert!(!authorised(&headers, "s3cret"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer s3cret"));
        assert!(authorised(&headers, "s3cret"));
        assert!(!authorised(&headers, "s3cre"));
        assert!(!authorised(&headers, "s3creT"));
        assert_eq!(label("a\"b\\c"), "a\\\"b\\\\c");
    }
}
