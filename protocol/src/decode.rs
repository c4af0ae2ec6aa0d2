//! What the server accepts from an agent, decided in one place: the JSON of an
//! [`AgentMessage`] whose every string is bounded (a log chunk's bytes aside, which the
//! message size bounds). The agent gateway decodes with this and the fuzzer drives it with
//! arbitrary input; whatever comes in, it answers a message or an error, never a panic.
//!
//! Telemetry, nearly every message a fleet sends, is decoded straight into its fields: serde's
//! derived decoding of an internally tagged enum first copies the whole message into a tree of
//! its own (every string, map and number allocated once more) to find the tag, and at 200,000
//! GPU samples a second that copy was the server's largest cost. Whatever that straight path
//! does not take goes the derived way, which decides, and words the error.

use crate::{AgentMessage, TelemetryFrame};
use serde::Deserialize;

/// The longest string an agent's message may carry (a log chunk's bytes aside).
pub const MAX_STRING_CHARS: usize = 4096;

/// Decodes one text message from an agent.
pub fn agent_message(text: &str) -> Result<AgentMessage, String> {
    let message = match serde_json::from_str::<TelemetryMessage>(text) {
        Ok(TelemetryMessage { stream, frames, dropped, .. }) => AgentMessage::Telemetry { stream, frames, dropped },
        Err(_) => serde_json::from_str(text).map_err(|err| format!("malformed message: {err}"))?,
    };
    match too_long_string(&message, text) {
        Some(field) => Err(format!("{field} is longer than {MAX_STRING_CHARS} characters")),
        None => Ok(message),
    }
}

/// [`AgentMessage::Telemetry`] as its own struct, the tag a field that takes only `telemetry`
/// (any other message fails here at once, its tag being the first thing serde writes).
#[derive(Deserialize)]
struct TelemetryMessage {
    #[serde(rename = "type")]
    _tag: TelemetryTag,
    stream: u64,
    frames: Vec<TelemetryFrame>,
    dropped: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum TelemetryTag {
    Telemetry,
}

/// Where a message carries a string longer than [`MAX_STRING_CHARS`], if it does. Telemetry
/// (the bulk, whose strings are GPU UUIDs, throttle reasons and process names) is checked field
/// by field; other messages are few, so their JSON is walked whole, which covers fields added
/// later too.
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
        AgentMessage::Telemetry { frames, .. } => {
            let long = |s: &String| s.chars().count() > MAX_STRING_CHARS;
            frames.iter().flat_map(|f| &f.gpus).find_map(|g| {
                if long(&g.uuid) {
                    Some("uuid".to_owned())
                } else if g.throttle_reasons.iter().any(long) {
                    Some("throttle_reasons".to_owned())
                } else {
                    g.processes.iter().any(|p| long(&p.name)).then(|| "name".to_owned())
                }
            })
        }
        AgentMessage::Logs { .. } => None,
        _ => walk(&serde_json::from_str(text).ok()?, "message"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GpuProcess, GpuSample, WorkloadStatus};

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

    fn telemetry(uuid: &str, reason: &str, process: &str) -> AgentMessage {
        let gpu = GpuSample {
            index: 3,
            uuid: uuid.into(),
            utilization_pct: Some(97),
            memory_used_bytes: Some(1 << 34),
            throttle_reasons: vec![reason.into()],
            processes: vec![GpuProcess { pid: 7, name: process.into(), memory_used_bytes: None }],
            xid_errors: vec![79],
            ..GpuSample::default()
        };
        AgentMessage::Telemetry {
            stream: 1_700_000_000_000,
            frames: vec![TelemetryFrame { sequence: 9, at_ms: 1_700_000_000_123, gpus: vec![gpu] }],
            dropped: 2,
        }
    }

    /// The straight path decodes telemetry exactly as the derived decoding does, takes nothing
    /// that one refuses, and leaves every other message to it.
    #[test]
    fn telemetry_decodes_as_the_derived_decoding_does() {
        let derived = |text: &str| serde_json::from_str::<AgentMessage>(text).ok();
        let message = telemetry("GPU-1", "power cap", "python");
        let written = serde_json::to_string(&message).unwrap();
        let cases = [
            written.clone(),
            // The tag last, an unknown field, fields in any order.
            r#"{"stream":5,"frames":[],"dropped":0,"extra":[1,{"a":2}],"type":"telemetry"}"#.to_owned(),
            r#"{"frames":[{"sequence":1,"at_ms":2,"gpus":[]}],"type":"telemetry","dropped":1,"stream":5}"#.to_owned(),
            // Refused by both: a field missing, a wrong type, the tag twice, another tag.
            r#"{"type":"telemetry","stream":5,"frames":[]}"#.to_owned(),
            r#"{"type":"telemetry","stream":-5,"frames":[],"dropped":0}"#.to_owned(),
            r#"{"type":"telemetry","stream":5,"frames":[{"sequence":1,"at_ms":2.5,"gpus":[]}],"dropped":0}"#.to_owned(),
            r#"{"type":"telemetry","type":"telemetry","stream":5,"frames":[],"dropped":0}"#.to_owned(),
            r#"{"type":"Telemetry","stream":5,"frames":[],"dropped":0}"#.to_owned(),
            r#"{"type":"heartbeat","sequence":4}"#.to_owned(),
            r#"{"type":"heartbeat","sequence":4,"stream":5,"frames":[],"dropped":0}"#.to_owned(),
        ];
        for text in &cases {
            assert_eq!(agent_message(text).ok(), derived(text), "{text}");
        }
        assert_eq!(agent_message(&written).unwrap(), message);
        assert!(derived(&cases[1]).is_some() && derived(&cases[3]).is_none(), "the cases cover both outcomes");
    }

    #[test]
    fn telemetry_strings_are_bounded() {
        let long = "x".repeat(MAX_STRING_CHARS + 1);
        for (message, field) in [
            (telemetry(&long, "idle", "p"), "uuid"),
            (telemetry("GPU-1", &long, "p"), "throttle_reasons"),
            (telemetry("GPU-1", "idle", &long), "name"),
        ] {
            let text = serde_json::to_string(&message).unwrap();
            assert_eq!(agent_message(&text).unwrap_err(), format!("{field} is longer than 4096 characters"));
        }
    }
}
