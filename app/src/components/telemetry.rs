//! Live GPU telemetry in the browser: the feed (Server-Sent Events, opened after hydration),
//! line charts that redraw as samples arrive, per-GPU panels and heat-map tiles.
//!
//! A page renders the history it loaded with the server (so charts show on first paint), then
//! [`use_live_samples`] appends what the feed sends, keeping the last hour.

use super::numbers::fixed;
use cardpool_domain::telemetry::{GpuReading, HostSample, TelemetryScope, TelemetryView, watt_hours};
use leptos::prelude::*;
use std::collections::BTreeMap;

/// Samples kept in a chart's window, milliseconds.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
const WINDOW_MS: i64 = 60 * 60 * 1000;

/// The view's samples, extended live while the page is open. `connected` tells whether the
/// feed is up (for a "live" badge).
pub fn use_live_samples(view: &TelemetryView) -> (RwSignal<Vec<HostSample>>, RwSignal<bool>) {
    let samples = RwSignal::new(view.samples.clone());
    let connected = RwSignal::new(false);
    #[cfg(feature = "hydrate")]
    if view.live {
        open_feed(view.scope, samples, connected);
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = &connected;
    (samples, connected)
}

/// Appends a live sample, dropping what fell out of the window.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn push(samples: &mut Vec<HostSample>, sample: HostSample) {
    let horizon = sample.at_ms - WINDOW_MS;
    samples.push(sample);
    let stale = samples.iter().take_while(|s| s.at_ms < horizon).count();
    samples.drain(..stale);
}

#[cfg(feature = "hydrate")]
fn open_feed(scope: TelemetryScope, samples: RwSignal<Vec<HostSample>>, connected: RwSignal<bool>) {
    use cardpool_domain::telemetry::LiveEvent;
    use wasm_bindgen::{JsCast, closure::Closure};
    let url = format!("/api/v1/telemetry/live?{}", scope.query());
    let Ok(source) = web_sys::EventSource::new(&url) else { return };
    let on_message = {
        let source = source.clone();
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
            let Some(text) = event.data().as_string() else { return };
            match serde_json::from_str::<LiveEvent>(&text) {
                Ok(LiveEvent::Sample(sample)) => {
                    connected.set(true);
                    samples.update(|s| push(s, sample));
                }
                Ok(LiveEvent::End { .. }) => {
                    connected.set(false);
                    source.close();
                }
                Err(_) => {}
            }
        })
    };
    let on_error = Closure::<dyn FnMut()>::new(move || connected.set(false));
    source.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    // The closures live as long as the EventSource, which the cleanup below closes.
    on_message.forget();
    on_error.forget();
    let source = send_wrapper::SendWrapper::new(source);
    on_cleanup(move || source.close());
}

/// Which reading a chart plots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Utilization,
    Memory,
    Temperature,
    Power,
}

impl Metric {
    pub const ALL: [Metric; 4] = [Metric::Utilization, Metric::Memory, Metric::Temperature, Metric::Power];

    fn of(self, r: &GpuReading) -> Option<f64> {
        match self {
            Metric::Utilization => r.util_pct,
            Metric::Memory => r.memory_used_gib,
            Metric::Temperature => r.temperature_c,
            Metric::Power => r.power_w,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Metric::Utilization => "Utilisation",
            Metric::Memory => "Memory used",
            Metric::Temperature => "Temperature",
            Metric::Power => "Power",
        }
    }

    fn format(self, v: f64) -> String {
        match self {
            Metric::Utilization => format!("{} %", fixed(v, 0)),
            Metric::Memory => format!("{} GiB", fixed(v, 1)),
            Metric::Temperature => format!("{} °C", fixed(v, 0)),
            Metric::Power => format!("{} W", fixed(v, 0)),
        }
    }

    fn stroke(self) -> &'static str {
        match self {
            Metric::Utilization => "stroke-indigo-600",
            Metric::Memory => "stroke-sky-600",
            Metric::Temperature => "stroke-orange-500",
            Metric::Power => "stroke-emerald-600",
        }
    }
}

/// One GPU's points of one metric, oldest first.
fn series(samples: &[HostSample], host_id: i64, index: u32, metric: Metric) -> Vec<(i64, f64)> {
    samples
        .iter()
        .filter(|s| s.host_id == host_id)
        .filter_map(|s| s.gpus.iter().find(|g| g.index == index).and_then(|g| metric.of(g)).map(|v| (s.at_ms, v)))
        .collect()
}

/// An SVG polyline path through `points` scaled into `w` × `h`, y from 0 to `max`.
pub fn line_path(points: &[(i64, f64)], max: f64, w: f64, h: f64) -> String {
    let (Some(first), Some(last)) = (points.first(), points.last()) else { return String::new() };
    let span = (last.0 - first.0).max(1) as f64;
    let max = max.max(f64::EPSILON);
    points
        .iter()
        .enumerate()
        .map(|(i, (t, v))| {
            let x = (t - first.0) as f64 / span * w;
            let y = h - (v / max).clamp(0.0, 1.0) * (h - 4.0) - 2.0;
            format!("{}{},{}", if i == 0 { "M" } else { " L" }, fixed(x, 1), fixed(y, 1))
        })
        .collect()
}

/// A small live line chart of one metric of one GPU.
#[component]
pub fn MetricChart(
    samples: RwSignal<Vec<HostSample>>,
    host_id: i64,
    index: u32,
    metric: Metric,
    /// The y-axis top; `None` scales to the data.
    #[prop(optional)]
    max: Option<f64>,
) -> impl IntoView {
    const W: f64 = 300.0;
    const H: f64 = 80.0;
    let points = Memo::new(move |_| samples.with(|s| series(s, host_id, index, metric)));
    let top = move || max.unwrap_or_else(|| points.with(|p| p.iter().map(|(_, v)| *v).fold(1.0, f64::max) * 1.1));
    let latest = move || points.with(|p| p.last().map(|(_, v)| metric.format(*v)).unwrap_or_else(|| "—".into()));
    let path = move || points.with(|p| line_path(p, top(), W, H));
    let aria = move || format!("{} of GPU {index}: {} points, now {}", metric.label(), points.with(Vec::len), latest());
    view! {
        <figure class="rounded-lg bg-slate-50 p-2" data-testid=format!("chart-{}-{index}", metric.label().to_lowercase().replace(' ', "-"))>
            <figcaption class="flex justify-between text-xs text-slate-600">
                <span>{metric.label()}</span>
                <span class="tabular-nums font-medium text-slate-900" data-testid="chart-latest">{latest}</span>
            </figcaption>
            <svg viewBox=format!("0 0 {W} {H}") preserveAspectRatio="none" class="mt-1 h-16 w-full" role="img" aria-label=aria data-points=move || points.with(Vec::len)>
                <path d=path class=format!("fill-none {}", metric.stroke()) stroke-width="2" vector-effect="non-scaling-stroke" />
            </svg>
        </figure>
    }
}

/// A "Live" / "Not live" badge.
#[component]
pub fn LiveBadge(connected: RwSignal<bool>) -> impl IntoView {
    view! {
        <span class=move || if connected.get() { "inline-flex items-center gap-1 rounded-full bg-emerald-50 px-2 py-0.5 text-xs font-medium text-emerald-700 ring-1 ring-emerald-200" } else { "inline-flex items-center gap-1 rounded-full bg-slate-100 px-2 py-0.5 text-xs font-medium text-slate-600" }
            data-testid="live-badge">
            <span class=move || if connected.get() { "h-2 w-2 animate-pulse rounded-full bg-emerald-500" } else { "h-2 w-2 rounded-full bg-slate-400" } aria-hidden="true"></span>
            {move || if connected.get() { "Live" } else { "Not live" }}
        </span>
    }
}

/// Per-GPU charts (utilisation, memory, temperature, power) of every GPU in the view, live.
#[component]
pub fn GpuCharts(view: TelemetryView) -> impl IntoView {
    let (samples, connected) = use_live_samples(&view);
    // Which GPUs to draw: those in the history, or (before any sample) none yet.
    let gpus = Memo::new(move |_| {
        samples.with(|s| {
            let mut seen: BTreeMap<(i64, u32), Option<f64>> = BTreeMap::new();
            for sample in s {
                for g in &sample.gpus {
                    let total = seen.entry((sample.host_id, g.index)).or_default();
                    if g.memory_total_gib.is_some() {
                        *total = g.memory_total_gib;
                    }
                }
            }
            seen.into_iter().collect::<Vec<_>>()
        })
    });
    let energy = view.energy.clone();
    let stored_mj: i64 = energy.iter().map(|e| e.energy_mj).sum();
    let loaded_at = view.now_ms;
    // What the server had stored when the page loaded, plus power × time of what came since.
    let energy_mj = Memo::new(move |_| stored_mj + samples.with(|s| energy_since(s, loaded_at)));
    view! {
        <section class="card space-y-4" aria-labelledby="gpu-telemetry">
            <div class="flex flex-wrap items-center justify-between gap-2">
                <h2 id="gpu-telemetry" class="text-lg font-semibold text-slate-900">"GPU telemetry"</h2>
                <div class="flex items-center gap-3">
                    {(matches!(view.scope, TelemetryScope::Rental(_))).then(|| view! {
                        <span class="text-sm text-slate-600" data-testid="rental-energy">{move || format!("Energy so far: {} Wh", fixed(watt_hours(energy_mj.get()), 1))}</span>
                    })}
                    <LiveBadge connected />
                </div>
            </div>
            <Show when=move || !gpus.with(Vec::is_empty) fallback=move || view! {
                <p class="text-sm text-slate-500">{if view.live { "Waiting for the first samples from the host…" } else { "No telemetry for this period." }}</p>
            }>
                <For
                    each=move || gpus.get()
                    key=|((host, index), _)| (*host, *index)
                    children=move |((host_id, index), total): ((i64, u32), Option<f64>)| view! {
                        <div class="rounded-xl border border-slate-200 p-3" data-testid=format!("gpu-panel-{index}")>
                            <p class="mb-2 text-sm font-medium text-slate-800">{format!("GPU {index}")}</p>
                            <div class="grid grid-cols-2 gap-2 lg:grid-cols-4">
                                <MetricChart samples host_id index metric=Metric::Utilization max=100.0 />
                                {match total {
                                    Some(total) => view! { <MetricChart samples host_id index metric=Metric::Memory max=total /> }.into_any(),
                                    None => view! { <MetricChart samples host_id index metric=Metric::Memory /> }.into_any(),
                                }}
                                <MetricChart samples host_id index metric=Metric::Temperature max=100.0 />
                                <MetricChart samples host_id index metric=Metric::Power />
                            </div>
                        </div>
                    }
                />
            </Show>
            {(!energy.is_empty()).then(|| view! {
                <p class="text-xs text-slate-500">{energy.iter().map(|e| format!("GPU {}: {} Wh", e.gpu_index, fixed(watt_hours(e.energy_mj), 1))).collect::<Vec<_>>().join(" · ")}</p>
            })}
        </section>
    }
}

/// The GPU charts of `scope`, loaded once the page is hydrated and then live. `reload`
/// changing reloads them (a rental that starts holding its GPUs gets its live feed).
///
/// Loaded in the browser rather than rendered by the server: the readings change every second,
/// so a server-rendered chart would race hydration (and lose) whenever the stream is slow.
#[component]
pub fn TelemetrySection(
    #[prop(into)] scope: Signal<TelemetryScope>,
    #[prop(into, optional)] reload: Signal<u32>,
) -> impl IntoView {
    let loaded = LocalResource::new(move || {
        reload.track();
        crate::server_fns::telemetry::load_telemetry(scope.get())
    });
    move || match super::kit::in_browser(loaded) {
        None => {
            view! { <div class="h-40 animate-pulse rounded-2xl bg-slate-100" aria-label="Loading GPU telemetry"></div> }
                .into_any()
        }
        Some(Ok(view)) => view! { <GpuCharts view /> }.into_any(),
        Some(Err(err)) => view! { <p role="alert" class="text-sm text-red-700">{err.to_string()}</p> }.into_any(),
    }
}

/// Energy of the samples after `since_ms`, each GPU's power held since its previous sample
/// (at most 5 s: a gap is not usage), millijoules.
pub fn energy_since(samples: &[HostSample], since_ms: i64) -> i64 {
    let mut previous: BTreeMap<(i64, u32), i64> = BTreeMap::new();
    let mut total = 0.0;
    for sample in samples.iter().filter(|s| s.at_ms > since_ms) {
        for g in &sample.gpus {
            let before = previous.insert((sample.host_id, g.index), sample.at_ms).unwrap_or(since_ms);
            if let Some(watts) = g.power_w {
                total += watts * (sample.at_ms - before).clamp(0, 5000) as f64;
            }
        }
    }
    total as i64
}

/// Tailwind background for a utilisation heat-map cell.
pub fn heat_class(util: Option<f64>) -> &'static str {
    match util {
        None => "bg-slate-200 text-slate-500",
        Some(u) if u < 10.0 => "bg-indigo-50 text-indigo-900",
        Some(u) if u < 35.0 => "bg-indigo-200 text-indigo-900",
        Some(u) if u < 65.0 => "bg-indigo-400 text-white",
        Some(u) if u < 85.0 => "bg-indigo-600 text-white",
        Some(_) => "bg-indigo-800 text-white",
    }
}

/// The newest reading of every (host, GPU) in `samples`.
pub fn latest_readings(samples: &[HostSample]) -> BTreeMap<(i64, u32), GpuReading> {
    let mut latest = BTreeMap::new();
    for sample in samples {
        for g in &sample.gpus {
            latest.insert((sample.host_id, g.index), g.clone());
        }
    }
    latest
}

/// Average utilisation across every GPU reporting, per sample time (one point per host sample
/// second, averaged across hosts in the same second).
pub fn fleet_utilisation(samples: &[HostSample]) -> Vec<(i64, f64)> {
    let mut by_second: BTreeMap<i64, (f64, u32)> = BTreeMap::new();
    for sample in samples {
        for g in &sample.gpus {
            if let Some(u) = g.util_pct {
                let slot = by_second.entry(sample.at_ms / 1000).or_default();
                slot.0 += u;
                slot.1 += 1;
            }
        }
    }
    by_second.into_iter().map(|(s, (sum, n))| (s * 1000, sum / f64::from(n.max(1)))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(host_id: i64, at_ms: i64, util: f64) -> HostSample {
        HostSample {
            host_id,
            at_ms,
            gpus: vec![GpuReading { index: 0, util_pct: Some(util), ..GpuReading::default() }],
        }
    }

    #[test]
    fn the_window_keeps_one_hour() {
        let mut samples = vec![sample(1, 0, 1.0), sample(1, 1000, 2.0)];
        push(&mut samples, sample(1, WINDOW_MS + 500, 3.0));
        assert_eq!(samples.iter().map(|s| s.at_ms).collect::<Vec<_>>(), vec![1000, WINDOW_MS + 500]);
    }

    #[test]
    fn paths_scale_into_the_box() {
        assert_eq!(line_path(&[], 100.0, 300.0, 80.0), "");
        let path = line_path(&[(0, 0.0), (1000, 100.0)], 100.0, 300.0, 80.0);
        assert_eq!(path, "M0.0,78.0 L300.0,2.0");
    }

    #[test]
    fn live_energy_integrates_power_after_the_load() {
        let at = |t: i64, w: f64| HostSample {
            host_id: 1,
            at_ms: t,
            gpus: vec![GpuReading { index: 0, power_w: Some(w), ..GpuReading::default() }],
        };
        let samples = vec![at(500, 999.0), at(2000, 100.0), at(3000, 200.0), at(20_000, 300.0)];
        // 100 W for 1 s since the load at 1 s, 200 W for 1 s, then a gap counted as 5 s.
        assert_eq!(energy_since(&samples, 1000), 100_000 + 200_000 + 1_500_000);
    }

    #[test]
    fn fleet_average_is_per_second_across_hosts() {
        let samples = vec![sample(1, 1000, 10.0), sample(2, 1400, 30.0), sample(1, 2000, 50.0)];
        assert_eq!(fleet_utilisation(&samples), vec![(1000, 20.0), (2000, 50.0)]);
    }
}
