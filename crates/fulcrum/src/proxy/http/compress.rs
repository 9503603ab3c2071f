//! Response compression (`[service.http.compression]`, a route's `compress`): which coding a
//! client's `Accept-Encoding` takes, whether a response may be compressed at all, and the body
//! that compresses it frame by frame on its way out.
//!
//! Streaming, never whole: each frame from the server is compressed as it arrives and what the
//! encoder gives is sent at once; when the server pauses (its next frame is not ready), the
//! encoder is flushed, so a slow or streamed response (server-sent events, a long report) reaches
//! the client as it is made rather than when the encoder's block fills. Memory per response is
//! the encoder's state, fixed by its level and window (below), and the compressed copy of one
//! frame.
//!
//! Levels are those made for compressing on the fly, their tables sized so that one response's
//! encoder holds about a megabyte at most (`bench/compression` measures it): gzip level 5
//! (about 330 KiB), brotli quality 3 with a 64 KiB window (about 0.9 MiB), zstd level 3 with a
//! 256 KiB window and smaller hash and chain tables than its default (about 1.2 MiB; its own
//! default at level 3 is a 2 MiB window). Faster levels lose little ratio on pages and JSON;
//! higher ones cost several times the CPU (brotli 5 is 2.5 times brotli 3 per MB).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use compression_codecs::EncodeV2;
use compression_codecs::core::Level;
use compression_codecs::core::util::{PartialBuffer, WriteBuffer};
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Response, StatusCode};

use super::body::{BodyError, ProxyBody};
use crate::config::{Coding, Compression};

/// zstd's window, as a power of two: 256 KiB, which holds a typical page whole.
const ZSTD_WINDOW_LOG: u32 = 18;
/// brotli's window: 64 KiB. A larger one costs brotli's tables more than it gains on pages.
const BROTLI_WINDOW_LOG: i32 = 16;
/// The encoder writes into this much at a time.
const CHUNK: usize = 16 * 1024;

/// What a request asked of its response's coding, carried to `finish` in the response's
/// extensions: the coding the client takes (none: the client takes none of those offered, but
/// the response still varies by `Accept-Encoding`).
#[derive(Debug, Clone, Copy)]
pub struct Negotiated(pub Option<Coding>);

/// The service's compression settings, or the defaults for a route that sets `compress = true`
/// in a service that has none.
pub fn settings(service: Option<&Compression>) -> &Compression {
    static DEFAULT: std::sync::LazyLock<Compression> = std::sync::LazyLock::new(Compression::default);
    service.unwrap_or(&DEFAULT)
}

/// The coding to answer a request with, if its route and service compress: `None` when they do
/// not, or the request is a HEAD (its answer has no body to compress, and its headers must be
/// a GET's).
pub fn negotiate(settings: Option<&Compression>, method: &Method, accept: Option<&HeaderValue>) -> Option<Negotiated> {
    let settings = settings?;
    if method == Method::HEAD {
        return None;
    }
    Some(Negotiated(accept.and_then(|a| a.to_str().ok()).and_then(|a| choose(&settings.algorithms, a))))
}

/// The coding among `offered` that `accept` (an `Accept-Encoding` value) weighs most, `offered`'s
/// order breaking ties (RFC 9110 section 12.5.3): a coding named with `q=0`, or not named when
/// there is no `*`, is refused.
pub fn choose(offered: &[Coding], accept: &str) -> Option<Coding> {
    let mut best: Option<(Coding, u16)> = None;
    for &coding in offered {
        let mut named = None;
        let mut any = None;
        for item in accept.split(',') {
            let mut parts = item.split(';');
            let token = parts.next().unwrap_or("").trim();
            let q = parts.find_map(|p| p.trim().strip_prefix("q=").or_else(|| p.trim().strip_prefix("Q="))).map_or(Some(1000), qvalue);
            let Some(q) = q else { continue };
            if token.eq_ignore_ascii_case(coding.token()) || (coding == Coding::Gzip && token.eq_ignore_ascii_case("x-gzip")) {
                named = Some(named.map_or(q, |n: u16| n.max(q)));
            } else if token == "*" {
                any = Some(q);
            }
        }
        let q = named.or(any).unwrap_or(0);
        if q > 0 && best.is_none_or(|(_, b)| q > b) {
            best = Some((coding, q));
        }
    }
    best.map(|(c, _)| c)
}

/// A q-value (RFC 9110 section 12.4.2) in thousandths; `None` for one that is not.
fn qvalue(text: &str) -> Option<u16> {
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths = fraction.bytes().chain(std::iter::repeat(b'0')).take(3).fold(0u16, |n, d| n * 10 + u16::from(d - b'0'));
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Compresses `response` with the coding the request negotiated, when the response may be
/// compressed: it has a body of a listed type, at least `min_size` long when its length is
/// known, no coding yet, is no range, and does not forbid it (`Cache-Control: no-transform`).
/// Such a response gets `Vary: Accept-Encoding` whether or not this client takes a coding, so
/// a cache keeps the two apart.
pub fn respond(settings: &Compression, negotiated: Negotiated, response: &mut Response<ProxyBody>) {
    if !compressible(settings, response) {
        return;
    }
    vary(response.headers_mut());
    let Some(coding) = negotiated.0 else { return };
    let headers = response.headers_mut();
    headers.remove(header::CONTENT_LENGTH);
    headers.remove(header::ACCEPT_RANGES);
    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static(coding.token()));
    // RFC 9110 section 8.8.3: a strong validator names these exact bytes, which the coding
    // changed; the weak one still says the content is the same.
    if let Some(tag) = headers.get(header::ETAG).filter(|t| !t.as_bytes().starts_with(b"W/"))
        && let Ok(weak) = HeaderValue::from_bytes(&[b"W/", tag.as_bytes()].concat())
    {
        headers.insert(header::ETAG, weak);
    }
    let body = std::mem::replace(response.body_mut(), ProxyBody::Empty);
    *response.body_mut() = ProxyBody::Compressed(Box::new(Compressing::new(body, coding)));
}

fn compressible(settings: &Compression, response: &Response<ProxyBody>) -> bool {
    let status = response.status();
    if status.is_informational() || matches!(status, StatusCode::NO_CONTENT | StatusCode::PARTIAL_CONTENT | StatusCode::NOT_MODIFIED) {
        return false;
    }
    let headers = response.headers();
    let coded = headers.get(header::CONTENT_ENCODING).is_some_and(|c| !c.as_bytes().eq_ignore_ascii_case(b"identity"));
    let no_transform =
        headers.get_all(header::CACHE_CONTROL).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(|d| d.trim().eq_ignore_ascii_case("no-transform"));
    if coded || no_transform || headers.contains_key(header::CONTENT_RANGE) {
        return false;
    }
    let size = response.body().size_hint().exact().or_else(|| headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok());
    if size.is_some_and(|n| n == 0 || n < settings.min_size) {
        return false;
    }
    headers.get(header::CONTENT_TYPE).and_then(|t| t.to_str().ok()).is_some_and(|t| listed(&settings.types, t))
}

/// Whether a `Content-Type` is one of `types` (`text/html`, or `text/*` for the whole type),
/// its parameters aside and case aside.
pub fn listed(types: &[String], content_type: &str) -> bool {
    let media = content_type.split(';').next().unwrap_or("").trim();
    types.iter().any(|t| match t.strip_suffix("/*") {
        Some(main) => media.split_once('/').is_some_and(|(m, _)| m.eq_ignore_ascii_case(main)),
        None => media.eq_ignore_ascii_case(t),
    })
}

/// Adds `Accept-Encoding` to the response's `Vary`, unless it is there already (or `*`).
fn vary(headers: &mut HeaderMap) {
    let present = headers
        .get_all(header::VARY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|f| f.trim() == "*" || f.trim().eq_ignore_ascii_case("accept-encoding"));
    if !present {
        headers.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
}

/// A response body on its way out, compressed.
pub struct Compressing {
    inner: ProxyBody,
    encoder: Encoder,
    /// Input given to the encoder since it was last flushed.
    unflushed: bool,
    state: State,
}

enum State {
    Reading,
    /// The server's body ended (with these trailers, if any): the encoder's last bytes go out.
    Finishing(Option<HeaderMap>),
    Trailers(Option<HeaderMap>),
    Done,
}

impl Compressing {
    pub fn new(inner: ProxyBody, coding: Coding) -> Compressing {
        Compressing { inner, encoder: Encoder::new(coding), unflushed: false, state: State::Reading }
    }
}

/// One response's encoder at Fulcrum's level and window for its coding, and the buffer it writes
/// into (public for `benches/compression.rs`, which measures exactly this).
pub struct Encoder {
    codec: Box<dyn EncodeV2 + Send + Sync>,
    out: Box<[u8]>,
}

#[derive(Clone, Copy)]
enum Step {
    Encode,
    Flush,
    Finish,
}

impl Encoder {
    pub fn new(coding: Coding) -> Encoder {
        use compression_codecs::{BrotliEncoder, GzipEncoder, ZstdEncoder, brotli, zstd};
        let codec: Box<dyn EncodeV2 + Send + Sync> = match coding {
            Coding::Gzip => Box::new(GzipEncoder::new(Level::Precise(5).into())),
            Coding::Br => Box::new(BrotliEncoder::new(brotli::params::EncoderParams::default().quality(Level::Precise(3)).window_size(BROTLI_WINDOW_LOG))),
            Coding::Zstd => {
                use zstd::params::CParameter;
                let params = [CParameter::window_log(ZSTD_WINDOW_LOG), CParameter::hash_log(15), CParameter::chain_log(14)];
                Box::new(ZstdEncoder::new_with_params(3, &params))
            }
        };
        Encoder { codec, out: vec![0; CHUNK].into_boxed_slice() }
    }

    /// Compresses `input`: what the encoder gives for it now (it may hold some back).
    pub fn encode(&mut self, input: &[u8]) -> std::io::Result<Bytes> {
        self.run(input, Step::Encode)
    }

    /// All the encoder holds, so the client can read what was given so far.
    pub fn flush(&mut self) -> std::io::Result<Bytes> {
        self.run(&[], Step::Flush)
    }

    /// The last of the stream, its trailer (gzip's checksum) included.
    pub fn finish(&mut self) -> std::io::Result<Bytes> {
        self.run(&[], Step::Finish)
    }

    /// Runs the codec over `input` (or flushes or finishes it), gathering all it writes.
    fn run(&mut self, input: &[u8], step: Step) -> std::io::Result<Bytes> {
        let mut gathered = BytesMut::new();
        let mut input = PartialBuffer::new(input);
        loop {
            let mut out = WriteBuffer::new_initialized(&mut self.out);
            let done = match step {
                Step::Encode => {
                    self.codec.encode(&mut input, &mut out)?;
                    input.unwritten().is_empty()
                }
                Step::Flush => self.codec.flush(&mut out)?,
                Step::Finish => self.codec.finish(&mut out)?,
            };
            let full = out.has_no_spare_space();
            gathered.extend_from_slice(out.written());
            // The codec may hold more than one buffer's worth: call it again while it filled one.
            if done && !full {
                return Ok(gathered.freeze());
            }
        }
    }
}

impl Body for Compressing {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                State::Reading => match Pin::new(&mut this.inner).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                        Ok(data) => {
                            this.unflushed = true;
                            let out = this.encoder.encode(&data).map_err(BodyError::Encoding)?;
                            if !out.is_empty() {
                                return Poll::Ready(Some(Ok(Frame::data(out))));
                            }
                        }
                        Err(frame) => this.state = State::Finishing(frame.into_trailers().ok()),
                    },
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                    Poll::Ready(None) => this.state = State::Finishing(None),
                    Poll::Pending => {
                        // The server paused: what the encoder holds goes out now.
                        if std::mem::take(&mut this.unflushed) {
                            let out = this.encoder.flush().map_err(BodyError::Encoding)?;
                            if !out.is_empty() {
                                return Poll::Ready(Some(Ok(Frame::data(out))));
                            }
                        }
                        return Poll::Pending;
                    }
                },
                State::Finishing(trailers) => {
                    let trailers = trailers.take();
                    this.state = State::Trailers(trailers);
                    let out = this.encoder.finish().map_err(BodyError::Encoding)?;
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
                State::Trailers(trailers) => {
                    let trailers = trailers.take();
                    this.state = State::Done;
                    if let Some(t) = trailers {
                        return Poll::Ready(Some(Ok(Frame::trailers(t))));
                    }
                }
                State::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn the_client_weighs_and_the_service_breaks_ties() {
        let all = [Coding::Zstd, Coding::Br, Coding::Gzip];
        assert_eq!(choose(&all, "gzip, deflate, br, zstd"), Some(Coding::Zstd));
        assert_eq!(choose(&all, "gzip;q=1, br;q=0.9"), Some(Coding::Gzip));
        assert_eq!(choose(&all, "br;q=0.5, gzip;q=0.8, zstd;q=0"), Some(Coding::Gzip));
        assert_eq!(choose(&all, "*;q=0.1, zstd;q=0"), Some(Coding::Br));
        assert_eq!(choose(&all, "x-gzip"), Some(Coding::Gzip));
        assert_eq!(choose(&all, "identity"), None);
        assert_eq!(choose(&all, "gzip;q=0"), None);
        assert_eq!(choose(&all, ""), None);
        // A q-value that is not one (RFC 9110's grammar) makes its item void, not a panic.
        assert_eq!(choose(&all, "br;q=2, gzip;q=0.5x, zstd;q=1.000"), Some(Coding::Zstd));
        assert_eq!(choose(&[Coding::Gzip], "br, zstd"), None);
    }

    #[test]
    fn types_match_without_parameters_and_by_whole_type() {
        let types = ["text/*".to_string(), "application/json".to_string()];
        assert!(listed(&types, "text/html; charset=utf-8"));
        assert!(listed(&types, "Application/JSON"));
        assert!(!listed(&types, "application/jsonx"));
        assert!(!listed(&types, "image/png"));
        assert!(!listed(&types, "text"));
    }

    fn response(body: &'static str, headers: &[(&'static str, &'static str)]) -> Response<ProxyBody> {
        let mut r = Response::new(ProxyBody::text(body));
        for (k, v) in headers {
            r.headers_mut().append(*k, HeaderValue::from_static(v));
        }
        r
    }

    async fn collect(r: Response<ProxyBody>) -> Vec<u8> {
        r.into_body().collect().await.unwrap().to_bytes().to_vec()
    }

    #[tokio::test]
    async fn each_coding_round_trips_and_what_may_not_be_compressed_is_not() {
        let page = "<p>fulcrum</p>".repeat(200);
        let text: &'static str = Box::leak(page.clone().into_boxed_str());
        for coding in [Coding::Gzip, Coding::Br, Coding::Zstd] {
            let mut r = response(text, &[("content-type", "text/html"), ("etag", "\"v1\"")]);
            respond(&Compression::default(), Negotiated(Some(coding)), &mut r);
            assert_eq!(r.headers()["content-encoding"], coding.token());
            assert_eq!(r.headers()["vary"], "Accept-Encoding");
            assert_eq!(r.headers()["etag"], "W/\"v1\"");
            let packed = collect(r).await;
            assert!(packed.len() < page.len() / 4, "{coding:?}: {} bytes", packed.len());
            assert_eq!(unpack(coding, &packed), page.as_bytes());
        }
        let cases: [(&str, &[(&str, &str)]); 5] = [
            ("an image", &[("content-type", "image/png")]),
            ("encoded already", &[("content-type", "text/html"), ("content-encoding", "gzip")]),
            ("no-transform", &[("content-type", "text/html"), ("cache-control", "public, no-transform")]),
            ("a range", &[("content-type", "text/html"), ("content-range", "bytes 0-9/100")]),
            ("no type", &[]),
        ];
        for (what, headers) in cases {
            let mut r = response(text, headers);
            respond(&Compression::default(), Negotiated(Some(Coding::Gzip)), &mut r);
            let before = headers.iter().find(|(k, _)| *k == "content-encoding").map(|(_, v)| *v);
            assert_eq!(r.headers().get("content-encoding").map(|v| v.to_str().unwrap()), before, "{what}");
            assert_eq!(collect(r).await, page.as_bytes(), "{what}");
        }
        // Below min_size: as it is, and no Vary either.
        let mut r = response("short", &[("content-type", "text/html")]);
        respond(&Compression::default(), Negotiated(Some(Coding::Gzip)), &mut r);
        assert!(r.headers().get("content-encoding").is_none() && r.headers().get("vary").is_none());
        // A client that takes no coding gets the page as it is, with Vary.
        let mut r = response(text, &[("content-type", "text/html"), ("vary", "Origin")]);
        respond(&Compression::default(), Negotiated(None), &mut r);
        assert!(r.headers().get("content-encoding").is_none());
        assert_eq!(r.headers().get_all("vary").iter().collect::<Vec<_>>(), ["Origin", "Accept-Encoding"]);
    }

    fn unpack(coding: Coding, packed: &[u8]) -> Vec<u8> {
        use compression_codecs::{BrotliDecoder, DecodeV2, GzipDecoder, ZstdDecoder};
        let mut decoder: Box<dyn DecodeV2> = match coding {
            Coding::Gzip => Box::new(GzipDecoder::new()),
            Coding::Br => Box::new(BrotliDecoder::new()),
            Coding::Zstd => Box::new(ZstdDecoder::new()),
        };
        let mut input = PartialBuffer::new(packed);
        let mut plain = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let mut out = WriteBuffer::new_initialized(&mut buf);
            let ended = decoder.decode(&mut input, &mut out).unwrap();
            plain.extend_from_slice(out.written());
            if ended {
                return plain;
            }
        }
    }

    #[test]
    fn head_requests_and_services_without_compression_negotiate_nothing() {
        let gzip = HeaderValue::from_static("gzip");
        assert!(negotiate(None, &Method::GET, Some(&gzip)).is_none());
        assert!(negotiate(Some(&Compression::default()), &Method::HEAD, Some(&gzip)).is_none());
        assert_eq!(negotiate(Some(&Compression::default()), &Method::GET, Some(&gzip)).and_then(|n| n.0), Some(Coding::Gzip));
    }
}
