//! Fulcrum: a TCP, HTTP and FTP server load balancer.
//!
//! A client connection arrives on a **listener**, its **service** asks a **balancer** for a
//! **server** among the healthy ones, the **proxy** connects and forwards bytes both ways, and
//! every step bumps **stats**; or, in kernel mode, nftables places it and Fulcrum steers
//! nftables. Health checks and the admin API change server state on the side; a config reload
//! builds a new generation of that state and swaps it in without touching connections in
//! flight.
//!
//! # Layout
//! - [`config`]: the TOML schema, defaults, the range of every number (`config::range`),
//!   validation with line/column errors, and `Change`, the typed edits the admin API applies to
//!   a copy of the running config.
//! - [`tls`]: certificate material, the TLS acceptors (termination, per-context resumption, SNI)
//!   and connectors (`server_tls`), used by `config` (validation), `live` and `proxy`; ACME
//!   (`tls::acme`): certificates ordered and renewed at runtime, served from slots that
//!   outlive generations, their state in a `Store` (disk, or etcd in a fleet).
//! - [`live`]: the live generation behind an `ArcSwap` (services, each owning its pools of
//!   servers, and the shared pools, `[[pool]]`, that services reach through views), the server
//!   and service state that outlives generations, the ring of the last picks with their
//!   reasons (`live::why`), and each service's side threads: the access log's syslog sender and
//!   the tracer's OTLP exporter (`live::tracer`).
//! - [`balance`]: the `Balancer` trait (pick, and update on every server event), the `Load`
//!   metrics apart from the rules, one file per algorithm, and the registry of algorithms by
//!   name (`balance::algorithm`), which the config reads the names from.
//! - [`mode`]: what a service's traffic is (TCP, HTTP, FTP) or who moves it (the kernel), below
//!   everything that says so.
//! - [`health`]: active checks and the rise/fall state machine.
//! - [`dns`]: DNS SRV records as a server source (hickory's resolver, off the traffic's threads).
//! - [`error`]: the data path's error: kind, side (server or local), retryable.
//! - [`clock`]: the one place that reads the time (`clippy.toml`), on tokio's clock so that a
//!   test that pauses it pauses everything.
//! - [`proxy_header`]: the PROXY protocol's wire format, sent by the data path and the checks.
//! - [`shutdown`]: one shutdown signal and one drain.
//! - [`proxy`]: listeners; `dispatch`, the one path to a server for every mode (pick, maxconn
//!   and the queue, measured connect, redispatch, backups); L4 forwarding with splice(2);
//!   `proxy::http` (hyper behind a framing guard, run only while a client is active, idle
//!   server connections, routing, affinity, the replay rule), `proxy::ftp` (control-channel
//!   rewriting and data ports) and `proxy::passthrough` (TLS routed by SNI, not terminated).
//! - [`kernel`]: `mode = "kernel"`, Fulcrum as the controller of an nftables balancer: one
//!   table per service whose `numgen` map DNATs new connections to the servers, its per-server
//!   SYN and SYN-ACK counters read back every slot, and the map rewritten atomically as health
//!   and `passive-ratio` move the shares; `nft` runs as a child process.
//! - [`stats`]: read-only views over the counters, the 10 s traffic history, Prometheus text.
//! - [`admin`]: the dashboard, the JSON API and `/metrics` on the admin listener, with auth
//!   (passwords hashed in a bounded pool off the traffic's threads, failures throttled per
//!   address) and a connection cap of its own; it reaches the process only through the
//!   `admin::Control` handle.
//! - [`app`]: the running process, the one path every config change takes, and the admin's
//!   `Control` over it.
//! - [`fleet`]: several instances as one load balancer: the services in etcd, followed by a
//!   watch, edits written with a compare on their revision, membership under a lease, `fulcrum
//!   fleet import/export`, and ACME's state for the fleet (`fleet::acme`: one order per name
//!   under a lease lock, challenges and certificates shared through etcd). A config source: it sends what it composes to the app on a channel
//!   and never calls the app.
//! - [`demo`]: the embedded default: four real servers of the `realserver` crate, a service
//!   over them, light traffic and the dashboard; with `--fleet`, a local etcd and two instances.
//! - [`cli`]: the subcommands; `fulcrum lab` runs the `fulcrum-lab` binary of this workspace.
//! - [`ctl`]: `fulcrum ctl`, the admin API's client, over the control socket or to the admin
//!   listener; `fulcrum certs`, the certificates of an instance or of a fleet.
//! - `fuzzing` (hidden): one entry point per fuzz target of `fuzz/`, shared with the test that
//!   replays their corpora.
//!
//! Imports run down only: `mode` and `clock` know nothing of the rest; `balance` nothing of
//! `config`; `config`, `tls`, `live` and `proxy_header` know nothing of
//! `proxy`, `health`, `kernel` or what is above them; `proxy`, `health`, `kernel` and `stats`
//! nothing of `fleet`, `app` or `admin` (`scripts/layers` checks it).
//!
//! Beside this crate in the workspace: `crates/realserver` (the real server of the tests, the
//! demo and the lab), `crates/fulcrum-lab` (the papers' experiments, with reports and plots) and
//! `crates/testkit` (the harness that starts processes for the tests, the lab and the soak).
//! `unsafe_code` is denied workspace-wide; `proxy::splice`, `proxy::tcp_info` and `proxy::sockmap`
//! (the BPF fast path of TCP mode: SO_COOKIE, TIOCOUTQ, epoll) allow it, and `app::upgrade` (the
//! handover socket a new binary is started with, named by its descriptor number).

pub mod admin;
pub mod app;
pub mod balance;
pub mod cli;
pub mod clock;
pub mod config;
pub mod ctl;
pub mod demo;
pub mod dns;
pub mod error;
pub mod fleet;
#[doc(hidden)]
pub mod fuzzing;
pub mod health;
pub mod kernel;
pub mod live;
pub mod mode;
pub mod proxy;
pub mod proxy_header;
pub mod shutdown;
pub mod stats;
pub mod tls;
