//! Multi-node gangs: the booking form (`/gangs/new`), the renter's gangs (a section of
//! `/rentals`) and one gang's page (`/gangs/:id`) with its members, the rendezvous, what it
//! has cost and a stop for the whole gang.
//!
//! A gang's page polls while the gang is live: members move from booked to up (and wait there,
//! unbilled, for the rest) to running together. Each member is an ordinary rental, whose own
//! page has its SSH access, logs and GPU charts.

use crate::{
    components::{
        form::{FormAlert, INPUT, SubmitButton, field_error, form_error},
        kit::{Await, Badge, Col, DataTable, Step, Timeline, Tone, poll},
        money::dollars,
        session::{Audience, RequireSignIn, account_resource, reload_to},
    },
    pages::rentals::{StateBadge, kind_label},
    server_fns::gangs::{BookGang, ReplaceGangMember, StopGang, get_gang},
};
use cardpool_domain::{
    AppError,
    account::Viewer,
    gangs::{Gang, GangList, GangState, OnMemberLoss},
    offers::RentalKind,
    rentals::RentalState,
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};

fn tone(state: GangState) -> Tone {
    match state {
        GangState::Running => Tone::Good,
        GangState::Starting => Tone::Info,
        GangState::Degraded | GangState::Stopping => Tone::Warn,
        GangState::Ended => Tone::Neutral,
    }
}

#[component]
pub fn GangNewPage() -> impl IntoView {
    view! {
        <Title text="Rent a gang" />
        <RequireSignIn children=|_me: Viewer| view! { <GangForm /> } />
    }
}

#[component]
fn GangForm() -> impl IntoView {
    let query = use_query_map();
    let param = move |key: &str| query.with_untracked(|q| q.get(key).unwrap_or_default());
    let model = param("model");
    let fabric = param("fabric");
    let kind = RwSignal::new(RentalKind::OnDemand);
    let book = ServerAction::<BookGang>::new();
    let value = book.value();
    Effect::new(move || {
        if let Some(Ok(gang)) = value.get() {
            reload_to(&format!("/gangs/{}", gang.id));
        }
    });
    let err = move |name: &'static str| field_error(value, name);
    let field = move |name: &'static str,
                      label: &'static str,
                      initial: String,
                      placeholder: &'static str,
                      hint: &'static str| {
        let error = err(name);
        view! {
            <div class="space-y-1">
                <label for=format!("gang-{name}") class="block text-sm font-medium text-slate-800">{label}</label>
                <input id=format!("gang-{name}") name=format!("form[{name}]") value=initial placeholder=placeholder class=INPUT
                    aria-invalid=move || error.get().is_some().to_string() />
                {(!hint.is_empty()).then(|| view! { <p class="text-xs text-slate-500">{hint}</p> })}
                <p class="text-sm text-red-700" class:hidden=move || error.get().is_none()>{move || error.get()}</p>
            </div>
        }
    };
    let workload_error = err("workload");
    view! {
        <div class="mx-auto max-w-2xl space-y-6">
            <div>
                <a href="/offers" class="text-sm text-indigo-700 hover:underline">"← Back to offers"</a>
                <h1 class="mt-2 text-2xl font-bold text-slate-900">"Rent a multi-node gang"</h1>
                <p class="mt-1 text-slate-600">
                    "GPUs on several hosts of one network fabric, for distributed training. Every host is held or none is; the members start billing together once all are up, and each gets the rendezvous environment torchrun and NCCL expect."
                </p>
            </div>
            <ActionForm action=book attr:class="card space-y-5" attr:novalidate=true>
                {field("gpu_model", "GPU model", model, "NVIDIA H100 80GB HBM3", "")}
                <div class="grid gap-4 sm:grid-cols-2">
                    {field("nodes", "Hosts", "2".into(), "2", "At least 2, all on one fabric.")}
                    {field("gpus_per_node", "GPUs per host", "8".into(), "8", "")}
                </div>
                {field("fabric_id", "Fabric", fabric, "any", "Empty: the cheapest fabric with enough free hosts.")}
                <fieldset class="space-y-2">
                    <legend class="text-sm font-medium text-slate-800">"Kind"</legend>
                    <select id="gang-kind" name="form[kind]" class=INPUT aria-label="Gang kind"
                        on:change=move |ev| kind.set(RentalKind::parse(&event_target_value(&ev)).unwrap_or_default())>
                        {[RentalKind::OnDemand, RentalKind::Reserved, RentalKind::Spot].into_iter().map(|k| view! {
                            <option value=k.as_str() selected=move || kind.get() == k>{kind_label(k)}</option>
                        }).collect_view()}
                    </select>
                    <p class="text-xs text-slate-500" class:hidden=move || kind.get() != RentalKind::Spot>
                        "A spot gang runs while your bid clears on every host and is preempted as a whole: when one member must yield, every member gets the same 30 s notice."
                    </p>
                </fieldset>
                <div class:hidden=move || kind.get() != RentalKind::Spot>
                    {field("bid", "Your bid ($ per GPU-hour, every host)", String::new(), "e.g. 1.20", "At least each provider's minimum; billed at each host's clearing price.")}
                </div>
                <div class="grid gap-4 sm:grid-cols-2" class:hidden=move || kind.get() != RentalKind::Reserved>
                    <div class="space-y-1">
                        <label for="gang-starts_at" class="block text-sm font-medium text-slate-800">"Starts at (UTC)"</label>
                        <input id="gang-starts_at" name="form[starts_at]" type="datetime-local" class=INPUT />
                        <p class="text-sm text-red-700" class:hidden=move || err("starts_at").get().is_none()>{move || err("starts_at").get()}</p>
                    </div>
                    {field("hours", "Hours", String::new(), "e.g. 4", "")}
                </div>
                <fieldset class="space-y-4">
                    <legend class="text-sm font-medium text-slate-800">"Workload (the same on every host)"</legend>
                    {field("command", "Command", String::new(), "torchrun --nnodes=$NNODES --node_rank=$NODE_RANK --nproc_per_node=$LOCAL_WORLD_SIZE --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT train.py", "MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, NODE_RANK, NNODES and LOCAL_WORLD_SIZE are set for each member.")}
                    {field("image", "…or a container image", String::new(), "e.g. nvcr.io/nvidia/pytorch:24.05-py3", "")}
                    <p class="text-sm text-red-700" class:hidden=move || workload_error.get().is_none()>{move || workload_error.get()}</p>
                    <div class="space-y-1">
                        <label for="gang-env" class="block text-sm font-medium text-slate-800">"Environment (NAME=value, one per line)"</label>
                        <textarea id="gang-env" name="form[env]" rows="2" class=INPUT></textarea>
                    </div>
                    {field("ssh_public_key", "SSH public key (optional)", String::new(), "ssh-ed25519 AAAA…", "Lets you into every member.")}
                    {field("master_port", "Rendezvous port", String::new(), "29500", "Where rank 0 listens (29500 unless you say); the others reach it there.")}
                </fieldset>
                // A spot gang stops as a whole (its radios off: the default, stop, is sent).
                <fieldset class="space-y-2" class:hidden=move || kind.get() == RentalKind::Spot
                    prop:disabled=move || kind.get() == RentalKind::Spot>
                    <legend class="text-sm font-medium text-slate-800">"If a member is lost"</legend>
                    <label class="flex items-start gap-2 text-sm text-slate-700">
                        <input type="radio" name="form[on_member_loss]" value=OnMemberLoss::Stop.as_str() checked=true class="mt-1" />
                        <span>"Stop the whole gang "<span class="text-slate-500">"(a collective job cannot go on short of a rank)"</span></span>
                    </label>
                    <label class="flex items-start gap-2 text-sm text-slate-700">
                        <input type="radio" name="form[on_member_loss]" value=OnMemberLoss::Hold.as_str() class="mt-1" />
                        <span>"Keep the others running "<span class="text-slate-500">"(and billed), e.g. to resume from a checkpoint"</span></span>
                    </label>
                </fieldset>
                <FormAlert message=form_error(value) />
                <SubmitButton label="Book gang" pending=book.pending() />
            </ActionForm>
        </div>
    }
}

/// The renter's gangs, on the rentals page (nothing when there are none).
#[component]
pub fn GangsSection(gangs: Resource<Result<GangList, AppError>>) -> impl IntoView {
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match gangs.await {
                    Ok(list) if !list.gangs.is_empty() => view! {
                        <section aria-labelledby="gangs" class="space-y-3">
                            <h2 id="gangs" class="text-lg font-semibold text-slate-900">"Gangs"</h2>
                            <ul class="grid gap-3" aria-label="Your gangs">
                                {list.gangs.into_iter().map(|g| view! {
                                    <li>
                                        <a href=format!("/gangs/{}", g.id) class="card flex flex-wrap items-center justify-between gap-3 hover:ring-indigo-300" data-testid="gang-row">
                                            <div>
                                                <p class="font-semibold text-slate-900">{format!("Gang #{} · {} hosts × {} {}", g.id, g.nodes, g.gpus_per_node, g.gpu_model)}</p>
                                                <p class="text-sm text-slate-600">{format!("{} · fabric {}", kind_label(g.kind), g.fabric_id)}</p>
                                            </div>
                                            <div class="flex items-center gap-3">
                                                <span class="tabular-nums text-slate-900">{dollars(g.charged_micros)}</span>
                                                <Badge tone=tone(g.state)>{g.state.label()}</Badge>
                                            </div>
                                        </a>
                                    </li>
                                }).collect_view()}
                            </ul>
                        </section>
                    }.into_any(),
                    Ok(_) => ().into_any(),
                    Err(err) => view! { <p role="alert" class="text-red-700">{err.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
pub fn GangPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").and_then(|id| id.parse::<i64>().ok()).unwrap_or(0));
    let tick = RwSignal::new(0u32);
    let gang = account_resource(Audience::Accounts, move || (id(), tick.get()), |(id, _)| get_gang(id));
    view! {
        <Title text="Gang" />
        <RequireSignIn children=move |_me: Viewer| view! { <GangView gang tick /> } />
    }
}

#[component]
fn GangView(gang: Resource<Result<Gang, AppError>>, tick: RwSignal<u32>) -> impl IntoView {
    poll(
        tick,
        std::time::Duration::from_millis(2000),
        move || !matches!(gang.get_untracked(), Some(Ok(g)) if g.state == GangState::Ended),
    );
    view! { <Await resource=gang skeleton="h-40" ready=move |g| view! { <GangDetail gang=g tick /> } /> }
}

#[component]
fn GangDetail(gang: Gang, tick: RwSignal<u32>) -> impl IntoView {
    let stop = ServerAction::<StopGang>::new();
    let stop_value = stop.value();
    let replace = ServerAction::<ReplaceGangMember>::new();
    let replace_value = replace.value();
    Effect::new(move || {
        if stop_value.get().is_some() || replace_value.get().is_some() {
            tick.update(|t| *t += 1);
        }
    });
    // Ranks whose current member was lost, while the gang holds the others for a replacement.
    let mut current = std::collections::BTreeMap::new();
    for m in &gang.members {
        current.insert(m.rank, m.state);
    }
    let lost: Vec<u32> = current
        .into_iter()
        .filter(|(rank, state)| {
            *rank > 0 && matches!(state, RentalState::Failed | RentalState::Interrupted | RentalState::Preempted)
        })
        .map(|(rank, _)| rank)
        .collect();
    let can_replace = gang.on_member_loss == OnMemberLoss::Hold && gang.state == GangState::Degraded;
    let timeline = gang.timeline.clone();
    let ready = gang.members.iter().filter(|m| m.ready_at.is_some()).count();
    let live = matches!(gang.state, GangState::Starting | GangState::Running | GangState::Degraded);
    let started = gang.started_at.map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string());
    view! {
        <div class="space-y-6">
            <div class="flex flex-wrap items-start justify-between gap-4">
                <div>
                    <a href="/rentals" class="text-sm text-indigo-700 hover:underline">"← All rentals"</a>
                    <h1 class="mt-2 text-2xl font-bold text-slate-900">{format!("Gang #{} · {} hosts × {} {}", gang.id, gang.nodes, gang.gpus_per_node, gang.gpu_model)}</h1>
                    <p class="mt-1 text-slate-600">{format!("{} · fabric {} · if a member is lost: {}", kind_label(gang.kind), gang.fabric_id,
                        match (gang.kind, gang.on_member_loss) {
                            (RentalKind::Spot, _) => "stop the gang (preempted as a whole)",
                            (_, OnMemberLoss::Stop) => "stop the gang",
                            (_, OnMemberLoss::Hold) => "keep the others",
                        })}</p>
                </div>
                <span data-testid="gang-state"><Badge tone=tone(gang.state)>{gang.state.label()}</Badge></span>
            </div>
            {(gang.state == GangState::Starting).then(|| view! {
                <div role="status" class="rounded-lg bg-sky-50 px-4 py-3 text-sm text-sky-900 ring-1 ring-sky-200" data-testid="gang-barrier">
                    {format!("{ready} of {} members up. Billing starts for all of them when the last one is.", gang.members.len())}
                </div>
            })}
            <div class="grid gap-4 sm:grid-cols-3">
                <div class="card">
                    <p class="text-sm text-slate-500">"Cost so far"</p>
                    <p class="mt-1 text-2xl font-semibold tabular-nums text-slate-900" data-testid="gang-cost">{dollars(gang.charged_micros)}</p>
                    <p class="text-xs text-slate-500">"All members, billed per second from the common start"</p>
                </div>
                <div class="card">
                    <p class="text-sm text-slate-500">"Rendezvous"</p>
                    <p class="mt-1 font-mono text-lg text-slate-900" data-testid="gang-rendezvous">{format!("{}:{}", gang.master_addr, gang.master_port)}</p>
                    <p class="text-xs text-slate-500">"MASTER_ADDR:MASTER_PORT, rank 0's host on the fabric"</p>
                </div>
                <div class="card">
                    <p class="text-sm text-slate-500">"Started together"</p>
                    <p class="mt-1 text-lg text-slate-900">{started.unwrap_or_else(|| "not yet".into())}</p>
                </div>
            </div>
            <section class="card" aria-labelledby="members">
                <h2 id="members" class="text-lg font-semibold text-slate-900">"Members"</h2>
                <p class="mt-1 text-sm text-slate-600">"Each member is a rental of its own: its page has SSH access, its log and its GPUs' live charts."</p>
                <DataTable class="mt-3" columns=vec![Col::new("Rank"), Col::new("Host"), Col::new("Address").from("md"), Col::new("GPUs").from("sm"), Col::new("State"), Col::new("Run time").right().from("sm"), Col::new("Cost").right()]>
                    {gang.members.into_iter().map(|m| view! {
                        <tr data-testid="gang-member">
                            <td class="py-3 pr-4 font-medium tabular-nums">{m.rank}</td>
                            <td class="py-3 pr-4">
                                <a class="font-medium text-indigo-700 hover:underline" href=format!("/rentals/{}", m.rental_id)>{format!("Rental #{}", m.rental_id)}</a>
                                <p class="text-xs text-slate-500">{m.host_label}</p>
                            </td>
                            <td class="hidden py-3 pr-4 font-mono text-xs md:table-cell">{m.address}</td>
                            <td class="hidden py-3 pr-4 tabular-nums sm:table-cell">{m.gpu_indexes.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")}</td>
                            <td class="py-3 pr-4">
                                <StateBadge state=m.state />
                                {(m.ready_at.is_some() && gang.started_at.is_none()).then(|| view! { <p class="text-xs text-slate-500">"up, waiting"</p> })}
                            </td>
                            <td class="hidden py-3 pr-4 text-right tabular-nums sm:table-cell">{format!("{}:{:02}:{:02}", m.billed_seconds / 3600, (m.billed_seconds / 60) % 60, m.billed_seconds % 60)}</td>
                            <td class="py-3 pr-4 text-right tabular-nums">{dollars(m.charged_micros)}</td>
                        </tr>
                    }).collect_view()}
                </DataTable>
            </section>
            {live.then(|| view! {
                <ActionForm action=stop attr:class="max-w-xs">
                    <input type="hidden" name="id" value=gang.id />
                    <button type="submit" class="btn-secondary w-full" disabled=move || stop.pending().get()>"Stop the whole gang"</button>
                </ActionForm>
                <FormAlert message=form_error(stop_value) />
            })}
            {(can_replace && !lost.is_empty()).then(|| view! {
                <section class="card space-y-3" aria-labelledby="replace" data-testid="gang-replace">
                    <h2 id="replace" class="text-lg font-semibold text-slate-900">"Replace a lost member"</h2>
                    <p class="text-sm text-slate-600">"The others keep running. A replacement takes a free host of the same fabric, the lost member's rank and workload, and bills from when it is up."</p>
                    <div class="flex flex-wrap gap-2">
                        {lost.into_iter().map(|rank| view! {
                            <ActionForm action=replace>
                                <input type="hidden" name="id" value=gang.id />
                                <input type="hidden" name="rank" value=rank />
                                <button type="submit" class="btn-primary" disabled=move || replace.pending().get()>{format!("Replace rank {rank}")}</button>
                            </ActionForm>
                        }).collect_view()}
                    </div>
                    <FormAlert message=form_error(replace_value) />
                </section>
            })}
            <section class="card" aria-labelledby="gang-timeline">
                <h2 id="gang-timeline" class="text-lg font-semibold text-slate-900">"Timeline"</h2>
                <Timeline testid="gang-timeline" steps=timeline.into_iter().map(|e| Step {
                    title: format!("Rank {} · rental #{} · {}", e.rank, e.rental_id, e.state.label()),
                    reason: e.reason,
                    at: e.at,
                }).collect() />
            </section>

        </div>
    }
}
