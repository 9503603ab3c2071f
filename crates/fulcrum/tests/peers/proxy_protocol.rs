//! `proxy_protocol = "v1" | "v2"`: a real nginx with `listen ... proxy_protocol` answers the
//! client address the header carried, for clients from distinct loopback addresses, after a
//! reload from one version to the other; its HTTP checks send a header with no client, which
//! nginx takes. HTTP mode refuses the setting on a service, a pool or a server.

use std::net::IpAddr;

use crate::support::*;

fn config(server: std::net::SocketAddr, version: &str) -> String {
    format!(
        "[[service]]\nname = \"pp\"\nlisten = \"{{LISTEN}}\"\nproxy_protocol = \"{version}\"\n[service.health]\nkind = \"http\"\npath = \"/name\"\nexpect_text = \"n1\"\ninterval = \"200ms\"\n[[service.server]]\naddress = \"{server}\"\n"
    )
}

#[test]
fn nginx_sees_each_clients_address_through_both_versions() {
    let nginx = Nginx::start_with_proxy_protocol("n1");
    let f = Fulcrum::start(&config(nginx.addr, "v1"));
    f.wait_all_up();
    let check = f.server_stats(&nginx.addr.to_string())["last_check"].as_str().unwrap().to_string();
    assert!(check.contains("GET /name answered 200"), "{check}");
    for version in ["v1", "v2"] {
        if version == "v2" {
            let applied = f.log().matches("config applied").count();
            f.reload(&config(nginx.addr, "v2"));
            wait_until("the reload applied", std::time::Duration::from_secs(10), || f.log().matches("config applied").count() > applied);
        }
        for last in [5u8, 6, 7] {
            let source: IpAddr = format!("127.0.0.{last}").parse().unwrap();
            let (status, body) = http_get_from(Some(source), f.listen, "/client").unwrap();
            assert_eq!(status, 200, "{version} from {source}");
            let (addr, port) = body.rsplit_once(':').unwrap();
            assert_eq!(addr, source.to_string(), "{version}: nginx saw {body}");
            assert!(port.parse::<u16>().is_ok_and(|p| p > 0), "{body}");
        }
    }
}

#[test]
fn http_mode_refuses_proxy_protocol_on_a_service_a_pool_and_a_server() {
    let dir = scratch("pp-check");
    let service = "[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\n";
    let pool = "[[service.pool]]\nname = \"p\"\n";
    for (config, at) in [
        (format!("{service}proxy_protocol = \"v2\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n"), "check.toml:5:"),
        (
            format!("{service}[[service.server]]\naddress = \"127.0.0.1:1001\"\n{pool}proxy_protocol = \"v1\"\n[[service.pool.server]]\naddress = \"127.0.0.1:1002\"\n"),
            "check.toml:9:",
        ),
        (format!("{service}[[service.server]]\naddress = \"127.0.0.1:1001\"\nproxy_protocol = \"v2\"\n"), "check.toml:7:"),
    ] {
        let (ok, text) = check_config(&config, &dir);
        assert!(!ok && text.contains("proxy_protocol is for mode = \"tcp\"") && text.contains(at), "{text}");
    }
}
