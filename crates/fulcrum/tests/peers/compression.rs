//! Response compression with real peers: nginx serves the files as they are, curl asks for each
//! coding in turn over HTTP/1.1 and h2c and decodes what Fulcrum sends (its own gzip, brotli and
//! zstd decoders), and what may not be compressed (an image, a small file, a range, a HEAD, a
//! route with `compress = false`) is passed as nginx sent it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Command;

use crate::support::*;

struct Answer {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

/// curl's answer to a GET (or `-I`, a HEAD), decoded by curl; `accept` replaces curl's own
/// `Accept-Encoding` ("" sends none).
fn get(addr: SocketAddr, h2: bool, path: &str, accept: &str, extra: &[&str]) -> Answer {
    let dir = scratch("compression-get");
    let (head, body) = (dir.join("head"), dir.join("body"));
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--max-time", "20", "--compressed", "-D", head.to_str().unwrap(), "-o", body.to_str().unwrap()]);
    cmd.args(["-H", &format!("Accept-Encoding: {accept}")]);
    if h2 {
        cmd.arg("--http2-prior-knowledge");
    }
    let out = cmd.args(extra).arg(format!("http://{addr}{path}")).output().expect("curl must be installed (scripts/test installs it)");
    assert!(out.status.success(), "curl {path} ({accept}): {}", String::from_utf8_lossy(&out.stderr));
    let head = std::fs::read_to_string(head).unwrap();
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut headers = HashMap::new();
    for line in lines {
        if let Some((k, v)) = line.split_once(':') {
            let k = k.trim().to_ascii_lowercase();
            let v = v.trim().to_string();
            headers.entry(k).and_modify(|old: &mut String| *old = format!("{old}, {v}")).or_insert(v);
        }
    }
    Answer { status, headers, body: std::fs::read(body).unwrap_or_default() }
}

#[test]
fn each_coding_reaches_curl_decoded_and_what_may_not_be_compressed_is_not() {
    let nginx = Nginx::start("compressed", "TARGET");
    let page: String = (0..3000).map(|i| format!("<li>item {i} of the catalogue</li>\n")).collect();
    let json: String = format!("[{}]", (0..2000).map(|i| format!("{{\"id\":{i},\"name\":\"n{i}\"}}")).collect::<Vec<_>>().join(","));
    let image: Vec<u8> = (0..20_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(nginx.root().join("page.html"), &page).unwrap();
    std::fs::write(nginx.root().join("data.json"), &json).unwrap();
    std::fs::write(nginx.root().join("image.png"), &image).unwrap();
    std::fs::write(nginx.root().join("small.html"), "<p>hi</p>").unwrap();
    std::fs::create_dir_all(nginx.root().join("raw")).unwrap();
    std::fs::write(nginx.root().join("raw/page.html"), &page).unwrap();
    let config = format!(
        r#"[[service]]
name = "web"
listen = "{{LISTEN}}"
mode = "http"

[service.http]
h2c = true

[service.http.compression]
min_size = 1024

[service.health]
kind = "none"

[[service.server]]
address = "{addr}"

[[service.route]]
path_prefix = ["/raw"]
compress = false
"#,
        addr = nginx.addr,
    );
    let f = Fulcrum::start(&config);
    for h2 in [false, true] {
        let version = if h2 { "h2c" } else { "HTTP/1.1" };
        for coding in ["gzip", "br", "zstd"] {
            let a = get(f.listen, h2, "/page.html", coding, &[]);
            assert_eq!(a.status, 200, "{version} {coding}");
            assert_eq!(a.headers.get("content-encoding").map(String::as_str), Some(coding), "{version}: {:?}", a.headers);
            assert!(a.headers.get("vary").is_some_and(|v| v.contains("Accept-Encoding")), "{version} {coding}: {:?}", a.headers);
            assert!(!a.headers.contains_key("content-length"), "{version} {coding}: a compressed body has no known length");
            assert!(a.headers.get("etag").is_some_and(|e| e.starts_with("W/")), "{version} {coding}: the ETag became weak: {:?}", a.headers);
            assert_eq!(a.body, page.as_bytes(), "{version} {coding}: curl decoded the page");
        }
        // curl's own list takes the service's first choice; q-values win over the order.
        let a = get(f.listen, h2, "/data.json", "deflate, gzip, br, zstd", &[]);
        assert_eq!((a.headers.get("content-encoding").map(String::as_str), a.body.as_slice()), (Some("zstd"), json.as_bytes()), "{version}");
        let a = get(f.listen, h2, "/data.json", "zstd;q=0.5, br;q=0.9, gzip;q=0", &[]);
        assert_eq!(a.headers.get("content-encoding").map(String::as_str), Some("br"), "{version}");
        // No coding taken: the page as it is, marked as varying.
        let a = get(f.listen, h2, "/page.html", "identity", &[]);
        assert_eq!((a.headers.get("content-encoding"), a.headers.get("content-length")), (None, Some(&page.len().to_string())), "{version}");
        assert!(a.headers.get("vary").is_some_and(|v| v.contains("Accept-Encoding")), "{version}: {:?}", a.headers);
        // What is not compressed: an image, a small page, a range, a HEAD, a route that says no.
        for (what, path, extra) in [
            ("an image", "/image.png", &[][..]),
            ("a small page", "/small.html", &[][..]),
            ("a range", "/page.html", &["-r", "0-99"][..]),
            ("a HEAD", "/page.html", &["-I"][..]),
            ("a route with compress = false", "/raw/page.html", &[][..]),
        ] {
            let a = get(f.listen, h2, path, "gzip, br, zstd", extra);
            assert_eq!(a.headers.get("content-encoding"), None, "{version}, {what}: {:?}", a.headers);
            assert!(a.headers.contains_key("content-length"), "{version}, {what}: {:?}", a.headers);
        }
        assert_eq!(get(f.listen, h2, "/page.html", "gzip", &["-r", "0-99"]).body, &page.as_bytes()[..100], "{version}");
        assert_eq!(get(f.listen, h2, "/image.png", "gzip", &[]).body, image, "{version}");
    }
}
