#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fulcrum::fuzzing::grpc_health(data));
