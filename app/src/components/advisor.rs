//! The cost advisor on the booking page: describe the job, get the mix of reserved, on-demand
//! and spot for this offer with its expected cost, likely range and saving, and why.

use super::{
    form::{FormAlert, INPUT, SubmitButton, field_error, form_error},
    kit::{Badge, Tone},
    money::dollars,
};
use crate::server_fns::advisor::GetAdvice;
use cardpool_domain::{advisor::Advice, offers::RentalKind};
use leptos::prelude::*;

#[component]
pub fn AdvisorPanel(host_id: i64, model: String) -> impl IntoView {
    let advise = ServerAction::<GetAdvice>::new();
    let value = advise.value();
    let field = move |name: &'static str, label: &'static str, default: &'static str| {
        let error = field_error(value, name);
        view! {
            <div class="space-y-1">
                <label for=format!("advice-{name}") class="block text-sm font-medium text-slate-800">{label}</label>
                <input id=format!("advice-{name}") name=format!("form[{name}]") value=default inputmode="numeric" class=INPUT
                    aria-invalid=move || error.get().is_some().to_string() />
                <p class="text-sm text-red-700" class:hidden=move || error.get().is_none()>{move || error.get()}</p>
            </div>
        }
    };
    view! {
        <section class="card space-y-4" aria-labelledby="advisor">
            <div>
                <h2 id="advisor" class="text-lg font-semibold text-slate-900">"Cost advisor"</h2>
                <p class="mt-1 text-sm text-slate-600">"Describe the job: the advisor mixes reserved, on-demand and spot on this offer for the lowest expected cost that still meets your deadline."</p>
            </div>
            <ActionForm action=advise attr:class="space-y-4" attr:novalidate=true>
                <input type="hidden" name="form[host_id]" value=host_id />
                <input type="hidden" name="form[gpu_model]" value=model />
                <div class="grid gap-4 sm:grid-cols-3">
                    {field("gpus", "GPUs", "1")}
                    {field("hours", "Job length (hours)", "10")}
                    {field("deadline_hours", "Done within (hours)", "24")}
                </div>
                <div class="grid gap-4 sm:grid-cols-2 sm:items-end">
                    <label class="flex items-start gap-2 text-sm text-slate-700">
                        <input type="checkbox" name="form[interruptible]" class="mt-1 h-4 w-4 rounded border-slate-300" checked=true />
                        <span>"It can be stopped and resumed"</span>
                    </label>
                    {field("checkpoint_minutes", "Checkpoints every (minutes)", "30")}
                </div>
                <FormAlert message=form_error(value) />
                <SubmitButton label="Advise" pending=advise.pending() />
            </ActionForm>
            {move || value.get().and_then(Result::ok).map(|advice| view! { <Recommendation advice /> })}
        </section>
    }
}

fn kind_name(kind: RentalKind) -> &'static str {
    match kind {
        RentalKind::OnDemand => "On-demand",
        RentalKind::Reserved => "Reserved",
        RentalKind::Spot => "Spot",
    }
}

#[component]
fn Recommendation(advice: Advice) -> impl IntoView {
    let total_hours: u32 = advice.parts.iter().map(|p| p.hours).sum::<u32>().max(1);
    view! {
        <div class="space-y-4 rounded-xl bg-slate-50 p-4 ring-1 ring-slate-200" role="status" data-testid="advice">
            <div class="flex flex-wrap items-baseline justify-between gap-2">
                <p class="text-2xl font-semibold tabular-nums text-slate-900" data-testid="advice-expected">{dollars(advice.expected_micros)}</p>
                <p class="text-sm text-slate-600">{format!("likely {} – {}", dollars(advice.low_micros), dollars(advice.high_micros))}</p>
            </div>
            <p class="text-sm text-slate-700">
                {format!("All on-demand: {}. ", dollars(advice.all_on_demand_micros))}
                <span class="font-semibold text-emerald-700" data-testid="advice-saving">{format!("You save {}", dollars(advice.saving_micros))}</span>
                {format!(", done in about {}.{} h.", advice.expected_wall_hours_tenths / 10, advice.expected_wall_hours_tenths % 10)}
            </p>
            // The mix as one bar: each part's share of the job's hours.
            // An SVG bar: the page's CSP allows no inline styles.
            <svg viewBox=format!("0 0 {total_hours} 1") preserveAspectRatio="none" class="h-3 w-full overflow-hidden rounded-full" aria-hidden="true">
                {advice.parts.iter().scan(0, |x, p| {
                    let color = match p.kind { RentalKind::Spot => "fill-amber-400", RentalKind::Reserved => "fill-indigo-600", RentalKind::OnDemand => "fill-sky-500" };
                    let at = *x;
                    *x += p.hours;
                    Some(view! { <rect x=at width=p.hours height="1" class=color /> })
                }).collect_view()}
            </svg>
            <ul class="space-y-2" data-testid="advice-parts">
                {advice.parts.into_iter().map(|p| view! {
                    <li class="flex flex-wrap items-baseline gap-2 text-sm">
                        <Badge tone=if p.kind == RentalKind::Spot { Tone::Warn } else { Tone::Info }>{kind_name(p.kind)}</Badge>
                        <span class="font-medium text-slate-900">{format!("{} h", p.hours)}</span>
                        <span class="tabular-nums text-slate-700">{dollars(p.expected_micros)}</span>
                        <span class="text-slate-500">{p.why}</span>
                    </li>
                }).collect_view()}
            </ul>
            <details class="text-sm text-slate-600">
                <summary class="cursor-pointer font-medium text-slate-700">"What this is based on"</summary>
                <ul class="mt-2 list-disc space-y-1 pl-5">
                    {advice.basis.into_iter().map(|line| view! { <li>{line}</li> }).collect_view()}
                </ul>
            </details>
        </div>
    }
}
