//! The provider's earnings: pending, available, in transit and paid out; Stripe Connect
//! onboarding; payout requests and their history.

use crate::{
    components::{
        form::{Field, FormAlert, SubmitButton, field_error, form_error},
        kit::{Await, AwaitList, Col, DataTable},
        money::{LedgerHistory, Stat, dollars},
        numbers::fixed,
        session::{Audience, RequireSignIn, account_resource, reload_to},
    },
    server_fns::{
        payments::{CreateOnboardingLink, RequestPayout, get_earnings, list_earnings_entries},
        telemetry::provider_energy,
    },
};
use cardpool_domain::{
    AppError,
    account::Viewer,
    payments::{ConnectState, Earnings, LedgerEntry, PayoutStatus},
    telemetry::{DeliveredEnergy, watt_hours},
};
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn EarningsPage() -> impl IntoView {
    let onboarding = ServerAction::<CreateOnboardingLink>::new();
    let payout = ServerAction::<RequestPayout>::new();
    let data = EarningsData {
        earnings: account_resource(Audience::Providers, move || payout.version().get(), |_| get_earnings()),
        entries: account_resource(Audience::Providers, move || payout.version().get(), |_| list_earnings_entries()),
        energy: account_resource(Audience::Providers, || (), |_| provider_energy()),
    };
    view! {
        <Title text="Earnings" />
        <RequireSignIn children=move |me: Viewer| {
            if me.roles.provider {
                view! { <EarningsView onboarding payout data /> }.into_any()
            } else {
                view! {
                    <div class="card mx-auto max-w-lg text-center">
                        <h1 class="text-xl font-semibold text-slate-900">"Earn with your GPUs"</h1>
                        <p class="mt-2 text-slate-600">"Turn on provider features on your account page to host GPUs and get paid."</p>
                        <a href="/account" class="btn-primary mt-6 inline-flex">"Go to your account"</a>
                    </div>
                }.into_any()
            }
        } />
    }
}

/// What the earnings page loads.
#[derive(Clone, Copy)]
struct EarningsData {
    earnings: Resource<Result<Earnings, AppError>>,
    entries: Resource<Result<Vec<LedgerEntry>, AppError>>,
    energy: Resource<Result<Vec<DeliveredEnergy>, AppError>>,
}

#[component]
fn EarningsView(
    onboarding: ServerAction<CreateOnboardingLink>,
    payout: ServerAction<RequestPayout>,
    data: EarningsData,
) -> impl IntoView {
    let EarningsData { earnings, entries, energy } = data;
    Effect::new(move || {
        if let Some(Ok(link)) = onboarding.value().get() {
            reload_to(&link.url);
        }
    });
    view! {
        <div class="space-y-6">
            <div>
                <h1 class="text-2xl font-bold text-slate-900">"Earnings"</h1>
                <p class="mt-1 text-slate-600">"What your hosts earned, after the platform fee, and your payouts through Stripe."</p>
            </div>
            <Await resource=earnings skeleton="h-28" ready=move |e| view! { <Summary earnings=e onboarding payout /> } />
            <section class="card" aria-labelledby="earnings-history">
                <h2 id="earnings-history" class="text-lg font-semibold text-slate-900">"Earnings history"</h2>
                <Await resource=entries class="mt-4" ready=move |entries| view! { <LedgerHistory entries chart_label="Unpaid earnings" empty="Nothing earned yet. List a host and renters will find it." /> } />
            </section>
            <section class="card" aria-labelledby="energy">
                <h2 id="energy" class="text-lg font-semibold text-slate-900">"Energy delivered"</h2>
                <p class="mt-1 text-sm text-slate-600">"What your GPUs drew while running each rental, measured by the agent once a second."</p>
                <AwaitList resource=energy class="mt-4" empty="No rentals have run on your hosts yet." ready=move |rows| view! { <EnergyTable rows /> } />
            </section>
        </div>
    }
}

#[component]
fn EnergyTable(rows: Vec<DeliveredEnergy>) -> impl IntoView {
    let total: i64 = rows.iter().map(|r| r.energy_mj).sum();
    view! {
        <p class="mt-3 text-sm text-slate-700" data-testid="energy-total">{format!("{} kWh over the last {} rentals", fixed(watt_hours(total) / 1000.0, 2), rows.len())}</p>
        <DataTable columns=vec![Col::new("Rental"), Col::new("Host"), Col::new("Energy").right()] class="mt-3">
            {rows.into_iter().map(|r| view! {
                <tr>
                    <td class="py-2 pr-4 tabular-nums">{format!("#{}", r.rental_id)}</td>
                    <td class="py-2 pr-4">{r.hostname}</td>
                    <td class="py-2 text-right tabular-nums">{format!("{} Wh", fixed(watt_hours(r.energy_mj), 1))}</td>
                </tr>
            }).collect_view()}
        </DataTable>
    }
}

#[component]
fn Summary(
    earnings: Earnings,
    onboarding: ServerAction<CreateOnboardingLink>,
    payout: ServerAction<RequestPayout>,
) -> impl IntoView {
    let value = payout.value();
    let ready = earnings.connect == ConnectState::Ready;
    let (connect_badge, connect_text) = match earnings.connect {
        ConnectState::NotStarted => ("bg-slate-100 text-slate-700 ring-slate-200", "not set up"),
        ConnectState::Onboarding => ("bg-amber-50 text-amber-800 ring-amber-200", "onboarding unfinished"),
        ConnectState::Ready => ("bg-emerald-50 text-emerald-700 ring-emerald-200", "payouts enabled"),
    };
    view! {
        <div class="grid gap-4 sm:grid-cols-2 lg:grid-cols-4">
            <Stat label="Available" micros=earnings.available_micros testid="earnings-available" hint="Can be paid out now" />
            <Stat label="Pending" micros=earnings.pending_micros hint=format!("Earned in the last {} h", earnings.hold_hours) />
            <Stat label="In transit" micros=earnings.in_transit_micros hint="Payouts Stripe has not confirmed yet" />
            <Stat label="Paid out" micros=earnings.paid_out_micros testid="earnings-paid-out" hint="Transferred to your Stripe account" />
        </div>
        <div class="grid gap-4 lg:grid-cols-2">
            <section class="card" aria-labelledby="connect">
                <div class="flex items-center justify-between gap-2">
                    <h2 id="connect" class="text-lg font-semibold text-slate-900">"Stripe payouts"</h2>
                    <span class=format!("badge {connect_badge}") data-testid="connect-status">{connect_text}</span>
                </div>
                <p class="mt-2 text-sm text-slate-600">
                    {match earnings.connect {
                        ConnectState::NotStarted => "Cardpool pays providers through Stripe Connect. Setting up takes a few minutes on Stripe's site.".to_owned(),
                        ConnectState::Onboarding => "Stripe still needs some details before it can pay you.".to_owned(),
                        ConnectState::Ready => format!("Payouts go to Stripe account {}.", earnings.stripe_account_id.clone().unwrap_or_default()),
                    }}
                </p>
                {(!ready).then(|| view! {
                    <ActionForm action=onboarding attr:class="mt-4">
                        <SubmitButton label=if earnings.connect == ConnectState::NotStarted { "Set up payouts with Stripe" } else { "Continue Stripe onboarding" } pending=onboarding.pending() />
                    </ActionForm>
                    <div class="mt-4"><FormAlert message=form_error(onboarding.value()) /></div>
                })}
            </section>
            <section class="card" aria-labelledby="request-payout">
                <h2 id="request-payout" class="text-lg font-semibold text-slate-900">"Request a payout"</h2>
                <p class="mt-1 text-sm text-slate-600">{format!("{} available.", dollars(earnings.available_micros))}</p>
                <ActionForm action=payout attr:class="mt-4 space-y-4" attr:novalidate=true>
                    <Field label="Amount (USD)" name="amount" hint="Leave empty to pay out everything available." error=field_error(value, "amount") />
                    <fieldset disabled=!ready>
                        <SubmitButton label="Request payout" pending=payout.pending() />
                    </fieldset>
                </ActionForm>
                <div class="mt-4"><FormAlert message=form_error(value) /></div>
                {move || value.get().and_then(Result::ok).map(|p| view! {
                    <p role="status" class="mt-4 rounded-lg bg-emerald-50 px-4 py-3 text-sm text-emerald-800 ring-1 ring-emerald-200">
                        {match p.status {
                            PayoutStatus::Paid => format!("{} is on its way to your Stripe account.", dollars(p.amount_micros)),
                            PayoutStatus::Pending => format!("{} is booked; Stripe has not confirmed it yet, we keep trying.", dollars(p.amount_micros)),
                            PayoutStatus::Failed => format!("Stripe refused the payout of {}; the money is back in your available earnings.", dollars(p.amount_micros)),
                        }}
                    </p>
                })}
            </section>
        </div>
        <section class="card" aria-labelledby="payouts">
            <h2 id="payouts" class="text-lg font-semibold text-slate-900">"Payouts"</h2>
            {if earnings.payouts.is_empty() {
                view! { <p class="mt-4 text-slate-500">"No payouts yet."</p> }.into_any()
            } else {
                view! {
                    <DataTable columns=vec![Col::new("Date"), Col::new("Amount").right(), Col::new("Status"), Col::new("Stripe transfer").from("md")] class="mt-4">
                        {earnings.payouts.iter().map(|p| {
                            let badge = match p.status {
                                PayoutStatus::Paid => "bg-emerald-50 text-emerald-700 ring-emerald-200",
                                PayoutStatus::Pending => "bg-amber-50 text-amber-800 ring-amber-200",
                                PayoutStatus::Failed => "bg-red-50 text-red-700 ring-red-200",
                            };
                            view! {
                                <tr data-testid="payout-row">
                                    <td class="whitespace-nowrap py-3 pr-4 text-slate-600">{p.created_at.format("%Y-%m-%d %H:%M").to_string()}</td>
                                    <td class="py-3 pr-4 text-right font-medium tabular-nums">{dollars(p.amount_micros)}</td>
                                    <td class="py-3 pr-4">
                                        <span class=format!("badge {badge}")>{p.status.as_str()}</span>
                                        {p.failure_message.clone().filter(|_| p.status == PayoutStatus::Failed).map(|m| view! { <p class="mt-1 text-xs text-red-700">{m}</p> })}
                                    </td>
                                    <td class="hidden py-3 pr-4 font-mono text-xs text-slate-600 md:table-cell">{p.stripe_transfer_id.clone().unwrap_or_else(|| "—".into())}</td>
                                </tr>
                            }
                        }).collect_view()}
                    </DataTable>
                }.into_any()
            }}
        </section>
    }
}
