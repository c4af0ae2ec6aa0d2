//! The profile page: who you are, your roles, becoming a provider, changing your password.

use crate::{
    components::{
        form::{Field, FormAlert, SubmitButton, field_error, form_error},
        kit::{Badge, Tone},
        session::{RequireSignIn, reload_to},
    },
    server_fns::accounts::{ChangePassword, EnableProvider},
};
use cardpool_domain::account::{MIN_PASSWORD_LEN, Viewer};
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn AccountPage() -> impl IntoView {
    view! {
        <Title text="Account" />
        <RequireSignIn children=|me: Viewer| view! { <Account me /> } />
    }
}

#[component]
fn Account(me: Viewer) -> impl IntoView {
    let enable_provider = ServerAction::<EnableProvider>::new();
    Effect::new(move || {
        if let Some(Ok(_)) = enable_provider.value().get() {
            reload_to("/account");
        }
    });
    let change_password = ServerAction::<ChangePassword>::new();
    let value = change_password.value();
    let changed = move || matches!(value.get(), Some(Ok(())));
    view! {
        <div class="grid gap-6 lg:grid-cols-3">
            <section class="card lg:col-span-1" aria-labelledby="profile">
                <h1 id="profile" class="text-xl font-semibold text-slate-900">"Your account"</h1>
                <dl class="mt-4 space-y-3 text-sm">
                    <div>
                        <dt class="text-slate-500">"Email"</dt>
                        <dd class="font-medium text-slate-900" data-testid="account-email">{me.email.clone()}</dd>
                    </div>
                    <div>
                        <dt class="text-slate-500">"Roles"</dt>
                        <dd class="mt-1 flex flex-wrap gap-2" data-testid="account-roles">
                            <span class="badge bg-slate-100 text-slate-700 ring-slate-200">"renter"</span>
                            {me.roles.provider.then(|| view! { <Badge tone=Tone::Good>"provider"</Badge> })}
                            {me.roles.admin.then(|| view! { <Badge tone=Tone::Warn>"admin"</Badge> })}
                        </dd>
                    </div>
                    <div>
                        <dt class="text-slate-500">"Member since"</dt>
                        <dd class="text-slate-900">{me.created_at().format("%e %B %Y").to_string()}</dd>
                    </div>
                </dl>
            </section>

            <section class="card lg:col-span-2" aria-labelledby="hosting">
                <h2 id="hosting" class="text-lg font-semibold text-slate-900">"Hosting GPUs"</h2>
                {if me.roles.provider {
                    view! {
                        <p class="mt-2 text-slate-600">
                            "Provider features are on for this account. You can enroll hosts with the Cardpool agent and set your prices."
                        </p>
                    }.into_any()
                } else {
                    view! {
                        <p class="mt-2 text-slate-600">
                            "Have GPUs to rent out? Turn on provider features to enroll hosts with the Cardpool agent and earn from idle capacity."
                        </p>
                        <ActionForm action=enable_provider attr:class="mt-4">
                            <button type="submit" class="btn-primary" disabled=move || enable_provider.pending().get()>"Become a provider"</button>
                        </ActionForm>
                    }.into_any()
                }}
            </section>

            <section class="card lg:col-span-3" aria-labelledby="password">
                <h2 id="password" class="text-lg font-semibold text-slate-900">"Change password"</h2>
                <p class="mt-1 text-sm text-slate-600">"Changing your password signs out every other browser session of this account."</p>
                <ActionForm action=change_password attr:class="mt-4 grid max-w-xl gap-4" attr:novalidate=true>
                    <FormAlert message=form_error(value) />
                    <p role="status" class="rounded-lg bg-emerald-50 px-4 py-3 text-sm text-emerald-800 ring-1 ring-emerald-200" class:hidden=move || !changed()>
                        "Password changed. Other sessions have been signed out."
                    </p>
                    <Field label="Current password" name="current_password" input_type="password" autocomplete="current-password" error=field_error(value, "current_password") />
                    <Field
                        label="New password"
                        name="new_password"
                        input_type="password"
                        autocomplete="new-password"
                        hint=format!("At least {MIN_PASSWORD_LEN} characters.")
                        error=field_error(value, "new_password")
                    />
                    <div class="max-w-xs">
                        <SubmitButton label="Change password" pending=change_password.pending() />
                    </div>
                </ActionForm>
            </section>
        </div>
    }
}
