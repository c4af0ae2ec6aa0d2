//! `/api/v1/rentals`: book an offer, list and watch rentals, stop them, change a spot bid.

use crate::edges::{ApiError, ApiJson, ApiResult, Caller};
use axum::{
    Json,
    extract::{Path, State, rejection::PathRejection},
    http::StatusCode,
};
use cardpool_app::ssr::AppState;
use cardpool_domain::{
    AppError,
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

fn id_of(id: Result<Path<i64>, PathRejection>) -> Result<i64, ApiError> {
    id.map(|Path(id)| id).map_err(|_| ApiError(AppError::invalid_field("id", "not a rental id")))
}

/// Books GPUs of one offer: on-demand (now, until stopped), reserved (`starts_at` + `hours`,
/// prepaid) or spot (`bid_micros`, preemptible). The agent then attaches the GPUs; watch the
/// rental's state with `get_rental`.
#[utoipa::path(post, path = "/rentals", operation_id = "book_offer", tag = "rentals",
    security(("bearer" = []), ("session" = [])),
    request_body = BookOfferRequest,
    responses((status = 201, body = Rental), (status = 402, description = "Balance too low (the shortfall is in the message)", body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, description = "Not enough free GPUs", body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn book_offer(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiJson(request): ApiJson<BookOfferRequest>,
) -> ApiResult<(StatusCode, Json<Rental>)> {
    Ok((StatusCode::CREATED, Json(rentals::book_offer(&state.services, &caller, &request).await?)))
}

/// The caller's rentals, newest first.
#[utoipa::path(get, path = "/rentals", operation_id = "list_rentals", tag = "rentals",
    security(("bearer" = []), ("session" = [])),
    responses((status = 200, body = Vec<Rental>), (status = 401, body = ErrorBody)))]
pub async fn list_rentals(State(state): State<AppState>, Caller(caller): Caller) -> ApiResult<Json<Vec<Rental>>> {
    Ok(Json(rentals::list_rentals(&state.services, &caller).await?))
}

/// One rental and its timeline.
#[utoipa::path(get, path = "/rentals/{id}", operation_id = "get_rental", tag = "rentals",
    security(("bearer" = []), ("session" = [])),
    params(("id" = i64, Path, description = "Rental id")),
    responses((status = 200, body = RentalDetail), (status = 404, body = ErrorBody)))]
pub async fn get_rental(
    State(state): State<AppState>,
    Caller(caller): Caller,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult<Json<RentalDetail>> {
    Ok(Json(rentals::get_rental(&state.services, &caller, id_of(id)?).await?))
}

/// Stops a rental: billing ends now and the agent releases the GPUs. A reservation that has
/// not started is cancelled and refunded.
#[utoipa::path(post, path = "/rentals/{id}/stop", operation_id = "stop_rental", tag = "rentals",
    security(("bearer" = []), ("session" = [])),
    params(("id" = i64, Path, description = "Rental id")),
    responses((status = 200, body = Rental), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn stop_rental(
    State(state): State<AppState>,
    Caller(caller): Caller,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult<Json<Rental>> {
    Ok(Json(rentals::stop_rental(&state.services, &caller, id_of(id)?).await?))
}

/// Changes a live spot rental's bid per GPU-hour.
#[utoipa::path(put, path = "/rentals/{id}/bid", operation_id = "change_bid", tag = "rentals",
    security(("bearer" = []), ("session" = [])),
    params(("id" = i64, Path, description = "Rental id")),
    request_body = ChangeBidRequest,
    responses((status = 200, body = Rental), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn change_bid(
    State(state): State<AppState>,
    Caller(caller): Caller,
    id: Result<Path<i64>, PathRejection>,
    ApiJson(request): ApiJson<ChangeBidRequest>,
) -> ApiResult<Json<Rental>> {
    Ok(Json(rentals::change_bid(&state.services, &caller, id_of(id)?, request.bid_micros).await?))
}
