//! The one application error.
//!
//! Services return it, REST handlers map it to a status code once, server functions carry it to
//! the browser unchanged. Every variant is safe to show to a client: internal details are logged
//! where they happen and only [`AppError::Internal`] (with no payload) travels further.

use crate::wire::JsonText;
use serde::{Deserialize, Serialize};
use server_fn::{
    ServerFnError,
    error::{FromServerFnError, ServerFnErrorErr},
};
use std::collections::BTreeMap;

/// Validation messages keyed by the form field (or JSON property) they belong to.
pub type FieldErrors = BTreeMap<String, String>;

/// Everything that can go wrong in a request, as a client may see it.
///
/// On the wire (server functions, and the results a page is hydrated with) it is one flat
/// object, [`Wire`]: `{"error": code, "detail": text, "fields": {..}, "retry_after_secs": n}`,
/// each part present only where the variant has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(from = "Wire", into = "Wire")]
pub enum AppError {
    /// Input was rejected; `fields` says which field and why.
    #[error("{message}")]
    Validation { message: String, fields: FieldErrors },
    /// No valid session or token accompanied a request that needs one.
    #[error("sign in required")]
    Unauthorized,
    /// Sign-in failed. Deliberately the same whether the email or the password was wrong.
    #[error("email or password is incorrect")]
    InvalidCredentials,
    /// The caller is known but may not do this.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0} not found")]
    NotFound(String),
    /// The request collides with existing state (a duplicate, a stale edit).
    #[error("{0}")]
    Conflict(String),
    /// Not enough money (balance, earnings) or a payment was declined; the message says how much.
    #[error("{0}")]
    PaymentRequired(String),
    /// Too many attempts; try again after `retry_after_secs`.
    #[error("too many attempts, try again in {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    /// A service we depend on (Stripe) is unavailable or refused; safe to retry later.
    #[error("{0}")]
    Unavailable(String),
    /// The request (its body, a message) is larger than this route takes; the message says
    /// the limit.
    #[error("{0}")]
    TooLarge(String),
    /// The client took too long to send its request.
    #[error("the request took too long to arrive")]
    TimedOut,
    /// Something failed on our side. Details were logged; none are shown.
    #[error("something went wrong on our side; please try again")]
    Internal,
}

impl AppError {
    /// A validation failure on one field.
    pub fn invalid_field(field: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        AppError::Validation { fields: BTreeMap::from([(field.to_owned(), message.clone())]), message }
    }

    /// A validation failure on several fields at once (shown together in forms).
    pub fn invalid_fields(fields: FieldErrors) -> Self {
        AppError::Validation { message: "please correct the highlighted fields".into(), fields }
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        AppError::Forbidden(message.into())
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        AppError::NotFound(what.into())
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        AppError::Conflict(message.into())
    }

    /// The message for one field, if the error is a validation error naming it.
    pub fn field(&self, name: &str) -> Option<&str> {
        match self {
            AppError::Validation { fields, .. } => fields.get(name).map(String::as_str),
            _ => None,
        }
    }

    /// Stable machine-readable code, used in JSON error bodies.
    pub fn code(&self) -> &'static str {
        match self {
            AppError::Validation { .. } => "validation",
            AppError::Unauthorized => "unauthorized",
            AppError::InvalidCredentials => "invalid_credentials",
            AppError::Forbidden(_) => "forbidden",
            AppError::NotFound(_) => "not_found",
            AppError::Conflict(_) => "conflict",
            AppError::PaymentRequired(_) => "payment_required",
            AppError::RateLimited { .. } => "rate_limited",
            AppError::Unavailable(_) => "unavailable",
            AppError::TooLarge(_) => "too_large",
            AppError::TimedOut => "timed_out",
            AppError::Internal => "internal",
        }
    }

    /// The HTTP status this error maps to, in one place for every adapter.
    pub fn status(&self) -> u16 {
        match self {
            AppError::Validation { .. } => 422,
            AppError::Unauthorized | AppError::InvalidCredentials => 401,
            AppError::Forbidden(_) => 403,
            AppError::NotFound(_) => 404,
            AppError::Conflict(_) => 409,
            AppError::PaymentRequired(_) => 402,
            AppError::RateLimited { .. } => 429,
            AppError::Unavailable(_) => 503,
            AppError::TooLarge(_) => 413,
            AppError::TimedOut => 408,
            AppError::Internal => 500,
        }
    }
}

/// How [`AppError`] travels: a flat struct, not serde's adjacently tagged enum. The browser
/// bundle decodes errors on every page, and a flat struct's decoder is a fraction of the size
/// of a tagged enum's (which buffers content that may come before its tag).
#[derive(Serialize, Deserialize)]
struct Wire {
    error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    fields: FieldErrors,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry_after_secs: Option<u64>,
}

impl From<AppError> for Wire {
    fn from(err: AppError) -> Self {
        let error = err.code().to_owned();
        let (detail, fields, retry_after_secs) = match err {
            AppError::Validation { message, fields } => (Some(message), fields, None),
            AppError::Forbidden(text)
            | AppError::NotFound(text)
            | AppError::Conflict(text)
            | AppError::PaymentRequired(text)
            | AppError::Unavailable(text)
            | AppError::TooLarge(text) => (Some(text), FieldErrors::new(), None),
            AppError::RateLimited { retry_after_secs } => (None, FieldErrors::new(), Some(retry_after_secs)),
            AppError::Unauthorized | AppError::InvalidCredentials | AppError::TimedOut | AppError::Internal => {
                (None, FieldErrors::new(), None)
            }
        };
        Wire { error, detail, fields, retry_after_secs }
    }
}

/// A code this build does not know (or a part its variant needs missing) reads as
/// [`AppError::Internal`]: an error is still shown, never a decoding failure.
impl From<Wire> for AppError {
    fn from(wire: Wire) -> Self {
        let Wire { error, detail, fields, retry_after_secs } = wire;
        match (error.as_str(), detail, retry_after_secs) {
            ("validation", Some(message), _) => AppError::Validation { message, fields },
            ("unauthorized", ..) => AppError::Unauthorized,
            ("invalid_credentials", ..) => AppError::InvalidCredentials,
            ("forbidden", Some(text), _) => AppError::Forbidden(text),
            ("not_found", Some(text), _) => AppError::NotFound(text),
            ("conflict", Some(text), _) => AppError::Conflict(text),
            ("payment_required", Some(text), _) => AppError::PaymentRequired(text),
            ("rate_limited", _, Some(retry_after_secs)) => AppError::RateLimited { retry_after_secs },
            ("unavailable", Some(text), _) => AppError::Unavailable(text),
            ("too_large", Some(text), _) => AppError::TooLarge(text),
            ("timed_out", ..) => AppError::TimedOut,
            _ => AppError::Internal,
        }
    }
}

/// Lets server functions return `Result<T, AppError>` directly.
impl FromServerFnError for AppError {
    type Encoder = JsonText;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        match value {
            ServerFnErrorErr::Args(message) | ServerFnErrorErr::Deserialization(message) => {
                AppError::Validation { message, fields: FieldErrors::new() }
            }
            _ => AppError::Internal,
        }
    }
}

impl From<ServerFnError> for AppError {
    fn from(_: ServerFnError) -> Self {
        AppError::Internal
    }
}

/// JSON body of every error answered by the REST API.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// Machine-readable code (`validation`, `unauthorized`, `rate_limited`, ...).
    pub error: String,
    /// Human-readable message.
    pub message: String,
    /// Per-field messages for validation errors.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: FieldErrors,
}

impl From<&AppError> for ErrorBody {
    fn from(err: &AppError) -> Self {
        ErrorBody {
            error: err.code().to_owned(),
            message: err.to_string(),
            fields: match err {
                AppError::Validation { fields, .. } => fields.clone(),
                _ => FieldErrors::new(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Server functions carry `AppError` to the browser as JSON: every variant must survive the
    /// round trip (an internally tagged enum cannot serialize variants holding a bare string).
    #[test]
    fn every_variant_round_trips_through_json() {
        let all = [
            AppError::invalid_field("email", "needs an @"),
            AppError::Unauthorized,
            AppError::InvalidCredentials,
            AppError::forbidden("no"),
            AppError::not_found("host"),
            AppError::conflict("taken"),
            AppError::PaymentRequired("short by $1.00".into()),
            AppError::RateLimited { retry_after_secs: 7 },
            AppError::Unavailable("Stripe is down".into()),
            AppError::TooLarge("at most 64 KiB".into()),
            AppError::TimedOut,
            AppError::Internal,
        ];
        for err in all {
            let json = serde_json::to_string(&err).unwrap_or_else(|e| panic!("{err:?} does not serialize: {e}"));
            assert_eq!(serde_json::from_str::<AppError>(&json).unwrap(), err, "{json}");
            assert!(json.starts_with(&format!("{{\"error\":\"{}\"", err.code())), "{json}");
        }
    }

    /// A code from a newer build, or a variant missing its text, is still an error to show.
    #[test]
    fn unknown_or_incomplete_errors_read_as_internal() {
        for json in [r#"{"error":"teapot","detail":"short and stout"}"#, r#"{"error":"not_found"}"#] {
            assert_eq!(serde_json::from_str::<AppError>(json).unwrap(), AppError::Internal, "{json}");
        }
    }
}
