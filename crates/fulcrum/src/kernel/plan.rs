//! What a kernel-mode service's table should hold now ([`Ruleset`]): the servers that take new
//! connections and their shares, read from the live state of its pool the way a pick would read
//! it, and every server counted.
//!
//! A server takes new connections while it is usable (up, enabled, not draining: effective
//! weight above 0); the backups only while no primary is, as `live::Pool::pick` has it. Its
//! share is its effective weight (`round-robin`, `static-rr`, `random`), or the ratio the
//! pool's `passive-ratio` balancer holds for it (`Balancer::metrics`), never below
//! `passive_ratio::MIN_RATIO`: a server that just came back has its share before the balancer
//! has renormalised it in.

use std::net::{SocketAddr, SocketAddrV4};

use super::nft::{Ruleset, table_name};
use super::split::Split;
use crate::balance::passive_ratio::MIN_RATIO;
use crate::config::{self, Algorithm};
use crate::live::{Service, Tier};

/// A server that may take new connections, with what its share is made of.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    addr: SocketAddrV4,
    weight: u32,
    /// The passive controller's ratio, where it holds one.
    ratio: Option<f64>,
}

/// The table of a running service; `None` when its listen address is not IPv4 (`check` refuses
/// it, so only a config that skipped it gets here).
pub fn of_service(service: &Service) -> Option<Ruleset> {
    let SocketAddr::V4(vip) = service.listen else { return None };
    let pool = &service.pool;
    let counted = distinct(pool.servers().filter_map(|e| v4(e.addr)));
    let usable = |t: &&Tier| t.servers.iter().any(|e| e.state.effective_weight() > 0 && v4(e.addr).is_some());
    let tier = [&*pool.primary, &*pool.backup].into_iter().find(usable);
    let candidates = tier.map_or_else(Vec::new, |t| {
        let weighted = t.servers.iter().enumerate().map(|(i, e)| (i, e, e.state.effective_weight()));
        weighted.filter(|(_, _, w)| *w > 0).filter_map(|(i, e, weight)| Some(Candidate { addr: v4(e.addr)?, weight, ratio: t.metrics(i).and_then(|m| m.ratio) })).collect()
    });
    Some(ruleset(&service.config().name, vip, service.config().algorithm, &candidates, counted))
}

/// The table a config's service would start with, every enabled primary up: what `fulcrum check`
/// asks `nft --check` about. Its server names are resolved.
pub fn of_config(service: &config::Service) -> Result<Ruleset, String> {
    let vip = match service.listen.parse::<SocketAddr>() {
        Ok(SocketAddr::V4(vip)) => vip,
        _ => return Err(format!("listen address {:?} is not IPv4 ip:port", service.listen)),
    };
    let mut counted = Vec::new();
    let mut candidates = Vec::new();
    for server in &service.servers {
        let addr = config::resolve_server(server).map_err(|e| e.to_string())?;
        let addr = v4(addr).ok_or_else(|| format!("server {} is not IPv4", server.address))?;
        counted.push(addr);
        if server.enabled && !server.backup {
            candidates.push(Candidate { addr, weight: server.weight, ratio: None });
        }
    }
    Ok(ruleset(&service.name, vip, service.algorithm, &candidates, distinct(counted.into_iter())))
}

fn ruleset(service: &str, vip: SocketAddrV4, algorithm: Algorithm, candidates: &[Candidate], counted: Vec<SocketAddrV4>) -> Ruleset {
    Ruleset { table: table_name(service), vip, counted, targets: candidates.iter().map(|c| c.addr).collect(), split: split(algorithm, candidates) }
}

/// The map's split for `algorithm` (`check` allows only these four; any other draws by weight).
fn split(algorithm: Algorithm, candidates: &[Candidate]) -> Split {
    let weights: Vec<u32> = candidates.iter().map(|c| c.weight).collect();
    match algorithm {
        Algorithm::RoundRobin | Algorithm::StaticRr => Split::rotation(&weights),
        Algorithm::PassiveRatio => {
            // Before the balancer holds ratios, an equal split: the one it starts from.
            let equal = 1.0 / candidates.len().max(1) as f64;
            Split::random(&candidates.iter().map(|c| c.ratio.unwrap_or(equal).max(MIN_RATIO)).collect::<Vec<_>>())
        }
        _ => Split::random(&weights.iter().map(|&w| f64::from(w)).collect::<Vec<_>>()),
    }
}

fn v4(addr: SocketAddr) -> Option<SocketAddrV4> {
    match addr {
        SocketAddr::V4(a) => Some(a),
        SocketAddr::V6(_) => None,
    }
}

/// Each address once, in the order first seen.
fn distinct(addrs: impl Iterator<Item = SocketAddrV4>) -> Vec<SocketAddrV4> {
    let mut out: Vec<SocketAddrV4> = Vec::new();
    for a in addrs {
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::Live;

    fn live(algorithm: &str, servers: &[(&str, &str)]) -> Live {
        let mut text = format!("[[service]]\nname = \"web\"\nlisten = \"10.0.0.1:80\"\nmode = \"kernel\"\nalgorithm = \"{algorithm}\"\n[service.health]\nkind = \"none\"\n");
        for (address, extra) in servers {
            text += &format!("[[service.server]]\naddress = \"{address}\"\n{extra}\n");
        }
        Live::new(config::parse(&text, "t.toml").unwrap()).unwrap()
    }

    #[test]
    fn weights_rotate_over_the_usable_servers_and_every_server_is_counted() {
        let rt = live("static-rr", &[("10.0.1.2:8080", "weight = 3"), ("10.0.1.3:8080", ""), ("10.0.1.4:8080", "")]);
        rt.server("web", "10.0.1.4:8080").unwrap().set_enabled(false);
        let r = of_service(&rt.current().services[0]).unwrap();
        assert_eq!(r.table, "fulcrum_web");
        assert_eq!(r.counted.len(), 3, "a disabled server is still counted");
        assert_eq!(r.targets, vec!["10.0.1.2:8080".parse::<SocketAddrV4>().unwrap(), "10.0.1.3:8080".parse().unwrap()]);
        assert_eq!(r.split.counts(2), vec![3, 1]);
    }

    #[test]
    fn backups_take_new_connections_only_while_no_primary_is_usable() {
        let rt = live("random", &[("10.0.1.2:8080", ""), ("10.0.1.9:8080", "backup = true")]);
        let targets = |rt: &Live| of_service(&rt.current().services[0]).unwrap().targets;
        assert_eq!(targets(&rt), vec!["10.0.1.2:8080".parse::<SocketAddrV4>().unwrap()]);
        rt.server("web", "10.0.1.2:8080").unwrap().set_health(false);
        assert_eq!(targets(&rt), vec!["10.0.1.9:8080".parse::<SocketAddrV4>().unwrap()]);
        rt.server("web", "10.0.1.9:8080").unwrap().set_draining(true);
        let none = of_service(&rt.current().services[0]).unwrap();
        assert!(none.split.is_empty() && none.targets.is_empty());
        assert!(none.write(&[]).contains("tcp dport 80 drop"));
    }

    #[test]
    fn passive_ratio_splits_by_the_balancers_ratios() {
        let rt = live("passive-ratio", &[("10.0.1.2:8080", ""), ("10.0.1.3:8080", ""), ("10.0.1.4:8080", "")]);
        let r = of_service(&rt.current().services[0]).unwrap();
        assert_eq!(r.split.counts(3), vec![3334, 3333, 3333], "equal ratios to start with");
        rt.server("web", "10.0.1.3:8080").unwrap().set_health(false);
        let r = of_service(&rt.current().services[0]).unwrap();
        assert_eq!(r.split.counts(2), vec![5000, 5000], "renormalised without the server that went down");
    }
}
