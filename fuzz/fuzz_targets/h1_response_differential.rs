#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fulcrum::fuzzing::h1_response_differential(data));
