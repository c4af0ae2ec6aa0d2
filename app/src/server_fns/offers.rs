use cardpool_domain::{
    AppError,
    offers::{OfferPage, OfferQuery},
};
use leptos::{prelude::*, server_fn::codec::Json};

/// Open to everyone: the market is browsable before signing up.
#[server(prefix = "/rpc", endpoint = "list_offers", input = Json)]
pub async fn list_offers(query: OfferQuery) -> Result<OfferPage, AppError> {
    crate::ssr::respond(async move {
        let req = crate::ssr::Request::current().await?;
        cardpool_service::offers::list_offers(&req.services, &query).await
    })
    .await
}
