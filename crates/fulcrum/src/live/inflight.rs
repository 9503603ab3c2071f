//! What is in flight on one server now, for the operator to look at
//! (`GET /api/services/S/servers/ADDR/inflight`): each connection (TCP, FTP) or request (HTTP)
//! with its client, since when, and for HTTP its request line and the request's bytes so far.
//!
//! Bounded: a ring of the last [`SHOWN`] taken per server, so a server with more in flight shows
//! the most recent ones (its `current` counts them all). Registering and ending take the server's
//! own short lock, never a global one, and do no I/O; the ring is made on first use, so an idle
//! server costs nothing.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// The most connections or requests a server shows at once: the newest ones.
pub const SHOWN: usize = 64;
/// The longest request line kept, in bytes; a longer one is cut and ends in `...`.
pub const MAX_REQUEST_LINE: usize = 256;

#[derive(Debug)]
struct Slot {
    id: u64,
    client: SocketAddr,
    /// `crate::clock::clock_ms` when it was taken.
    since_ms: u64,
    request: Option<Request>,
}

/// An HTTP request as the view shows it, kept as the request has it: the method, the URI and the
/// body's counter are shared, not copied, so registering a request allocates nothing; the line is
/// written out only when the view is read.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: hyper::Method,
    pub uri: hyper::Uri,
    pub version: hyper::Version,
    /// The request body's bytes from the client so far, when it has a body.
    pub body_bytes: Option<Arc<AtomicU64>>,
}

impl Request {
    /// `GET /path HTTP/1.1`, cut to [`MAX_REQUEST_LINE`].
    fn text(&self) -> String {
        cut(&format!("{} {} {:?}", self.method, self.uri, self.version))
    }
}

#[derive(Debug, Default)]
struct Ring {
    slots: Vec<Option<Slot>>,
    /// The next id; the slot an id takes is `id % SHOWN`, so the newest overwrites the oldest.
    next: u64,
}

/// One server's ring.
#[derive(Debug, Default)]
pub struct Inflight {
    ring: Mutex<Ring>,
}

/// A connection's or request's place in the ring, given back by [`Inflight::end`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(u64);

/// One entry as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct InflightEntry {
    pub client: SocketAddr,
    pub age_ms: u64,
    /// HTTP: the request line, at most [`MAX_REQUEST_LINE`] bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// HTTP with a request body: its bytes from the client so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

impl Inflight {
    /// Registers a connection from `client`, or with `request` an HTTP request, taken now.
    pub fn begin(&self, client: SocketAddr, request: Option<Request>) -> Ticket {
        let since_ms = crate::clock::clock_ms();
        let Ok(mut ring) = self.ring.lock() else { return Ticket(u64::MAX) };
        if ring.slots.is_empty() {
            ring.slots.resize_with(SHOWN, || None);
        }
        let id = ring.next;
        ring.next += 1;
        ring.slots[(id % SHOWN as u64) as usize] = Some(Slot { id, client, since_ms, request });
        Ticket(id)
    }

    /// Ends it: gone from the view (unless a newer one took its slot already).
    pub fn end(&self, ticket: Ticket) {
        let Ok(mut ring) = self.ring.lock() else { return };
        let i = (ticket.0 % SHOWN as u64) as usize;
        if ring.slots.get(i).is_some_and(|s| s.as_ref().is_some_and(|s| s.id == ticket.0)) {
            ring.slots[i] = None;
        }
    }

    /// What is in flight now, oldest first.
    pub fn read(&self) -> Vec<InflightEntry> {
        let now = crate::clock::clock_ms();
        let Ok(ring) = self.ring.lock() else { return Vec::new() };
        let mut held: Vec<(u64, InflightEntry)> = ring
            .slots
            .iter()
            .flatten()
            .map(|s| {
                let entry = InflightEntry {
                    client: s.client,
                    age_ms: now.saturating_sub(s.since_ms),
                    request: s.request.as_ref().map(Request::text),
                    bytes: s.request.as_ref().and_then(|r| r.body_bytes.as_ref()).map(|b| b.load(Relaxed)),
                };
                (s.id, entry)
            })
            .collect();
        drop(ring);
        held.sort_by_key(|(id, _)| *id);
        held.into_iter().map(|(_, e)| e).collect()
    }
}

/// `line` cut to [`MAX_REQUEST_LINE`] bytes on a character boundary, marked with `...` when cut.
fn cut(line: &str) -> String {
    if line.len() <= MAX_REQUEST_LINE {
        return line.to_string();
    }
    let mut end = MAX_REQUEST_LINE - 3;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &line[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn get(path: &'static str, body_bytes: Option<u64>) -> Option<Request> {
        let body_bytes = body_bytes.map(|n| Arc::new(AtomicU64::new(n)));
        Some(Request { method: hyper::Method::GET, uri: hyper::Uri::from_static(path), version: hyper::Version::HTTP_11, body_bytes })
    }

    #[test]
    fn an_entry_shows_until_it_ends() {
        let f = Inflight::default();
        let a = f.begin(client(1), None);
        let b = f.begin(client(2), get("/slow", Some(5)));
        let seen = f.read();
        assert_eq!(seen.iter().map(|e| e.client.port()).collect::<Vec<_>>(), [1, 2]);
        assert_eq!((seen[1].request.as_deref(), seen[1].bytes), (Some("GET /slow HTTP/1.1"), Some(5)));
        f.end(a);
        assert_eq!(f.read().len(), 1);
        f.end(b);
        assert!(f.read().is_empty());
    }

    #[test]
    fn more_than_shown_keeps_the_newest_and_an_old_ticket_ends_nothing_newer() {
        let f = Inflight::default();
        let tickets: Vec<Ticket> = (0..SHOWN as u16 + 10).map(|p| f.begin(client(p), None)).collect();
        let seen = f.read();
        assert_eq!(seen.len(), SHOWN);
        assert_eq!(seen[0].client.port(), 10, "the ten oldest gave way");
        // The first ticket's slot now holds a newer one: ending it leaves that one shown.
        f.end(tickets[0]);
        assert_eq!(f.read().len(), SHOWN);
        assert!(f.read().iter().all(|e| e.request.is_none()));
    }

    #[test]
    fn a_long_request_line_is_cut_on_a_character_boundary() {
        let long = format!("GET /{} HTTP/1.1", "é".repeat(300));
        let line = cut(&long);
        assert!(line.len() <= MAX_REQUEST_LINE && line.ends_with("..."), "{}", line.len());
        assert_eq!(cut("GET / HTTP/1.1"), "GET / HTTP/1.1");
    }
}
