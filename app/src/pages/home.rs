//! The landing page: what Cardpool is and who it is for.

use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn HomePage() -> impl IntoView {
    view! {
        <Title text="" />
        <section class="grid items-center gap-10 py-6 lg:grid-cols-2 lg:py-12">
            <div>
                <p class="text-sm font-semibold uppercase tracking-wider text-indigo-600">"Open GPU marketplace"</p>
                <h1 class="mt-3 text-4xl font-bold tracking-tight text-slate-900 sm:text-5xl">
                    "Rent GPUs by the second. Earn from the ones you own."
                </h1>
                <p class="mt-5 max-w-xl text-lg text-slate-600">
                    "Cardpool connects people who need accelerators with hosts who have them. Book on-demand, "
                    "reserve capacity ahead, or bid for spot time; watch your GPUs live and pay only for the seconds you use."
                </p>
                <div class="mt-8 flex flex-wrap gap-3">
                    <a href="/sign-up" class="btn-primary px-5 py-3 text-base">"Create a free account"</a>
                    <a href="/sign-in" class="btn-secondary px-5 py-3 text-base">"Sign in"</a>
                </div>
            </div>
            <div class="rounded-2xl bg-slate-900 p-6 text-slate-100 shadow-xl" aria-label="Example offers">
                <p class="text-sm text-slate-400">"What the market looks like"</p>
                <ul class="mt-4 divide-y divide-slate-800">
                    <OfferLine model="8× H100 80GB" place="Frankfurt" price="$2.49" />
                    <OfferLine model="4× A100 80GB" place="Oregon" price="$1.29" />
                    <OfferLine model="2× RTX 4090" place="Warsaw" price="$0.39" />
                    <OfferLine model="1× L40S" place="Singapore" price="$0.79" />
                </ul>
                <p class="mt-4 text-xs text-slate-400">"Illustrative prices per GPU-hour."</p>
            </div>
        </section>

        <section aria-labelledby="who" class="py-10">
            <h2 id="who" class="text-2xl font-semibold text-slate-900">"One marketplace, three roles"</h2>
            <div class="mt-6 grid gap-6 md:grid-cols-3">
                <RoleCard title="Renters" body="Search offers by GPU model, VRAM, price and location. Book on-demand, reserved or spot capacity and pay per second from a prepaid wallet." />
                <RoleCard title="Providers" body="Run one agent on your host: it reports your GPUs, attaches them to renters' workloads and streams telemetry. You set the prices and get paid out." />
                <RoleCard title="Operators" body="Watch the whole fleet live, verify hosts, handle refunds and see revenue, occupancy and alerts at a glance." />
            </div>
        </section>

        <section aria-labelledby="how" class="py-10">
            <h2 id="how" class="text-2xl font-semibold text-slate-900">"How it works"</h2>
            <ol class="mt-6 grid gap-4 sm:grid-cols-2 lg:grid-cols-4">
                <Step n=1 text="Create an account: every account can rent." />
                <Step n=2 text="Providers enroll hosts with a single agent command." />
                <Step n=3 text="Renters book GPUs; the agent gives them only those GPUs." />
                <Step n=4 text="Billing runs per second through an exact double-entry ledger." />
            </ol>
        </section>
    }
}

#[component]
fn OfferLine(model: &'static str, place: &'static str, price: &'static str) -> impl IntoView {
    view! {
        <li class="flex items-center justify-between py-3">
            <div>
                <p class="font-medium">{model}</p>
                <p class="text-sm text-slate-400">{place}</p>
            </div>
            <p class="font-mono text-emerald-400">{price}<span class="text-xs text-slate-400">"/GPU-h"</span></p>
        </li>
    }
}

#[component]
fn RoleCard(title: &'static str, body: &'static str) -> impl IntoView {
    view! {
        <div class="card">
            <h3 class="text-lg font-semibold text-slate-900">{title}</h3>
            <p class="mt-2 text-slate-600">{body}</p>
        </div>
    }
}

#[component]
fn Step(n: u8, text: &'static str) -> impl IntoView {
    view! {
        <li class="card flex gap-3">
            <span class="flex h-8 w-8 shrink-0 items-center justify-center rounded-full bg-indigo-600 font-semibold text-white">{n}</span>
            <span class="text-slate-700">{text}</span>
        </li>
    }
}
