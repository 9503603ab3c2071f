//! `GET /api/explain`: what Fulcrum would do for a request and why, checked against where real
//! requests then go.

use std::time::Duration;

use crate::support::*;

#[test]
fn explain_names_the_route_the_key_the_skipped_servers_and_the_pick_that_traffic_confirms() {
    let (a, b, c) = (Backend::start("a"), Backend::start("b"), Backend::start("c"));
    let (s1, s2) = (Backend::start("s1"), Backend::start("s2"));
    let down = format!("127.0.0.1:{}", free_port());
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\nalgorithm = \"round-robin\"\n\
         [service.health]\ninterval = \"100ms\"\n\
         [[service.server]]\naddress = \"{}\"\n[[service.server]]\naddress = \"{}\"\nmaxconn = 5\n[[service.server]]\naddress = \"{down}\"\n[[service.server]]\naddress = \"{}\"\nbackup = true\n\
         [[service.pool]]\nname = \"static\"\nalgorithm = \"source-hash\"\n[service.pool.health]\ninterval = \"100ms\"\n\
         [[service.pool.server]]\naddress = \"{}\"\n[[service.pool.server]]\naddress = \"{}\"\n\
         [[service.route]]\npool = \"static\"\npath_prefix = [\"/name\"]\n",
        a.addr, b.addr, c.addr, s1.addr, s2.addr
    ));
    wait_until("the down server seen down", Duration::from_secs(10), || f.server_stats(&down)["state"] == "down");
    let explain = |query: &str| {
        let (status, e) = f.api("GET", &format!("/api/explain?service=web&{query}"), None);
        assert_eq!(status, 200, "{e}");
        e
    };

    // The default pool: the route says why it did not take /cart, the down server and the backup
    // are passed over with their reasons, and the pick is one of the two that serve.
    let e = explain("client=127.0.0.9&path=/index.html");
    assert_eq!((e["routes"][0]["taken"].as_bool(), e["pool"].as_str()), (Some(false), Some("default")), "{e}");
    assert_eq!(e["routes"][0]["why_not"], "path_prefix [\"/name\"] does not hold for path /index.html", "{e}");
    let skipped = |addr: &str| e["candidates"].as_array().unwrap().iter().find(|c| c["address"] == addr).unwrap()["skipped"].clone();
    assert!(skipped(&down).as_str().unwrap().starts_with("down: fail"), "{e}");
    assert!(skipped(&c.addr.to_string()).as_str().unwrap().starts_with("a backup"), "{e}");
    assert!(skipped(&a.addr.to_string()).is_null() && skipped(&b.addr.to_string()).is_null(), "{e}");
    let maxconn = e["candidates"].as_array().unwrap().iter().find(|c| c["address"] == b.addr.to_string().as_str()).unwrap()["maxconn"].clone();
    assert_eq!(maxconn, 5);
    let pick = e["pick"].as_str().unwrap().to_string();
    assert!([a.addr.to_string(), b.addr.to_string()].contains(&pick), "{e}");
    assert!(e["why"].as_str().unwrap().contains("smooth weighted rotation, among 2 usable"), "{e}");
    // Explaining moves nothing: the next request goes where the explanation said.
    let next = http_get(f.listen, "/index.html").1;
    let named = if pick == a.addr.to_string() { "TARGET a" } else { "TARGET b" };
    assert!(next.contains(named), "the request did not go to the explained pick {pick}: {next}");

    // The routed pool: the client's address is hashed to a slot, and every request from that
    // client lands on the explained server.
    let from: std::net::IpAddr = "127.0.0.77".parse().unwrap();
    let e = explain("client=127.0.0.77&path=/name");
    assert_eq!((e["routes"][0]["taken"].as_bool(), e["pool"].as_str(), e["algorithm"].as_str()), (Some(true), Some("static"), Some("source-hash")), "{e}");
    assert_eq!(e["key"]["of"], "client 127.0.0.77");
    assert_eq!(e["key"]["owner"], e["pick"], "{e}");
    let name = if e["pick"] == s1.addr.to_string().as_str() { "s1" } else { "s2" };
    for _ in 0..5 {
        assert_eq!(http_get_from(Some(from), f.listen, "/name").unwrap().1.trim_end(), name);
    }

    // Bad questions are refused with the reason.
    assert_eq!(f.api("GET", "/api/explain?service=nope&client=127.0.0.1", None).0, 404);
    let (status, body) = f.api("GET", "/api/explain?service=web&client=not-an-ip", None);
    assert!(status == 400 && body.to_string().contains("not an IP address"), "{body}");
    let (status, body) = f.api("GET", "/api/explain?service=web", None);
    assert!(status == 400 && body.to_string().contains("client"), "{body}");
}

#[test]
fn a_hundred_explains_between_requests_leave_the_round_robin_sequence_as_it_was() {
    let backends: Vec<Backend> = ["a", "b", "c", "d"].iter().map(|n| Backend::start(n)).collect();
    let servers: String = backends.iter().map(|b| format!("[[service.server]]\naddress = \"{}\"\n", b.addr)).collect();
    let f = Fulcrum::start(&format!("[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\nalgorithm = \"round-robin\"\n{servers}"));
    let name_of = |addr: &str| backends.iter().position(|b| b.addr.to_string() == addr).map(|i| ["a", "b", "c", "d"][i]).unwrap_or("?");
    let mut sequence = Vec::new();
    for _ in 0..12 {
        let mut foretold = Vec::new();
        for _ in 0..100 {
            let (status, e) = f.api("GET", "/api/explain?service=web&client=127.0.0.9&path=/", None);
            assert_eq!(status, 200, "{e}");
            foretold.push(name_of(e["pick"].as_str().unwrap_or_default()));
        }
        let body = http_get(f.listen, "/index.html").1;
        let served = body.split("TARGET ").nth(1).and_then(|t| t.split('<').next()).unwrap_or_default().to_string();
        assert!(foretold.iter().all(|n| *n == served), "100 explains named {foretold:?}, the request went to {served}");
        sequence.push(served);
    }
    // Exactly cyclic, as without the explains: each server once in every four requests.
    for (k, s) in sequence.iter().enumerate() {
        assert_eq!(s, &sequence[k % 4], "the sequence is cyclic: {sequence:?}");
    }
    let mut first_four = sequence[..4].to_vec();
    first_four.sort();
    assert_eq!(first_four, ["a", "b", "c", "d"], "{sequence:?}");
}

#[test]
fn explain_follows_the_affinity_cookie() {
    let (a, b) = (Backend::start("a"), Backend::start("b"));
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"app\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\nalgorithm = \"cookie\"\n[service.health]\nkind = \"none\"\n\
         [[service.server]]\naddress = \"{}\"\nid = \"one\"\n[[service.server]]\naddress = \"{}\"\nid = \"two\"\n",
        a.addr, b.addr
    ));
    let (_, e) = f.api("GET", "/api/explain?service=app&client=127.0.0.5&cookie=SERVERID%3Dtwo", None);
    assert_eq!((e["affinity"]["server"].as_str(), e["affinity"]["usable"].as_bool()), (Some(b.addr.to_string().as_str()), Some(true)), "{e}");
    assert_eq!(e["pick"], b.addr.to_string().as_str());
    assert!(e["why"].as_str().unwrap().starts_with("the affinity cookie names"), "{e}");
    let (_, e) = f.api("GET", "/api/explain?service=app&client=127.0.0.5", None);
    assert!(e["affinity"]["cookie"].is_null() && e["why"].as_str().unwrap().contains("rotation"), "{e}");
}

/// `GET /path` from `from` with the extra header lines `extra`; the status.
fn get_from(listen: std::net::SocketAddr, from: [u8; 4], path: &str, extra: &str) -> u16 {
    use std::io::{Read, Write};
    let mut s = connect_from(Some(std::net::IpAddr::from(from)), listen).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: app\r\n{extra}\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse_response(&raw).unwrap().0
}

/// What the data path did, told by itself: each request's access log line carries `why`, and
/// `GET /api/explain/recent` lists the last picks, in the order they were made, with the same
/// reasons; a hashed pick names the slot that explain predicts.
#[test]
fn the_access_log_and_the_recent_picks_say_how_each_server_was_chosen() {
    let (a, b) = (Backend::start("a"), Backend::start("b"));
    let (s1, s2) = (Backend::start("s1"), Backend::start("s2"));
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"app\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\nalgorithm = \"cookie\"\n[service.http]\naccess_log = \"json\"\naccess_log_why = true\n[service.health]\nkind = \"none\"\n\
         [[service.server]]\naddress = \"{}\"\nid = \"one\"\n[[service.server]]\naddress = \"{}\"\nid = \"two\"\n\
         [[service.pool]]\nname = \"static\"\nalgorithm = \"source-hash\"\n[service.pool.health]\nkind = \"none\"\n\
         [[service.pool.server]]\naddress = \"{}\"\n[[service.pool.server]]\naddress = \"{}\"\n\
         [[service.route]]\npool = \"static\"\npath_prefix = [\"/name\"]\n",
        a.addr, b.addr, s1.addr, s2.addr
    ));
    assert_eq!(get_from(f.listen, [127, 0, 0, 21], "/index.html", "Cookie: SERVERID=two\r\n"), 200);
    assert_eq!(get_from(f.listen, [127, 0, 0, 22], "/index.html", ""), 200);
    assert_eq!(get_from(f.listen, [127, 0, 0, 77], "/name", ""), 200);
    let (_, predicted) = f.api("GET", "/api/explain?service=app&client=127.0.0.77&path=/name", None);
    let slot = predicted["key"]["slot"].as_u64().unwrap();

    let (status, recent) = f.api("GET", "/api/explain/recent?service=app", None);
    assert_eq!(status, 200, "{recent}");
    let picks: Vec<(String, String, String, String)> = recent["picks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (p["client"].as_str().unwrap().to_string(), p["pool"].as_str().unwrap().to_string(), p["server"].as_str().unwrap().to_string(), p["why"].as_str().unwrap().to_string())
        })
        .collect();
    let expected = [
        ("127.0.0.21".to_string(), "default".to_string(), b.addr.to_string(), "cookie affinity".to_string()),
        ("127.0.0.22".into(), "default".into(), picks[1].2.clone(), "cookie new".into()),
        ("127.0.0.77".into(), "static".into(), predicted["pick"].as_str().unwrap().to_string(), format!("source-hash slot={slot}")),
    ];
    assert_eq!(picks, expected, "{recent}");
    assert!([a.addr.to_string(), b.addr.to_string()].contains(&picks[1].2), "{recent}");

    // The access log says the same of each request.
    for (client, _, _, why) in &expected {
        let needle = format!("\"client\":\"{client}:");
        wait_until(&format!("the access log line of {client}"), Duration::from_secs(5), || f.log().contains(&needle));
        let log = f.log();
        let line = log.lines().find(|l| l.contains(&needle)).unwrap();
        let json: serde_json::Value = serde_json::from_str(&line[line.find('{').unwrap()..]).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(json["why"].as_str(), Some(why.as_str()), "{line}");
    }

    // The latest N, and the bounds of N.
    let (_, last) = f.api("GET", "/api/explain/recent?service=app&limit=1", None);
    assert_eq!(last["picks"].as_array().unwrap().len(), 1);
    assert_eq!(last["picks"][0]["client"], "127.0.0.77");
    let (status, body) = f.api("GET", "/api/explain/recent?service=app&limit=0", None);
    assert!(status == 400 && body.to_string().contains("from 1 to 128"), "{body}");
    assert_eq!(f.api("GET", "/api/explain/recent?service=nope", None).0, 404);
}

/// TCP mode: explain routes by the TLS server name (`sni=`) as pass-through does, and the
/// picks of a plain TCP service are kept with their reasons too.
#[test]
fn explain_routes_tcp_by_server_name_and_keeps_tcp_picks() {
    let (a, b, api) = (Backend::start("a"), Backend::start("b"), Backend::start("api"));
    let tls_listen = format!("127.0.0.1:{}", free_port());
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"plain\"\nlisten = \"{{LISTEN}}\"\nalgorithm = \"source-hash\"\n[service.health]\nkind = \"none\"\n\
         [[service.server]]\naddress = \"{0}\"\n[[service.server]]\naddress = \"{1}\"\n\
         [[service]]\nname = \"passthrough\"\nlisten = \"{tls_listen}\"\n[service.health]\nkind = \"none\"\n\
         [[service.server]]\naddress = \"{0}\"\n\
         [[service.pool]]\nname = \"api\"\n[service.pool.health]\nkind = \"none\"\n[[service.pool.server]]\naddress = \"{2}\"\n\
         [[service.route]]\npool = \"api\"\nsni = [\"api.test\"]\n",
        a.addr, b.addr, api.addr
    ));
    let explain = |query: &str| f.api("GET", &format!("/api/explain?service=passthrough&client=127.0.0.5{query}"), None).1;
    let e = explain("&sni=API.test");
    assert_eq!((e["routes"][0]["taken"].as_bool(), e["pool"].as_str(), e["pick"].as_str()), (Some(true), Some("api"), Some(api.addr.to_string().as_str())), "{e}");
    let e = explain("&sni=www.test");
    assert_eq!((e["routes"][0]["taken"].as_bool(), e["pool"].as_str(), e["pick"].as_str()), (Some(false), Some("default"), Some(a.addr.to_string().as_str())), "{e}");
    assert!(e["routes"][0]["why_not"].as_str().unwrap().contains("www.test is none of sni"), "{e}");
    let e = explain("");
    assert!(e["routes"][0]["why_not"].as_str().unwrap().contains("no server name"), "{e}");

    let (_, predicted) = f.api("GET", "/api/explain?service=plain&client=127.0.0.9", None);
    assert_eq!(http_get_from(Some([127, 0, 0, 9].into()), f.listen, "/index.html").unwrap().0, 200);
    let (_, recent) = f.api("GET", "/api/explain/recent?service=plain", None);
    // The harness's own probe of the listener was a pick too: the client's is the last.
    let pick = recent["picks"].as_array().unwrap().last().unwrap();
    assert_eq!((pick["client"].as_str(), pick["server"].as_str()), (Some("127.0.0.9"), predicted["pick"].as_str()), "{recent}");
    assert_eq!(pick["why"].as_str().unwrap(), format!("source-hash slot={}", predicted["key"]["slot"]), "{recent}");
}
