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
}

impl AuditAction {
    pub const ALL: [AuditAction; 12] = [
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
        }
    }

    pub fn parse(raw: &str) -> Option<AuditAction> {
        AuditAction::ALL.into_iter().find(|a| a.as_str() == raw)
    }

    /// What the action is done to: `host` or `user`.
    pub fn subject_kind(self) -> &'static str {
        match self {
            AuditAction::HostVerify
            | AuditAction::HostUnverify
            | AuditAction::HostDelist
            | AuditAction::HostRelist
            | AuditAction::HostRevoke => "host",
            _ => "user",
        }
    }
}

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
    /// `host` or `user`.
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
    /// `host` or `user`.
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
