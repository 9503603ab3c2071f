use std::time::Duration;

use proptest::prelude::*;

use super::*;

const PAPER: &str = include_str!("../../../../examples/paper-http.toml");

#[test]
fn paper_rule_parses_with_its_settings() {
    let c = parse(PAPER, "paper-http.toml").expect("the paper's rule is valid");
    let s = &c.services[0];
    assert_eq!(s.name, "http");
    assert_eq!(s.algorithm, Algorithm::RoundRobin);
    assert!(s.half_close);
    assert!(!s.terminate_on_disable);
    assert_eq!(s.connect_timeout, Duration::from_secs(2));
    assert_eq!(s.failure_limit, 5);
    assert_eq!(s.health.kind, HealthKind::Http);
    assert_eq!(s.health.interval, Duration::from_secs(60));
    assert_eq!(s.health.timeout, Duration::from_secs(5));
    assert_eq!(s.health.path, "/index.html");
    assert_eq!(s.health.expect_status, 200);
    assert_eq!(s.health.expect_text.as_deref(), Some("TARGET"));
    assert_eq!(s.servers.len(), 4);
}

#[test]
fn defaults_fill_a_minimal_service() {
    let c = parse("[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n", "t").unwrap();
    let s = &c.services[0];
    assert_eq!(s.mode, Mode::Tcp);
    assert_eq!(s.retries, 3);
    assert_eq!(s.servers[0].weight, 1);
    assert!(s.servers[0].enabled && !s.servers[0].backup);
    assert_eq!(c.admin, None);
}

fn first_error(text: &str) -> Diagnostic {
    let d = parse(text, "t.toml").expect_err("config must be refused");
    d.0[0].clone()
}

#[test]
fn unknown_key_is_reported_at_its_line() {
    let d = first_error("[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\nhalf_closed = true\n");
    assert_eq!(d.line, 4, "{d}");
    assert!(d.message.contains("half_closed"), "{d}");
}

#[test]
fn bad_duration_names_the_value_and_the_fix() {
    let d = first_error("[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\nconnect_timeout = \"soon\"\n");
    assert_eq!(d.line, 4, "{d}");
    assert!(d.message.contains("soon"), "{d}");
    assert!(d.hint.is_some());
}

#[test]
fn every_semantic_error_is_reported_not_just_the_first() {
    let text = "[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\nweight = 0\n\
                [[service]]\nname = \"b\"\nlisten = \"127.0.0.1:1000\"\n";
    let d = parse(text, "t.toml").unwrap_err();
    let lines: Vec<usize> = d.0.iter().map(|d| d.line).collect();
    assert!(lines.contains(&6), "weight at line 6: {d}");
    assert!(lines.contains(&9), "duplicate listen at line 9: {d}");
    assert!(lines.contains(&8), "no servers at the name, line 8: {d}");
}

#[test]
fn a_number_its_type_cannot_hold_is_refused_at_its_line_with_a_hint() {
    let d = first_error("[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\n[service.health]\nexpect_status = 70000\n");
    assert_eq!((d.line, d.column), (5, 17), "{d}");
    assert!(d.message.contains("70000"), "{d}");
    assert!(d.hint.as_deref().unwrap_or("").contains("range"), "{d}");
}

#[test]
fn admin_off_loopback_is_refused() {
    let d = first_error("[admin]\nlisten = \"0.0.0.0:9090\"\n");
    assert_eq!(d.line, 2);
    assert!(d.message.contains("loopback"));
}

#[test]
fn line_col_counts_characters() {
    assert_eq!(diagnostic::line_col("ab\ncd", 4), (2, 2));
    assert_eq!(diagnostic::line_col("é\nx", 3), (2, 1));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_input_panics_the_parser(text in "\\PC{0,200}") {
        let _ = parse_with(&text, "fuzz.toml", Resolve::No);
    }

    #[test]
    fn no_edit_of_a_valid_config_panics(pos in 0usize..2000, insert in "[\\[\\]=\"a-z0-9 \\n.:#]{0,12}", cut in 0usize..8) {
        let mut text = PAPER.to_string();
        let pos = pos.min(text.len());
        let pos = (0..=pos).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        let end = (pos + cut).min(text.len());
        let end = (end..=text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
        text.replace_range(pos..end, &insert);
        let _ = parse_with(&text, "fuzz.toml", Resolve::No);
    }
}

#[test]
fn a_config_written_back_reads_the_same() {
    let c = parse(PAPER, "paper-http.toml").unwrap();
    let again = revalidate(&c).unwrap_or_else(|d| panic!("{d}\n{}", to_toml(&c)));
    assert_eq!(c, again);
}

#[test]
fn ftp_services_take_a_data_port_range_and_others_do_not() {
    let ftp = "[[service]]\nname = \"f\"\nlisten = \"127.0.0.1:2100\"\nmode = \"ftp\"\ndata_ports = \"50000-50009\"\n\
               [service.health]\nkind = \"ftp\"\n[[service.server]]\naddress = \"127.0.0.1:2121\"\n";
    let c = parse_with(ftp, "t.toml", Resolve::No).unwrap();
    assert_eq!(c.services[0].data_ports, Some(PortRange { first: 50000, last: 50009 }));
    assert_eq!(revalidate(&c).unwrap(), c, "the range is written back as it was read");

    let d = first_error(&ftp.replace("50000-50009", "50009-50000"));
    assert_eq!(d.line, 5, "{d}");
    assert!(d.message.contains("empty"), "{d}");
    let d = first_error(&ftp.replace("50000-50009", "lots"));
    assert!(d.message.contains("FIRST-LAST"), "{d}");
    let d = first_error(&ftp.replace("mode = \"ftp\"", "mode = \"tcp\""));
    assert!(d.message.contains("data_ports is only for mode = \"ftp\""), "{d}");
    let tcp_with_ftp_check = ftp.replace("mode = \"ftp\"\ndata_ports = \"50000-50009\"\n", "");
    let d = first_error(&tcp_with_ftp_check);
    assert!(d.message.contains("kind = \"ftp\""), "{d}");
}

#[test]
fn the_haproxy_papers_routing_example_is_valid_and_routes_must_name_pools() {
    let text = include_str!("../../../../examples/haproxy-paper-routing.toml");
    let c = parse_with(text, "routing.toml", Resolve::No).unwrap();
    let s = &c.services[0];
    assert_eq!((s.pools.len(), s.routes.len(), s.default_pool.as_deref()), (2, 2, Some("app")));
    assert_eq!(s.routed_pool(&s.pools[1]).name, "www/app");
    assert_eq!(revalidate(&c).unwrap(), c, "pools and routes are written back as read");

    let d = first_error(&text.replace("pool = \"static\"\npath_suffix", "pool = \"statc\"\npath_suffix"));
    assert!(d.message.contains("\"statc\", which is not a pool"), "{d}");
    assert!(d.hint.as_deref().unwrap_or("").contains("static, app"), "{d}");
    let d = first_error(&text.replace("mode = \"http\"", "mode = \"tcp\""));
    assert!(d.message.contains("a route in mode = \"tcp\" matches only the TLS server name"), "{d}");
    let d = first_error(&text.replace("mode = \"http\"", "mode = \"ftp\""));
    assert!(d.message.contains("pools and routes need mode = \"http\" (requests) or \"tcp\""), "{d}");
    let d = first_error(&text.replace("address = \"127.0.0.1:8202\"", "address = \"127.0.0.1:8202\"\nweight = 0"));
    assert!(d.message.contains("weight = 0"), "a pool's servers are checked like a service's: {d}");
}

#[test]
fn fast_path_is_unset_by_default_and_parses_every_value() {
    let base = "[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\n";
    let server = "[[service.server]]\naddress = \"127.0.0.1:1001\"\n";
    let c = parse(&format!("{base}{server}"), "t").unwrap();
    assert_eq!(c.services[0].fast_path, None);
    // Unset: adaptive for plain TCP, splice where bytes must pass through Fulcrum.
    assert_eq!(c.services[0].fast_path(), FastPath::Adaptive);
    let http = parse(&format!("{base}mode = \"http\"\n{server}"), "t").unwrap();
    assert_eq!(http.services[0].fast_path(), FastPath::Splice);
    let tls = parse(&format!("{base}[service.server_tls]\n{server}"), "t").unwrap();
    assert_eq!(tls.services[0].fast_path(), FastPath::Splice);
    for (text, want) in [("adaptive", FastPath::Adaptive), ("splice", FastPath::Splice), ("sockmap", FastPath::Sockmap)] {
        let c = parse(&format!("{base}fast_path = \"{text}\"\n{server}"), "t").unwrap();
        assert_eq!(c.services[0].fast_path, Some(want));
        // Written back and read again unchanged, as the admin API's save does.
        assert_eq!(parse(&to_toml(&c), "t").unwrap().services[0].fast_path, Some(want));
    }
}

#[test]
fn fast_path_with_an_unknown_value_is_refused_at_its_line() {
    let d = first_error("[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\nfast_path = \"zerocopy\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n");
    assert_eq!(d.line, 4, "{d}");
    assert!(d.message.contains("zerocopy"), "{d}");
}

#[test]
fn fast_path_outside_tcp_mode_is_refused_with_the_mode_named() {
    for mode in ["http", "ftp"] {
        let d = first_error(&format!(
            "[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\nmode = \"{mode}\"\nfast_path = \"sockmap\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n"
        ));
        assert_eq!(d.line, 5, "{d}");
        assert!(d.message.contains("only for mode = \"tcp\"") && d.message.contains(mode), "{d}");
        assert!(d.hint.is_some(), "{d}");
    }
}

/// Every error of `text`'s validation, one per line.
fn errors(text: &str) -> String {
    parse(text, "t").unwrap_err().to_string()
}

#[test]
fn tls_settings_are_checked_where_they_cannot_work() {
    let with = |mode: &str, extra: &str, tls: &str| {
        format!("[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\nmode = \"{mode}\"\n{extra}\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n[service.tls]\n{tls}\n")
    };
    let no_certs = "certificate = []";
    let e = errors(&with("http", "", &format!("{no_certs}\nhandshake_timeout = \"0s\"")));
    assert!(e.contains("handshake_timeout = 0s is out of range: use 1ms to 5m"), "{e}");
    assert!(e.contains("[service.tls] has no certificate"), "{e}");
    let e = errors(&with("ftp", "", no_certs));
    assert!(e.contains("FTP over TLS"), "{e}");
    for fast in ["sockmap", "adaptive"] {
        let e = errors(&with("tcp", &format!("fast_path = \"{fast}\""), no_certs));
        assert!(e.contains(&format!("fast_path = \"{fast}\" cannot carry a TLS session")), "{e}");
    }
    let missing = "[[service.tls.certificate]]\ncert = \"/nonexistent/site.pem\"\nkey = \"/nonexistent/site.key\"";
    let e = errors(&with("tcp", "", missing));
    assert!(e.contains("/nonexistent/site.pem: cannot read the certificate"), "{e}");
    let plain = "[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\n[service.http]\nhsts = \"1d\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n";
    assert!(errors(plain).contains("hsts needs [service.tls]"));
    let e = errors(&with("http", "[service.http]\nredirect_https = true", no_certs));
    assert!(e.contains("redirect_https is for a plain-HTTP service"), "{e}");
    let e = errors(&with("http", "", &format!("client_ca = \"/nonexistent/ca.pem\"\n{missing}")));
    assert!(e.contains("/nonexistent/site.pem"), "the first failure is the certificate's: {e}");
}

#[test]
fn tracing_needs_an_http_endpoint_and_a_name_a_trace_can_show() {
    let with = |mode: &str, tracing: &str| {
        format!("[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\nmode = \"{mode}\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n[service.http.tracing]\n{tracing}\n")
    };
    let c = parse(&with("http", ""), "t").expect("every key has a default");
    let endpoint = c.services[0].http.tracing.as_ref().unwrap().endpoint().unwrap();
    assert_eq!((endpoint.host.as_str(), endpoint.port, endpoint.path.as_str()), ("127.0.0.1", 4318, "/v1/traces"));
    let e = errors(&with("http", "endpoint = \"https://collector:4318/v1/traces\""));
    assert!(e.contains("is not an http:// URL"), "{e}");
    let e = errors(&with("http", "endpoint = \"http://\"\nservice_name = \"\""));
    assert!(e.contains("endpoint") && e.contains("service_name \"\" cannot name a service"), "{e}");
    let e = errors(&with("http", "sample = 1.5"));
    assert!(e.contains("sample = 1.5 is out of range: use 0 to 1"), "{e}");
    let ipv6 = parse(&with("http", "endpoint = \"http://[::1]/traces\""), "t").unwrap();
    let endpoint = ipv6.services[0].http.tracing.as_ref().unwrap().endpoint().unwrap();
    assert_eq!((endpoint.host.as_str(), endpoint.port, endpoint.authority.as_str()), ("::1", 80, "[::1]"));
    assert!(errors(&with("tcp", "")).contains("mode = \"http\""), "tracing is for HTTP services");
}

#[test]
fn tls_passthrough_routes_by_server_name_in_tcp_mode_only() {
    let text = include_str!("../../../../examples/tls-passthrough.toml");
    let c = parse_with(text, "passthrough.toml", Resolve::No).unwrap();
    assert_eq!(c.services[0].routes[1].when.sni, ["shop.example.com", "*.shop.example.com"]);
    assert_eq!(revalidate(&c).unwrap(), c, "sni routes are written back as read");

    let d = first_error(&text.replace("mode = \"tcp\"", "mode = \"http\""));
    assert!(d.message.contains("sni in mode = \"http\" reads the server name of TLS this service terminates"), "{d}");
    assert!(d.hint.as_deref().unwrap_or("").contains("passes through"), "{d}");
    let d = first_error(&text.replace("sni = [\"api.example.com\"]", "sni = [\"api.example.com\"]\npath_prefix = [\"/v1\"]"));
    assert!(d.message.contains("matches only the TLS server name"), "{d}");
    let d = first_error(&text.replace("sni = [\"api.example.com\"]", "sni = [\"api example\"]"));
    assert!(d.message.contains("\"api example\" is not a DNS name"), "{d}");
    let d = first_error(&text.replace("sni = [\"api.example.com\"]", "sni = [\"a.*.example.com\"]"));
    assert!(d.message.contains("is not a DNS name"), "a wildcard is only a first label: {d}");
    let d = first_error(&text.replace("sni = [\"api.example.com\"]", "sni = []"));
    assert!(d.message.contains("a route with nothing to match") && d.hint.as_deref().unwrap_or("").contains("sni"), "{d}");
    let tls = "[service.tls]\n[[service.tls.certificate]]\ncert = \"c.pem\"\nkey = \"k.pem\"\n[service.health]";
    let e = errors(&text.replacen("[service.health]", tls, 1));
    assert!(e.contains("this service terminates TLS"), "{e}");
}

#[test]
fn http3_needs_tls_in_http_mode_with_tls13_and_no_client_certificates() {
    let base = "[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\n[service.http]\nhttp3 = true\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n";
    let e = errors(base);
    assert!(e.contains("http3 runs over QUIC, which is always encrypted: it needs [service.tls]"), "{e}");
    let tls = "[service.tls]\nmax_version = \"1.2\"\nclient_ca = \"ca.pem\"\n[[service.tls.certificate]]\ncert = \"c.pem\"\nkey = \"k.pem\"\n";
    let e = errors(&format!("{base}{tls}").replace("mode = \"http\"", "mode = \"tcp\""));
    for said in ["http3 serves HTTP requests", "http3 needs TLS 1.3", "http3 does not take client certificates"] {
        assert!(e.contains(said), "{said}: {e}");
    }
}

#[test]
fn the_grpc_example_is_valid_and_h2_servers_need_http_mode() {
    let text = include_str!("../../../../examples/grpc.toml");
    let c = parse_with(text, "grpc.toml", Resolve::No).unwrap();
    assert_eq!(c.services[0].protocol, ServerProtocol::H2);
    assert!(c.services[0].http.h2c);
    assert_eq!(revalidate(&c).unwrap(), c, "protocol is written back as read");
    let d = first_error(&text.replace("mode = \"http\"", "mode = \"tcp\"").replace("[service.http]\nh2c = true\n", ""));
    assert!(d.message.contains("protocol = \"h2\" is for mode = \"http\""), "{d}");
    let d = first_error(&text.replace("protocol = \"h2\"", "protocol = \"h3\""));
    assert!(d.message.contains("h3"), "{d}");
    assert_eq!(c.services[0].health.kind, HealthKind::Grpc);
    // gRPC checks speak HTTP/2: an HTTP/1.1 pool cannot be checked so.
    let d = first_error(&text.replace("protocol = \"h2\"\n", ""));
    assert!(d.message.contains("kind = \"grpc\" speaks HTTP/2"), "{d}");
    let d = first_error(&text.replace("grpc_service = \"\"", &format!("grpc_service = \"{}\"", "x".repeat(201))));
    assert!(d.message.contains("grpc_service is at most 200"), "{d}");
}

#[test]
fn a_fleet_file_is_checked_for_what_only_it_has() {
    let ok = "[fleet]\nendpoints = [\"http://10.0.0.1:2379\", \"https://etcd.example:2379\"]\nprefix = \"/fulcrum/prod\"\nname = \"lb-1\"\n[fleet.override.web]\nlisten = \"10.0.0.21:80\"\n";
    let c = parse_with(ok, "lb.toml", Resolve::No).unwrap();
    let f = c.fleet.as_ref().unwrap();
    assert_eq!((f.lease, f.overrides["web"]["listen"].as_str()), (std::time::Duration::from_secs(10), Some("10.0.0.21:80")));
    assert_eq!(revalidate(&c).unwrap(), c, "[fleet] is written back as read");
    let e = errors(&ok.replace("lease", "x").replace("name = \"lb-1\"", "name = \"lb 1\"\nlease = \"1s\""));
    assert!(e.contains("fleet name \"lb 1\" is not a plain name") && e.contains("lease = 1s is out of range: use 2s to 1m"), "{e}");
    let e = errors(&ok.replace("[fleet.override.web]", "[fleet.override.web]\nserver = []"));
    assert!(e.contains("server of service \"web\" cannot be overridden per instance"), "{e}");
    let e = errors(&ok.replace("prefix = \"/fulcrum/prod\"", "prefix = \"/fulcrum/\"\nuser = \"u\""));
    assert!(e.contains("must start with '/' and not end with one") && e.contains("user and password_file go together"), "{e}");
    let e = errors(&ok.replace("http://10.0.0.1:2379", "http://10.0.0.1"));
    assert!(e.contains("does not name a host and port"), "{e}");
}

#[test]
fn a_service_may_take_its_servers_from_srv_records_asked_of_its_nameservers() {
    let ok = "[dns]\nnameservers = [\"127.0.0.1:5353\", \"[::1]:53\"]\n\n[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nsrv = \"_http._tcp.web.example\"\n";
    let c = parse_with(ok, "t", Resolve::No).unwrap();
    assert_eq!((c.services[0].srv.as_deref(), c.dns.as_ref().unwrap().nameservers.len()), (Some("_http._tcp.web.example"), 2));
    assert_eq!(revalidate(&c).unwrap(), c, "srv and [dns] are written back as read");
    let e = errors(&ok.replace("_http._tcp.web.example", "_http._tcp..example").replace("\"[::1]:53\"", "\"ns.example:53\""));
    assert!(e.contains("srv \"_http._tcp..example\" is not a DNS name") && e.contains("nameserver \"ns.example:53\" is not ip:port"), "{e}");
    let e = errors(&ok.replace("nameservers = [\"127.0.0.1:5353\", \"[::1]:53\"]", "nameservers = []").replace("srv = \"_http._tcp.web.example\"\n", ""));
    assert!(e.contains("dns nameservers has 0 entries") && e.contains("service \"web\" has no servers"), "{e}");
}

#[test]
fn slow_start_damping_and_all_down_are_a_services_and_a_pool_may_set_its_own() {
    let text = "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\nslow_start = \"30s\"\nall_down = \"use-all\"\n[service.damping]\nhalf_life = \"2m\"\n\
                [[service.server]]\naddress = \"127.0.0.1:1001\"\n\
                [[service.pool]]\nname = \"p\"\n[[service.pool.server]]\naddress = \"127.0.0.1:1002\"\n\
                [[service.pool]]\nname = \"q\"\nslow_start = \"0s\"\nall_down = \"fail\"\n[service.pool.damping]\nsuppress = 0\n[[service.pool.server]]\naddress = \"127.0.0.1:1003\"\n";
    let c = parse_with(text, "t", Resolve::No).unwrap();
    let s = &c.services[0];
    let (p, q) = (s.routed_pool(&s.pools[0]), s.routed_pool(&s.pools[1]));
    assert_eq!((s.slow_start, s.all_down, s.damping.half_life, s.damping.suppress), (Duration::from_secs(30), AllDown::UseAll, Duration::from_secs(120), 2000));
    assert_eq!((p.slow_start, p.all_down, &p.damping), (s.slow_start, s.all_down, &s.damping), "a pool that sets nothing has the service's");
    assert_eq!((q.slow_start, q.all_down, q.damping.suppress, q.damping.reuse), (Duration::ZERO, AllDown::Fail, 0, 750));
    assert_eq!(revalidate(&c).unwrap(), c);
    let e = errors(&text.replace("half_life = \"2m\"", "reuse = 2000"));
    assert!(e.contains("reuse = 2000 is not below suppress = 2000"), "{e}");
    let e = errors(&text.replace("slow_start = \"0s\"", "slow_start = \"2h\""));
    assert_eq!(e.matches("slow_start = 2h is out of range: use 0s to 1h").count(), 1, "{e}");
}

/// Every key the schema accepts is in `docs/configuration.md`, and every key its tables list is
/// one the schema accepts. The keys are read from `schema.rs` and `schema/` themselves: each `pub` field of a
/// struct that derives `Deserialize`, by its `rename` when it has one.
#[test]
fn the_configuration_manual_documents_every_key_and_no_other() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    // schema.rs and the files of its concerns (schema/).
    let dir = format!("{}/src/config", env!("CARGO_MANIFEST_DIR"));
    let parts = std::fs::read_dir(format!("{dir}/schema")).unwrap().map(|e| e.unwrap().path());
    let schema: String = std::iter::once(format!("{dir}/schema.rs").into()).chain(parts).map(|p: std::path::PathBuf| std::fs::read_to_string(p).unwrap()).collect();
    let manual = std::fs::read_to_string(format!("{root}/docs/configuration.md")).unwrap();
    let mut keys = std::collections::BTreeSet::new();
    let (mut deserialized, mut inside, mut rename, mut flattened) = (false, false, None::<String>, false);
    for line in schema.lines() {
        let text = line.trim();
        if text.starts_with("#[derive(") {
            deserialized = text.contains("Deserialize");
        } else if line.starts_with("pub struct ") && line.ends_with('{') {
            inside = deserialized;
            rename = None;
        } else if line.starts_with('}') {
            inside = false;
        } else if inside && text.starts_with("#[serde(") {
            rename = text.split("rename = \"").nth(1).and_then(|r| r.split('"').next()).map(str::to_string);
            // A flattened field's keys are its struct's, listed there; a skipped one is no key.
            flattened = text.contains("flatten") || text == "#[serde(skip)]";
        } else if inside && line.starts_with("    pub ") {
            let name = text.trim_start_matches("pub ").split(':').next().unwrap().to_string();
            if !std::mem::take(&mut flattened) {
                keys.insert(rename.take().unwrap_or(name));
            }
        } else if inside && !text.starts_with("///") {
            rename = None;
        }
    }
    assert!(keys.len() > 100 && keys.contains("certificate") && keys.contains("strict_sni_host"), "the schema was not read: {keys:?}");
    // A key is documented as `key`, or as a table: [key], [[...key]], [...key.] and the like.
    let documented = |k: &str| {
        manual.contains(&format!("`{k}`"))
            || manual.contains(&format!("[{k}]"))
            || manual.contains(&format!(".{k}]"))
            || manual.contains(&format!("[{k}."))
            || manual.contains(&format!(".{k}."))
    };
    let missing: Vec<&String> = keys.iter().filter(|k| !documented(k)).collect();
    assert!(missing.is_empty(), "keys the schema accepts but docs/configuration.md does not document: {missing:?}");
    let listed: Vec<&str> =
        manual.lines().filter_map(|l| l.strip_prefix("| `")?.split('`').next()).filter(|k| k.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')).collect();
    let unknown: Vec<&&str> = listed.iter().filter(|k| !keys.contains(**k)).collect();
    assert!(listed.len() > 80 && unknown.is_empty(), "docs/configuration.md lists keys the schema does not accept: {unknown:?}");
}

#[test]
fn request_id_names_a_header_that_does_not_frame_the_message() {
    let with = |name: &str| {
        format!(
            "[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\n[service.http]\nrequest_id = {name:?}\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n"
        )
    };
    assert!(parse(&with("X-Request-Id"), "t").is_ok());
    for bad in ["Content-Length", "transfer-encoding", "x request id", ""] {
        let e = errors(&with(bad));
        assert!(e.contains("cannot carry a request's id"), "{bad}: {e}");
    }
}

/// A top-level `[[pool]]` with two servers, and the services of `services` after it.
fn shared(pool_extra: &str, services: &str) -> String {
    format!("[[pool]]\nname = \"back\"\n{pool_extra}\n[[pool.server]]\naddress = \"127.0.0.1:3001\"\n[[pool.server]]\naddress = \"127.0.0.1:3002\"\n{services}")
}

const WEB_AND_TCP: &str = "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\ndefault_pool = \"back\"\n\
                           [[service]]\nname = \"raw\"\nlisten = \"127.0.0.1:2000\"\ndefault_pool = \"back\"\n";

#[test]
fn a_shared_pool_serves_services_of_both_modes_and_may_be_unused() {
    let c = parse(&shared("algorithm = \"least-conn\"", WEB_AND_TCP), "t").unwrap();
    let back = c.shared("back").unwrap();
    assert_eq!(c.users_of("back").map(|s| s.name.as_str()).collect::<Vec<_>>(), ["web", "raw"]);
    let settings = c.shared_pool(back);
    assert_eq!((settings.name.as_str(), settings.mode, settings.algorithm, settings.servers.len()), ("back", Mode::Http, Algorithm::LeastConn, 2));
    // Each service dispatches with its own connection settings over the pool's servers.
    let raw = c.services[1].shared_view(&settings);
    assert_eq!((raw.mode, raw.name.as_str(), raw.servers.len()), (Mode::Tcp, "back", 2));
    // A route names a shared pool as it names its service's own; an unused pool is allowed.
    let routed = "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n\
                  [[service.route]]\npool = \"back\"\npath_prefix = [\"/api\"]\n";
    let c = parse(&shared("", routed), "t").unwrap();
    assert_eq!(c.services[0].shared_names().collect::<Vec<_>>(), ["back"]);
    let unused = parse(&shared("", "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n"), "t").unwrap();
    // `save` writes the shared pools back as `[[pool]]`.
    assert_eq!(parse(&to_toml(&unused), "saved").unwrap(), unused);
}

#[test]
fn a_pool_name_means_one_pool_and_must_name_one() {
    let unknown = first_error(&shared("", &WEB_AND_TCP.replacen("default_pool = \"back\"", "default_pool = \"nope\"", 1)));
    assert_eq!((unknown.line, unknown.column), (12, 16), "{unknown}");
    assert!(unknown.message.contains("\"nope\" is not a pool of this service nor a shared [[pool]]"), "{unknown}");
    assert!(unknown.hint.as_deref().is_some_and(|h| h.contains("back")), "{unknown}");
    let own = "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n\
               [[service.pool]]\nname = \"back\"\n[[service.pool.server]]\naddress = \"127.0.0.1:1002\"\n\
               [[service.route]]\npool = \"back\"\npath_prefix = [\"/api\"]\n";
    let clash = first_error(&shared("", own));
    assert_eq!(clash.line, 15, "{clash}");
    assert!(clash.message.contains("also a shared [[pool]]'s: a name means one pool"), "{clash}");
    let e = errors(&shared("", &WEB_AND_TCP.replace("name = \"raw\"", "name = \"back\"")));
    assert!(e.contains("pool name \"back\" is also a service's"), "{e}");
    let twice = format!("[[pool]]\nname = \"back\"\n[[pool.server]]\naddress = \"127.0.0.1:3003\"\n{}", shared("", WEB_AND_TCP));
    let e = errors(&twice);
    assert!(e.contains("pool name \"back\" is used twice (also by pool #1)"), "{e}");
}

#[test]
fn a_shared_pool_used_from_a_mode_it_cannot_serve_is_refused_where_the_service_names_it() {
    for (extra, says) in [
        ("protocol = \"h2\"", "whose servers speak protocol = \"h2\""),
        ("algorithm = \"uri-hash\"", "whose algorithm uri-hash reads HTTP requests"),
        ("proxy_protocol = \"v1\"", "which sends a PROXY header"),
    ] {
        let d = errors(&shared(extra, WEB_AND_TCP));
        let expected_line = if says.contains("PROXY") { 12 } else { 16 };
        assert!(d.contains(says) && d.contains(&format!("t:{expected_line}:")), "{extra}: {d}");
    }
    let web = "[[service]]\nname = \"web\"\nlisten = \"127.0.0.1:1000\"\nmode = \"http\"\ndefault_pool = \"back\"\n";
    let e = errors(&shared("algorithm = \"header-hash\"", web));
    assert!(e.contains("header-hash needs the service's [service.http] hash_header"), "{e}");
    // A TCP service that terminates TLS may send what it decrypts to a shared pool.
    let tls = "[service.tls]\n[[service.tls.certificate]]\ncert = \"c.pem\"\nkey = \"k.pem\"\n";
    let e = errors(&shared("", &format!("{WEB_AND_TCP}{tls}")));
    assert!(e.contains("c.pem") && !e.contains("this service terminates TLS"), "{e}");
    let e = errors(&format!("[[pool]]\nname = \"empty\"\n{}", shared("", WEB_AND_TCP)));
    assert!(e.contains("t:2:8: error: pool \"empty\" has no servers"), "{e}");
    let e = errors(&format!("{}[fleet]\nendpoints = [\"http://127.0.0.1:2379\"]\n", shared("", "")));
    assert!(e.contains("[[pool]] is in a file with [fleet]"), "{e}");
}
