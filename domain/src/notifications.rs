//! What Cardpool tells people: the events of their rentals, money and hosts, shown under the
//! bell and sent to their webhooks.
//!
//! ## Webhook signatures
//! Every delivery is a `POST` of JSON ([`WebhookEvent`]) with the header
//! `Cardpool-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>`. The HMAC's key is the
//! webhook's secret (`whsec_...`, shown once when it is made) and its message is
//! `<t>.<the raw body>`. A receiver recomputes it, compares in constant time and refuses a `t`
//! more than five minutes old ([`SIGNATURE_TOLERANCE_SECS`]), so a captured delivery cannot be
//! replayed later. `Cardpool-Event` names the event and `Cardpool-Delivery` its delivery id
//! (the same across retries: deduplicate on the event's `id`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The header carrying a delivery's signature.
pub const SIGNATURE_HEADER: &str = "Cardpool-Signature";
/// How old a signed timestamp a receiver should still accept.
pub const SIGNATURE_TOLERANCE_SECS: i64 = 300;
/// The most webhooks one account may have.
pub const MAX_WEBHOOKS: usize = 10;
/// The longest webhook URL.
pub const MAX_URL_CHARS: usize = 2048;
/// Notifications per page.
pub const PAGE_SIZE: u64 = 50;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum EventKind {
    /// A rental started running, ended, failed, was interrupted or preempted.
    #[serde(rename = "rental.state_changed")]
    RentalStateChanged,
    /// A spot rental will be preempted at `data.deadline`.
    #[serde(rename = "rental.preemption_notice")]
    PreemptionNotice,
    /// The wallet covers only a few more minutes of a rental.
    #[serde(rename = "balance.low")]
    LowBalance,
    /// 80 % of a spend limit or a rental's cap is used.
    #[serde(rename = "limit.warning")]
    LimitWarning,
    /// A limit was reached: the rental was stopped and settled.
    #[serde(rename = "limit.reached")]
    LimitReached,
    /// A provider's host stopped answering.
    #[serde(rename = "host.offline")]
    HostOffline,
    /// A provider's payout was paid.
    #[serde(rename = "payout.paid")]
    PayoutPaid,
    /// Sent by "send test event".
    #[serde(rename = "test")]
    Test,
}

impl EventKind {
    pub const ALL: [EventKind; 8] = [
        EventKind::RentalStateChanged,
        EventKind::PreemptionNotice,
        EventKind::LowBalance,
        EventKind::LimitWarning,
        EventKind::LimitReached,
        EventKind::HostOffline,
        EventKind::PayoutPaid,
        EventKind::Test,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::RentalStateChanged => "rental.state_changed",
            EventKind::PreemptionNotice => "rental.preemption_notice",
            EventKind::LowBalance => "balance.low",
            EventKind::LimitWarning => "limit.warning",
            EventKind::LimitReached => "limit.reached",
            EventKind::HostOffline => "host.offline",
            EventKind::PayoutPaid => "payout.paid",
            EventKind::Test => "test",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// One notification under the bell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Notification {
    pub id: i64,
    pub event: EventKind,
    pub title: String,
    pub body: String,
    /// The rental it is about; absent when it is about none (a low balance, a payout). Left
    /// out rather than `null`, so a client (or schemathesis' link inference) that follows it
    /// to `/rentals/{id}` never follows a null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rental_id: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub read: bool,
}

/// A page of notifications, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NotificationPage {
    pub items: Vec<Notification>,
    /// Unread notifications in all.
    pub unread: u64,
    /// Pass as `?before=` for the next (older) page; `None` on the last.
    pub next_before: Option<i64>,
}

/// What a webhook receives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WebhookEvent {
    /// `evt_<notification id>`: the same across retries.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: EventKind,
    pub created_at: DateTime<Utc>,
    pub title: String,
    pub body: String,
    /// The event's details (`rental_id`, `state`, `deadline`, `limit`, ...).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub data: serde_json::Value,
}

/// Registering a webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NewWebhook {
    /// `https://...` (plain `http://` only where the operator allows it).
    #[cfg_attr(feature = "openapi", schema(max_length = 2048))]
    pub url: String,
}

/// A registered webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Webhook {
    pub id: i64,
    pub url: String,
    pub created_at: DateTime<Utc>,
    /// The signing secret: only in the answer that created the webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Not yet delivered; tried again at `next_attempt_at`.
    Pending,
    Delivered,
    /// Every retry failed; Cardpool gave up.
    Failed,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        [DeliveryState::Pending, DeliveryState::Delivered, DeliveryState::Failed]
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}

/// One event's delivery to one webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WebhookDelivery {
    pub id: i64,
    pub webhook_id: i64,
    pub event: EventKind,
    pub state: DeliveryState,
    pub attempts: u32,
    /// The receiver's last HTTP status, if it answered.
    pub last_status: Option<u16>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub next_attempt_at: Option<DateTime<Utc>>,
}
