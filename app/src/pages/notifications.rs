//! `/notifications`: what Cardpool told the account (rental changes, preemption notices, low
//! balance, limits, hosts offline, payouts), newest first, and where to manage the webhooks
//! that receive the same events.

use crate::{
    components::{
        kit::{Await, Badge, Tone},
        session::{Audience, RequireSignIn, account_resource, reload_to},
    },
    server_fns::notifications::{MarkNotificationsRead, list_notifications},
};
use cardpool_domain::{
    AppError,
    account::Viewer,
    notifications::{EventKind, Notification, NotificationPage},
};
use leptos::prelude::*;
use leptos_meta::Title;

#[component]
pub fn NotificationsPage() -> impl IntoView {
    // Older pages are appended as the renter asks for them.
    let before = RwSignal::new(None::<i64>);
    let page = account_resource(Audience::Accounts, move || before.get(), list_notifications);
    view! {
        <Title text="Notifications" />
        <RequireSignIn children=move |_me: Viewer| view! { <Notifications before page /> } />
    }
}

fn tone(event: EventKind) -> (Tone, &'static str) {
    match event {
        EventKind::RentalStateChanged => (Tone::Info, "rental"),
        EventKind::PreemptionNotice => (Tone::Warn, "preemption"),
        EventKind::LowBalance => (Tone::Warn, "balance"),
        EventKind::LimitWarning => (Tone::Warn, "limit"),
        EventKind::LimitReached => (Tone::Bad, "limit reached"),
        EventKind::HostOffline => (Tone::Bad, "host offline"),
        EventKind::PayoutPaid => (Tone::Good, "payout"),
        EventKind::Test => (Tone::Neutral, "test"),
    }
}

#[component]
fn Notifications(before: RwSignal<Option<i64>>, page: Resource<Result<NotificationPage, AppError>>) -> impl IntoView {
    let mark = ServerAction::<MarkNotificationsRead>::new();
    Effect::new(move || {
        if let Some(Ok(_)) = mark.value().get() {
            // The bell's count is read with the page: load it afresh.
            reload_to("/notifications");
        }
    });
    view! {
        <div class="space-y-6">
            <div>
                <h1 class="text-2xl font-bold text-slate-900">"Notifications"</h1>
                <p class="mt-1 text-slate-600">
                    "Rental changes, preemption notices, low balance and spend limits. "
                    <a class="text-indigo-700 underline" href="/account/webhooks">"Webhooks"</a>
                    " receive the same events, signed."
                </p>
            </div>
            <section class="card" aria-label="Notifications">
                <Await resource=page loading="Loading notifications…" ready=move |p| {
                    let newest = p.items.first().map(|n| n.id);
                    view! {
                        <div class="flex flex-wrap items-center justify-between gap-3">
                            <p class="text-sm text-slate-600" data-testid="unread">{format!("{} unread", p.unread)}</p>
                            {newest.filter(|_| p.unread > 0).map(|newest| view! {
                                <ActionForm action=mark>
                                    <input type="hidden" name="up_to" value=newest />
                                    <button type="submit" class="btn-secondary" data-testid="mark-read">"Mark all read"</button>
                                </ActionForm>
                            })}
                        </div>
                        {if p.items.is_empty() {
                            view! { <p class="mt-4 text-slate-500">"Nothing yet: the events of your rentals appear here."</p> }.into_any()
                        } else {
                            view! {
                                <ul class="mt-2 divide-y divide-slate-100" data-testid="notifications">
                                    {p.items.into_iter().map(|n| view! { <Item n /> }).collect_view()}
                                </ul>
                            }.into_any()
                        }}
                        <div class="mt-4 flex gap-2">
                            {before.get_untracked().is_some().then(|| view! {
                                <button type="button" class="btn-secondary" on:click=move |_| before.set(None)>"Newest"</button>
                            })}
                            {p.next_before.map(|next| view! {
                                <button type="button" class="btn-secondary" on:click=move |_| before.set(Some(next))>"Older"</button>
                            })}
                        </div>
                    }
                } />
            </section>
        </div>
    }
}

#[component]
fn Item(n: Notification) -> impl IntoView {
    let (tone, label) = tone(n.event);
    let weight = if n.read { "text-slate-700" } else { "font-semibold text-slate-900" };
    view! {
        <li class="flex flex-col gap-1 py-3 sm:flex-row sm:items-start sm:gap-4" data-testid="notification" data-read=n.read.to_string()>
            <div class="flex shrink-0 items-center gap-2 sm:w-40">
                {(!n.read).then(|| view! { <span class="h-2 w-2 rounded-full bg-rose-600" aria-label="unread"></span> })}
                <Badge tone>{label}</Badge>
            </div>
            <div class="min-w-0 flex-1">
                <p class=weight>
                    {match n.rental_id {
                        Some(id) => view! { <a class="hover:underline" href=format!("/rentals/{id}")>{n.title.clone()}</a> }.into_any(),
                        None => view! { <span>{n.title.clone()}</span> }.into_any(),
                    }}
                </p>
                <p class="text-sm text-slate-600">{n.body.clone()}</p>
            </div>
            <time class="shrink-0 text-sm text-slate-500" datetime=n.created_at.to_rfc3339()>
                {n.created_at.format("%Y-%m-%d %H:%M UTC").to_string()}
            </time>
        </li>
    }
}
