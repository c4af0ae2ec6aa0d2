//! `/api/v1/gangs`: book a multi-node gang (N GPUs on each of M hosts of one fabric), watch
//! its members, stop it.

use crate::edges::{ApiJson, ApiResult, Caller, PathId};
use axum::{Json, http::StatusCode};
use cardpool_app::ssr::AppState;
use cardpool_domain::{
    error::ErrorBody,
    gangs::{BookGangRequest, Gang, GangList, ReplaceMemberRequest},
};
use cardpool_service::rentals;
use utoipa_axum::{router::OpenApiRouter, routes};

/// This module's operations, each registered once: its route and its OpenAPI path.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_gangs, book_gang))
        .routes(routes!(get_gang))
        .routes(routes!(stop_gang))
        .routes(routes!(replace_member))
}

/// Books a gang all or nothing: `gpus_per_node` GPUs on each of `nodes` hosts of one fabric
/// (the cheapest with enough free hosts, or `fabric_id`), on-demand or reserved. Members start
/// billing together once every one is up; each workload gets `MASTER_ADDR`, `MASTER_PORT`,
/// `WORLD_SIZE`, `RANK`, `NODE_RANK`, `NNODES` and `LOCAL_WORLD_SIZE`.
#[utoipa::path(post, path = "/gangs", operation_id = "book_gang", tag = "rentals",
    request_body = BookGangRequest,
    responses((status = 201, body = Gang), (status = 402, description = "Balance too low for the whole gang", body = ErrorBody),
        (status = 409, description = "No fabric has enough free hosts", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn book_gang(
    Caller(services, caller): Caller,
    ApiJson(request): ApiJson<BookGangRequest>,
) -> ApiResult<(StatusCode, Json<Gang>)> {
    Ok((StatusCode::CREATED, Json(rentals::book_gang(&services, &caller, &request).await?)))
}

/// The caller's gangs, newest first.
#[utoipa::path(get, path = "/gangs", operation_id = "list_gangs", tag = "rentals",
    responses((status = 200, body = GangList), (status = 401, body = ErrorBody)))]
pub async fn list_gangs(Caller(services, caller): Caller) -> ApiResult<Json<GangList>> {
    Ok(Json(rentals::list_gangs(&services, &caller).await?))
}

/// One gang: its state, rendezvous and members (each an ordinary rental).
#[utoipa::path(get, path = "/gangs/{id}", operation_id = "get_gang", tag = "rentals",
    params(("id" = i64, Path, description = "Gang id")),
    responses((status = 200, body = Gang), (status = 404, body = ErrorBody)))]
pub async fn get_gang(Caller(services, caller): Caller, id: PathId) -> ApiResult<Json<Gang>> {
    Ok(Json(rentals::get_gang(&services, &caller, id.of("a gang")?).await?))
}

/// Stops every live member of a gang.
#[utoipa::path(post, path = "/gangs/{id}/stop", operation_id = "stop_gang", tag = "rentals",
    params(("id" = i64, Path, description = "Gang id")),
    responses((status = 200, body = Gang), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn stop_gang(Caller(services, caller): Caller, id: PathId) -> ApiResult<Json<Gang>> {
    Ok(Json(rentals::stop_gang(&services, &caller, id.of("a gang")?).await?))
}

/// Books a replacement for a lost member of a gang that holds its others (`on_member_loss:
/// hold`): a free host of the gang's fabric, with the lost member's rank, GPUs and workload.
/// Rank 0 cannot be replaced (the others were told its address).
#[utoipa::path(post, path = "/gangs/{id}/replace", operation_id = "replace_gang_member", tag = "rentals",
    params(("id" = i64, Path, description = "Gang id")),
    request_body = ReplaceMemberRequest,
    responses((status = 200, body = Gang), (status = 402, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "That rank is not lost, or no host of the fabric is free", body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn replace_member(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<ReplaceMemberRequest>,
) -> ApiResult<Json<Gang>> {
    Ok(Json(rentals::replace_member(&services, &caller, id.of("a gang")?, request.rank).await?))
}
