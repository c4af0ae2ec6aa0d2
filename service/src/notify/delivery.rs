//! Sending webhook deliveries: every pending delivery that is due is signed and POSTed, a few
//! at a time; a 2xx answer delivers it, anything else (an error status, a refused or slow
//! connection, an address that is not public) is retried after 10 s, 30 s, 90 s, ... (three
//! times longer each time) until `max_attempts`, then given up. Delivery is at least once: a
//! crash between the receiver's answer and its record sends it again, with the same event id.
//!
//! The resolver refuses names that resolve to an address inside the platform, and the
//! connection goes to the address it checked, so a name that changes its answer between the
//! check and the request (DNS rebinding) cannot reach one either.

use super::webhooks::{WebhookSettings, is_public};
use crate::{AppResult, Services, db::DbResultExt, entities::*};
use cardpool_domain::notifications::{DeliveryState, SIGNATURE_HEADER};
use chrono::{DateTime, Duration, Utc};
use futures_util::StreamExt;
use hmac::{Hmac, Mac};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, IntoActiveModel, QueryFilter, QueryOrder, QuerySelect,
};
use sha2::Sha256;
use std::{net::IpAddr, sync::Arc};

/// Deliveries sent per sweep, and at once.
const BATCH: u64 = 64;
const IN_FLIGHT: usize = 8;
/// How long a receiver has to answer.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The longest error text kept.
const MAX_ERROR_CHARS: usize = 300;

/// `Cardpool-Signature`'s value for `body` sent at `t`: `t=<t>,v1=<hex HMAC-SHA256 of "t.body">`.
pub fn signature(secret: &str, t: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(format!("{t}.{body}").as_bytes());
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Whether `header` is a valid signature of `body` by `secret`, made within the tolerance of
/// `now` (what a receiver does; the tests and the documentation's example use it).
pub fn verify(secret: &str, header: &str, body: &str, now: DateTime<Utc>) -> bool {
    let mut t = None;
    let mut v1 = None;
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", value)) => t = value.parse::<i64>().ok(),
            Some(("v1", value)) => v1 = hex::decode(value).ok(),
            _ => {}
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else { return false };
    if (now.timestamp() - t).abs() > cardpool_domain::notifications::SIGNATURE_TOLERANCE_SECS {
        return false;
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(format!("{t}.{body}").as_bytes());
    mac.verify_slice(&v1).is_ok()
}

/// Resolves names like the system does, but answers only with public addresses (unless local
/// targets are allowed).
struct PublicOnly {
    allow_local: bool,
}

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_local = self.allow_local;
        Box::pin(async move {
            let found: Vec<_> = tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let usable: Vec<_> = found.into_iter().filter(|a| allow_local || is_public(a.ip())).collect();
            if usable.is_empty() {
                return Err(format!("{} has no public address", name.as_str()).into());
            }
            Ok(Box::new(usable.into_iter()) as Addrs)
        })
    }
}

/// The HTTP client deliveries go out on.
pub struct Sender {
    client: reqwest::Client,
    settings: WebhookSettings,
}

impl Sender {
    pub fn new(settings: &WebhookSettings) -> AppResult<Self> {
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(PublicOnly { allow_local: settings.allow_local_targets }))
            .redirect(reqwest::redirect::Policy::none())
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .user_agent(concat!("Cardpool-Webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| {
                tracing::error!(error = %err, "building the webhook client failed");
                crate::AppError::Internal
            })?;
        Ok(Sender { client, settings: settings.clone() })
    }

    /// One attempt: the receiver's status, or why there was none.
    async fn post(&self, url: &str, secret: &str, row: &webhook_deliveries::Model) -> Result<u16, String> {
        let parsed = reqwest::Url::parse(url).map_err(|_| "the URL is not valid".to_owned())?;
        let literal = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if literal.is_some_and(|ip| !is_public(ip)) && !self.settings.allow_local_targets {
            return Err("the address is not public".into());
        }
        let t = Utc::now().timestamp();
        let response = self
            .client
            .post(parsed)
            .header("Content-Type", "application/json")
            .header(SIGNATURE_HEADER, signature(secret, t, &row.payload))
            .header("Cardpool-Event", &row.event)
            .header("Cardpool-Delivery", row.id.to_string())
            .body(row.payload.clone())
            .send()
            .await
            .map_err(|err| describe(&err))?;
        Ok(response.status().as_u16())
    }
}

fn describe(err: &reqwest::Error) -> String {
    let mut text = if err.is_timeout() {
        "the receiver did not answer in 10 s".to_owned()
    } else if err.is_connect() {
        "could not connect".to_owned()
    } else {
        "the request failed".to_owned()
    };
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        text = format!("{text}: {inner}");
        source = inner.source();
    }
    text.chars().take(MAX_ERROR_CHARS).collect()
}

/// Sends every delivery that is due; returns how many were attempted.
pub async fn deliver_due(services: &Services, sender: &Sender) -> AppResult<usize> {
    let now = Utc::now();
    let due = webhook_deliveries::Entity::find()
        .filter(webhook_deliveries::Column::State.eq(DeliveryState::Pending.as_str()))
        .filter(webhook_deliveries::Column::NextAttemptAt.lte(now))
        .order_by_asc(webhook_deliveries::Column::NextAttemptAt)
        .limit(BATCH)
        .all(&services.db)
        .await
        .context("finding due deliveries")?;
    let count = due.len();
    let results: Vec<AppResult<()>> =
        futures_util::stream::iter(due.into_iter().map(|row| attempt(services, sender, row)))
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
    for err in results.into_iter().filter_map(Result::err) {
        tracing::warn!(error = %err, "recording a webhook delivery failed; it is sent again");
    }
    Ok(count)
}

async fn attempt(services: &Services, sender: &Sender, row: webhook_deliveries::Model) -> AppResult<()> {
    let hook = webhooks::Entity::find_by_id(row.webhook_id).one(&services.db).await.context("loading webhook")?;
    let outcome = match &hook {
        Some(hook) if hook.deleted_at.is_none() => sender.post(&hook.url, &hook.secret, &row).await,
        _ => Err("the webhook was deleted".into()),
    };
    let attempts = row.attempts + 1;
    let now = Utc::now();
    let give_up = attempts >= i32::try_from(sender.settings.max_attempts).unwrap_or(8) || hook.is_none();
    let (id, webhook_id) = (row.id, row.webhook_id);
    let mut update = row.into_active_model();
    update.attempts = Set(attempts);
    match outcome {
        Ok(status) if (200..300).contains(&status) => {
            update.state = Set(DeliveryState::Delivered.as_str().into());
            update.last_status = Set(Some(i32::from(status)));
            update.last_error = Set(None);
            update.delivered_at = Set(Some(now));
            update.next_attempt_at = Set(None);
        }
        failure => {
            let error = match failure {
                Ok(status) => {
                    update.last_status = Set(Some(i32::from(status)));
                    format!("the receiver answered {status}")
                }
                Err(error) => {
                    update.last_status = Set(None);
                    error
                }
            };
            tracing::info!(delivery.id = id, webhook.id = webhook_id, attempts, %error, "webhook delivery failed");
            update.last_error = Set(Some(error));
            if give_up {
                update.state = Set(DeliveryState::Failed.as_str().into());
                update.next_attempt_at = Set(None);
            } else {
                let wait =
                    sender.settings.retry_base_secs.max(1).saturating_mul(3u64.saturating_pow((attempts - 1) as u32));
                let wait = Duration::seconds(i64::try_from(wait.min(6 * 3600)).unwrap_or(6 * 3600));
                update.next_attempt_at = Set(Some(now + wait));
            }
        }
    }
    update.update(&services.db).await.context("recording delivery")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same vector Python's `hmac` gives (the webhooks page's receiver example).
    #[test]
    fn signatures_match_a_known_vector() {
        let expected = "a252a4340d8bbbdbac8643a2812cc7d628ad79bfba544bff054ac2fa10f795a2";
        assert_eq!(signature("whsec_k", 1_700_000_000, "{\"a\":1}"), format!("t=1700000000,v1={expected}"));
    }

    #[test]
    fn signatures_verify_and_expire() {
        let now = Utc::now();
        let header = signature("whsec_k", now.timestamp(), "{\"a\":1}");
        assert!(verify("whsec_k", &header, "{\"a\":1}", now));
        assert!(!verify("whsec_other", &header, "{\"a\":1}", now));
        assert!(!verify("whsec_k", &header, "{\"a\":2}", now));
        assert!(!verify("whsec_k", &header, "{\"a\":1}", now + Duration::seconds(301)));
        assert!(!verify("whsec_k", "t=1", "{}", now));
    }
}
