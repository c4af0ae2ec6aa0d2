//! The admin console: the fleet, accounts ([`users`]), hosts ([`hosts`]), one account's or
//! host's record ([`records`]), every rental with refunds ([`rentals`]), revenue and occupancy
//! ([`reports`]), wallet credits and refunds, and the audit log of every admin action
//! ([`audit`]). Pages are built for admins
//! only ([`admins_only`]); the service checks again on every call.

pub mod audit;
pub mod hosts;
pub mod records;
pub mod rentals;
pub mod reports;
pub mod users;

use crate::{
    components::{
        form::{Field, FormAlert, SubmitButton, field_error, form_error},
        kit::{AwaitList, Col, DataTable},
        money::dollars,
        session::{Audience, RequireSignIn, account_resource},
    },
    server_fns::payments::{AdminCredit, list_admin_credits},
};
use cardpool_domain::{AppError, account::Viewer, payments::Adjustment};
use leptos::prelude::*;
use leptos_meta::Title;

/// Shows `page` to admins and a refusal to everyone else. `page` is only built for admins, so
/// nobody else's browser asks for its data.
pub(crate) fn admins_only<V: IntoView + 'static>(me: Viewer, page: impl FnOnce() -> V) -> AnyView {
    if me.roles.admin {
        view! { <AdminTabs />{page()} }.into_any()
    } else {
        view! {
            <div class="card mx-auto max-w-md text-center" role="alert">
                <h1 class="text-xl font-semibold text-slate-900">"Admins only"</h1>
                <p class="mt-2 text-slate-600">"Your account does not have access to this page."</p>
            </div>
        }
        .into_any()
    }
}

#[component]
fn AdminTabs() -> impl IntoView {
    view! {
        <nav aria-label="Admin" class="mb-6 flex flex-wrap gap-2 border-b border-slate-200 pb-3">
            <leptos_router::components::A href="/admin/fleet" attr:class="nav-link">"Fleet"</leptos_router::components::A>
            <leptos_router::components::A href="/admin/hosts" attr:class="nav-link">"Hosts"</leptos_router::components::A>
            <leptos_router::components::A href="/admin/users" attr:class="nav-link">"Users"</leptos_router::components::A>
            <leptos_router::components::A href="/admin/rentals" attr:class="nav-link">"Rentals"</leptos_router::components::A>
            <leptos_router::components::A href="/admin/reports" attr:class="nav-link">"Reports"</leptos_router::components::A>
            <leptos_router::components::A href="/admin/credits" attr:class="nav-link">"Credits & refunds"</leptos_router::components::A>
            <leptos_router::components::A href="/admin/audit" attr:class="nav-link">"Audit log"</leptos_router::components::A>
        </nav>
    }
}

#[component]
pub fn AdminCreditsPage() -> impl IntoView {
    let credit = ServerAction::<AdminCredit>::new();
    let audit = account_resource(Audience::Admins, move || credit.version().get(), |_| list_admin_credits());
    view! {
        <Title text="Credits · Admin" />
        <RequireSignIn children=move |me: Viewer| admins_only(me, || view! { <AdminCredits credit audit /> }) />
    }
}

#[component]
fn AdminCredits(
    credit: ServerAction<AdminCredit>,
    audit: Resource<Result<Vec<Adjustment>, AppError>>,
) -> impl IntoView {
    let value = credit.value();
    let reason_error = field_error(value, "reason");
    let kind_error = field_error(value, "kind");
    view! {
        <h1 class="text-2xl font-bold text-slate-900">"Credits & refunds"</h1>
        <p class="mt-1 text-slate-600">"Add money to a renter's wallet. Every adjustment is recorded in the ledger with your account and the reason."</p>
        <section class="card mt-6" aria-labelledby="new-adjustment">
            <h2 id="new-adjustment" class="text-lg font-semibold text-slate-900">"New adjustment"</h2>
            <ActionForm action=credit attr:class="mt-4 grid gap-4 sm:grid-cols-2" attr:novalidate=true>
                <Field label="Account email" name="email" input_type="email" error=field_error(value, "email") />
                <Field label="Amount (USD)" name="amount" hint="e.g. 10 or 2.50" error=field_error(value, "amount") />
                <div class="space-y-1">
                    <label for="field-kind" class="block text-sm font-medium text-slate-800">"Kind"</label>
                    <select id="field-kind" name="kind" aria-describedby="field-kind-hint" class="block w-full rounded-lg border-0 px-3 py-2 text-slate-900 shadow-sm ring-1 ring-inset ring-slate-300 focus:ring-2 focus:ring-indigo-600">
                        <option value="credit">"Credit (promotional, goodwill)"</option>
                        <option value="refund">"Refund (paid from platform fees)"</option>
                    </select>
                    <p id="field-kind-hint" class="text-xs text-slate-500">"Decides which platform account pays for it."</p>
                    <p class="text-sm text-red-700">{move || kind_error.get()}</p>
                </div>
                <div class="space-y-1 sm:col-span-2">
                    <label for="field-reason" class="block text-sm font-medium text-slate-800">"Reason (required, kept for audit)"</label>
                    <textarea id="field-reason" name="reason" rows="2"
                        aria-invalid=move || if reason_error.get().is_some() { "true" } else { "false" }
                        aria-describedby="field-reason-error"
                        class="block w-full rounded-lg border-0 px-3 py-2 text-slate-900 shadow-sm ring-1 ring-inset ring-slate-300 focus:ring-2 focus:ring-indigo-600 aria-[invalid=true]:ring-red-500"></textarea>
                    <p id="field-reason-error" class="text-sm text-red-700">{move || reason_error.get()}</p>
                </div>
                <div class="sm:col-span-2 sm:w-56"><SubmitButton label="Apply adjustment" pending=credit.pending() /></div>
            </ActionForm>
            <div class="mt-4"><FormAlert message=form_error(value) /></div>
            {move || value.get().and_then(Result::ok).map(|a| view! {
                <p role="status" class="mt-4 rounded-lg bg-emerald-50 px-4 py-3 text-sm text-emerald-800 ring-1 ring-emerald-200">
                    {format!("{} {} to {}.", if a.kind == "refund" { "Refunded" } else { "Credited" }, dollars(a.amount_micros), a.account_email)}
                </p>
            })}
        </section>
        <section class="card mt-6" aria-labelledby="audit">
            <h2 id="audit" class="text-lg font-semibold text-slate-900">"Audit trail"</h2>
            <AwaitList resource=audit class="mt-4" empty="No adjustments yet." ready=move |list| view! {
                <DataTable columns=vec![Col::new("When"), Col::new("Account"), Col::new("Kind"), Col::new("Amount").right(), Col::new("Reason"), Col::new("By").from("md")] class="mt-4">
                    {list.into_iter().map(|a| view! {
                        <tr data-testid="adjustment-row">
                            <td class="whitespace-nowrap py-3 pr-4 text-slate-600">{a.created_at.format("%Y-%m-%d %H:%M").to_string()}</td>
                            <td class="py-3 pr-4 text-slate-900">{a.account_email}</td>
                            <td class="py-3 pr-4 text-slate-600">{a.kind}</td>
                            <td class="py-3 pr-4 text-right tabular-nums">{dollars(a.amount_micros)}</td>
                            <td class="py-3 pr-4 text-slate-700">{a.reason}</td>
                            <td class="hidden py-3 pr-4 text-slate-600 md:table-cell">{a.actor_email}</td>
                        </tr>
                    }).collect_view()}
                </DataTable>
            } />
        </section>
    }
}
