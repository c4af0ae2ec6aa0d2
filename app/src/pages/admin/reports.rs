//! Admin · Reports: revenue and occupancy per day (30 days), week (12 weeks) or month (12
//! months), as headline figures, bar charts and the table behind them.

use super::admins_only;
use crate::{
    components::{
        bars::{Bar, BarChart},
        kit::{Await, Col, DataTable},
        money::{Stat, dollars},
        session::{Audience, RequireSignIn, account_resource},
    },
    server_fns::admin::admin_report,
};
use cardpool_domain::{
    AppError,
    account::Viewer,
    reports::{Period, Report, ReportBucket, ReportQuery},
};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn AdminReportsPage() -> impl IntoView {
    let params = use_query_map();
    let period =
        Signal::derive(move || params.with(|p| p.get("period").and_then(|p| Period::parse(&p)).unwrap_or_default()));
    let report = account_resource(
        Audience::Admins,
        move || period.get(),
        |period| admin_report(ReportQuery { period: Some(period.as_str().into()), buckets: None }),
    );
    view! {
        <Title text="Reports · Admin" />
        <RequireSignIn children=move |me: Viewer| admins_only(me, || view! { <AdminReports period report /> }) />
    }
}

/// `2.5 %` from basis points.
fn percent(bps: i64) -> String {
    format!("{}.{} %", bps / 100, (bps % 100) / 10)
}

/// Dollars rounded to the cent (half up), for headline figures: `$181.20`.
fn cents(micros: i64) -> i64 {
    let cent = 10_000;
    (micros + cent / 2).div_euclid(cent) * cent
}

/// GPU-hours to a tenth: `12.5 GPU-h`.
fn gpu_hours(seconds: i64) -> String {
    format!("{}.{} GPU-h", seconds / 3600, (seconds % 3600) / 360)
}

fn bucket_label(period: Period, bucket: &ReportBucket) -> String {
    match period {
        Period::Day => bucket.start.format("%b %d").to_string(),
        Period::Week => format!("wk of {}", bucket.start.format("%b %d")),
        Period::Month => bucket.start.format("%b %Y").to_string(),
    }
}

#[component]
fn AdminReports(period: Signal<Period>, report: Resource<Result<Report, AppError>>) -> impl IntoView {
    let period = move || period.get();
    view! {
        <div class="flex flex-wrap items-end justify-between gap-4">
            <div>
                <h1 class="text-2xl font-bold text-slate-900">"Revenue and occupancy"</h1>
                <p class="mt-1 text-slate-600">"Gross is what renters paid for GPU time; fees are the platform's net take after refunds. Occupancy is GPU-time billed over GPU-time on online hosts. Times are UTC."</p>
            </div>
            <nav aria-label="Period" class="flex gap-2">
                {Period::ALL.into_iter().map(|p| {
                    let label = match p { Period::Day => "Days", Period::Week => "Weeks", Period::Month => "Months" };
                    view! {
                        <a href=format!("/admin/reports?period={}", p.as_str())
                            class=move || if period() == p { "btn-primary" } else { "btn-secondary" }
                            aria-current=move || (period() == p).then_some("page")>{label}</a>
                    }
                }).collect_view()}
            </nav>
        </div>
        <Await resource=report skeleton="h-96" class="mt-6" ready=|report| view! { <ReportView report /> } />
    }
}

#[component]
fn ReportView(report: Report) -> impl IntoView {
    let total = report.totals();
    let period = report.period;
    let unit = match period {
        Period::Day => "day",
        Period::Week => "week",
        Period::Month => "month",
    };
    let money: Vec<Bar> = report
        .buckets
        .iter()
        .map(|b| Bar {
            label: bucket_label(period, b),
            value: b.gross_micros,
            part: Some(b.fees_micros.max(0)),
            tooltip: format!(
                "{}: gross {}, fees {}",
                bucket_label(period, b),
                dollars(b.gross_micros),
                dollars(b.fees_micros)
            ),
        })
        .collect();
    let occupancy: Vec<Bar> = report
        .buckets
        .iter()
        .map(|b| Bar {
            label: bucket_label(period, b),
            value: b.occupancy_bps(),
            part: None,
            tooltip: format!("{}: {} occupied", bucket_label(period, b), percent(b.occupancy_bps())),
        })
        .collect();
    view! {
        <div class="mt-6 grid gap-4 sm:grid-cols-2 lg:grid-cols-4">
            <Stat label="Gross" micros=cents(total.gross_micros) testid="report-gross" hint=format!("over {} {unit}s, to the cent", report.buckets.len()) />
            <Stat label="Platform fees (net)" micros=cents(total.fees_micros) testid="report-fees" />
            <Stat label="Refunds" micros=cents(total.refunds_micros) testid="report-refunds" />
            <div class="card">
                <p class="text-sm font-medium text-slate-500">"Occupancy"</p>
                <p class="mt-1 text-3xl font-bold tabular-nums tracking-tight text-slate-900" data-testid="report-occupancy">{percent(total.occupancy_bps())}</p>
                <p class="mt-1 text-xs text-slate-500">{format!("{} billed of {} online", gpu_hours(total.rented_gpu_seconds), gpu_hours(total.online_gpu_seconds))}</p>
            </div>
        </div>
        <div class="mt-6 grid gap-6 lg:grid-cols-2">
            <section class="card" aria-labelledby="revenue-chart">
                <h2 id="revenue-chart" class="text-lg font-semibold text-slate-900">{format!("Revenue per {unit}")}</h2>
                <p class="mt-1 flex gap-4 text-xs text-slate-600">
                    <span class="flex items-center gap-1"><svg viewBox="0 0 10 10" class="h-3 w-3" aria-hidden="true"><rect width="10" height="10" class="fill-indigo-200" /></svg>"Gross"</span>
                    <span class="flex items-center gap-1"><svg viewBox="0 0 10 10" class="h-3 w-3" aria-hidden="true"><rect width="10" height="10" class="fill-indigo-600" /></svg>"Platform fees"</span>
                </p>
                <div class="mt-3"><BarChart bars=money summary=format!("Gross revenue and platform fees per {unit}, {} in all", dollars(total.gross_micros)) testid="revenue-chart" /></div>
            </section>
            <section class="card" aria-labelledby="occupancy-chart">
                <h2 id="occupancy-chart" class="text-lg font-semibold text-slate-900">{format!("Occupancy per {unit}")}</h2>
                <p class="mt-1 text-xs text-slate-600">"Share of online GPU-time that renters were billed for (0–100 %)."</p>
                <div class="mt-3"><BarChart bars=occupancy max=10_000 fill="fill-emerald-500" summary=format!("Occupancy per {unit}, {} overall", percent(total.occupancy_bps())) testid="occupancy-chart" /></div>
            </section>
        </div>
        <details class="card mt-6">
            <summary class="cursor-pointer font-medium text-slate-900">"The numbers"</summary>
            <DataTable columns=vec![Col::new("From"), Col::new("Gross").right(), Col::new("Fees").right(), Col::new("Refunds").right().from("sm"), Col::new("Billed").right().from("md"), Col::new("Online").right().from("md"), Col::new("Occupancy").right()] class="mt-4">
                {report.buckets.iter().rev().map(|b| view! {
                    <tr data-testid="report-row">
                        <td class="whitespace-nowrap py-2 pr-4 text-slate-700">{bucket_label(period, b)}</td>
                        <td class="py-2 pr-4 text-right tabular-nums">{dollars(b.gross_micros)}</td>
                        <td class="py-2 pr-4 text-right tabular-nums">{dollars(b.fees_micros)}</td>
                        <td class="hidden py-2 pr-4 text-right tabular-nums sm:table-cell">{dollars(b.refunds_micros)}</td>
                        <td class="hidden py-2 pr-4 text-right tabular-nums md:table-cell">{gpu_hours(b.rented_gpu_seconds)}</td>
                        <td class="hidden py-2 pr-4 text-right tabular-nums md:table-cell">{gpu_hours(b.online_gpu_seconds)}</td>
                        <td class="py-2 pr-4 text-right tabular-nums">{percent(b.occupancy_bps())}</td>
                    </tr>
                }).collect_view()}
            </DataTable>
        </details>
    }
}
