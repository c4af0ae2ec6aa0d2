//! The marketplace: search offers by GPU, size, price, kind, location and CUDA version.
//!
//! The filter form is a plain GET form, so every search is a shareable URL and works before
//! (or without) hydration; the results are rendered from the query string.

use crate::{
    components::{
        kit::{Badge, Tone},
        money::dollars,
    },
    server_fns::offers::list_offers,
};
use cardpool_domain::{
    fabric::Interconnect,
    offers::{Offer, OfferPage, OfferQuery, OfferSort, OfferUnit, RentalKind, percent_encode},
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::{hooks::use_query_map, params::ParamsMap};

fn query_from(map: &ParamsMap) -> OfferQuery {
    let text = |key: &str| map.get(key).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
    let number = |key: &str| text(key).and_then(|v| v.parse::<u32>().ok());
    OfferQuery {
        gpu_model: text("gpu_model"),
        min_gpus: number("min_gpus"),
        min_vram_gib: number("min_vram_gib"),
        max_price: text("max_price"),
        kind: text("kind").and_then(|k| RentalKind::parse(&k)),
        location: text("location"),
        min_cuda: text("min_cuda"),
        sort: text("sort").and_then(|s| OfferSort::parse(&s)),
        page: number("page"),
        per_page: number("per_page"),
        host_id: text("host_id").and_then(|v| v.parse().ok()),
        verified: text("verified").map(|v| matches!(v.as_str(), "true" | "on" | "1")).filter(|v| *v),
        unit: text("unit").and_then(|u| match u.as_str() {
            "gpu" => Some(OfferUnit::Gpu),
            "slice" => Some(OfferUnit::Slice),
            _ => None,
        }),
        mig_profile: text("mig_profile"),
        fabric: text("fabric"),
        interconnect: text("interconnect").and_then(|i| Interconnect::parse(&i)),
    }
}

#[component]
pub fn OffersPage() -> impl IntoView {
    let params = use_query_map();
    let query = Memo::new(move |_| params.with(query_from));
    let results = Resource::new(move || query.get(), list_offers);
    view! {
        <Title text="Find GPUs" />
        <div class="space-y-6">
            <div>
                <h1 class="text-2xl font-bold text-slate-900">"Find GPUs"</h1>
                <p class="mt-1 text-slate-600">"Free GPUs and MIG slices of GPUs on online hosts right now, priced per GPU- or slice-hour."</p>
            </div>
            {move || view! { <Filters query=query.get() /> }}
            <Transition fallback=|| view! { <p class="text-slate-500">"Searching…"</p> }>
                {move || Suspend::new(async move {
                    match results.await {
                        Ok(page) => view! { <Results page query=query.get_untracked() /> }.into_any(),
                        Err(err) => view! {
                            <div role="alert" class="rounded-lg bg-red-50 px-4 py-3 text-sm text-red-800 ring-1 ring-red-200">
                                {match &err {
                                    cardpool_domain::AppError::Validation { fields, .. } if !fields.is_empty() => {
                                        fields.iter().map(|(k, v)| format!("{}: {v}", k.replace('_', " "))).collect::<Vec<_>>().join("; ")
                                    }
                                    other => other.to_string(),
                                }}
                            </div>
                        }.into_any(),
                    }
                })}
            </Transition>
        </div>
    }
}

const INPUT: &str = "block w-full rounded-lg border-0 px-3 py-2 text-slate-900 shadow-sm ring-1 ring-inset ring-slate-300 focus:ring-2 focus:ring-inset focus:ring-indigo-600";

#[component]
fn Filters(query: OfferQuery) -> impl IntoView {
    let kind = query.kind.unwrap_or_default();
    let sort = query.sort.unwrap_or_default();
    let text = |id: &'static str, label: &'static str, value: Option<String>, placeholder: &'static str| {
        view! {
            <div class="space-y-1">
                <label for=format!("filter-{id}") class="block text-sm font-medium text-slate-800">{label}</label>
                <input id=format!("filter-{id}") name=id value=value.unwrap_or_default() placeholder=placeholder class=INPUT />
            </div>
        }
    };
    view! {
        <form method="get" action="/offers" class="card grid gap-4 sm:grid-cols-2 lg:grid-cols-4" role="search" aria-label="Filter offers">
            {text("gpu_model", "GPU model", query.gpu_model.clone(), "any, e.g. NVIDIA H100 80GB HBM3")}
            {text("min_gpus", "At least this many GPUs", query.min_gpus.map(|n| n.to_string()), "1")}
            {text("min_vram_gib", "Min memory per GPU (GiB)", query.min_vram_gib.map(|n| n.to_string()), "any")}
            {text("max_price", "Max $/GPU-hour", query.max_price.clone(), "any")}
            <div class="space-y-1">
                <label for="filter-kind" class="block text-sm font-medium text-slate-800">"Rental kind"</label>
                <select id="filter-kind" name="kind" class=INPUT>
                    {[(RentalKind::OnDemand, "On-demand"), (RentalKind::Reserved, "Reserved"), (RentalKind::Spot, "Spot (min bid)")]
                        .into_iter()
                        .map(|(k, label)| view! { <option value=k.as_str() selected=k == kind>{label}</option> })
                        .collect_view()}
                </select>
            </div>
            <div class="space-y-1">
                <label for="filter-unit" class="block text-sm font-medium text-slate-800">"Unit"</label>
                <select id="filter-unit" name="unit" class=INPUT>
                    {[(None, "Whole GPUs and MIG slices"), (Some(OfferUnit::Gpu), "Whole GPUs"), (Some(OfferUnit::Slice), "MIG slices")]
                        .into_iter()
                        .map(|(u, label)| view! { <option value=u.map_or("", OfferUnit::as_str) selected=u == query.unit>{label}</option> })
                        .collect_view()}
                </select>
            </div>
            {text("mig_profile", "MIG profile", query.mig_profile.clone(), "any, e.g. 1g.10gb")}
            <div class="space-y-1">
                <label for="filter-interconnect" class="block text-sm font-medium text-slate-800">"Interconnect"</label>
                <select id="filter-interconnect" name="interconnect" class=INPUT>
                    <option value="" selected=query.interconnect.is_none()>"Any"</option>
                    {[Interconnect::Infiniband, Interconnect::Roce, Interconnect::Ethernet]
                        .into_iter()
                        .map(|i| view! { <option value=i.as_str() selected=Some(i) == query.interconnect>{i.label()}</option> })
                        .collect_view()}
                </select>
            </div>
            {text("fabric", "Fabric", query.fabric.clone(), "any, e.g. pdx-ib-1")}
            {text("location", "Location", query.location.clone(), "any, e.g. DE")}
            {text("min_cuda", "Min CUDA version", query.min_cuda.clone(), "any, e.g. 12.2")}
            <div class="space-y-1">
                <label for="filter-sort" class="block text-sm font-medium text-slate-800">"Sort by"</label>
                <select id="filter-sort" name="sort" class=INPUT>
                    {[(OfferSort::Price, "Price"), (OfferSort::PricePerVram, "Price per GiB of memory"), (OfferSort::Availability, "Most GPUs free")]
                        .into_iter()
                        .map(|(s, label)| view! { <option value=s.as_str() selected=s == sort>{label}</option> })
                        .collect_view()}
                </select>
            </div>
            <div class="flex flex-wrap items-center gap-4 sm:col-span-2 lg:col-span-4">
                <label class="flex items-center gap-2 text-sm font-medium text-slate-800">
                    <input type="checkbox" name="verified" value="true" checked=query.verified == Some(true) class="h-4 w-4 rounded border-slate-300 text-indigo-600" />
                    "Verified hosts only"
                </label>
                <button type="submit" class="btn-primary">"Search"</button>
                <a href="/offers" class="btn-secondary">"Clear filters"</a>
            </div>
        </form>
    }
}

fn gib(bytes: i64) -> String {
    format!("{} GiB", (bytes + (1 << 29)) >> 30)
}

#[component]
fn Results(page: OfferPage, query: OfferQuery) -> impl IntoView {
    let kind = query.kind.unwrap_or_default();
    let pages = page.total.div_ceil(u64::from(page.per_page.max(1))).max(1) as u32;
    let link = move |to: u32| format!("/offers?{}", OfferQuery { page: Some(to), ..query.clone() }.to_query_string());
    if page.offers.is_empty() {
        return view! {
            <div class="card text-center">
                <p class="text-slate-700">"No offers match these filters right now."</p>
                <p class="mt-1 text-sm text-slate-500">"Hosts come and go; try a wider search or check back soon."</p>
            </div>
        }
        .into_any();
    }
    view! {
        <p class="text-sm text-slate-600" data-testid="offer-count" aria-live="polite">
            {format!("{} offer{} · page {} of {pages}", page.total, if page.total == 1 { "" } else { "s" }, page.page)}
        </p>
        <ul class="grid gap-4 md:grid-cols-2" aria-label="Offers">
            {page.offers.into_iter().map(|offer| view! { <OfferCard offer kind /> }).collect_view()}
        </ul>
        <nav aria-label="Pages" class="flex items-center justify-between">
            {(page.page > 1).then(|| view! { <a class="btn-secondary" rel="prev" href=link(page.page - 1)>"Previous"</a> })}
            <span></span>
            {(page.page < pages).then(|| view! { <a class="btn-secondary" rel="next" href=link(page.page + 1)>"Next"</a> })}
        </nav>
    }
    .into_any()
}

#[component]
fn OfferCard(offer: Offer, kind: RentalKind) -> impl IntoView {
    let price = |k: RentalKind, micros: i64, label: &'static str| {
        let class = if k == kind { "text-slate-900 font-semibold" } else { "text-slate-600" };
        view! {
            <div>
                <dt class="text-xs text-slate-500">{label}</dt>
                <dd class=format!("tabular-nums {class}")>{format!("{}/h", dollars(micros))}</dd>
            </div>
        }
    };
    let per_gpu = [
        offer.cpu_millicores_per_gpu.map(|m| {
            let text = format!("{}.{:03}", m / 1000, m % 1000);
            format!("{} vCPU", text.trim_end_matches('0').trim_end_matches('.'))
        }),
        offer.ram_bytes_per_gpu.map(|b| format!("{} RAM", gib(b as i64))),
        offer.disk_bytes_per_gpu.map(|b| format!("{} disk", gib(b as i64))),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" · ");
    let unit = if offer.mig_profile.is_some() { "slice" } else { "GPU" };
    view! {
        <li class="card" data-testid="offer">
            <div class="flex items-start justify-between gap-3">
                <div>
                    <h2 class="font-semibold text-slate-900" data-testid="offer-model">{offer.gpu_model.clone()}</h2>
                    <p class="text-sm text-slate-600">{format!("{} per {unit} · {}", gib(offer.vram_bytes), offer.location.clone().unwrap_or_else(|| "location not given".into()))}</p>
                </div>
                <span class="badge shrink-0 bg-emerald-50 text-emerald-700 ring-emerald-200" data-testid="offer-free">{format!("{} free", offer.gpus_free)}</span>
            </div>
            <dl class="mt-4 grid grid-cols-3 gap-2 text-sm">
                {price(RentalKind::OnDemand, offer.on_demand_micros, "On-demand")}
                {price(RentalKind::Reserved, offer.reserved_micros, "Reserved")}
                {price(RentalKind::Spot, offer.spot_price_micros, "Spot now")}
            </dl>
            <p class="mt-4 flex flex-wrap gap-2 text-xs">
                {offer.mig_profile.clone().map(|p| view! {
                    <Badge tone=Tone::Info testid="offer-mig">{format!("MIG slice {p}")}</Badge>
                })}
                {offer.verified.then(|| view! { <Badge tone=Tone::Good testid="offer-verified">"✓ Verified host"</Badge> })}
                {offer.fabric.clone().map(|fabric| view! { <crate::components::fabric::FabricBadge fabric /> })}
                <Badge tone=Tone::Info>{if offer.interconnect == "nvlink" { "NVLink" } else { "PCIe" }}</Badge>
                <Badge tone=Tone::Neutral>{format!("CUDA {} · driver {}", offer.cuda_version, offer.driver_version)}</Badge>
                <Badge tone=Tone::Neutral>{format!("{}.{}% uptime (7 d)", offer.uptime_permille / 10, offer.uptime_permille % 10)}</Badge>
            </p>
            {(!per_gpu.is_empty()).then(|| view! { <p class="mt-2 text-xs text-slate-500">{format!("Per {unit}: {per_gpu}")}</p> })}
            <a
                class="btn-primary mt-4 inline-flex"
                data-testid="offer-rent"
                href=format!("/rent?host={}&model={}&kind={}", offer.host_id, percent_encode(&offer.gpu_model), kind.as_str())
            >
                {format!("Rent {}", offer.gpu_model)}
            </a>
            {offer.fabric.clone().filter(|_| offer.mig_profile.is_none()).map(|fabric| view! {
                <a
                    class="btn-secondary mt-4 ml-2 inline-flex"
                    data-testid="offer-gang"
                    href=format!("/gangs/new?model={}&fabric={}", percent_encode(&offer.gpu_model), percent_encode(&fabric.fabric_id))
                >
                    "Rent a multi-node gang"
                </a>
            })}
        </li>
    }
}
