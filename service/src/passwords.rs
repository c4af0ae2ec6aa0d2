//! Password hashing with Argon2id at OWASP's recommended parameters.
//!
//! Hashing is deliberately slow and memory-hungry, so it runs on the blocking pool, never on
//! the async executor, and a semaphore bounds how many run at once (each takes ~19 MiB).
//! Unknown emails are verified against a dummy hash so sign-in takes as long either way.

use crate::{AppError, AppResult};
use argon2::{
    Algorithm, Argon2, Params, Version,
    password_hash::{PasswordHash, PasswordHasher as _, PasswordVerifier, SaltString, rand_core::OsRng},
};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// OWASP Password Storage Cheat Sheet: Argon2id, m = 19 MiB, t = 2, p = 1.
fn argon2() -> Argon2<'static> {
    let params = Params::new(19 * 1024, 2, 1, None).expect("static Argon2 parameters are valid");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// Hashes and verifies passwords off the async executor.
pub struct PasswordHasher {
    dummy_hash: Arc<str>,
    permits: Semaphore,
}

impl PasswordHasher {
    pub async fn new() -> AppResult<Self> {
        let permits = std::thread::available_parallelism().map_or(2, |n| n.get()) * 2;
        let mut hasher = PasswordHasher { dummy_hash: Arc::from(""), permits: Semaphore::new(permits) };
        hasher.dummy_hash = hasher.hash("cardpool dummy password for timing equalisation").await?.into();
        Ok(hasher)
    }

    /// Returns the PHC string (`$argon2id$v=19$m=19456,t=2,p=1$...`) for `password`.
    pub async fn hash(&self, password: &str) -> AppResult<String> {
        let _permit = self.permits.acquire().await.map_err(|_| AppError::Internal)?;
        let password = password.to_owned();
        tokio::task::spawn_blocking(move || {
            let salt = SaltString::generate(&mut OsRng);
            argon2().hash_password(password.as_bytes(), &salt).map(|h| h.to_string())
        })
        .await
        .map_err(|err| {
            tracing::error!(error = %err, "password hashing task failed");
            AppError::Internal
        })?
        .map_err(|err| {
            tracing::error!(error = %err, "password hashing failed");
            AppError::Internal
        })
    }

    /// Checks `password` against `stored` (a PHC string), or against the dummy hash when there
    /// is no account, so both paths cost the same.
    pub async fn verify(&self, password: &str, stored: Option<&str>) -> AppResult<bool> {
        let _permit = self.permits.acquire().await.map_err(|_| AppError::Internal)?;
        let exists = stored.is_some();
        let stored = stored.map_or_else(|| self.dummy_hash.to_string(), str::to_owned);
        let password = password.to_owned();
        let matches = tokio::task::spawn_blocking(move || {
            PasswordHash::new(&stored)
                .map(|parsed| argon2().verify_password(password.as_bytes(), &parsed).is_ok())
                .unwrap_or(false)
        })
        .await
        .map_err(|err| {
            tracing::error!(error = %err, "password verification task failed");
            AppError::Internal
        })?;
        Ok(exists && matches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hashes_with_argon2id_owasp_parameters_and_verifies() {
        let hasher = PasswordHasher::new().await.unwrap();
        let hash = hasher.hash("correct horse battery staple").await.unwrap();
        assert!(hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{hash}");
        assert!(hasher.verify("correct horse battery staple", Some(&hash)).await.unwrap());
        assert!(!hasher.verify("wrong horse battery staple", Some(&hash)).await.unwrap());
        assert!(!hasher.verify("correct horse battery staple", None).await.unwrap());
    }
}
