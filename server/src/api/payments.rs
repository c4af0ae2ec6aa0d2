//! `/api/v1/wallet*`, `/api/v1/earnings*`, `/api/v1/payouts`, `/api/v1/admin/credits`, and
//! Stripe's webhook endpoint `/stripe/webhook`.

use crate::edges::{ApiError, ApiJson, ApiQuery, ApiResult, Caller, PathId};
use axum::{
    Json,
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use cardpool_app::ssr::AppState;
use cardpool_domain::{
    AppError,
    error::ErrorBody,
    payments::{
        Adjustment, AdminCreditRequest, CreateTopUpRequest, Earnings, HistoryQuery, LedgerEntry, OnboardingLink,
        Payout, Receipt, RequestPayoutRequest, TopUp, TopUpCreated, Wallet,
    },
};
use cardpool_service::{
    payments::{self, CsvCursor, WebhookFailure, WebhookOutcome},
    payouts,
};
use futures_util::StreamExt;
use utoipa_axum::{router::OpenApiRouter, routes};

/// This module's operations, each registered once: its route and its OpenAPI path.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_wallet))
        .routes(routes!(create_top_up))
        .routes(routes!(get_top_up))
        .routes(routes!(list_transactions))
        .routes(routes!(export_transactions))
        .routes(routes!(get_receipt))
        .routes(routes!(get_earnings))
        .routes(routes!(list_earnings_entries))
        .routes(routes!(create_onboarding_link))
        .routes(routes!(request_payout))
        .routes(routes!(list_admin_credits, admin_credit))
}

/// The caller's wallet: balance, held funds and top-ups awaiting payment.
#[utoipa::path(get, path = "/wallet", operation_id = "get_wallet", tag = "payments",
    responses((status = 200, body = Wallet), (status = 401, body = ErrorBody)))]
pub async fn get_wallet(Caller(services, caller): Caller) -> ApiResult<Json<Wallet>> {
    Ok(Json(payments::get_wallet(&services, &caller).await?))
}

/// Starts a top-up and returns the Stripe Checkout URL to pay at. The wallet is credited when
/// Stripe confirms payment (webhook), not before.
#[utoipa::path(post, path = "/wallet/top-ups", operation_id = "create_top_up", tag = "payments",
    request_body = CreateTopUpRequest,
    responses((status = 201, body = TopUpCreated), (status = 422, body = ErrorBody), (status = 503, description = "Stripe unavailable", body = ErrorBody)))]
pub async fn create_top_up(
    Caller(services, caller): Caller,
    ApiJson(request): ApiJson<CreateTopUpRequest>,
) -> ApiResult<(StatusCode, Json<TopUpCreated>)> {
    Ok((StatusCode::CREATED, Json(payments::create_top_up(&services, &caller, &request).await?)))
}

/// One of the caller's top-ups.
#[utoipa::path(get, path = "/wallet/top-ups/{id}", operation_id = "get_top_up", tag = "payments",
    params(("id" = i64, Path, description = "Top-up id")),
    responses((status = 200, body = TopUp), (status = 404, body = ErrorBody)))]
pub async fn get_top_up(Caller(services, caller): Caller, id: PathId) -> ApiResult<Json<TopUp>> {
    Ok(Json(payments::get_top_up(&services, &caller, id.of("a top-up")?).await?))
}

/// A page of the caller's wallet history, newest first, with the running balance: the newest
/// 100 (`limit`, at most 500), or those before transaction `before`.
#[utoipa::path(get, path = "/wallet/transactions", operation_id = "list_transactions", tag = "payments",
    params(HistoryQuery),
    responses((status = 200, body = Vec<LedgerEntry>), (status = 401, body = ErrorBody)))]
pub async fn list_transactions(
    Caller(services, caller): Caller,
    ApiQuery(page): ApiQuery<HistoryQuery>,
) -> ApiResult<Json<Vec<LedgerEntry>>> {
    Ok(Json(payments::list_transactions(&services, &caller, &page).await?))
}

/// The caller's whole wallet history as CSV, streamed a page at a time.
#[utoipa::path(get, path = "/wallet/transactions.csv", operation_id = "export_transactions", tag = "payments",
    responses((status = 200, description = "CSV, oldest first", content_type = "text/csv"), (status = 401, body = ErrorBody)))]
pub async fn export_transactions(Caller(services, caller): Caller) -> ApiResult<Response> {
    // The first page is read before answering, so a failure is still an error status.
    let first = payments::transactions_csv_page(&services, &caller, CsvCursor::default()).await?;
    let pages =
        futures_util::stream::unfold(first.map(|(page, next)| (page, next, services, caller)), |state| async move {
            let (page, next, services, caller) = state?;
            let rest = match payments::transactions_csv_page(&services, &caller, next).await {
                Ok(rest) => rest.map(|(page, next)| (page, next, services, caller)),
                Err(_) => None, // already logged; the download ends short rather than hangs
            };
            Some((Ok::<_, std::io::Error>(page), rest))
        });
    let body = futures_util::stream::once(async { Ok(payments::CSV_HEADER.to_owned()) }).chain(pages);
    let mut response = axum::body::Body::from_stream(body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8"));
    headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"cardpool-transactions.csv\""),
    );
    Ok(response)
}

/// A receipt for one transaction on the caller's wallet.
#[utoipa::path(get, path = "/wallet/transactions/{id}/receipt", operation_id = "get_receipt", tag = "payments",
    params(("id" = i64, Path, description = "Ledger transaction id")),
    responses((status = 200, body = Receipt), (status = 404, body = ErrorBody)))]
pub async fn get_receipt(Caller(services, caller): Caller, id: PathId) -> ApiResult<Json<Receipt>> {
    Ok(Json(payments::get_receipt(&services, &caller, id.of("a transaction")?).await?))
}

/// The provider's earnings (pending, available, paid out), Connect status and payouts.
#[utoipa::path(get, path = "/earnings", operation_id = "get_earnings", tag = "payments",
    responses((status = 200, body = Earnings), (status = 403, description = "Not a provider", body = ErrorBody)))]
pub async fn get_earnings(Caller(services, caller): Caller) -> ApiResult<Json<Earnings>> {
    Ok(Json(payouts::get_earnings(&services, &caller).await?))
}

/// A page of the provider's earnings history, newest first (as `/wallet/transactions`).
#[utoipa::path(get, path = "/earnings/entries", operation_id = "list_earnings_entries", tag = "payments",
    params(HistoryQuery),
    responses((status = 200, body = Vec<LedgerEntry>), (status = 403, body = ErrorBody)))]
pub async fn list_earnings_entries(
    Caller(services, caller): Caller,
    ApiQuery(page): ApiQuery<HistoryQuery>,
) -> ApiResult<Json<Vec<LedgerEntry>>> {
    Ok(Json(payouts::list_earnings_entries(&services, &caller, &page).await?))
}

/// A Stripe Connect Express onboarding link (the account is created on first use).
#[utoipa::path(post, path = "/earnings/onboarding-link", operation_id = "create_onboarding_link", tag = "payments",
    responses((status = 201, body = OnboardingLink), (status = 403, body = ErrorBody), (status = 503, body = ErrorBody)))]
pub async fn create_onboarding_link(Caller(services, caller): Caller) -> ApiResult<(StatusCode, Json<OnboardingLink>)> {
    Ok((StatusCode::CREATED, Json(payouts::create_onboarding_link(&services, &caller).await?)))
}

/// Pays out available earnings (all of them when no amount is given).
#[utoipa::path(post, path = "/payouts", operation_id = "request_payout", tag = "payments",
    request_body = RequestPayoutRequest,
    responses((status = 201, body = Payout), (status = 402, description = "Not enough available earnings", body = ErrorBody), (status = 409, description = "Onboarding unfinished", body = ErrorBody)))]
pub async fn request_payout(
    Caller(services, caller): Caller,
    ApiJson(request): ApiJson<RequestPayoutRequest>,
) -> ApiResult<(StatusCode, Json<Payout>)> {
    Ok((StatusCode::CREATED, Json(payouts::request_payout(&services, &caller, &request).await?)))
}

/// An admin credits or refunds an account's wallet, with a reason (audited).
#[utoipa::path(post, path = "/admin/credits", operation_id = "admin_credit", tag = "payments",
    request_body = AdminCreditRequest,
    responses((status = 201, body = Adjustment), (status = 403, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn admin_credit(
    Caller(services, caller): Caller,
    ApiJson(request): ApiJson<AdminCreditRequest>,
) -> ApiResult<(StatusCode, Json<Adjustment>)> {
    Ok((StatusCode::CREATED, Json(payments::admin_adjust(&services, &caller, &request).await?)))
}

/// Every admin credit and refund (the audit trail).
#[utoipa::path(get, path = "/admin/credits", operation_id = "list_admin_credits", tag = "payments",
    responses((status = 200, body = Vec<Adjustment>), (status = 403, body = ErrorBody)))]
pub async fn list_admin_credits(Caller(services, caller): Caller) -> ApiResult<Json<Vec<Adjustment>>> {
    Ok(Json(payments::list_adjustments(&services, &caller).await?))
}

/// Stripe's webhook endpoint. A delivery that fails verification gets 400 and writes nothing;
/// one we could not process gets 5xx so Stripe retries it.
pub async fn stripe_webhook(State(state): State<AppState>, headers: HeaderMap, body: String) -> Response {
    let signature = headers.get("stripe-signature").and_then(|v| v.to_str().ok());
    let now = chrono::Utc::now().timestamp();
    match payments::handle_webhook(&state.services, &body, signature, now).await {
        Ok(WebhookOutcome::Applied(outcome)) => {
            Json(serde_json::json!({ "received": true, "outcome": outcome })).into_response()
        }
        Ok(WebhookOutcome::Duplicate) => {
            Json(serde_json::json!({ "received": true, "outcome": "duplicate" })).into_response()
        }
        Err(WebhookFailure::Rejected(reason)) => {
            (StatusCode::BAD_REQUEST, Json(ErrorBody::from(&AppError::invalid_field("payload", reason.to_string()))))
                .into_response()
        }
        Err(WebhookFailure::Failed(err)) => ApiError(err).into_response(),
    }
}
