//! Admin · Hosts: every host with its badge and standing on the market, and what admins may
//! do to it: verify (the badge renters filter on), delist for maintenance or abuse (its live
//! rentals finish; nobody can book it) and relist, always with a reason for the audit log.

use super::admins_only;
use crate::{
    components::{
        form::{FormAlert, form_error},
        kit::{AwaitList, Badge, Col, DataTable, Tone},
        session::{Audience, RequireSignIn, account_resource},
    },
    pages::hosts::StatusBadge,
    server_fns::{admin::HostAction, hosts::list_hosts},
};
use cardpool_domain::{AppError, account::Viewer, host::HostSummary};
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn AdminHostsPage() -> impl IntoView {
    let act = ServerAction::<HostAction>::new();
    let hosts = account_resource(Audience::Admins, move || act.version().get(), |_| list_hosts());
    view! {
        <Title text="Hosts · Admin" />
        <RequireSignIn children=move |me: Viewer| admins_only(me, || view! { <AdminHosts act hosts /> }) />
    }
}

#[component]
fn AdminHosts(act: ServerAction<HostAction>, hosts: Resource<Result<Vec<HostSummary>, AppError>>) -> impl IntoView {
    let value = act.value();
    view! {
        <h1 class="text-2xl font-bold text-slate-900">"Hosts"</h1>
        <p class="mt-1 text-slate-600">"Verified hosts carry a badge renters can filter on. A delisted host's running rentals finish; nobody can book it and its provider cannot list it until you relist it."</p>
        <div class="mt-4"><FormAlert message=form_error(value) /></div>
        {move || value.get().and_then(Result::ok).map(|host| view! {
            <p role="status" class="mt-4 rounded-lg bg-emerald-50 px-4 py-3 text-sm text-emerald-800 ring-1 ring-emerald-200">
                {format!("Saved: {} is {}{}.", host.hostname, if host.verified { "verified" } else { "not verified" },
                    if host.held_reason.is_some() { " and delisted" } else { "" })}
            </p>
        })}
        <section class="card mt-6">
            <AwaitList resource=hosts loading="Loading hosts…" empty="No hosts enrolled yet." ready=move |list| view! { <HostTable hosts=list act /> } />
        </section>
    }
}

#[component]
fn HostTable(hosts: Vec<HostSummary>, act: ServerAction<HostAction>) -> impl IntoView {
    view! {
        <DataTable columns=vec![Col::new("Host"), Col::new("Status"), Col::new("GPUs").from("md"), Col::new("Market"), Col::actions("Manage")]>
            {hosts.into_iter().map(|host| {
                let revoked = host.status == cardpool_domain::host::HostStatus::Revoked;
                let choices: Vec<(&str, &str)> = [
                    (!host.verified).then_some(("verify", "Verify")),
                    host.verified.then_some(("unverify", "Remove the verified badge")),
                    host.held_reason.is_none().then_some(("delist", "Delist (maintenance, abuse)")),
                    host.held_reason.is_some().then_some(("relist", "Relist")),
                ].into_iter().flatten().collect();
                let market = match (&host.held_reason, host.listed) {
                    (Some(_), _) => view! { <Badge tone=Tone::Bad testid="delisted">"delisted"</Badge> }.into_any(),
                    (None, true) => view! { <Badge tone=Tone::Good>"listed"</Badge> }.into_any(),
                    (None, false) => view! { <Badge tone=Tone::Neutral>"not listed"</Badge> }.into_any(),
                };
                view! {
                    <tr data-testid="admin-host-row">
                        <td class="py-3 pr-4 font-medium">
                            <a class="text-indigo-700 hover:underline" href=format!("/admin/hosts/{}", host.id)>{host.hostname.clone()}</a>
                            {host.verified.then(|| view! { <span class="ml-2"><Badge tone=Tone::Info testid="verified">"✓ verified"</Badge></span> })}
                            <p class="text-xs font-normal text-slate-500">{host.location.clone().unwrap_or_default()}</p>
                        </td>
                        <td class="py-3 pr-4"><StatusBadge status=host.status /></td>
                        <td class="hidden py-3 pr-4 text-slate-700 md:table-cell">{host.gpu_summary.clone()}</td>
                        <td class="py-3 pr-4">
                            {market}
                            {host.held_reason.clone().map(|why| view! { <p class="mt-1 text-xs text-red-700">{why}</p> })}
                        </td>
                        <td class="py-3 text-right">
                            {(!revoked).then(|| view! {
                                <details class="inline-block text-left">
                                    <summary class="btn-secondary cursor-pointer list-none">"Manage"</summary>
                                    <ActionForm action=act attr:class="mt-2 flex w-72 flex-col gap-2 rounded-lg bg-white p-3 shadow-lg ring-1 ring-slate-200">
                                        <input type="hidden" name="host_id" value=host.id />
                                        <label class="text-sm font-medium text-slate-800" for=format!("host-action-{}", host.id)>"Action"</label>
                                        <select id=format!("host-action-{}", host.id) name="action" class="rounded-lg border-0 px-3 py-2 text-slate-900 ring-1 ring-inset ring-slate-300">
                                            {choices.into_iter().map(|(value, label)| view! { <option value=value>{label}</option> }).collect_view()}
                                        </select>
                                        <label class="text-sm font-medium text-slate-800" for=format!("host-reason-{}", host.id)>"Reason (shown to the provider, kept in the audit log)"</label>
                                        <input id=format!("host-reason-{}", host.id) name="reason" required minlength="3" maxlength="500"
                                            class="rounded-lg border-0 px-3 py-2 text-slate-900 ring-1 ring-inset ring-slate-300 focus:ring-2 focus:ring-indigo-600" />
                                        <button type="submit" class="btn-primary" disabled=move || act.pending().get()>"Apply"</button>
                                    </ActionForm>
                                </details>
                            })}
                        </td>
                    </tr>
                }
            }).collect_view()}
        </DataTable>
    }
}
