//! Provider pages: enrollment tokens, the hosts list with live status, and one host's GPUs
//! and status history.

use crate::{
    components::{
        form::{Field, FormAlert, SubmitButton, field_error, form_error},
        kit::{Await, AwaitList, Col, DataTable},
        session::{Audience, RequireSignIn, account_resource},
    },
    pages::fleet::{MyFleet, MyFleetData},
    server_fns::hosts::{
        CreateEnrollmentToken, RevokeHost, SetGpuSale, SetHostFabric, SetHostListed, SetMigLayout, UpdateHostPricing,
        get_host, list_hosts,
    },
};
use cardpool_domain::{
    AppError,
    account::Viewer,
    host::{GpuModelPrice, HostDetail, HostStatus, HostSummary},
    money::format_dollars,
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

/// How often host pages re-read status while open.
const REFRESH: std::time::Duration = std::time::Duration::from_secs(3);

/// A signal that ticks every few seconds in the browser, for pages that show live state.
fn refresh_ticker() -> RwSignal<u32> {
    let tick = RwSignal::new(0u32);
    crate::components::kit::poll(tick, REFRESH, || true);
    tick
}

#[component]
pub fn StatusBadge(status: HostStatus) -> impl IntoView {
    let (class, dot) = match status {
        HostStatus::Online => ("bg-emerald-50 text-emerald-700 ring-emerald-200", "bg-emerald-500"),
        HostStatus::Offline => ("bg-slate-100 text-slate-600 ring-slate-200", "bg-slate-400"),
        HostStatus::Revoked => ("bg-red-50 text-red-700 ring-red-200", "bg-red-500"),
    };
    view! {
        <span class=format!("badge gap-1.5 {class}") data-testid="host-status">
            <span class=format!("h-1.5 w-1.5 rounded-full {dot}") aria-hidden="true"></span>
            {status.as_str()}
        </span>
    }
}

fn time_or_never(t: Option<chrono::DateTime<chrono::Utc>>) -> String {
    t.map_or_else(|| "never".to_owned(), |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
}

#[component]
fn NotAProvider() -> impl IntoView {
    view! {
        <div class="card mx-auto max-w-lg text-center">
            <h1 class="text-xl font-semibold text-slate-900">"Host GPUs on Cardpool"</h1>
            <p class="mt-2 text-slate-600">"Turn on provider features on your account page to enroll hosts."</p>
            <a href="/account" class="btn-primary mt-6 inline-flex">"Go to your account"</a>
        </div>
    }
}

#[component]
pub fn HostsPage() -> impl IntoView {
    let tick = refresh_ticker();
    let hosts = account_resource(Audience::ProvidersAndAdmins, move || tick.get(), |_| list_hosts());
    let fleet = MyFleetData::load();
    view! {
        <Title text="Hosts" />
        <RequireSignIn children=move |me: Viewer| {
            if me.roles.provider || me.roles.admin { view! { <Hosts hosts fleet /> }.into_any() } else { view! { <NotAProvider /> }.into_any() }
        } />
    }
}

#[component]
fn Hosts(hosts: Resource<Result<Vec<HostSummary>, AppError>>, fleet: MyFleetData) -> impl IntoView {
    let create = ServerAction::<CreateEnrollmentToken>::new();
    let value = create.value();
    view! {
        <div class="space-y-6">
            <div>
                <h1 class="text-2xl font-bold text-slate-900">"Hosts"</h1>
                <p class="mt-1 text-slate-600">"Machines running the Cardpool agent. Status updates live."</p>
            </div>
            <section class="card" aria-labelledby="enroll">
                <h2 id="enroll" class="text-lg font-semibold text-slate-900">"Enroll a host"</h2>
                <p class="mt-1 text-sm text-slate-600">"Creates a single-use token valid for one hour, and the command to run on the host."</p>
                <ActionForm action=create attr:class="mt-4 flex flex-col gap-4 sm:flex-row sm:items-end" attr:novalidate=true>
                    <div class="flex-1">
                        <Field label="Location shown to renters" name="location" hint="e.g. “Frankfurt, DE”. Optional." error=field_error(value, "location") />
                    </div>
                    <div class="sm:w-56">
                        <SubmitButton label="Create enrollment token" pending=create.pending() />
                    </div>
                </ActionForm>
                <div class="mt-4"><FormAlert message=form_error(value) /></div>
                {move || value.get().and_then(Result::ok).map(|created| view! {
                    <div role="status" class="mt-4 rounded-lg bg-slate-900 p-4 text-slate-100">
                        <p class="text-sm text-slate-300">
                            "Run this on the host (as the user the agent runs as). The token works once, until "
                            {created.expires_at.format("%H:%M UTC").to_string()} ":"
                        </p>
                        <code data-testid="enroll-command" class="mt-2 block select-all break-all font-mono text-sm text-emerald-300">{created.command.clone()}</code>
                        <p class="mt-2 text-sm text-slate-300">"Then start it with " <code class="font-mono text-emerald-300">"cardpool-agent run"</code> " (add " <code class="font-mono">"--simulate 8xH100-80GB"</code> " to try it without GPUs)."</p>
                        <span class="hidden" data-testid="enroll-token">{created.token.clone()}</span>
                    </div>
                })}
            </section>
            <MyFleet data=fleet />
            <section class="card" aria-labelledby="your-hosts">
                <h2 id="your-hosts" class="text-lg font-semibold text-slate-900">"Your hosts"</h2>
                <AwaitList resource=hosts loading="Loading hosts…" class="mt-4" empty="No hosts yet. Create an enrollment token above." ready=move |list| view! { <HostTable hosts=list /> } />
            </section>
        </div>
    }
}

#[component]
fn HostTable(hosts: Vec<HostSummary>) -> impl IntoView {
    view! {
        <DataTable columns=vec![Col::new("Host"), Col::new("Status"), Col::new("GPUs"), Col::new("Location").from("md"), Col::new("Last heartbeat").from("lg"), Col::new("Agent").from("lg")] class="mt-4">
            {hosts.into_iter().map(|host| view! {
                <tr data-testid="host-row">
                    <td class="py-3 pr-4 font-medium"><a class="text-indigo-700 hover:underline" href=format!("/provider/hosts/{}", host.id)>{host.hostname.clone()}</a></td>
                    <td class="py-3 pr-4"><StatusBadge status=host.status /></td>
                    <td class="py-3 pr-4 text-slate-700">{if host.gpu_count == 0 { "none reported yet".to_owned() } else { host.gpu_summary.clone() }}</td>
                    <td class="hidden py-3 pr-4 text-slate-600 md:table-cell">{host.location.clone().unwrap_or_else(|| "—".into())}</td>
                    <td class="hidden py-3 pr-4 text-slate-600 lg:table-cell">{time_or_never(host.last_heartbeat_at)}</td>
                    <td class="hidden py-3 pr-4 text-slate-600 lg:table-cell">{host.agent_version.clone().unwrap_or_else(|| "—".into())}</td>
                </tr>
            }).collect_view()}
        </DataTable>
    }
}

#[component]
pub fn HostPage() -> impl IntoView {
    let params = use_params_map();
    let id = Signal::derive(move || params.with(|p| p.get("id").and_then(|id| id.parse::<i64>().ok()).unwrap_or(0)));
    let revoke = ServerAction::<RevokeHost>::new();
    let pricing = ServerAction::<UpdateHostPricing>::new();
    let listing = ServerAction::<SetHostListed>::new();
    let sale = ServerAction::<SetGpuSale>::new();
    let fabric = ServerAction::<SetHostFabric>::new();
    let layout = ServerAction::<SetMigLayout>::new();
    let tick = refresh_ticker();
    let detail = account_resource(
        Audience::Accounts,
        move || {
            let changes = (
                pricing.version().get(),
                listing.version().get(),
                sale.version().get(),
                fabric.version().get(),
                layout.version().get(),
            );
            (id.get(), tick.get(), revoke.version().get(), changes)
        },
        |(id, ..)| get_host(id),
    );
    let actions = HostActions { revoke, pricing, listing, sale, fabric, layout };
    view! {
        <Title text="Host" />
        <RequireSignIn children=move |_me: Viewer| view! { <Host id detail actions /> } />
    }
}

#[component]
fn Host(id: Signal<i64>, detail: Resource<Result<HostDetail, AppError>>, actions: HostActions) -> impl IntoView {
    view! {
        <Await resource=detail loading="Loading host…" ready=move |detail| view! { <HostDetailView detail actions /> } />
        <div class="mt-6">
            <crate::components::telemetry::TelemetrySection scope=Signal::derive(move || cardpool_domain::telemetry::TelemetryScope::Host(id.get())) />
        </div>
    }
}

/// What a provider can do on the host page.
#[derive(Clone, Copy)]
struct HostActions {
    revoke: ServerAction<RevokeHost>,
    pricing: ServerAction<UpdateHostPricing>,
    listing: ServerAction<SetHostListed>,
    sale: ServerAction<SetGpuSale>,
    fabric: ServerAction<SetHostFabric>,
    layout: ServerAction<SetMigLayout>,
}

#[component]
fn HostDetailView(detail: HostDetail, actions: HostActions) -> impl IntoView {
    let HostActions { revoke, pricing, listing, sale, fabric, layout } = actions;
    let host = detail.host;
    let revoked = host.status == HostStatus::Revoked;
    let models = units_sold(&detail.gpus);
    let prices = detail.prices.clone();
    view! {
        <div class="space-y-6">
            <div class="flex flex-wrap items-center justify-between gap-4">
                <div>
                    <a href="/provider/hosts" class="text-sm text-indigo-700 hover:underline">"← All hosts"</a>
                    <h1 class="mt-1 flex flex-wrap items-center gap-3 text-2xl font-bold text-slate-900">
                        {host.hostname.clone()} <StatusBadge status=host.status />
                        {host.verified.then(|| view! { <span class="badge bg-indigo-50 text-sm font-medium text-indigo-700 ring-indigo-200" data-testid="host-verified">"✓ Verified by Cardpool"</span> })}
                    </h1>
                    <p class="mt-1 text-sm text-slate-600">
                        {host.location.clone().unwrap_or_else(|| "No location set".into())} " · agent " {host.agent_version.clone().unwrap_or_else(|| "not connected yet".into())}
                        " · last heartbeat " {time_or_never(host.last_heartbeat_at)}
                    </p>
                </div>
                {(!revoked).then(|| view! {
                    <ActionForm action=revoke>
                        <input type="hidden" name="id" value=host.id />
                        <button type="submit" class="btn-danger">"Revoke host"</button>
                    </ActionForm>
                })}
            </div>
            {host.held_reason.clone().map(|why| view! {
                <div role="alert" class="rounded-lg bg-red-50 px-4 py-3 text-sm text-red-800 ring-1 ring-red-200" data-testid="host-delisted">
                    <p class="font-semibold">"Delisted by Cardpool's admins"</p>
                    <p class="mt-1">{why}</p>
                    <p class="mt-1 text-red-700">"Running rentals finish; nobody can book this host until an admin relists it."</p>
                </div>
            })}
            {(!revoked && !models.is_empty()).then(|| view! {
                <PricingSection host_id=host.id listed=host.listed models=models.clone() prices=prices.clone() pricing listing />
            })}
            {(!revoked).then(|| view! {
                <crate::components::fabric::FabricSection host_id=host.id fabric=detail.fabric.clone() links=detail.links.clone() action=fabric />
            })}
            <section class="card" aria-labelledby="gpus">
                <h2 id="gpus" class="text-lg font-semibold text-slate-900">"GPUs"</h2>
                {if detail.gpus.is_empty() {
                    view! { <p class="mt-4 text-slate-500">"The agent has not reported any GPUs yet."</p> }.into_any()
                } else {
                    view! {
                        <div class="mt-4 grid gap-4 sm:grid-cols-2 lg:grid-cols-4">
                            {detail.gpus.into_iter().map(|gpu| view! {
                                <div class="rounded-xl p-4 ring-1 ring-slate-200" data-testid="gpu-tile">
                                    <p class="text-xs font-medium uppercase tracking-wide text-slate-500">"GPU " {gpu.index}</p>
                                    <p class="mt-1 font-semibold text-slate-900">{gpu.model.clone()}</p>
                                    <p class="text-sm text-slate-600">{format!("{} GiB", gpu.memory_bytes >> 30)} " · CUDA " {gpu.cuda_version.clone()}</p>
                                    <p class="mt-2 truncate font-mono text-xs text-slate-500" title=gpu.uuid.clone()>{gpu.uuid.clone()}</p>
                                    <p class="mt-2 text-xs">
                                        <span class=if gpu.state == "available" { "badge bg-emerald-50 text-emerald-700 ring-emerald-200" } else { "badge bg-amber-50 text-amber-800 ring-amber-200" }>{gpu.state.clone()}</span>
                                        {(!gpu.nvlink_peers.is_empty()).then(|| view! { <span class="badge ml-1 bg-indigo-50 text-indigo-700 ring-indigo-200">{format!("NVLink ×{}", gpu.nvlink_peers.len())}</span> })}
                                        {(gpu.mig_enabled == Some(true)).then(|| view! { <span class="badge ml-1 bg-violet-50 text-violet-700 ring-violet-200">"MIG on"</span> })}
                                    </p>
                                    {(gpu.mig_enabled == Some(true) && !revoked).then(|| view! { <GpuSaleForm host_id=host.id gpu=gpu.clone() sale /> })}
                                    {(!gpu.mig_profiles.is_empty() && !revoked).then(|| view! {
                                        <crate::components::mig_layout::MigLayoutForm host_id=host.id gpu=gpu.clone() action=layout />
                                    })}
                                    {(!gpu.mig_instances.is_empty()).then(|| {
                                        let instances = gpu.mig_instances.clone();
                                        view! {
                                            <ul class="mt-2 space-y-1 text-xs text-slate-600" aria-label="MIG instances" data-testid="mig-instances">
                                                {instances.into_iter().map(|m| view! {
                                                    <li class="flex items-baseline gap-2">
                                                        <span class="font-medium text-slate-800">{m.profile}</span>
                                                        <span>{format!("{} GiB", m.memory_bytes >> 30)}</span>
                                                        <span class="truncate font-mono text-slate-400" title=m.uuid.clone()>{m.uuid.clone()}</span>
                                                    </li>
                                                }).collect_view()}
                                            </ul>
                                        }
                                    })}
                                </div>
                            }).collect_view()}
                        </div>
                    }.into_any()
                }}
            </section>
            <section class="card" aria-labelledby="self-test">
                <h2 id="self-test" class="text-lg font-semibold text-slate-900">"Self-test"</h2>
                {match detail.self_test {
                    None => view! { <p class="mt-2 text-slate-500">"No self-test received yet."</p> }.into_any(),
                    Some(report) => {
                        let passed = report.passed();
                        view! {
                            <p class="mt-2 text-sm text-slate-600">
                                <span data-testid="self-test-outcome" class=if passed { "badge bg-emerald-50 text-emerald-700 ring-emerald-200" } else { "badge bg-red-50 text-red-700 ring-red-200" }>
                                    {if passed { "passed" } else { "failed" }}
                                </span>
                                " " {report.source.clone()} " · " {time_or_never(detail.self_test_at)}
                            </p>
                            <ul class="mt-3 space-y-1 text-sm">
                                {report.checks.into_iter().map(|check| view! {
                                    <li class="flex gap-2">
                                        <span class=if check.passed { "text-emerald-600" } else { "text-red-600" } aria-hidden="true">{if check.passed { "✓" } else { "✗" }}</span>
                                        <span class="font-medium text-slate-800">{check.name}</span>
                                        <span class="text-slate-600">{check.detail}</span>
                                    </li>
                                }).collect_view()}
                            </ul>
                        }.into_any()
                    }
                }}
            </section>
            <section class="card" aria-labelledby="history">
                <h2 id="history" class="text-lg font-semibold text-slate-900">"Status history"</h2>
                <ol class="mt-4 space-y-3">
                    {detail.events.into_iter().map(|event| view! {
                        <li class="flex items-center gap-3 text-sm">
                            <StatusBadge status=event.status />
                            <span class="text-slate-700">{event.reason}</span>
                            <span class="text-slate-500">{event.at.format("%Y-%m-%d %H:%M:%S UTC").to_string()}</span>
                        </li>
                    }).collect_view()}
                </ol>
            </section>
        </div>
    }
}

#[component]
fn PricingSection(
    host_id: i64,
    listed: bool,
    models: Vec<String>,
    prices: Vec<GpuModelPrice>,
    pricing: ServerAction<UpdateHostPricing>,
    listing: ServerAction<SetHostListed>,
) -> impl IntoView {
    let value = pricing.value();
    let listing_value = listing.value();
    let saved = move || matches!(value.get(), Some(Ok(_)));
    view! {
        <section class="card" aria-labelledby="pricing">
            <div class="flex flex-wrap items-center justify-between gap-4">
                <div>
                    <h2 id="pricing" class="text-lg font-semibold text-slate-900">"Pricing and listing"</h2>
                    <p class="mt-1 text-sm text-slate-600">"Prices are per GPU-hour (per slice-hour for MIG slices) in US dollars, billed per second. Reserved and the spot minimum are at most the on-demand price."</p>
                </div>
                <ActionForm action=listing>
                    <input type="hidden" name="id" value=host_id />
                    <input type="hidden" name="listed" value=if listed { "false" } else { "true" } />
                    <div class="flex items-center gap-3">
                        <span data-testid="listing-state" class=if listed { "badge bg-emerald-50 text-emerald-700 ring-emerald-200" } else { "badge bg-slate-100 text-slate-600 ring-slate-200" }>
                            {if listed { "listed on the market" } else { "not listed" }}
                        </span>
                        <button type="submit" class=if listed { "btn-secondary" } else { "btn-primary" }>{if listed { "Take off the market" } else { "List on the market" }}</button>
                    </div>
                </ActionForm>
            </div>
            <div class="mt-4"><FormAlert message=form_error(listing_value) /></div>
            {models.into_iter().map(|model| {
                let current = prices.iter().find(|p| p.gpu_model == model).cloned();
                let show = move |f: fn(&GpuModelPrice) -> i64| current.as_ref().map(|p| format_dollars(f(p)));
                let suffix = model.chars().filter(char::is_ascii_alphanumeric).collect::<String>();
                let per = if model.contains(" MIG ") { "slice" } else { "GPU" };
                view! {
                    <ActionForm action=pricing attr:class="mt-4 rounded-xl p-4 ring-1 ring-slate-200" attr:novalidate=true>
                        <p class="font-medium text-slate-900">{model.clone()}</p>
                        <input type="hidden" name="id" value=host_id />
                        <input type="hidden" name="gpu_model" value=model.clone() />
                        <div class="mt-3 grid gap-4 sm:grid-cols-4 sm:items-end">
                            <Field label=format!("On-demand $/{per}-h") name="on_demand" id_suffix=suffix.clone() value=show(|p| p.on_demand_micros).unwrap_or_default() error=field_error(value, "on_demand") />
                            <Field label=format!("Reserved $/{per}-h") name="reserved" id_suffix=suffix.clone() value=show(|p| p.reserved_micros).unwrap_or_default() error=field_error(value, "reserved") />
                            <Field label=format!("Spot minimum bid $/{per}-h") name="spot_min_bid" id_suffix=suffix.clone() value=show(|p| p.spot_min_bid_micros).unwrap_or_default() error=field_error(value, "spot_min_bid") />
                            <SubmitButton label="Save prices" pending=pricing.pending() />
                        </div>
                    </ActionForm>
                }
            }).collect_view()}
            <div class="mt-4"><FormAlert message=form_error(value) /></div>
            <p role="status" class="mt-2 text-sm text-emerald-700" class:hidden=move || !saved()>"Prices saved."</p>
        </section>
    }
}

/// The units the host sells, each priced on its own: the models of GPUs sold whole and the
/// slice units of GPUs sold as MIG instances.
fn units_sold(gpus: &[cardpool_domain::host::GpuView]) -> Vec<String> {
    use cardpool_domain::{host::GpuSale, offers::slice_unit};
    let mut units: Vec<String> = gpus
        .iter()
        .filter(|g| g.state == "available")
        .flat_map(|g| match g.sold_as {
            GpuSale::Whole => vec![g.model.clone()],
            GpuSale::Mig => g.mig_instances.iter().map(|m| slice_unit(&g.model, &m.profile)).collect(),
        })
        .collect();
    units.sort();
    units.dedup();
    units
}

/// How one MIG-capable GPU is sold, and the button that switches it (refused while rented).
#[component]
fn GpuSaleForm(host_id: i64, gpu: cardpool_domain::host::GpuView, sale: ServerAction<SetGpuSale>) -> impl IntoView {
    use cardpool_domain::host::GpuSale;
    let mig = gpu.sold_as == GpuSale::Mig;
    let index = gpu.index;
    let error = move || match sale.value().get() {
        Some(Err(e)) if sale.input().get().is_none_or(|i| i.gpu_index == index) => Some(e.to_string()),
        _ => None,
    };
    view! {
        <ActionForm action=sale attr:class="mt-3 flex flex-wrap items-center gap-2" attr:data-testid="gpu-sale">
            <input type="hidden" name="id" value=host_id />
            <input type="hidden" name="gpu_index" value=index />
            <input type="hidden" name="sold_as" value=if mig { "whole" } else { "mig" } />
            <span class="text-xs text-slate-600" data-testid="gpu-sold-as">{if mig { "Sold as MIG slices" } else { "Sold whole" }}</span>
            <button type="submit" class="btn-secondary px-2 py-1 text-xs">{if mig { "Sell whole" } else { "Sell as MIG slices" }}</button>
        </ActionForm>
        {move || error().map(|e| view! { <p role="alert" class="mt-1 text-xs text-red-700">{e}</p> })}
    }
}
