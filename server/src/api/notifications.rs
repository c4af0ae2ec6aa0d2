//! `/api/v1/notifications`, `/api/v1/webhooks*` and `/api/v1/limits`: what Cardpool tells an
//! account (the bell and its signed webhooks) and the spend limits it enforces.

use crate::edges::{ApiJson, ApiQuery, ApiResult, Caller, PathId};
use axum::{Json, http::StatusCode};
use cardpool_app::ssr::AppState;
use cardpool_domain::{
    error::ErrorBody,
    limits::{RentalLimits, SpendLimits, SpendStatus},
    notifications::{NewWebhook, NotificationPage, Webhook, WebhookDelivery},
    rentals::Rental,
};
use cardpool_service::{notify, rentals, spending};
use serde::{Deserialize, Serialize};
use utoipa_axum::{router::OpenApiRouter, routes};

pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_notifications))
        .routes(routes!(mark_notifications_read))
        .routes(routes!(list_webhooks, create_webhook))
        .routes(routes!(delete_webhook))
        .routes(routes!(send_test_event))
        .routes(routes!(list_deliveries))
        .routes(routes!(get_limits, set_limits))
        .routes(routes!(set_rental_limits))
}

/// `?before=` of a page that goes back in time.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(default)]
pub struct Before {
    /// The `next_before` of the previous page (ids older than it).
    before: Option<i64>,
}

/// The caller's notifications, newest first, 50 a page, with the unread count.
#[utoipa::path(get, path = "/notifications", operation_id = "list_notifications", tag = "notifications", params(Before),
    responses((status = 200, body = NotificationPage), (status = 401, body = ErrorBody)))]
pub async fn list_notifications(
    Caller(services, caller): Caller,
    ApiQuery(page): ApiQuery<Before>,
) -> ApiResult<Json<NotificationPage>> {
    Ok(Json(notify::list(&services, &caller, page.before).await?))
}

/// Which notifications to mark read.
#[derive(Debug, Default, Deserialize, Serialize, utoipa::ToSchema)]
pub struct MarkRead {
    /// The newest id seen: it and older ones are marked read (none: all of them).
    #[serde(default)]
    pub up_to: Option<i64>,
}

/// How many were marked.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Marked {
    pub marked: u64,
}

/// Marks the caller's notifications read.
#[utoipa::path(post, path = "/notifications/read", operation_id = "mark_notifications_read", tag = "notifications",
    request_body = MarkRead, responses((status = 200, body = Marked), (status = 401, body = ErrorBody)))]
pub async fn mark_notifications_read(
    Caller(services, caller): Caller,
    ApiJson(request): ApiJson<MarkRead>,
) -> ApiResult<Json<Marked>> {
    Ok(Json(Marked { marked: notify::mark_read(&services, &caller, request.up_to).await? }))
}

/// The caller's webhooks (never their secrets).
#[utoipa::path(get, path = "/webhooks", operation_id = "list_webhooks", tag = "notifications",
    responses((status = 200, body = Vec<Webhook>), (status = 401, body = ErrorBody)))]
pub async fn list_webhooks(Caller(services, caller): Caller) -> ApiResult<Json<Vec<Webhook>>> {
    Ok(Json(notify::webhooks::list(&services, &caller).await?))
}

/// Registers a webhook: every event of the account is POSTed to it, signed (see the
/// `Cardpool-Signature` scheme in the README). The `secret` is in this answer only.
#[utoipa::path(post, path = "/webhooks", operation_id = "create_webhook", tag = "notifications",
    request_body = NewWebhook,
    responses((status = 201, body = Webhook), (status = 401, body = ErrorBody),
        (status = 409, description = "Ten webhooks already", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create_webhook(
    Caller(services, caller): Caller,
    ApiJson(request): ApiJson<NewWebhook>,
) -> ApiResult<(StatusCode, Json<Webhook>)> {
    Ok((StatusCode::CREATED, Json(notify::webhooks::create(&services, &caller, &request).await?)))
}

/// Deletes a webhook: nothing more is sent to it.
#[utoipa::path(delete, path = "/webhooks/{id}", operation_id = "delete_webhook", tag = "notifications",
    params(("id" = i64, Path, description = "Webhook id")),
    responses((status = 204, description = "Deleted"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn delete_webhook(Caller(services, caller): Caller, id: PathId) -> ApiResult<StatusCode> {
    notify::webhooks::delete(&services, &caller, id.of("a webhook")?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sends a `test` event to one webhook within seconds; its delivery is in the answer and the log.
#[utoipa::path(post, path = "/webhooks/{id}/test", operation_id = "send_test_event", tag = "notifications",
    params(("id" = i64, Path, description = "Webhook id")),
    responses((status = 202, body = WebhookDelivery), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn send_test_event(
    Caller(services, caller): Caller,
    id: PathId,
) -> ApiResult<(StatusCode, Json<WebhookDelivery>)> {
    Ok((StatusCode::ACCEPTED, Json(notify::webhooks::send_test(&services, &caller, id.of("a webhook")?).await?)))
}

/// A webhook's delivery log, newest first, 50 a page.
#[utoipa::path(get, path = "/webhooks/{id}/deliveries", operation_id = "list_deliveries", tag = "notifications",
    params(("id" = i64, Path, description = "Webhook id"), Before),
    responses((status = 200, body = Vec<WebhookDelivery>), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub async fn list_deliveries(
    Caller(services, caller): Caller,
    id: PathId,
    ApiQuery(page): ApiQuery<Before>,
) -> ApiResult<Json<Vec<WebhookDelivery>>> {
    Ok(Json(notify::webhooks::deliveries(&services, &caller, id.of("a webhook")?, page.before).await?))
}

/// The caller's daily and monthly spend limits and what was spent against them.
#[utoipa::path(get, path = "/limits", operation_id = "get_limits", tag = "notifications",
    responses((status = 200, body = SpendStatus), (status = 401, body = ErrorBody)))]
pub async fn get_limits(Caller(services, caller): Caller) -> ApiResult<Json<SpendStatus>> {
    Ok(Json(spending::spend_status(&services, &caller).await?))
}

/// Sets the caller's spend limits (omit or `null`: no limit). Billing stops pay-as-you-go
/// rentals at a limit; booking refuses what a reached limit would stop.
#[utoipa::path(put, path = "/limits", operation_id = "set_limits", tag = "notifications",
    request_body = SpendLimits,
    responses((status = 200, body = SpendStatus), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_limits(
    Caller(services, caller): Caller,
    ApiJson(limits): ApiJson<SpendLimits>,
) -> ApiResult<Json<SpendStatus>> {
    Ok(Json(spending::set_limits(&services, &caller, limits).await?))
}

/// Sets a live on-demand or spot rental's maximum cost and duration (`null`: none). A cap
/// already passed stops it now, billed up to the cap.
#[utoipa::path(put, path = "/rentals/{id}/limits", operation_id = "set_rental_limits", tag = "rentals",
    params(("id" = i64, Path, description = "Rental id")), request_body = RentalLimits,
    responses((status = 200, body = Rental), (status = 404, body = ErrorBody),
        (status = 409, description = "A reservation, or ended", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn set_rental_limits(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(limits): ApiJson<RentalLimits>,
) -> ApiResult<Json<Rental>> {
    Ok(Json(rentals::set_rental_limits(&services, &caller, id.of("a rental")?, limits).await?))
}
