use cardpool_domain::{AppError, account::SshKey, wire::JsonOut};
#[cfg(feature = "ssr")]
use cardpool_service::ssh_access;
use leptos::prelude::*;

#[server(prefix = "/rpc", endpoint = "add_ssh_key", output = JsonOut)]
pub async fn add_ssh_key(name: String, public_key: String) -> Result<SshKey, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        use cardpool_domain::account::AddSshKeyRequest;
        ssh_access::add_ssh_key(&req.services, &caller, &AddSshKeyRequest { name, public_key }).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "list_ssh_keys", output = JsonOut)]
pub async fn list_ssh_keys() -> Result<Vec<SshKey>, AppError> {
    crate::ssr::signed_in(async |req, caller| ssh_access::list_ssh_keys(&req.services, &caller).await).await
}

#[server(prefix = "/rpc", endpoint = "remove_ssh_key", output = JsonOut)]
pub async fn remove_ssh_key(id: i64) -> Result<(), AppError> {
    crate::ssr::signed_in(async |req, caller| ssh_access::remove_ssh_key(&req.services, &caller, id).await).await
}
