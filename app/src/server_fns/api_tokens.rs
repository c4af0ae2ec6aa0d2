use cardpool_domain::{
    AppError,
    account::{ApiToken, CreatedApiToken},
};
use leptos::prelude::*;

#[server(prefix = "/rpc", endpoint = "create_api_token")]
pub async fn create_api_token(name: String) -> Result<CreatedApiToken, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        use cardpool_domain::account::CreateApiTokenRequest;
        cardpool_service::api_tokens::create_api_token(&req.services, &principal, &CreateApiTokenRequest { name }).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "list_api_tokens")]
pub async fn list_api_tokens() -> Result<Vec<ApiToken>, AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        cardpool_service::api_tokens::list_api_tokens(&req.services, &principal).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "revoke_api_token")]
pub async fn revoke_api_token(id: i64) -> Result<(), AppError> {
    crate::ssr::signed_in(|req, principal| async move {
        cardpool_service::api_tokens::revoke_api_token(&req.services, &principal, id).await
    })
    .await
}
