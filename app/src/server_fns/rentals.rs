use cardpool_domain::{
    AppError,
    rentals::{BookingForm, Rental, RentalDetail},
    wire::JsonOut,
};
#[cfg(feature = "ssr")]
use cardpool_service::rentals;
use leptos::prelude::*;

/// Books from the booking form (its inputs are named `form[field]`); field problems come back
/// per field.
#[server(prefix = "/rpc", endpoint = "book_rental", output = JsonOut)]
pub async fn book_rental(form: BookingForm) -> Result<Rental, AppError> {
    crate::ssr::signed_in(async |req, caller| rentals::book_offer(&req.services, &caller, &form.parse()?).await).await
}

#[server(prefix = "/rpc", endpoint = "list_rentals", output = JsonOut)]
pub async fn list_rentals() -> Result<Vec<Rental>, AppError> {
    crate::ssr::signed_in(async |req, caller| rentals::list_rentals(&req.services, &caller).await).await
}

#[server(prefix = "/rpc", endpoint = "get_rental", output = JsonOut)]
pub async fn get_rental(id: i64) -> Result<RentalDetail, AppError> {
    crate::ssr::signed_in(async |req, caller| rentals::get_rental(&req.services, &caller, id).await).await
}

#[server(prefix = "/rpc", endpoint = "stop_rental", output = JsonOut)]
pub async fn stop_rental(id: i64) -> Result<Rental, AppError> {
    crate::ssr::signed_in(async |req, caller| rentals::stop_rental(&req.services, &caller, id).await).await
}

#[server(prefix = "/rpc", endpoint = "change_bid", output = JsonOut)]
pub async fn change_bid(id: i64, bid: String) -> Result<Rental, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        let bid_micros = cardpool_domain::money::parse_dollars(&bid).map_err(|e| AppError::invalid_field("bid", e))?;
        rentals::change_bid(&req.services, &caller, id, bid_micros).await
    })
    .await
}
