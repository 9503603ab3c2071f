//! The HTTP client ACME speaks through: hyper-rustls with ring, trusting the system's roots or
//! the operator's `directory_ca`, each request bounded in time, and the CA's `Retry-After` on
//! an error answer kept (instant-acme does not hand it back with the error), so the orderer
//! waits as long as the CA asked.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hyper_util::client::legacy::Client as Hyper;
use hyper_util::client::legacy::connect::HttpConnector;
use instant_acme::{BodyWrapper, BytesResponse, Error, HttpClient};

use crate::tls::TlsError;

/// How long one request to the CA may take, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Client {
    hyper: Hyper<hyper_rustls::HttpsConnector<HttpConnector>, BodyWrapper<Bytes>>,
    retry_after: Arc<Mutex<Option<SystemTime>>>,
}

/// The `Retry-After` the CA sent last with an error, shared with the orderer.
#[derive(Clone, Default)]
pub struct RetryAfter(Arc<Mutex<Option<SystemTime>>>);

impl RetryAfter {
    /// Takes what the CA asked for, as a wait from `now`.
    pub fn take(&self, now: SystemTime) -> Option<Duration> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take().map(|at| at.duration_since(now).unwrap_or_default())
    }
}

impl Client {
    /// A client trusting the certificates of `ca` (a PEM file), or the system's roots.
    pub fn new(ca: Option<&str>, retry_after: &RetryAfter) -> Result<Client, TlsError> {
        let roots = match ca {
            Some(ca) => crate::tls::certs::ca_file(ca)?.0,
            None => crate::tls::origin::system_roots()?,
        };
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(crate::tls::provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError { file: "[service.tls.acme]".into(), reason: e.to_string() })?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_only().enable_http1().build();
        let hyper = Hyper::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
        Ok(Client { hyper, retry_after: retry_after.0.clone() })
    }
}

impl HttpClient for Client {
    fn request(&self, req: hyper::Request<BodyWrapper<Bytes>>) -> Pin<Box<dyn Future<Output = Result<BytesResponse, Error>> + Send>> {
        let fut = self.hyper.request(req);
        let cell = self.retry_after.clone();
        Box::pin(async move {
            let rsp = match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
                Ok(Ok(rsp)) => rsp,
                Ok(Err(e)) => return Err(Error::Other(Box::new(e))),
                Err(_) => return Err(Error::Str("the CA did not answer in time")),
            };
            if rsp.status().is_client_error() || rsp.status().is_server_error() {
                let at = rsp.headers().get(hyper::header::RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(|v| retry_after(v, crate::clock::wall()));
                *cell.lock().unwrap_or_else(|e| e.into_inner()) = at;
            }
            Ok(BytesResponse::from(rsp))
        })
    }
}

/// A `Retry-After` value (seconds, or an HTTP date) as a time.
fn retry_after(value: &str, now: SystemTime) -> Option<SystemTime> {
    let value = value.trim();
    match value.parse::<u64>() {
        Ok(secs) => now.checked_add(Duration::from_secs(secs)),
        Err(_) => httpdate::parse_http_date(value).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates_and_ignores_garbage() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(retry_after("120", now), Some(now + Duration::from_secs(120)));
        assert_eq!(retry_after("Thu, 01 Jan 1970 00:00:10 GMT", now), Some(SystemTime::UNIX_EPOCH + Duration::from_secs(10)));
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after(&"9".repeat(40), now), None);
    }
}
