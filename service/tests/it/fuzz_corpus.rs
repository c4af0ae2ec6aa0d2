//! The fuzzers' corpora (and any crash they saved) replayed through the same entry points the
//! cargo-fuzz targets drive (`cardpool_service::fuzzing`), on stable, in the test command: what
//! fuzzing found once stays fixed. `scripts/fuzz.sh` grows the corpora.

use cardpool_service::fuzzing;
use std::path::Path;

fn replay(target: &str, entry: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut inputs = 0;
    for dir in [root.join("corpus").join(target), root.join("artifacts").join(target)] {
        let Ok(files) = std::fs::read_dir(&dir) else { continue };
        for file in files {
            let path = file.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            if std::panic::catch_unwind(|| entry(&data)).is_err() {
                panic!("{target} panics on {}", path.display());
            }
            inputs += 1;
        }
    }
    assert!(inputs >= 3, "{target}: the corpus is missing ({inputs} inputs)");
}

#[test]
fn agent_messages_replay() {
    replay("agent_message", fuzzing::agent_message);
}

#[test]
fn webhook_deliveries_replay() {
    replay("webhook", fuzzing::webhook);
}

#[test]
fn offer_queries_replay() {
    replay("offer_query", fuzzing::offer_query);
}
