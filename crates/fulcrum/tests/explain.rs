//! `GET /api/explain`: what Fulcrum would do for a request and why, checked against where real
//! requests then go.

mod support;

use std::time::Duration;

use support::*;

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
    assert!(e["routes"][0]["why_not"].as_str().unwrap().contains("under none of path_prefix"), "{e}");
    let skipped = |addr: &str| e["candidates"].as_array().unwrap().iter().find(|c| c["address"] == addr).unwrap()["skipped"].clone();
    assert!(skipped(&down).as_str().unwrap().starts_with("down: fail"), "{e}");
    assert!(skipped(&c.addr.to_string()).as_str().unwrap().starts_with("a backup"), "{e}");
    assert!(skipped(&a.addr.to_string()).is_null() && skipped(&b.addr.to_string()).is_null(), "{e}");
    let maxconn = e["candidates"].as_array().unwrap().iter().find(|c| c["address"] == b.addr.to_string().as_str()).unwrap()["maxconn"].clone();
    assert_eq!(maxconn, 5);
    let pick = e["pick"].as_str().unwrap().to_string();
    assert!([a.addr.to_string(), b.addr.to_string()].contains(&pick), "{e}");
    assert!(e["why"].as_str().unwrap().contains("smooth weighted rotation, among 2 usable"), "{e}");
    // Round robin's next turn after the explained one goes to the other server.
    let next = http_get(f.listen, "/index.html").1;
    let other = if pick == a.addr.to_string() { "TARGET b" } else { "TARGET a" };
    assert!(next.contains(other), "the explained pick took its turn: {next}");

    // The routed pool: the client's address is hashed to a slot, and every request from that
    // client lands on the explained server.
    let from: std::net::IpAddr = "127.0.0.77".parse().unwrap();
    let e = explain("client=127.0.0.77&path=/name");
    assert_eq!((e["routes"][0]["taken"].as_bool(), e["pool"].as_str(), e["algorithm"].as_str()), (Some(true), Some("static"), Some("source-hash")), "{e}");
    assert_eq!(e["key"]["of"], "client 127.0.0.77");
    assert_eq!(e["key"]["owner"], e["pick"], "{e}");
    let name = if e["pick"] == s1.addr.to_string().as_str() { "s1" } else { "s2" };
    for _ in 0..5 {
        assert_eq!(http_get_from(Some(from), f.listen, "/name").unwrap().1, name);
    }

    // Bad questions are refused with the reason.
    assert_eq!(f.api("GET", "/api/explain?service=nope&client=127.0.0.1", None).0, 404);
    let (status, body) = f.api("GET", "/api/explain?service=web&client=not-an-ip", None);
    assert!(status == 400 && body.to_string().contains("not an IP address"), "{body}");
    let (status, body) = f.api("GET", "/api/explain?service=web", None);
    assert!(status == 400 && body.to_string().contains("client"), "{body}");
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
