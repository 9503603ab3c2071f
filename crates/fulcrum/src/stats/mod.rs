//! Read-only views over the live counters, for `GET /api/stats` and `GET /metrics`.

pub mod history;
pub mod limits;
pub mod process;
pub mod prometheus;

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use serde::Serialize;

use crate::balance::AlgorithmMetrics;
use crate::clock::unix_ms;
use crate::live::http_stats::HistogramSnapshot;
use crate::live::{Generation, ServerEntry, State};

#[derive(Debug, Serialize)]
pub struct Snapshot {
    pub process: ProcessStats,
    pub services: Vec<ServiceStats>,
    /// Per-client limits: what each table did (its top keys: `GET /api/limits`).
    pub limits: Vec<limits::LimitStats>,
}

/// The whole process's client connections against its `maxconn` (`live::budget`).
#[derive(Debug, Serialize)]
pub struct ProcessStats {
    pub maxconn: u64,
    pub current: u64,
    pub peak: u64,
    /// Times accepting waited because the process was at `maxconn`.
    pub waits: u64,
    /// The soft descriptor limit in force.
    pub descriptors: u64,
    /// Times a service's certificates were read from their files (at start, and by reloads and
    /// edits that changed them or their files).
    pub tls_loads: u64,
    /// CPU, memory, descriptors open and uptime: filled by the admin handlers (`process::read`
    /// reads `/proc`, kept off the snapshot, which the data path's callers take too).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub figures: Option<process::ProcessFigures>,
}

#[derive(Debug, Serialize)]
pub struct ServiceStats {
    pub name: String,
    /// Whether the service's listener runs (the paper's service start/stop).
    pub enabled: bool,
    pub listen: String,
    pub mode: &'static str,
    pub algorithm: &'static str,
    /// The digest of the primary servers' lookup table (hashing algorithms only): equal on
    /// every instance of a fleet that sends each key to the same server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table_digest: Option<String>,
    /// `all_down = "use-all"` in force: no server is usable, so every server in rotation gets
    /// traffic whatever its checks say.
    pub panic: bool,
    pub current: u64,
    pub max: u64,
    pub total: u64,
    /// Clients closed because no server could take them.
    pub refused: u64,
    /// Connections forwarded by the sockmap fast path (`fast_path = "sockmap"` or `"adaptive"`,
    /// when loaded), those in it now, and the adaptive ones moved in and out.
    pub sockmap_connections: u64,
    pub sockmap_active: u64,
    pub sockmap_promoted: u64,
    pub sockmap_demoted: u64,
    pub maxconn: u32,
    /// Sessions started in the last whole second, and the most in one second.
    pub rate: u64,
    pub rate_max: u64,
    /// The per-client limit on the session rate, e.g. "50/s per client" (the service's own
    /// entry only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<String>,
    /// Clients waiting: for a server place (servers at their `maxconn`) and in the accept
    /// backlog (the service at its `maxconn`); the most seen; the backlog's limit.
    pub queue: u64,
    pub queue_max: u64,
    pub queue_limit: u32,
    pub redispatches: u64,
    /// `[service.http.retry]`: requests sent again on an answer or failure, and retries the
    /// budget refused.
    pub retries: u64,
    pub retries_over_budget: u64,
    /// A shared pool's entry (`[[pool]]`, one row whichever service the traffic came in on):
    /// the services that use it. Absent on a service's entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_by: Option<Vec<String>>,
    /// A service's own entry: the shared pools it sends traffic to, each shown in its own entry.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_pools: Vec<String>,
    /// `[service.tls]`: handshakes and certificates (the service's own entry only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsStats>,
    /// HTTP mode: responses and their times (the service's own entry only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpStats>,
    pub servers: Vec<ServerStats>,
}

/// A service's HTTP figures: responses by status class, Fulcrum's own answers by status, the
/// time to the server's response head and to the response's end (histograms with the bounds of
/// `live::http_stats::BOUNDS`, and p50, p95 and p99 of the whole time), and each route's hits.
#[derive(Debug, Serialize)]
pub struct HttpStats {
    pub responses: std::collections::BTreeMap<&'static str, u64>,
    pub own: std::collections::BTreeMap<String, u64>,
    pub first_byte: HistogramSnapshot,
    pub total: HistogramSnapshot,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Requests each route took, by its place in the config, since the service was last rebuilt.
    pub route_hits: Vec<u64>,
    /// Each route's answers by status class and whole time, as `route_hits`.
    pub routes: Vec<RouteStats>,
    /// The histograms' upper bounds, in seconds (the last bucket, +Inf, is `count`).
    pub bounds: &'static [f64],
    /// Access log lines the syslog receiver did not get (queue full, or refused).
    pub access_log_dropped: u64,
    /// With `[service.http.tracing]`: spans the OTLP receiver did not get (the queue full, or
    /// their batch refused or unanswered), and spans it took.
    pub tracing_spans_dropped: u64,
    pub tracing_spans_sent: u64,
}

/// One route's answers by status class and its requests' whole time (`HttpStats::routes`).
#[derive(Debug, Serialize)]
pub struct RouteStats {
    pub responses: std::collections::BTreeMap<&'static str, u64>,
    pub total: HistogramSnapshot,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// A histogram's `q` quantile in milliseconds, to a tenth.
fn quantile_ms(h: &HistogramSnapshot, q: f64) -> Option<f64> {
    h.quantile(q).map(|s| (s * 1e4).round() / 10.0)
}

/// The names of the status classes, in `Classes::read`'s order.
pub const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

fn http_stats(service: &crate::live::Service) -> HttpStats {
    let h = &service.state().http;
    let total = h.total.read();
    let ms = |q: f64| quantile_ms(&total, q);
    HttpStats {
        responses: CLASSES.iter().copied().zip(h.classes.read()).collect(),
        own: h.own().into_iter().map(|(code, n)| (code.to_string(), n)).collect(),
        first_byte: h.first_byte.read(),
        p50_ms: ms(0.5),
        p95_ms: ms(0.95),
        p99_ms: ms(0.99),
        total,
        route_hits: service.routes.iter().map(|r| r.hits.load(Relaxed)).collect(),
        routes: service
            .routes
            .iter()
            .map(|r| {
                let total = r.total.read();
                RouteStats {
                    responses: CLASSES.iter().copied().zip(r.classes.read()).collect(),
                    p50_ms: quantile_ms(&total, 0.5),
                    p95_ms: quantile_ms(&total, 0.95),
                    p99_ms: quantile_ms(&total, 0.99),
                    total,
                }
            })
            .collect(),
        bounds: &crate::live::http_stats::BOUNDS,
        access_log_dropped: service.access.as_ref().map_or(0, |a| a.dropped()),
        tracing_spans_dropped: service.tracer.as_ref().map_or(0, |t| t.dropped()),
        tracing_spans_sent: service.tracer.as_ref().map_or(0, |t| t.sent()),
    }
}

#[derive(Debug, Serialize)]
pub struct TlsStats {
    pub handshakes_tls12: u64,
    pub handshakes_tls13: u64,
    /// Failed handshakes by reason: timeout, closed, client_certificate, protocol.
    pub failures: std::collections::BTreeMap<&'static str, u64>,
    /// HTTP/3 (`http3`): QUIC handshakes done, Retry packets sent (address validation), and new
    /// QUIC connections refused (at `maxconn`, or draining).
    pub quic_handshakes: u64,
    pub quic_retries: u64,
    pub quic_refused: u64,
    pub certificates: Vec<CertificateStats>,
}

#[derive(Debug, Serialize)]
pub struct CertificateStats {
    pub file: String,
    pub names: Vec<String>,
    /// Expiry, RFC 3339, and as Unix seconds.
    pub expires: String,
    pub expires_unix: i64,
    /// Expires within 14 days (or has expired).
    pub expiring: bool,
    /// Seconds until it expires; zero once expired.
    pub expires_in_seconds: u64,
    pub issuer: String,
    /// `file` or `acme`.
    pub source: crate::tls::Source,
    /// With ACME: when it will be renewed, RFC 3339.
    pub next_renewal: Option<String>,
    /// With ACME: that a self-signed certificate is served while none is issued, and why.
    pub note: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ServerStats {
    pub address: String,
    pub resolved: String,
    pub backup: bool,
    pub state: State,
    /// Who put it in its state when it is not up: `operator`, `check`, `failure_limit`,
    /// `agent`, `damping` or `outlier`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_by: Option<&'static str>,
    pub weight: u32,
    /// `agent` while its agent's percentage scales its weight.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight_by: Option<&'static str>,
    /// With `[service.health.agent]`: what its agent last said (state, weight percentage, the
    /// answer or why asking failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<crate::live::agent::AgentView>,
    /// The weight it takes traffic by now: 0 unless up, the configured weight scaled by its
    /// agent's percentage and by the slow-start ramp while one runs.
    pub effective_weight: f64,
    /// Slow start: the percentage of its weight reached, while a ramp runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ramp_percent: Option<u32>,
    /// Flap damping's penalty now (each flap adds 1000; it halves every `half_life`).
    pub flap_penalty: u32,
    /// While suppressed: "flapping (penalty P, back in ~T)".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suppressed: Option<String>,
    /// While outlier detection holds it: "ejected: 5 consecutive 5xx answers (the last 503),
    /// back in 30s", or "shifted: takes 41% of its share (error ratio 35% ...)".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outlier: Option<String>,
    /// Active health check result held up or down (rise/fall applied).
    pub check_up: bool,
    /// Held down by `failure_limit` consecutive connect failures.
    pub passive_down: bool,
    pub last_check: String,
    /// How long the last active check took.
    pub last_check_ms: u64,
    /// Active checks in a row that disagree with the health state, toward `fall` (up) or `rise`
    /// (down).
    pub check_streak: u32,
    /// Seconds spent down since the server appeared.
    pub downtime_secs: u64,
    pub current: u64,
    pub max: u64,
    /// `maxconn`: connections (HTTP: requests) it takes at once, 0 for no limit; more wait in
    /// the pool's queue.
    pub maxconn: u32,
    pub total: u64,
    /// Times the balancer picked this server (LbTot), failed connects included.
    pub lb_total: u64,
    /// Sessions started in the last whole second, and the most in one second.
    pub rate: u64,
    pub rate_max: u64,
    pub connect_failures: u64,
    /// Failed connects sent on to another server.
    pub redispatches: u64,
    /// Connections that ended on a reset or timeout.
    pub transfer_errors: u64,
    /// FTP: data connections forwarded; `total` counts control sessions.
    pub data_transfers: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Seconds since the last connection was handed to this server; null if never.
    pub last_use_secs: Option<u64>,
    /// SYNs sent to this server since start, first ones and retransmissions (N_S), and the
    /// SYN-ACKs it answered (N_A), from the kernel's TCP_INFO.
    pub syn_sent: u64,
    pub syn_acked: u64,
    /// Mean connect time of established connects, in ms.
    pub connect_ms: Option<f64>,
    /// Peak-EWMA connect time (what p2c-ewma compares), in ms.
    pub ewma_connect_ms: f64,
    /// What the service's algorithm measures of this server (passive-ratio: ratio, R, N_S and
    /// N_A over its window).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<AlgorithmMetrics>,
    /// HTTP mode: the server's responses by status class (`1xx` to `5xx`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub responses: Option<[u64; 5]>,
    /// HTTP mode: the times to this server's response head and to its end, for `/metrics` only
    /// (the dashboard's once-a-second read of `/api/stats` would carry them for every server).
    #[serde(skip)]
    pub first_byte: Option<HistogramSnapshot>,
    #[serde(skip)]
    pub duration: Option<HistogramSnapshot>,
}

fn tls_stats(t: &crate::tls::Terminator, counters: &crate::tls::Counters) -> TlsStats {
    use crate::tls::{EXPIRY_WARNING, Failure, unix_to_text};
    let now = crate::clock::wall();
    TlsStats {
        handshakes_tls12: counters.tls12.load(Relaxed),
        handshakes_tls13: counters.tls13.load(Relaxed),
        failures: Failure::ALL.iter().map(|f| (f.as_str(), counters.failed[*f as usize].load(Relaxed))).collect(),
        quic_handshakes: counters.quic_handshakes.load(Relaxed),
        quic_retries: counters.quic_retries.load(Relaxed),
        quic_refused: counters.quic_refused.load(Relaxed),
        certificates: t
            .certificates()
            .iter()
            .map(|c| CertificateStats {
                file: c.file.clone(),
                names: c.names.clone(),
                expires: unix_to_text(c.not_after),
                expires_unix: c.not_after,
                expiring: c.remaining(now) < EXPIRY_WARNING,
                expires_in_seconds: c.remaining(now).as_secs(),
                issuer: c.issuer.clone(),
                source: c.source,
                next_renewal: c.next_renewal.map(unix_to_text),
                note: c.note.clone(),
            })
            .collect(),
    }
}

pub fn snapshot(generation: &Generation) -> Snapshot {
    let now = unix_ms();
    // A routed pool is listed as the service `service/pool`, on its service's address; a shared
    // pool once, under its own name, with the services that use it.
    let services = generation
        .pools()
        .map(|(service, s)| {
            let own = service.filter(|service| Arc::ptr_eq(&service.pool, s));
            ServiceStats {
                name: s.config.name.clone(),
                enabled: service.is_none_or(|service| service.config().enabled),
                listen: service.map(|service| service.listen.to_string()).unwrap_or_default(),
                mode: s.config.mode.as_str(),
                algorithm: s.config.algorithm.as_str(),
                table_digest: s.primary.table_digest().map(|d| format!("{d:016x}")),
                panic: s.panicking(),
                current: s.state.current.load(Relaxed),
                max: s.state.max.load(Relaxed),
                total: s.state.total.load(Relaxed),
                refused: s.state.refused.load(Relaxed),
                sockmap_connections: s.state.sockmap.load(Relaxed),
                sockmap_active: s.state.sockmap_active.load(Relaxed),
                sockmap_promoted: s.state.sockmap_promoted.load(Relaxed),
                sockmap_demoted: s.state.sockmap_demoted.load(Relaxed),
                maxconn: service.map_or(0, |service| service.config().maxconn),
                rate: s.state.rate.current(now / 1000),
                rate_max: s.state.rate.max(),
                rate_limit: own.and_then(|service| limits::session_limit(service)),
                queue: s.state.waiting(),
                queue_max: s.state.queue_max.load(Relaxed),
                queue_limit: (crate::proxy::listener::BACKLOG as usize * crate::proxy::workers::sockets_per_address()) as u32,
                redispatches: s.state.redispatches.load(Relaxed),
                retries: s.state.retries.load(Relaxed),
                retries_over_budget: s.state.retries_over_budget.load(Relaxed),
                shared_by: service.is_none().then(|| generation.users_of(&s.config.name).map(|u| u.config().name.clone()).collect()),
                shared_pools: own.map(|service| service.shared.iter().map(|p| p.config.name.clone()).collect()).unwrap_or_default(),
                tls: own.and_then(|service| service.tls.as_ref().map(|t| tls_stats(t, &s.state.tls))),
                http: own.filter(|_| s.config.mode == crate::mode::Mode::Http).map(|service| http_stats(service)),
                servers: s
                    .primary
                    .servers
                    .iter()
                    .enumerate()
                    .map(|(i, e)| server(e, false, now, s.primary.metrics(i), s.config.mode))
                    .chain(s.backup.servers.iter().enumerate().map(|(i, e)| server(e, true, now, s.backup.metrics(i), s.config.mode)))
                    .collect(),
            }
        })
        .collect();
    let b = &generation.budget;
    let process = ProcessStats {
        maxconn: b.max(),
        current: b.current(),
        peak: b.peak(),
        waits: b.waits(),
        descriptors: crate::live::budget::descriptor_limit(),
        tls_loads: crate::tls::loads(),
        figures: None,
    };
    let limits = generation.limits().map(|l| limits::limit_stats(l, None)).collect();
    Snapshot { process, services, limits }
}

fn server(e: &ServerEntry, backup: bool, now: u64, algorithm: Option<AlgorithmMetrics>, mode: crate::mode::Mode) -> ServerStats {
    let st = &e.state;
    let c = &st.counters;
    let m = st.measure.sample();
    let last = c.last_use_ms.load(Relaxed);
    let ((effective_weight, ramp_percent), damping) = (st.ramped_weight(), st.damping());
    ServerStats {
        address: st.key.address.clone(),
        resolved: e.addr.to_string(),
        backup,
        state: st.state(),
        state_by: st.state_by(),
        weight: st.weight(),
        weight_by: (st.agent.percent() != 100).then_some("agent"),
        agent: st.agent.view(),
        effective_weight,
        ramp_percent,
        flap_penalty: damping.penalty.round() as u32,
        suppressed: damping.suppression(),
        outlier: st.outlier.describe(),
        check_up: st.health_up(),
        passive_down: st.passive_down(),
        last_check: st.last_check(),
        last_check_ms: st.last_check_ms(),
        check_streak: st.check_streak(),
        downtime_secs: st.downtime_ms(now) / 1000,
        current: c.current.load(Relaxed),
        max: c.max.load(Relaxed),
        maxconn: e.maxconn,
        total: c.total.load(Relaxed),
        lb_total: c.lb_total.load(Relaxed),
        rate: c.rate.current(now / 1000),
        rate_max: c.rate.max(),
        connect_failures: c.connect_failures.load(Relaxed),
        redispatches: c.redispatches.load(Relaxed),
        transfer_errors: c.transfer_errors.load(Relaxed),
        data_transfers: c.data_transfers.load(Relaxed),
        bytes_in: c.bytes_in.load(Relaxed),
        bytes_out: c.bytes_out.load(Relaxed),
        last_use_secs: (last > 0).then(|| now.saturating_sub(last) / 1000),
        syn_sent: m.syn_sent,
        syn_acked: m.syn_acked,
        connect_ms: (m.syn_acked > 0).then(|| m.connect_us as f64 / m.syn_acked as f64 / 1000.0),
        ewma_connect_ms: m.ewma_us / 1000.0,
        algorithm,
        responses: (mode == crate::mode::Mode::Http).then(|| c.responses.read()),
        first_byte: (mode == crate::mode::Mode::Http).then(|| c.first_byte.read()),
        duration: (mode == crate::mode::Mode::Http).then(|| c.duration.read()),
    }
}

/// The stats table as CSV, one row per server, in the spirit of HAProxy's `;csv` export.
pub fn csv(snap: &Snapshot) -> String {
    let mut out = String::from(
        "service,server,backup,state,weight,current,max,total,lb_total,rate,rate_max,connect_failures,redispatches,transfer_errors,bytes_in,bytes_out,last_use_secs,downtime_secs,syn_sent,syn_acked,connect_ms,ewma_connect_ms,ratio,r,last_check,last_check_ms\n",
    );
    let opt = |v: Option<f64>| v.filter(|x| x.is_finite()).map(|x| format!("{x:.4}")).unwrap_or_default();
    for s in &snap.services {
        for v in &s.servers {
            let state = format!("{:?}", v.state).to_lowercase();
            let a = v.algorithm.unwrap_or_default();
            out.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3},{},{},{},{}\n",
                field(&s.name),
                field(&v.address),
                v.backup,
                state,
                v.weight,
                v.current,
                v.max,
                v.total,
                v.lb_total,
                v.rate,
                v.rate_max,
                v.connect_failures,
                v.redispatches,
                v.transfer_errors,
                v.bytes_in,
                v.bytes_out,
                v.last_use_secs.map(|x| x.to_string()).unwrap_or_default(),
                v.downtime_secs,
                v.syn_sent,
                v.syn_acked,
                opt(v.connect_ms),
                v.ewma_connect_ms,
                opt(a.ratio),
                opt(a.r),
                field(&v.last_check),
                v.last_check_ms,
            ));
        }
    }
    out
}

/// A CSV field, quoted when it holds a comma, quote or newline.
fn field(v: &str) -> String {
    if v.contains([',', '"', '\n']) { format!("\"{}\"", v.replace('"', "\"\"")) } else { v.to_string() }
}
