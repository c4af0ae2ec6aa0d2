//! Who may SSH into which rental: renters' account keys, and the decision the SSH gateway
//! asks for on every login.
//!
//! A login is `r<rental id>` with a public key. It is let in when the rental is running and
//! the key is the one given at booking or one of its renter's account keys; everything else
//! (unknown rental, another renter's key, a rental not running) is the same refusal, so the
//! gateway tells a stranger nothing. Keys are matched by their OpenSSH SHA-256 fingerprint,
//! computed here from the key's wire bytes, the same bytes the client proved it holds.

use crate::{
    AppError, AppResult, Services,
    auth::Principal,
    db::DbResultExt,
    entities::{rentals, ssh_keys},
};
use base64::{Engine, engine::general_purpose::STANDARD, engine::general_purpose::STANDARD_NO_PAD};
use cardpool_domain::{
    account::{AddSshKeyRequest, MAX_SSH_KEY_LEN, MAX_SSH_KEYS, MAX_TOKEN_NAME_LEN, SshKey},
    rentals::{RentalState, SshAccess, Workload},
};
use chrono::Utc;
use sea_orm::{ActiveModelTrait, ActiveValue::Set, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder};
use sha2::{Digest, Sha256};

/// Key types OpenSSH clients use.
const ALGORITHMS: [&str; 8] = [
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
    "rsa-sha2-512",
];

/// Where renters reach the SSH gateway, and the key it proves itself with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshEndpoint {
    pub host: String,
    pub port: u16,
    pub host_key_fingerprint: String,
}

/// A public key as the service keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub algorithm: String,
    /// `algorithm base64`, without comment.
    pub openssh: String,
    pub fingerprint: String,
    pub comment: String,
}

/// OpenSSH's fingerprint of a key's wire bytes: `SHA256:` and unpadded base64.
pub fn fingerprint(blob: &[u8]) -> String {
    format!("SHA256:{}", STANDARD_NO_PAD.encode(Sha256::digest(blob)))
}

/// Reads one OpenSSH public key line (`ssh-ed25519 AAAA... comment`).
pub fn parse_public_key(text: &str) -> Result<PublicKey, String> {
    let text = text.trim();
    let hint = "one OpenSSH public key line, like ssh-ed25519 AAAA… you@laptop (the .pub file)";
    if text.is_empty() || text.len() > MAX_SSH_KEY_LEN || text.contains(['\n', '\r']) {
        return Err(hint.into());
    }
    if text.contains("PRIVATE KEY") {
        return Err("that is a private key: paste the public one (the .pub file), and keep this one secret".into());
    }
    let mut parts = text.split_whitespace();
    let (Some(algorithm), Some(encoded)) = (parts.next(), parts.next()) else { return Err(hint.into()) };
    if !ALGORITHMS.contains(&algorithm) {
        return Err(format!("{algorithm:?} is not a key type SSH uses ({hint})"));
    }
    let blob = STANDARD.decode(encoded).map_err(|_| format!("the key data is not base64 ({hint})"))?;
    // The wire format starts with the key type again, as a length-prefixed string.
    let named = blob
        .get(..4)
        .and_then(|len| usize::try_from(u32::from_be_bytes(len.try_into().ok()?)).ok())
        .and_then(|len| blob.get(4..4 + len));
    if named != Some(algorithm.as_bytes()) || blob.len() < 4 + algorithm.len() + 16 {
        return Err(format!("the key data is not a {algorithm} key ({hint})"));
    }
    Ok(PublicKey {
        algorithm: algorithm.to_owned(),
        openssh: format!("{algorithm} {encoded}"),
        fingerprint: fingerprint(&blob),
        comment: parts.collect::<Vec<_>>().join(" "),
    })
}

fn dto(row: &ssh_keys::Model) -> SshKey {
    SshKey {
        id: row.id,
        name: row.name.clone(),
        algorithm: row.algorithm.clone(),
        fingerprint: row.fingerprint.clone(),
        created_at: row.created_at,
        last_used_at: row.last_used_at,
    }
}

/// Adds a public key to the caller's account.
pub async fn add_ssh_key(services: &Services, principal: &Principal, request: &AddSshKeyRequest) -> AppResult<SshKey> {
    let key = parse_public_key(&request.public_key).map_err(|e| AppError::invalid_field("public_key", e))?;
    let name = match request.name.trim() {
        "" if key.comment.is_empty() => key.algorithm.clone(),
        "" => key.comment.chars().take(MAX_TOKEN_NAME_LEN).collect(),
        name if name.chars().count() > MAX_TOKEN_NAME_LEN => {
            return Err(AppError::invalid_field("name", format!("use at most {MAX_TOKEN_NAME_LEN} characters")));
        }
        name if name.chars().any(char::is_control) => {
            return Err(AppError::invalid_field("name", "use printable characters only"));
        }
        name => name.to_owned(),
    };
    let mine = ssh_keys::Entity::find().filter(ssh_keys::Column::UserId.eq(principal.user_id));
    if mine
        .clone()
        .filter(ssh_keys::Column::Fingerprint.eq(&key.fingerprint))
        .count(&services.db)
        .await
        .context("checking keys")?
        > 0
    {
        return Err(AppError::invalid_field("public_key", "this key is already on your account"));
    }
    if mine.count(&services.db).await.context("counting keys")? >= MAX_SSH_KEYS {
        return Err(AppError::conflict(format!("you already have {MAX_SSH_KEYS} SSH keys; remove one first")));
    }
    let row = ssh_keys::ActiveModel {
        user_id: Set(principal.user_id),
        name: Set(name),
        algorithm: Set(key.algorithm),
        public_key: Set(key.openssh),
        fingerprint: Set(key.fingerprint),
        created_at: Set(Utc::now()),
        last_used_at: Set(None),
        ..Default::default()
    }
    .insert(&services.db)
    .await
    .context("inserting ssh key")?;
    tracing::info!(user.id = principal.user_id, key.id = row.id, "ssh key added");
    Ok(dto(&row))
}

/// The caller's keys, newest first.
pub async fn list_ssh_keys(services: &Services, principal: &Principal) -> AppResult<Vec<SshKey>> {
    let rows = ssh_keys::Entity::find()
        .filter(ssh_keys::Column::UserId.eq(principal.user_id))
        .order_by_desc(ssh_keys::Column::Id)
        .all(&services.db)
        .await
        .context("listing ssh keys")?;
    Ok(rows.iter().map(dto).collect())
}

/// Removes one of the caller's keys; someone else's is not found. Sessions it opened go on
/// until they end (as with OpenSSH's `authorized_keys`).
pub async fn remove_ssh_key(services: &Services, principal: &Principal, key_id: i64) -> AppResult<()> {
    let removed = ssh_keys::Entity::delete_many()
        .filter(ssh_keys::Column::Id.eq(key_id))
        .filter(ssh_keys::Column::UserId.eq(principal.user_id))
        .exec(&services.db)
        .await
        .context("removing ssh key")?;
    if removed.rows_affected == 0 {
        return Err(AppError::not_found("SSH key"));
    }
    tracing::info!(user.id = principal.user_id, key.id = key_id, "ssh key removed");
    Ok(())
}

/// A login the gateway may relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SshTarget {
    pub rental_id: i64,
    pub host_id: i64,
    pub renter_id: i64,
}

/// Decides a login: `user` must be `r<rental id>` of a running rental, `key_blob` (the wire
/// bytes of a key the client proved it holds) its booking key or one of its renter's keys.
/// Every refusal is `Unauthorized`; the reason is logged, not told.
pub async fn authorize_login(services: &Services, user: &str, key_blob: &[u8]) -> AppResult<SshTarget> {
    let refuse = |why: &str| {
        tracing::info!(ssh.user = user, reason = why, "ssh login refused");
        AppError::Unauthorized
    };
    let rental_id = user
        .strip_prefix('r')
        .filter(|id| id.len() <= 18 && id.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|id| id.parse::<i64>().ok())
        .ok_or_else(|| refuse("not an r<rental id> user"))?;
    let rental = rentals::Entity::find_by_id(rental_id)
        .one(&services.db)
        .await
        .context("loading rental")?
        .ok_or_else(|| refuse("no such rental"))?;
    let presented = fingerprint(key_blob);
    let workload: Workload = serde_json::from_str(&rental.workload).unwrap_or_default();
    let booked = workload
        .ssh_public_key
        .as_deref()
        .and_then(|k| parse_public_key(k).ok())
        .is_some_and(|k| k.fingerprint == presented);
    let account_key = if booked {
        None
    } else {
        ssh_keys::Entity::find()
            .filter(ssh_keys::Column::UserId.eq(rental.renter_id))
            .filter(ssh_keys::Column::Fingerprint.eq(&presented))
            .one(&services.db)
            .await
            .context("loading ssh key")?
    };
    if !booked && account_key.is_none() {
        return Err(refuse("the key is neither the rental's nor its renter's"));
    }
    if RentalState::parse(&rental.state) != Some(RentalState::Running) {
        return Err(refuse("the rental is not running"));
    }
    if let Some(key) = account_key {
        let used = ssh_keys::Entity::update_many()
            .col_expr(ssh_keys::Column::LastUsedAt, sea_orm::sea_query::Expr::value(Utc::now()))
            .filter(ssh_keys::Column::Id.eq(key.id))
            .exec(&services.db)
            .await;
        if let Err(err) = used {
            tracing::warn!(error = %err, key.id = key.id, "could not record ssh key use");
        }
    }
    Ok(SshTarget { rental_id, host_id: rental.host_id, renter_id: rental.renter_id })
}

/// Whether a rental a session was let into still runs (sessions end with their rental).
pub async fn still_running(services: &Services, rental_id: i64) -> AppResult<bool> {
    let rental = rentals::Entity::find_by_id(rental_id).one(&services.db).await.context("loading rental")?;
    Ok(rental.is_some_and(|r| RentalState::parse(&r.state) == Some(RentalState::Running)))
}

/// The SSH command for a rental, when the gateway runs.
pub fn access(services: &Services, rental_id: i64) -> Option<SshAccess> {
    let endpoint = services.settings.ssh.as_ref()?;
    let user = format!("r{rental_id}");
    let port = if endpoint.port == 22 { String::new() } else { format!("-p {} ", endpoint.port) };
    Some(SshAccess {
        command: format!("ssh {port}{user}@{}", endpoint.host),
        user,
        host: endpoint.host.clone(),
        port: endpoint.port,
        host_key_fingerprint: endpoint.host_key_fingerprint.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ssh-keygen -t ed25519` output and its `ssh-keygen -lf` fingerprint.
    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB1giXrhdy0mpc0H7M7hUlz9x6N9KincZcncUHxa8bwM you@laptop";

    #[test]
    fn keys_parse_with_their_fingerprint_and_junk_is_refused() {
        let key = parse_public_key(KEY).unwrap();
        assert_eq!(key.algorithm, "ssh-ed25519");
        assert_eq!(key.comment, "you@laptop");
        assert_eq!(key.fingerprint, "SHA256:3fsIdrpKKMCQZkAHw+WIuQ19uPa2K6xJUU294Sx/KtQ");
        assert_eq!(parse_public_key(&key.openssh).unwrap().fingerprint, key.fingerprint);
        for bad in [
            "",
            "ssh-ed25519",
            "ssh-ed25519 not-base64!",
            "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIB1giXrhdy0mpc0H7M7hUlz9x6N9KincZcncUHxa8bwM",
            "-----BEGIN OPENSSH PRIVATE KEY-----",
            "ssh-dss AAAA",
            &format!("{KEY}\nssh-ed25519 AAAA"),
        ] {
            assert!(parse_public_key(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(parse_public_key("-----BEGIN OPENSSH PRIVATE KEY-----").unwrap_err().contains("private key"));
    }
}
