//! DNS questions of Fulcrum's own: a service's `srv` name becomes servers.
//!
//! Host names of servers are the system resolver's (`getaddrinfo`, `/etc/hosts` included); SRV
//! records are not something it answers, so they are asked with hickory's resolver, of the
//! nameservers in `[dns]` or else those of `/etc/resolv.conf`. Each record's target is resolved
//! by the same resolver. Lookups run on a thread of their own with a small runtime, since they
//! are made while a generation is built on a blocking thread: never on the traffic's threads.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_resolver::Resolver;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::NetError;
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;

use crate::config::Dns;

/// How long one SRV question with its targets may take before it counts as failed.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// One server an SRV record names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvServer {
    /// `target:port`, the server's name in stats and its stable key.
    pub address: String,
    pub addr: SocketAddr,
    /// The record's weight, within the servers' 1 to 256.
    pub weight: u32,
    /// A record of a priority above the lowest: a backup.
    pub backup: bool,
}

/// Why an SRV name gave no servers; the service keeps the servers it had, or is refused if new.
#[derive(Debug, thiserror::Error)]
pub enum SrvError {
    #[error("cannot start a DNS runtime: {0}")]
    Runtime(std::io::Error),
    #[error("the DNS lookup thread failed")]
    Thread,
    #[error("SRV {name}: no answer within {} s", LOOKUP_TIMEOUT.as_secs())]
    Timeout { name: String },
    #[error("nameserver {0:?} is not ip:port")]
    Nameserver(String),
    #[error("cannot make a DNS resolver: {0}")]
    Resolver(Box<NetError>),
    #[error("SRV {name}: {cause}")]
    Lookup { name: String, cause: Box<NetError> },
    #[error("SRV {name}: target {target}: {cause}")]
    Target { name: String, target: String, cause: Box<NetError> },
    #[error("SRV {name}: target {target} has no address")]
    NoAddress { name: String, target: String },
}

/// The servers `name`'s SRV records name, in a stable order (priority, then target and port).
pub fn srv(name: &str, dns: Option<&Dns>) -> Result<Vec<SrvServer>, SrvError> {
    let (name, dns) = (name.to_string(), dns.cloned());
    std::thread::scope(|s| {
        s.spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(SrvError::Runtime)?;
            rt.block_on(async { tokio::time::timeout(LOOKUP_TIMEOUT, lookup(&name, dns.as_ref())).await.unwrap_or_else(|_| Err(SrvError::Timeout { name: name.clone() })) })
        })
        .join()
        .unwrap_or(Err(SrvError::Thread))
    })
}

async fn lookup(name: &str, dns: Option<&Dns>) -> Result<Vec<SrvServer>, SrvError> {
    let resolver = match dns {
        Some(d) => {
            let mut config = ResolverConfig::from_parts(None, Vec::new(), Vec::new());
            for ns in &d.nameservers {
                let at: SocketAddr = ns.parse().map_err(|_| SrvError::Nameserver(ns.clone()))?;
                let (mut udp, mut tcp) = (ConnectionConfig::udp(), ConnectionConfig::tcp());
                (udp.port, tcp.port) = (at.port(), at.port());
                config.add_name_server(NameServerConfig::new(at.ip(), true, vec![udp, tcp]));
            }
            Resolver::builder_with_config(config, TokioRuntimeProvider::default()).build()
        }
        None => Resolver::builder_tokio().and_then(|b| b.build()),
    }
    .map_err(|e| SrvError::Resolver(Box::new(e)))?;
    let answer = resolver.srv_lookup(name).await.map_err(|cause| SrvError::Lookup { name: name.into(), cause: Box::new(cause) })?;
    let records: Vec<_> = answer.answers().iter().filter_map(|r| if let RData::SRV(srv) = &r.data { Some(srv.clone()) } else { None }).collect();
    let lowest = records.iter().map(|r| r.priority).min().unwrap_or(0);
    let mut servers = Vec::with_capacity(records.len());
    for r in &records {
        let target = r.target.to_utf8();
        let target = target.trim_end_matches('.');
        let ips = resolver.lookup_ip(target).await.map_err(|cause| SrvError::Target { name: name.into(), target: target.into(), cause: Box::new(cause) })?;
        let ip = ips.iter().next().ok_or_else(|| SrvError::NoAddress { name: name.into(), target: target.into() })?;
        servers.push(SrvServer {
            address: format!("{target}:{}", r.port),
            addr: SocketAddr::new(ip, r.port),
            weight: u32::from(r.weight).clamp(1, 256),
            backup: r.priority > lowest,
        });
    }
    servers.sort_by(|a, b| (a.backup, &a.address).cmp(&(b.backup, &b.address)));
    servers.dedup_by(|a, b| a.address == b.address);
    Ok(servers)
}
