//! `GET /metrics`: the stats snapshot in the Prometheus text exposition format (version 0.0.4).
//! Names follow Prometheus conventions: a `fulcrum_` prefix, `_total` on counters, base units
//! (seconds, bytes), and `service` / `server` labels.

use std::fmt::Write;

use super::{ServerStats, Snapshot};
use crate::live::State;
use crate::live::http_stats::HistogramSnapshot;

/// One metric family: name, type, help, and a value per server (None: no sample).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: fn(&ServerStats) -> Option<f64>,
}

const SERVER_FAMILIES: &[Family] = &[
    Family {
        name: "fulcrum_server_up",
        kind: "gauge",
        help: "1 when the server takes traffic (enabled, checks passing, not held down)",
        value: |s| Some((s.state == State::Up) as u8 as f64),
    },
    Family { name: "fulcrum_server_weight", kind: "gauge", help: "Configured weight", value: |s| Some(s.weight as f64) },
    Family { name: "fulcrum_server_current_connections", kind: "gauge", help: "Connections in flight", value: |s| Some(s.current as f64) },
    Family { name: "fulcrum_server_max_connections", kind: "gauge", help: "Most connections in flight at once", value: |s| Some(s.max as f64) },
    Family { name: "fulcrum_server_connections_total", kind: "counter", help: "Connections handed to the server", value: |s| Some(s.total as f64) },
    Family {
        name: "fulcrum_server_selected_total",
        kind: "counter",
        help: "Times the balancer picked the server (LbTot), failed connects included",
        value: |s| Some(s.lb_total as f64),
    },
    Family { name: "fulcrum_server_redispatches_total", kind: "counter", help: "Failed connects sent on to another server", value: |s| Some(s.redispatches as f64) },
    Family { name: "fulcrum_server_transfer_errors_total", kind: "counter", help: "Connections that ended on a reset or timeout", value: |s| Some(s.transfer_errors as f64) },
    Family {
        name: "fulcrum_server_ftp_data_transfers_total",
        kind: "counter",
        help: "FTP data connections forwarded (connections_total counts control sessions)",
        value: |s| Some(s.data_transfers as f64),
    },
    Family { name: "fulcrum_server_downtime_seconds_total", kind: "counter", help: "Time spent down", value: |s| Some(s.downtime_secs as f64) },
    Family { name: "fulcrum_server_check_duration_seconds", kind: "gauge", help: "Duration of the last active health check", value: |s| Some(s.last_check_ms as f64 / 1000.0) },
    Family { name: "fulcrum_server_connect_failures_total", kind: "counter", help: "Connects that failed or timed out", value: |s| Some(s.connect_failures as f64) },
    Family { name: "fulcrum_server_received_bytes_total", kind: "counter", help: "Bytes from clients to the server", value: |s| Some(s.bytes_in as f64) },
    Family { name: "fulcrum_server_sent_bytes_total", kind: "counter", help: "Bytes from the server to clients", value: |s| Some(s.bytes_out as f64) },
    Family { name: "fulcrum_server_syn_sent_total", kind: "counter", help: "SYNs sent to the server, retransmissions included (N_S)", value: |s| Some(s.syn_sent as f64) },
    Family { name: "fulcrum_server_syn_acked_total", kind: "counter", help: "SYN-ACKs the server answered (N_A)", value: |s| Some(s.syn_acked as f64) },
    Family { name: "fulcrum_server_connect_seconds_mean", kind: "gauge", help: "Mean connect time of established connects", value: |s| s.connect_ms.map(|m| m / 1000.0) },
    Family { name: "fulcrum_server_connect_seconds_ewma", kind: "gauge", help: "Peak-EWMA connect time (p2c-ewma's latency)", value: |s| Some(s.ewma_connect_ms / 1000.0) },
    Family { name: "fulcrum_server_traffic_ratio", kind: "gauge", help: "passive-ratio: the server's share of new connections", value: |s| s.algorithm.and_then(|a| a.ratio) },
    Family { name: "fulcrum_server_syn_loss_ratio", kind: "gauge", help: "passive-ratio: R = (N_S - N_A) / N_A over the window", value: |s| s.algorithm.and_then(|a| a.r) },
];

/// Renders `snap` as Prometheus text.
pub fn render(snap: &Snapshot) -> String {
    let mut out = String::with_capacity(4096);
    // The process, under the names every Prometheus client library gives these.
    if let Some(p) = &snap.process.figures {
        for (name, kind, help, value) in [
            ("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", p.cpu_seconds_total),
            ("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", p.resident_memory_bytes as f64),
            ("process_open_fds", "gauge", "Number of open file descriptors.", p.open_fds as f64),
            ("process_max_fds", "gauge", "Maximum number of open file descriptors.", p.max_fds as f64),
            ("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", p.start_time_seconds),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
        }
    }
    service_family(&mut out, snap, "fulcrum_service_current_connections", "gauge", "Client connections in flight", |s| s.current);
    service_family(&mut out, snap, "fulcrum_service_connections_total", "counter", "Client connections accepted", |s| s.total);
    service_family(&mut out, snap, "fulcrum_service_queue", "gauge", "Clients waiting in the accept queue while the service is at maxconn", |s| s.queue);
    service_family(&mut out, snap, "fulcrum_service_redispatches_total", "counter", "Failed connects sent on to another server", |s| s.redispatches);
    service_family(&mut out, snap, "fulcrum_service_retries_total", "counter", "Requests sent again to another server on an answer or failure retry_on names", |s| s.retries);
    service_family(&mut out, snap, "fulcrum_service_retries_over_budget_total", "counter", "Retries the retry budget refused", |s| s.retries_over_budget);
    service_family(&mut out, snap, "fulcrum_service_up", "gauge", "1 when the service's listener runs", |s| s.enabled as u64);
    service_family(&mut out, snap, "fulcrum_service_refused_total", "counter", "Clients closed because no server could take them", |s| s.refused);
    service_family(&mut out, snap, "fulcrum_fast_path_sockmap_connections_total", "counter", "Connections whose bytes the kernel moved through the BPF sockmap", |s| {
        s.sockmap_connections
    });
    service_family(&mut out, snap, "fulcrum_fast_path_sockmap_active", "gauge", "Connections the kernel forwards through the BPF sockmap now", |s| s.sockmap_active);
    service_family(&mut out, snap, "fulcrum_fast_path_sockmap_promoted_total", "counter", "Adaptive connections moved into the BPF sockmap after a run of small exchanges", |s| {
        s.sockmap_promoted
    });
    service_family(&mut out, snap, "fulcrum_fast_path_sockmap_demoted_total", "counter", "Adaptive connections moved out of the BPF sockmap when they turned to bulk", |s| {
        s.sockmap_demoted
    });
    tls_families(&mut out, snap);
    http_families(&mut out, snap);
    limit_lines(&mut out, &snap.limits);
    for f in SERVER_FAMILIES {
        let _ = writeln!(out, "# HELP {} {}\n# TYPE {} {}", f.name, f.help, f.name, f.kind);
        for service in &snap.services {
            for server in &service.servers {
                if let Some(v) = (f.value)(server).filter(|v| v.is_finite()) {
                    let _ = writeln!(out, "{}{{service=\"{}\",server=\"{}\"}} {}", f.name, escape(&service.name), escape(&server.address), v);
                }
            }
        }
    }
    out
}

fn service_family(out: &mut String, snap: &Snapshot, name: &str, kind: &str, help: &str, value: fn(&super::ServiceStats) -> u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for s in &snap.services {
        let _ = writeln!(out, "{name}{{service=\"{}\"}} {}", escape(&s.name), value(s));
    }
}

/// Handshakes by version, failures by reason and certificate expiry of services with TLS.
/// HTTP mode: responses by class (per service and per server), Fulcrum's own by status, the
/// two duration histograms and each route's hits.
fn http_families(out: &mut String, snap: &Snapshot) {
    let http = || snap.services.iter().filter_map(|s| s.http.as_ref().map(|h| (s, h)));
    let _ = writeln!(out, "# HELP fulcrum_http_responses_total HTTP responses to clients, by status class\n# TYPE fulcrum_http_responses_total counter");
    for (s, h) in http() {
        for (class, n) in &h.responses {
            let _ = writeln!(out, "fulcrum_http_responses_total{{service=\"{}\",class=\"{class}\"}} {n}", escape(&s.name));
        }
    }
    let _ = writeln!(
        out,
        "# HELP fulcrum_http_own_responses_total Responses Fulcrum made itself (refusals, redirects, no server), by status\n# TYPE fulcrum_http_own_responses_total counter"
    );
    for (s, h) in http() {
        for (code, n) in &h.own {
            let _ = writeln!(out, "fulcrum_http_own_responses_total{{service=\"{}\",code=\"{code}\"}} {n}", escape(&s.name));
        }
    }
    let _ = writeln!(out, "# HELP fulcrum_http_server_responses_total A server's HTTP responses, by status class\n# TYPE fulcrum_http_server_responses_total counter");
    for s in &snap.services {
        for v in &s.servers {
            for (class, n) in super::CLASSES.iter().zip(v.responses.iter().flatten()) {
                let _ = writeln!(out, "fulcrum_http_server_responses_total{{service=\"{}\",server=\"{}\",class=\"{class}\"}} {n}", escape(&s.name), escape(&v.address));
            }
        }
    }
    for (name, help, which) in [
        ("fulcrum_http_request_duration_seconds", "From a request's arrival to the end of its response", (|h| &h.total) as fn(&super::HttpStats) -> &HistogramSnapshot),
        ("fulcrum_http_first_byte_seconds", "From a request's arrival to its server's response head", |h| &h.first_byte),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (s, h) in http() {
            histogram_lines(out, name, &format!("service=\"{}\"", escape(&s.name)), which(h));
        }
    }
    let _ = writeln!(
        out,
        "# HELP fulcrum_route_hits_total Requests a route took, by its place in the config (since the service was last rebuilt)\n# TYPE fulcrum_route_hits_total counter"
    );
    for (s, h) in http() {
        for (k, n) in h.route_hits.iter().enumerate() {
            let _ = writeln!(out, "fulcrum_route_hits_total{{service=\"{}\",route=\"{k}\"}} {n}", escape(&s.name));
        }
    }
    for (name, help, which) in [
        (
            "fulcrum_http_server_first_byte_seconds",
            "From a request's arrival to this server's response head",
            (|v| v.first_byte.as_ref()) as fn(&super::ServerStats) -> Option<&HistogramSnapshot>,
        ),
        ("fulcrum_http_server_request_duration_seconds", "From a request's arrival to the end of this server's response", |v| v.duration.as_ref()),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for s in &snap.services {
            for v in &s.servers {
                if let Some(h) = which(v) {
                    histogram_lines(out, name, &format!("service=\"{}\",server=\"{}\"", escape(&s.name), escape(&v.address)), h);
                }
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP fulcrum_http_route_responses_total Responses to the requests a route took, by status class (since the service was last rebuilt)\n# TYPE fulcrum_http_route_responses_total counter"
    );
    for (s, h) in http() {
        for (k, r) in h.routes.iter().enumerate() {
            for (class, n) in &r.responses {
                let _ = writeln!(out, "fulcrum_http_route_responses_total{{service=\"{}\",route=\"{k}\",class=\"{class}\"}} {n}", escape(&s.name));
            }
        }
    }
    let name = "fulcrum_http_route_request_duration_seconds";
    let _ = writeln!(out, "# HELP {name} From the arrival of a request a route took to the end of its response\n# TYPE {name} histogram");
    for (s, h) in http() {
        for (k, r) in h.routes.iter().enumerate() {
            let labels = format!("service=\"{}\",route=\"{k}\"", escape(&s.name));
            histogram_lines(out, name, &labels, &r.total);
        }
    }
    let _ = writeln!(
        out,
        "# HELP fulcrum_access_log_dropped_total Access log lines the syslog receiver did not get (its queue full, or refused)\n# TYPE fulcrum_access_log_dropped_total counter"
    );
    for (s, h) in http() {
        let _ = writeln!(out, "fulcrum_access_log_dropped_total{{service=\"{}\"}} {}", escape(&s.name), h.access_log_dropped);
    }
    let _ = writeln!(
        out,
        "# HELP fulcrum_tracing_spans_dropped_total Spans the OTLP receiver did not get (the exporter's queue full, or their batch refused or unanswered)\n# TYPE fulcrum_tracing_spans_dropped_total counter"
    );
    for (s, h) in http() {
        let _ = writeln!(out, "fulcrum_tracing_spans_dropped_total{{service=\"{}\"}} {}", escape(&s.name), h.tracing_spans_dropped);
    }
    let _ = writeln!(out, "# HELP fulcrum_tracing_spans_sent_total Spans the OTLP receiver took\n# TYPE fulcrum_tracing_spans_sent_total counter");
    for (s, h) in http() {
        let _ = writeln!(out, "fulcrum_tracing_spans_sent_total{{service=\"{}\"}} {}", escape(&s.name), h.tracing_spans_sent);
    }
}

/// Each per-client limit's decisions and keys.
fn limit_lines(out: &mut String, limits: &[super::limits::LimitStats]) {
    let _ = writeln!(
        out,
        "# HELP fulcrum_limit_decisions_total Requests and connections each per-client limit passed, refused (limited), delayed, or let through over it (logged, action = \"log\")\n# TYPE fulcrum_limit_decisions_total counter"
    );
    for l in limits {
        for (outcome, n) in [("passed", l.passed), ("limited", l.limited), ("delayed", l.delayed), ("logged", l.logged)] {
            let _ = writeln!(out, "fulcrum_limit_decisions_total{{table=\"{}\",service=\"{}\",outcome=\"{outcome}\"}} {n}", escape(&l.name), escape(&l.service));
        }
    }
    let _ = writeln!(out, "# HELP fulcrum_limit_keys Keys each per-client limit's table holds\n# TYPE fulcrum_limit_keys gauge");
    for l in limits {
        let _ = writeln!(out, "fulcrum_limit_keys{{table=\"{}\",service=\"{}\"}} {}", escape(&l.name), escape(&l.service), l.keys);
    }
}

/// A histogram's buckets, sum and count, each with `labels`.
fn histogram_lines(out: &mut String, name: &str, labels: &str, hist: &HistogramSnapshot) {
    for (bound, n) in crate::live::http_stats::BOUNDS.iter().zip(&hist.cumulative) {
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}\n{name}_sum{{{labels}}} {}\n{name}_count{{{labels}}} {}", hist.count, hist.sum_seconds, hist.count);
}

fn tls_families(out: &mut String, snap: &Snapshot) {
    let tls: Vec<_> = snap.services.iter().filter_map(|s| s.tls.as_ref().map(|t| (escape(&s.name), t))).collect();
    let _ = writeln!(out, "# HELP fulcrum_tls_handshakes_total TLS handshakes completed, by protocol version\n# TYPE fulcrum_tls_handshakes_total counter");
    for (name, t) in &tls {
        let _ = writeln!(out, "fulcrum_tls_handshakes_total{{service=\"{name}\",version=\"1.2\"}} {}", t.handshakes_tls12);
        let _ = writeln!(out, "fulcrum_tls_handshakes_total{{service=\"{name}\",version=\"1.3\"}} {}", t.handshakes_tls13);
    }
    let _ = writeln!(out, "# HELP fulcrum_tls_handshake_failures_total TLS handshakes that failed, by reason\n# TYPE fulcrum_tls_handshake_failures_total counter");
    for (name, t) in &tls {
        for (reason, n) in &t.failures {
            let _ = writeln!(out, "fulcrum_tls_handshake_failures_total{{service=\"{name}\",reason=\"{reason}\"}} {n}");
        }
    }
    // HTTP/3's QUIC listener (`http3`): its handshakes, its Retry packets, and its refusals.
    type Figure = fn(&super::TlsStats) -> u64;
    let quic: [(&str, &str, Figure); 3] = [
        ("fulcrum_quic_handshakes_total", "QUIC (HTTP/3) handshakes completed", |t| t.quic_handshakes),
        ("fulcrum_quic_retries_total", "QUIC Retry packets sent to make new clients prove their address", |t| t.quic_retries),
        ("fulcrum_quic_refused_total", "new QUIC connections refused (maxconn, or draining)", |t| t.quic_refused),
    ];
    for (metric, help, value) in quic {
        let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} counter");
        for (name, t) in &tls {
            let _ = writeln!(out, "{metric}{{service=\"{name}\"}} {}", value(t));
        }
    }
    let _ = writeln!(
        out,
        "# HELP fulcrum_tls_certificate_loads_total Times a service's certificates were read from their files\n# TYPE fulcrum_tls_certificate_loads_total counter\nfulcrum_tls_certificate_loads_total {}",
        snap.process.tls_loads
    );
    let _ = writeln!(
        out,
        "# HELP fulcrum_tls_certificate_expiry_timestamp_seconds When a certificate expires, Unix time\n# TYPE fulcrum_tls_certificate_expiry_timestamp_seconds gauge"
    );
    for (name, t) in &tls {
        for c in &t.certificates {
            let _ = writeln!(out, "fulcrum_tls_certificate_expiry_timestamp_seconds{{service=\"{name}\",file=\"{}\"}} {}", escape(&c.file), c.expires_unix);
        }
    }
    // The same expiry as time left, so an alert is one comparison (`< 14 * 86400`) whatever
    // serves the certificate: a file, or ACME (whose renewal keeps it well above that).
    let _ = writeln!(
        out,
        "# HELP fulcrum_tls_certificate_expiry_seconds Seconds until a certificate expires (0 once it has), by its names and source (file or acme)\n# TYPE fulcrum_tls_certificate_expiry_seconds gauge"
    );
    for (name, t) in &tls {
        for c in &t.certificates {
            let source = match c.source {
                crate::tls::Source::File => "file",
                crate::tls::Source::Acme => "acme",
            };
            let names = escape(&c.names.join(","));
            let _ = writeln!(
                out,
                "fulcrum_tls_certificate_expiry_seconds{{service=\"{name}\",names=\"{names}\",file=\"{}\",source=\"{source}\"}} {}",
                escape(&c.file),
                c.expires_in_seconds
            );
        }
    }
}

/// Label values escape backslash, double quote and newline.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
