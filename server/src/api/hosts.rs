//! `/api/v1/enrollment-tokens`, `/api/v1/agent/enroll` and `/api/v1/hosts*`.

use crate::edges::{ApiJson, ApiResult, Caller, PathId};
use axum::{
    Json,
    extract::State,
    http::{HeaderMap, StatusCode},
};
use cardpool_app::ssr::AppState;
use cardpool_domain::fabric::{FabricView, SetHostFabricRequest};
use cardpool_domain::{
    error::ErrorBody,
    host::{
        CreateEnrollmentTokenRequest, CreatedEnrollmentToken, EnrollHostRequest, EnrolledHost, GpuModelPrice,
        GpuSaleRequest, HostDetail, HostSummary, MigLayoutRequest, SetHostListedRequest,
    },
};
use cardpool_service::hosts;
use utoipa_axum::{router::OpenApiRouter, routes};

/// This module's operations, each registered once: its route and its OpenAPI path.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_enrollment_token))
        .routes(routes!(enroll_host))
        .routes(routes!(list_hosts))
        .routes(routes!(get_host))
        .routes(routes!(revoke_host))
        .routes(routes!(update_host_pricing))
        .routes(routes!(set_host_listed))
        .routes(routes!(set_gpu_sale))
        .routes(routes!(set_mig_layout))
        .routes(routes!(set_host_fabric))
}

/// Creates a single-use enrollment token (valid one hour) and the command to run on the host.
#[utoipa::path(post, path = "/enrollment-tokens", operation_id = "create_enrollment_token", tag = "hosts",
    request_body = CreateEnrollmentTokenRequest,
    responses((status = 201, body = CreatedEnrollmentToken), (status = 403, description = "Not a provider", body = ErrorBody)))]
pub async fn create_enrollment_token(
    State(state): State<AppState>,
    headers: HeaderMap,
    Caller(_, caller): Caller,
    ApiJson(request): ApiJson<CreateEnrollmentTokenRequest>,
) -> ApiResult<(StatusCode, Json<CreatedEnrollmentToken>)> {
    let url = state.server_url(&headers);
    let created = hosts::create_enrollment_token(&state.services, &caller, request.location.as_deref(), &url).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// Called by `cardpool-agent enroll`: exchanges an enrollment token for a host credential.
#[utoipa::path(post, path = "/agent/enroll", operation_id = "enroll_host", tag = "hosts", security(()),
    request_body = EnrollHostRequest,
    responses((status = 201, body = EnrolledHost), (status = 401, description = "Unknown, used or expired token", body = ErrorBody)))]
pub async fn enroll_host(
    State(state): State<AppState>,
    ApiJson(request): ApiJson<EnrollHostRequest>,
) -> ApiResult<(StatusCode, Json<EnrolledHost>)> {
    let enrolled = hosts::enroll_host(&state.services, request.token.trim(), &request.hostname).await?;
    Ok((StatusCode::CREATED, Json(enrolled)))
}

/// The caller's hosts (all hosts for an admin).
#[utoipa::path(get, path = "/hosts", operation_id = "list_hosts", tag = "hosts",
    responses((status = 200, body = Vec<HostSummary>), (status = 403, body = ErrorBody)))]
pub async fn list_hosts(Caller(services, caller): Caller) -> ApiResult<Json<Vec<HostSummary>>> {
    Ok(Json(hosts::list_hosts(&services, &caller).await?))
}

/// One host with its GPUs and status history.
#[utoipa::path(get, path = "/hosts/{id}", operation_id = "get_host", tag = "hosts",
    params(("id" = i64, Path, description = "Host id")),
    responses((status = 200, body = HostDetail), (status = 404, body = ErrorBody)))]
pub async fn get_host(Caller(services, caller): Caller, id: PathId) -> ApiResult<Json<HostDetail>> {
    Ok(Json(hosts::get_host(&services, &caller, id.of("a host")?).await?))
}

/// Revokes a host: its credential stops working and its agent is disconnected within seconds.
#[utoipa::path(post, path = "/hosts/{id}/revoke", operation_id = "revoke_host", tag = "hosts",
    params(("id" = i64, Path, description = "Host id")),
    responses((status = 204, description = "Revoked"), (status = 404, body = ErrorBody)))]
pub async fn revoke_host(Caller(services, caller): Caller, id: PathId) -> ApiResult<StatusCode> {
    hosts::revoke_host(&services, &caller, id.of("a host")?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sets the prices of one GPU model on one of the caller's hosts (micro-dollars per GPU-hour).
#[utoipa::path(put, path = "/hosts/{id}/pricing", operation_id = "update_host_pricing", tag = "hosts",
    params(("id" = i64, Path, description = "Host id")),
    request_body = GpuModelPrice,
    responses((status = 200, body = GpuModelPrice), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn update_host_pricing(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(price): ApiJson<GpuModelPrice>,
) -> ApiResult<Json<GpuModelPrice>> {
    Ok(Json(hosts::update_host_pricing(&services, &caller, id.of("a host")?, &price).await?))
}

/// Lists one of the caller's hosts on the market, or takes it off.
#[utoipa::path(put, path = "/hosts/{id}/listing", operation_id = "set_host_listed", tag = "hosts",
    params(("id" = i64, Path, description = "Host id")),
    request_body = SetHostListedRequest,
    responses((status = 204, description = "Saved"), (status = 404, body = ErrorBody), (status = 409, description = "Not priced yet", body = ErrorBody)))]
pub async fn set_host_listed(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<SetHostListedRequest>,
) -> ApiResult<StatusCode> {
    hosts::set_host_listed(&services, &caller, id.of("a host")?, request.listed).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sells one GPU of one of the caller's hosts whole or as its MIG instances (each then a unit
/// of its own, priced per slice-hour under its unit name, e.g. `H100-80GB MIG 1g.10gb`).
/// Refused while the GPU or a slice of it is rented or reserved.
#[utoipa::path(put, path = "/hosts/{id}/gpu-sale", operation_id = "set_gpu_sale", tag = "hosts",
    params(("id" = i64, Path, description = "Host id")),
    request_body = GpuSaleRequest,
    responses((status = 204, description = "Saved"), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "Rented or reserved now", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_gpu_sale(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<GpuSaleRequest>,
) -> ApiResult<StatusCode> {
    hosts::set_gpu_sale(&services, &caller, id.of("a host")?, request.gpu_index, request.sold_as).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Asks the host's agent to carve one GPU into a MIG layout: one instance per profile named,
/// from the profiles the host reports for that GPU. The GPU is off the market until the agent
/// reports the layout (or why it could not: `mig_layout_error` on the host). Refused while the
/// GPU or a slice of it is rented or reserved, where the agent cannot carve it, and for a
/// layout that does not fit the GPU. Asking for the layout it has cancels a pending change.
#[utoipa::path(put, path = "/hosts/{id}/mig-layout", operation_id = "set_mig_layout", tag = "hosts",
    params(("id" = i64, Path, description = "Host id")),
    request_body = MigLayoutRequest,
    responses((status = 204, description = "Asked of the agent"), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "Rented or reserved now", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_mig_layout(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<MigLayoutRequest>,
) -> ApiResult<StatusCode> {
    hosts::set_mig_layout(&services, &caller, id.of("a host")?, request.gpu_index, request.profiles).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Declares the network fabric of one of the caller's hosts (`{"fabric": null}` clears it):
/// renters see it on offers, checked against the links the host's agent reports.
#[utoipa::path(put, path = "/hosts/{id}/fabric", operation_id = "set_host_fabric", tag = "hosts",
    params(("id" = i64, Path, description = "Host id")),
    request_body = SetHostFabricRequest,
    responses((status = 200, body = Option<FabricView>), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn set_host_fabric(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<SetHostFabricRequest>,
) -> ApiResult<Json<Option<FabricView>>> {
    Ok(Json(hosts::set_host_fabric(&services, &caller, id.of("a host")?, request.fabric.as_ref()).await?))
}
