//! `/account/webhooks`: the URLs that receive the account's events, signed. Register one (its
//! signing secret is shown once), send it a test event, read its delivery log (each attempt's
//! answer, retries pending), delete it. How to check a signature is on the page.

use crate::{
    components::{
        form::{Field, FormAlert, SubmitButton, field_error, form_error},
        kit::{AwaitList, Badge, Col, DataTable, ErrorAlert, Tone, in_browser, poll},
        session::{RequireSignIn, account_list},
    },
    server_fns::notifications::{CreateWebhook, DeleteWebhook, SendTestEvent, list_deliveries, list_webhooks},
};
use cardpool_domain::{
    AppError,
    account::Viewer,
    notifications::{DeliveryState, Webhook, WebhookDelivery},
};
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn WebhooksPage() -> impl IntoView {
    let create = ServerAction::<CreateWebhook>::new();
    let delete = ServerAction::<DeleteWebhook>::new();
    let hooks = account_list([create.version(), delete.version()], list_webhooks);
    view! {
        <Title text="Webhooks" />
        <RequireSignIn children=move |_me: Viewer| view! { <Webhooks create delete hooks /> } />
    }
}

#[component]
fn Webhooks(
    create: ServerAction<CreateWebhook>,
    delete: ServerAction<DeleteWebhook>,
    hooks: Resource<Result<Vec<Webhook>, AppError>>,
) -> impl IntoView {
    let test = ServerAction::<SendTestEvent>::new();
    let value = create.value();
    view! {
        <div class="space-y-6">
            <div>
                <h1 class="text-2xl font-bold text-slate-900">"Webhooks"</h1>
                <p class="mt-1 text-slate-600">
                    "Cardpool POSTs every event of your account (rental state changes, preemption notices, low balance, limits, hosts offline, payouts) as JSON to these URLs, signed, and retries until your server answers 2xx."
                </p>
            </div>
            <section class="card" aria-labelledby="new-webhook">
                <h2 id="new-webhook" class="text-lg font-semibold text-slate-900">"Add a webhook"</h2>
                <ActionForm action=create attr:class="mt-4 flex flex-col gap-4 sm:flex-row sm:items-start" attr:novalidate=true>
                    <div class="flex-1">
                        <Field label="URL" name="url" input_type="url" hint="https://, on a public address." error=field_error(value, "url") />
                    </div>
                    <div class="sm:mt-6 sm:w-48">
                        <SubmitButton label="Add webhook" pending=create.pending() />
                    </div>
                </ActionForm>
                <div class="mt-4"><FormAlert message=form_error(value) /></div>
                {move || value.get().and_then(Result::ok).and_then(|hook| hook.secret).map(|secret| view! {
                    <div role="status" class="mt-4 rounded-lg bg-emerald-50 p-4 ring-1 ring-emerald-200">
                        <p class="text-sm font-medium text-emerald-900">"Webhook added. Its signing secret, shown only now:"</p>
                        <code data-testid="webhook-secret" class="mt-2 block select-all break-all rounded bg-white px-3 py-2 font-mono text-sm text-slate-900 ring-1 ring-emerald-200">{secret}</code>
                    </div>
                })}
            </section>
            <section class="card" aria-labelledby="your-webhooks">
                <h2 id="your-webhooks" class="text-lg font-semibold text-slate-900">"Your webhooks"</h2>
                <AwaitList resource=hooks loading="Loading webhooks…" class="mt-4" empty="No webhooks yet." ready=move |list| view! {
                    <div class="mt-4 space-y-6">
                        {list.into_iter().map(|hook| view! { <Hook hook test delete /> }).collect_view()}
                    </div>
                } />
            </section>
            <Verifying />
        </div>
    }
}

#[component]
fn Hook(hook: Webhook, test: ServerAction<SendTestEvent>, delete: ServerAction<DeleteWebhook>) -> impl IntoView {
    let id = hook.id;
    // The log refreshes after a test event, then every few seconds while deliveries are pending.
    // Loaded in the browser: a row is made once its list has loaded, where a server resource
    // would be made more than once (see `session`'s module doc).
    let tick = RwSignal::new(0u32);
    let log = LocalResource::new(move || {
        test.version().track();
        tick.track();
        list_deliveries(id)
    });
    poll(tick, std::time::Duration::from_millis(1500), move || {
        log.get_untracked().and_then(Result::ok).is_some_and(|l| l.iter().any(|d| d.state == DeliveryState::Pending))
    });
    view! {
        <article class="rounded-xl ring-1 ring-slate-200" data-testid="webhook">
            <div class="flex flex-wrap items-center justify-between gap-3 border-b border-slate-100 px-4 py-3">
                <p class="min-w-0 break-all font-mono text-sm text-slate-900">{hook.url.clone()}</p>
                <div class="flex gap-2">
                    <ActionForm action=test>
                        <input type="hidden" name="id" value=id />
                        <button type="submit" class="btn-secondary" data-testid="send-test">"Send test event"</button>
                    </ActionForm>
                    <ActionForm action=delete>
                        <input type="hidden" name="id" value=id />
                        <button type="submit" class="btn-danger" aria-label=format!("Delete the webhook at {}", hook.url)>"Delete"</button>
                    </ActionForm>
                </div>
            </div>
            <div class="px-4 pb-3">
                {move || match in_browser(log) {
                    None => view! { <p class="mt-3 text-slate-500">"Loading deliveries…"</p> }.into_any(),
                    Some(Ok(list)) if list.is_empty() => view! { <p class="mt-3 text-slate-500">"No deliveries yet."</p> }.into_any(),
                    Some(Ok(list)) => view! { <Deliveries list /> }.into_any(),
                    Some(Err(err)) => view! { <ErrorAlert message=err.to_string() class="mt-3" /> }.into_any(),
                }}
            </div>
        </article>
    }
}

#[component]
fn Deliveries(list: Vec<WebhookDelivery>) -> impl IntoView {
    view! {
        <DataTable columns=vec![Col::new("Event"), Col::new("State"), Col::new("Attempts").from("sm"), Col::new("Answer"), Col::new("When").from("md")] class="mt-2">
            {list.into_iter().map(|d| {
                let (tone, state) = match d.state {
                    DeliveryState::Delivered => (Tone::Good, "delivered"),
                    DeliveryState::Pending => (Tone::Warn, "retrying"),
                    DeliveryState::Failed => (Tone::Bad, "failed"),
                };
                let state = if d.state == DeliveryState::Pending && d.attempts == 0 { "sending" } else { state };
                let answer = match (d.last_status, &d.last_error) {
                    (Some(status), _) => format!("HTTP {status}"),
                    (None, Some(error)) => error.clone(),
                    (None, None) => "—".to_owned(),
                };
                let when = d.delivered_at.or(d.next_attempt_at).unwrap_or(d.created_at);
                view! {
                    <tr data-testid="delivery" data-state=state>
                        <td class="py-2 pr-4 font-mono text-xs text-slate-700">{d.event.as_str()}</td>
                        <td class="py-2 pr-4"><Badge tone>{state}</Badge></td>
                        <td class="hidden py-2 pr-4 text-slate-600 sm:table-cell">{d.attempts}</td>
                        <td class="max-w-xs truncate py-2 pr-4 text-slate-600" title=answer.clone()>{answer.clone()}</td>
                        <td class="hidden py-2 text-slate-500 md:table-cell">{when.format("%Y-%m-%d %H:%M:%S UTC").to_string()}</td>
                    </tr>
                }
            }).collect_view()}
        </DataTable>
    }
}

/// How a receiver checks a delivery.
#[component]
fn Verifying() -> impl IntoView {
    view! {
        <section class="card" aria-labelledby="verify">
            <h2 id="verify" class="text-lg font-semibold text-slate-900">"Checking a signature"</h2>
            <p class="mt-1 text-sm text-slate-600">
                "Each delivery carries " <code class="rounded bg-slate-100 px-1">"Cardpool-Signature: t=<unix seconds>,v1=<hex>"</code>
                ": the HMAC-SHA256 of " <code class="rounded bg-slate-100 px-1">"<t>.<raw body>"</code>
                " keyed with the webhook's secret. Recompute it, compare in constant time, and refuse a " <code class="rounded bg-slate-100 px-1">"t"</code>
                " more than five minutes old. Retries carry the same event id: deduplicate on it."
            </p>
            <pre class="mt-3 overflow-x-auto rounded-lg bg-slate-900 p-4 text-xs text-slate-100">{r#"import hmac, hashlib, time
def verify(secret: str, header: str, body: bytes) -> bool:
    parts = dict(p.split("=", 1) for p in header.split(","))
    expected = hmac.new(secret.encode(), parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts["v1"]) and abs(time.time() - int(parts["t"])) <= 300"#}</pre>
        </section>
    }
}
