//! Secrets Cardpool hands out (API tokens, enrollment tokens, host credentials, session ids)
//! and stores only as digests.
//!
//! Each secret has 256 (session ids: 128) random bits, so a fast hash is right: unlike a
//! password there is nothing to guess, and a database leak yields nothing that signs anyone in.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use rand::RngCore;
use sha2::{Digest, Sha256};

/// `prefix` and 256 random bits, URL-safe.
pub fn new_secret(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// What is stored for `secret`: its SHA-256, hex.
pub fn digest(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_fresh_and_digests_fixed_length() {
        let (a, b) = (new_secret("cpt_"), new_secret("cpt_"));
        assert!(a.starts_with("cpt_") && a.len() == 4 + 43 && a != b);
        assert_eq!(digest(&a).len(), 64);
        assert_eq!(digest(&a), digest(&a));
        assert_ne!(digest(&a), digest(&b));
    }
}
