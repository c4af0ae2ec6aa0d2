//! Admin · one account (`/admin/users/:id`): roles and standing, wallet, held funds, earnings
//! and payouts, its hosts, its rentals and the admin actions on it. Admin · one host
//! (`/admin/hosts/:id`): its status changes (outages, revocation), alerts, rentals and the
//! admin actions on it.

use super::{
    admins_only,
    audit::AuditTable,
    rentals::{RentalTableData, RentalsOf},
};
use crate::{
    components::{
        kit::{Await, Badge, Col, DataTable, Tone},
        money::{Stat, dollars},
        session::{Audience, RequireSignIn, account_resource},
    },
    pages::hosts::StatusBadge,
    server_fns::admin::{get_account_detail, get_host_history, list_audit},
};
use cardpool_domain::{
    AppError,
    account::Viewer,
    admin::{AccountDetail, AdminRentalQuery, AuditPage, AuditQuery, HostHistory},
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;

fn id_param() -> impl Fn() -> i64 + Copy + Send + Sync + 'static {
    let params = use_params_map();
    move || params.with(|p| p.get("id").and_then(|id| id.parse::<i64>().ok()).unwrap_or(0))
}

#[component]
pub fn AdminAccountPage() -> impl IntoView {
    let id = id_param();
    let detail = account_resource(Audience::Admins, id, get_account_detail);
    let audit = account_resource(Audience::Admins, id, |id| {
        list_audit(AuditQuery { subject_kind: Some("user".into()), subject_id: Some(id), ..AuditQuery::default() })
    });
    let rentals = RentalTableData::load(move || AdminRentalQuery {
        renter_id: Some(id()),
        per_page: Some(10),
        ..AdminRentalQuery::default()
    });
    view! {
        <Title text="Account · Admin" />
        <RequireSignIn children=move |me: Viewer| admins_only(me, || view! { <AdminAccount id=id() detail audit rentals /> }) />
    }
}

#[component]
fn AdminAccount(
    id: i64,
    detail: Resource<Result<AccountDetail, AppError>>,
    audit: Resource<Result<AuditPage, AppError>>,
    rentals: RentalTableData,
) -> impl IntoView {
    let all = format!("/admin/rentals?renter_id={id}");
    view! {
        <p class="text-sm"><a class="text-indigo-700 hover:underline" href="/admin/users">"← Users"</a></p>
        <Await resource=detail skeleton="h-64" class="mt-4" ready=|detail| view! { <Account detail /> } />
        <section class="card mt-6" aria-labelledby="account-rentals">
            <h2 id="account-rentals" class="text-lg font-semibold text-slate-900">"Rentals"</h2>
            <div class="mt-4"><RentalsOf data=rentals all /></div>
        </section>
        <section class="card mt-6" aria-labelledby="account-audit">
            <h2 id="account-audit" class="text-lg font-semibold text-slate-900">"Admin actions"</h2>
            <Await resource=audit class="mt-4" ready=|page| if page.entries.is_empty() {
                view! { <p class="mt-4 text-slate-500">"No admin has acted on this account."</p> }.into_any()
            } else {
                view! { <div class="mt-4"><AuditTable entries=page.entries /></div> }.into_any()
            } />
        </section>
    }
}

#[component]
fn Account(detail: AccountDetail) -> impl IntoView {
    let user = detail.user;
    let roles: Vec<&str> = [(true, "renter"), (user.roles.provider, "provider"), (user.roles.admin, "admin")]
        .into_iter()
        .filter_map(|(has, role)| has.then_some(role))
        .collect();
    view! {
        <div class="mt-2 flex flex-wrap items-center gap-3">
            <h1 class="text-2xl font-bold text-slate-900" data-testid="account-email">{user.email.clone()}</h1>
            {roles.into_iter().map(|role| view! { <Badge tone=Tone::Neutral>{role}</Badge> }).collect_view()}
            {user.suspended_at.map(|_| view! { <Badge tone=Tone::Bad testid="suspended">"suspended"</Badge> })}
        </div>
        <p class="mt-1 text-sm text-slate-600">{format!("Account {} · joined {}", user.id, user.created_at.format("%Y-%m-%d"))}</p>
        {user.suspended_reason.map(|why| view! { <p class="mt-1 text-sm text-red-700">{format!("Suspended: {why}")}</p> })}
        <div class="mt-6 grid gap-4 sm:grid-cols-2 lg:grid-cols-4">
            <Stat label="Wallet" micros=detail.wallet_micros testid="account-wallet" hint=format!("{} held for reservations", dollars(detail.held_micros)) />
            <Stat label="Spent on rentals" micros=detail.spent_micros testid="account-spent" hint=format!("{} rentals, {} live", detail.rentals, detail.live_rentals) />
            <Stat label="Earnings to pay out" micros=detail.earnings_micros testid="account-earnings" />
            <Stat label="Paid out" micros=detail.paid_out_micros testid="account-paid-out" />
        </div>
        {(!detail.hosts.is_empty()).then(|| view! {
            <section class="card mt-6" aria-labelledby="account-hosts">
                <h2 id="account-hosts" class="text-lg font-semibold text-slate-900">"Hosts"</h2>
                <DataTable columns=vec![Col::new("Host"), Col::new("Status"), Col::new("GPUs").from("md"), Col::new("Market")] class="mt-4">
                    {detail.hosts.into_iter().map(|host| view! {
                        <tr>
                            <td class="py-3 pr-4 font-medium"><a class="text-indigo-700 hover:underline" href=format!("/admin/hosts/{}", host.id)>{host.hostname}</a></td>
                            <td class="py-3 pr-4"><StatusBadge status=host.status /></td>
                            <td class="hidden py-3 pr-4 text-slate-700 md:table-cell">{host.gpu_summary}</td>
                            <td class="py-3 pr-4 text-slate-700">{match (host.held_reason, host.listed) {
                                (Some(why), _) => format!("delisted: {why}"),
                                (None, true) => "listed".to_owned(),
                                (None, false) => "not listed".to_owned(),
                            }}</td>
                        </tr>
                    }).collect_view()}
                </DataTable>
            </section>
        })}
    }
}

#[component]
pub fn AdminHostPage() -> impl IntoView {
    let id = id_param();
    let history = account_resource(Audience::Admins, id, get_host_history);
    let rentals = RentalTableData::load(move || AdminRentalQuery {
        host_id: Some(id()),
        per_page: Some(10),
        ..AdminRentalQuery::default()
    });
    view! {
        <Title text="Host · Admin" />
        <RequireSignIn children=move |me: Viewer| admins_only(me, || view! { <AdminHost id=id() history rentals /> }) />
    }
}

#[component]
fn AdminHost(id: i64, history: Resource<Result<HostHistory, AppError>>, rentals: RentalTableData) -> impl IntoView {
    let all = format!("/admin/rentals?host_id={id}");
    view! {
        <p class="text-sm"><a class="text-indigo-700 hover:underline" href="/admin/hosts">"← Hosts"</a></p>
        <Await resource=history skeleton="h-64" class="mt-4" ready=|history| view! { <Host history /> } />
        <section class="card mt-6" aria-labelledby="host-rentals">
            <h2 id="host-rentals" class="text-lg font-semibold text-slate-900">"Rentals"</h2>
            <div class="mt-4"><RentalsOf data=rentals all /></div>
        </section>
    }
}

#[component]
fn Host(history: HostHistory) -> impl IntoView {
    let host = history.host;
    let outages = history.events.iter().filter(|e| e.status != cardpool_domain::host::HostStatus::Online).count();
    view! {
        <div class="mt-2 flex flex-wrap items-center gap-3">
            <h1 class="text-2xl font-bold text-slate-900" data-testid="host-name">{host.hostname.clone()}</h1>
            <StatusBadge status=host.status />
            {host.verified.then(|| view! { <Badge tone=Tone::Info testid="verified">"✓ verified"</Badge> })}
            {host.held_reason.clone().map(|why| view! { <Badge tone=Tone::Bad testid="delisted">{format!("delisted: {why}")}</Badge> })}
        </div>
        <p class="mt-1 text-sm text-slate-600">
            {format!("Host {} · {} · provider ", host.id, host.gpu_summary)}
            <a class="text-indigo-700 hover:underline" href=format!("/admin/users/{}", history.provider_id)>{history.provider_email}</a>
            " · "<a class="text-indigo-700 hover:underline" href=format!("/provider/hosts/{}", host.id)>"GPUs, prices and self-test"</a>
        </p>
        <div class="mt-6 grid gap-6 lg:grid-cols-2">
            <section class="card" aria-labelledby="host-incidents">
                <h2 id="host-incidents" class="text-lg font-semibold text-slate-900">"Status changes"</h2>
                <p class="mt-1 text-sm text-slate-600">{match outages {
                    0 => "Never offline in this history.".to_owned(),
                    1 => "Offline or revoked once in this history.".to_owned(),
                    n => format!("Offline or revoked {n} times in this history."),
                }}</p>
                {if history.events.is_empty() {
                    view! { <p class="mt-4 text-slate-500">"No status changes recorded."</p> }.into_any()
                } else {
                    view! {
                        <DataTable columns=vec![Col::new("When"), Col::new("Status"), Col::new("Why")] class="mt-4">
                            {history.events.into_iter().map(|e| view! {
                                <tr data-testid="host-event-row">
                                    <td class="whitespace-nowrap py-2 pr-4 text-slate-600">{e.at.format("%Y-%m-%d %H:%M:%S").to_string()}</td>
                                    <td class="py-2 pr-4"><StatusBadge status=e.status /></td>
                                    <td class="py-2 pr-4 text-slate-700">{e.reason}</td>
                                </tr>
                            }).collect_view()}
                        </DataTable>
                    }.into_any()
                }}
            </section>
            <section class="card" aria-labelledby="host-alerts">
                <h2 id="host-alerts" class="text-lg font-semibold text-slate-900">"Alerts"</h2>
                {if history.alerts.is_empty() {
                    view! { <p class="mt-4 text-slate-500">"No alerts on this host."</p> }.into_any()
                } else {
                    view! {
                        <DataTable columns=vec![Col::new("Raised"), Col::new("Alert"), Col::new("State")] class="mt-4">
                            {history.alerts.into_iter().map(|a| {
                                let state = match (a.resolved_at, a.acknowledged_at) {
                                    (Some(_), _) => view! { <Badge tone=Tone::Good>"resolved"</Badge> },
                                    (None, Some(_)) => view! { <Badge tone=Tone::Neutral>"acknowledged"</Badge> },
                                    (None, None) => view! { <Badge tone=Tone::Bad>"open"</Badge> },
                                };
                                view! {
                                    <tr data-testid="host-alert-row">
                                        <td class="whitespace-nowrap py-2 pr-4 text-slate-600">{a.raised_at.format("%Y-%m-%d %H:%M").to_string()}</td>
                                        <td class="py-2 pr-4 text-slate-800">{a.message}</td>
                                        <td class="py-2 pr-4">{state}</td>
                                    </tr>
                                }
                            }).collect_view()}
                        </DataTable>
                    }.into_any()
                }}
            </section>
        </div>
        <section class="card mt-6" aria-labelledby="host-audit">
            <h2 id="host-audit" class="text-lg font-semibold text-slate-900">"Admin actions"</h2>
            {if history.audit.is_empty() {
                view! { <p class="mt-4 text-slate-500">"No admin has acted on this host."</p> }.into_any()
            } else {
                view! { <div class="mt-4"><AuditTable entries=history.audit /></div> }.into_any()
            }}
        </section>
    }
}
