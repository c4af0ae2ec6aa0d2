//! Personal API tokens: create (secret shown once), list, revoke.

use crate::{
    components::{
        form::{Field, FormAlert, SubmitButton, field_error, form_error},
        kit::{AwaitList, Col, DataTable},
        session::{RequireSignIn, account_list},
    },
    server_fns::api_tokens::{CreateApiToken, RevokeApiToken, list_api_tokens},
};
use cardpool_domain::{
    AppError,
    account::{ApiToken, Viewer},
};
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn ApiTokensPage() -> impl IntoView {
    let create = ServerAction::<CreateApiToken>::new();
    let revoke = ServerAction::<RevokeApiToken>::new();
    let tokens = account_list([create.version(), revoke.version()], list_api_tokens);
    view! {
        <Title text="API tokens" />
        <RequireSignIn children=move |_me: Viewer| view! { <ApiTokens create revoke tokens /> } />
    }
}

#[component]
fn ApiTokens(
    create: ServerAction<CreateApiToken>,
    revoke: ServerAction<RevokeApiToken>,
    tokens: Resource<Result<Vec<ApiToken>, AppError>>,
) -> impl IntoView {
    let value = create.value();
    view! {
        <div class="space-y-6">
            <div>
                <h1 class="text-2xl font-bold text-slate-900">"API tokens"</h1>
                <p class="mt-1 text-slate-600">
                    "Use a token as " <code class="rounded bg-slate-100 px-1">"Authorization: Bearer …"</code>
                    " with the " <a class="text-indigo-700 underline" href="/api/v1/openapi.json">"JSON API"</a> ". Treat it like a password."
                </p>
            </div>

            <section class="card" aria-labelledby="new-token">
                <h2 id="new-token" class="text-lg font-semibold text-slate-900">"Create a token"</h2>
                <ActionForm action=create attr:class="mt-4 flex flex-col gap-4 sm:flex-row sm:items-end" attr:novalidate=true>
                    <div class="flex-1">
                        <Field label="Token name" name="name" hint="What will use it, e.g. “training scripts”." error=field_error(value, "name") />
                    </div>
                    <div class="sm:w-48">
                        <SubmitButton label="Create token" pending=create.pending() />
                    </div>
                </ActionForm>
                <div class="mt-4">
                    <FormAlert message=form_error(value) />
                </div>
                {move || value.get().and_then(Result::ok).map(|created| view! {
                    <div role="status" class="mt-4 rounded-lg bg-emerald-50 p-4 ring-1 ring-emerald-200">
                        <p class="text-sm font-medium text-emerald-900">
                            "Token “" {created.token.name.clone()} "” created. Copy it now: it will not be shown again."
                        </p>
                        <code data-testid="new-token-secret" class="mt-2 block select-all break-all rounded bg-white px-3 py-2 font-mono text-sm text-slate-900 ring-1 ring-emerald-200">
                            {created.secret.clone()}
                        </code>
                    </div>
                })}
            </section>

            <section class="card" aria-labelledby="your-tokens">
                <h2 id="your-tokens" class="text-lg font-semibold text-slate-900">"Your tokens"</h2>
                <AwaitList resource=tokens loading="Loading tokens…" class="mt-4" empty="No active tokens." ready=move |list| view! { <TokenTable tokens=list revoke /> } />
            </section>
        </div>
    }
}

#[component]
fn TokenTable(tokens: Vec<ApiToken>, revoke: ServerAction<RevokeApiToken>) -> impl IntoView {
    view! {
        <DataTable columns=vec![Col::new("Name"), Col::new("Token").from("sm"), Col::new("Created"), Col::new("Last used").from("md"), Col::actions("Actions")] class="mt-4">
            {tokens.into_iter().map(|token| {
                let label = format!("Revoke token {}", token.name);
                view! {
                    <tr data-testid="token-row">
                        <td class="py-3 pr-4 font-medium text-slate-900">{token.name.clone()}</td>
                        <td class="hidden py-3 pr-4 font-mono text-slate-600 sm:table-cell">{format!("{}…", token.prefix)}</td>
                        <td class="py-3 pr-4 text-slate-600">{token.created_at.format("%Y-%m-%d").to_string()}</td>
                        <td class="hidden py-3 pr-4 text-slate-600 md:table-cell">
                            {token.last_used_at.map_or_else(|| "never".to_owned(), |t| t.format("%Y-%m-%d %H:%M UTC").to_string())}
                        </td>
                        <td class="py-3 text-right">
                            <ActionForm action=revoke>
                                <input type="hidden" name="id" value=token.id />
                                <button type="submit" class="btn-danger" aria-label=label>"Revoke"</button>
                            </ActionForm>
                        </td>
                    </tr>
                }
            }).collect_view()}
        </DataTable>
    }
}
