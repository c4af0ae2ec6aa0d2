//! Creating an account.

use crate::{
    components::{
        form::{Field, FormAlert, SubmitButton, field_error, form_error},
        session::reload_to,
    },
    server_fns::accounts::SignUp,
};
use cardpool_domain::account::MIN_PASSWORD_LEN;
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn SignUpPage() -> impl IntoView {
    let action = ServerAction::<SignUp>::new();
    Effect::new(move || {
        if let Some(Ok(_)) = action.value().get() {
            reload_to("/account");
        }
    });
    let value = action.value();
    view! {
        <Title text="Create account" />
        <div class="mx-auto max-w-md">
            <div class="card p-8">
                <h1 class="text-2xl font-bold text-slate-900">"Create your account"</h1>
                <p class="mt-1 text-sm text-slate-600">"Every account can rent GPUs; turn on hosting later from your account page."</p>
                <ActionForm action=action attr:class="mt-6 space-y-5" attr:novalidate=true>
                    <FormAlert message=form_error(value) />
                    <Field label="Email" name="email" input_type="email" autocomplete="email" error=field_error(value, "email") />
                    <Field
                        label="Password"
                        name="password"
                        input_type="password"
                        autocomplete="new-password"
                        hint=format!("At least {MIN_PASSWORD_LEN} characters.")
                        error=field_error(value, "password")
                    />
                    <SubmitButton label="Create account" pending=action.pending() />
                </ActionForm>
                <p class="mt-6 text-center text-sm text-slate-600">
                    "Already have an account? " <a href="/sign-in" class="font-medium text-indigo-700 hover:underline">"Sign in"</a>
                </p>
            </div>
        </div>
    }
}
