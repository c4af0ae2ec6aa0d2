//! One module per page, named after its route.

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
