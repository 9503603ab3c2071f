//! `mode = "http"`: Fulcrum reads HTTP/1.1 from clients (behind the framing guard: its own server
//! path, `front`, for plain requests without a body, hyper's for the rest and for TLS clients),
//! forwards each request to a server over an idle keep-alive connection of that server, streams bodies both
//! ways (only a request body's first 64 KiB is read before a server is contacted), adds the
//! forwarded headers, and answers with a readable error when no server can: 502 (the server
//! failed), 503 (none usable), 504 (no answer in time).
//! An `Upgrade` request (WebSocket) goes to one server, and after its 101 the bytes flow both
//! ways untouched; an upgrade to HTTP/2 (`h2c`) is taken out of the request, a 101 to a request
//! that did not ask to upgrade (or to an HTTP/2 client, which has no 101) is a 502 and the
//! server connection is closed, and a request that asked and got no 101 ends its connection.
//!
//! What Fulcrum refuses itself, before any server is contacted, and closes the connection after:
//! 400 for bad framing (the guard), an ambiguous or missing `Host`, a target `*` but for OPTIONS,
//! an HTTP/2 request that cannot go on as HTTP/1.1 (`convert`), or a request body that is
//! malformed or cut short within the read-ahead; 408 for a read-ahead not in within
//! `head_timeout`; 501 for CONNECT (Fulcrum does not tunnel) but an HTTP/2 client's WebSocket
//! (RFC 8441, `websocket`), and for an upgrade to a pool spoken to in HTTP/2. With `strict_sni_host`, a request
//! whose Host is not a name of its TLS certificate gets 421 Misdirected Request.

mod access;
pub(crate) mod affinity;
pub(crate) mod body;
pub mod compress;
pub(crate) mod convert;
mod front;
pub(crate) mod guard;
// Read by both own paths (`front` for requests, `origin` for responses); `write` (a head written
// onward from the buffer it was read into) is the fuzz target `h1_differential`'s until requests
// are forwarded without a header map.
#[allow(dead_code)]
pub(crate) mod h1;
mod h2;
pub mod h3;
pub(crate) mod headers;
mod idle;
pub(crate) mod origin;
mod park;
mod replay;
pub mod route;
pub mod rules;
mod trace_context;
pub(crate) mod upstream;
mod websocket;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hyper::body::{Body, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tracing::{debug, warn};

use crate::config::{LogField, ServerProtocol};
use crate::error::{Kind, Side};
use crate::live::Service;
use crate::shutdown::Shutdown;
use access::Record;
use body::{ClientBody, ClientFault, ProxyBody, READ_AHEAD};
pub use guard::ClientIo;
use guard::{Guarded, Verdict};
use upstream::Failure;

/// What HTTP keeps per server between requests, in the server's state
/// (`live::ServerState::kept`), so it outlives reloads and leaves with the server.
#[derive(Default)]
pub(crate) struct Kept {
    /// Idle keep-alive connections, lent one request at a time.
    pub idle: Arc<idle::IdleConns<hyper::client::conn::http1::SendRequest<ProxyBody>>>,
    /// With `protocol = "h2"`: the one connection every request shares, a clone (a stream of
    /// it) per request, with the identity of the `server_tls` it was made with (`idle::Target`).
    pub h2: std::sync::Mutex<Option<(Option<u64>, hyper::client::conn::http2::SendRequest<ProxyBody>)>>,
    /// Idle connections of the own HTTP/1.1 path (`origin`), a plain-text server's.
    pub own: Arc<idle::IdleConns<origin::Conn>>,
}

/// Serves one client connection: as many requests as it sends. hyper runs only while the client
/// is active (`park`): between bursts the connection is its socket and a few words of state.
/// A client that chose HTTP/2 by ALPN, or (with `h2c`) opens with its preface, is `h2`'s.
pub async fn serve<S: ClientIo>(mut client: S, peer: SocketAddr, service: Arc<Service>, shutdown: Shutdown) {
    let http = &service.config().http;
    // With strict_sni_host: the names every request's host must be among.
    let names = service.tls.as_ref().and_then(|t| t.strict_names(client.server_name()));
    if client.chose_h2() {
        return Box::pin(h2::serve(client, false, peer, service, names, shutdown)).await;
    }
    // With h2c, the bytes read to tell HTTP/2 from HTTP/1.1 begin the first request.
    let first = if http.h2c {
        // Boxed, as the branches below: it runs once, and a parked connection's task holds none of it.
        match Box::pin(h2::read_preface(&mut client, http.head_timeout)).await {
            h2::Opening::Preface => return Box::pin(h2::serve(client, true, peer, service, names, shutdown)).await,
            h2::Opening::Other(read) => read,
            h2::Opening::Gone(why) => return debug!(service = %service.config().name, client = %peer, "closing client: {why}"),
        }
    } else {
        bytes::BytesMut::new()
    };
    let activity = Arc::new(park::Activity::default());
    // The address the client connected to: the listen address, unless that is a wildcard.
    let local = if service.listen.ip().is_unspecified() { client.local_addr() } else { Some(service.listen) };
    // The server name of the client's TLS hello, which routes may read (`sni`).
    let sni: Option<Arc<str>> = client.server_name().map(Arc::from);
    let (mut io, verdict) = Guarded::new(client, http.max_head_size, activity.clone());
    io.read_first(&first);
    // Not held across the waits below: a parked connection's task is the size of what is.
    drop(first);
    let handler = Handler::new::<S>(&service, peer, local, names, sni, verdict, shutdown.stopping().clone());
    loop {
        // Parked: wait for the client's next bytes with no buffer. `head_timeout` counts from
        // here, and hyper gets what is left of it for the head.
        let waiting_since = crate::clock::now();
        let woke = io.buffered()
            || tokio::select! {
                r = tokio::time::timeout(http.head_timeout, std::future::poll_fn(|cx| io.socket().poll_read_ready(cx))) => matches!(r, Ok(Ok(()))),
                _ = shutdown.terminating().cancelled() => false,
            };
        if !woke {
            break;
        }
        // The time waited counts against the head's timeout; the time spent serving does not.
        let waited = crate::clock::since(waiting_since);
        // A plain connection's requests are the own path's while they can be (`front`); the
        // rest, and every TLS session's, are hyper's.
        if S::PARKS {
            let own = Box::pin(front::serve(&mut io, &handler));
            let next = tokio::select! {
                next = own => next,
                _ = shutdown.terminating().cancelled() => break,
            };
            match next {
                front::Next::Park => continue,
                front::Next::Closed => break,
                front::Next::Hyper => {}
            }
        }
        let left = http.head_timeout.saturating_sub(waited).max(Duration::from_millis(1));
        let svc = requests(handler.clone(), activity.clone());
        // The active connection, boxed and freed whole when it parks: its futures (hyper's
        // connection, the linger's timer) are no part of what a parked connection's task holds,
        // which is only what waits above.
        let active = Box::pin(async {
            let conn = Box::new(server_builder(http, left).serve_connection(TokioIo::new(io), svc.clone()).with_upgrades());
            let run = tokio::select! {
                r = park::run(conn, &activity, S::PARKS.then_some(park::LINGER.min(http.head_timeout / 4))) => r,
                _ = shutdown.terminating().cancelled() => return None,
            };
            match run {
                park::Run::Idle(conn) => {
                    let parts = conn.into_parts()?;
                    let mut io = parts.io.into_inner();
                    io.unread(parts.read_buf);
                    Some(io)
                }
                park::Run::Ended(Ok(())) => None,
                park::Run::Ended(Err(e)) => {
                    debug!(service = %service.config().name, client = %peer, "client connection ended: {e}");
                    None
                }
            }
        });
        match active.await {
            Some(parked) => io = parked,
            None => break,
        }
    }
    // A refusal inside a body was answered and logged by its request's handler.
    if let Some(why) = handler.verdict.answered_by_guard() {
        warn!(service = %service.config().name, client = %peer, "request refused with 400: {why}");
    }
}

/// The handler of a connection's requests as hyper's servers take them (HTTP/1.1 and HTTP/2):
/// each request is counted in `activity` until its answer is written (`park`).
fn requests(
    handler: Arc<Handler>,
    activity: Arc<park::Activity>,
) -> impl hyper::service::Service<Request<Incoming>, Response = Response<park::Answer>, Error = std::convert::Infallible, Future: Send + 'static> + Clone + Send + 'static {
    hyper::service::service_fn(move |req: Request<Incoming>| {
        let answer = park::InFlight::count(&activity);
        // Boxed: a request's future is several KiB (routing, rules, the server's exchange), and
        // hyper moves the future it is given by value (into HTTP/2's task per stream, into
        // HTTP/1's slot for the request in flight): a box is two words to move, and one
        // allocation per request where each move of the whole was a memcpy of its size.
        let answered = handler.call(req.map(ClientBody::Hyper));
        Box::pin(async move { Ok::<_, std::convert::Infallible>(answer.with(answered.await)) })
    })
}

/// What a connection's every request is handled with, for any protocol and either server (hyper's,
/// or the own HTTP/1.1 path's, `front`): each answer gets its error page, its place in the
/// service's counters (`finish`) and HSTS when the service sets it. Once the process stops
/// accepting (a drain, an upgrade), an HTTP/1 answer closes its connection, so the client's next
/// request opens one to whoever accepts now; an idle connection is not closed under a client
/// that may be sending on it.
pub(crate) struct Handler {
    service: Arc<Service>,
    peer: SocketAddr,
    node: headers::ClientNode,
    names: Option<Arc<[String]>>,
    verdict: Verdict,
    hsts: Option<HeaderValue>,
    alt_svc: Option<HeaderValue>,
    stopping: tokio_util::sync::CancellationToken,
    /// Requests carried over HTTP/2 in memory from a QUIC connection (`h3::bridge`): HTTP/3's.
    h3: bool,
}

impl Handler {
    #[allow(clippy::too_many_arguments)]
    fn new<S: ClientIo>(
        service: &Arc<Service>,
        peer: SocketAddr,
        local: Option<SocketAddr>,
        names: Option<Arc<[String]>>,
        sni: Option<Arc<str>>,
        verdict: Verdict,
        stopping: tokio_util::sync::CancellationToken,
    ) -> Arc<Handler> {
        let http = &service.config().http;
        let node = headers::ClientNode::with_scheme(peer.ip(), local, S::SCHEME).unless_in(&http.forwarded_except).with_sni(sni);
        // RFC 6797: Strict-Transport-Security only over a secure transport.
        let hsts = http.hsts.filter(|_| node.is_https()).and_then(|age| HeaderValue::from_str(&format!("max-age={}", age.as_secs())).ok());
        // With `http3`: HTTP/1.1 and HTTP/2 responses say where HTTP/3 is, at the port the client
        // reached (the listen port, unless a config asked for port 0).
        let alt_svc = (http.http3 && service.tls.is_some() && !S::H3)
            .then(|| local.map(|l| l.port()).filter(|p| *p != 0).unwrap_or(service.listen.port()))
            .and_then(|port| h3::alt_svc(port, http.alt_svc_max_age));
        Arc::new(Handler { service: service.clone(), peer, node, names, verdict, hsts, alt_svc, stopping, h3: S::H3 })
    }

    /// One request to its answer. The future owns what it needs: hyper's HTTP/2 runs each on a
    /// task of its own.
    fn call(self: &Arc<Self>, mut req: Request<ClientBody>) -> impl Future<Output = Response<ProxyBody>> + Send + use<> {
        let this = self.clone();
        if this.h3 {
            *req.version_mut() = hyper::Version::HTTP_3;
        }
        async move {
            let Handler { service, peer, node, names, verdict, hsts, alt_svc, stopping, .. } = &*this;
            let peer = *peer;
            let began = crate::clock::now();
            let h1 = req.version() < hyper::Version::HTTP_2;
            let mut response = handle(req, peer, node, names.as_deref(), service, verdict, began).await;
            finish(service, &mut response, began);
            if h1 && stopping.is_cancelled() {
                response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            if let Some(hsts) = hsts {
                response.headers_mut().entry(header::STRICT_TRANSPORT_SECURITY).or_insert_with(|| hsts.clone());
            }
            if let Some(alt_svc) = alt_svc {
                response.headers_mut().entry(header::ALT_SVC).or_insert_with(|| alt_svc.clone());
            }
            response
        }
    }
}

/// hyper's HTTP/1.1 server with a service's head timeout and limits (their ranges in
/// `config::range` are what hyper accepts without asserting or allocating without bound).
pub(crate) fn server_builder(http: &crate::config::Http, head_timeout: Duration) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        // A refused head looks to hyper like the end of the stream: finish what came before it.
        .half_close(true)
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .max_headers(http.max_headers)
        // hyper asserts at least 8192; validation refuses less, the floor keeps a config built
        // in code from reaching the assert.
        .max_buf_size(http.max_head_size.max(8192));
    builder
}

/// One request to its response.
///
/// Its future is each request's state, moved whole into the task of every HTTP/2 stream and
/// into hyper's slot for HTTP/1.1: a function returning an async block, since an async fn
/// keeps a second copy of its arguments (the request head among them).
#[allow(clippy::manual_async_fn)]
fn handle(
    mut req: Request<ClientBody>,
    peer: SocketAddr,
    node: &headers::ClientNode,
    names: Option<&[String]>,
    service: &Arc<Service>,
    verdict: &Verdict,
    began: std::time::Instant,
) -> impl Future<Output = Response<ProxyBody>> + Send {
    async move {
        let cfg = service.config();
        let target_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
        // Without an access log the record stays empty: no strings are built per request.
        let log = service.access.clone();
        let logging = log.is_some();
        // Request headers only when the line names them.
        let wanted = |field| logging && log.as_ref().and_then(|l| l.template.as_ref()).is_some_and(|t| t.names(field));
        let header_text = |name: header::HeaderName, field| {
            wanted(field).then(|| req.headers().get(name).map(|v| truncate(&String::from_utf8_lossy(v.as_bytes()), access::MAX_HEADER_FIELD))).flatten()
        };
        let user_agent = header_text(header::USER_AGENT, LogField::UserAgent);
        let referer = header_text(header::REFERER, LogField::Referer);
        let host = if wanted(LogField::Host) { request_host(&req).map(|h| truncate(h, access::MAX_HEADER_FIELD)) } else { None };
        let mut record = Record {
            log,
            // Without a log nothing reads the clock for it.
            started: if logging { crate::clock::wall() } else { SystemTime::UNIX_EPOCH },
            client: peer,
            service: if logging { cfg.name.clone() } else { String::new() },
            pool: String::new(),
            server: None,
            method: if logging { req.method().to_string() } else { String::new() },
            // A CONNECT's target is an authority, with no path.
            path: if logging {
                truncate(req.uri().path_and_query().map(|p| p.as_str()).or_else(|| req.uri().authority().map(|a| a.as_str())).unwrap_or(""), 512)
            } else {
                String::new()
            },
            version: match req.version() {
                hyper::Version::HTTP_10 => "HTTP/1.0",
                hyper::Version::HTTP_2 => "HTTP/2.0",
                hyper::Version::HTTP_3 => "HTTP/3.0",
                _ => "HTTP/1.1",
            },
            status: 0,
            bytes_in: Arc::new(AtomicU64::new(0)),
            bytes_out: 0,
            queue: Duration::ZERO,
            connect: Duration::ZERO,
            response: Duration::ZERO,
            why: None,
            request_id: None,
            host,
            user_agent,
            referer,
            trace: None,
        };
        // With tracing: the server's traceparent, and the span when the request is sampled.
        if let Some(tracer) = &service.tracer {
            record.trace = trace_context::begin(tracer, &mut req, peer.ip());
        }
        // An HTTP/2 WebSocket (RFC 8441) goes on as the HTTP/1.1 opening handshake, routed as
        // one; the accept value its server must answer goes with it (`websocket::Expected`).
        match websocket::connect(req.method(), req.extensions().get::<hyper::ext::Protocol>()) {
            Some(websocket::Connect::WebSocket) if req.version() == hyper::Version::HTTP_2 => websocket::to_upgrade(&mut req, websocket::nonce()),
            Some(websocket::Connect::Other(protocol)) => {
                // The guard reads nothing after the CONNECT head, so no tunnelled byte is taken for HTTP.
                let why = match protocol {
                    Some(p) => format!("CONNECT for protocol {p}: Fulcrum tunnels only WebSockets"),
                    None => "CONNECT: Fulcrum does not tunnel".to_string(),
                };
                return refuse(&cfg.name, record, StatusCode::NOT_IMPLEMENTED, why);
            }
            _ => {}
        }
        if let Some(why) = headers::host_problem(req.headers(), req.version()) {
            return refuse(&cfg.name, record, StatusCode::BAD_REQUEST, why.into());
        }
        let client_version = req.version();
        if client_version >= hyper::Version::HTTP_2 && req.uri().authority().is_none() && !req.headers().contains_key(header::HOST) {
            // RFC 9113 section 8.3.1: an HTTP/1.1 request needs a Host to be made from it.
            return refuse(&cfg.name, record, StatusCode::BAD_REQUEST, "an HTTP/2 request without :authority or Host cannot go on as HTTP/1.1".into());
        }
        if let Some(why) = convert::target_problem(req.method(), req.uri()) {
            return refuse(&cfg.name, record, StatusCode::BAD_REQUEST, why.to_string());
        }
        if client_version >= hyper::Version::HTTP_2
            && let Err(why) = convert::h2_fields_to_h1(req.headers_mut())
        {
            return refuse(&cfg.name, record, StatusCode::BAD_REQUEST, why.to_string());
        }
        if let Some(names) = names
            && let Some(host) = request_host(&req)
            && !crate::tls::covers(names, host)
        {
            let why = format!("{host} is not a name of the certificate this connection's handshake chose (strict_sni_host)");
            warn!(service = %cfg.name, client = %peer, status = 421, "request refused, the client is at fault: {why}");
            return answer(record, StatusCode::MISDIRECTED_REQUEST, why);
        }
        // ACME's http-01 validator, on a plain-HTTP service: answered before redirects and routes.
        if service.tls.is_none()
            && let Some(token) = req.uri().path().strip_prefix("/.well-known/acme-challenge/")
            && crate::tls::acme::answering()
        {
            return acme_challenge(record, token);
        }
        if cfg.http.redirect_https && !node.is_https() {
            return redirect_https(record, &req);
        }
        if target_len > cfg.http.max_uri_length {
            return answer(record, StatusCode::URI_TOO_LONG, format!("the request target is longer than {} bytes", cfg.http.max_uri_length));
        }
        // The client routes see: the connection's, or the one a trusted proxy names.
        let client = headers::effective_client(peer.ip(), req.headers(), &cfg.http.trusted_forwarders);
        // The route that takes the request, chosen before its body is read: a deny or a redirect
        // answers without reading a byte of it.
        let taken = {
            let named = named_authority(&req);
            // An HTTP/1.0 request without a Host names the address the client connected to.
            let fallback = if named.is_none() { node.host() } else { None };
            let host = named.or_else(|| fallback.as_ref().and_then(|h| h.to_str().ok())).map(route::strip_port);
            let seen = route::Seen {
                method: req.method(),
                path: req.uri().path(),
                query: req.uri().query(),
                host,
                headers: req.headers(),
                client,
                sni: node.sni(),
                version: req.version(),
            };
            route::first(&cfg.routes, &seen)
        };
        if let Some(route) = taken.and_then(|(k, _)| service.routes.get(k)) {
            route.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        // Per-client limits, before the body is read: a refused request costs no server a byte.
        let limited = crate::proxy::limits::Request::new(service, taken.map(|(k, _)| k), client, req.headers(), node.sni()).map(Arc::new);
        if let Some(l) = &limited
            && let Err(refused) = l.admit(client).await
        {
            let why = format!("over the limit of {} ({})", crate::proxy::limits::describe(&refused.limiter), refused.limiter.config.name);
            let mut response = answer(record, StatusCode::TOO_MANY_REQUESTS, why);
            crate::proxy::limits::refusal_headers(&refused, response.headers_mut());
            return leaving_unread(response, Some(req.into_body()), client_version);
        }
        // What a `bytes` limit charges as the response ends: the request body's count, shared.
        let received = limited.as_ref().filter(|l| l.counts_bytes()).map(|_| record.bytes_in.clone());
        // The request's id: the client's own when it sent a usable one, else a new one.
        let request_id = cfg.http.request_id.as_ref().and_then(|name| {
            let name = header::HeaderName::from_bytes(name.as_bytes()).ok()?;
            let id = headers::request_id(req.headers().get(&name));
            req.headers_mut().insert(name.clone(), id.clone());
            Some((name, id))
        });
        if logging {
            record.request_id = request_id.as_ref().and_then(|(_, id)| id.to_str().ok()).map(String::from);
        }
        let mut context = taken
            .filter(|(_, r)| r.redirect.is_some() || r.rewrites() || r.response_headers.is_some())
            .map(|(_, r)| context(&req, SocketAddr::new(client, peer.port()), node, request_id.as_ref().map(|(_, id)| id), r));
        // The coding the answer may take, read before the request goes (a route's `compress`
        // overrides the service's).
        let compression = match taken.and_then(|(_, r)| r.compress) {
            Some(false) => None,
            Some(true) => Some(compress::settings(cfg.http.compression.as_ref())),
            None => cfg.http.compression.as_ref(),
        };
        let negotiated = compress::negotiate(compression, req.method(), req.headers().get(header::ACCEPT_ENCODING));
        let mut response = forward(req, record, peer, node, service, verdict, taken, context.as_ref(), began).await;
        if let Some(l) = limited {
            l.answered(response.status().as_u16());
            if let (Some(received), ProxyBody::Response { timing, .. }) = (received, response.body_mut()) {
                timing.bytes = Some(Box::new(body::ByteCharge { limits: l, received, sent: 0 }));
            }
        }
        if let Some((k, _)) = taken {
            response.extensions_mut().insert(Taken(k));
        }
        if let Some(negotiated) = negotiated {
            response.extensions_mut().insert(negotiated);
        }
        if let Some((_, route)) = taken
            && let (Some(actions), Some(ctx)) = (&route.response_headers, context.as_mut())
        {
            ctx.server = response.extensions().get::<Served>().map(|s| s.0);
            rules::apply(actions, response.headers_mut(), ctx);
        }
        if let Some((name, id)) = request_id {
            response.headers_mut().insert(name, id);
        }
        response
    }
}

/// The index of the route that took a request, for its error pages.
#[derive(Debug, Clone, Copy)]
struct Taken(usize);

/// What every answer gets on its way out, Fulcrum's own refusals included: its error page, its
/// coding (when the request negotiated one), and its place in the service's counters. A
/// server's response is timed when its body is done (`body::Timing`); Fulcrum's own now.
fn finish(service: &Service, response: &mut Response<ProxyBody>, began: std::time::Instant) {
    let own = response.extensions().get::<Served>().is_none();
    if let Some(pages) = &service.pages
        && (own || service.config().http.intercept_errors)
    {
        let route = response.extensions().get::<Taken>().map(|t| t.0);
        error_page(response, pages, route);
    }
    // Compressed last, so that an error page is too.
    if let Some(negotiated) = response.extensions_mut().remove::<compress::Negotiated>() {
        compress::respond(compress::settings(service.config().http.compression.as_ref()), negotiated, response);
    }
    let counters = &service.state().http;
    let status = response.status().as_u16();
    counters.response(status, own);
    let route = response.extensions().get::<Taken>().and_then(|t| service.routes.get(t.0));
    if let Some(route) = route {
        route.classes.add(status);
    }
    if own {
        let took = crate::clock::since(began);
        counters.total.observe(took);
        if let Some(route) = route {
            route.total.observe(took);
        }
    }
}

/// Puts the error page for the response's status in place of its body: for Fulcrum's own answers,
/// and with `intercept_errors` for a server's (whose body is dropped unread, and its connection
/// with it).
fn error_page(response: &mut Response<ProxyBody>, pages: &crate::live::pages::ErrorPages, route: Option<usize>) {
    let status = response.status().as_u16();
    if status < 400 {
        return;
    }
    let Some(page) = pages.get(route, status) else { return };
    match response.body_mut() {
        ProxyBody::Text(text) | ProxyBody::Unread { text, .. } => *text = Some(page.body.clone()),
        body => *body = ProxyBody::text(page.body.clone()),
    }
    let h = response.headers_mut();
    for stale in [header::CONTENT_LENGTH, header::CONTENT_ENCODING, header::TRANSFER_ENCODING, header::ETAG, header::LAST_MODIFIED] {
        h.remove(stale);
    }
    h.insert(header::CONTENT_TYPE, page.content_type.clone());
}

/// The server that answered a response, for its route's response headers (`{server}`).
#[derive(Debug, Clone, Copy)]
struct Served(SocketAddr);

/// What the templates and redirect of `route` read of the request: only that is copied.
fn context(req: &Request<ClientBody>, peer: SocketAddr, node: &headers::ClientNode, request_id: Option<&HeaderValue>, route: &crate::config::Route) -> rules::Context {
    use crate::config::Variable;
    let uses = |var| route.uses(var);
    rules::Context {
        client: peer,
        request_id: request_id.filter(|_| uses(Variable::RequestId)).and_then(|id| id.to_str().ok()).map(String::from),
        sni: node.sni().filter(|_| uses(Variable::Sni)).map(std::sync::Arc::from),
        host: request_host(req).filter(|_| uses(Variable::Host)).map(String::from),
        authority: named_authority(req).filter(|_| route.redirect.is_some()).map(String::from),
        path: if uses(Variable::Path) { req.uri().path().to_string() } else { String::new() },
        query: req.uri().query().filter(|_| uses(Variable::Query)).map(String::from),
        matched_prefix: route::matched_prefix(&route.when, req.uri().path()).filter(|_| uses(Variable::MatchedPrefix)).map(String::from),
        scheme: node.scheme(),
        server: None,
    }
}

/// The request, once its route is known: refused or redirected by the route, or rewritten and
/// sent to the route's pool (or the service's default) with its body.
#[allow(clippy::too_many_arguments)]
async fn forward(
    mut req: Request<ClientBody>,
    mut record: Record,
    peer: SocketAddr,
    node: &headers::ClientNode,
    service: &Arc<Service>,
    verdict: &Verdict,
    taken: Option<(usize, &crate::config::Route)>,
    context: Option<&rules::Context>,
    began: std::time::Instant,
) -> Response<ProxyBody> {
    let cfg = service.config();
    let logging = record.log.is_some();
    // A sampled span reads the pool, the server and the times as the access log does.
    let traced = record.trace.is_some();
    let client_version = req.version();
    if let Some((k, route)) = taken {
        if let Some(status) = route.deny {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
            debug!(service = %cfg.name, client = %peer, status = status.as_u16(), "request denied by route {k}");
            return leaving_unread(answer(record, status, format!("denied by route {k}")), Some(req.into_body()), client_version);
        }
        if let (Some(r), Some(ctx)) = (&route.redirect, context) {
            let (status, location) = rules::redirect(r, ctx);
            let mut response = answer(record, status, format!("moved to {}", location.to_str().unwrap_or("")));
            response.headers_mut().insert(header::LOCATION, location);
            return leaving_unread(response, Some(req.into_body()), client_version);
        }
    }
    // `max_request_body` (the route's, else the service's): a Content-Length above it is
    // refused before a byte of the body is read.
    let limit = taken.and_then(|(_, r)| r.max_request_body).unwrap_or(cfg.http.max_request_body);
    if limit > 0 && headers::content_length(req.headers()).is_some_and(|n| n > limit) {
        return leaving_unread(too_large(&cfg.name, record, client_version, limit), Some(req.into_body()), client_version);
    }
    let upgrade = headers::take_h2c_upgrade(req.headers_mut());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, incoming) = req.into_parts();
    let websocket_accept = parts.extensions.remove::<websocket::Expected>().map(|e| e.0);
    // The body's front is read before any server is contacted: a short body that is malformed
    // (the guard stops it) or cut short is refused here and never reaches a server.
    let fault = ClientFault::default();
    let body = if incoming.is_end_stream() {
        ProxyBody::Empty
    } else {
        // Read no further than the first byte past the limit: that is enough to refuse.
        let ahead_bound = if limit > 0 { READ_AHEAD.min(usize::try_from(limit).unwrap_or(usize::MAX).saturating_add(1)) } else { READ_AHEAD };
        match tokio::time::timeout(cfg.http.head_timeout, body::read_ahead(incoming, ahead_bound)).await {
            Ok(Ok((ahead, rest))) => {
                let held: u64 = ahead.iter().filter_map(|f| f.data_ref()).map(|d| d.len() as u64).sum();
                if limit > 0 && held > limit {
                    return leaving_unread(too_large(&cfg.name, record, client_version, limit), rest, client_version);
                }
                ProxyBody::Request { ahead, rest, bytes: record.bytes_in.clone(), fault: fault.clone(), limit, sent: 0 }
            }
            Ok(Err(e)) => {
                let why = verdict.get().unwrap_or_else(|| format!("the request body ended early: {e}"));
                return refuse(&cfg.name, record, StatusCode::BAD_REQUEST, why);
            }
            Err(_) => {
                let why = format!("the request body's first {} KiB did not arrive within head_timeout ({})", READ_AHEAD / 1024, humantime::format_duration(cfg.http.head_timeout));
                return refuse(&cfg.name, record, StatusCode::REQUEST_TIMEOUT, why);
            }
        }
    };
    // gRPC needs `te: trailers` on HTTP/2 (the only TE value HTTP/2 allows); kept for h2 pools.
    let te_trailers = parts.headers.get_all(header::TE).iter().any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("trailers"))));
    let grpc = parts.headers.get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    headers::strip_hop_by_hop(&mut parts.headers, upgrade);
    headers::add_forwarded(&mut parts.headers, node, &cfg.http.forwarded_headers);
    origin_form(&mut parts);
    // Servers are always spoken to in HTTP/1.1, so an HTTP/1.0 client does not cost a server
    // connection per request; hyper answers the client in its own version. An HTTP/1.1
    // request carries a Host: one from an HTTP/1.0 client without it names the address it
    // connected to.
    parts.version = hyper::Version::HTTP_11;
    if !parts.headers.contains_key(header::HOST)
        && let Some(host) = node.host()
    {
        parts.headers.insert(header::HOST, host);
    }
    if let (Some((k, route)), Some(ctx)) = (taken, context) {
        if let Some(actions) = &route.request_headers {
            rules::apply(actions, &mut parts.headers, ctx);
        }
        match rules::rewrite_target(route, k, &parts.uri) {
            Ok(Some(uri)) => parts.uri = uri,
            Ok(None) => {}
            Err(e) => {
                warn!(service = %cfg.name, client = %peer, status = 500, "{e}");
                return answer(record, StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
            }
        }
    }
    let (target, pool) = service.pool_for(taken.and_then(|(_, r)| r.pool.as_deref()));
    if logging || traced {
        record.pool = pool.to_string();
    }
    if target.config.protocol == ServerProtocol::H2 {
        if upgrade {
            // An upgrade is HTTP/1.1's; these servers are spoken to in HTTP/2.
            let why = format!("an upgrade (WebSocket) cannot go to pool {pool}, whose servers are spoken to in HTTP/2");
            warn!(service = %cfg.name, client = %peer, status = 501, "{why}");
            return answer(record, StatusCode::NOT_IMPLEMENTED, why);
        }
        to_h2(&mut parts, te_trailers);
    }
    let idempotent = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE);
    let req = Request::from_parts(parts, body);
    let steer = affinity::steer(&target.config, req.uri(), req.headers());
    match upstream::send(target, peer, req, steer.steer(), idempotent, upgrade).await {
        Ok(mut a) => {
            let switching = a.response.status() == StatusCode::SWITCHING_PROTOCOLS;
            let unfit = match (&websocket_accept, switching) {
                (_, false) => None,
                _ if client_upgrade.is_none() => Some("the server switched protocols (101) for a request that did not ask to upgrade"),
                (Some(expected), true) => (!websocket::answers(a.response.headers(), expected)).then_some(websocket::WRONG_ACCEPT),
                (None, true) => (client_version != hyper::Version::HTTP_11).then_some("the server switched protocols (101) for an HTTP/2 client, which has no 101"),
            };
            if let Some(why) = unfit {
                // Dropped whole: the server connection, past its 101, is closed, never reused.
                let server = a.place.entry().addr;
                drop(a);
                warn!(service = %cfg.name, client = %peer, %server, status = 502, "{why}");
                record.server = Some(server);
                return answer(record, StatusCode::BAD_GATEWAY, why.into());
            }
            if let (Some(client_side), true) = (client_upgrade, switching) {
                tunnel(client_side, hyper::upgrade::on(&mut a.response), cfg.name.clone(), peer);
            }
            let entry = a.place.entry().clone();
            record.server = Some(entry.addr);
            record.connect = a.connect;
            record.queue = a.place.queued();
            if (logging && cfg.http.access_log_why) || traced {
                record.why = Some(a.place.why().describe(target.config.algorithm));
            }
            record.response = a.response_time;
            let (mut rparts, rbody) = a.response.into_parts();
            headers::strip_hop_by_hop(&mut rparts.headers, switching);
            if switching && websocket_accept.is_some() {
                websocket::to_h2_answer(&mut rparts.status, &mut rparts.headers);
            }
            record.status = rparts.status.as_u16();
            if upgrade && !switching && client_version < hyper::Version::HTTP_2 {
                // The guard let the rest of this connection pass unread, ready for the
                // upgrade that did not come: nothing more is read from it as HTTP.
                rparts.headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            affinity::stamp(&target.config, &steer, &entry.id, &mut rparts.headers);
            debug!(service = %cfg.name, client = %peer, server = %entry.addr, status = record.status, response = ?record.response, "request forwarded");
            rparts.extensions.insert(Served(entry.addr));
            entry.state.counters.responses.add(record.status);
            crate::live::outlier::observe(target, &entry, crate::live::outlier::Outcome::Answered(record.status));
            let state = service.state();
            let first_byte = crate::clock::since(began);
            state.http.first_byte.observe(first_byte);
            entry.state.counters.first_byte.observe(first_byte);
            let route = taken.and_then(|(k, _)| service.routes.get(k)).cloned();
            let timing = body::Timing { began, state: state.clone(), route, server: Some(entry.state.clone()), bytes: None };
            let body = ProxyBody::Response { body: rbody, lent: a.lent, record: (logging || traced).then(|| Box::new(record)), place: Some(a.place), fault, timing };
            Response::from_parts(rparts, body)
        }
        Err(f) => {
            let local = matches!(&f, Failure::Connect(e) if e.side == Side::Local);
            // A server that took the request and gave no answer (a failed connect was counted as
            // it failed).
            let unanswered = match &f {
                Failure::Timeout(s) => Some((*s, "timeout")),
                Failure::Broken(s, _) => Some((*s, "reset")),
                _ => None,
            };
            if let Some((addr, what)) = unanswered
                && let Some(entry) = target.servers().find(|e| e.addr == addr)
            {
                crate::live::outlier::observe(target, entry, crate::live::outlier::Outcome::Gateway(what));
            }
            let (status, why, server) = match f {
                Failure::Connect(e) if e.kind == Kind::NoServer => (StatusCode::SERVICE_UNAVAILABLE, "no server is available".to_string(), None),
                // This host ran out of something (descriptors, ports): no server is to blame.
                Failure::Connect(e) if e.side == Side::Local => (StatusCode::SERVICE_UNAVAILABLE, e.to_string(), None),
                Failure::Connect(e) => (StatusCode::BAD_GATEWAY, format!("cannot connect to a server: {e}"), e.server),
                Failure::Queue(t) => (StatusCode::SERVICE_UNAVAILABLE, format!("every server stayed at its maxconn for {} (queue timeout)", humantime::format_duration(t)), None),
                Failure::Timeout(s) => {
                    (StatusCode::GATEWAY_TIMEOUT, format!("the server did not answer within {}", humantime::format_duration(cfg.http.response_timeout)), Some(s))
                }
                Failure::Broken(s, e) => (StatusCode::BAD_GATEWAY, format!("the server broke the connection: {e}"), Some(s)),
                // The client's fault: nothing is held against the server it was going to.
                Failure::Client(status, why) => {
                    let answer = refuse(&cfg.name, record, status, verdict.get().unwrap_or(why));
                    return leaving_unread(answer, fault.take_unread(), client_version);
                }
            };
            if !local {
                warn!(service = %cfg.name, client = %peer, server = ?server, status = status.as_u16(), "{why}");
            } else if let Some(held) = LOCAL_ERRORS.ready() {
                // One cause behind a flood of requests: said once a second.
                warn!(service = %cfg.name, client = %peer, held, status = status.as_u16(), "{why}");
            }
            record.server = server;
            if grpc {
                return grpc_answer(record, status, why);
            }
            answer(record, status, why)
        }
    }
}

static LOCAL_ERRORS: crate::error::Throttle = crate::error::Throttle::new();

/// After a 101, the client's and the server's connections are joined and bytes flow both ways.
fn tunnel(client: hyper::upgrade::OnUpgrade, server: hyper::upgrade::OnUpgrade, service: String, peer: SocketAddr) {
    tokio::spawn(async move {
        let (c, s) = match tokio::try_join!(client, server) {
            Ok(pair) => pair,
            Err(e) => return debug!(%service, client = %peer, "upgrade failed: {e}"),
        };
        let (mut c, mut s) = (TokioIo::new(c), TokioIo::new(s));
        match tokio::io::copy_bidirectional(&mut c, &mut s).await {
            Ok((up, down)) => debug!(%service, client = %peer, up, down, "upgraded connection closed"),
            Err(e) => debug!(%service, client = %peer, "upgraded connection ended: {e}"),
        }
    });
}

/// `response` to a request whose `body` (or its rest) is left unread. Over HTTP/2 the body is held
/// until the response has gone out, then drained (`body::Unread`); over HTTP/1 it goes at once,
/// and hyper reads the rest or closes the connection.
fn leaving_unread(mut response: Response<ProxyBody>, body: Option<ClientBody>, version: hyper::Version) -> Response<ProxyBody> {
    if version >= hyper::Version::HTTP_2
        && let Some(body) = body.filter(|b| !b.is_end_stream())
        && let ProxyBody::Text(text) = response.body_mut()
    {
        let text = text.take();
        *response.body_mut() = ProxyBody::Unread { text, _body: body::Unread::new(body) };
    }
    response
}

/// 413 for a body over `max_request_body`. Over HTTP/1.x the connection closes after it: the rest
/// of the body is not read, so nothing after it could be read as a request.
fn too_large(service: &str, record: Record, version: hyper::Version, limit: u64) -> Response<ProxyBody> {
    let mut response = refuse(service, record, StatusCode::PAYLOAD_TOO_LARGE, body::too_large(limit));
    if version < hyper::Version::HTTP_2 {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A request Fulcrum refuses itself, the client being at fault: logged as such, answered, and
/// the connection closed after the answer.
fn refuse(service: &str, record: Record, status: StatusCode, why: String) -> Response<ProxyBody> {
    warn!(service = %service, client = %record.client, status = status.as_u16(), "request refused, the client is at fault: {why}");
    answer(record, status, why)
}

/// An answer of Fulcrum's own: a status and a short text saying why.
fn answer(mut record: Record, status: StatusCode, why: String) -> Response<ProxyBody> {
    record.status = status.as_u16();
    let text = format!("{} {}: {why}\n", status.as_u16(), status.canonical_reason().unwrap_or(""));
    record.bytes_out = text.len() as u64;
    drop(record);
    let mut r = Response::new(ProxyBody::text(Bytes::from(text)));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    // After these the rest of the connection cannot be trusted or read as HTTP.
    if matches!(status, StatusCode::BAD_REQUEST | StatusCode::REQUEST_TIMEOUT | StatusCode::NOT_IMPLEMENTED) {
        r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// A gRPC client's answer when no server answered: HTTP 200 with the gRPC status in the headers
/// (a trailers-only response), so the client library reports it: 14 UNAVAILABLE for what HTTP
/// calls 502 and 503, 4 DEADLINE_EXCEEDED for 504.
fn grpc_answer(mut record: Record, status: StatusCode, why: String) -> Response<ProxyBody> {
    let code = match status {
        StatusCode::GATEWAY_TIMEOUT => "4",
        StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE => "14",
        _ => "13",
    };
    record.status = StatusCode::OK.as_u16();
    drop(record);
    let mut r = Response::new(ProxyBody::Empty);
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert("grpc-status", HeaderValue::from_static(code));
    // grpc-message is percent-encoded: keep the printable ASCII that needs no encoding.
    let message: String = format!("Fulcrum: {why}").chars().filter(|c| c.is_ascii_graphic() && *c != '%' || *c == ' ').collect();
    if let Ok(v) = HeaderValue::from_str(&message) {
        h.insert("grpc-message", v);
    }
    r
}

/// A request for an HTTP/2 server: version 2 and an absolute target whose authority is the
/// Host (HTTP/2 carries it as `:authority`), and `te: trailers` when the client sent it.
fn to_h2(parts: &mut hyper::http::request::Parts, te_trailers: bool) {
    parts.version = hyper::Version::HTTP_2;
    let host = parts.headers.remove(header::HOST);
    let authority = host.as_ref().and_then(|h| h.to_str().ok()).filter(|h| !h.is_empty()).unwrap_or("localhost");
    let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    if let Ok(uri) = format!("http://{authority}{pq}").parse() {
        parts.uri = uri;
    }
    if te_trailers {
        parts.headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// The key authorization of a pending http-01 challenge (RFC 8555 section 8.3), or 404.
fn acme_challenge(mut record: Record, token: &str) -> Response<ProxyBody> {
    let Some(key_authorization) = crate::tls::acme::http01(token) else {
        return answer(record, StatusCode::NOT_FOUND, "no ACME challenge pending for this token".into());
    };
    record.status = StatusCode::OK.as_u16();
    record.bytes_out = key_authorization.len() as u64;
    drop(record);
    let mut r = Response::new(ProxyBody::text(Bytes::from(key_authorization)));
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    r
}

/// A 308 to the request's URL over https (the port of https, 443): a plain-HTTP service with
/// `redirect_https`. 308 keeps the method and body, unlike 301.
fn redirect_https(record: Record, req: &Request<ClientBody>) -> Response<ProxyBody> {
    // The host was checked (host_problem): one Host, or the target's authority.
    let host = request_host(req);
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let location = host.and_then(|h| HeaderValue::from_str(&format!("https://{h}{target}")).ok());
    let Some(location) = location else {
        return answer(record, StatusCode::BAD_REQUEST, "no host to redirect to".into());
    };
    let mut r = answer(record, StatusCode::PERMANENT_REDIRECT, format!("moved to {}", location.to_str().unwrap_or("")));
    r.headers_mut().insert(header::LOCATION, location);
    r
}

/// The host a request names, with its port if any: its target's authority, or its Host
/// (RFC 9112 section 3.2.2: the target wins).
fn named_authority(req: &Request<ClientBody>) -> Option<&str> {
    req.uri().authority().map(|a| a.as_str()).or_else(|| req.headers().get(header::HOST).and_then(|h| h.to_str().ok()))
}

/// The host a request names, without its port: its target's authority, or its Host.
fn request_host(req: &Request<ClientBody>) -> Option<&str> {
    req.uri().host().or_else(|| req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).map(without_port)).filter(|h| !h.is_empty())
}

/// A Host value without its port: `a.test:8080` is `a.test`, `[::1]:8080` is `[::1]`.
fn without_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(i) if !host[i..].contains(']') && (host.starts_with('[') || !host[..i].contains(':')) => &host[..i],
        _ => host,
    }
}

/// Servers get origin-form targets (`/path?q`); an absolute-form target's authority replaces
/// Host (RFC 9112 section 3.2.2: the target wins), without any userinfo.
fn origin_form(parts: &mut hyper::http::request::Parts) {
    if parts.uri.scheme().is_none() {
        return;
    }
    if let Some(authority) = parts.uri.authority() {
        let host = match authority.port() {
            Some(port) => format!("{}:{port}", authority.host()),
            None => authority.host().to_string(),
        };
        match HeaderValue::from_str(&host) {
            Ok(v) => {
                parts.headers.insert(header::HOST, v);
            }
            // Unreachable for a parsed authority; never forward a Host the route did not see.
            Err(_) => {
                parts.headers.remove(header::HOST);
            }
        }
    }
    let pq = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    if let Ok(uri) = pq.parse() {
        parts.uri = uri;
    }
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod tests {
    #[test]
    fn a_host_loses_its_port_but_an_ipv6_literal_keeps_its_brackets() {
        for (host, name) in [("a.test:8080", "a.test"), ("a.test", "a.test"), ("[::1]:8080", "[::1]"), ("[::1]", "[::1]"), ("127.0.0.1:80", "127.0.0.1")] {
            assert_eq!(super::without_port(host), name, "{host}");
        }
    }
}
