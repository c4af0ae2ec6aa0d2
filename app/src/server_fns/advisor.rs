use cardpool_domain::{
    AppError,
    advisor::{Advice, AdviceForm},
    wire::JsonOut,
};
#[cfg(feature = "ssr")]
use cardpool_service::advisor;
use leptos::prelude::*;

/// Open to everyone, like the market: the booking page's cost advisor.
#[server(prefix = "/rpc", endpoint = "get_advice", output = JsonOut)]
pub async fn get_advice(form: AdviceForm) -> Result<Advice, AppError> {
    crate::ssr::anyone(async |req| advisor::advise(&req.services, &form.parse()?).await).await
}
