//! TLS material: termination (`[service.tls]`) for TCP and HTTP modes and origination to the
//! servers (`server_tls`, `origin`), with rustls and its ring provider. Below the data path:
//! `config` (validation loads what `check` must), `live` (a generation holds what it built) and
//! `proxy` (the handshakes) use it, and it uses none of them but `config`.
//!
//! A service's `Terminator` is built with its generation (on a blocking thread: it reads the
//! certificate files), so a reload or SIGHUP that changes a certificate serves new connections
//! with it while connections in flight keep their sessions; a certificate that does not load
//! refuses the whole change, and `check` runs the same loading. TLS 1.2 and 1.3 (or what
//! `min_version` and `max_version` leave), rustls's cipher suites in the server's order
//! (`provider`, or the `cipher_suites` set: `policy`), the certificate chosen by SNI (`sni`),
//! and client certificates verified against the `client_ca` of the certificate chosen, or the
//! service's (`clients`).
//!
//! Sessions resume only within the context they were issued in (`resumption`: the service, its
//! certificates and the `client_ca` of the name's group), and a resumed session under a
//! `client_ca` is served only when the client certificate it carries still verifies against
//! that `client_ca` now. With `strict_sni_host`, HTTP requests must name a host of the
//! certificate the handshake chose (`names`). TLS that passes through to the servers, routed by
//! the name the client asks for, is the data path's (`proxy::passthrough`); TLS from Fulcrum to
//! the servers is `origin`'s.

pub mod acme;
mod certs;
mod clients;
pub mod origin;
pub mod policy;
mod quic;
mod resumption;
mod sni;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, SystemTime};

use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

pub use certs::{CertInfo, Source, ca_file, describe_pem, unix_to_text};
pub use quic::{QuicLimits, STREAM_WINDOW};
pub use sni::covers;

use crate::config::{self, Mode};

/// A certificate expiring within this long is warned about at load and in the stats.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 86_400);

/// A file that could not serve as configured, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {reason}")]
pub struct TlsError {
    pub file: String,
    pub reason: String,
}

/// A service's TLS: the acceptors and what the stats show of its certificates.
pub struct Terminator {
    /// One per client-certificate policy among the certificates (`clients`), in the order the
    /// certificates first use them.
    groups: Vec<clients::Group>,
    /// The group of each certificate, by the resolver's index.
    group_of: Vec<usize>,
    /// The certificates of its files (`certificates` adds the ACME one).
    pub certs: Vec<CertInfo>,
    /// With `[service.tls.acme]`: the slot its certificate is served from (the resolver's first).
    acme: Option<Arc<acme::Slot>>,
    handshake_timeout: Duration,
    resolver: Arc<sni::Resolver>,
    strict_sni_host: bool,
    /// Every file it was loaded from, as it was on disk just before: a reload reads them again
    /// only when one changed.
    files: Vec<(String, Option<FileStamp>)>,
    /// With `http3`: quinn's config, built from the first group at the first QUIC connection,
    /// and the limits it was built for.
    quic: std::sync::Mutex<Option<(QuicLimits, quic::Built)>>,
}

/// What tells a file changed without reading it: its size, modification time and inode (a
/// renewal written as a new file and renamed, or a symlink moved to a new one, as certbot does,
/// has another inode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

impl FileStamp {
    pub(crate) fn of(path: &str) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(FileStamp { len: m.len(), modified: m.modified().ok(), inode: m.ino() })
    }
}

/// Certificate sets loaded (at start, on reloads, by `check`): what the diff of a reload saves.
static LOADS: AtomicU64 = AtomicU64::new(0);

/// How many times a service's certificates were read from their files in this process.
pub fn loads() -> u64 {
    LOADS.load(Relaxed)
}

impl Terminator {
    /// Loads every certificate and key of `tls` and the client CAs of service `name`, and builds
    /// the server configs; an HTTP service offers `h2` by ALPN when `h2`. With ACME, the
    /// certificate of `acme_names` (`Acme::names_of` the service) is served from its slot.
    /// Reads files: call it off the runtime's threads.
    pub fn load(name: &str, tls: &config::Tls, mode: Mode, h2: bool, acme_names: &[String]) -> Result<Terminator, TlsError> {
        LOADS.fetch_add(1, Relaxed);
        let fail = |file: &str, reason: String| TlsError { file: file.into(), reason };
        let paths = tls.certificates.iter().flat_map(|c| [Some(&c.cert), Some(&c.key), c.client_ca.as_ref()]).flatten().chain(&tls.client_ca);
        let files = paths.map(|p| (p.clone(), FileStamp::of(p))).collect();
        let policy = policy::policy(tls.protocols(), provider()).map_err(|e| fail("[service.tls]", e.to_string()))?;
        let now = crate::clock::wall();
        let loaded = tls.certificates.iter().map(|c| certs::load(&c.cert, &c.key, &policy.provider, now)).collect::<Result<Vec<_>, _>>()?;
        let infos: Vec<CertInfo> = loaded.iter().map(|l| l.info.clone()).collect();
        let mut context = resumption::Context::of(name);
        for cert in loaded.iter().flat_map(|l| l.key.cert.iter()) {
            context.part(b"certificate", cert.as_ref());
        }
        // The ACME certificate first: the default for clients that send no name or another.
        let acme = match &tls.acme {
            Some(_) => Some(acme::slot::slot(acme_names).map_err(|e| fail("[service.tls.acme]", e))?),
            None => None,
        };
        if let Some(slot) = &acme {
            context.part(b"acme", slot.key.as_bytes());
        }
        let certs = acme.iter().map(|slot| (sni::Cert::Acme(slot.clone()), slot.names.clone())).chain(loaded.into_iter().map(|l| (sni::Cert::Fixed(l.key), l.info.names)));
        let resolver = sni::Resolver::new(certs.collect()).ok_or_else(|| fail("[service.tls]", "no [[service.tls.certificate]] and no [service.tls.acme]".into()))?;
        let resolver = Arc::new(resolver);
        let mut alpn = match mode {
            Mode::Http if h2 => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            Mode::Http => vec![b"http/1.1".to_vec()],
            _ => Vec::new(),
        };
        // Last: chosen only by a client that offers nothing else, the CA's validator.
        if tls.acme.as_ref().is_some_and(|a| a.challenge == config::AcmeChallenge::TlsAlpn01) {
            alpn.push(acme::ACME_TLS_ALPN.to_vec());
        }
        let base = clients::Base { policy: &policy, resolver: &resolver, context: &context, alpn: &alpn };
        let (groups, group_of) = clients::groups(tls, &base)?;
        Ok(Terminator {
            groups,
            group_of,
            certs: infos,
            acme,
            handshake_timeout: tls.handshake_timeout,
            resolver,
            strict_sni_host: mode == Mode::Http && tls.strict_sni_host(),
            files,
            quic: Default::default(),
        })
    }

    /// Every certificate it serves as it is now: the ACME one (from its slot) first, then the
    /// files'.
    pub fn certificates(&self) -> Vec<CertInfo> {
        self.acme.iter().map(|slot| slot.current().info.clone()).chain(self.certs.iter().cloned()).collect()
    }

    /// With ACME, while no certificate is issued yet: what the placeholder's note says.
    pub fn placeholder(&self) -> Option<String> {
        let slot = self.acme.as_ref().filter(|s| !s.issued())?;
        slot.current().info.note.clone()
    }

    /// Whether every file it was loaded from is as it was (checks metadata only, no read).
    pub fn unchanged_on_disk(&self) -> bool {
        self.files.iter().all(|(path, stamp)| stamp.is_some() && FileStamp::of(path) == *stamp)
    }

    /// With `strict_sni_host`: the names of the certificate a client that sent `server_name`
    /// (SNI) was given, which its requests' hosts must be among.
    pub fn strict_names(&self, server_name: Option<&str>) -> Option<Arc<[String]>> {
        self.strict_sni_host.then(|| self.resolver.names_for(server_name))
    }

    /// Certificates that expire within `EXPIRY_WARNING` of `now`, with the time left.
    pub fn expiring(&self, now: SystemTime) -> impl Iterator<Item = (&CertInfo, Duration)> {
        self.certs.iter().map(move |c| (c, c.remaining(now))).filter(|(_, left)| *left < EXPIRY_WARNING)
    }

    /// Runs a client's handshake within `handshake_timeout`, counting its outcome.
    pub async fn accept(&self, client: TcpStream, counters: &Counters) -> Result<TlsStream<TcpStream>, Failure> {
        let failure = match tokio::time::timeout(self.handshake_timeout, self.handshake(client)).await {
            // A CA's validator (tls-alpn-01) has seen the challenge certificate: nothing more.
            Ok(Ok((_, stream))) if stream.get_ref().1.alpn_protocol() == Some(acme::ACME_TLS_ALPN) => return Err(Failure::Closed),
            Ok(Ok((group, stream))) if !group.resumed_certificate_verifies(stream.get_ref().1) => Failure::ClientCertificate,
            Ok(Ok((_, stream))) => {
                let version = stream.get_ref().1.protocol_version();
                let counter = if version == Some(rustls::ProtocolVersion::TLSv1_3) { &counters.tls13 } else { &counters.tls12 };
                counter.fetch_add(1, Relaxed);
                return Ok(stream);
            }
            Err(_) => Failure::Timeout,
            Ok(Err(e)) => Failure::of(&e),
        };
        counters.failed[failure as usize].fetch_add(1, Relaxed);
        Err(failure)
    }

    /// The handshake, under the config of the group the client's server name (SNI) belongs to.
    /// With one group there is nothing to choose and the hello is not read ahead.
    async fn handshake(&self, client: TcpStream) -> std::io::Result<(&clients::Group, TlsStream<TcpStream>)> {
        if let [group] = &self.groups[..] {
            return Ok((group, group.acceptor.accept(client).await?));
        }
        let start = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), client).await?;
        let group = &self.groups[self.group_of[self.resolver.index(start.client_hello().server_name())]];
        Ok((group, start.into_stream(group.acceptor.config().clone()).await?))
    }
}

/// Why a handshake failed, as counted in the stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Not finished within `handshake_timeout`.
    Timeout,
    /// The client closed or reset the connection.
    Closed,
    /// No acceptable client certificate (with `client_ca`).
    ClientCertificate,
    /// Anything else the TLS protocol refused: no common version or cipher suite, a bad
    /// message, a plain-text client.
    Protocol,
}

impl Failure {
    pub const ALL: [Failure; 4] = [Failure::Timeout, Failure::Closed, Failure::ClientCertificate, Failure::Protocol];

    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Closed => "closed",
            Failure::ClientCertificate => "client_certificate",
            Failure::Protocol => "protocol",
        }
    }

    fn of(e: &std::io::Error) -> Failure {
        use std::io::ErrorKind::*;
        if let Some(tls) = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
            return match tls {
                rustls::Error::NoCertificatesPresented | rustls::Error::InvalidCertificate(_) => Failure::ClientCertificate,
                _ => Failure::Protocol,
            };
        }
        match e.kind() {
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => Failure::Closed,
            _ => Failure::Protocol,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Failure::Timeout => "the handshake did not finish in time",
            Failure::Closed => "the client closed during the handshake",
            Failure::ClientCertificate => "no acceptable client certificate",
            Failure::Protocol => "the TLS handshake failed",
        })
    }
}

/// rustls's ring provider with its cipher suites in the order a server picks them: AES-128-GCM
/// with SHA-256 first (HAProxy's and Go's first choice too). Its key schedule hashes with
/// SHA-256, which x86 CPUs with the SHA extensions (AMD Zen, Intel since Ice Lake) and ARMv8 run
/// in hardware, where ring's SHA-384 runs in plain code on every AMD CPU; and AES-128 has fewer
/// rounds. Every suite stays offered: a client that has only one of them still connects.
pub(crate) fn provider() -> rustls::crypto::CryptoProvider {
    use rustls::crypto::ring::cipher_suite::*;
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites = vec![
        TLS13_AES_128_GCM_SHA256,
        TLS13_AES_256_GCM_SHA384,
        TLS13_CHACHA20_POLY1305_SHA256,
        TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ];
    provider
}

/// A service's handshake counters (`ServiceState::tls`).
#[derive(Debug, Default)]
pub struct Counters {
    pub tls12: AtomicU64,
    pub tls13: AtomicU64,
    /// By `Failure as usize`.
    pub failed: [AtomicU64; 4],
    /// QUIC (`http3`): handshakes done, Retry packets sent to make a client prove its address,
    /// and new connections refused (the service or the process at `maxconn`, or draining).
    pub quic_handshakes: AtomicU64,
    pub quic_retries: AtomicU64,
    pub quic_refused: AtomicU64,
}
