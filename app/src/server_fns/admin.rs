//! The admin console's server functions: accounts, hosts, rentals and refunds, reports and the
//! audit log.

use cardpool_domain::{
    AppError,
    account::UserSummary,
    admin::{AccountDetail, AdminRental, AdminRentalPage, AdminRentalQuery, AuditPage, AuditQuery, HostHistory},
    host::HostSummary,
    reports::{Report, ReportQuery},
    wire::JsonOut,
};
#[cfg(feature = "ssr")]
use cardpool_service::{accounts, admin};
use leptos::{prelude::*, server_fn::codec::Json};

#[server(prefix = "/rpc", endpoint = "list_users", output = JsonOut)]
pub async fn list_users(q: Option<String>) -> Result<Vec<UserSummary>, AppError> {
    crate::ssr::signed_in(async |req, caller| accounts::list_users(&req.services, &caller, q.as_deref()).await).await
}

/// `action`: `grant_admin`, `revoke_admin`, `suspend` or `reinstate`.
#[server(prefix = "/rpc", endpoint = "account_action", output = JsonOut)]
pub async fn account_action(user_id: i64, action: String, reason: String) -> Result<UserSummary, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        let services = &req.services;
        match action.as_str() {
            "grant_admin" => admin::set_admin(services, &caller, user_id, true, &reason).await,
            "revoke_admin" => admin::set_admin(services, &caller, user_id, false, &reason).await,
            "suspend" => admin::suspend(services, &caller, user_id, &reason).await,
            "reinstate" => admin::reinstate(services, &caller, user_id, &reason).await,
            _ => Err(AppError::invalid_field("action", "choose what to do")),
        }
    })
    .await
}

/// `action`: `verify`, `unverify`, `delist` or `relist`.
#[server(prefix = "/rpc", endpoint = "host_action", output = JsonOut)]
pub async fn host_action(host_id: i64, action: String, reason: String) -> Result<HostSummary, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        let services = &req.services;
        match action.as_str() {
            "verify" => admin::set_verified(services, &caller, host_id, true, &reason).await,
            "unverify" => admin::set_verified(services, &caller, host_id, false, &reason).await,
            "delist" => admin::set_delisted(services, &caller, host_id, true, &reason).await,
            "relist" => admin::set_delisted(services, &caller, host_id, false, &reason).await,
            _ => Err(AppError::invalid_field("action", "choose what to do")),
        }
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "list_audit", input = Json, output = JsonOut)]
pub async fn list_audit(query: AuditQuery) -> Result<AuditPage, AppError> {
    crate::ssr::signed_in(async |req, caller| admin::audit::list(&req.services, &caller, &query).await).await
}

#[server(prefix = "/rpc", endpoint = "account_detail", output = JsonOut)]
pub async fn get_account_detail(user_id: i64) -> Result<AccountDetail, AppError> {
    crate::ssr::signed_in(async |req, caller| admin::records::account(&req.services, &caller, user_id).await).await
}

#[server(prefix = "/rpc", endpoint = "host_history", output = JsonOut)]
pub async fn get_host_history(host_id: i64) -> Result<HostHistory, AppError> {
    crate::ssr::signed_in(async |req, caller| admin::records::host(&req.services, &caller, host_id).await).await
}

#[server(prefix = "/rpc", endpoint = "list_all_rentals", input = Json, output = JsonOut)]
pub async fn list_all_rentals(query: AdminRentalQuery) -> Result<AdminRentalPage, AppError> {
    crate::ssr::signed_in(async |req, caller| admin::rentals::list(&req.services, &caller, &query).await).await
}

#[server(prefix = "/rpc", endpoint = "refund_rental", output = JsonOut)]
pub async fn refund_rental(rental_id: i64, amount: String, reason: String) -> Result<AdminRental, AppError> {
    let request = cardpool_domain::admin::RentalRefundRequest { amount, reason };
    crate::ssr::signed_in(async |req, caller| admin::rentals::refund(&req.services, &caller, rental_id, &request).await)
        .await
}

#[server(prefix = "/rpc", endpoint = "admin_report", input = Json, output = JsonOut)]
pub async fn admin_report(query: ReportQuery) -> Result<Report, AppError> {
    crate::ssr::signed_in(async |req, caller| admin::reports::report(&req.services, &caller, &query).await).await
}
