//! Accounts: who a person is on Cardpool, what they may do, and the values they type in.
//!
//! Validation lives in `parse` constructors so an invalid email or password cannot exist past
//! the edge; the browser runs the same checks for instant feedback, the server runs them again.

use crate::{AppError, FieldErrors};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Shortest password we accept (NIST SP 800-63B suggests at least 8; we ask a little more).
pub const MIN_PASSWORD_LEN: usize = 10;
/// Longest password we accept; bounds the hashing work one request can ask for.
pub const MAX_PASSWORD_LEN: usize = 256;
/// Longest name a personal API token may have.
pub const MAX_TOKEN_NAME_LEN: usize = 64;

/// A syntactically valid, normalised (trimmed, lower-cased) email address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Email(String);

impl Email {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let email = raw.trim().to_lowercase();
        if email.is_empty() {
            return Err("enter your email address".into());
        }
        if email.len() > 254 {
            return Err("that email address is too long".into());
        }
        let Some((local, domain)) = email.split_once('@') else {
            return Err("an email address needs an @".into());
        };
        let domain_ok = domain.contains('.')
            && !domain.starts_with('.')
            && !domain.ends_with('.')
            && !domain.contains("..")
            && domain.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        if local.is_empty() || local.len() > 64 || !domain_ok || email.chars().any(char::is_whitespace) {
            return Err("that does not look like an email address".into());
        }
        Ok(Email(email))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A password that meets the policy. Its contents never print.
#[derive(Clone)]
pub struct Password(String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(***)")
    }
}

impl Password {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let len = raw.chars().count();
        if len < MIN_PASSWORD_LEN {
            return Err(format!("use at least {MIN_PASSWORD_LEN} characters"));
        }
        if len > MAX_PASSWORD_LEN {
            return Err(format!("use at most {MAX_PASSWORD_LEN} characters"));
        }
        if raw.trim().is_empty() {
            return Err("a password cannot be only spaces".into());
        }
        Ok(Password(raw.to_owned()))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// What an account may do. Every account rents; providers and admins are opt-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Roles {
    pub renter: bool,
    pub provider: bool,
    pub admin: bool,
}

/// The signed-in account as the account itself sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Me {
    pub id: i64,
    pub email: String,
    pub roles: Roles,
    pub created_at: DateTime<Utc>,
}

/// The signed-in account as the web app's frame holds it on every page: [`Me`] with its
/// creation time as seconds since the epoch, so the code every first visit downloads needs no
/// date parser (chrono's is some 20 KB of wasm). Not part of the JSON API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Viewer {
    pub id: i64,
    pub email: String,
    pub roles: Roles,
    pub created_unix: i64,
    /// Unread notifications (the bell's badge) when the page was loaded.
    #[serde(default)]
    pub unread_notifications: u64,
}

impl From<Me> for Viewer {
    fn from(me: Me) -> Self {
        Viewer {
            id: me.id,
            email: me.email,
            roles: me.roles,
            created_unix: me.created_at.timestamp(),
            unread_notifications: 0,
        }
    }
}

impl Viewer {
    /// When the account was created.
    pub fn created_at(&self) -> DateTime<Utc> {
        DateTime::from_timestamp(self.created_unix, 0).unwrap_or_default()
    }
}

/// An account as an admin sees it in the user list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserSummary {
    pub id: i64,
    pub email: String,
    pub roles: Roles,
    pub created_at: DateTime<Utc>,
    /// When an admin suspended the account, and why.
    pub suspended_at: Option<DateTime<Utc>>,
    pub suspended_reason: Option<String>,
}

#[derive(Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignUpRequest {
    pub email: String,
    pub password: String,
}

impl std::fmt::Debug for SignUpRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignUpRequest").field("email", &self.email).finish_non_exhaustive()
    }
}

/// A sign-up request whose fields all passed validation.
#[derive(Debug, Clone)]
pub struct NewAccount {
    pub email: Email,
    pub password: Password,
}

impl SignUpRequest {
    /// Validates every field, reporting all problems at once.
    pub fn validate(&self) -> Result<NewAccount, AppError> {
        let mut fields = FieldErrors::new();
        let email = Email::parse(&self.email).map_err(|m| fields.insert("email".into(), m)).ok();
        let password = Password::parse(&self.password).map_err(|m| fields.insert("password".into(), m)).ok();
        match (email, password) {
            (Some(email), Some(password)) if fields.is_empty() => {
                if password.expose().trim().eq_ignore_ascii_case(email.as_str()) {
                    return Err(AppError::invalid_field("password", "your password must not be your email address"));
                }
                Ok(NewAccount { email, password })
            }
            _ => Err(AppError::invalid_fields(fields)),
        }
    }
}

#[derive(Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignInRequest {
    pub email: String,
    pub password: String,
}

impl std::fmt::Debug for SignInRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignInRequest").field("email", &self.email).finish_non_exhaustive()
    }
}

#[derive(Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChangePasswordRequest {
    pub current_password: String,
    pub new_password: String,
}

impl std::fmt::Debug for ChangePasswordRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChangePasswordRequest(***)")
    }
}

/// A personal API token as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiToken {
    pub id: i64,
    pub name: String,
    /// The first characters of the secret, so a person can tell tokens apart.
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
}

/// A token just created. `secret` is shown this once and is not stored anywhere readable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedApiToken {
    pub token: ApiToken,
    pub secret: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateApiTokenRequest {
    pub name: String,
}

impl CreateApiTokenRequest {
    /// The trimmed token name, or a field error.
    pub fn validate(&self) -> Result<String, AppError> {
        let name = self.name.trim();
        if name.is_empty() {
            return Err(AppError::invalid_field("name", "give the token a name"));
        }
        if name.chars().count() > MAX_TOKEN_NAME_LEN {
            return Err(AppError::invalid_field("name", format!("use at most {MAX_TOKEN_NAME_LEN} characters")));
        }
        if name.chars().any(char::is_control) {
            return Err(AppError::invalid_field("name", "use printable characters only"));
        }
        Ok(name.to_owned())
    }
}

/// Longest SSH public key accepted (an RSA-16384 key fits).
pub const MAX_SSH_KEY_LEN: usize = 16 << 10;
/// SSH keys one account may hold.
pub const MAX_SSH_KEYS: u64 = 50;

/// An SSH public key of the account: the SSH gateway lets it into any of the account's
/// running rentals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SshKey {
    pub id: i64,
    pub name: String,
    /// `ssh-ed25519`, `ssh-rsa`, ...
    pub algorithm: String,
    /// `SHA256:...`, as `ssh-keygen -lf` prints it.
    pub fingerprint: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AddSshKeyRequest {
    /// A label ("laptop"); the key's comment when left empty.
    #[serde(default)]
    pub name: String,
    /// One OpenSSH public key line: `ssh-ed25519 AAAA... comment`.
    pub public_key: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn emails_are_normalised() {
        assert_eq!(Email::parse("  Ada@Example.COM ").unwrap().as_str(), "ada@example.com");
    }

    #[test]
    fn bad_emails_are_rejected() {
        for bad in ["", "ada", "ada@", "@example.com", "ada@example", "ada@exa mple.com", "a@.com"] {
            assert!(Email::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn sign_up_reports_every_bad_field() {
        let err = SignUpRequest { email: "nope".into(), password: "short".into() }.validate().unwrap_err();
        assert!(err.field("email").is_some());
        assert!(err.field("password").is_some());
    }

    #[test]
    fn password_debug_hides_the_secret() {
        let p = Password::parse("correct horse battery").unwrap();
        assert!(!format!("{p:?}").contains("horse"));
    }

    proptest! {
        #[test]
        fn parsed_email_is_a_fixed_point(local in "[a-z0-9._%+-]{1,20}", domain in "[a-z0-9-]{1,20}\\.[a-z]{2,6}") {
            let raw = format!("{local}@{domain}");
            let email = Email::parse(&raw).unwrap();
            prop_assert_eq!(Email::parse(email.as_str()).unwrap(), email);
        }

        #[test]
        fn password_length_policy(len in 0usize..300) {
            let raw = "x".repeat(len);
            prop_assert_eq!(Password::parse(&raw).is_ok(), (MIN_PASSWORD_LEN..=MAX_PASSWORD_LEN).contains(&len));
        }
    }
}
