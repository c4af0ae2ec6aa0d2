//! The renter's wallet: balance, top-up through Stripe Checkout, spend limits, history with
//! running balance, CSV export and receipts.
//!
//! Coming back from Checkout proves nothing: the page shows the top-up as waiting until the
//! webhook has credited it, polling its status meanwhile.

use crate::{
    components::{
        form::{Field, FormAlert, SubmitButton, field_error, form_error},
        kit::{Await, poll},
        limits::{SpendLimits, SpendLimitsPanel},
        money::{LedgerHistory, Stat, dollars},
        session::{Audience, RequireSignIn, account_resource, reload_to},
    },
    server_fns::payments::{CreateTopUp, get_receipt, get_top_up, get_wallet, list_transactions},
};
use cardpool_domain::{
    AppError,
    account::Viewer,
    payments::{LedgerEntry, Receipt, TOP_UP_MAX_MICROS, TOP_UP_MIN_MICROS, TopUp, TopUpStatus, Wallet},
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};

#[component]
pub fn WalletPage() -> impl IntoView {
    let query = use_query_map();
    // Re-read money whenever the returning top-up's status changes.
    let settled = RwSignal::new(0u32);
    let money = WalletData {
        wallet: account_resource(Audience::Accounts, move || settled.get(), |_| get_wallet()),
        history: account_resource(Audience::Accounts, move || settled.get(), |_| list_transactions()),
        limits: SpendLimits::load(),
    };
    // Checkout sends the renter back here with the top-up's id.
    let returning = query.with_untracked(|q| q.get("top_up").and_then(|id| id.parse::<i64>().ok()));
    let cancelled = query.with_untracked(|q| q.get("cancelled").is_some());
    let progress = returning.map(|id| top_up_status(id, settled));
    view! {
        <Title text="Wallet" />
        <RequireSignIn children=move |_me: Viewer| view! { <WalletView money progress cancelled /> } />
    }
}

/// What the wallet page loads.
#[derive(Clone, Copy)]
struct WalletData {
    wallet: Resource<Result<Wallet, AppError>>,
    history: Resource<Result<Vec<LedgerEntry>, AppError>>,
    limits: SpendLimits,
}

#[component]
fn WalletView(
    money: WalletData,
    progress: Option<Resource<Result<TopUp, AppError>>>,
    cancelled: bool,
) -> impl IntoView {
    let WalletData { wallet, history, limits } = money;
    let top_up = ServerAction::<CreateTopUp>::new();
    let value = top_up.value();
    Effect::new(move || {
        if let Some(Ok(created)) = value.get() {
            reload_to(&created.checkout_url);
        }
    });
    view! {
        <div class="space-y-6">
            <div class="flex flex-wrap items-end justify-between gap-4">
                <div>
                    <h1 class="text-2xl font-bold text-slate-900">"Wallet"</h1>
                    <p class="mt-1 text-slate-600">"Prepaid balance for GPU rentals, billed by the second."</p>
                </div>
                <a class="btn-secondary" href="/api/v1/wallet/transactions.csv" download="cardpool-transactions.csv">"Export CSV"</a>
            </div>
            {progress.map(|status| view! { <TopUpProgress status cancelled /> })}
            <Await resource=wallet skeleton="h-28" ready=move |w| view! {
                <div class="grid gap-4 sm:grid-cols-2">
                    <Stat label="Balance" micros=w.balance_micros testid="wallet-balance" hint="Available for new rentals" />
                    <Stat label="Held for reservations" micros=w.held_micros hint="Released or charged when a reservation ends" />
                </div>
            } />
            <section class="card" aria-labelledby="top-up">
                <h2 id="top-up" class="text-lg font-semibold text-slate-900">"Add funds"</h2>
                <p class="mt-1 text-sm text-slate-600">"You pay on Stripe's secure checkout page; the balance updates as soon as Stripe confirms the payment."</p>
                <ActionForm action=top_up attr:class="mt-4 flex flex-col gap-4 sm:flex-row sm:items-start" attr:novalidate=true>
                    <div class="flex-1">
                        <Field
                            label="Amount (USD)"
                            name="amount"
                            value="50.00"
                            hint=format!("Between {} and {}, whole cents.", dollars(TOP_UP_MIN_MICROS), dollars(TOP_UP_MAX_MICROS))
                            error=field_error(value, "amount")
                        />
                    </div>
                    <div class="sm:mt-6 sm:w-56">
                        <SubmitButton label="Continue to payment" pending=top_up.pending() />
                    </div>
                </ActionForm>
                <div class="mt-4"><FormAlert message=form_error(value) /></div>
            </section>
            <SpendLimitsPanel limits />
            <section class="card" aria-labelledby="history">
                <h2 id="history" class="text-lg font-semibold text-slate-900">"History"</h2>
                <Await resource=history loading="Loading history…" class="mt-4" ready=move |entries| view! { <LedgerHistory entries chart_label="Wallet balance" empty="No transactions yet." receipts=true /> } />
            </section>
        </div>
    }
}

/// The returning top-up's status, polled until it is final; then the balance and history are
/// read again (`settled`).
fn top_up_status(id: i64, settled: RwSignal<u32>) -> Resource<Result<TopUp, AppError>> {
    let tick = RwSignal::new(0u32);
    let status = account_resource(Audience::Accounts, move || tick.get(), move |_| get_top_up(id));
    poll(
        tick,
        std::time::Duration::from_millis(1500),
        move || !matches!(status.get_untracked(), Some(Ok(t)) if t.status.is_final()),
    );
    // Once the top-up is final, refresh the balance and history.
    Effect::new(move || {
        if let Some(Ok(t)) = status.get()
            && t.status.is_final()
        {
            settled.update(|s| *s += 1);
        }
    });
    status
}

/// The banner shown when Checkout sends the renter back: waits for the webhook.
#[component]
fn TopUpProgress(status: Resource<Result<TopUp, AppError>>, cancelled: bool) -> impl IntoView {
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match status.await {
                    Ok(t) => {
                        let amount = dollars(t.amount_micros);
                        let (class, text, busy) = match t.status {
                            TopUpStatus::Credited => ("bg-emerald-50 text-emerald-800 ring-emerald-200", format!("Payment received: {amount} was added to your wallet."), false),
                            TopUpStatus::Open if cancelled => ("bg-slate-50 text-slate-700 ring-slate-200", format!("Top-up of {amount} cancelled. Nothing was charged."), false),
                            TopUpStatus::Open | TopUpStatus::Processing => ("bg-indigo-50 text-indigo-800 ring-indigo-200", format!("Waiting for Stripe to confirm your payment of {amount}…"), true),
                            TopUpStatus::Expired => ("bg-slate-50 text-slate-700 ring-slate-200", format!("The checkout for {amount} expired. Nothing was charged."), false),
                            TopUpStatus::Failed => ("bg-red-50 text-red-800 ring-red-200", format!("The payment of {amount} failed. Nothing was charged."), false),
                        };
                        view! {
                            <div role="status" aria-live="polite" data-testid="top-up-status" data-status=t.status.as_str() class=format!("flex items-center gap-3 rounded-xl px-4 py-3 text-sm ring-1 {class}")>
                                {busy.then(|| view! { <span class="inline-block h-4 w-4 animate-spin rounded-full border-2 border-indigo-300 border-t-indigo-700" aria-hidden="true"></span> })}
                                {text}
                            </div>
                        }.into_any()
                    }
                    Err(err) => view! { <p role="alert" class="text-red-700">{err.to_string()}</p> }.into_any(),
                }
            })}
        </Transition>
    }
}

#[component]
pub fn ReceiptPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.with(|p| p.get("id").and_then(|id| id.parse::<i64>().ok()).unwrap_or(0));
    let receipt = account_resource(Audience::Accounts, id, get_receipt);
    view! {
        <Title text="Receipt" />
        <RequireSignIn children=move |_me: Viewer| view! { <ReceiptView receipt /> } />
    }
}

#[component]
fn ReceiptView(receipt: Resource<Result<Receipt, AppError>>) -> impl IntoView {
    view! {
        <Await resource=receipt loading="Loading receipt…" ready=move |r| view! {
            <article class="card mx-auto max-w-xl" aria-labelledby="receipt-title">
                <div class="flex items-start justify-between">
                    <div>
                        <h1 id="receipt-title" class="text-xl font-bold text-slate-900">"Receipt"</h1>
                        <p class="text-sm text-slate-500" data-testid="receipt-number">{r.number.clone()}</p>
                    </div>
                    <p class="text-right text-sm text-slate-500">"Cardpool"<br />{r.created_at.format("%Y-%m-%d %H:%M UTC").to_string()}</p>
                </div>
                <dl class="mt-6 divide-y divide-slate-100 text-sm">
                    <div class="flex justify-between py-2"><dt class="text-slate-500">"Account"</dt><dd>{r.account_email.clone()}</dd></div>
                    <div class="flex justify-between py-2"><dt class="text-slate-500">"Description"</dt><dd>{r.description.clone()}</dd></div>
                    <div class="flex justify-between py-2"><dt class="text-slate-500">"Type"</dt><dd>{r.kind.replace('_', " ")}</dd></div>
                    {r.stripe_session_id.clone().map(|s| view! { <div class="flex justify-between gap-4 py-2"><dt class="text-slate-500">"Stripe payment"</dt><dd class="break-all font-mono text-xs">{s}</dd></div> })}
                    <div class="flex justify-between py-3 text-base font-semibold"><dt>"Amount"</dt><dd class="tabular-nums" data-testid="receipt-amount">{format!("{} {}", dollars(r.amount_micros), r.currency.to_uppercase())}</dd></div>
                </dl>
                <p class="mt-6 text-xs text-slate-500">"Keep this receipt for your records. Questions? Reply to any Cardpool email."</p>
                <a href="/wallet" class="btn-secondary mt-6">"Back to wallet"</a>
            </article>
        } />
    }
}
