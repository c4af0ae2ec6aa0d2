//! The UI kit: the few shapes every page repeats, written once so pages say only what is theirs.
//!
//! - [`Await`]: a resource's value once loaded, a placeholder meanwhile, an [`ErrorAlert`] if
//!   it failed; [`AwaitList`] also says when a list is empty.
//! - [`DataTable`] with [`Col`]: a responsive table (columns can hide below a breakpoint).
//! - [`Badge`] with a [`Tone`]: the little status pills.
//! - [`ErrorAlert`]: an error, announced to screen readers.
//! - [`in_browser`]: a browser-only resource's value, which the server never reads.
//! - [`poll`]: counts a page's reload signal up on a timer in the browser, while it matters.
//! - [`Timeline`]: steps with their reasons and times, oldest first.

use cardpool_domain::AppError;
use leptos::prelude::*;
use serde::{Serialize, de::DeserializeOwned};

/// What a status means to the eye.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Good,
    Warn,
    Bad,
    Info,
    Neutral,
}

impl Tone {
    /// The badge classes of this tone.
    pub fn class(self) -> &'static str {
        match self {
            Tone::Good => "badge bg-emerald-50 text-emerald-700 ring-emerald-200",
            Tone::Warn => "badge bg-amber-50 text-amber-800 ring-amber-200",
            Tone::Bad => "badge bg-red-50 text-red-700 ring-red-200",
            Tone::Info => "badge bg-indigo-50 text-indigo-700 ring-indigo-200",
            Tone::Neutral => "badge bg-slate-50 text-slate-700 ring-slate-200",
        }
    }
}

/// A status pill.
#[component]
pub fn Badge(
    tone: Tone,
    /// `data-testid`, for the browser tests.
    #[prop(optional)]
    testid: Option<&'static str>,
    children: Children,
) -> impl IntoView {
    view! { <span class=tone.class() data-testid=testid>{children()}</span> }
}

/// An error message, announced (`role="alert"`). `class` adds spacing.
#[component]
pub fn ErrorAlert(#[prop(into)] message: String, #[prop(optional)] class: &'static str) -> impl IntoView {
    view! { <p role="alert" class=format!("text-red-700 {class}")>{message}</p> }
}

/// Shows what `resource` loads: `ready(value)` once it is there, an [`ErrorAlert`] if it
/// failed, and meanwhile `loading` (a line of text, "Loading…" by default) or, with
/// `skeleton` (its size classes, e.g. `"h-28"`), a pulsing block. `class` spaces the loading
/// line and the alert. `ready` may run more than once on the server, so it makes no resource
/// (see `session`'s module doc).
#[component]
pub fn Await<T, V, F>(
    resource: Resource<Result<T, AppError>>,
    ready: F,
    #[prop(optional)] loading: Option<&'static str>,
    #[prop(optional)] skeleton: Option<&'static str>,
    #[prop(optional)] class: &'static str,
) -> impl IntoView
where
    T: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    F: Fn(T) -> V + Clone + Send + Sync + 'static,
    V: IntoView + 'static,
{
    awaiting(resource, ready, Placeholder { loading, skeleton, class })
}

/// [`Await`] for a list: `empty` (a line of text) instead of `ready` when it has nothing.
#[component]
pub fn AwaitList<T, V, F>(
    resource: Resource<Result<Vec<T>, AppError>>,
    empty: &'static str,
    ready: F,
    #[prop(optional)] loading: Option<&'static str>,
    #[prop(optional)] skeleton: Option<&'static str>,
    #[prop(optional)] class: &'static str,
) -> impl IntoView
where
    T: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    F: Fn(Vec<T>) -> V + Clone + Send + Sync + 'static,
    V: IntoView + 'static,
{
    let ready = move |list: Vec<T>| {
        if list.is_empty() {
            view! { <p class=format!("text-slate-500 {class}")>{empty}</p> }.into_any()
        } else {
            ready(list).into_any()
        }
    };
    awaiting(resource, ready, Placeholder { loading, skeleton, class })
}

/// What shows while a resource loads.
#[derive(Clone, Copy)]
struct Placeholder {
    loading: Option<&'static str>,
    skeleton: Option<&'static str>,
    class: &'static str,
}

fn awaiting<T, V, F>(resource: Resource<Result<T, AppError>>, ready: F, placeholder: Placeholder) -> impl IntoView
where
    T: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    F: Fn(T) -> V + Clone + Send + Sync + 'static,
    V: IntoView + 'static,
{
    let Placeholder { loading, skeleton, class } = placeholder;
    let fallback = move || match skeleton {
        Some(size) => {
            view! { <div class=format!("{size} animate-pulse rounded-2xl bg-slate-100 {class}")></div> }.into_any()
        }
        None => view! { <p class=format!("text-slate-500 {class}")>{loading.unwrap_or("Loading…")}</p> }.into_any(),
    };
    view! {
        <Transition fallback>
            {move || {
                let ready = ready.clone();
                Suspend::new(async move {
                    match resource.await {
                        Ok(value) => ready(value).into_any(),
                        Err(err) => view! { <ErrorAlert message=err.to_string() class /> }.into_any(),
                    }
                })
            }}
        </Transition>
    }
}

/// A column of a [`DataTable`].
#[derive(Debug, Clone, Copy)]
pub struct Col {
    label: &'static str,
    right: bool,
    /// Shown only from this breakpoint up (`"sm"`, `"md"`).
    from: Option<&'static str>,
    /// The heading is for screen readers only (an actions column).
    hidden_label: bool,
}

impl Col {
    pub const fn new(label: &'static str) -> Self {
        Col { label, right: false, from: None, hidden_label: false }
    }

    /// A column of numbers, right-aligned.
    pub const fn right(self) -> Self {
        Col { right: true, ..self }
    }

    /// Hidden on small screens, shown from `breakpoint` (`"sm"`, `"md"`) up.
    pub const fn from(self, breakpoint: &'static str) -> Self {
        Col { from: Some(breakpoint), ..self }
    }

    /// A column of buttons whose heading only screen readers read.
    pub const fn actions(label: &'static str) -> Self {
        Col { label, right: false, from: None, hidden_label: true }
    }

    fn class(&self) -> String {
        let mut class = String::from("py-2 pr-4 font-medium");
        if self.right {
            class.push_str(" text-right");
        }
        if let Some(bp) = self.from {
            class = format!("hidden {class} {bp}:table-cell");
        }
        class
    }
}

/// A table that scrolls sideways on small screens: headings from `columns`, rows as children
/// (their cells use the same breakpoints as their columns).
#[component]
pub fn DataTable(columns: Vec<Col>, #[prop(optional)] class: &'static str, children: Children) -> impl IntoView {
    view! {
        <div class=format!("overflow-x-auto {class}")>
            <table class="min-w-full divide-y divide-slate-200 text-sm">
                <thead>
                    <tr class="text-left text-slate-500">
                        {columns.into_iter().map(|col| {
                            let label = if col.hidden_label {
                                view! { <span class="sr-only">{col.label}</span> }.into_any()
                            } else {
                                col.label.into_any()
                            };
                            view! { <th scope="col" class=col.class()>{label}</th> }
                        }).collect_view()}
                    </tr>
                </thead>
                <tbody class="divide-y divide-slate-100">{children()}</tbody>
            </table>
        </div>
    }
}

/// A browser-only resource's value: always `None` while the server renders, so the page shows
/// its placeholder and hydration starts from the same; the resource's value in the browser.
///
/// Not just `resource.get()`: on the server, reading a `LocalResource` inside a `Suspense`
/// makes Leptos give up on that whole boundary when the read wins the race against the
/// boundary's own data. It sends the fallback for the browser to render ("incomplete chunk"),
/// and hydrating that panicked in tachys. The symptom was a blank page: the rental page in
/// Playwright, about one full run in five under load.
pub fn in_browser<T: Clone + 'static>(resource: LocalResource<T>) -> Option<T> {
    if cfg!(feature = "ssr") { None } else { resource.get() }
}

/// Counts `tick` up every `every` in the browser while `wanted()` (say, while what the page
/// shows can still change), so resources keyed on `tick` reload; nothing on the server. A
/// reload rebuilds what the resource shows, forms included, so it waits while the person is in
/// a field (typing a price, a layout) and comes on the first tick after. The timer ends with
/// the component.
pub fn poll(tick: RwSignal<u32>, every: std::time::Duration, wanted: impl Fn() -> bool + 'static) {
    #[cfg(feature = "hydrate")]
    {
        let handle = set_interval_with_handle(
            move || {
                if wanted() && !editing() {
                    tick.update(|t| *t += 1);
                }
            },
            every,
        );
        if let Ok(handle) = handle {
            on_cleanup(move || handle.clear());
        }
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (tick, every, wanted);
}

/// Whether the page's focus is in a field someone may be typing in.
#[cfg(feature = "hydrate")]
fn editing() -> bool {
    web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.active_element())
        .is_some_and(|e| matches!(e.tag_name().as_str(), "INPUT" | "SELECT" | "TEXTAREA"))
}

/// One step on a [`Timeline`].
#[derive(Debug, Clone)]
pub struct Step {
    pub title: String,
    pub reason: String,
    pub at: chrono::DateTime<chrono::Utc>,
}

/// Steps with their reasons and times, oldest first, on a line.
#[component]
pub fn Timeline(steps: Vec<Step>, testid: &'static str) -> impl IntoView {
    view! {
        <ol class="mt-4 space-y-3 border-l-2 border-slate-200 pl-4" data-testid=testid>
            {steps.into_iter().map(|e| view! {
                <li class="relative">
                    <span class="absolute -left-[1.4rem] top-1.5 h-2.5 w-2.5 rounded-full bg-indigo-500" aria-hidden="true"></span>
                    <p class="text-sm font-medium text-slate-900">{e.title}</p>
                    <p class="text-sm text-slate-600">{e.reason}</p>
                    <p class="text-xs text-slate-400"><time datetime=e.at.to_rfc3339()>{e.at.format("%Y-%m-%d %H:%M:%S UTC").to_string()}</time></p>
                </li>
            }).collect_view()}
        </ol>
    }
}
