//! The bell, webhooks and spend limits.

use cardpool_domain::{
    AppError,
    limits::SpendStatus,
    notifications::{NotificationPage, Webhook, WebhookDelivery},
    rentals::Rental,
    wire::JsonOut,
};
#[cfg(feature = "ssr")]
use cardpool_service::{notify, rentals, spending};
use leptos::prelude::*;

#[server(prefix = "/rpc", endpoint = "list_notifications", output = JsonOut)]
pub async fn list_notifications(before: Option<i64>) -> Result<NotificationPage, AppError> {
    crate::ssr::signed_in(async |req, caller| notify::list(&req.services, &caller, before).await).await
}

/// Marks every notification up to `up_to` (the newest shown) read.
#[server(prefix = "/rpc", endpoint = "mark_notifications_read", output = JsonOut)]
pub async fn mark_notifications_read(up_to: i64) -> Result<u64, AppError> {
    crate::ssr::signed_in(async |req, caller| notify::mark_read(&req.services, &caller, Some(up_to)).await).await
}

#[server(prefix = "/rpc", endpoint = "list_webhooks", output = JsonOut)]
pub async fn list_webhooks() -> Result<Vec<Webhook>, AppError> {
    crate::ssr::signed_in(async |req, caller| notify::webhooks::list(&req.services, &caller).await).await
}

#[server(prefix = "/rpc", endpoint = "create_webhook", output = JsonOut)]
pub async fn create_webhook(url: String) -> Result<Webhook, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        notify::webhooks::create(&req.services, &caller, &cardpool_domain::notifications::NewWebhook { url }).await
    })
    .await
}

#[server(prefix = "/rpc", endpoint = "delete_webhook", output = JsonOut)]
pub async fn delete_webhook(id: i64) -> Result<(), AppError> {
    crate::ssr::signed_in(async |req, caller| notify::webhooks::delete(&req.services, &caller, id).await).await
}

#[server(prefix = "/rpc", endpoint = "send_test_event", output = JsonOut)]
pub async fn send_test_event(id: i64) -> Result<WebhookDelivery, AppError> {
    crate::ssr::signed_in(async |req, caller| notify::webhooks::send_test(&req.services, &caller, id).await).await
}

#[server(prefix = "/rpc", endpoint = "list_deliveries", output = JsonOut)]
pub async fn list_deliveries(id: i64) -> Result<Vec<WebhookDelivery>, AppError> {
    crate::ssr::signed_in(async |req, caller| notify::webhooks::deliveries(&req.services, &caller, id, None).await)
        .await
}

#[server(prefix = "/rpc", endpoint = "get_limits", output = JsonOut)]
pub async fn get_limits() -> Result<SpendStatus, AppError> {
    crate::ssr::signed_in(async |req, caller| spending::spend_status(&req.services, &caller).await).await
}

/// The wallet page's limits form: dollars, blank for none.
#[server(prefix = "/rpc", endpoint = "set_limits", output = JsonOut)]
pub async fn set_limits(daily: String, monthly: String) -> Result<SpendStatus, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        let limits = cardpool_domain::limits::SpendLimitsForm { daily, monthly }.parse()?;
        spending::set_limits(&req.services, &caller, limits).await
    })
    .await
}

/// The rental page's caps form: dollars and hours, blank for none.
#[server(prefix = "/rpc", endpoint = "set_rental_limits", output = JsonOut)]
pub async fn set_rental_limits(id: i64, max_cost: String, max_hours: String) -> Result<Rental, AppError> {
    crate::ssr::signed_in(async |req, caller| {
        use cardpool_domain::limits::{RentalLimits, parse_optional_dollars, parse_optional_hours};
        let mut fields = cardpool_domain::FieldErrors::new();
        let limits = RentalLimits {
            max_cost_micros: parse_optional_dollars(&max_cost, "max_cost", &mut fields),
            max_duration_secs: parse_optional_hours(&max_hours, "max_hours", &mut fields),
        };
        if !fields.is_empty() {
            return Err(AppError::invalid_fields(fields));
        }
        rentals::set_rental_limits(&req.services, &caller, id, limits).await
    })
    .await
}
