//! `/api/v1/admin/*` and `/api/v1/users*`: the admin console's operations. Each action takes
//! a reason and writes one line of the audit log (`/api/v1/admin/audit`); the service checks
//! that the caller is an admin.

use crate::edges::{ApiJson, ApiQuery, ApiResult, Caller, PathId};
use axum::Json;
use cardpool_app::ssr::AppState;
use cardpool_domain::{
    account::UserSummary,
    admin::{AdminActionRequest, AuditPage, AuditQuery},
    error::ErrorBody,
    host::HostSummary,
};
use cardpool_service::{accounts, admin};
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_users))
        .routes(routes!(grant_admin))
        .routes(routes!(revoke_admin))
        .routes(routes!(suspend_user))
        .routes(routes!(reinstate_user))
        .routes(routes!(verify_host))
        .routes(routes!(unverify_host))
        .routes(routes!(delist_host))
        .routes(routes!(relist_host))
        .routes(routes!(list_audit))
}

/// `?q=` of the account list.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(default)]
pub struct UserSearch {
    /// Part of the email (empty: every account), at most 254 characters.
    q: Option<String>,
}

/// Accounts, newest first, at most 200; `q` searches their emails (admins only).
#[utoipa::path(get, path = "/users", operation_id = "list_users", tag = "admin", params(UserSearch),
    responses((status = 200, body = Vec<UserSummary>), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub async fn list_users(
    Caller(services, caller): Caller,
    ApiQuery(search): ApiQuery<UserSearch>,
) -> ApiResult<Json<Vec<UserSummary>>> {
    Ok(Json(accounts::list_users(&services, &caller, search.q.as_deref()).await?))
}

/// Makes an account an admin, with a reason (audited; admins only).
#[utoipa::path(post, path = "/users/{id}/admin", operation_id = "grant_admin", tag = "admin",
    params(("id" = i64, Path, description = "Account id")), request_body = AdminActionRequest,
    responses((status = 200, body = UserSummary), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "An admin already, or the caller", body = ErrorBody)))]
pub async fn grant_admin(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<AdminActionRequest>,
) -> ApiResult<Json<UserSummary>> {
    Ok(Json(admin::set_admin(&services, &caller, id.of("an account")?, true, &request.reason).await?))
}

/// Takes an account's admin role away, with a reason (audited; admins only, never their own).
#[utoipa::path(post, path = "/users/{id}/admin/revoke", operation_id = "revoke_admin", tag = "admin",
    params(("id" = i64, Path, description = "Account id")), request_body = AdminActionRequest,
    responses((status = 200, body = UserSummary), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "Not an admin, or the caller", body = ErrorBody)))]
pub async fn revoke_admin(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<AdminActionRequest>,
) -> ApiResult<Json<UserSummary>> {
    Ok(Json(admin::set_admin(&services, &caller, id.of("an account")?, false, &request.reason).await?))
}

/// Suspends an account: signed out everywhere, its rentals stopped and settled, its hosts
/// delisted (audited; admins only).
#[utoipa::path(post, path = "/users/{id}/suspend", operation_id = "suspend_user", tag = "admin",
    params(("id" = i64, Path, description = "Account id")), request_body = AdminActionRequest,
    responses((status = 200, body = UserSummary), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "Suspended already, or the caller", body = ErrorBody)))]
pub async fn suspend_user(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<AdminActionRequest>,
) -> ApiResult<Json<UserSummary>> {
    Ok(Json(admin::suspend(&services, &caller, id.of("an account")?, &request.reason).await?))
}

/// Lifts a suspension; the hosts it delisted return to the market (audited; admins only).
#[utoipa::path(post, path = "/users/{id}/reinstate", operation_id = "reinstate_user", tag = "admin",
    params(("id" = i64, Path, description = "Account id")), request_body = AdminActionRequest,
    responses((status = 200, body = UserSummary), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "Not suspended", body = ErrorBody)))]
pub async fn reinstate_user(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<AdminActionRequest>,
) -> ApiResult<Json<UserSummary>> {
    Ok(Json(admin::reinstate(&services, &caller, id.of("an account")?, &request.reason).await?))
}

/// Gives a host the verified badge renters can filter on (audited; admins only).
#[utoipa::path(post, path = "/admin/hosts/{id}/verify", operation_id = "verify_host", tag = "admin",
    params(("id" = i64, Path, description = "Host id")), request_body = AdminActionRequest,
    responses((status = 200, body = HostSummary), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "Verified already, or revoked", body = ErrorBody)))]
pub async fn verify_host(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<AdminActionRequest>,
) -> ApiResult<Json<HostSummary>> {
    Ok(Json(admin::set_verified(&services, &caller, id.of("a host")?, true, &request.reason).await?))
}

/// Takes a host's verified badge away (audited; admins only).
#[utoipa::path(post, path = "/admin/hosts/{id}/unverify", operation_id = "unverify_host", tag = "admin",
    params(("id" = i64, Path, description = "Host id")), request_body = AdminActionRequest,
    responses((status = 200, body = HostSummary), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "Not verified, or revoked", body = ErrorBody)))]
pub async fn unverify_host(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<AdminActionRequest>,
) -> ApiResult<Json<HostSummary>> {
    Ok(Json(admin::set_verified(&services, &caller, id.of("a host")?, false, &request.reason).await?))
}

/// Takes a host off the market (maintenance, abuse): its live rentals run on, nobody can book
/// it and its provider cannot list it until it is relisted (audited; admins only).
#[utoipa::path(post, path = "/admin/hosts/{id}/delist", operation_id = "delist_host", tag = "admin",
    params(("id" = i64, Path, description = "Host id")), request_body = AdminActionRequest,
    responses((status = 200, body = HostSummary), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "Delisted already, or revoked", body = ErrorBody)))]
pub async fn delist_host(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<AdminActionRequest>,
) -> ApiResult<Json<HostSummary>> {
    Ok(Json(admin::set_delisted(&services, &caller, id.of("a host")?, true, &request.reason).await?))
}

/// Ends an admin's delisting; the provider's own listing choice applies again (audited).
#[utoipa::path(post, path = "/admin/hosts/{id}/relist", operation_id = "relist_host", tag = "admin",
    params(("id" = i64, Path, description = "Host id")), request_body = AdminActionRequest,
    responses((status = 200, body = HostSummary), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, description = "Not delisted, or revoked", body = ErrorBody)))]
pub async fn relist_host(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<AdminActionRequest>,
) -> ApiResult<Json<HostSummary>> {
    Ok(Json(admin::set_delisted(&services, &caller, id.of("a host")?, false, &request.reason).await?))
}

/// The audit log, newest first: every admin action and role change (admins only).
#[utoipa::path(get, path = "/admin/audit", operation_id = "list_audit", tag = "admin", params(AuditQuery),
    responses((status = 200, body = AuditPage), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn list_audit(
    Caller(services, caller): Caller,
    ApiQuery(query): ApiQuery<AuditQuery>,
) -> ApiResult<Json<AuditPage>> {
    Ok(Json(admin::audit::list(&services, &caller, &query).await?))
}
