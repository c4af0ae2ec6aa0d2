//! Renting: the booking form (`/rent`), the renter's rentals (`/rentals`) and one rental's
//! live page (`/rentals/:id`) with its state, timeline, bill so far and stop button.
//!
//! A rental's page polls while the rental is live: its state moves as the provider's agent
//! attaches the GPUs and reports the workload, and its bill grows by the second.

use crate::{
    components::{
        advisor::AdvisorPanel,
        form::{FormAlert, INPUT, SubmitButton, field_error, form_error},
        kit::{Await, Badge, Step, Timeline, Tone, poll},
        limits::CapsForm,
        logs::RentalLogs,
        money::{StepChart, dollars},
        session::{Audience, RequireSignIn, account_resource, reload_to},
        ssh::SshPanel,
        telemetry::TelemetrySection,
    },
    server_fns::{
        gangs::list_gangs,
        offers::get_offer,
        rentals::{BookRental, ChangeBid, StopRental, get_rental, list_rentals},
    },
};
use cardpool_domain::{
    AppError,
    account::Viewer,
    gangs::GangList,
    offers::{OfferDetail, RentalKind},
    rentals::{Rental, RentalDetail, RentalState},
    telemetry::TelemetryScope,
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};

pub(crate) fn kind_label(kind: RentalKind) -> &'static str {
    match kind {
        RentalKind::OnDemand => "On-demand",
        RentalKind::Reserved => "Reserved",
        RentalKind::Spot => "Spot",
    }
}

fn state_class(state: RentalState) -> &'static str {
    match state {
        RentalState::Running => "bg-emerald-50 text-emerald-700 ring-emerald-200",
        RentalState::Requested | RentalState::Provisioning => "bg-sky-50 text-sky-700 ring-sky-200",
        RentalState::Stopping | RentalState::Preempting => "bg-amber-50 text-amber-800 ring-amber-200",
        RentalState::Ended => "bg-slate-100 text-slate-700 ring-slate-200",
        RentalState::Preempted | RentalState::Failed | RentalState::Interrupted => {
            "bg-red-50 text-red-700 ring-red-200"
        }
    }
}

#[component]
pub(crate) fn StateBadge(state: RentalState) -> impl IntoView {
    view! { <span class=format!("badge {}", state_class(state)) data-testid="rental-state">{state.label()}</span> }
}

fn duration(seconds: i64) -> String {
    format!("{}:{:02}:{:02}", seconds / 3600, (seconds / 60) % 60, seconds % 60)
}

#[component]
pub fn RentPage() -> impl IntoView {
    let query = use_query_map();
    let host_id = query.with_untracked(|q| q.get("host").unwrap_or_default()).parse::<i64>().unwrap_or(0);
    let model = query.with_untracked(|q| q.get("model").unwrap_or_default());
    let offer = {
        let model = model.clone();
        account_resource(Audience::Accounts, move || (host_id, model.clone()), |(host, model)| get_offer(host, model))
    };
    view! {
        <Title text="Rent GPUs" />
        <RequireSignIn children=move |_me: Viewer| view! { <RentForm host_id model=model.clone() offer /> } />
    }
}

#[component]
fn RentForm(host_id: i64, model: String, offer: Resource<Result<OfferDetail, AppError>>) -> impl IntoView {
    let query = use_query_map();
    let param = move |key: &str| query.with_untracked(|q| q.get(key).unwrap_or_default());
    let kind = RwSignal::new(RentalKind::parse(&param("kind")).unwrap_or_default());
    let book = ServerAction::<BookRental>::new();
    let value = book.value();
    let pending = book.pending();
    Effect::new(move || {
        if let Some(Ok(rental)) = value.get() {
            reload_to(&format!("/rentals/{}", rental.id));
        }
    });
    let err = move |name: &'static str| field_error(value, name);
    let text_field = move |name: &'static str, label: &'static str, placeholder: &'static str, hint: &'static str| {
        let error = err(name);
        view! {
            <div class="space-y-1">
                <label for=format!("rent-{name}") class="block text-sm font-medium text-slate-800">{label}</label>
                <input id=format!("rent-{name}") name=format!("form[{name}]") placeholder=placeholder class=INPUT
                    aria-invalid=move || error.get().is_some().to_string() />
                {(!hint.is_empty()).then(|| view! { <p class="text-xs text-slate-500">{hint}</p> })}
                <p class="text-sm text-red-700" class:hidden=move || error.get().is_none()>{move || error.get()}</p>
            </div>
        }
    };
    let workload_error = err("workload");
    let env_error = err("env");
    view! {
        <div class="mx-auto max-w-2xl space-y-6">
            <div>
                <a href="/offers" class="text-sm text-indigo-700 hover:underline">"← Back to offers"</a>
                <h1 class="mt-2 text-2xl font-bold text-slate-900">"Rent GPUs"</h1>
                <p class="mt-1 text-slate-600">{format!("{model} on host #{host_id}")}</p>
            </div>
            <OfferSummary detail=offer />
            <AdvisorPanel host_id model=model.clone() />
            <ActionForm action=book attr:class="card space-y-5" attr:novalidate=true>
                <input type="hidden" name="form[host_id]" value=host_id />
                <input type="hidden" name="form[gpu_model]" value=model.clone() />
                <fieldset class="space-y-2">
                    <legend class="text-sm font-medium text-slate-800">"Kind"</legend>
                    <select id="rent-kind" name="form[kind]" class=INPUT aria-label="Rental kind"
                        on:change=move |ev| kind.set(RentalKind::parse(&event_target_value(&ev)).unwrap_or_default())>
                        {[RentalKind::OnDemand, RentalKind::Spot, RentalKind::Reserved].into_iter().map(|k| view! {
                            <option value=k.as_str() selected=move || kind.get() == k>{kind_label(k)}</option>
                        }).collect_view()}
                    </select>
                    <p class="text-xs text-slate-500">{move || match kind.get() {
                        RentalKind::OnDemand => "Starts now and runs until you stop it; billed per second while the workload runs.",
                        RentalKind::Spot => "Runs while your bid clears; billed at the clearing price (never above your bid). Can be preempted with a 30 s notice.",
                        RentalKind::Reserved => "A guaranteed future window, prepaid now at the reserved price; cancel before it starts for a full refund.",
                    }}</p>
                </fieldset>
                {text_field("gpu_count", "Number of GPUs", "1", "")}
                <div class="space-y-4" class:hidden=move || kind.get() != RentalKind::Spot>
                    {text_field("bid", "Your bid ($ per GPU-hour)", "e.g. 1.20", "At least the provider's minimum.")}
                </div>
                <div class="grid gap-4 sm:grid-cols-2" class:hidden=move || kind.get() != RentalKind::Reserved>
                    <div class="space-y-1">
                        <label for="rent-starts_at" class="block text-sm font-medium text-slate-800">"Starts at (UTC)"</label>
                        <input id="rent-starts_at" name="form[starts_at]" type="datetime-local" class=INPUT />
                        <p class="text-sm text-red-700" class:hidden=move || err("starts_at").get().is_none()>{move || err("starts_at").get()}</p>
                    </div>
                    {text_field("hours", "Hours", "e.g. 4", "")}
                </div>
                <fieldset class="grid gap-4 sm:grid-cols-2" class:hidden=move || kind.get() == RentalKind::Reserved>
                    <legend class="mb-2 text-sm font-medium text-slate-800">"Caps (optional)"</legend>
                    {text_field("max_cost", "Stop at a cost of ($)", "e.g. 25", "Billed exactly up to it, then stopped.")}
                    {text_field("max_hours", "Stop after (hours)", "e.g. 8 or 1.5", "")}
                </fieldset>
                <fieldset class="space-y-4">
                    <legend class="text-sm font-medium text-slate-800">"Workload"</legend>
                    {text_field("command", "Command", "e.g. python train.py --epochs 3", "Runs in a sandbox with only your GPUs (CUDA_VISIBLE_DEVICES lists their UUIDs); /workspace is yours.")}
                    {text_field("image", "…or a container image", "e.g. nvcr.io/nvidia/pytorch:24.05-py3", "Hosts with Docker and the NVIDIA runtime run images.")}
                    <p class="text-sm text-red-700" class:hidden=move || workload_error.get().is_none()>{move || workload_error.get()}</p>
                    <div class="space-y-1">
                        <label for="rent-env" class="block text-sm font-medium text-slate-800">"Environment (NAME=value, one per line)"</label>
                        <textarea id="rent-env" name="form[env]" rows="3" class=INPUT></textarea>
                        <p class="text-sm text-red-700" class:hidden=move || env_error.get().is_none()>{move || env_error.get()}</p>
                    </div>
                    {text_field("ssh_public_key", "SSH public key (optional)", "ssh-ed25519 AAAA…", "")}
                    <label class="flex items-start gap-2 text-sm text-slate-700">
                        <input type="checkbox" name="form[stop_when_idle]" class="mt-1 h-4 w-4 rounded border-slate-300" />
                        <span>"Stop automatically when my GPUs sit idle "<span class="text-slate-500">"(under 5 % busy for 30 minutes; otherwise you get a notice)"</span></span>
                    </label>
                </fieldset>
                <FormAlert message=form_error(value) />
                <SubmitButton label="Book" pending=pending />
            </ActionForm>
        </div>
    }
}

/// What is being booked: free GPUs, the three prices, and the spot price's last day.
#[component]
fn OfferSummary(detail: Resource<Result<OfferDetail, AppError>>) -> impl IntoView {
    view! {
        <Transition fallback=|| view! { <div class="h-24 animate-pulse rounded-2xl bg-slate-100"></div> }>
            {move || Suspend::new(async move {
                match detail.await {
                    Ok(OfferDetail { offer: Some(offer), spot_prices, as_of, .. }) => {
                        let mut points: Vec<_> = spot_prices.iter().map(|p| (p.at, p.price_micros)).collect();
                        if let Some(last) = points.last().copied() {
                            points.push((as_of, last.1));
                        }
                        view! {
                            <section class="card space-y-4" aria-label="Offer">
                                <div class="flex flex-wrap items-start justify-between gap-3">
                                    <p class="text-sm text-slate-600">{offer.location.clone().unwrap_or_default()}</p>
                                    <Badge tone=Tone::Good>{format!("{} free", offer.gpus_free)}</Badge>
                                </div>
                                <dl class="grid grid-cols-3 gap-2 text-sm">
                                    <div><dt class="text-xs text-slate-500">"On-demand"</dt><dd class="tabular-nums font-semibold">{format!("{}/h", dollars(offer.on_demand_micros))}</dd></div>
                                    <div><dt class="text-xs text-slate-500">"Reserved"</dt><dd class="tabular-nums font-semibold">{format!("{}/h", dollars(offer.reserved_micros))}</dd></div>
                                    <div><dt class="text-xs text-slate-500">"Spot now (min bid)"</dt><dd class="tabular-nums font-semibold" data-testid="spot-price">{format!("{}/h ({})", dollars(offer.spot_price_micros), dollars(offer.spot_min_bid_micros))}</dd></div>
                                </dl>
                                <div>
                                    <h2 class="text-sm font-medium text-slate-800">"Spot clearing price, last 24 hours"</h2>
                                    <StepChart points label="Spot clearing price per GPU-hour" date_format="%H:%M" />
                                </div>
                            </section>
                        }.into_any()
                    }
                    Ok(_) => view! {
                        <div role="status" class="rounded-lg bg-amber-50 px-4 py-3 text-sm text-amber-900 ring-1 ring-amber-200">"No GPUs of this offer are free right now; a reservation for later may still be possible."</div>
                    }.into_any(),
                    Err(err) => view! { <p role="alert" class="text-red-700">{err.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
pub fn RentalsPage() -> impl IntoView {
    let rentals = account_resource(Audience::Accounts, || (), |_| list_rentals());
    let gangs = account_resource(Audience::Accounts, || (), |_| list_gangs());
    view! {
        <Title text="Rentals" />
        <RequireSignIn children=move |_me: Viewer| view! { <RentalList rentals gangs /> } />
    }
}

#[component]
fn RentalList(
    rentals: Resource<Result<Vec<Rental>, AppError>>,
    gangs: Resource<Result<GangList, AppError>>,
) -> impl IntoView {
    view! {
        <div class="space-y-6">
            <div class="flex flex-wrap items-end justify-between gap-4">
                <div>
                    <h1 class="text-2xl font-bold text-slate-900">"Rentals"</h1>
                    <p class="mt-1 text-slate-600">"Your GPUs: running, booked and past."</p>
                </div>
                <a class="btn-primary" href="/offers">"Rent GPUs"</a>
            </div>
            <crate::pages::gangs::GangsSection gangs />
            <Transition fallback=|| view! { <p class="text-slate-500">"Loading rentals…"</p> }>
                {move || Suspend::new(async move {
                    match rentals.await {
                        Ok(list) if list.is_empty() => view! {
                            <div class="card text-center text-slate-600">"No rentals yet. Find GPUs on the market."</div>
                        }.into_any(),
                        Ok(list) => view! {
                            <ul class="grid gap-3" aria-label="Your rentals">
                                {list.into_iter().map(|r| view! { <RentalRow rental=r /> }).collect_view()}
                            </ul>
                        }.into_any(),
                        Err(err) => view! { <p role="alert" class="text-red-700">{err.to_string()}</p> }.into_any(),
                    }
                })}
            </Transition>
        </div>
    }
}

#[component]
fn RentalRow(rental: Rental) -> impl IntoView {
    view! {
        <li>
            <a href=format!("/rentals/{}", rental.id) class="card flex flex-wrap items-center justify-between gap-3 hover:ring-indigo-300" data-testid="rental-row">
                <div>
                    <p class="font-semibold text-slate-900">{format!("#{} · {}× {}", rental.id, rental.gpu_count, rental.gpu_model)}</p>
                    <p class="text-sm text-slate-600">{format!("{} · {}", kind_label(rental.kind), rental.host_label)}</p>
                </div>
                <div class="flex items-center gap-3">
                    <span class="tabular-nums text-slate-900">{dollars(rental.accrued_micros)}</span>
                    <StateBadge state=rental.state />
                </div>
            </a>
        </li>
    }
}

#[component]
pub fn RentalPage() -> impl IntoView {
    let params = use_params_map();
    let id = Signal::derive(move || params.with(|p| p.get("id").and_then(|id| id.parse::<i64>().ok()).unwrap_or(0)));
    let tick = RwSignal::new(0u32);
    let detail = account_resource(Audience::Accounts, move || (id.get(), tick.get()), |(id, _)| get_rental(id));
    poll(
        tick,
        std::time::Duration::from_millis(2000),
        move || !matches!(detail.get_untracked(), Some(Ok(d)) if !d.rental.is_live()),
    );
    view! {
        <Title text="Rental" />
        <RequireSignIn children=move |_me: Viewer| view! { <RentalView id detail tick /> } />
    }
}

#[component]
fn RentalView(id: Signal<i64>, detail: Resource<Result<RentalDetail, AppError>>, tick: RwSignal<u32>) -> impl IntoView {
    let id = move || id.get();
    // The charts load once per rental, and again when it starts or stops holding its GPUs
    // (an effect, so server and browser render the same first view).
    let seen_holding = StoredValue::new(None::<bool>);
    let generation = RwSignal::new(0u32);
    Effect::new(move || {
        let Some(Ok(d)) = detail.get() else { return };
        let holding = matches!(
            d.rental.state,
            RentalState::Provisioning | RentalState::Running | RentalState::Stopping | RentalState::Preempting
        );
        if seen_holding.get_value().is_some_and(|before| before != holding) {
            generation.update(|g| *g += 1);
        }
        seen_holding.set_value(Some(holding));
    });
    view! {
        <Await resource=detail skeleton="h-40" ready=move |d| view! { <RentalDetailView detail=d tick /> } />
        <div class="mt-6">
            <RentalLogs rental_id=id() />
        </div>
        <div class="mt-6">
            <TelemetrySection scope=Signal::derive(move || TelemetryScope::Rental(id())) reload=generation />
        </div>
    }
}

/// Where the rental is on its way, for a progress bar: the step it is at, and whether that
/// step is still under way.
fn steps(state: RentalState) -> (usize, bool, [&'static str; 4]) {
    let (at, under_way) = match state {
        RentalState::Requested => (0, true),
        RentalState::Provisioning => (1, true),
        RentalState::Running => (2, true),
        RentalState::Stopping | RentalState::Preempting => (3, true),
        _ => (3, false),
    };
    (at, under_way, ["Booked", "Attaching GPUs", "Running", "Finished"])
}

#[component]
fn RentalDetailView(detail: RentalDetail, tick: RwSignal<u32>) -> impl IntoView {
    let RentalDetail { rental, events, ssh } = detail;
    let stop = ServerAction::<StopRental>::new();
    let stop_value = stop.value();
    let bid = ServerAction::<ChangeBid>::new();
    let bid_value = bid.value();
    Effect::new(move || {
        if stop_value.get().is_some() || bid_value.get().is_some() {
            tick.update(|t| *t += 1);
        }
    });
    let can_stop = matches!(rental.state, RentalState::Requested | RentalState::Provisioning | RentalState::Running);
    let spot_live = rental.kind == RentalKind::Spot && can_stop;
    let slice = cardpool_domain::offers::slice_profile(&rental.gpu_model).map(str::to_owned);
    let unit = if slice.is_some() { "slice" } else { "GPU" };
    let (at, under_way, labels) = steps(rental.state);
    let failed = matches!(rental.state, RentalState::Failed | RentalState::Interrupted | RentalState::Preempted);
    let workload = rental.workload.command.clone().or(rental.workload.image.clone()).unwrap_or_default();
    view! {
        <div class="space-y-6">
            <div class="flex flex-wrap items-start justify-between gap-4">
                <div>
                    <a href="/rentals" class="text-sm text-indigo-700 hover:underline">"← All rentals"</a>
                    <h1 class="mt-2 text-2xl font-bold text-slate-900">{format!("Rental #{} · {}× {}", rental.id, rental.gpu_count, rental.gpu_model)}</h1>
                    <p class="mt-1 text-slate-600">{format!("{} · {}", kind_label(rental.kind), rental.host_label)}</p>
                    {rental.gang_id.map(|gang| view! {
                        <p class="text-sm" data-testid="rental-gang">
                            <a class="text-indigo-700 hover:underline" href=format!("/gangs/{gang}")>{format!("Rank {} of gang #{gang}", rental.gang_rank.unwrap_or(0))}</a>
                        </p>
                    })}
                    {(rental.kind == RentalKind::Reserved).then(|| view! {
                        <p class="text-sm text-slate-600" data-testid="rental-window">{format!(
                            "Window: {} – {} UTC",
                            rental.starts_at.format("%Y-%m-%d %H:%M"),
                            rental.ends_at.map(|e| e.format("%Y-%m-%d %H:%M").to_string()).unwrap_or_default()
                        )}</p>
                    })}
                </div>
                <StateBadge state=rental.state />
            </div>
            {rental.notice.clone().map(|notice| view! {
                <div role="status" class="rounded-lg bg-amber-50 px-4 py-3 text-sm text-amber-900 ring-1 ring-amber-200" data-testid="rental-notice">{notice}</div>
            })}
            <ol class="grid grid-cols-4 gap-2" aria-label="Progress">
                {labels.into_iter().enumerate().map(|(i, label)| {
                    let class = if i < at || (i == at && !under_way && !failed) {
                        "bg-indigo-600"
                    } else if i == at && failed {
                        "bg-red-500"
                    } else if i == at {
                        "bg-indigo-400 animate-pulse"
                    } else {
                        "bg-slate-200"
                    };
                    view! {
                        <li class="space-y-1" aria-current=(i == at).then_some("step")>
                            <div class=format!("h-2 rounded-full {class}")></div>
                            <p class="text-xs text-slate-600">{label}</p>
                        </li>
                    }
                }).collect_view()}
            </ol>
            {ssh.map(|access| view! { <SshPanel access running=rental.state == RentalState::Running /> })}
            <div class="grid gap-4 sm:grid-cols-2 lg:grid-cols-4">
                <div class="card">
                    <p class="text-sm text-slate-500">"Cost so far"</p>
                    <p class="mt-1 text-2xl font-semibold tabular-nums text-slate-900" data-testid="rental-cost">{dollars(rental.accrued_micros)}</p>
                    <p class="text-xs text-slate-500">"Charged to your wallet: "<span data-testid="rental-charged">{dollars(rental.charged_micros)}</span></p>
                </div>
                <div class="card">
                    <p class="text-sm text-slate-500">"Run time"</p>
                    <p class="mt-1 text-2xl font-semibold tabular-nums text-slate-900" data-testid="rental-billed">{duration(rental.accrued_seconds)}</p>
                    <p class="text-xs text-slate-500">"Billed per second from ready to stop"</p>
                </div>
                <div class="card">
                    <p class="text-sm text-slate-500">{if rental.kind == RentalKind::Spot { "Clearing price" } else { "Price" }}</p>
                    <p class="mt-1 text-2xl font-semibold tabular-nums text-slate-900">{format!("{}/{unit}-h", dollars(rental.price_micros))}</p>
                    {rental.bid_micros.map(|b| view! { <p class="text-xs text-slate-500">{format!("Your bid: {}/{unit}-h", dollars(b))}</p> })}
                </div>
                {match slice.clone() {
                    None => view! {
                        <div class="card">
                            <p class="text-sm text-slate-500">"GPUs on the host"</p>
                            <p class="mt-1 text-2xl font-semibold tabular-nums text-slate-900">{rental.gpu_indexes.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")}</p>
                        </div>
                    }.into_any(),
                    Some(profile) => {
                        let mut on = rental.gpu_indexes.clone();
                        on.dedup();
                        view! {
                            <div class="card" data-testid="rental-slice">
                                <p class="text-sm text-slate-500">"MIG slices"</p>
                                <p class="mt-1 text-2xl font-semibold tabular-nums text-slate-900">{format!("{}× {profile}", rental.gpu_count)}</p>
                                <p class="text-xs text-slate-500">{format!("of GPU {}: its own memory and compute. The charts below are the whole GPU's (NVML gives no per-slice figures); energy is your slices' share, compute slices out of seven.", on.iter().map(u32::to_string).collect::<Vec<_>>().join(", "))}</p>
                            </div>
                        }.into_any()
                    }
                }}
            </div>
            <div class="grid gap-6 lg:grid-cols-3">
                <section class="card lg:col-span-2" aria-labelledby="timeline">
                    <h2 id="timeline" class="text-lg font-semibold text-slate-900">"Timeline"</h2>
                    <Timeline testid="rental-timeline"
                        steps=events.into_iter().map(|e| Step { title: e.state.label().to_owned(), reason: e.reason, at: e.at }).collect() />
                </section>
                <section class="card space-y-4" aria-labelledby="actions">
                    <h2 id="actions" class="text-lg font-semibold text-slate-900">"Workload"</h2>
                    <p class="break-all font-mono text-sm text-slate-700">{workload}</p>
                    {can_stop.then(|| view! {
                        <ActionForm action=stop>
                            <input type="hidden" name="id" value=rental.id />
                            <button type="submit" class="btn-secondary w-full" disabled=move || stop.pending().get()>"Stop rental"</button>
                        </ActionForm>
                        <FormAlert message=form_error(stop_value) />
                    })}
                    {(can_stop && rental.kind != RentalKind::Reserved).then(|| view! { <CapsForm id=rental.id limits=rental.limits tick /> })}
                    {spot_live.then(|| view! {
                        <ActionForm action=bid attr:class="space-y-2">
                            <input type="hidden" name="id" value=rental.id />
                            <label for="new-bid" class="block text-sm font-medium text-slate-800">"Change bid ($/GPU-h)"</label>
                            <input id="new-bid" name="bid" class=INPUT placeholder="e.g. 1.50" />
                            <p class="text-sm text-red-700">{move || field_error(bid_value, "bid").get()}</p>
                            <SubmitButton label="Update bid" pending=bid.pending() />
                        </ActionForm>
                    })}
                </section>
            </div>
        </div>
    }
}
