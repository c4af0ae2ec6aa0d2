//! `/api/v1/offers` and `/api/v1/advice`: the marketplace search and the cost advisor, open to
//! everyone.

use crate::edges::{ApiQuery, ApiResult};
use axum::{Json, extract::State};
use cardpool_app::ssr::AppState;
use cardpool_domain::{
    advisor::{Advice, AdviceRequest},
    error::ErrorBody,
    offers::{OfferPage, OfferQuery},
};
use cardpool_service::{advisor, offers};
use utoipa_axum::{router::OpenApiRouter, routes};

/// This module's operations, each registered once: its route and its OpenAPI path.
pub(super) fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_offers)).routes(routes!(get_advice))
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

/// The cost advisor: for a job on one offer (GPUs × hours, a deadline, whether it can be
/// interrupted and how often it checkpoints), the mix of reserved, on-demand and spot that is
/// cheapest in expectation and still meets the deadline, with the expected cost, its likely
/// range, the saving against all on-demand and what it was based on (the offer's prices, its
/// spot price history and preemptions).
#[utoipa::path(get, path = "/advice", operation_id = "get_advice", tag = "offers", security(()),
    params(AdviceRequest),
    responses((status = 200, body = Advice), (status = 404, description = "No such offer with free GPUs", body = ErrorBody),
        (status = 422, body = ErrorBody)))]
pub async fn get_advice(
    State(state): State<AppState>,
    ApiQuery(job): ApiQuery<AdviceRequest>,
) -> ApiResult<Json<Advice>> {
    Ok(Json(advisor::advise(&state.services, &job).await?))
}
