//! Error pages (`[service.http] error_pages`, a route's `error_pages`): files read when a service
//! is built, on the blocking thread that builds it (as certificates are), kept while the files
//! are unchanged on disk, and served from memory. Each is at most [`ErrorPages::MAX_SIZE`]
//! bytes; its `Content-Type` comes from its file name.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use hyper::header::HeaderValue;

use crate::config;
use crate::tls::FileStamp;

/// One page: its bytes and their type.
#[derive(Debug, Clone)]
pub struct Page {
    pub body: Bytes,
    pub content_type: HeaderValue,
}

/// A service's pages, and each route's that has its own.
#[derive(Debug, Default)]
pub struct ErrorPages {
    service: HashMap<u16, Page>,
    routes: HashMap<usize, HashMap<u16, Page>>,
    /// Every file read, with what it was then: a reload reads them again when one changed.
    files: Vec<(String, Option<FileStamp>)>,
}

/// Why a page could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    #[error("error page {path}: {cause}")]
    Read { path: String, cause: String },
    #[error("error page {path} is {len} bytes; a page is at most {max}", max = ErrorPages::MAX_SIZE)]
    TooLarge { path: String, len: u64 },
}

impl ErrorPages {
    pub const MAX_SIZE: u64 = config::range::ERROR_PAGE_BYTES;

    /// The pages `sc` names, read from their files; `None` when it names none. Reads files: call
    /// it off the runtime's threads.
    pub fn load(sc: &config::Service) -> Result<Option<ErrorPages>, PageError> {
        let routed = sc.routes.iter().enumerate().filter(|(_, r)| !r.error_pages.is_empty());
        if sc.http.error_pages.is_empty() && routed.clone().next().is_none() {
            return Ok(None);
        }
        let mut pages = ErrorPages::default();
        pages.service = pages.read_all(&sc.http.error_pages)?;
        for (k, route) in routed {
            let read = pages.read_all(&route.error_pages)?;
            pages.routes.insert(k, read);
        }
        Ok(Some(pages))
    }

    fn read_all(&mut self, named: &BTreeMap<String, String>) -> Result<HashMap<u16, Page>, PageError> {
        let mut out = HashMap::new();
        for (status, path) in named {
            // `check` refused a key that is not a status.
            let Ok(status) = status.parse::<u16>() else { continue };
            out.insert(status, self.read(path)?);
        }
        Ok(out)
    }

    fn read(&mut self, path: &str) -> Result<Page, PageError> {
        let stamp = FileStamp::of(path);
        let len = std::fs::metadata(path).map_err(|e| PageError::Read { path: path.into(), cause: e.to_string() })?.len();
        if len > ErrorPages::MAX_SIZE {
            return Err(PageError::TooLarge { path: path.into(), len });
        }
        let body = std::fs::read(path).map_err(|e| PageError::Read { path: path.into(), cause: e.to_string() })?;
        if body.len() as u64 > ErrorPages::MAX_SIZE {
            return Err(PageError::TooLarge { path: path.into(), len: body.len() as u64 });
        }
        self.files.push((path.to_string(), stamp));
        Ok(Page { body: Bytes::from(body), content_type: HeaderValue::from_static(content_type(path)) })
    }

    /// The page for `status`: the route's own, else the service's.
    pub fn get(&self, route: Option<usize>, status: u16) -> Option<&Page> {
        route.and_then(|k| self.routes.get(&k)?.get(&status)).or_else(|| self.service.get(&status))
    }

    /// Whether every file is as it was when read.
    pub fn unchanged_on_disk(&self) -> bool {
        self.files.iter().all(|(path, stamp)| stamp.is_some() && FileStamp::of(path) == *stamp)
    }
}

/// The type of a page by its file name's extension.
pub fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "json" => "application/json",
        "xml" => "application/xml",
        "txt" | "text" => "text/plain; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_read_bounded_typed_and_found_route_first() {
        let dir = std::env::temp_dir().join(format!("fulcrum-pages-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b, big) = (dir.join("503.html"), dir.join("503.json"), dir.join("big.txt"));
        std::fs::write(&a, "<h1>down</h1>").unwrap();
        std::fs::write(&b, "{\"down\":true}").unwrap();
        std::fs::write(&big, vec![b'x'; ErrorPages::MAX_SIZE as usize + 1]).unwrap();
        let toml_text = format!(
            "name = \"s\"\nlisten = \"127.0.0.1:1\"\nmode = \"http\"\n[http]\nerror_pages = {{ \"503\" = {a:?} }}\n[[route]]\npath = [\"/api\"]\nerror_pages = {{ \"503\" = {b:?} }}\n[[server]]\naddress = \"127.0.0.1:2\"\n"
        );
        let sc: config::Service = toml::from_str(&toml_text).unwrap();
        let pages = ErrorPages::load(&sc).unwrap().unwrap();
        assert_eq!(pages.get(None, 503).unwrap().body, "<h1>down</h1>");
        assert_eq!(pages.get(None, 503).unwrap().content_type, "text/html; charset=utf-8");
        assert_eq!(pages.get(Some(0), 503).unwrap().content_type, "application/json");
        assert!(pages.get(Some(1), 502).is_none());
        assert!(pages.unchanged_on_disk());
        std::fs::write(&a, "<h1>down for maintenance</h1>").unwrap();
        assert!(!pages.unchanged_on_disk(), "a changed file is read again on reload");
        let too_big: config::Service = toml::from_str(&toml_text.replace(&format!("{a:?}"), &format!("{big:?}"))).unwrap();
        assert!(matches!(ErrorPages::load(&too_big), Err(PageError::TooLarge { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
