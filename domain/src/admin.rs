//! The admin console's vocabulary: the actions admins take on hosts and accounts, the reason
//! every one of them needs, and the audit log that records each.

use crate::{AppError, FieldErrors};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The longest reason an admin may give, in characters.
pub const MAX_REASON_CHARS: usize = 500;

/// An admin action's reason, checked: 3 to [`MAX_REASON_CHARS`] printable characters.
pub fn check_reason(reason: &str) -> Result<String, AppError> {
    let reason = reason.trim();
    let chars = reason.chars().count();
    if !(3..=MAX_REASON_CHARS).contains(&chars) || reason.chars().any(char::is_control) {
        let mut fields = FieldErrors::new();
        fields.insert("reason".into(), format!("say why, in 3 to {MAX_REASON_CHARS} printable characters"));
        return Err(AppError::invalid_fields(fields));
    }
    Ok(reason.to_owned())
}

/// The body of every admin action: why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdminActionRequest {
    /// Why, in 3 to 500 printable characters (kept in the audit log).
    #[cfg_attr(feature = "openapi", schema(min_length = 3, max_length = 500))]
    pub reason: String,
}

/// What an admin (or the operator's command line) did, as the audit log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum AuditAction {
    #[serde(rename = "host.verify")]
    HostVerify,
    #[serde(rename = "host.unverify")]
    HostUnverify,
    #[serde(rename = "host.delist")]
    HostDelist,
    #[serde(rename = "host.relist")]
    HostRelist,
    #[serde(rename = "host.revoke")]
    HostRevoke,
    #[serde(rename = "user.suspend")]
    UserSuspend,
    #[serde(rename = "user.reinstate")]
    UserReinstate,
    #[serde(rename = "user.grant_admin")]
    UserGrantAdmin,
    #[serde(rename = "user.revoke_admin")]
    UserRevokeAdmin,
    /// The account turned on its own provider role.
    #[serde(rename = "user.enable_provider")]
    UserEnableProvider,
    #[serde(rename = "wallet.credit")]
    WalletCredit,
    #[serde(rename = "wallet.refund")]
    WalletRefund,
    /// Money given back on one rental, through the ledger.
    #[serde(rename = "rental.refund")]
    RentalRefund,
}

impl AuditAction {
    pub const ALL: [AuditAction; 13] = [
        AuditAction::HostVerify,
        AuditAction::HostUnverify,
        AuditAction::HostDelist,
        AuditAction::HostRelist,
        AuditAction::HostRevoke,
        AuditAction::UserSuspend,
        AuditAction::UserReinstate,
        AuditAction::UserGrantAdmin,
        AuditAction::UserRevokeAdmin,
        AuditAction::UserEnableProvider,
        AuditAction::WalletCredit,
        AuditAction::WalletRefund,
        AuditAction::RentalRefund,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AuditAction::HostVerify => "host.verify",
            AuditAction::HostUnverify => "host.unverify",
            AuditAction::HostDelist => "host.delist",
            AuditAction::HostRelist => "host.relist",
            AuditAction::HostRevoke => "host.revoke",
            AuditAction::UserSuspend => "user.suspend",
            AuditAction::UserReinstate => "user.reinstate",
            AuditAction::UserGrantAdmin => "user.grant_admin",
            AuditAction::UserRevokeAdmin => "user.revoke_admin",
            AuditAction::UserEnableProvider => "user.enable_provider",
            AuditAction::WalletCredit => "wallet.credit",
            AuditAction::WalletRefund => "wallet.refund",
            AuditAction::RentalRefund => "rental.refund",
        }
    }

    pub fn parse(raw: &str) -> Option<AuditAction> {
        AuditAction::ALL.into_iter().find(|a| a.as_str() == raw)
    }

    /// What the action is done to: one of [`SUBJECT_KINDS`].
    pub fn subject_kind(self) -> &'static str {
        match self {
            AuditAction::HostVerify
            | AuditAction::HostUnverify
            | AuditAction::HostDelist
            | AuditAction::HostRelist
            | AuditAction::HostRevoke => "host",
            AuditAction::RentalRefund => "rental",
            _ => "user",
        }
    }
}

/// What audited actions are done to.
pub const SUBJECT_KINDS: [&str; 3] = ["host", "user", "rental"];

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// The admin's account; absent for the operator's command line.
    pub actor_id: Option<i64>,
    /// The admin's email at the time, or `operator`.
    pub actor: String,
    /// e.g. `host.verify` (see [`AuditAction`]).
    pub action: String,
    /// `host`, `user` or `rental`.
    pub subject_kind: String,
    pub subject_id: i64,
    pub reason: String,
    /// The subject's state before and after, as JSON text.
    pub before: Option<String>,
    pub after: Option<String>,
}

/// Which audit entries to list (all optional), newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams, utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(default)]
pub struct AuditQuery {
    /// `host`, `user` or `rental`.
    pub subject_kind: Option<String>,
    pub subject_id: Option<i64>,
    /// e.g. `user.suspend`.
    pub action: Option<String>,
    /// 1-based page number.
    pub page: Option<u32>,
    /// Entries per page (at most 100; default 50).
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 100))]
    pub per_page: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    pub total: u64,
    pub page: u32,
    pub per_page: u32,
}

/// Which rentals an admin lists (all optional), newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams, utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(default)]
pub struct AdminRentalQuery {
    /// e.g. `running` (see `RentalState`).
    pub state: Option<String>,
    /// `on_demand`, `reserved` or `spot`.
    pub kind: Option<String>,
    pub host_id: Option<i64>,
    pub renter_id: Option<i64>,
    /// Part of the renter's email, at most 254 characters.
    pub renter: Option<String>,
    /// Booked on or after this UTC day, `YYYY-MM-DD`.
    pub since: Option<String>,
    /// Booked on or before this UTC day, `YYYY-MM-DD`.
    pub until: Option<String>,
    /// 1-based page number.
    pub page: Option<u32>,
    /// Rentals per page (at most 100; default 25).
    #[cfg_attr(feature = "openapi", param(minimum = 1, maximum = 100))]
    pub per_page: Option<u32>,
}

/// One rental as the admin list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdminRental {
    pub id: i64,
    pub renter_id: i64,
    pub renter_email: String,
    pub host_id: i64,
    pub hostname: String,
    pub gpu_model: String,
    pub gpu_count: u32,
    pub kind: crate::offers::RentalKind,
    pub state: crate::rentals::RentalState,
    /// Per GPU-hour, micro-dollars.
    pub price_micros: i64,
    pub created_at: DateTime<Utc>,
    pub running_since: Option<DateTime<Utc>>,
    pub ends_at: Option<DateTime<Utc>>,
    pub billed_seconds: i64,
    /// What the renter paid for it, net of the platform's automatic refunds, micro-dollars.
    pub charged_micros: i64,
    /// What admins refunded on it, micro-dollars.
    pub refunded_micros: i64,
}

impl AdminRental {
    /// What an admin may still refund: what was charged and not refunded yet.
    pub fn refundable_micros(&self) -> i64 {
        (self.charged_micros - self.refunded_micros).max(0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AdminRentalPage {
    pub rentals: Vec<AdminRental>,
    pub total: u64,
    pub page: u32,
    pub per_page: u32,
}

/// An admin's refund on one rental: how much (dollars, at most what is refundable) and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RentalRefundRequest {
    /// Dollars, e.g. `2.50`.
    pub amount: String,
    /// Why, in 3 to 500 printable characters (kept in the audit log and on the ledger entry).
    #[cfg_attr(feature = "openapi", schema(min_length = 3, max_length = 500))]
    pub reason: String,
}

/// An account as an admin looks into it: roles and standing, money, hosts and activity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AccountDetail {
    pub user: crate::account::UserSummary,
    /// Spendable wallet balance, micro-dollars.
    pub wallet_micros: i64,
    /// Held for prepaid reservations, micro-dollars.
    pub held_micros: i64,
    /// Provider earnings not yet paid out, micro-dollars.
    pub earnings_micros: i64,
    /// Paid out to the provider so far, micro-dollars.
    pub paid_out_micros: i64,
    /// What the account paid for rentals over its life, micro-dollars.
    pub spent_micros: i64,
    pub rentals: u64,
    pub live_rentals: u64,
    pub hosts: Vec<crate::host::HostSummary>,
}

/// A host's history as admins review it: its status changes (outages, revocation), its alerts
/// and the admin actions taken on it, newest first. Its rentals are the admin rental list
/// filtered on the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostHistory {
    pub host: crate::host::HostSummary,
    pub provider_id: i64,
    pub provider_email: String,
    /// Status changes, newest first (at most 200).
    pub events: Vec<crate::host::HostEvent>,
    /// Alerts raised on the host, open or not, newest first (at most 200).
    pub alerts: Vec<crate::telemetry::Alert>,
    /// Admin actions on the host, newest first (at most 100).
    pub audit: Vec<AuditEntry>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_read_back_as_written() {
        for action in AuditAction::ALL {
            assert_eq!(AuditAction::parse(action.as_str()), Some(action));
            assert_eq!(serde_json::to_string(&action).unwrap(), format!("\"{}\"", action.as_str()));
        }
        assert_eq!(AuditAction::parse("host.delete"), None);
    }

    #[test]
    fn a_reason_is_required() {
        assert!(check_reason("  ").is_err());
        assert!(check_reason("no").is_err());
        assert!(check_reason("bad\nline").is_err());
        assert!(check_reason(&"x".repeat(MAX_REASON_CHARS + 1)).is_err());
        assert_eq!(check_reason("  failed burn-in  ").unwrap(), "failed burn-in");
    }
}
