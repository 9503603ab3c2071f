//! Replays every input of the fuzz corpora (`fuzz/corpus/<target>/`) through the same functions
//! the fuzz targets call, on stable, so what the fuzzer once found interesting keeps being checked
//! by `cargo test` without nightly or libFuzzer. An empty or missing corpus fails: a target whose
//! corpus is lost would otherwise pass by checking nothing.

use std::path::PathBuf;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot read the corpus {}: {e}", dir.display()));
    let mut count = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        // Name the input that breaks, so it can be run again with `cargo fuzz run TARGET FILE`.
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(outcome.is_ok(), "{target}: {} breaks an invariant", path.display());
        count += 1;
    }
    assert!(count > 0, "the corpus {} is empty", dir.display());
    println!("{target}: {count} inputs replayed");
}

#[test]
fn the_http_framing_corpus_passes() {
    replay("http_framing", fulcrum::fuzzing::http_framing);
}

#[test]
fn the_ftp_control_corpus_passes() {
    replay("ftp_control", fulcrum::fuzzing::ftp_control);
}

#[test]
fn the_config_text_corpus_passes() {
    replay("config_text", fulcrum::fuzzing::config_text);
}

#[test]
fn the_admin_change_corpus_passes() {
    replay("admin_change", fulcrum::fuzzing::admin_change);
}

#[test]
fn the_proxy_header_corpus_passes() {
    replay("proxy_header", fulcrum::fuzzing::proxy_header);
}

#[test]
fn the_client_hello_corpus_passes() {
    replay("client_hello", fulcrum::fuzzing::client_hello);
}

#[test]
fn the_grpc_health_corpus_passes() {
    replay("grpc_health", fulcrum::fuzzing::grpc_health);
}

#[test]
fn the_h2_to_h1_corpus_passes() {
    replay("h2_to_h1", fulcrum::fuzzing::h2_to_h1);
}

#[test]
fn the_h1_differential_corpus_passes() {
    replay("h1_differential", fulcrum::fuzzing::h1_differential);
}

#[test]
fn the_h1_response_differential_corpus_passes() {
    replay("h1_response_differential", fulcrum::fuzzing::h1_response_differential);
}
