//! The frame around every page: header with navigation that follows the account's roles,
//! and the footer.

use super::{
    kit::{Badge, Tone},
    session::use_current_user,
};
use crate::server_fns::accounts::SignOut;
use leptos::{prelude::*, server_fn::ServerFn};
use leptos_router::components::A;

#[component]
pub fn Header() -> impl IntoView {
    let user = use_current_user();
    view! {
        <a href="#main" class="sr-only focus:not-sr-only focus:absolute focus:left-2 focus:top-2 focus:z-50 focus:rounded focus:bg-white focus:px-3 focus:py-2">
            "Skip to content"
        </a>
        <header class="border-b border-slate-200 bg-white/90 backdrop-blur">
            <nav aria-label="Main" class="mx-auto flex max-w-6xl flex-wrap items-center justify-between gap-3 px-4 py-3 sm:px-6 lg:px-8">
                <A href="/" attr:class="flex items-center gap-2 text-lg font-bold tracking-tight text-slate-900">
                    <Logo />
                    "Cardpool"
                </A>
                <Transition fallback=|| view! { <span class="h-8 w-40 animate-pulse rounded bg-slate-100"></span> }>
                    {move || Suspend::new(async move {
                        match user.0.await {
                            Ok(Some(me)) => view! { <SignedInNav email=me.email provider=me.roles.provider admin=me.roles.admin unread=me.unread_notifications /> }.into_any(),
                            _ => view! { <VisitorNav /> }.into_any(),
                        }
                    })}
                </Transition>
            </nav>
        </header>
    }
}

#[component]
fn VisitorNav() -> impl IntoView {
    view! {
        <div class="flex items-center gap-2">
            <A href="/offers" attr:class="nav-link">"Find GPUs"</A>
            <A href="/sign-in" attr:class="nav-link">"Sign in"</A>
            <A href="/sign-up" attr:class="btn-primary">"Create account"</A>
        </div>
    }
}

#[component]
fn SignedInNav(email: String, provider: bool, admin: bool, unread: u64) -> impl IntoView {
    view! {
        <div class="flex flex-wrap items-center gap-1 sm:gap-2">
            <Bell unread />
            <A href="/offers" attr:class="nav-link">"Find GPUs"</A>
            <A href="/rentals" attr:class="nav-link">"Rentals"</A>
            <A href="/wallet" attr:class="nav-link">"Wallet"</A>
            {provider.then(|| view! { <A href="/provider/hosts" attr:class="nav-link">"Hosts"</A> })}
            {provider.then(|| view! { <A href="/provider/earnings" attr:class="nav-link">"Earnings"</A> })}
            <A href="/account" attr:class="nav-link">"Account"</A>
            <A href="/account/tokens" attr:class="nav-link">"API tokens"</A>
            <A href="/account/ssh-keys" attr:class="nav-link">"SSH keys"</A>
            {admin.then(|| view! { <A href="/admin/fleet" attr:class="nav-link">"Admin"</A> })}
            <span class="hidden items-center gap-2 px-2 text-sm text-slate-500 md:flex" data-testid="nav-email">
                {email}
                {provider.then(|| view! { <Badge tone=Tone::Good>"provider"</Badge> })}
                {admin.then(|| view! { <Badge tone=Tone::Warn>"admin"</Badge> })}
            </span>
            // A plain form: the browser posts it and follows the answer's redirect to `/`, where
            // every part of the page reads the ended session afresh.
            <form method="post" action=SignOut::PATH>
                <button type="submit" class="btn-secondary">"Sign out"</button>
            </form>
        </div>
    }
}

/// The notifications link, with the unread count as of this page load.
#[component]
fn Bell(unread: u64) -> impl IntoView {
    let label = if unread == 0 { "Notifications".to_owned() } else { format!("Notifications, {unread} unread") };
    view! {
        <A href="/notifications" attr:class="nav-link relative" attr:aria-label=label attr:data-testid="bell">
            <svg aria-hidden="true" viewBox="0 0 24 24" class="h-5 w-5 fill-none stroke-current stroke-2">
                <path d="M15 17h5l-1.4-1.4A2 2 0 0 1 18 14.2V11a6 6 0 1 0-12 0v3.2c0 .5-.2 1-.6 1.4L4 17h5m6 0a3 3 0 1 1-6 0" />
            </svg>
            {(unread > 0).then(|| view! {
                <span data-testid="bell-count" class="absolute -right-1 -top-1 min-w-5 rounded-full bg-rose-600 px-1 text-center text-xs font-semibold text-white">
                    {if unread > 99 { "99+".to_owned() } else { unread.to_string() }}
                </span>
            })}
        </A>
    }
}

#[component]
fn Logo() -> impl IntoView {
    view! {
        <svg aria-hidden="true" viewBox="0 0 32 32" class="h-7 w-7">
            <rect x="3" y="7" width="26" height="18" rx="3" class="fill-indigo-600" />
            <rect x="7" y="11" width="6" height="10" rx="1" class="fill-indigo-200" />
            <rect x="15" y="11" width="6" height="10" rx="1" class="fill-indigo-300" />
            <rect x="23" y="11" width="3" height="10" rx="1" class="fill-indigo-400" />
        </svg>
    }
}

#[component]
pub fn Footer() -> impl IntoView {
    view! {
        <footer class="border-t border-slate-200 bg-white">
            <div class="mx-auto flex max-w-6xl flex-col gap-2 px-4 py-6 text-sm text-slate-500 sm:flex-row sm:justify-between sm:px-6 lg:px-8">
                <p>"Cardpool: the open GPU marketplace."</p>
                <p>
                    <a class="underline hover:text-slate-700" href="/api/v1/openapi.json">"API (OpenAPI)"</a>
                </p>
            </div>
        </footer>
    }
}
