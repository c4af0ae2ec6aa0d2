use cardpool_domain::{
    AppError,
    offers::{OfferDetail, OfferPage, OfferQuery},
    wire::JsonOut,
};
#[cfg(feature = "ssr")]
use cardpool_service::offers;
use leptos::{prelude::*, server_fn::codec::Json};

/// Open to everyone: the market is browsable before signing up.
#[server(prefix = "/rpc", endpoint = "list_offers", input = Json, output = JsonOut)]
pub async fn list_offers(query: OfferQuery) -> Result<OfferPage, AppError> {
    crate::ssr::anyone(async |req| offers::list_offers(&req.services, &query).await).await
}

/// One offer with its spot clearing-price history (the booking page shows both).
#[server(prefix = "/rpc", endpoint = "get_offer", output = JsonOut)]
pub async fn get_offer(host_id: i64, gpu_model: String) -> Result<OfferDetail, AppError> {
    crate::ssr::anyone(async |req| offers::get_offer(&req.services, host_id, &gpu_model).await).await
}
