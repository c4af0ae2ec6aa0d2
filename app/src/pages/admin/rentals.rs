//! Admin · Rentals: every rental, filtered by state, kind, host, renter and booking day, and a
//! refund on any rental that charged something (split as the charge was, with a reason for
//! the ledger and the audit log). [`RentalsOf`] shows the same table for one account or host.

use super::admins_only;
use crate::{
    components::{
        form::INPUT,
        kit::{Await, Col, DataTable},
        money::dollars,
        session::{Audience, RequireSignIn, account_resource},
    },
    pages::rentals::{StateBadge, kind_label},
    server_fns::admin::{RefundRental, list_all_rentals},
};
use cardpool_domain::{
    AppError,
    account::Viewer,
    admin::{AdminRental, AdminRentalPage, AdminRentalQuery},
    offers::{RentalKind, percent_encode},
    rentals::RentalState,
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn AdminRentalsPage() -> impl IntoView {
    let params = use_query_map();
    let table = RentalTableData::load(move || {
        params.with(|p| {
            let text = |key: &str| p.get(key).filter(|v| !v.trim().is_empty());
            AdminRentalQuery {
                state: text("state"),
                kind: text("kind"),
                host_id: text("host_id").and_then(|v| v.trim().parse().ok()),
                renter_id: text("renter_id").and_then(|v| v.trim().parse().ok()),
                renter: text("renter"),
                since: text("since"),
                until: text("until"),
                page: text("page").and_then(|v| v.parse().ok()),
                per_page: None,
            }
        })
    });
    view! {
        <Title text="Rentals · Admin" />
        <RequireSignIn children=move |me: Viewer| admins_only(me, || view! { <AdminRentals table /> }) />
    }
}

const FILTERS: [&str; 6] = ["state", "kind", "host_id", "renter", "since", "until"];

#[component]
fn AdminRentals(table: RentalTableData) -> impl IntoView {
    let params = use_query_map();
    let chosen = move |key: &'static str| params.with(|p| p.get(key).unwrap_or_default());
    let link = move |page: u32| {
        params.with(|p| {
            let mut pairs: Vec<String> = FILTERS
                .iter()
                .chain(&["renter_id"])
                .filter_map(|key| p.get(key).filter(|v| !v.is_empty()).map(|v| format!("{key}={}", percent_encode(&v))))
                .collect();
            pairs.push(format!("page={page}"));
            format!("/admin/rentals?{}", pairs.join("&"))
        })
    };
    let select = "mt-1 block w-full rounded-lg border-0 px-3 py-2 ring-1 ring-inset ring-slate-300";
    view! {
        <h1 class="text-2xl font-bold text-slate-900">"Rentals"</h1>
        <p class="mt-1 text-slate-600">"Every rental on the platform. A refund goes back to the renter's wallet, paid by the provider's share and the platform's fee as the charge was, and is recorded with your reason."</p>
        <form method="get" action="/admin/rentals" role="search" class="card mt-6 grid gap-4 sm:grid-cols-3 lg:grid-cols-7 lg:items-end">
            <div>
                <label for="rentals-state" class="block text-sm font-medium text-slate-800">"State"</label>
                <select id="rentals-state" name="state" class=select>
                    <option value="">"Any"</option>
                    {RentalState::ALL.into_iter().map(|s| view! { <option value=s.as_str() selected=move || chosen("state") == s.as_str()>{s.label()}</option> }).collect_view()}
                </select>
            </div>
            <div>
                <label for="rentals-kind" class="block text-sm font-medium text-slate-800">"Kind"</label>
                <select id="rentals-kind" name="kind" class=select>
                    <option value="">"Any"</option>
                    {[RentalKind::OnDemand, RentalKind::Reserved, RentalKind::Spot].into_iter().map(|k| view! { <option value=k.as_str() selected=move || chosen("kind") == k.as_str()>{kind_label(k)}</option> }).collect_view()}
                </select>
            </div>
            <div>
                <label for="rentals-host" class="block text-sm font-medium text-slate-800">"Host id"</label>
                <input id="rentals-host" name="host_id" inputmode="numeric" prop:value=move || chosen("host_id") class=format!("mt-1 {INPUT}") />
            </div>
            <div>
                <label for="rentals-renter" class="block text-sm font-medium text-slate-800">"Renter email"</label>
                <input id="rentals-renter" name="renter" type="search" maxlength="254" prop:value=move || chosen("renter") class=format!("mt-1 {INPUT}") />
            </div>
            <div>
                <label for="rentals-since" class="block text-sm font-medium text-slate-800">"Booked from"</label>
                <input id="rentals-since" name="since" type="date" prop:value=move || chosen("since") class=format!("mt-1 {INPUT}") />
            </div>
            <div>
                <label for="rentals-until" class="block text-sm font-medium text-slate-800">"Booked until"</label>
                <input id="rentals-until" name="until" type="date" prop:value=move || chosen("until") class=format!("mt-1 {INPUT}") />
            </div>
            <button type="submit" class="btn-secondary">"Filter"</button>
        </form>
        <section class="card mt-6" aria-label="Rentals">
            <RentalTable data=table pager=Some(Callback::new(link)) />
        </section>
    }
}

/// What a table of rentals loads and sends, made where the page starts (see `session`'s
/// module doc).
#[derive(Clone, Copy)]
pub struct RentalTableData {
    refund: ServerAction<RefundRental>,
    page: Resource<Result<AdminRentalPage, AppError>>,
}

impl RentalTableData {
    pub fn load(query: impl Fn() -> AdminRentalQuery + Send + Sync + 'static) -> Self {
        let refund = ServerAction::<RefundRental>::new();
        let page =
            account_resource(Audience::Admins, move || (query(), refund.version().get()), |(q, _)| list_all_rentals(q));
        Self { refund, page }
    }
}

/// The first rentals that `data` found (an account's, a host's), with a link to all of them.
#[component]
pub fn RentalsOf(data: RentalTableData, all: String) -> impl IntoView {
    view! {
        <RentalTable data pager=None />
        <p class="mt-3 text-right text-sm"><a class="text-indigo-700 hover:underline" href=all>"All these rentals →"</a></p>
    }
}

/// Rentals found by a query, each refundable in place; `pager` links to another page.
#[component]
fn RentalTable(data: RentalTableData, pager: Option<Callback<u32, String>>) -> impl IntoView {
    let RentalTableData { refund, page } = data;
    let outcome = move || {
        refund.value().get().map(|result| match result {
            Ok(rental) => view! {
                <p role="status" class="mb-4 rounded-lg bg-emerald-50 px-4 py-3 text-sm text-emerald-800 ring-1 ring-emerald-200">
                    {format!("Refunded rental #{}: {} refunded in all, {} left.", rental.id, dollars(rental.refunded_micros), dollars(rental.refundable_micros()))}
                </p>
            }.into_any(),
            Err(err) => view! {
                <p role="alert" class="mb-4 rounded-lg bg-red-50 px-4 py-3 text-sm text-red-800 ring-1 ring-red-200">{format!("No refund: {}", failure(&err))}</p>
            }.into_any(),
        })
    };
    view! {
        {outcome}
        <Await resource=page loading="Loading rentals…" ready=move |page| view! { <Rows page refund pager /> } />
    }
}

/// An error with the fields it names, in one line.
fn failure(err: &AppError) -> String {
    match err {
        AppError::Validation { fields, .. } if !fields.is_empty() => {
            fields.iter().map(|(field, why)| format!("{field}: {why}")).collect::<Vec<_>>().join("; ")
        }
        other => other.to_string(),
    }
}

#[component]
fn Rows(
    page: AdminRentalPage,
    refund: ServerAction<RefundRental>,
    pager: Option<Callback<u32, String>>,
) -> impl IntoView {
    if page.rentals.is_empty() {
        return view! { <p class="text-slate-600">"No rentals match."</p> }.into_any();
    }
    let pages = page.total.div_ceil(u64::from(page.per_page)).max(1);
    view! {
        <DataTable columns=vec![Col::new("Rental"), Col::new("Renter"), Col::new("Host").from("md"), Col::new("State"), Col::new("Booked").from("lg"), Col::new("Charged").right(), Col::new("Refunded").right().from("sm"), Col::actions("Refund")]>
            {page.rentals.into_iter().map(|rental| view! { <Row rental refund /> }).collect_view()}
        </DataTable>
        <nav aria-label="Rental pages" class="mt-4 flex items-center justify-between text-sm text-slate-600">
            <span>{format!("{} rentals · page {} of {pages}", page.total, page.page)}</span>
            {pager.map(|link| view! {
                <span class="flex gap-2">
                    {(page.page > 1).then(|| view! { <a class="btn-secondary" href=link.run(page.page - 1)>"Newer"</a> })}
                    {(u64::from(page.page) < pages).then(|| view! { <a class="btn-secondary" href=link.run(page.page + 1)>"Older"</a> })}
                </span>
            })}
        </nav>
    }
    .into_any()
}

#[component]
fn Row(rental: AdminRental, refund: ServerAction<RefundRental>) -> impl IntoView {
    let left = rental.refundable_micros();
    let id = rental.id;
    view! {
        <tr data-testid="admin-rental-row">
            <td class="py-3 pr-4">
                <a class="font-medium text-indigo-700 hover:underline" href=format!("/rentals/{id}")>{format!("#{id}")}</a>
                <p class="text-xs text-slate-500">{format!("{}× {} · {}", rental.gpu_count, rental.gpu_model, kind_label(rental.kind))}</p>
            </td>
            <td class="py-3 pr-4"><a class="text-indigo-700 hover:underline" href=format!("/admin/users/{}", rental.renter_id)>{rental.renter_email.clone()}</a></td>
            <td class="hidden py-3 pr-4 md:table-cell"><a class="text-indigo-700 hover:underline" href=format!("/admin/hosts/{}", rental.host_id)>{rental.hostname.clone()}</a></td>
            <td class="py-3 pr-4"><StateBadge state=rental.state /></td>
            <td class="hidden whitespace-nowrap py-3 pr-4 text-slate-600 lg:table-cell">{rental.created_at.format("%Y-%m-%d %H:%M").to_string()}</td>
            <td class="py-3 pr-4 text-right tabular-nums" data-testid="rental-charged">{dollars(rental.charged_micros)}</td>
            <td class="hidden py-3 pr-4 text-right tabular-nums sm:table-cell" data-testid="rental-refunded">{dollars(rental.refunded_micros)}</td>
            <td class="py-3 text-right">
                {(left > 0).then(|| view! {
                    <details class="inline-block text-left">
                        <summary class="btn-secondary cursor-pointer list-none">"Refund"</summary>
                        <ActionForm action=refund attr:class="mt-2 flex w-72 flex-col gap-2 rounded-lg bg-white p-3 shadow-lg ring-1 ring-slate-200">
                            <input type="hidden" name="rental_id" value=id />
                            <label class="text-sm font-medium text-slate-800" for=format!("refund-amount-{id}")>{format!("Amount (USD, at most {})", dollars(left))}</label>
                            <input id=format!("refund-amount-{id}") name="amount" required inputmode="decimal" class=INPUT />
                            <label class="text-sm font-medium text-slate-800" for=format!("refund-reason-{id}")>"Reason (kept in the audit log)"</label>
                            <input id=format!("refund-reason-{id}") name="reason" required minlength="3" maxlength="500" class=INPUT />
                            <button type="submit" class="btn-primary" disabled=move || refund.pending().get()>"Refund"</button>
                        </ActionForm>
                    </details>
                })}
            </td>
        </tr>
    }
}
