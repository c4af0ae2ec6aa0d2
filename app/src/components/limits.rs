//! Spend limits on screen: the wallet's daily and monthly limits with how much of each is
//! spent (a bar that turns amber at 80 %), and a live rental's own caps.

use super::{
    form::{Field, FormAlert, SubmitButton, field_error, form_error},
    kit::Await,
    money::dollars,
    session::{Audience, account_resource},
};
use crate::server_fns::notifications::{SetLimits, SetRentalLimits, get_limits};
use cardpool_domain::{
    AppError,
    limits::{RentalLimits, SpendStatus, WARN_AT_PERCENT},
    money::format_dollars,
};
use chrono::{DateTime, Utc};
use leptos::prelude::*;

/// A limit's use: "spent of limit", a bar, and when it resets.
#[component]
fn Usage(
    label: &'static str,
    spent: i64,
    limit: Option<i64>,
    resets: DateTime<Utc>,
    testid: &'static str,
) -> impl IntoView {
    let percent = limit.map(|l| (i128::from(spent) * 100 / i128::from(l.max(1))).clamp(0, 100) as i64);
    let bar = match percent {
        Some(p) if p >= 100 => "fill-red-500",
        Some(p) if p >= WARN_AT_PERCENT => "fill-amber-500",
        _ => "fill-indigo-500",
    };
    view! {
        <div class="space-y-1" data-testid=testid>
            <div class="flex items-baseline justify-between gap-2 text-sm">
                <span class="font-medium text-slate-800">{label}</span>
                <span class="tabular-nums text-slate-700">
                    {match limit {
                        Some(l) => format!("{} of {}", dollars(spent), dollars(l)),
                        None => format!("{} (no limit)", dollars(spent)),
                    }}
                </span>
            </div>
            // An SVG bar: the page's CSP allows no inline styles.
            {percent.map(|p| view! {
                <svg viewBox="0 0 100 2" preserveAspectRatio="none" class="h-2 w-full overflow-hidden rounded-full" role="progressbar" aria-label=label aria-valuemin="0" aria-valuemax="100" aria-valuenow=p>
                    <rect width="100" height="2" class="fill-slate-100" />
                    <rect width=p height="2" class=bar />
                </svg>
            })}
            <p class="text-xs text-slate-500">{format!("Resets {} UTC", resets.format("%Y-%m-%d %H:%M"))}</p>
        </div>
    }
}

/// What the wallet's limits panel loads and sends, made where the page starts (see
/// `session`'s module doc).
#[derive(Clone, Copy)]
pub struct SpendLimits {
    set: ServerAction<SetLimits>,
    status: Resource<Result<SpendStatus, AppError>>,
}

impl SpendLimits {
    pub fn load() -> Self {
        let set = ServerAction::<SetLimits>::new();
        let status = account_resource(Audience::Accounts, move || set.version().get(), |_| get_limits());
        Self { set, status }
    }
}

/// The wallet page's limits: use so far and the form that sets them.
#[component]
pub fn SpendLimitsPanel(limits: SpendLimits) -> impl IntoView {
    let SpendLimits { set, status } = limits;
    let value = set.value();
    let current = |micros: Option<i64>| micros.map(format_dollars).unwrap_or_default();
    view! {
        <section class="card" aria-labelledby="limits">
            <h2 id="limits" class="text-lg font-semibold text-slate-900">"Spend limits"</h2>
            <p class="mt-1 text-sm text-slate-600">
                "The most your rentals may cost per UTC day and month. You are told at 80 %; at the limit your on-demand and spot rentals are stopped, billed exactly up to it, and new ones are refused until it resets."
            </p>
            <Await resource=status skeleton="h-40" class="mt-4" ready=move |s| view! {
                <div class="mt-4 grid gap-4 sm:grid-cols-2">
                    <Usage label="Today" spent=s.spent_today_micros limit=s.limits.daily_limit_micros resets=s.day_resets_at testid="spend-today" />
                    <Usage label="This month" spent=s.spent_this_month_micros limit=s.limits.monthly_limit_micros resets=s.month_resets_at testid="spend-month" />
                </div>
                <ActionForm action=set attr:class="mt-4 flex flex-col gap-4 sm:flex-row sm:items-start" attr:novalidate=true>
                    <div class="flex-1">
                        <Field label="Daily limit ($)" name="daily" value=current(s.limits.daily_limit_micros) hint="Blank for none." error=field_error(value, "daily") />
                    </div>
                    <div class="flex-1">
                        <Field label="Monthly limit ($)" name="monthly" value=current(s.limits.monthly_limit_micros) hint="Blank for none." error=field_error(value, "monthly") />
                    </div>
                    <div class="sm:mt-6 sm:w-44">
                        <SubmitButton label="Save limits" pending=set.pending() />
                    </div>
                </ActionForm>
            } />
            <div class="mt-4"><FormAlert message=form_error(value) /></div>
            {move || value.get().and_then(Result::ok).map(|_| view! { <p role="status" class="mt-2 text-sm text-emerald-700" data-testid="limits-saved">"Limits saved."</p> })}
        </section>
    }
}

/// A live pay-as-you-go rental's caps, changeable.
#[component]
pub fn CapsForm(id: i64, limits: RentalLimits, tick: RwSignal<u32>) -> impl IntoView {
    let set = ServerAction::<SetRentalLimits>::new();
    let value = set.value();
    Effect::new(move || {
        if let Some(Ok(_)) = value.get() {
            tick.update(|t| *t += 1);
        }
    });
    let hours = limits.max_duration_secs.map(|s| format_dollars(s * 1_000_000 / 3600)).unwrap_or_default();
    let hours = hours.trim_end_matches('0').trim_end_matches('.').to_owned();
    view! {
        <ActionForm action=set attr:class="space-y-2" attr:novalidate=true>
            <input type="hidden" name="id" value=id />
            <p class="text-sm font-medium text-slate-800">"Caps"</p>
            <Field label="Stop at a cost of ($)" name="max_cost" id_suffix="cap" value=limits.max_cost_micros.map(format_dollars).unwrap_or_default() hint="Blank for none." error=field_error(value, "max_cost") />
            <Field label="Stop after (hours)" name="max_hours" id_suffix="cap" value=hours error=field_error(value, "max_hours") />
            <SubmitButton label="Save caps" pending=set.pending() />
            <FormAlert message=form_error(value) />
        </ActionForm>
    }
}
