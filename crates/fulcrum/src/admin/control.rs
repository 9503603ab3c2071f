//! What the admin listener needs from the running process, and nothing more: the live state to
//! read, the three ways to change it, a check run at once, and when to stop. The process implements it; the admin
//! never sees the process itself, so it can be served over anything that can answer these.

use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{Auth, Editor};
use crate::config::Change;
use crate::config::audit::Record;
use crate::live::Generation;
use crate::stats::history::History;

pub trait Control: Send + Sync + 'static {
    /// Why a change, reload or save was refused; the API answers it as the 422's `error`.
    type Error: std::fmt::Display + Send;

    /// The generation running now: stats, metrics and the running config are read from it.
    fn current(&self) -> Arc<Generation>;
    fn history(&self) -> &History;
    fn auth(&self) -> &Auth;
    /// The file `reload` reads and `save` writes; `None` for an embedded config.
    fn file(&self) -> Option<&Path>;
    /// Cancelled when the process begins to shut down; the admin listener stops then.
    fn stopping(&self) -> CancellationToken;

    /// Whether this instance can take traffic: it has a config with services and at least one
    /// listener up (`/ready`).
    fn ready(&self) -> bool;
    /// The fleet as this instance sees it; `None` when it runs alone.
    fn fleet(&self) -> Option<crate::fleet::Status>;

    /// The edits the config file does not have yet; `None` when it has them all (or there is no
    /// file). A reload would drop them: the API refuses one unless forced.
    fn unsaved(&self) -> Option<Unsaved>;
    /// The latest records of the audit trail, oldest first.
    fn audit(&self) -> Vec<Record>;

    /// Applies one change to the running config on behalf of `by`; `Ok` says what was applied.
    fn change(&self, change: Change, by: Editor) -> impl Future<Output = Result<String, Self::Error>> + Send;
    /// Re-reads the config file and applies it, on behalf of `by`.
    fn reload(&self, by: Editor) -> impl Future<Output = Result<String, Self::Error>> + Send;
    /// Writes the running config to its file, on behalf of `by`.
    fn save(&self, by: Editor) -> impl Future<Output = Result<String, Self::Error>> + Send;
    /// Replaces the running binary with the one at its path, on behalf of `by`: `Ok` once the new
    /// process serves, when this one drains and exits.
    fn upgrade(&self, by: Editor) -> impl Future<Output = Result<String, Self::Error>> + Send;
    /// Runs the health check of `service`'s server at `address` now and answers its result.
    fn check_now(&self, service: &str, address: &str) -> impl Future<Output = Result<crate::health::Checked, crate::health::CheckNowError>> + Send;
}

/// Edits applied through the API and not saved to the config file.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Unsaved {
    /// Each edit in a few words, with who made it, oldest first.
    pub edits: Vec<String>,
    /// The file's config against the running one, as a unified diff.
    pub diff: String,
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::config::{Resolve, parse_with};

    /// A process stand-in: the admin must serve it exactly as it serves the real one.
    struct Fake {
        generation: Arc<Generation>,
        history: History,
        auth: Auth,
        stop: CancellationToken,
        changes: Mutex<Vec<Change>>,
    }

    impl Control for Fake {
        type Error = String;

        fn current(&self) -> Arc<Generation> {
            self.generation.clone()
        }
        fn history(&self) -> &History {
            &self.history
        }
        fn auth(&self) -> &Auth {
            &self.auth
        }
        fn file(&self) -> Option<&Path> {
            None
        }
        fn stopping(&self) -> CancellationToken {
            self.stop.clone()
        }
        fn ready(&self) -> bool {
            false
        }
        fn fleet(&self) -> Option<crate::fleet::Status> {
            None
        }
        async fn change(&self, change: Change, _by: Editor) -> Result<String, String> {
            if let Ok(mut c) = self.changes.lock() {
                c.push(change);
            }
            Ok("changed".to_string())
        }
        fn unsaved(&self) -> Option<Unsaved> {
            None
        }
        fn audit(&self) -> Vec<Record> {
            Vec::new()
        }
        async fn reload(&self, _by: Editor) -> Result<String, String> {
            Err("nothing to reload".to_string())
        }
        async fn save(&self, _by: Editor) -> Result<String, String> {
            Err("nothing to save".to_string())
        }
        async fn upgrade(&self, _by: Editor) -> Result<String, String> {
            Err("nothing to upgrade".to_string())
        }
        async fn check_now(&self, service: &str, address: &str) -> Result<crate::health::Checked, crate::health::CheckNowError> {
            Err(crate::health::CheckNowError::NoServer { service: service.into(), address: address.into() })
        }
    }

    async fn post(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn the_api_is_served_over_any_control() {
        let config = parse_with("", "t", Resolve::No).unwrap();
        let fake = Arc::new(Fake {
            generation: Arc::new(Generation::new(config, Vec::new(), Vec::new(), crate::live::Budget::new(0))),
            history: History::default(),
            auth: Auth::default(),
            stop: CancellationToken::new(),
            changes: Mutex::default(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = tokio::spawn(super::super::serve(listener, fake.clone()));

        let started = post(addr, "/api/services/web/start").await;
        assert!(started.starts_with("HTTP/1.1 200"), "{started}");
        assert!(started.ends_with(r#"{"message":"changed","ok":true}"#), "{started}");
        assert_eq!(*fake.changes.lock().unwrap(), [Change::ServiceEnabled { service: "web".into(), enabled: true }]);

        let refused = post(addr, "/api/reload").await;
        assert!(refused.starts_with("HTTP/1.1 422"), "{refused}");
        assert!(refused.ends_with(r#"{"error":"nothing to reload","ok":false}"#), "{refused}");

        fake.stop.cancel();
        served.await.unwrap();
    }
}
