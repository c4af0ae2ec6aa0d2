//! What went wrong, and the exit code a script can rely on for it.
//!
//! Every failure the server answers carries its HTTP status and the API's JSON error body;
//! both map onto one small, documented set of exit codes, so `cardpool-cli rent ... || ...`
//! can tell "not enough free GPUs" from "top up first" without parsing messages.

use cardpool_domain::{FieldErrors, error::ErrorBody};
use std::fmt;

/// The kinds of failure, each with its own exit code (see [`Failure::exit_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Anything not listed below (a server error, a broken answer, a local I/O error).
    Other,
    /// Not signed in, or the token was revoked: run `cardpool-cli login`.
    SignIn,
    /// Signed in, but this account may not do that.
    Forbidden,
    NotFound,
    /// The request collides with the market's state (not enough free GPUs, rental not live).
    Conflict,
    /// The balance is too low: top up.
    Payment,
    /// The input was refused (by the CLI or the server); the message says which field.
    Invalid,
    /// Too many attempts; the message says when to try again.
    RateLimited,
    /// The server cannot be reached or a service behind it is down: retry later.
    Unavailable,
}

/// The exit codes, as `--help` lists them.
pub const EXIT_CODES: &str = "\
Exit codes:
  0   success
  1   any other failure (a server error, a local I/O error)
  2   bad command-line usage
  3   not signed in, or the token is no longer valid (run `cardpool-cli login`)
  4   forbidden: the account may not do that
  5   not found
  6   conflict: e.g. not enough free GPUs, or the rental is no longer live
  7   payment required: the balance is too low (top up)
  8   invalid input (the message names the field)
  9   rate limited (try again later)
  10  the server is unreachable or unavailable (retry later)";

/// A failure: its kind, the message for people and, for invalid input, each field's problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: Kind,
    pub message: String,
    pub fields: FieldErrors,
}

impl Failure {
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        Failure { kind, message: message.into(), fields: FieldErrors::new() }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Kind::Invalid, message)
    }

    pub fn other(message: impl Into<String>) -> Self {
        Self::new(Kind::Other, message)
    }

    /// An error answer of the API: its status decides the kind, its body the message.
    pub fn from_answer(status: u16, body: &str) -> Self {
        let kind = match status {
            401 => Kind::SignIn,
            403 => Kind::Forbidden,
            404 => Kind::NotFound,
            409 => Kind::Conflict,
            402 => Kind::Payment,
            400 | 413 | 422 => Kind::Invalid,
            429 => Kind::RateLimited,
            502..=504 => Kind::Unavailable,
            _ => Kind::Other,
        };
        match serde_json::from_str::<ErrorBody>(body) {
            Ok(answer) => Failure { kind, message: answer.message, fields: answer.fields },
            Err(_) => Failure::new(kind, format!("the server answered {status}")),
        }
    }

    /// The process's exit status for this failure.
    pub fn exit_code(&self) -> u8 {
        match self.kind {
            Kind::Other => 1,
            Kind::SignIn => 3,
            Kind::Forbidden => 4,
            Kind::NotFound => 5,
            Kind::Conflict => 6,
            Kind::Payment => 7,
            Kind::Invalid => 8,
            Kind::RateLimited => 9,
            Kind::Unavailable => 10,
        }
    }

    /// The machine-readable code printed with `--json` (the API's own codes where it has one).
    pub fn code(&self) -> &'static str {
        match self.kind {
            Kind::Other => "failed",
            Kind::SignIn => "unauthorized",
            Kind::Forbidden => "forbidden",
            Kind::NotFound => "not_found",
            Kind::Conflict => "conflict",
            Kind::Payment => "payment_required",
            Kind::Invalid => "validation",
            Kind::RateLimited => "rate_limited",
            Kind::Unavailable => "unavailable",
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        for (field, problem) in &self.fields {
            write!(f, "\n  {field}: {problem}")?;
        }
        if self.kind == Kind::SignIn {
            write!(f, "\n  (run `cardpool-cli login`)")?;
        }
        Ok(())
    }
}

impl From<cardpool_domain::AppError> for Failure {
    /// A local check of the domain's (the booking form's parser) failed as the server's would.
    fn from(err: cardpool_domain::AppError) -> Self {
        let body = ErrorBody::from(&err);
        Failure::from_answer(err.status(), &serde_json::to_string(&body).unwrap_or_default())
    }
}

impl From<std::io::Error> for Failure {
    fn from(err: std::io::Error) -> Self {
        Failure::other(err.to_string())
    }
}

pub type Outcome<T = ()> = Result<T, Failure>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_to_documented_exit_codes() {
        let body = r#"{"error":"conflict","message":"only 1 GPU is free"}"#;
        let conflict = Failure::from_answer(409, body);
        assert_eq!((conflict.exit_code(), conflict.message.as_str()), (6, "only 1 GPU is free"));
        assert_eq!(Failure::from_answer(402, "{}").exit_code(), 7, "a body that is not ours keeps the status");
        assert_eq!(Failure::from_answer(401, "").exit_code(), 3);
        assert_eq!(Failure::from_answer(500, "oops").exit_code(), 1);
        for (status, code) in [(403, 4), (404, 5), (422, 8), (413, 8), (429, 9), (503, 10)] {
            assert_eq!(Failure::from_answer(status, "").exit_code(), code, "{status}");
            assert!(EXIT_CODES.contains(&format!("  {code} ")), "exit code {code} is documented");
        }
    }

    #[test]
    fn field_problems_are_shown_under_the_message() {
        let body = r#"{"error":"validation","message":"check the form","fields":{"gpu_count":"at least 1"}}"#;
        let failure = Failure::from_answer(422, body);
        assert_eq!(failure.to_string(), "check the form\n  gpu_count: at least 1");
    }
}
