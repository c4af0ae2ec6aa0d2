//! One module per page, named after its route, and the routes that load each page's code.

pub mod account;
pub mod admin;
pub mod api_tokens;
pub mod earnings;
pub mod fleet;
pub mod gangs;
pub mod home;
pub mod hosts;
pub mod not_found;
pub mod notifications;
pub mod offers;
pub mod rentals;
pub mod sign_in;
pub mod sign_up;
pub mod ssh_keys;
pub mod wallet;
pub mod webhooks;

/// Declares, for each page, a route type whose view is loaded lazily: in the browser each
/// page's code is a wasm chunk of its own (`cargo leptos build --split` writes them), fetched
/// the first time that page is shown, so a first visit downloads the shell (router, header,
/// session, and the two landing pages) and at most the page in front of it. On the server, and
/// in builds without `--split`, such a route renders like any other. Pages load their own data,
/// so a route has nothing to prepare before its view.
///
/// `/` and `/offers` stay in the shell on purpose: measured with Lighthouse (mobile), the
/// market page as a lazy route needed some seventy small chunks, each a module the browser
/// compiles on the main thread, and its performance score fell from 99 to 80 (860 ms of total
/// blocking time); in the shell it scores 99 and the first visit is smaller, not larger.
macro_rules! lazy_pages {
    ($($route:ident => $page:ident),* $(,)?) => {$(
        #[doc = concat!("The route of [`", stringify!($page), "`], its code loaded lazily.")]
        pub struct $route;

        #[leptos_router::lazy_route]
        impl leptos_router::LazyRoute for $route {
            fn data() -> Self {
                $route
            }

            fn view(_route: Self) -> leptos::prelude::AnyView {
                use leptos::prelude::*;
                view! { <$page /> }.into_any()
            }
        }
    )*};
}

use account::AccountPage;
use admin::{
    AdminCreditsPage,
    audit::AdminAuditPage,
    hosts::AdminHostsPage,
    records::{AdminAccountPage, AdminHostPage},
    rentals::AdminRentalsPage,
    reports::AdminReportsPage,
    users::AdminUsersPage,
};
use api_tokens::ApiTokensPage;
use earnings::EarningsPage;
use fleet::AdminFleetPage;
use gangs::{GangNewPage, GangPage};
pub use home::HomePage;
use hosts::{HostPage, HostsPage};
use notifications::NotificationsPage;
pub use offers::OffersPage;
use rentals::{RentPage, RentalPage, RentalsPage};
use sign_in::SignInPage;
use sign_up::SignUpPage;
use ssh_keys::SshKeysPage;
use wallet::{ReceiptPage, WalletPage};
use webhooks::WebhooksPage;

lazy_pages! {
    RentRoute => RentPage,
    RentalsRoute => RentalsPage,
    RentalRoute => RentalPage,
    GangNewRoute => GangNewPage,
    GangRoute => GangPage,
    SignUpRoute => SignUpPage,
    SignInRoute => SignInPage,
    AccountRoute => AccountPage,
    ApiTokensRoute => ApiTokensPage,
    SshKeysRoute => SshKeysPage,
    WebhooksRoute => WebhooksPage,
    NotificationsRoute => NotificationsPage,
    AdminFleetRoute => AdminFleetPage,
    AdminUsersRoute => AdminUsersPage,
    AdminHostsRoute => AdminHostsPage,
    AdminAuditRoute => AdminAuditPage,
    AdminAccountRoute => AdminAccountPage,
    AdminHostRoute => AdminHostPage,
    AdminRentalsRoute => AdminRentalsPage,
    AdminReportsRoute => AdminReportsPage,
    AdminCreditsRoute => AdminCreditsPage,
    WalletRoute => WalletPage,
    ReceiptRoute => ReceiptPage,
    EarningsRoute => EarningsPage,
    HostsRoute => HostsPage,
    HostRoute => HostPage,
}
