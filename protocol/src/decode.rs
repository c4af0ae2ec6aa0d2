//! What the server accepts from an agent, decided in one place: the JSON of an
//! [`AgentMessage`] whose every string is bounded (a log chunk's bytes aside, which the
//! message size bounds). The agent gateway decodes with this and the fuzzer drives it with
//! arbitrary input; whatever comes in, it answers a message or an error, never a panic.

use crate::AgentMessage;

/// The longest string an agent's message may carry (a log chunk's bytes aside).
pub const MAX_STRING_CHARS: usize = 4096;

/// Decodes one text message from an agent.
pub fn agent_message(text: &str) -> Result<AgentMessage, String> {
    let message: AgentMessage = serde_json::from_str(text).map_err(|err| format!("malformed message: {err}"))?;
    match too_long_string(&message, text) {
        Some(field) => Err(format!("{field} is longer than {MAX_STRING_CHARS} characters")),
        None => Ok(message),
    }
}

/// Where a message carries a string longer than [`MAX_STRING_CHARS`], if it does. Telemetry
/// (the bulk, with only GPU UUIDs for strings) is checked field by field; other messages are
/// few, so their JSON is walked whole, which covers fields added later too.
fn too_long_string(message: &AgentMessage, text: &str) -> Option<String> {
    fn walk(value: &serde_json::Value, path: &str) -> Option<String> {
        match value {
            serde_json::Value::String(s) if s.chars().count() > MAX_STRING_CHARS => Some(path.to_owned()),
            serde_json::Value::Array(items) => items.iter().find_map(|v| walk(v, path)),
            serde_json::Value::Object(fields) => fields.iter().find_map(|(k, v)| walk(v, k)),
            _ => None,
        }
    }
    match message {
        AgentMessage::Telemetry { frames, .. } => frames
            .iter()
            .flat_map(|f| &f.gpus)
            .any(|g| g.uuid.chars().count() > MAX_STRING_CHARS)
            .then(|| "uuid".to_owned()),
        AgentMessage::Logs { .. } => None,
        _ => walk(&serde_json::from_str(text).ok()?, "message"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WorkloadStatus;

    #[test]
    fn long_strings_are_found_wherever_they_are() {
        let failed =
            |reason: String| AgentMessage::RentalStatus { rental_id: 1, status: WorkloadStatus::Failed { reason } };
        let long = serde_json::to_string(&failed("x".repeat(MAX_STRING_CHARS + 1))).unwrap();
        assert_eq!(agent_message(&long).unwrap_err(), "reason is longer than 4096 characters");
        let fine = serde_json::to_string(&failed("x".repeat(MAX_STRING_CHARS))).unwrap();
        assert!(agent_message(&fine).is_ok());
        assert!(agent_message("{\"type\":\"no_such_thing\"}").unwrap_err().starts_with("malformed message"));
    }
}
