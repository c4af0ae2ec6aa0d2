//! Spend limits: what an account may spend on rentals per UTC day and month, and what one
//! rental may cost or how long it may bill. The server enforces them while billing: a warning
//! at [`WARN_AT_PERCENT`], and the rental stopped and settled at the limit (never charged past
//! it).

use crate::{AppError, FieldErrors};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A warning goes out when this share of a limit is spent.
pub const WARN_AT_PERCENT: i64 = 80;
/// The largest limit one may set, micro-dollars ($10,000,000).
pub const MAX_LIMIT_MICROS: i64 = 10_000_000 * crate::money::MICROS_PER_DOLLAR;
/// The longest rental cap, seconds (a year).
pub const MAX_DURATION_SECS: i64 = 366 * 24 * 3600;

/// An account's limits; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SpendLimits {
    /// Most spent on rentals per UTC day, micro-dollars.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10_000_000_000_000i64))]
    pub daily_limit_micros: Option<i64>,
    /// Most spent on rentals per UTC calendar month, micro-dollars.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10_000_000_000_000i64))]
    pub monthly_limit_micros: Option<i64>,
}

impl SpendLimits {
    /// The limits if each is within bounds; else which one is not.
    pub fn checked(self) -> Result<Self, AppError> {
        let mut fields = FieldErrors::new();
        for (name, value) in
            [("daily_limit_micros", self.daily_limit_micros), ("monthly_limit_micros", self.monthly_limit_micros)]
        {
            if value.is_some_and(|v| !(1..=MAX_LIMIT_MICROS).contains(&v)) {
                fields.insert(name.into(), "a limit above $0 and at most $10,000,000 (or none)".into());
            }
        }
        if fields.is_empty() { Ok(self) } else { Err(AppError::invalid_fields(fields)) }
    }
}

/// An account's limits with what it has spent against them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SpendStatus {
    pub limits: SpendLimits,
    /// Spent on rentals since the UTC day began (usage charged and reservations prepaid, less
    /// refunds), micro-dollars.
    pub spent_today_micros: i64,
    pub spent_this_month_micros: i64,
    pub day_resets_at: DateTime<Utc>,
    pub month_resets_at: DateTime<Utc>,
}

/// One rental's own caps; `None` is no cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RentalLimits {
    /// The most this rental may cost, micro-dollars.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10_000_000_000_000i64))]
    pub max_cost_micros: Option<i64>,
    /// The longest this rental may bill, seconds.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 60, maximum = 31_622_400))]
    pub max_duration_secs: Option<i64>,
}

impl RentalLimits {
    pub fn checked(self) -> Result<Self, AppError> {
        let mut fields = FieldErrors::new();
        if self.max_cost_micros.is_some_and(|v| !(1..=MAX_LIMIT_MICROS).contains(&v)) {
            fields.insert("max_cost_micros".into(), "a cap above $0 and at most $10,000,000 (or none)".into());
        }
        if self.max_duration_secs.is_some_and(|v| !(60..=MAX_DURATION_SECS).contains(&v)) {
            fields.insert("max_duration_secs".into(), "a duration of 1 minute to 366 days (or none)".into());
        }
        if fields.is_empty() { Ok(self) } else { Err(AppError::invalid_fields(fields)) }
    }

    pub fn is_empty(&self) -> bool {
        self.max_cost_micros.is_none() && self.max_duration_secs.is_none()
    }
}

/// A dollar amount typed in a form, blank for none.
pub fn parse_optional_dollars(raw: &str, field: &str, fields: &mut FieldErrors) -> Option<i64> {
    let raw = raw.trim();
    if raw.is_empty() {
        return None;
    }
    crate::money::parse_dollars(raw).map_err(|e| fields.insert(field.into(), e)).ok()
}

/// Hours typed in a form (`1.5` allowed), blank for none, as seconds.
pub fn parse_optional_hours(raw: &str, field: &str, fields: &mut FieldErrors) -> Option<i64> {
    let raw = raw.trim();
    if raw.is_empty() {
        return None;
    }
    // Hours are read like dollars (at most six decimals), so no float is involved.
    match crate::money::parse_dollars(raw) {
        Ok(millionths) => Some(i64::try_from(i128::from(millionths) * 3600 / 1_000_000).unwrap_or(i64::MAX)),
        Err(_) => {
            fields.insert(field.into(), "a number of hours, e.g. 12 or 1.5".into());
            None
        }
    }
}

/// The limits form as the wallet page sends it: dollars, blank for none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpendLimitsForm {
    pub daily: String,
    pub monthly: String,
}

impl SpendLimitsForm {
    pub fn parse(&self) -> Result<SpendLimits, AppError> {
        let mut fields = FieldErrors::new();
        let daily_limit_micros = parse_optional_dollars(&self.daily, "daily", &mut fields);
        let monthly_limit_micros = parse_optional_dollars(&self.monthly, "monthly", &mut fields);
        if !fields.is_empty() {
            return Err(AppError::invalid_fields(fields));
        }
        SpendLimits { daily_limit_micros, monthly_limit_micros }.checked().map_err(|err| match err {
            AppError::Validation { fields, .. } => {
                AppError::invalid_fields(fields.into_iter().map(|(k, v)| (k.replace("_limit_micros", ""), v)).collect())
            }
            other => other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_read_dollars_and_hours_exactly() {
        let limits = SpendLimitsForm { daily: "25".into(), monthly: " ".into() }.parse().unwrap();
        assert_eq!(limits, SpendLimits { daily_limit_micros: Some(25_000_000), monthly_limit_micros: None });
        let err = SpendLimitsForm { daily: "0".into(), monthly: "abc".into() }.parse().unwrap_err();
        assert!(err.field("monthly").is_some());
        let mut fields = FieldErrors::new();
        assert_eq!(parse_optional_hours("1.5", "h", &mut fields), Some(5400));
        assert_eq!(parse_optional_hours("x", "h", &mut fields), None);
        assert!(fields.contains_key("h"));
        assert!(RentalLimits { max_cost_micros: None, max_duration_secs: Some(59) }.checked().is_err());
        assert!(RentalLimits { max_cost_micros: Some(1), max_duration_secs: Some(60) }.checked().is_ok());
    }
}
