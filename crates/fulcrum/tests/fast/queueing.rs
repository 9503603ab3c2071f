//! The service's queue in TCP mode, in process: per-server `maxconn`, the wait for a place, and
//! `queue_timeout`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::fast::Fast;
use crate::support::*;

/// A server's `maxconn` holds in TCP mode too: connections beyond it wait in the service's
/// queue, go as soon as a place frees, and are closed when they waited `queue_timeout`.
#[test]
fn tcp_maxconn_queues_connections_and_the_queue_times_out() {
    let f = Fast::start(1, |s| service_over("round-robin", "queue_timeout = \"1500ms\"", HTTP_CHECK, &[(s[0], "maxconn = 2")]));
    f.wait_all_up();
    let server = f.servers[0].to_string();
    let held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(f.listen).unwrap()).collect();
    wait_until("both places taken", Duration::from_secs(5), || f.server_stats(&server)["current"] == 2);

    // A third connection waits; when it has waited its whole queue_timeout it is closed unserved.
    let started = Instant::now();
    let mut third = TcpStream::connect(f.listen).unwrap();
    third.write_all(b"GET /name HTTP/1.0\r\n\r\n").unwrap();
    wait_until("the third connection queued", Duration::from_secs(5), || f.stats()["services"][0]["queue"] == 1);
    let mut raw = Vec::new();
    third.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = third.read_to_end(&mut raw);
    assert!(raw.is_empty(), "a connection that timed out in the queue got {} bytes", raw.len());
    assert!(started.elapsed() >= Duration::from_millis(1400), "closed after {:?}, before its queue_timeout", started.elapsed());

    // A fourth waits too, and is served once one of the held connections ends.
    let mut fourth = TcpStream::connect(f.listen).unwrap();
    fourth.write_all(b"GET /name HTTP/1.0\r\n\r\n").unwrap();
    wait_until("the fourth connection queued", Duration::from_secs(5), || f.stats()["services"][0]["queue"] == 1);
    drop(held);
    let mut raw = Vec::new();
    fourth.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    fourth.read_to_end(&mut raw).unwrap();
    assert_eq!(parse_response(&raw).unwrap(), (200, "s1\n".to_string()));

    let service = &f.stats()["services"][0];
    assert!(service["queue_max"].as_u64().unwrap() >= 1, "{service}");
    assert_eq!(service["queue"], 0, "{service}");
    assert_eq!(f.server_stats(&server)["max"], 2, "the server never went past its maxconn");
    assert_eq!(service["refused"], 1, "the connection that timed out in the queue is counted: {service}");
}
