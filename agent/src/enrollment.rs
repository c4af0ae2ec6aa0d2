//! `cardpool-agent enroll`: trade a single-use enrollment token for this host's credential.

use crate::state::AgentState;
use serde::{Deserialize, Serialize};

#[derive(Serialize)]
struct EnrollRequest<'a> {
    token: &'a str,
    hostname: &'a str,
}

#[derive(Deserialize)]
struct Enrolled {
    host_id: i64,
    credential: String,
}

#[derive(Deserialize)]
struct ErrorBody {
    message: String,
}

/// Calls the server's `enroll_host` and returns the state to save.
pub async fn enroll(server: &str, token: &str, hostname: &str) -> Result<AgentState, String> {
    let server = server.trim_end_matches('/');
    crate::connection::gateway_url(server)?;
    let response = reqwest::Client::new()
        .post(format!("{server}/api/v1/agent/enroll"))
        .json(&EnrollRequest { token: token.trim(), hostname })
        .send()
        .await
        .map_err(|e| format!("cannot reach {server}: {e}"))?;
    let status = response.status();
    if status.is_success() {
        let enrolled: Enrolled = response.json().await.map_err(|e| format!("unexpected answer from {server}: {e}"))?;
        return Ok(AgentState {
            server: server.to_owned(),
            host_id: enrolled.host_id,
            credential: enrolled.credential,
        });
    }
    let message = response.json::<ErrorBody>().await.map(|b| b.message).unwrap_or_else(|_| status.to_string());
    Err(if status == 401 {
        "the enrollment token is unknown, already used or expired; create a new one on your Hosts page".into()
    } else {
        format!("enrollment failed: {message}")
    })
}
