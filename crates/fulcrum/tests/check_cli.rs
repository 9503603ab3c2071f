//! `fulcrum check` on broken configs: each error names the exact line, and the exit is non-zero.

use std::process::Command;

fn check(file: &str) -> (bool, String) {
    let path = format!("{}/tests/configs/{file}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["check", &path]).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn each_broken_config_is_refused_at_its_line() {
    let cases = [
        ("unknown-key.toml", 4, "half_closed"),
        ("bad-duration.toml", 4, "2 parsecs"),
        ("duplicate-listen.toml", 10, "used by service"),
        ("zero-servers.toml", 2, "has no servers"),
        ("weight-range.toml", 11, "weight = 1000 is out of range: use 1 to 256"),
        ("unresolvable.toml", 6, "no-such-host.invalid"),
        ("bad-algorithm.toml", 4, "fastest"),
        ("syntax.toml", 2, ""),
        ("public-admin.toml", 2, "loopback"),
    ];
    for (file, line, text) in cases {
        let (ok, err) = check(file);
        assert!(!ok, "{file} must be refused");
        let located = format!("{file}:{line}:");
        assert!(err.contains(&located), "{file}: expected an error at {located}, got:\n{err}");
        assert!(err.contains(text), "{file}: expected {text:?} in:\n{err}");
        assert!(err.contains("hint:") || file == "syntax.toml", "{file}: expected a hint in:\n{err}");
        assert!(!err.contains("panicked"), "{file}: {err}");
    }
}

#[test]
fn the_paper_rule_and_the_demo_config_pass() {
    let path = format!("{}/../../examples/paper-http.toml", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["check", &path]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["check", "/nonexistent/fulcrum.toml"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read the config file"), "{err}");
}
