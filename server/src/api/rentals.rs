//! `/api/v1/rentals`: book an offer, list and watch rentals, stop them, change a spot bid.

use crate::edges::{ApiJson, ApiResult, Caller, PathId};
use axum::{Json, http::StatusCode};
use cardpool_app::ssr::AppState;
use cardpool_domain::{
    error::ErrorBody,
    rentals::{BookOfferRequest, ChangeBidRequest, Rental, RentalDetail},
};
use cardpool_service::rentals;
use utoipa_axum::{router::OpenApiRouter, routes};

/// This module's operations, each registered once: its route and its OpenAPI path.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_rentals, book_offer))
        .routes(routes!(get_rental))
        .routes(routes!(stop_rental))
        .routes(routes!(change_bid))
}

/// Books GPUs of one offer: on-demand (now, until stopped), reserved (`starts_at` + `hours`,
/// prepaid) or spot (`bid_micros`, preemptible). The agent then attaches the GPUs; watch the
/// rental's state with `get_rental`.
#[utoipa::path(post, path = "/rentals", operation_id = "book_offer", tag = "rentals",
    request_body = BookOfferRequest,
    responses((status = 201, body = Rental), (status = 402, description = "Balance too low (the shortfall is in the message)", body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, description = "Not enough free GPUs", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn book_offer(
    Caller(services, caller): Caller,
    ApiJson(request): ApiJson<BookOfferRequest>,
) -> ApiResult<(StatusCode, Json<Rental>)> {
    Ok((StatusCode::CREATED, Json(rentals::book_offer(&services, &caller, &request).await?)))
}

/// The caller's rentals, newest first.
#[utoipa::path(get, path = "/rentals", operation_id = "list_rentals", tag = "rentals",
    responses((status = 200, body = Vec<Rental>), (status = 401, body = ErrorBody)))]
pub async fn list_rentals(Caller(services, caller): Caller) -> ApiResult<Json<Vec<Rental>>> {
    Ok(Json(rentals::list_rentals(&services, &caller).await?))
}

/// One rental and its timeline.
#[utoipa::path(get, path = "/rentals/{id}", operation_id = "get_rental", tag = "rentals",
    params(("id" = i64, Path, description = "Rental id")),
    responses((status = 200, body = RentalDetail), (status = 404, body = ErrorBody)))]
pub async fn get_rental(Caller(services, caller): Caller, id: PathId) -> ApiResult<Json<RentalDetail>> {
    Ok(Json(rentals::get_rental(&services, &caller, id.of("a rental")?).await?))
}

/// Stops a rental: billing ends now and the agent releases the GPUs. A reservation that has
/// not started is cancelled and refunded.
#[utoipa::path(post, path = "/rentals/{id}/stop", operation_id = "stop_rental", tag = "rentals",
    params(("id" = i64, Path, description = "Rental id")),
    responses((status = 200, body = Rental), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn stop_rental(Caller(services, caller): Caller, id: PathId) -> ApiResult<Json<Rental>> {
    Ok(Json(rentals::stop_rental(&services, &caller, id.of("a rental")?).await?))
}

/// Changes a live spot rental's bid per GPU-hour.
#[utoipa::path(put, path = "/rentals/{id}/bid", operation_id = "change_bid", tag = "rentals",
    params(("id" = i64, Path, description = "Rental id")),
    request_body = ChangeBidRequest,
    responses((status = 200, body = Rental), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn change_bid(
    Caller(services, caller): Caller,
    id: PathId,
    ApiJson(request): ApiJson<ChangeBidRequest>,
) -> ApiResult<Json<Rental>> {
    Ok(Json(rentals::change_bid(&services, &caller, id.of("a rental")?, request.bid_micros).await?))
}
