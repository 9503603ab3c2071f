//! The peers tier: the `fulcrum` binary started as a process, with real servers and clients
//! around it (nginx, vsftpd, etcd, keepalived, curl, h2load, grpcio, nftables), one module per concern, and
//! the lab's scenarios in quick mode. One binary, so the suite links once.
//! `cargo test --profile tests -p fulcrum --test peers -- tls::` runs one module.
// Tests wait on real processes and sockets in real time; the balancer's own clock reads stay in
// `fulcrum::clock` (clippy.toml).
#![allow(clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod accept_proxy;
mod access_log;
mod acme;
mod acme_fleet;
mod admin_api;
mod admin_auth;
mod agent;
mod audit;
mod balancing;
mod body_limit;
mod certs;
mod check_cli;
mod check_now;
mod check_options;
mod compression;
mod control_socket;
mod demo;
mod error_pages;
mod explain;
mod fleet;
mod forwarding;
mod ftp;
mod grpc;
mod hardening;
mod health;
mod http;
mod http2;
mod http3;
mod inflight;
mod kernel;
mod lab;
mod limits;
mod outlier;
mod passive;
mod privilege;
mod proxy_protocol;
mod recovery;
mod reload;
mod resolve;
mod rules;
mod shared_pools;
mod sockmap;
mod systemd;
mod systemd_unit;
mod tls;
mod tls_options;
mod tracing;
mod upgrade;
mod vrrp;
