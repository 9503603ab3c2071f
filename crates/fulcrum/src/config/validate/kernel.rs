//! `mode = "kernel"`: what a service that nftables serves can have. The kernel draws a server for
//! each new connection and forwards its packets itself (`kernel`), so every setting that needs a
//! byte, a connect or a pick of Fulcrum's is refused by name here rather than ignored: TLS, the
//! PROXY protocol, limits, queues, timeouts and retries, slow start and outlier detection. Routes
//! and pools are refused with FTP's (`validate_routing`), `[service.http]` and `fast_path` by
//! their own checks. What only the host can tell (an `nft` that runs, CAP_NET_ADMIN) is
//! `kernel::check`'s, which `fulcrum check` runs after this.

use std::net::{IpAddr, SocketAddr};

use super::super::schema::{AllDown, Config, P2c, Service, defaults};
use super::{Report, Seg, path, range, resolve_server};
use crate::config::Algorithm;

/// nftables names are at most 255 bytes; the table is `fulcrum_` and the service's name.
const MOST_NAME: usize = 200;

/// Every check of a kernel-mode service, the `i`th of `config`.
pub(super) fn validate_kernel(config: &Config, i: usize, service: &Service, report: &mut Report<'_>) {
    let prefix = [Seg::Key("service"), Seg::Index(i)];
    let at = |key| path(&prefix, &[Seg::Key(key)]);
    if service.name.len() > MOST_NAME {
        report.error(&at("name"), format!("a kernel-mode service's name is at most {MOST_NAME} characters: it names its nftables table"), "shorten the name");
    }
    if let Ok(listen) = service.listen.parse::<SocketAddr>() {
        virtual_address(listen, &at("listen"), report);
    }
    if !service.algorithm.serves(service.mode) {
        let allowed: Vec<&str> = Algorithm::ALL.iter().filter(|a| a.serves(service.mode)).map(|a| a.as_str()).collect();
        report.error(
            &at("algorithm"),
            format!(
                "algorithm {} cannot run in mode = \"kernel\": nftables draws each connection's server itself, by weight or by the passive controller's ratios",
                service.algorithm.as_str()
            ),
            &format!("use one of {}", allowed.join(", ")),
        );
    }
    report.range(&path(&prefix, &[Seg::Key("passive"), Seg::Key("slot")]), "slot", service.passive.slot, &range::KERNEL_SLOT);
    if config.user.is_some() {
        report.error(
            &[Seg::Key("user")],
            format!("service {:?} is mode = \"kernel\", whose nft needs CAP_NET_ADMIN, which the switch to user gives up", service.name),
            "remove user: run as root with allow_root = true, or start Fulcrum as a user that holds CAP_NET_ADMIN (systemd's AmbientCapabilities)",
        );
    }
    for (key, why) in proxied_only(service) {
        report.error(&at(key), format!("{key} is not for mode = \"kernel\": {why}"), "remove it, or use mode = \"tcp\" to have Fulcrum proxy the connections");
    }
    for (j, server) in service.servers.iter().enumerate() {
        let sat = |key| path(&prefix, &[Seg::Key("server"), Seg::Index(j), Seg::Key(key)]);
        if server.maxconn != 0 {
            report.error(&sat("maxconn"), "maxconn is not for mode = \"kernel\": the kernel places connections without counting them".into(), "remove it");
        }
        if server.proxy_protocol.is_some() {
            report.error(
                &sat("proxy_protocol"),
                "proxy_protocol is not for mode = \"kernel\": the kernel sends the client's own packets, which keep its address".into(),
                "remove it",
            );
        }
        let lookup = report.resolve == super::Resolve::Yes && !report.resolved_already(&server.address);
        let resolved = if lookup { resolve_server(server).ok() } else { server.address.parse::<SocketAddr>().ok() };
        if resolved.is_some_and(|a| a.is_ipv6()) {
            report.error(&sat("address"), format!("server {} is IPv6: mode = \"kernel\" serves IPv4 only", server.address), "name an IPv4 address, or use mode = \"tcp\"");
        }
    }
}

/// The virtual address nftables matches: one IPv4 address of the host's or routed to it.
fn virtual_address(listen: SocketAddr, at: &[Seg<'_>], report: &mut Report<'_>) {
    let hint = "listen on the virtual IPv4 address clients connect to, e.g. \"10.0.0.10:80\"";
    match listen.ip() {
        IpAddr::V6(_) => report.error(at, format!("listen address {listen} is IPv6: mode = \"kernel\" serves IPv4 only"), hint),
        ip if ip.is_unspecified() => report.error(at, format!("listen address {listen} names no address: nftables matches one virtual address"), hint),
        ip if ip.is_loopback() => report.error(at, format!("listen address {listen} is a loopback address, which a connection sent on to a server cannot come from"), hint),
        _ => {}
    }
}

/// The settings a service has set that need Fulcrum in the connection's path, with why.
fn proxied_only(service: &Service) -> Vec<(&'static str, &'static str)> {
    let when = |set: bool, key: &'static str, why: &'static str| set.then_some((key, why));
    let bytes = "the kernel forwards the packets as they are";
    let connects = "the kernel makes no connect of Fulcrum's to time, retry or count";
    [
        when(service.tls.is_some(), "tls", bytes),
        when(service.server_tls.is_some(), "server_tls", bytes),
        when(service.accept_proxy, "accept_proxy", bytes),
        when(service.proxy_protocol.is_some(), "proxy_protocol", "the kernel sends the client's own packets, which keep its address"),
        when(!service.half_close, "half_close", "the kernel passes each FIN on as it comes"),
        when(service.terminate_on_disable, "terminate_on_disable", "Fulcrum holds none of the connections to close"),
        when(service.maxconn != 0, "maxconn", "the kernel places connections without counting them"),
        when(!service.limits.is_empty(), "limit", "the kernel places connections without counting them"),
        when(service.connect_timeout != defaults::connect_timeout(), "connect_timeout", connects),
        when(service.retries != defaults::retries(), "retries", connects),
        when(service.failure_limit != defaults::failure_limit(), "failure_limit", connects),
        when(service.queue_timeout != defaults::queue_timeout(), "queue_timeout", "no connection waits for a server in Fulcrum"),
        when(service.client_timeout != defaults::idle_timeout(), "client_timeout", "conntrack times idle connections out"),
        when(service.server_timeout != defaults::idle_timeout(), "server_timeout", "conntrack times idle connections out"),
        when(!service.slow_start.is_zero(), "slow_start", "the map holds whole weights; a ramp would rewrite it every moment"),
        when(service.all_down == AllDown::UseAll, "all_down", "with no usable server the rule drops new connections"),
        when(service.panic_threshold != 0, "panic_threshold", "with no usable server the rule drops new connections"),
        when(service.outlier.is_some(), "outlier", "Fulcrum sees no answer of the servers' to judge them by"),
        when(service.p2c != P2c::default(), "p2c", "it tunes p2c-ewma, which kernel mode cannot run"),
    ]
    .into_iter()
    .flatten()
    .collect()
}

#[cfg(test)]
mod tests {
    use crate::config::{Mode, Resolve, parse_with};

    fn service(extra: &str, server: &str) -> String {
        format!("[[service]]\nname = \"web\"\nlisten = \"10.0.0.1:80\"\nmode = \"kernel\"\n{extra}\n[[service.server]]\naddress = \"10.0.1.2:8080\"\n{server}\n")
    }

    fn errors(text: &str) -> String {
        parse_with(text, "t.toml", Resolve::No).err().map(|d| d.to_string()).unwrap_or_default()
    }

    #[test]
    fn a_kernel_service_with_the_algorithms_nftables_can_draw_is_accepted() {
        for algorithm in ["round-robin", "static-rr", "random", "passive-ratio"] {
            let text = service(&format!("algorithm = \"{algorithm}\"\n[service.health]\nkind = \"http\""), "weight = 3\nbackup = false");
            let config = parse_with(&text, "t.toml", Resolve::No).unwrap_or_else(|e| panic!("{algorithm}: {e}"));
            assert_eq!(config.services[0].mode, Mode::Kernel);
            assert!(!config.services[0].binds(), "Fulcrum binds nothing for it");
        }
    }

    #[test]
    fn another_algorithm_is_refused_naming_the_four_allowed() {
        let e = errors(&service("algorithm = \"least-conn\"", ""));
        assert!(e.contains("algorithm least-conn cannot run in mode = \"kernel\""), "{e}");
        assert!(e.contains("use one of round-robin, static-rr, random, passive-ratio"), "{e}");
        assert!(!e.contains("needs mode = \"http\""), "one message, not the HTTP one too: {e}");
    }

    #[test]
    fn settings_that_need_the_proxy_are_refused_by_name() {
        for (setting, key) in [
            ("half_close = false", "half_close"),
            ("terminate_on_disable = true", "terminate_on_disable"),
            ("maxconn = 10", "maxconn"),
            ("retries = 1", "retries"),
            ("connect_timeout = \"3s\"", "connect_timeout"),
            ("client_timeout = \"1m\"", "client_timeout"),
            ("slow_start = \"10s\"", "slow_start"),
            ("panic_threshold = 50", "panic_threshold"),
            ("all_down = \"use-all\"", "all_down"),
            ("proxy_protocol = \"v2\"", "proxy_protocol"),
            ("accept_proxy = true\ntrusted_proxies = [\"10.0.0.0/8\"]", "accept_proxy"),
        ] {
            let e = errors(&service(setting, ""));
            assert!(e.contains(&format!("{key} is not for mode = \"kernel\"")), "{setting}: {e}");
        }
        let e = errors(&service("", "maxconn = 5\nproxy_protocol = \"v1\""));
        assert!(e.contains("maxconn is not for mode = \"kernel\"") && e.contains("proxy_protocol is not for mode = \"kernel\""), "{e}");
        let e = errors(&service("default_pool = \"x\"", ""));
        assert!(e.contains("remove [[service.pool]], [[service.route]] and default_pool from the kernel service"), "{e}");
    }

    #[test]
    fn the_virtual_address_and_the_servers_are_ipv4() {
        for (listen, says) in [("0.0.0.0:80", "names no address"), ("127.0.0.1:80", "loopback"), ("[2001:db8::1]:80", "IPv6")] {
            let e = errors(&service("", "").replace("10.0.0.1:80", listen));
            assert!(e.contains(says), "{listen}: {e}");
        }
        let e = errors(&service("", "").replace("10.0.1.2:8080", "[2001:db8::2]:8080"));
        assert!(e.contains("is IPv6: mode = \"kernel\" serves IPv4 only"), "{e}");
    }

    #[test]
    fn a_slot_runs_nft_so_it_is_no_shorter_than_100ms_and_user_is_refused() {
        let e = errors(&service("[service.passive]\nslot = \"50ms\"", ""));
        assert!(e.contains("slot = 50ms is out of range: use 100ms to 1h"), "{e}");
        assert!(errors(&service("[service.passive]\nslot = \"100ms\"", "")).is_empty());
        let e = errors(&format!("user = \"root\"\n{}", service("", "")));
        assert!(e.contains("whose nft needs CAP_NET_ADMIN"), "{e}");
    }
}
