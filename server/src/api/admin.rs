//! `/api/v1/admin/*` and `/api/v1/users*`: the admin console's operations and views (accounts,
//! host histories, every rental, revenue and occupancy reports). Each action takes a reason and
//! writes one line of the audit log (`/api/v1/admin/audit`); the service checks that the
//! caller is an admin.

use crate::edges::{ApiJson, ApiQuery, ApiResult, Caller, PathId};
use axum::Json;
use cardpool_app::ssr::AppState;
use cardpool_domain::{
    account::UserSummary,
    admin::{
        AccountDetail, AdminActionRequest, AdminRental, AdminRentalPage, AdminRentalQuery, AuditPage, AuditQuery,
        HostHistory, RentalRefundRequest,
    },
    error::ErrorBody,
    host::HostSummary,
    reports::{Report, ReportQuery},
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
        .routes(routes!(get_account))
        .routes(routes!(host_history))
        .routes(routes!(list_all_rentals))
        .routes(routes!(refund_rental))
        .routes(routes!(get_report))
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

/// An account with its balances, spend, payouts, rental counts and hosts (admins only).
#[utoipa::path(get, path = "/users/{id}", operation_id = "get_account", tag = "admin",
    params(("id" = i64, Path, description = "Account id")),
    responses((status = 200, body = AccountDetail), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn get_account(Caller(services, caller): Caller, id: PathId) -> ApiResult<Json<AccountDetail>> {
    Ok(Json(admin::records::account(&services, &caller, id.of("an account")?).await?))
}

/// A host's status changes, alerts and admin actions, newest first (admins only).
#[utoipa::path(get, path = "/admin/hosts/{id}/history", operation_id = "host_history", tag = "admin",
    params(("id" = i64, Path, description = "Host id")),
    responses((status = 200, body = HostHistory), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn host_history(Caller(services, caller): Caller, id: PathId) -> ApiResult<Json<HostHistory>> {
    Ok(Json(admin::records::host(&services, &caller, id.of("a host")?).await?))
}

/// Every rental, newest first, filtered by state, kind, host, renter and booking day (admins
/// only).
#[utoipa::path(get, path = "/admin/rentals", operation_id = "list_all_rentals", tag = "admin", params(AdminRentalQuery),
    responses((status = 200, body = AdminRentalPage), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn list_all_rentals(
    Caller(services, caller): Caller,
    ApiQuery(query): ApiQuery<AdminRentalQuery>,
) -> ApiResult<Json<AdminRentalPage>> {
    Ok(Json(admin::rentals::list(&services, &caller, &query).await?))
}

/// Refunds part or all of what a rental charged to its renter's wallet, split as the charge
/// was (provider's share, platform fee), with a reason (audited; admins only).
#[utoipa::path(post, path = "/admin/rentals/{id}/refund", operation_id = "refund_rental", tag = "admin",
    params(("id" = i64, Path, description = "Rental id")), request_body = RentalRefundRequest,
    responses((status = 200, body = AdminRental), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 422, description = "More than is left to refund, or no reason", body = ErrorBody)))]
pub async fn refund_rental(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<RentalRefundRequest>,
) -> ApiResult<Json<AdminRental>> {
    Ok(Json(admin::rentals::refund(&services, &caller, id.of("a rental")?, &request).await?))
}

/// Revenue (gross, refunds, the platform's fees) and occupancy (GPU-time billed over GPU-time
/// online) per day, week or month (admins only).
#[utoipa::path(get, path = "/admin/reports", operation_id = "get_report", tag = "admin", params(ReportQuery),
    responses((status = 200, body = Report), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn get_report(
    Caller(services, caller): Caller,
    ApiQuery(query): ApiQuery<ReportQuery>,
) -> ApiResult<Json<Report>> {
    Ok(Json(admin::reports::report(&services, &caller, &query).await?))
}
