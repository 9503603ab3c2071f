//! `max_request_body`: a body over it gets 413. A `Content-Length` over it, or a body that ends
//! over it within the read-ahead, is refused before any server hears of the request; a longer
//! chunked body is cut where it passes the limit, its server connection closed, and nothing is
//! held against the server. A body at the limit goes through. HTTP/1.1 and HTTP/2 (h2c) alike.

use std::path::Path;
use std::process::Command;

use crate::support::*;

const LIMIT: usize = 100_000;

/// curl posts `file` to /upload (chunked with `-H "Transfer-Encoding: chunked"`); the status and
/// the body.
fn post(f: &Fulcrum, file: &Path, extra: &[&str]) -> (u16, String) {
    post_to(f, "/upload", file, extra)
}

fn post_to(f: &Fulcrum, path: &str, file: &Path, extra: &[&str]) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-w", "\n%{http_code}", "--data-binary"])
        .arg(format!("@{}", file.display()))
        .args(extra)
        .arg(format!("http://{}{path}", f.listen))
        .output()
        .expect("curl must be installed (scripts/test installs it)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), format!("{body} (curl: {})", String::from_utf8_lossy(&out.stderr).trim()))
}

fn file(dir: &Path, len: usize) -> std::path::PathBuf {
    let path = dir.join(format!("body-{len}"));
    std::fs::write(&path, vec![b'x'; len]).unwrap();
    path
}

#[test]
fn a_request_body_over_max_request_body_gets_413_and_never_reaches_a_server_whole() {
    let backend = Backend::start("a");
    let f = Fulcrum::start(&service_over(
        "round-robin",
        &format!("mode = \"http\"\nretries = 0\n\n[service.http]\nh2c = true\nmax_request_body = {LIMIT}"),
        "kind = \"none\"",
        &[(backend.addr, "")],
    ));
    let dir = scratch("body-limit");
    let (at_limit, small_over, large_over) = (file(&dir, LIMIT), file(&dir, LIMIT + 1), file(&dir, 3 * LIMIT));
    let chunked = ["-H", "Transfer-Encoding: chunked"];
    let h2 = ["--http2-prior-knowledge"];
    let received = |status_body: &(u16, String)| status_body.1.contains(&format!("\"received\":{LIMIT}"));

    for version in [&[][..], &h2[..]] {
        // At the limit: the server gets all of it, with a Content-Length and chunked.
        let ok = post(&f, &at_limit, version);
        assert!(ok.0 == 200 && received(&ok), "{version:?}: {ok:?}");
        let ok = post(&f, &at_limit, &[version, &chunked[..]].concat());
        assert!(ok.0 == 200 && received(&ok), "{version:?} chunked: {ok:?}");
        // One byte over, said by Content-Length: refused before the body is read.
        let over = post(&f, &small_over, version);
        assert_eq!(over.0, 413, "{version:?}: {over:?}");
        assert!(over.1.contains(&format!("larger than max_request_body ({LIMIT} bytes)")), "{over:?}");
        // Chunked, three times the limit: cut where it passes it, on its way to the server.
        let cut = post(&f, &large_over, &[version, &chunked[..]].concat());
        assert_eq!(cut.0, 413, "{version:?} chunked: {cut:?}");
    }
    // The server answered exactly the four requests at the limit; the cut ones are not its
    // failures, and it stays up and reachable.
    let server = f.server_stats(&backend.addr.to_string());
    assert_eq!(server["transfer_errors"], 0, "{server}");
    assert_eq!(server["connect_failures"], 0, "{server}");
    assert_eq!(http_get(f.listen, "/name"), (200, "a\n".to_string()));
    let log = f.log();
    assert_eq!(log.matches("status=413").count(), 4, "{log}");
}

/// Below the read-ahead (64 KiB), a limit is enforced before any server is contacted, chunked
/// bodies too: the server's own count of requests does not move.
#[test]
fn a_body_over_a_small_limit_is_refused_before_any_server_is_contacted() {
    let backend = Backend::start("a");
    let f = Fulcrum::start(&service_over("round-robin", "mode = \"http\"\n\n[service.http]\nh2c = true\nmax_request_body = 1000", "kind = \"none\"", &[(backend.addr, "")]));
    let requests = || -> u64 {
        let (status, body) = http_get(backend.addr, "/stats");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["requests"].as_u64().unwrap()
    };
    let dir = scratch("body-limit-small");
    let over = file(&dir, 2000);
    let before = requests();
    for extra in [&[][..], &["-H", "Transfer-Encoding: chunked"][..], &["--http2-prior-knowledge"][..], &["--http2-prior-knowledge", "-H", "Transfer-Encoding: chunked"][..]] {
        let refused = post(&f, &over, extra);
        assert_eq!(refused.0, 413, "{extra:?}: {refused:?}");
    }
    // Only the /stats request of this count itself is new.
    assert_eq!(requests(), before + 1, "a refused body reached the server");
    let ok = post(&f, &file(&dir, 1000), &[]);
    assert!(ok.0 == 200 && ok.1.contains("\"received\":1000"), "{ok:?}");
}

/// Over HTTP/2 an answer sent before the body is read (413 by Content-Length, a route's deny)
/// goes out whole, and the rest of the upload is then read and dropped, so the stream ends
/// cleanly, with no RST_STREAM (a CANCEL before the answer, or even a NO_ERROR after it, is an
/// error to a client that is still sending). nghttp shows the frames; a route's own limit stands
/// in for the service's.
#[test]
fn over_http2_a_refused_upload_gets_its_answer_and_ends_without_a_reset() {
    let backend = Backend::start("a");
    let routes = "\n[[service.route]]\npath_prefix = [\"/small\"]\nmax_request_body = 10\n\n[[service.route]]\npath_prefix = [\"/closed\"]\ndeny = 403\n";
    let config = service_over("round-robin", &format!("mode = \"http\"\n\n[service.http]\nh2c = true\nmax_request_body = {LIMIT}"), "kind = \"none\"", &[(backend.addr, "")]);
    let f = Fulcrum::start(&config.replace("\n\n[service.health]", &format!("\n{routes}\n[service.health]")));
    let dir = scratch("body-limit-h2");
    let big = file(&dir, 3 * LIMIT);
    let small = file(&dir, 11);
    let frames = |body: &Path, path: &str| -> String {
        let out = Command::new("nghttp")
            .args(["-v", "-t", "10", "-d"])
            .arg(body)
            .arg(format!("http://{}{path}", f.listen))
            .output()
            .expect("nghttp must be installed (scripts/test installs nghttp2-client)");
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    };
    for (body, path, status) in [(&big, "/upload", 413), (&small, "/small/x", 413), (&big, "/closed", 403), (&big, "/small/x", 413)] {
        let v = frames(body, path);
        assert!(v.contains(&format!("recv (stream_id=13) :status: {status}")), "{path}: {v}");
        assert!(v.contains("recv DATA frame") && !v.contains("RST_STREAM"), "{path}: the answer's body, and no reset: {v}");
    }
    // curl, which reports a reset of a stream it is still sending on as an error, gets the answers.
    for path in ["/upload", "/closed"] {
        let answer = post_to(&f, path, &big, &["--http2-prior-knowledge"]);
        assert!([403, 413].contains(&answer.0), "{path}: {answer:?}");
    }
    // The route's limit: at it a body goes through, over it curl gets 413, over HTTP/1.1 and h2c.
    for extra in [&[][..], &["--http2-prior-knowledge"][..]] {
        let ok = post_to(&f, "/small/x", &file(&dir, 10), extra);
        assert!(ok.0 == 200 && ok.1.contains("\"received\":10"), "{extra:?}: {ok:?}");
        assert_eq!(post_to(&f, "/small/x", &small, extra).0, 413, "{extra:?}");
    }
    assert_eq!(f.server_stats(&backend.addr.to_string())["transfer_errors"], 0);
}
