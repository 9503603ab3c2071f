#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fulcrum::fuzzing::h2_to_h1(data));
