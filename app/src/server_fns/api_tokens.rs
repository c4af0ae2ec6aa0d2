use cardpool_domain::{
    AppError,
    account::{ApiToken, CreatedApiToken},
    wire::JsonOut,
};
#[cfg(feature = "ssr")]
use cardpool_service::api_tokens;
use leptos::prelude::*;

#[server(prefix = "/rpc", endpoint = "create_api_token", output = JsonOut)]
pub async fn create_api_token(name: String) -> Result<CreatedApiToken, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        use cardpool_domain::account::CreateApiTokenRequest;
        api_tokens::create_api_token(&req.services, &caller, &CreateApiTokenRequest { name }).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "list_api_tokens", output = JsonOut)]
pub async fn list_api_tokens() -> Result<Vec<ApiToken>, AppError> {
    crate::ssr::signed_in(async |req, caller| api_tokens::list_api_tokens(&req.services, &caller).await).await
}

#[server(prefix = "/rpc", endpoint = "revoke_api_token", output = JsonOut)]
pub async fn revoke_api_token(id: i64) -> Result<(), AppError> {
    crate::ssr::signed_in(async |req, caller| api_tokens::revoke_api_token(&req.services, &caller, id).await).await
}
