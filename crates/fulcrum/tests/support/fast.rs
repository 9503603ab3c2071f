//! The fast tier: Fulcrum's app started in the test process (`App::start`, listening on port 0)
//! in front of real servers of the `realserver` crate, also in process, over real loopback
//! sockets. Nothing is spawned or installed, so a test takes milliseconds to start. Tests that
//! need a real peer (nginx, vsftpd, curl, Chromium, ab) or the binary itself (signals, the CLI,
//! two processes agreeing) stay on the slow tier with `Fulcrum`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fulcrum::app::App;
use fulcrum::shutdown::Shutdown;
use realserver::BackendArgs;
use tokio_util::sync::CancellationToken;

/// The listen address the configs of the fast tier ask for.
const ANY_PORT: &str = "127.0.0.1:0";

pub struct Fast {
    /// Where the service listens.
    pub listen: SocketAddr,
    /// The real servers, `s1`, `s2`, ... in order, by address.
    pub servers: Vec<SocketAddr>,
    app: Arc<App>,
    shutdown: Shutdown,
    stop_servers: CancellationToken,
    rt: Option<tokio::runtime::Runtime>,
}

impl Fast {
    /// Starts `n` real servers named `s1`..`sN` (`/name` answers the name, `/index.html` holds
    /// `TARGET`), then Fulcrum on the config `config` makes of their addresses; its `{LISTEN}`
    /// becomes a port-0 address.
    pub fn start(n: usize, config: impl FnOnce(&[SocketAddr]) -> String) -> Fast {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a test runtime");
        let stop_servers = CancellationToken::new();
        let servers: Vec<SocketAddr> = rt.block_on(async {
            let mut addrs = Vec::new();
            for i in 1..=n {
                let args =
                    BackendArgs { listen: ANY_PORT.parse().unwrap(), name: format!("s{i}"), index_text: None, large_size: 1 << 20, backlog: 1024, degrade: Default::default() };
                let (addr, serving) = realserver::bind(args, stop_servers.clone()).await.expect("a real server");
                tokio::spawn(serving);
                addrs.push(addr);
            }
            addrs
        });
        // `check` refuses port 0 (a user wants a known address), so the config is validated with a
        // fixed one and the one service is then told to listen on any free port.
        let text = config(&servers).replace("{LISTEN}", "127.0.0.1:9");
        let mut parsed = fulcrum::config::parse(&text, "fast.toml").unwrap_or_else(|d| panic!("config refused:\n{d}\n{text}"));
        assert_eq!(parsed.services.len(), 1, "the fast tier runs one service");
        parsed.services[0].listen = ANY_PORT.into();
        let shutdown = Shutdown::new();
        let app = rt.block_on(App::start(parsed, None, shutdown.clone())).unwrap_or_else(|e| panic!("start: {e}"));
        let listen = app.local_addr(ANY_PORT.parse().unwrap()).expect("the service's listener");
        Fast { listen, servers, app, shutdown, stop_servers, rt: Some(rt) }
    }

    /// What `GET /api/stats` would answer.
    pub fn stats(&self) -> serde_json::Value {
        serde_json::to_value(fulcrum::stats::snapshot(&self.app.live.current())).expect("stats as JSON")
    }

    pub fn server_stats(&self, address: &str) -> serde_json::Value {
        super::server_in(&self.stats(), address)
    }

    /// Waits until every server is up.
    pub fn wait_all_up(&self) {
        super::wait_until("every server up", Duration::from_secs(20), || super::all_up(&self.stats()));
    }
}

impl Drop for Fast {
    fn drop(&mut self) {
        self.shutdown.begin();
        self.stop_servers.cancel();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}
