//! `/api/v1/ssh-keys*`: the account's SSH public keys, which open its running rentals through
//! the SSH gateway.

use crate::edges::{ApiJson, ApiResult, Caller, PathId};
use axum::{Json, http::StatusCode};
use cardpool_app::ssr::AppState;
use cardpool_domain::{
    account::{AddSshKeyRequest, SshKey},
    error::ErrorBody,
};
use cardpool_service::ssh_access;
use utoipa_axum::{router::OpenApiRouter, routes};

/// This module's operations, each registered once: its route and its OpenAPI path.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_ssh_keys, add_ssh_key)).routes(routes!(remove_ssh_key))
}

/// Adds an OpenSSH public key (one `.pub` line) to the account.
#[utoipa::path(post, path = "/ssh-keys", operation_id = "add_ssh_key", tag = "ssh",
    request_body = AddSshKeyRequest,
    responses((status = 201, body = SshKey), (status = 401, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn add_ssh_key(
    Caller(services, caller): Caller,
    ApiJson(request): ApiJson<AddSshKeyRequest>,
) -> ApiResult<(StatusCode, Json<SshKey>)> {
    let key = ssh_access::add_ssh_key(&services, &caller, &request).await?;
    Ok((StatusCode::CREATED, Json(key)))
}

/// The account's SSH keys, newest first.
#[utoipa::path(get, path = "/ssh-keys", operation_id = "list_ssh_keys", tag = "ssh",
    responses((status = 200, body = Vec<SshKey>), (status = 401, body = ErrorBody)))]
pub async fn list_ssh_keys(Caller(services, caller): Caller) -> ApiResult<Json<Vec<SshKey>>> {
    Ok(Json(ssh_access::list_ssh_keys(&services, &caller).await?))
}

/// Removes one of the account's keys: no new login with it succeeds.
#[utoipa::path(delete, path = "/ssh-keys/{id}", operation_id = "remove_ssh_key", tag = "ssh",
    params(("id" = i64, Path, description = "Key id")),
    responses((status = 204, description = "Removed"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn remove_ssh_key(Caller(services, caller): Caller, id: PathId) -> ApiResult<StatusCode> {
    let id = id.of("an SSH key")?;
    ssh_access::remove_ssh_key(&services, &caller, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
