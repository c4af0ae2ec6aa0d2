//! `/api/v1/offers`: the marketplace search, open to everyone.

use crate::edges::{ApiQuery, ApiResult};
use axum::{Json, extract::State};
use cardpool_app::ssr::AppState;
use cardpool_domain::{
    error::ErrorBody,
    offers::{OfferPage, OfferQuery},
};
use cardpool_service::offers;
use utoipa_axum::{router::OpenApiRouter, routes};

/// This module's operations, each registered once: its route and its OpenAPI path.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_offers))
}

/// Free GPUs of listed, online hosts, one offer per host and GPU model, filtered and sorted.
#[utoipa::path(get, path = "/offers", operation_id = "list_offers", tag = "offers", security(()),
    params(OfferQuery),
    responses((status = 200, body = OfferPage), (status = 422, description = "A filter is malformed", body = ErrorBody)))]
pub async fn list_offers(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<OfferQuery>,
) -> ApiResult<Json<OfferPage>> {
    Ok(Json(offers::list_offers(&state.services, &query).await?))
}
