//! The agent's state directory: which server it belongs to, its host id and its credential.
//!
//! Written once by `enroll`, read by `run`. The credential is a secret: the directory is
//! created 0700 and the file 0600, and neither is ever printed.

use serde::{Deserialize, Serialize};
use std::{
    io::Write,
    os::unix::fs::{DirBuilderExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

const STATE_FILE: &str = "host.json";

#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AgentState {
    pub server: String,
    pub host_id: i64,
    pub credential: String,
}

impl std::fmt::Debug for AgentState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentState")
            .field("server", &self.server)
            .field("host_id", &self.host_id)
            .finish_non_exhaustive()
    }
}

/// `$CARDPOOL_AGENT_STATE_DIR`, else `/var/lib/cardpool-agent` for root, else
/// `~/.local/state/cardpool-agent`.
pub fn default_dir() -> PathBuf {
    if let Ok(home) = std::env::var("HOME")
        && std::env::var("USER").map(|u| u != "root").unwrap_or(true)
        && !home.is_empty()
        && home != "/root"
    {
        return PathBuf::from(home).join(".local/state/cardpool-agent");
    }
    PathBuf::from("/var/lib/cardpool-agent")
}

pub fn save(dir: &Path, state: &AgentState) -> Result<PathBuf, String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create state directory {}: {e}", dir.display()))?;
    let path = dir.join(STATE_FILE);
    let json = serde_json::to_vec_pretty(state).map_err(|e| e.to_string())?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    file.write_all(&json).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

pub fn load(dir: &Path) -> Result<AgentState, String> {
    let path = dir.join(STATE_FILE);
    let bytes = std::fs::read(&path).map_err(|e| {
        format!(
            "this host is not enrolled ({}: {e}); run `cardpool-agent enroll --server URL --token TOKEN` first",
            path.display()
        )
    })?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{} is damaged: {e}; enroll again", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn state_is_private_and_round_trips() {
        let dir = std::env::temp_dir().join(format!("cardpool-agent-test-{}", std::process::id()));
        let state = AgentState { server: "http://127.0.0.1:3000".into(), host_id: 7, credential: "cph_secret".into() };
        let path = save(&dir, &state).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(load(&dir).unwrap(), state);
        assert!(!format!("{state:?}").contains("cph_secret"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(load(&dir).unwrap_err().contains("not enrolled"));
    }
}
