//! The Cardpool web application: pages, components and the server functions behind them.
//!
//! Compiled twice: with `ssr` into the server (server functions run there and call
//! `cardpool-service`), and with `hydrate` into the browser bundle (server functions become
//! HTTP calls). Only `cardpool-domain` DTOs cross between the two.

#![recursion_limit = "256"]

pub mod components;
pub mod pages;
pub mod server_fns;
#[cfg(feature = "ssr")]
pub mod ssr;

use components::{
    bundle::BundleTags,
    layout::{Footer, Header},
};
use leptos::prelude::*;
use leptos_meta::{MetaTags, Title, provide_meta_context};
use leptos_router::{
    Lazy,
    components::{Route, Router, Routes},
    path,
};
use pages::{not_found::NotFoundPage, *};

/// The HTML document around the app, rendered on the server only.
pub fn shell(options: LeptosOptions) -> impl IntoView {
    #[cfg(feature = "ssr")]
    ssr::set_content_security_policy();
    view! {
        <!DOCTYPE html>
        <html lang="en" class="h-full bg-slate-50">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                // Static, so written here (server-side only) rather than through leptos_meta in
                // `App`, which would carry their components into the browser bundle.
                <meta name="description" content="Cardpool: rent GPUs by the second, or earn from your own." />
                <link rel="icon" type="image/svg+xml" href="/favicon.svg" />
                <BundleTags options />
                <MetaTags />
            </head>
            <body class="h-full">
                <App />
            </body>
        </html>
    }
}

/// The root component: the title, the current account, routes.
#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    components::session::provide_current_user();
    view! {
        <Title formatter=|text: String| if text.is_empty() { "Cardpool".to_owned() } else { format!("{text} · Cardpool") } />
        <Router>
            <div class="flex min-h-full flex-col">
                <Header />
                <main id="main" class="mx-auto w-full max-w-6xl flex-1 px-4 py-8 sm:px-6 lg:px-8">
                    <Routes fallback=NotFoundPage>
                        <Route path=path!("/") view=HomePage />
                        <Route path=path!("/offers") view=OffersPage />
                        <Route path=path!("/rent") view={Lazy::<RentRoute>::new()} />
                        <Route path=path!("/rentals") view={Lazy::<RentalsRoute>::new()} />
                        <Route path=path!("/rentals/:id") view={Lazy::<RentalRoute>::new()} />
                        <Route path=path!("/gangs/new") view={Lazy::<GangNewRoute>::new()} />
                        <Route path=path!("/gangs/:id") view={Lazy::<GangRoute>::new()} />
                        <Route path=path!("/sign-up") view={Lazy::<SignUpRoute>::new()} />
                        <Route path=path!("/sign-in") view={Lazy::<SignInRoute>::new()} />
                        <Route path=path!("/account") view={Lazy::<AccountRoute>::new()} />
                        <Route path=path!("/account/tokens") view={Lazy::<ApiTokensRoute>::new()} />
                        <Route path=path!("/account/ssh-keys") view={Lazy::<SshKeysRoute>::new()} />
                        <Route path=path!("/account/webhooks") view={Lazy::<WebhooksRoute>::new()} />
                        <Route path=path!("/notifications") view={Lazy::<NotificationsRoute>::new()} />
                        <Route path=path!("/admin/fleet") view={Lazy::<AdminFleetRoute>::new()} />
                        <Route path=path!("/admin/users") view={Lazy::<AdminUsersRoute>::new()} />
                        <Route path=path!("/admin/users/:id") view={Lazy::<AdminAccountRoute>::new()} />
                        <Route path=path!("/admin/hosts") view={Lazy::<AdminHostsRoute>::new()} />
                        <Route path=path!("/admin/hosts/:id") view={Lazy::<AdminHostRoute>::new()} />
                        <Route path=path!("/admin/rentals") view={Lazy::<AdminRentalsRoute>::new()} />
                        <Route path=path!("/admin/reports") view={Lazy::<AdminReportsRoute>::new()} />
                        <Route path=path!("/admin/audit") view={Lazy::<AdminAuditRoute>::new()} />
                        <Route path=path!("/admin/credits") view={Lazy::<AdminCreditsRoute>::new()} />
                        <Route path=path!("/wallet") view={Lazy::<WalletRoute>::new()} />
                        <Route path=path!("/wallet/receipts/:id") view={Lazy::<ReceiptRoute>::new()} />
                        <Route path=path!("/provider/earnings") view={Lazy::<EarningsRoute>::new()} />
                        <Route path=path!("/provider/hosts") view={Lazy::<HostsRoute>::new()} />
                        <Route path=path!("/provider/hosts/:id") view={Lazy::<HostRoute>::new()} />
                    </Routes>
                </main>
                <Footer />
            </div>
        </Router>
    }
}
