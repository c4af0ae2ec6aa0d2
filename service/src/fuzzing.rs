//! Entry points for fuzzing what strangers send us, one per parser: an agent's messages (JSON,
//! and the binary frames of SSH channels), Stripe's webhook deliveries, and offer-search query
//! strings. The cargo-fuzz targets under `fuzz/` call these with arbitrary bytes, and the test
//! command replays their corpora through them (`tests/it/fuzz_corpus.rs`): any input must come
//! back as a value or an error, never a panic, and what is accepted must hold its bounds.

use crate::{offers, payments};
use cardpool_domain::offers::OfferQuery;
use cardpool_protocol::{decode, tunnel};

/// The webhook secret the webhook target signs with.
pub const WEBHOOK_SECRET: &str = "whsec_fuzz";
/// The time the webhook target verifies at.
pub const WEBHOOK_NOW: i64 = 1_800_000_000;

/// An agent's message: text (JSON) unless the first byte is 0, then a binary data frame.
pub fn agent_message(data: &[u8]) {
    match data.split_first() {
        Some((0, frame)) => {
            if let Some((_, _, bytes)) = tunnel::parse_data_frame(frame) {
                assert!(bytes.len() < frame.len(), "a frame's data is within the frame");
            }
        }
        _ => {
            let Ok(text) = std::str::from_utf8(data) else { return };
            if let Ok(message) = decode::agent_message(text) {
                // What was accepted encodes again and decodes to itself.
                let again = serde_json::to_string(&message).expect("an accepted message encodes");
                assert_eq!(decode::agent_message(&again).expect("and decodes again"), message);
            }
        }
    }
}

/// A webhook delivery: the first line is the `Stripe-Signature` header, the rest the body.
/// Inputs whose header is `sign` get a real signature over the body, so the fuzzer reaches
/// the event parser too.
pub fn webhook(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (header, payload) = text.split_once('\n').unwrap_or((text, ""));
    let header =
        if header == "sign" { format!("t={WEBHOOK_NOW},v1={}", signature(payload)) } else { header.to_owned() };
    let _ = payments::verify_event(payload, &header, WEBHOOK_SECRET, WEBHOOK_NOW);
}

fn signature(payload: &str) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(WEBHOOK_SECRET.as_bytes()).expect("any key length");
    mac.update(format!("{WEBHOOK_NOW}.{payload}").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// An offer-search query string, as the API's `Query` extractor decodes it.
pub fn offer_query(data: &[u8]) {
    let Ok(query) = serde_urlencoded::from_bytes::<OfferQuery>(data) else { return };
    if offers::check_query(&query).is_ok() {
        // A search that passes the checks links to itself.
        let again: OfferQuery = serde_urlencoded::from_str(&query.to_query_string()).expect("its own link parses");
        assert!(offers::check_query(&again).is_ok(), "{query:?} passes but its link {again:?} does not");
    }
}
