//! The trail of a standalone instance and the edits a reload would drop: every change, reload
//! and save is an audit record (memory, `/api/audit`, a JSON-lines file rotated by size), edits
//! not saved show with their diff, a reload refuses to drop them unless forced, and a SIGHUP
//! that drops them says so.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

fn records(f: &Fulcrum) -> Vec<serde_json::Value> {
    let (status, body) = f.api("GET", "/api/audit", None);
    assert_eq!(status, 200, "{body}");
    body["records"].as_array().unwrap().clone()
}

#[test]
fn unsaved_edits_show_block_a_reload_and_every_change_is_on_the_trail() {
    let b1 = Backend::start("b1");
    let b2 = Backend::start("b2");
    let dir = scratch("audit");
    let log = dir.join("audit.log");
    let config =
        format!("[audit]\nfile = \"{}\"\nmax_size = 4096\nkeep = 2\n\n{}", log.display(), service_over("round-robin", "", "kind = \"none\"", &[(b1.addr, ""), (b2.addr, "")]));
    let f = Fulcrum::start(&config);
    let server = b1.addr.to_string();
    let weight = |f: &Fulcrum| f.server_stats(&server)["weight"].as_u64();

    // Nothing unsaved at start.
    let (_, c) = f.api("GET", "/api/config", None);
    assert!(c["unsaved"].is_null(), "{c}");

    // An edit through the API: unsaved, with what it was, who made it and the diff.
    let (status, body) = f.api("POST", &format!("/api/services/web/servers/{server}/weight"), Some(json!({ "weight": 5 })));
    assert_eq!(status, 200, "{body}");
    let (_, c) = f.api("GET", "/api/config", None);
    let unsaved = &c["unsaved"];
    assert_eq!(unsaved["edits"], json!([format!("weight 5 for server {server} of web (by 127.0.0.1)")]), "{c}");
    let diff = unsaved["diff"].as_str().unwrap();
    assert!(diff.starts_with("--- file\n+++ running\n") && diff.contains("+weight = 5"), "{diff}");

    // A reload would drop it: refused with 409 naming it, and the edit stays.
    let (status, body) = f.api("POST", "/api/reload", None);
    assert_eq!(status, 409, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("1 unsaved edit would be lost") && error.contains("weight 5 for server") && error.contains("?force=true"), "{error}");
    assert_eq!(weight(&f), Some(5));

    // Forced, it reads the file again: the edit is gone and nothing is unsaved.
    let (status, body) = f.api("POST", "/api/reload?force=true", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(weight(&f), Some(1));
    assert!(f.api("GET", "/api/config", None).1["unsaved"].is_null());

    // A SIGHUP cannot be refused: it drops the edit and says how many it dropped.
    assert_eq!(f.api("POST", &format!("/api/services/web/servers/{server}/weight"), Some(json!({ "weight": 7 }))).0, 200);
    f.signal(1);
    f.wait_log("SIGHUP: discarding 1 unsaved edit made through the API");
    wait_until("the file's weight again", Duration::from_secs(10), || weight(&f) == Some(1));

    // A refused edit is on the trail too; a saved one leaves nothing unsaved.
    assert_eq!(f.api("POST", &format!("/api/services/web/servers/{server}/weight"), Some(json!({ "weight": 0 }))).0, 422);
    assert_eq!(f.api("POST", &format!("/api/services/web/servers/{server}/weight"), Some(json!({ "weight": 3 }))).0, 200);
    let (status, body) = f.api("POST", "/api/save", None);
    assert_eq!(status, 200, "{body}");
    assert!(f.api("GET", "/api/config", None).1["unsaved"].is_null());
    assert!(std::fs::read_to_string(&f.config_path).unwrap().contains("weight = 3"));

    let trail = records(&f);
    let line =
        |what: &str, source: &str, outcome: &str| trail.iter().any(|r| r["what"].as_str().is_some_and(|w| w.starts_with(what)) && r["source"] == source && r["outcome"] == outcome);
    assert!(line("start with", "file", "applied"), "{trail:#?}");
    assert!(line("weight 5 for server", "api", "applied"), "{trail:#?}");
    assert!(line("reload", "api", "applied"), "{trail:#?}");
    assert!(line("reload", "signal", "applied"), "{trail:#?}");
    assert!(line("weight 0 for server", "api", "refused"), "{trail:#?}");
    assert!(line("save to", "api", "applied"), "{trail:#?}");
    assert_eq!(trail[0]["what"].as_str().map(|w| w.starts_with("save to")), Some(true), "newest first: {trail:#?}");
    let edit = trail.iter().find(|r| r["what"].as_str().is_some_and(|w| w.starts_with("weight 5"))).unwrap();
    assert_eq!(edit["who"], "127.0.0.1");
    assert!(edit["diff"].as_str().unwrap().contains("-weight = 1\n+weight = 5"), "{edit}");
    let refused = trail.iter().find(|r| r["outcome"] == "refused").unwrap();
    assert!(refused["message"].as_str().unwrap().contains("weight"), "{refused}");

    // The same records in the file, one JSON object a line; enough edits rotate it, keeping 2.
    for w in 0..40u32 {
        assert_eq!(f.api("POST", &format!("/api/services/web/servers/{server}/weight"), Some(json!({ "weight": 10 + w % 2 }))).0, 200);
    }
    wait_until("the audit log rotated", Duration::from_secs(10), || dir.join("audit.log.2").exists());
    for p in [log.clone(), dir.join("audit.log.1"), dir.join("audit.log.2")] {
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.len() <= 4096, "{}: {} bytes", p.display(), text.len());
        for l in text.lines() {
            let r: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            assert!(r["who"].is_string() && r["time"].is_string() && r["source"].is_string() && r["outcome"].is_string(), "{r}");
        }
    }
    assert!(!dir.join("audit.log.3").exists(), "keep = 2");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&log).unwrap().permissions().mode() & 0o777, 0o640);
}
