//! The account's SSH keys: add (paste a `.pub` line), list with fingerprints, remove. Any of
//! them opens the account's running rentals through Cardpool's SSH gateway.

use crate::{
    components::{
        form::{Field, FormAlert, SubmitButton, field_error, form_error},
        kit::{AwaitList, Col, DataTable},
        session::{RequireSignIn, account_list},
    },
    server_fns::ssh_keys::{AddSshKey, RemoveSshKey, list_ssh_keys},
};
use cardpool_domain::{
    AppError,
    account::{SshKey, Viewer},
};
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn SshKeysPage() -> impl IntoView {
    let add = ServerAction::<AddSshKey>::new();
    let remove = ServerAction::<RemoveSshKey>::new();
    let keys = account_list([add.version(), remove.version()], list_ssh_keys);
    view! {
        <Title text="SSH keys" />
        <RequireSignIn children=move |_me: Viewer| view! { <SshKeys add remove keys /> } />
    }
}

#[component]
fn SshKeys(
    add: ServerAction<AddSshKey>,
    remove: ServerAction<RemoveSshKey>,
    keys: Resource<Result<Vec<SshKey>, AppError>>,
) -> impl IntoView {
    let value = add.value();
    // A key that went in leaves the form empty for the next one.
    let key_input: NodeRef<leptos::html::Textarea> = NodeRef::new();
    Effect::new(move || {
        if let Some(Ok(_)) = value.get() {
            #[cfg(feature = "hydrate")]
            if let Some(input) = key_input.get() {
                input.set_value("");
            }
        }
    });
    view! {
        <div class="space-y-6">
            <div>
                <h1 class="text-2xl font-bold text-slate-900">"SSH keys"</h1>
                <p class="mt-1 text-slate-600">
                    "Any key here gets you into your running rentals: "
                    <code class="rounded bg-slate-100 px-1">"ssh -p 2222 r42@…"</code>
                    " (each rental's page shows its exact command). Only public keys are stored."
                </p>
            </div>

            <section class="card" aria-labelledby="new-key">
                <h2 id="new-key" class="text-lg font-semibold text-slate-900">"Add a key"</h2>
                <ActionForm action=add attr:class="mt-4 space-y-4" attr:novalidate=true>
                    <div>
                        <label for="public_key" class="block text-sm font-medium text-slate-700">"Public key"</label>
                        <textarea id="public_key" name="public_key" rows="3" required node_ref=key_input
                            class="mt-1 block w-full rounded-lg border-slate-300 font-mono text-sm shadow-sm focus:border-indigo-500 focus:ring-indigo-500"
                            placeholder="ssh-ed25519 AAAA… you@laptop"
                            aria-describedby="public_key-hint"></textarea>
                        <p id="public_key-hint" class="mt-1 text-xs text-slate-500">"The contents of ~/.ssh/id_ed25519.pub (make one with ssh-keygen -t ed25519)."</p>
                        {move || field_error(value, "public_key").get().map(|e| view! { <p class="mt-1 text-sm text-red-700" role="alert">{e}</p> })}
                    </div>
                    <div class="flex flex-col gap-4 sm:flex-row sm:items-end">
                        <div class="flex-1">
                            <Field label="Name (optional)" name="name" hint="Defaults to the key's comment." error=field_error(value, "name") />
                        </div>
                        <div class="sm:w-48">
                            <SubmitButton label="Add key" pending=add.pending() />
                        </div>
                    </div>
                </ActionForm>
                <div class="mt-4">
                    <FormAlert message=form_error(value) />
                </div>
                {move || value.get().and_then(Result::ok).map(|key| view! {
                    <p role="status" class="mt-4 rounded-lg bg-emerald-50 px-4 py-3 text-sm text-emerald-900 ring-1 ring-emerald-200">
                        "Key “" {key.name.clone()} "” added (" <span class="font-mono text-xs">{key.fingerprint.clone()}</span> ")."
                    </p>
                })}
            </section>

            <section class="card" aria-labelledby="your-keys">
                <h2 id="your-keys" class="text-lg font-semibold text-slate-900">"Your keys"</h2>
                <AwaitList resource=keys loading="Loading keys…" class="mt-4" empty="No SSH keys yet." ready=move |list| view! { <KeyTable keys=list remove /> } />
            </section>
        </div>
    }
}

#[component]
fn KeyTable(keys: Vec<SshKey>, remove: ServerAction<RemoveSshKey>) -> impl IntoView {
    view! {
        <DataTable columns=vec![Col::new("Name"), Col::new("Fingerprint").from("sm"), Col::new("Added").from("md"), Col::new("Last used").from("md"), Col::actions("Actions")] class="mt-4">
            {keys.into_iter().map(|key| {
                let label = format!("Remove key {}", key.name);
                view! {
                    <tr data-testid="ssh-key-row">
                        <td class="py-3 pr-4 font-medium text-slate-900">{key.name.clone()}<span class="block text-xs font-normal text-slate-500">{key.algorithm.clone()}</span></td>
                        <td class="hidden break-all py-3 pr-4 font-mono text-xs text-slate-600 sm:table-cell">{key.fingerprint.clone()}</td>
                        <td class="hidden py-3 pr-4 text-slate-600 md:table-cell">{key.created_at.format("%Y-%m-%d").to_string()}</td>
                        <td class="hidden py-3 pr-4 text-slate-600 md:table-cell">
                            {key.last_used_at.map_or_else(|| "never".to_owned(), |t| t.format("%Y-%m-%d %H:%M UTC").to_string())}
                        </td>
                        <td class="py-3 text-right">
                            <ActionForm action=remove>
                                <input type="hidden" name="id" value=key.id />
                                <button type="submit" class="btn-danger" aria-label=label>"Remove"</button>
                            </ActionForm>
                        </td>
                    </tr>
                }
            }).collect_view()}
        </DataTable>
    }
}
