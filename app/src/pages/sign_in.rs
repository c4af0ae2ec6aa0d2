//! Signing in.

use crate::{
    components::{
        form::{Field, FormAlert, SubmitButton, field_error, form_error},
        session::{reload_to, use_current_user},
    },
    server_fns::accounts::SignIn,
};
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn SignInPage() -> impl IntoView {
    let action = ServerAction::<SignIn>::new();
    Effect::new(move || {
        if let Some(Ok(_)) = action.value().get() {
            reload_to("/account");
        }
    });
    let value = action.value();
    let user = use_current_user();
    view! {
        <Title text="Sign in" />
        <div class="mx-auto max-w-md">
            <div class="card p-8">
                <h1 class="text-2xl font-bold text-slate-900">"Sign in"</h1>
                <Suspense>
                    {move || Suspend::new(async move {
                        user.0.await.ok().flatten().map(|me| view! {
                            <p class="mt-3 rounded-lg bg-indigo-50 px-4 py-3 text-sm text-indigo-900">
                                "You are signed in as " {me.email} ". " <a class="font-medium underline" href="/account">"Go to your account"</a>
                            </p>
                        })
                    })}
                </Suspense>
                <ActionForm action=action attr:class="mt-6 space-y-5" attr:novalidate=true>
                    <FormAlert message=form_error(value) />
                    <Field label="Email" name="email" input_type="email" autocomplete="username" error=field_error(value, "email") />
                    <Field label="Password" name="password" input_type="password" autocomplete="current-password" error=field_error(value, "password") />
                    <SubmitButton label="Sign in" pending=action.pending() />
                </ActionForm>
                <p class="mt-6 text-center text-sm text-slate-600">
                    "New to Cardpool? " <a href="/sign-up" class="font-medium text-indigo-700 hover:underline">"Create an account"</a>
                </p>
            </div>
        </div>
    }
}
