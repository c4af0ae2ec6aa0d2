//! Wallets, top-ups, ledger history, provider earnings and payouts as people see them.
//!
//! Every amount is integer micro-dollars (see [`crate::money`]); requests carry amounts as the
//! decimal dollar strings people type, parsed exactly on the server.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Smallest and largest single top-up, in micro-dollars ($5 and $10,000).
pub const TOP_UP_MIN_MICROS: i64 = 5_000_000;
pub const TOP_UP_MAX_MICROS: i64 = 10_000_000_000;

/// A renter's money at a glance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Wallet {
    /// Spendable balance.
    pub balance_micros: i64,
    /// Held for prepaid reservations; not spendable until released.
    pub held_micros: i64,
    pub currency: String,
    /// Top-ups started but not yet paid, newest first.
    pub pending_top_ups: Vec<TopUp>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateTopUpRequest {
    /// Dollars, e.g. "25" or "25.00"; whole cents, between $5 and $10,000.
    pub amount: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopUpCreated {
    pub top_up: TopUp,
    /// Where to send the renter to pay (Stripe Checkout, or the local test checkout).
    pub checkout_url: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum TopUpStatus {
    /// Checkout opened; nothing paid yet.
    Open,
    /// Paid by a method that settles later; credited when it does.
    Processing,
    /// Paid and credited to the wallet.
    Credited,
    Expired,
    Failed,
}

impl TopUpStatus {
    pub const ALL: [TopUpStatus; 5] =
        [TopUpStatus::Open, TopUpStatus::Processing, TopUpStatus::Credited, TopUpStatus::Expired, TopUpStatus::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            TopUpStatus::Open => "open",
            TopUpStatus::Processing => "processing",
            TopUpStatus::Credited => "credited",
            TopUpStatus::Expired => "expired",
            TopUpStatus::Failed => "failed",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == raw)
    }

    /// Whether nothing can change any more.
    pub fn is_final(self) -> bool {
        matches!(self, TopUpStatus::Credited | TopUpStatus::Expired | TopUpStatus::Failed)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopUp {
    pub id: i64,
    pub amount_micros: i64,
    pub status: TopUpStatus,
    pub created_at: DateTime<Utc>,
}

/// One line of an account's history: a ledger transaction as it touched this account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LedgerEntry {
    pub transaction_id: i64,
    /// `top_up`, `usage`, `credit`, `refund`, `hold`, `release`, `payout`, ...
    pub kind: String,
    pub description: String,
    /// Signed change of this account's balance.
    pub amount_micros: i64,
    /// Balance right after this entry.
    pub balance_after_micros: i64,
    pub created_at: DateTime<Utc>,
}

/// Which page of a history to read: the entries before transaction `before` (newest first;
/// the newest without it), `limit` of them (100 unless given, at most 500).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
pub struct HistoryQuery {
    /// A transaction id: the entries before it.
    #[cfg_attr(feature = "openapi", param(minimum = 1))]
    pub before: Option<i64>,
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 500))]
    pub limit: Option<u32>,
}

impl HistoryQuery {
    pub const DEFAULT_LIMIT: u32 = 100;
    pub const MAX_LIMIT: u32 = 500;

    /// The page size asked for, if it is one a history gives (and a cursor, if any, that is
    /// a transaction id).
    pub fn limit(&self) -> Result<u64, crate::AppError> {
        if self.before.is_some_and(|b| b < 1) {
            return Err(crate::AppError::invalid_field("before", "a transaction id"));
        }
        match self.limit.unwrap_or(Self::DEFAULT_LIMIT) {
            limit @ 1..=Self::MAX_LIMIT => Ok(u64::from(limit)),
            _ => Err(crate::AppError::invalid_field("limit", format!("between 1 and {}", Self::MAX_LIMIT))),
        }
    }
}

/// A receipt for one wallet transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Receipt {
    pub transaction_id: i64,
    pub number: String,
    pub account_email: String,
    pub kind: String,
    pub description: String,
    pub amount_micros: i64,
    pub currency: String,
    pub created_at: DateTime<Utc>,
    /// Stripe Checkout session that paid for it (top-ups only).
    pub stripe_session_id: Option<String>,
}

/// Where a provider stands with Stripe Connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ConnectState {
    NotStarted,
    /// Account created; Stripe still needs details before payouts work.
    Onboarding,
    /// Payouts enabled.
    Ready,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Earnings {
    /// Credited within the holding period; becomes available after it.
    pub pending_micros: i64,
    /// Can be paid out now.
    pub available_micros: i64,
    /// Transferred to the provider's Connect account so far.
    pub paid_out_micros: i64,
    /// Payouts requested but not yet confirmed by Stripe.
    pub in_transit_micros: i64,
    pub hold_hours: u32,
    pub connect: ConnectState,
    pub stripe_account_id: Option<String>,
    pub payouts: Vec<Payout>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PayoutStatus {
    /// Booked in the ledger; the Stripe transfer is being made (retried until it answers).
    Pending,
    Paid,
    /// Stripe refused; the amount went back to available earnings.
    Failed,
}

impl PayoutStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PayoutStatus::Pending => "pending",
            PayoutStatus::Paid => "paid",
            PayoutStatus::Failed => "failed",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        [PayoutStatus::Pending, PayoutStatus::Paid, PayoutStatus::Failed].into_iter().find(|s| s.as_str() == raw)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Payout {
    pub id: i64,
    pub amount_micros: i64,
    pub status: PayoutStatus,
    pub stripe_transfer_id: Option<String>,
    pub failure_message: Option<String>,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RequestPayoutRequest {
    /// Dollars to pay out; all available earnings (whole cents) when absent or empty.
    #[serde(default)]
    pub amount: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OnboardingLink {
    /// Stripe-hosted onboarding page to send the provider to.
    pub url: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AdjustmentKind {
    /// Promotional or goodwill credit, funded by the promotional credit account.
    Credit,
    /// Money given back to the renter, funded by platform fees.
    Refund,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdminCreditRequest {
    /// Email of the account to credit.
    pub email: String,
    /// Dollars, e.g. "10" or "2.50".
    pub amount: String,
    pub kind: AdjustmentKind,
    /// Why; kept with the ledger transaction for the audit trail.
    pub reason: String,
}

/// An admin credit or refund, as the audit trail shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Adjustment {
    pub transaction_id: i64,
    pub kind: String,
    pub account_email: String,
    pub amount_micros: i64,
    pub reason: String,
    pub actor_email: String,
    pub created_at: DateTime<Utc>,
}
