//! One module per page, named after its route, and the routes that load each page's code.

pub mod account;
pub mod admin;
pub mod api_tokens;
pub mod earnings;
pub mod fleet;
pub mod home;
pub mod hosts;
pub mod not_found;
pub mod offers;
pub mod rentals;
pub mod sign_in;
pub mod sign_up;
pub mod ssh_keys;
pub mod wallet;

/// Declares, for each page, a route type whose view is loaded lazily: in the browser each
/// page's code is a wasm chunk of its own (`cargo leptos build --split` writes them), fetched
/// the first time that page is shown, so the first visit downloads only the shell (router,
/// header, session) and the page in front of it. On the server, and in builds without
/// `--split`, such a route renders like any other. Pages load their own data, so a route has
/// nothing to prepare before its view.
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
use admin::{AdminCreditsPage, AdminUsersPage};
use api_tokens::ApiTokensPage;
use earnings::EarningsPage;
use fleet::AdminFleetPage;
use home::HomePage;
use hosts::{HostPage, HostsPage};
use offers::OffersPage;
use rentals::{RentPage, RentalPage, RentalsPage};
use sign_in::SignInPage;
use sign_up::SignUpPage;
use ssh_keys::SshKeysPage;
use wallet::{ReceiptPage, WalletPage};

lazy_pages! {
    HomeRoute => HomePage,
    OffersRoute => OffersPage,
    RentRoute => RentPage,
    RentalsRoute => RentalsPage,
    RentalRoute => RentalPage,
    SignUpRoute => SignUpPage,
    SignInRoute => SignInPage,
    AccountRoute => AccountPage,
    ApiTokensRoute => ApiTokensPage,
    SshKeysRoute => SshKeysPage,
    AdminFleetRoute => AdminFleetPage,
    AdminUsersRoute => AdminUsersPage,
    AdminCreditsRoute => AdminCreditsPage,
    WalletRoute => WalletPage,
    ReceiptRoute => ReceiptPage,
    EarningsRoute => EarningsPage,
    HostsRoute => HostsPage,
    HostRoute => HostPage,
}
