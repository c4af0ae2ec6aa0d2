//! Fleet dashboards: the admin's whole fleet (totals, utilisation over time, a heat map of
//! every GPU, alerts to acknowledge) and a provider's own hosts as live GPU tiles. Totals and
//! host lists refresh every few seconds; GPU readings arrive live over the telemetry feed.

use crate::{
    components::{
        kit::{Await, AwaitList, in_browser},
        money::dollars,
        numbers::fixed,
        session::{Audience, RequireSignIn, account_resource},
        telemetry::{LiveBadge, fleet_utilisation, heat_class, latest_readings, line_path, use_live_samples},
    },
    pages::admin::admins_only,
    server_fns::telemetry::{AcknowledgeAlert, list_alerts, load_fleet, load_my_hosts, load_telemetry},
};
use cardpool_domain::{
    AppError,
    account::Viewer,
    telemetry::{Alert, FleetOverview, GpuReading, HostSample, TelemetryScope, TelemetryView},
};
use leptos::prelude::*;
use leptos_meta::Title;
use std::collections::BTreeMap;

fn ticker() -> RwSignal<u32> {
    // Totals and host lists reload every five seconds; readings come live.
    let tick = RwSignal::new(0u32);
    crate::components::kit::poll(tick, std::time::Duration::from_secs(5), || true);
    tick
}

#[component]
pub fn AdminFleetPage() -> impl IntoView {
    let tick = ticker();
    let overview = account_resource(Audience::Admins, move || tick.get(), |_| load_fleet());
    let alerts = AlertsData::load(Audience::Admins);
    view! {
        <Title text="Fleet · Admin" />
        <RequireSignIn children=move |me: Viewer| admins_only(me, || view! { <Fleet overview alerts /> }) />
    }
}

#[component]
fn Fleet(overview: Resource<Result<FleetOverview, AppError>>, alerts: AlertsData) -> impl IntoView {
    // In the browser only: live readings would race hydration (see `TelemetrySection`).
    let telemetry = LocalResource::new(|| load_telemetry(TelemetryScope::Fleet));
    view! {
        <div class="space-y-6">
            <div>
                <h1 class="text-2xl font-bold text-slate-900">"Fleet"</h1>
                <p class="mt-1 text-slate-600">"Every host and GPU, live."</p>
            </div>
            <Await resource=overview skeleton="h-24" ready=move |o| view! { <Totals overview=o /> } />
            {move || match in_browser(telemetry) {
                None => view! { <div class="h-64 animate-pulse rounded-2xl bg-slate-100" aria-label="Loading live telemetry"></div> }.into_any(),
                Some(Ok(view)) => view! { <LiveFleet view overview /> }.into_any(),
                Some(Err(err)) => view! { <p role="alert" class="text-red-700">{err.to_string()}</p> }.into_any(),
            }}
            <Alerts admin=true data=alerts />
        </div>
    }
}

#[component]
fn Totals(overview: FleetOverview) -> impl IntoView {
    let occupancy = if overview.gpus_online == 0 {
        0.0
    } else {
        f64::from(overview.gpus_rented) / f64::from(overview.gpus_online) * 100.0
    };
    let cards = [
        ("GPUs online", format!("{} / {}", overview.gpus_online, overview.gpus_total), "fleet-online"),
        ("Occupancy", format!("{} %", fixed(occupancy, 0)), "fleet-occupancy"),
        ("Revenue rate", format!("{}/h", dollars(overview.revenue_per_hour_micros)), "fleet-revenue"),
        ("Open alerts", overview.open_alerts.to_string(), "fleet-alerts"),
    ];
    view! {
        <div class="grid gap-4 sm:grid-cols-2 lg:grid-cols-4">
            {cards.into_iter().map(|(label, value, id)| view! {
                <div class="card">
                    <p class="text-sm text-slate-500">{label}</p>
                    <p class="mt-1 text-2xl font-semibold tabular-nums text-slate-900" data-testid=id>{value}</p>
                </div>
            }).collect_view()}
        </div>
    }
}

/// Fleet utilisation over time and the heat map, both fed live.
#[component]
fn LiveFleet(view: TelemetryView, overview: Resource<Result<FleetOverview, AppError>>) -> impl IntoView {
    let (samples, connected) = use_live_samples(&view);
    let points = Memo::new(move |_| samples.with(|s| fleet_utilisation(s)));
    let latest = Memo::new(move |_| samples.with(|s| latest_readings(s)));
    view! {
        <section class="card" aria-labelledby="fleet-util">
            <div class="flex items-center justify-between">
                <h2 id="fleet-util" class="text-lg font-semibold text-slate-900">"Fleet utilisation"</h2>
                <LiveBadge connected />
            </div>
            <UtilChart points />
        </section>
        <section class="card" aria-labelledby="heatmap">
            <h2 id="heatmap" class="text-lg font-semibold text-slate-900">"Hosts and GPUs"</h2>
            <HeatLegend />
            <Transition fallback=|| ()>
                {move || Suspend::new(async move {
                    overview.await.ok().map(|o| view! { <HeatMap overview=o latest /> })
                })}
            </Transition>
        </section>
    }
}

#[component]
fn UtilChart(points: Memo<Vec<(i64, f64)>>) -> impl IntoView {
    const W: f64 = 600.0;
    const H: f64 = 120.0;
    let now =
        move || points.with(|p| p.last().map(|(_, v)| format!("{} %", fixed(*v, 0))).unwrap_or_else(|| "—".into()));
    view! {
        <figure class="mt-3" data-testid="fleet-chart">
            <svg viewBox=format!("0 0 {W} {H}") preserveAspectRatio="none" class="h-32 w-full rounded-lg bg-slate-50" role="img"
                aria-label=move || format!("Average GPU utilisation: {} points, now {}", points.with(Vec::len), now())
                data-points=move || points.with(Vec::len)>
                <path d=move || points.with(|p| line_path(p, 100.0, W, H)) class="fill-none stroke-indigo-600" stroke-width="2" vector-effect="non-scaling-stroke" />
            </svg>
            <figcaption class="mt-1 flex justify-between text-xs text-slate-500">
                <span>"Average of every reporting GPU, 0–100 %"</span>
                <span class="tabular-nums font-medium text-slate-900" data-testid="fleet-util-now">{now}</span>
            </figcaption>
        </figure>
    }
}

#[component]
fn HeatLegend() -> impl IntoView {
    view! {
        <div class="mt-2 flex flex-wrap items-center gap-2 text-xs text-slate-600" aria-hidden="true">
            <span>"Utilisation:"</span>
            {[(None, "no data"), (Some(0.0), "< 10 %"), (Some(20.0), "< 35 %"), (Some(50.0), "< 65 %"), (Some(70.0), "< 85 %"), (Some(90.0), "≥ 85 %")]
                .into_iter()
                .map(|(u, label)| view! { <span class=format!("rounded px-2 py-0.5 {}", heat_class(u))>{label}</span> })
                .collect_view()}
            <span class="rounded px-2 py-0.5 ring-2 ring-amber-500">"rented"</span>
        </div>
    }
}

/// One row per host, one cell per GPU coloured by its latest utilisation.
#[component]
pub fn HeatMap(overview: FleetOverview, latest: Memo<BTreeMap<(i64, u32), GpuReading>>) -> impl IntoView {
    if overview.hosts.is_empty() {
        return view! { <p class="mt-4 text-sm text-slate-500">"No GPUs to show yet."</p> }.into_any();
    }
    view! {
        <ul class="mt-4 space-y-3" data-testid="heatmap">
            {overview.hosts.into_iter().map(|host| {
                let host_id = host.host_id;
                view! {
                    <li class="flex flex-col gap-2 sm:flex-row sm:items-center">
                        <div class="sm:w-64">
                            <p class="flex items-center gap-2 text-sm font-medium text-slate-900">
                                <span class=if host.online { "h-2.5 w-2.5 rounded-full bg-emerald-500" } else { "h-2.5 w-2.5 rounded-full bg-slate-400" } aria-hidden="true"></span>
                                {host.name.clone()}
                                <span class="sr-only">{if host.online { "online" } else { "offline" }}</span>
                            </p>
                            <p class="text-xs text-slate-500">{format!("{} · {}", host.gpu_model, host.provider)}</p>
                        </div>
                        <div class="flex flex-wrap gap-1.5">
                            {host.gpus.into_iter().map(|gpu| {
                                let online = host.online;
                                let fallback = gpu.latest.clone();
                                let index = gpu.index;
                                let reading = Memo::new(move |_| if online { latest.with(|l| l.get(&(host_id, index)).cloned()).or_else(|| fallback.clone()) } else { None });
                                let util = move || reading.get().and_then(|r| r.util_pct);
                                let rented = if gpu.rented { " ring-2 ring-amber-500" } else { "" };
                                let title = move || {
                                    let r = reading.get();
                                    format!(
                                        "GPU {}: {}{}{}",
                                        gpu.index,
                                        r.as_ref().and_then(|r| r.util_pct).map(|u| format!("{} % busy", fixed(u, 0))).unwrap_or_else(|| "no data".into()),
                                        r.as_ref().and_then(|r| r.temperature_c).map(|t| format!(", {} °C", fixed(t, 0))).unwrap_or_default(),
                                        if gpu.rented { ", rented" } else { ", free" },
                                    )
                                };
                                view! {
                                    <span class=move || format!("flex h-14 w-14 flex-col items-center justify-center rounded-md text-[10px] font-medium leading-tight tabular-nums {}{rented}", heat_class(util()))
                                        title=title aria-label=title data-testid=format!("heat-{host_id}-{}", gpu.index)>
                                        <span>{format!("#{}", gpu.index)}</span>
                                        <span>{move || util().map(|u| format!("{}%", fixed(u, 0))).unwrap_or_else(|| "–".into())}</span>
                                        <span>{move || reading.get().and_then(|r| r.temperature_c).map(|t| format!("{}°C", fixed(t, 0))).unwrap_or_default()}</span>
                                    </span>
                                }
                            }).collect_view()}
                        </div>
                    </li>
                }
            }).collect_view()}
        </ul>
    }
    .into_any()
}

/// What the alerts section loads and sends, made where the page starts (see `session`'s
/// module doc).
#[derive(Clone, Copy)]
pub struct AlertsData {
    acknowledge: ServerAction<AcknowledgeAlert>,
    alerts: Resource<Result<Vec<Alert>, AppError>>,
}

impl AlertsData {
    fn load(audience: Audience) -> Self {
        let acknowledge = ServerAction::<AcknowledgeAlert>::new();
        let tick = ticker();
        let alerts = account_resource(audience, move || (tick.get(), acknowledge.version().get()), |_| list_alerts());
        Self { acknowledge, alerts }
    }
}

/// Alerts: admins acknowledge them, providers see their own hosts'.
#[component]
fn Alerts(admin: bool, data: AlertsData) -> impl IntoView {
    let AlertsData { acknowledge, alerts } = data;
    view! {
        <section class="card" aria-labelledby="alerts">
            <h2 id="alerts" class="text-lg font-semibold text-slate-900">"Alerts"</h2>
            <AwaitList resource=alerts skeleton="mt-4 h-16" empty="No alerts. All quiet." ready=move |list| view! { <AlertTable list admin acknowledge /> } />
        </section>
    }
}

#[component]
fn AlertTable(list: Vec<Alert>, admin: bool, acknowledge: ServerAction<AcknowledgeAlert>) -> impl IntoView {
    view! {
        <div class="mt-3 overflow-x-auto">
            <table class="min-w-full divide-y divide-slate-200 text-sm" data-testid="alerts">
                <thead>
                    <tr class="text-left text-slate-500">
                        <th scope="col" class="py-2 pr-4 font-medium">"Alert"</th>
                        <th scope="col" class="py-2 pr-4 font-medium">"Host"</th>
                        <th scope="col" class="py-2 pr-4 font-medium">"Raised"</th>
                        <th scope="col" class="py-2 pr-4 font-medium">"State"</th>
                        {admin.then(|| view! { <th scope="col" class="py-2 font-medium"><span class="sr-only">"Acknowledge"</span></th> })}
                    </tr>
                </thead>
                <tbody class="divide-y divide-slate-100">
                    {list.into_iter().map(|a| {
                        let open = a.resolved_at.is_none();
                        let state = match (open, a.acknowledged_at.is_some()) {
                            (true, false) => ("Open", "bg-red-50 text-red-700 ring-red-200"),
                            (true, true) => ("Acknowledged", "bg-amber-50 text-amber-800 ring-amber-200"),
                            (false, _) => ("Resolved", "bg-slate-100 text-slate-600 ring-slate-200"),
                        };
                        view! {
                            <tr data-testid="alert-row">
                                <td class="py-2 pr-4"><p class="font-medium text-slate-900">{a.kind.label()}</p><p class="text-slate-600">{a.message.clone()}</p></td>
                                <td class="py-2 pr-4 text-slate-700">{a.host_label.clone()}{a.gpu_index.map(|g| format!(" · GPU {g}"))}</td>
                                <td class="py-2 pr-4 text-slate-600"><time datetime=a.raised_at.to_rfc3339()>{a.raised_at.format("%Y-%m-%d %H:%M UTC").to_string()}</time></td>
                                <td class="py-2 pr-4"><span class=format!("rounded-full px-2 py-0.5 text-xs font-medium ring-1 {}", state.1)>{state.0}</span></td>
                                {(admin && a.acknowledged_at.is_none()).then(|| view! {
                                    <td class="py-2">
                                        <ActionForm action=acknowledge>
                                            <input type="hidden" name="id" value=a.id />
                                            <button type="submit" class="btn-secondary text-xs">"Acknowledge"</button>
                                        </ActionForm>
                                    </td>
                                })}
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}

/// What a provider's fleet section loads, made where the page starts.
#[derive(Clone, Copy)]
pub struct MyFleetData {
    overview: Resource<Result<FleetOverview, AppError>>,
    alerts: AlertsData,
}

impl MyFleetData {
    pub fn load() -> Self {
        let tick = ticker();
        let audience = Audience::ProvidersAndAdmins;
        Self {
            overview: account_resource(audience, move || tick.get(), |_| load_my_hosts()),
            alerts: AlertsData::load(audience),
        }
    }
}

/// A provider's hosts as live GPU tiles, with the rate they earn right now.
#[component]
pub fn MyFleet(data: MyFleetData) -> impl IntoView {
    let MyFleetData { overview, alerts } = data;
    let telemetry = LocalResource::new(|| load_telemetry(TelemetryScope::Mine));
    view! {
        <section class="card" aria-labelledby="my-gpus">
            <h2 id="my-gpus" class="text-lg font-semibold text-slate-900">"GPUs now"</h2>
            <Transition fallback=|| view! { <div class="mt-4 h-16 animate-pulse rounded bg-slate-100"></div> }>
                {move || Suspend::new(async move {
                    overview.await.ok().map(|o| view! {
                        <p class="mt-1 text-sm text-slate-600" data-testid="earning-rate">
                            {format!("{} of {} GPUs rented · earning {}/h before the platform fee", o.gpus_rented, o.gpus_total, dollars(o.revenue_per_hour_micros))}
                        </p>
                    })
                })}
            </Transition>
            {move || in_browser(telemetry).and_then(Result::ok).map(|view| view! { <MyTiles view overview /> })}
        </section>
        <Alerts admin=false data=alerts />
    }
}

#[component]
fn MyTiles(view: TelemetryView, overview: Resource<Result<FleetOverview, AppError>>) -> impl IntoView {
    let (samples, connected) = use_live_samples(&view);
    let latest = Memo::new(move |_| samples.with(|s: &Vec<HostSample>| latest_readings(s)));
    view! {
        <div class="mt-2"><LiveBadge connected /></div>
        <HeatLegend />
        <Transition fallback=|| ()>
            {move || Suspend::new(async move { overview.await.ok().map(|o| view! { <HeatMap overview=o latest /> }) })}
        </Transition>
    }
}
