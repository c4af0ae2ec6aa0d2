//! Webhooks: the URLs an account asked to receive its events at. A URL is checked when it is
//! registered (https, no credentials, not an address inside the platform) and again, with
//! every address its name resolves to, when a delivery is sent (see `delivery`), so a
//! renter cannot point Cardpool at its own network.
//!
//! Each webhook has its own signing secret (`whsec_...`). Unlike a password or an API token it
//! cannot be stored as a digest, since signing needs it; it is shown once, when the webhook is
//! made, and a leaked one is replaced by deleting the webhook and making another.

use super::{Notice, emit_to};
use crate::{AppError, AppResult, Services, auth::Principal, db::DbResultExt, entities::*, secrets::new_secret};
use cardpool_domain::notifications::{
    DeliveryState, EventKind, MAX_URL_CHARS, MAX_WEBHOOKS, NewWebhook, Webhook, WebhookDelivery,
};
use chrono::Utc;
use reqwest::Url;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, IntoActiveModel, QueryFilter,
    QueryOrder, QuerySelect,
};
use std::net::IpAddr;

/// Deliveries one page of the log shows.
pub const DELIVERY_PAGE: u64 = 50;
/// The least time between two test events to one webhook, seconds.
pub const TEST_EVERY_SECS: i64 = 5;

/// Webhook tunables.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// Allow `http://` and addresses on this machine or its private networks (development and
    /// tests only: it lets accounts make the server call its neighbours).
    pub allow_local_targets: bool,
    /// The first retry's delay, seconds; each later one waits three times longer.
    pub retry_base_secs: u64,
    /// Attempts before a delivery is given up.
    pub max_attempts: u32,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings { allow_local_targets: false, retry_base_secs: 10, max_attempts: 8 }
    }
}

/// The ids of the account's webhooks that take deliveries.
pub(super) async fn live_ids(conn: &impl ConnectionTrait, user_id: i64) -> AppResult<Vec<i64>> {
    webhooks::Entity::find()
        .select_only()
        .column(webhooks::Column::Id)
        .filter(webhooks::Column::UserId.eq(user_id))
        .filter(webhooks::Column::DeletedAt.is_null())
        .into_tuple()
        .all(conn)
        .await
        .context("finding webhooks")
}

/// Whether `ip` is reachable on the public internet (not this machine, a private or
/// link-local network, a cloud metadata address, multicast or reserved space).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_unspecified()
                || v4.is_multicast()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && c == 0)
                || (a == 198 && (18..20).contains(&b))
                || a >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || first == 0x2001 && v6.segments()[1] == 0xdb8)
        }
    }
}

/// `raw` as a URL deliveries may go to, or why not.
pub fn check_url(raw: &str, settings: &WebhookSettings) -> AppResult<Url> {
    let bad = |why: &str| AppError::invalid_field("url", why);
    let raw = raw.trim();
    if raw.is_empty() || raw.chars().count() > MAX_URL_CHARS {
        return Err(bad("a URL of at most 2048 characters"));
    }
    let url = Url::parse(raw).map_err(|_| bad("a full URL, e.g. https://example.com/cardpool"))?;
    match url.scheme() {
        "https" => {}
        "http" if settings.allow_local_targets => {}
        _ => return Err(bad("an https:// URL")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("a URL without credentials in it (check the signature instead)"));
    }
    let local = match url.host() {
        None => return Err(bad("a URL with a host")),
        Some(url::Host::Ipv4(ip)) => !is_public(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => !is_public(IpAddr::V6(ip)),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            name == "localhost" || name.ends_with(".localhost") || name.ends_with(".internal") || !name.contains('.')
        }
    };
    if local && !settings.allow_local_targets {
        return Err(bad("a public address (not this machine or a private network)"));
    }
    Ok(url)
}

fn dto(row: webhooks::Model, secret: Option<String>) -> Webhook {
    Webhook { id: row.id, url: row.url, created_at: row.created_at, secret }
}

/// Registers a webhook for the caller; the answer carries its signing secret, once.
pub async fn create(services: &Services, principal: &Principal, request: &NewWebhook) -> AppResult<Webhook> {
    let url = check_url(&request.url, &services.settings.webhooks)?;
    let txn = services.begin_write().await.context("starting webhook")?;
    if live_ids(&txn, principal.user_id).await?.len() >= MAX_WEBHOOKS {
        return Err(AppError::conflict(format!("an account has at most {MAX_WEBHOOKS} webhooks; delete one first")));
    }
    let secret = new_secret("whsec_");
    let row = webhooks::ActiveModel {
        user_id: Set(principal.user_id),
        url: Set(url.to_string()),
        secret: Set(secret.clone()),
        created_at: Set(Utc::now()),
        deleted_at: Set(None),
        ..Default::default()
    }
    .insert(&txn)
    .await
    .context("saving webhook")?;
    txn.commit().await.context("committing webhook")?;
    Ok(dto(row, Some(secret)))
}

/// The caller's webhooks.
pub async fn list(services: &Services, principal: &Principal) -> AppResult<Vec<Webhook>> {
    Ok(webhooks::Entity::find()
        .filter(webhooks::Column::UserId.eq(principal.user_id))
        .filter(webhooks::Column::DeletedAt.is_null())
        .order_by_asc(webhooks::Column::Id)
        .all(&services.db)
        .await
        .context("loading webhooks")?
        .into_iter()
        .map(|w| dto(w, None))
        .collect())
}

async fn owned(services: &Services, principal: &Principal, webhook_id: i64) -> AppResult<webhooks::Model> {
    webhooks::Entity::find_by_id(webhook_id)
        .filter(webhooks::Column::UserId.eq(principal.user_id))
        .filter(webhooks::Column::DeletedAt.is_null())
        .one(&services.db)
        .await
        .context("loading webhook")?
        .ok_or_else(|| AppError::not_found("webhook"))
}

/// Removes one of the caller's webhooks: nothing more is sent to it (its pending deliveries
/// are given up); its log stays readable until then.
pub async fn delete(services: &Services, principal: &Principal, webhook_id: i64) -> AppResult<()> {
    let row = owned(services, principal, webhook_id).await?;
    let txn = services.begin_write().await.context("starting webhook removal")?;
    let mut update = row.into_active_model();
    update.deleted_at = Set(Some(Utc::now()));
    update.update(&txn).await.context("removing webhook")?;
    webhook_deliveries::Entity::update_many()
        .col_expr(webhook_deliveries::Column::State, DeliveryState::Failed.as_str().into())
        .col_expr(webhook_deliveries::Column::NextAttemptAt, Option::<chrono::DateTime<Utc>>::None.into())
        .col_expr(webhook_deliveries::Column::LastError, "the webhook was deleted".into())
        .filter(webhook_deliveries::Column::WebhookId.eq(webhook_id))
        .filter(webhook_deliveries::Column::State.eq(DeliveryState::Pending.as_str()))
        .exec(&txn)
        .await
        .context("giving up deliveries")?;
    txn.commit().await.context("committing webhook removal")
}

/// Queues a `test` event to this one webhook ("send test event"); it goes out within seconds.
/// One per webhook per [`TEST_EVERY_SECS`], so the button cannot make Cardpool flood a URL.
pub async fn send_test(services: &Services, principal: &Principal, webhook_id: i64) -> AppResult<WebhookDelivery> {
    let hook = owned(services, principal, webhook_id).await?;
    let now = Utc::now();
    let last_test: Option<chrono::DateTime<Utc>> = webhook_deliveries::Entity::find()
        .select_only()
        .column(webhook_deliveries::Column::CreatedAt)
        .filter(webhook_deliveries::Column::WebhookId.eq(hook.id))
        .filter(webhook_deliveries::Column::Event.eq(EventKind::Test.as_str()))
        .order_by_desc(webhook_deliveries::Column::Id)
        .into_tuple()
        .one(&services.db)
        .await
        .context("loading the last test")?;
    if let Some(wait) = last_test.map(|at| TEST_EVERY_SECS - (now - at).num_seconds()).filter(|w| *w > 0) {
        return Err(AppError::RateLimited { retry_after_secs: u64::try_from(wait).unwrap_or(1) });
    }
    let txn = services.begin_write().await.context("starting test event")?;
    let notice = Notice::new(
        principal.user_id,
        EventKind::Test,
        "Test event",
        format!("A test event for the webhook at {}.", hook.url),
    )
    .data(serde_json::json!({ "webhook_id": hook.id }));
    let notification = emit_to(&txn, notice, now, Some(hook.id)).await?.ok_or(AppError::Internal)?;
    let row = webhook_deliveries::Entity::find()
        .filter(webhook_deliveries::Column::NotificationId.eq(notification))
        .filter(webhook_deliveries::Column::WebhookId.eq(hook.id))
        .one(&txn)
        .await
        .context("loading test delivery")?
        .ok_or(AppError::Internal)?;
    txn.commit().await.context("committing test event")?;
    Ok(delivery_dto(row))
}

pub(super) fn delivery_dto(row: webhook_deliveries::Model) -> WebhookDelivery {
    WebhookDelivery {
        id: row.id,
        webhook_id: row.webhook_id,
        event: EventKind::parse(&row.event).unwrap_or(EventKind::Test),
        state: DeliveryState::parse(&row.state).unwrap_or(DeliveryState::Failed),
        attempts: u32::try_from(row.attempts).unwrap_or(0),
        last_status: row.last_status.and_then(|s| u16::try_from(s).ok()),
        last_error: row.last_error,
        created_at: row.created_at,
        delivered_at: row.delivered_at,
        next_attempt_at: row.next_attempt_at,
    }
}

/// The webhook's delivery log, newest first: [`DELIVERY_PAGE`] older than `before`.
pub async fn deliveries(
    services: &Services,
    principal: &Principal,
    webhook_id: i64,
    before: Option<i64>,
) -> AppResult<Vec<WebhookDelivery>> {
    let hook = owned(services, principal, webhook_id).await?;
    let mut query = webhook_deliveries::Entity::find()
        .filter(webhook_deliveries::Column::WebhookId.eq(hook.id))
        .order_by_desc(webhook_deliveries::Column::Id)
        .limit(DELIVERY_PAGE);
    if let Some(before) = before {
        query = query.filter(webhook_deliveries::Column::Id.lt(before));
    }
    Ok(query.all(&services.db).await.context("loading deliveries")?.into_iter().map(delivery_dto).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_inside_the_platform_are_refused() {
        let strict = WebhookSettings::default();
        assert!(check_url("https://hooks.example.com/cardpool", &strict).is_ok());
        for bad in [
            "http://hooks.example.com/x",
            "https://127.0.0.1/x",
            "https://10.1.2.3/x",
            "https://169.254.169.254/latest/meta-data",
            "https://[::1]/x",
            "https://[fd00::1]/x",
            "https://[::ffff:192.168.0.1]/x",
            "https://localhost/x",
            "https://metadata.google.internal/x",
            "https://user:pw@hooks.example.com/x",
            "ftp://hooks.example.com/x",
            "not a url",
        ] {
            assert!(check_url(bad, &strict).is_err(), "{bad} accepted");
        }
        let local = WebhookSettings { allow_local_targets: true, ..WebhookSettings::default() };
        assert!(check_url("http://127.0.0.1:9000/hook", &local).is_ok());
        assert!(is_public("8.8.8.8".parse().unwrap()) && is_public("2606:4700::1111".parse().unwrap()));
        assert!(!is_public("100.64.0.1".parse().unwrap()) && !is_public("fe80::1".parse().unwrap()));
    }
}
