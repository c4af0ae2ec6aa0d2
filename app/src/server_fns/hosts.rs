use cardpool_domain::{
    AppError,
    host::{CreatedEnrollmentToken, HostDetail, HostSummary},
};
use leptos::prelude::*;

#[server(prefix = "/rpc", endpoint = "create_enrollment_token")]
pub async fn create_enrollment_token(location: String) -> Result<CreatedEnrollmentToken, AppError> {
    crate::ssr::respond(async move {
        let req = crate::ssr::Request::current().await?;
        let principal = req.principal().await?;
        let headers = leptos_axum::extract::<http::HeaderMap>().await.map_err(|_| AppError::Internal)?;
        let url = req.state.server_url(&headers);
        cardpool_service::hosts::create_enrollment_token(&req.services, &principal, Some(&location), &url).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "list_hosts")]
pub async fn list_hosts() -> Result<Vec<HostSummary>, AppError> {
    crate::ssr::respond(async move {
        let req = crate::ssr::Request::current().await?;
        let principal = req.principal().await?;
        cardpool_service::hosts::list_hosts(&req.services, &principal).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "get_host")]
pub async fn get_host(id: i64) -> Result<HostDetail, AppError> {
    crate::ssr::respond(async move {
        let req = crate::ssr::Request::current().await?;
        let principal = req.principal().await?;
        cardpool_service::hosts::get_host(&req.services, &principal, id).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "revoke_host")]
pub async fn revoke_host(id: i64) -> Result<(), AppError> {
    crate::ssr::respond(async move {
        let req = crate::ssr::Request::current().await?;
        let principal = req.principal().await?;
        cardpool_service::hosts::revoke_host(&req.services, &principal, id).await
    })
    .await
}
