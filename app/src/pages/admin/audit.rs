//! Admin · Audit log: every admin action and role change, newest first, filtered by subject
//! and action, with who did it, why, and what changed.

use super::admins_only;
use crate::{
    components::{
        kit::{Await, Col, DataTable},
        session::{Audience, RequireSignIn, account_resource},
    },
    server_fns::admin::list_audit,
};
use cardpool_domain::{
    AppError,
    account::Viewer,
    admin::{AuditAction, AuditEntry, AuditPage, AuditQuery},
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn AdminAuditPage() -> impl IntoView {
    let params = use_query_map();
    let query = move || {
        params.with(|p| AuditQuery {
            subject_kind: p.get("subject_kind").filter(|k| !k.is_empty()),
            subject_id: p.get("subject_id").and_then(|id| id.trim().parse().ok()),
            action: p.get("action").filter(|a| !a.is_empty()),
            page: p.get("page").and_then(|n| n.parse().ok()),
            per_page: None,
        })
    };
    let page = account_resource(Audience::Admins, query, list_audit);
    view! {
        <Title text="Audit log · Admin" />
        <RequireSignIn children=move |me: Viewer| admins_only(me, || view! { <AdminAudit query=Signal::derive(query) page /> }) />
    }
}

#[component]
fn AdminAudit(query: Signal<AuditQuery>, page: Resource<Result<AuditPage, AppError>>) -> impl IntoView {
    let params = use_query_map();
    let query = move || query.get();
    let chosen = move |key: &'static str| params.with(|p| p.get(key).unwrap_or_default());
    view! {
        <h1 class="text-2xl font-bold text-slate-900">"Audit log"</h1>
        <p class="mt-1 text-slate-600">"Every admin action and role change. Entries cannot be edited or deleted."</p>
        <form method="get" action="/admin/audit" role="search" class="card mt-6 grid gap-4 sm:grid-cols-4 sm:items-end">
            <div>
                <label for="audit-kind" class="block text-sm font-medium text-slate-800">"Subject"</label>
                <select id="audit-kind" name="subject_kind" class="mt-1 block w-full rounded-lg border-0 px-3 py-2 ring-1 ring-inset ring-slate-300">
                    <option value="" selected=move || chosen("subject_kind").is_empty()>"Everything"</option>
                    <option value="host" selected=move || chosen("subject_kind") == "host">"Hosts"</option>
                    <option value="user" selected=move || chosen("subject_kind") == "user">"Accounts"</option>
                    <option value="rental" selected=move || chosen("subject_kind") == "rental">"Rentals"</option>
                </select>
            </div>
            <div>
                <label for="audit-id" class="block text-sm font-medium text-slate-800">"Subject id"</label>
                <input id="audit-id" name="subject_id" inputmode="numeric" prop:value=move || chosen("subject_id")
                    class="mt-1 block w-full rounded-lg border-0 px-3 py-2 ring-1 ring-inset ring-slate-300" />
            </div>
            <div>
                <label for="audit-action" class="block text-sm font-medium text-slate-800">"Action"</label>
                <select id="audit-action" name="action" class="mt-1 block w-full rounded-lg border-0 px-3 py-2 ring-1 ring-inset ring-slate-300">
                    <option value="">"Any"</option>
                    {AuditAction::ALL.into_iter().map(|a| view! {
                        <option value=a.as_str() selected=move || chosen("action") == a.as_str()>{a.as_str()}</option>
                    }).collect_view()}
                </select>
            </div>
            <button type="submit" class="btn-secondary">"Filter"</button>
        </form>
        <section class="card mt-6" aria-label="Audit entries">
            <Await resource=page loading="Loading the audit log…" ready=move |page| view! { <Entries page query=query() /> } />
        </section>
    }
}

#[component]
fn Entries(page: AuditPage, query: AuditQuery) -> impl IntoView {
    if page.entries.is_empty() {
        return view! { <p class="text-slate-600">"No entries match."</p> }.into_any();
    }
    let pages = page.total.div_ceil(u64::from(page.per_page)).max(1);
    let link = move |n: u32| {
        let mut pairs = vec![];
        if let Some(kind) = &query.subject_kind {
            pairs.push(format!("subject_kind={kind}"));
        }
        if let Some(id) = query.subject_id {
            pairs.push(format!("subject_id={id}"));
        }
        if let Some(action) = &query.action {
            pairs.push(format!("action={action}"));
        }
        pairs.push(format!("page={n}"));
        format!("/admin/audit?{}", pairs.join("&"))
    };
    view! {
        <AuditTable entries=page.entries />
        <nav aria-label="Audit pages" class="mt-4 flex items-center justify-between text-sm text-slate-600">
            <span>{format!("{} entries · page {} of {pages}", page.total, page.page)}</span>
            <span class="flex gap-2">
                {(page.page > 1).then(|| view! { <a class="btn-secondary" href=link(page.page - 1)>"Newer"</a> })}
                {(u64::from(page.page) < pages).then(|| view! { <a class="btn-secondary" href=link(page.page + 1)>"Older"</a> })}
            </span>
        </nav>
    }
    .into_any()
}

/// Audit entries as a table (also on an account's and a host's admin page).
#[component]
pub(crate) fn AuditTable(entries: Vec<AuditEntry>) -> impl IntoView {
    view! {
        <DataTable columns=vec![Col::new("When"), Col::new("Admin"), Col::new("Action"), Col::new("Subject"), Col::new("Reason"), Col::new("Change").from("lg")]>
            {entries.into_iter().map(|entry| view! { <EntryRow entry /> }).collect_view()}
        </DataTable>
    }
}

#[component]
fn EntryRow(entry: AuditEntry) -> impl IntoView {
    let (href, label) = match entry.subject_kind.as_str() {
        "host" => (format!("/admin/hosts/{}", entry.subject_id), "host"),
        "rental" => (format!("/rentals/{}", entry.subject_id), "rental"),
        _ => (format!("/admin/users/{}", entry.subject_id), "account"),
    };
    let subject =
        view! { <a class="text-indigo-700 hover:underline" href=href>{format!("{label} {}", entry.subject_id)}</a> };
    let change = format!("{} → {}", entry.before.as_deref().unwrap_or("—"), entry.after.as_deref().unwrap_or("—"));
    view! {
        <tr data-testid="audit-row">
            <td class="whitespace-nowrap py-3 pr-4 text-slate-600">{entry.at.format("%Y-%m-%d %H:%M:%S").to_string()}</td>
            <td class="py-3 pr-4 text-slate-900">{entry.actor}</td>
            <td class="py-3 pr-4 font-mono text-xs text-slate-800">{entry.action}</td>
            <td class="py-3 pr-4">{subject}</td>
            <td class="py-3 pr-4 text-slate-700">{entry.reason}</td>
            <td class="hidden max-w-md break-all py-3 pr-4 font-mono text-xs text-slate-500 lg:table-cell">{change}</td>
        </tr>
    }
}
