//! Admin · Users: find an account, see its roles and standing, and act on it (make or unmake
//! an admin, suspend, reinstate), always with a reason that goes into the audit log.

use super::admins_only;
use crate::{
    components::{
        form::{FormAlert, form_error},
        kit::{Await, Badge, Col, DataTable, Tone},
        session::{Audience, RequireSignIn, account_resource},
    },
    server_fns::admin::{AccountAction, list_users},
};
use cardpool_domain::{
    AppError,
    account::{UserSummary, Viewer},
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn AdminUsersPage() -> impl IntoView {
    let act = ServerAction::<AccountAction>::new();
    let query = use_query_map();
    let search = move || query.with(|q| q.get("q").unwrap_or_default());
    let users =
        account_resource(Audience::Admins, move || (search(), act.version().get()), |(q, _)| list_users(Some(q)));
    view! {
        <Title text="Users · Admin" />
        <RequireSignIn children=move |me: Viewer| admins_only(me, || view! { <AdminUsers act users /> }) />
    }
}

#[component]
fn AdminUsers(act: ServerAction<AccountAction>, users: Resource<Result<Vec<UserSummary>, AppError>>) -> impl IntoView {
    let query = use_query_map();
    let search = move || query.with(|q| q.get("q").unwrap_or_default());
    let value = act.value();
    view! {
        <div class="flex flex-wrap items-end justify-between gap-4">
            <div>
                <h1 class="text-2xl font-bold text-slate-900">"Users"</h1>
                <p class="mt-1 text-slate-600">"Suspending signs the account out everywhere, stops its rentals (settled to now) and delists its hosts."</p>
            </div>
            <form method="get" action="/admin/users" role="search" class="flex gap-2">
                <label for="user-search" class="sr-only">"Search by email"</label>
                <input id="user-search" name="q" type="search" maxlength="254" placeholder="Search by email" prop:value=search
                    class="rounded-lg border-0 px-3 py-2 text-slate-900 shadow-sm ring-1 ring-inset ring-slate-300 focus:ring-2 focus:ring-indigo-600" />
                <button type="submit" class="btn-secondary">"Search"</button>
            </form>
        </div>
        <div class="mt-4"><FormAlert message=form_error(value) /></div>
        {move || value.get().and_then(Result::ok).map(|user| view! {
            <p role="status" class="mt-4 rounded-lg bg-emerald-50 px-4 py-3 text-sm text-emerald-800 ring-1 ring-emerald-200">
                {format!("Saved: {} is now {}.", user.email, standing(&user))}
            </p>
        })}
        <section class="card mt-6">
            <Await resource=users loading="Loading users…" ready=move |list| view! { <UserTable users=list act /> } />
        </section>
    }
}

/// The account's roles and standing in words.
fn standing(user: &UserSummary) -> String {
    let mut words: Vec<&str> = vec!["renter"];
    if user.roles.provider {
        words.push("provider");
    }
    if user.roles.admin {
        words.push("admin");
    }
    let roles = words.join(", ");
    if user.suspended_at.is_some() { format!("suspended ({roles})") } else { roles }
}

#[component]
fn UserTable(users: Vec<UserSummary>, act: ServerAction<AccountAction>) -> impl IntoView {
    if users.is_empty() {
        return view! { <p class="text-slate-600">"No account matches."</p> }.into_any();
    }
    view! {
        <DataTable columns=vec![Col::new("Email"), Col::new("Roles"), Col::new("Joined").from("md"), Col::actions("Manage")]>
            {users.into_iter().map(|user| {
                let roles = standing(&UserSummary { suspended_at: None, ..user.clone() });
                let suspended = user.suspended_at.is_some();
                let choices: Vec<(&str, &str)> = [
                    (!user.roles.admin).then_some(("grant_admin", "Make admin")),
                    user.roles.admin.then_some(("revoke_admin", "Remove admin role")),
                    (!suspended).then_some(("suspend", "Suspend")),
                    suspended.then_some(("reinstate", "Reinstate")),
                ].into_iter().flatten().collect();
                view! {
                    <tr data-testid="user-row">
                        <td class="py-3 pr-4 font-medium text-slate-900">
                            <a class="text-indigo-700 hover:underline" href=format!("/admin/users/{}", user.id)>{user.email.clone()}</a>
                            {user.suspended_reason.clone().map(|why| view! { <p class="mt-1 text-xs font-normal text-red-700">{format!("Suspended: {why}")}</p> })}
                        </td>
                        <td class="py-3 pr-4 text-slate-600">
                            {roles}
                            {suspended.then(|| view! { <span class="ml-2"><Badge tone=Tone::Bad testid="suspended">"suspended"</Badge></span> })}
                        </td>
                        <td class="hidden py-3 pr-4 text-slate-600 md:table-cell">{user.created_at.format("%Y-%m-%d").to_string()}</td>
                        <td class="py-3 text-right">
                            <details class="inline-block text-left">
                                <summary class="btn-secondary cursor-pointer list-none">"Manage"</summary>
                                <ActionForm action=act attr:class="mt-2 flex w-72 flex-col gap-2 rounded-lg bg-white p-3 shadow-lg ring-1 ring-slate-200">
                                    <input type="hidden" name="user_id" value=user.id />
                                    <label class="text-sm font-medium text-slate-800" for=format!("user-action-{}", user.id)>"Action"</label>
                                    <select id=format!("user-action-{}", user.id) name="action" class="rounded-lg border-0 px-3 py-2 text-slate-900 ring-1 ring-inset ring-slate-300">
                                        {choices.into_iter().map(|(value, label)| view! { <option value=value>{label}</option> }).collect_view()}
                                    </select>
                                    <label class="text-sm font-medium text-slate-800" for=format!("user-reason-{}", user.id)>"Reason (kept in the audit log)"</label>
                                    <input id=format!("user-reason-{}", user.id) name="reason" required minlength="3" maxlength="500"
                                        class="rounded-lg border-0 px-3 py-2 text-slate-900 ring-1 ring-inset ring-slate-300 focus:ring-2 focus:ring-indigo-600" />
                                    <button type="submit" class="btn-primary" disabled=move || act.pending().get()>"Apply"</button>
                                </ActionForm>
                            </details>
                        </td>
                    </tr>
                }
            }).collect_view()}
        </DataTable>
    }
    .into_any()
}
