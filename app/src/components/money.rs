//! Showing money: signed dollar amounts, headline figures, and a balance-over-time chart.

use super::numbers::fixed;
use cardpool_domain::{money::format_dollars, payments::LedgerEntry};
use leptos::prelude::*;

/// `$25.00`, `-$4.10`.
pub fn dollars(micros: i64) -> String {
    if micros < 0 { format!("-${}", format_dollars(-micros)) } else { format!("${}", format_dollars(micros)) }
}

/// A signed amount, green when money comes in.
#[component]
pub fn Amount(micros: i64) -> impl IntoView {
    let (class, text) = if micros > 0 {
        ("text-emerald-700", format!("+{}", dollars(micros)))
    } else {
        ("text-slate-900", dollars(micros))
    };
    view! { <span class=format!("font-medium tabular-nums {class}")>{text}</span> }
}

/// A labelled headline figure.
#[component]
pub fn Stat(
    label: &'static str,
    micros: i64,
    #[prop(optional, into)] hint: Option<String>,
    #[prop(optional)] testid: &'static str,
) -> impl IntoView {
    view! {
        <div class="card">
            <p class="text-sm font-medium text-slate-500">{label}</p>
            <p class="mt-1 text-3xl font-bold tabular-nums tracking-tight text-slate-900" data-testid=testid>{dollars(micros)}</p>
            {hint.map(|h| view! { <p class="mt-1 text-xs text-slate-500">{h}</p> })}
        </div>
    }
}

/// The balance after each entry, over time, as an SVG area chart (oldest entry first).
#[component]
pub fn BalanceChart(entries: Vec<LedgerEntry>, #[prop(into)] label: String) -> impl IntoView {
    let points = entries.iter().map(|e| (e.created_at, e.balance_after_micros)).collect();
    view! { <StepChart points label date_format="%b %d" /> }
}

/// An amount over time as a step line (it holds until the next point), with an accessible
/// summary. Used for balances and spot prices.
#[component]
pub fn StepChart(
    points: Vec<(chrono::DateTime<chrono::Utc>, i64)>,
    #[prop(into)] label: String,
    #[prop(default = "%b %d")] date_format: &'static str,
) -> impl IntoView {
    if points.len() < 2 {
        return view! { <p class="text-sm text-slate-500">"The chart appears once there are two or more points."</p> }
            .into_any();
    }
    const W: f64 = 600.0;
    const H: f64 = 160.0;
    let t0 = points.first().map_or(0, |p| p.0.timestamp()) as f64;
    let t1 = points.last().map_or(0, |p| p.0.timestamp()) as f64;
    let span = (t1 - t0).max(1.0);
    let max = points.iter().map(|p| p.1).max().unwrap_or(0).max(1) as f64;
    let point = |p: &(chrono::DateTime<chrono::Utc>, i64)| {
        let x = (p.0.timestamp() as f64 - t0) / span * W;
        let y = H - (p.1.max(0) as f64 / max) * (H - 10.0);
        (x, y)
    };
    let mut path = String::new();
    let mut last_y = H;
    for (i, p) in points.iter().enumerate() {
        let (x, y) = point(p);
        if i == 0 {
            path.push_str(&format!("M{},{}", fixed(x, 1), fixed(y, 1)));
        } else {
            path.push_str(&format!(
                " L{x},{last_y} L{x},{y}",
                x = fixed(x, 1),
                last_y = fixed(last_y, 1),
                y = fixed(y, 1)
            ));
        }
        last_y = y;
    }
    let (w, h, last_y) = (fixed(W, 1), fixed(H, 1), fixed(last_y, 1));
    let area = format!("{path} L{w},{last_y} L{w},{h} L0,{h} Z");
    let line = format!("{path} L{w},{last_y}");
    let first = points.first().map_or(0, |p| p.1);
    let now = points.last().map_or(0, |p| p.1);
    let aria = format!("{label}: from {} to {} over {} points", dollars(first), dollars(now), points.len());
    let start_label = points.first().map(|p| p.0.format(date_format).to_string()).unwrap_or_default();
    let end_label = points.last().map(|p| p.0.format(date_format).to_string()).unwrap_or_default();
    view! {
        <figure>
            <svg viewBox=format!("0 0 {W} {H}") preserveAspectRatio="none" class="h-40 w-full" role="img" aria-label=aria>
                <path d=area class="fill-indigo-100" />
                <path d=line class="fill-none stroke-indigo-600" stroke-width="2" vector-effect="non-scaling-stroke" />
            </svg>
            <figcaption class="mt-1 flex justify-between text-xs text-slate-500">
                <span>{start_label}</span>
                <span>{format!("peak {}", dollars(max as i64))}</span>
                <span>{end_label}</span>
            </figcaption>
        </figure>
    }
    .into_any()
}

/// A ledger history (newest first): the balance chart above the table, or `empty` if none.
#[component]
pub fn LedgerHistory(
    entries: Vec<LedgerEntry>,
    chart_label: &'static str,
    empty: &'static str,
    #[prop(optional)] receipts: bool,
) -> impl IntoView {
    if entries.is_empty() {
        return view! { <p class="mt-4 text-slate-500">{empty}</p> }.into_any();
    }
    let mut oldest_first = entries.clone();
    oldest_first.reverse();
    view! {
        <div class="mt-4"><BalanceChart entries=oldest_first label=chart_label /></div>
        <div class="mt-6"><LedgerTable entries receipts /></div>
    }
    .into_any()
}

/// History table: date, description, amount, balance after, and a receipt link when asked.
#[component]
pub fn LedgerTable(entries: Vec<LedgerEntry>, #[prop(optional)] receipts: bool) -> impl IntoView {
    view! {
        <div class="overflow-x-auto">
            <table class="min-w-full divide-y divide-slate-200 text-sm">
                <thead>
                    <tr class="text-left text-slate-500">
                        <th scope="col" class="py-2 pr-4 font-medium">"Date"</th>
                        <th scope="col" class="py-2 pr-4 font-medium">"Description"</th>
                        <th scope="col" class="py-2 pr-4 text-right font-medium">"Amount"</th>
                        <th scope="col" class="hidden py-2 pr-4 text-right font-medium sm:table-cell">"Balance"</th>
                        {receipts.then(|| view! { <th scope="col" class="py-2 font-medium"><span class="sr-only">"Receipt"</span></th> })}
                    </tr>
                </thead>
                <tbody class="divide-y divide-slate-100">
                    {entries.into_iter().map(|e| view! {
                        <tr data-testid="ledger-row">
                            <td class="whitespace-nowrap py-3 pr-4 text-slate-600">{e.created_at.format("%Y-%m-%d %H:%M").to_string()}</td>
                            <td class="py-3 pr-4 text-slate-800">
                                {e.description.clone()}
                                <span class="ml-2 badge bg-slate-50 text-slate-600 ring-slate-200">{e.kind.replace('_', " ")}</span>
                            </td>
                            <td class="whitespace-nowrap py-3 pr-4 text-right"><Amount micros=e.amount_micros /></td>
                            <td class="hidden whitespace-nowrap py-3 pr-4 text-right tabular-nums text-slate-600 sm:table-cell">{dollars(e.balance_after_micros)}</td>
                            {receipts.then(|| view! {
                                <td class="py-3 text-right"><a class="text-indigo-700 hover:underline" href=format!("/wallet/receipts/{}", e.transaction_id)>"Receipt"</a></td>
                            })}
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </div>
    }
}
