//! Where `cardpool-cli login` keeps the API token: one JSON file, readable by its owner only.
//!
//! The file is written whole to a temporary file created with mode 0600 and renamed into
//! place, so no moment exists where the token is readable by others or half written; one
//! that others can read is refused, as OpenSSH refuses a private key with open permissions.
//! `CARDPOOL_TOKEN` (with `CARDPOOL_URL`) replaces the file for scripts and CI.

use crate::failure::{Failure, Outcome};
use serde::{Deserialize, Serialize};
use std::{
    io::Write,
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

/// A signed-in CLI: the server and the token it made for this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// The server, e.g. `https://cardpool.example` (no trailing slash).
    pub url: String,
    /// The personal API token (`cpt_...`).
    pub token: String,
    /// The token's id on the server, so `logout` can revoke it.
    #[serde(default)]
    pub token_id: Option<i64>,
    #[serde(default)]
    pub email: Option<String>,
}

/// The directory the CLI keeps its file in: `--config-dir` / `CARDPOOL_CONFIG_DIR`, else
/// `$XDG_CONFIG_HOME/cardpool`, else `~/.config/cardpool`.
pub fn config_dir(explicit: Option<&Path>) -> Outcome<PathBuf> {
    if let Some(dir) = explicit {
        return Ok(dir.to_owned());
    }
    let from_env = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(xdg) = from_env("XDG_CONFIG_HOME") {
        return Ok(xdg.join("cardpool"));
    }
    from_env("HOME")
        .map(|home| home.join(".config").join("cardpool"))
        .ok_or_else(|| Failure::other("no home directory: set CARDPOOL_CONFIG_DIR"))
}

fn file(dir: &Path) -> PathBuf {
    dir.join("credentials.json")
}

/// The saved credentials, if `login` saved any.
pub fn load(dir: &Path) -> Outcome<Option<Credentials>> {
    let path = file(dir);
    let metadata = match std::fs::metadata(&path) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(Failure::other(format!("reading {}: {err}", path.display()))),
    };
    if metadata.permissions().mode() & 0o077 != 0 {
        return Err(Failure::other(format!(
            "{} can be read by other users; run `chmod 600 {}` or log in again",
            path.display(),
            path.display()
        )));
    }
    let text =
        std::fs::read_to_string(&path).map_err(|e| Failure::other(format!("reading {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Failure::other(format!("{} is not a credentials file ({e}); log in again", path.display())))
}

/// Saves `credentials` (mode 0600, in a directory of mode 0700), replacing what was there.
pub fn save(dir: &Path, credentials: &Credentials) -> Outcome<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| Failure::other(format!("creating {}: {e}", dir.display())))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let path = file(dir);
    let temporary = dir.join(format!(".credentials.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    let mut out = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temporary)?;
    let json = serde_json::to_vec_pretty(credentials).map_err(|e| Failure::other(e.to_string()))?;
    out.write_all(&json)?;
    out.sync_all()?;
    std::fs::rename(&temporary, &path)?;
    Ok(path)
}

/// Forgets the saved credentials; true if there were any.
pub fn remove(dir: &Path) -> Outcome<bool> {
    match std::fs::remove_file(file(dir)) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_for_the_owner_only_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().join("cardpool");
        assert_eq!(load(&dir).unwrap(), None, "nothing saved yet");
        let saved = Credentials {
            url: "http://127.0.0.1:3000".into(),
            token: "cpt_secret".into(),
            token_id: Some(7),
            email: Some("renter@example.com".into()),
        };
        let path = save(&dir, &saved).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(load(&dir).unwrap(), Some(saved.clone()));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file left behind");

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let refused = load(&dir).unwrap_err();
        assert!(refused.message.contains("chmod 600"), "{refused}");

        save(&dir, &saved).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600, "saving again mends it");
        assert!(remove(&dir).unwrap());
        assert!(!remove(&dir).unwrap());
        assert_eq!(load(&dir).unwrap(), None);
    }
}
