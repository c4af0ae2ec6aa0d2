//! A bar chart of figures over time buckets (revenue per day, occupancy per week), as SVG
//! attributes only: the page's CSP allows no inline styles. Each bar carries its figure as a
//! tooltip, and the chart an accessible summary.

use leptos::prelude::*;

/// One bar: its bucket's label, its height, an optional part of it drawn darker (fees within
/// gross), and the tooltip.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub value: i64,
    pub part: Option<i64>,
    pub tooltip: String,
}

/// Bars scaled to `max` (the tallest bar when `None`), labelled under the first, middle and
/// last bucket.
#[component]
pub fn BarChart(
    bars: Vec<Bar>,
    /// What the chart shows, for screen readers, e.g. "Gross revenue per day".
    #[prop(into)]
    summary: String,
    #[prop(optional)] max: Option<i64>,
    #[prop(default = "fill-indigo-200")] fill: &'static str,
    #[prop(default = "fill-indigo-600")] part_fill: &'static str,
    #[prop(optional)] testid: &'static str,
) -> impl IntoView {
    const W: i64 = 600;
    const H: i64 = 160;
    let n = bars.len().max(1) as i64;
    let top = max.unwrap_or_else(|| bars.iter().map(|b| b.value).max().unwrap_or(0)).max(1);
    let count = bars.len();
    let slot = W / n;
    let gap = (slot / 5).clamp(1, 8);
    let height = |v: i64| (i128::from(v.clamp(0, top)) * i128::from(H - 4) / i128::from(top)) as i64;
    let labels = {
        let pick = |i: usize| bars.get(i).map(|b| b.label.clone()).unwrap_or_default();
        let last = bars.len().saturating_sub(1);
        (pick(0), if bars.len() > 2 { pick(last / 2) } else { String::new() }, pick(last))
    };
    view! {
        <figure data-testid=testid>
            <svg viewBox=format!("0 0 {W} {H}") preserveAspectRatio="none" class="h-40 w-full" role="img" aria-label=summary data-bars=count>
                <line x1="0" y1=H - 1 x2=W y2=H - 1 class="stroke-slate-200" stroke-width="1" vector-effect="non-scaling-stroke" />
                {bars.into_iter().enumerate().map(|(i, bar)| {
                    let x = i as i64 * slot + gap / 2;
                    let h = height(bar.value);
                    let part = bar.part.map(height).unwrap_or(0).min(h);
                    view! {
                        <g>
                            <title>{bar.tooltip}</title>
                            <rect x=x y=H - h width=slot - gap height=h class=fill />
                            {(part > 0).then(|| view! { <rect x=x y=H - part width=slot - gap height=part class=part_fill /> })}
                        </g>
                    }
                }).collect_view()}
            </svg>
            <figcaption class="mt-1 flex justify-between text-xs text-slate-500">
                <span>{labels.0}</span>
                <span>{labels.1}</span>
                <span>{labels.2}</span>
            </figcaption>
        </figure>
    }
}
