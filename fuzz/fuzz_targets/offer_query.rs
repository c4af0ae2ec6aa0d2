#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cardpool_service::fuzzing::offer_query(data));
