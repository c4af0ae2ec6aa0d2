//! Admin: every account, and promoting one to admin.

use crate::{
    components::session::RequireSignIn,
    server_fns::accounts::{GrantAdmin, list_users},
};
use cardpool_domain::account::{Me, UserSummary};
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn AdminUsersPage() -> impl IntoView {
    view! {
        <Title text="Users · Admin" />
        <RequireSignIn children=|me: Me| {
            if me.roles.admin {
                view! { <AdminUsers /> }.into_any()
            } else {
                view! {
                    <div class="card mx-auto max-w-md text-center" role="alert">
                        <h1 class="text-xl font-semibold text-slate-900">"Admins only"</h1>
                        <p class="mt-2 text-slate-600">"Your account does not have access to this page."</p>
                    </div>
                }.into_any()
            }
        } />
    }
}

#[component]
fn AdminUsers() -> impl IntoView {
    let grant = ServerAction::<GrantAdmin>::new();
    let users = Resource::new(move || grant.version().get(), |_| list_users());
    view! {
        <h1 class="text-2xl font-bold text-slate-900">"Users"</h1>
        <section class="card mt-6">
            <Transition fallback=|| view! { <p class="text-slate-500">"Loading users…"</p> }>
                {move || Suspend::new(async move {
                    match users.await {
                        Ok(list) => view! { <UserTable users=list grant /> }.into_any(),
                        Err(err) => view! { <p role="alert" class="text-red-700">{err.to_string()}</p> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

#[component]
fn UserTable(users: Vec<UserSummary>, grant: ServerAction<GrantAdmin>) -> impl IntoView {
    view! {
        <div class="overflow-x-auto">
            <table class="min-w-full divide-y divide-slate-200 text-sm">
                <thead>
                    <tr class="text-left text-slate-500">
                        <th scope="col" class="py-2 pr-4 font-medium">"Email"</th>
                        <th scope="col" class="py-2 pr-4 font-medium">"Roles"</th>
                        <th scope="col" class="py-2 pr-4 font-medium">"Joined"</th>
                        <th scope="col" class="py-2"><span class="sr-only">"Actions"</span></th>
                    </tr>
                </thead>
                <tbody class="divide-y divide-slate-100">
                    {users.into_iter().map(|user| {
                        let roles = [(true, "renter"), (user.roles.provider, "provider"), (user.roles.admin, "admin")]
                            .into_iter()
                            .filter_map(|(on, name)| on.then_some(name))
                            .collect::<Vec<_>>()
                            .join(", ");
                        view! {
                            <tr>
                                <td class="py-3 pr-4 font-medium text-slate-900">{user.email.clone()}</td>
                                <td class="py-3 pr-4 text-slate-600">{roles}</td>
                                <td class="py-3 pr-4 text-slate-600">{user.created_at.format("%Y-%m-%d").to_string()}</td>
                                <td class="py-3 text-right">
                                    {(!user.roles.admin).then(|| view! {
                                        <ActionForm action=grant>
                                            <input type="hidden" name="user_id" value=user.id />
                                            <button type="submit" class="btn-secondary">"Make admin"</button>
                                        </ActionForm>
                                    })}
                                </td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}
