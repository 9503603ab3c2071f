//! What an idle keep-alive connection holds on the heap, in TCP and in HTTP mode: `N` clients
//! each make one request through Fulcrum to a server in this process and stay open; the heap
//! bytes counted before and after, over `N`. `bench/scale`'s idle curve measures resident memory,
//! which is this and what the allocator keeps around it; this says how much of it is Fulcrum's
//! own structures. The clients come one after another, so in HTTP mode one server connection
//! serves them all and the figure is the client connection's alone; in TCP mode each client has
//! its server connection, and the figure is the pair's. The server is this program run again as
//! a process of its own (`idle_size serve PORT`), so its bytes are not counted.
//!
//! `idle_size [N]`: 2,000 clients by default. Prints one JSON line last.
// A benchmark reads the clock itself.
#![allow(clippy::disallowed_methods)]
// A global allocator is unsafe to implement: this one counts and hands each call to the system's.
#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use fulcrum::app::App;
use fulcrum::shutdown::Shutdown;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "support/counting.rs"]
mod counting;
use counting::live;

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("serve") {
        let port: u16 = args.get(1).and_then(|p| p.parse().ok()).expect("serve PORT");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        return rt.block_on(serve_ok(port));
    }
    // As `fulcrum run` does: the soft descriptor limit up to the hard one (a config its
    // listeners and checks do not fit is refused, and the clients need theirs).
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let server = free_addr();
    let mut child = std::process::Command::new(std::env::current_exe().expect("own path")).args(["serve", &server.port().to_string()]).spawn().expect("server process");
    while TcpStream::connect(server).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let mut figures = Vec::new();
    for mode in ["tcp", "http"] {
        let listen = free_addr();
        let text =
            format!("[[service]]\nname = \"idle\"\nlisten = \"{listen}\"\nmode = \"{mode}\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{server}\"\n");
        let config = fulcrum::config::parse(&text, "idle.toml").expect("config");
        let shutdown = Shutdown::new();
        let app = rt.block_on(App::start(config, None, shutdown.clone())).expect("start");
        // One connection first, so the server connection (HTTP) and the runtime's first
        // allocations are in the base.
        let first = exchange(listen);
        std::thread::sleep(Duration::from_secs(1));
        let base = live();
        let clients: Vec<TcpStream> = (0..n).map(|_| exchange(listen)).collect();
        // Past HTTP's linger (250 ms), when an idle connection gives hyper's state back.
        std::thread::sleep(Duration::from_secs(2));
        let per = (live() - base) as f64 / n as f64;
        // Still served: a sample answers again.
        for mut c in clients.into_iter().step_by((n / 10).max(1)).chain(std::iter::once(first)) {
            c.write_all(REQUEST).expect("request again");
            read_response(&mut c);
        }
        println!("{mode}: {per:.0} bytes of heap per idle connection ({n} connections)");
        figures.push(format!("\"{mode}_bytes_per_idle_connection\": {per:.0}"));
        shutdown.begin();
        rt.block_on(app.stop());
    }
    child.kill().ok();
    child.wait().ok();
    println!("{{\"connections\": {n}, {}}}", figures.join(", "));
}

/// A server that answers every request on a connection with `RESPONSE`, until killed.
async fn serve_ok(port: u16) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("server");
    while let Ok((mut conn, _)) = listener.accept().await {
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut have = 0;
            loop {
                match conn.read(&mut buf[have..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(k) => have += k,
                }
                while let Some(end) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") {
                    if conn.write_all(RESPONSE).await.is_err() {
                        return;
                    }
                    buf.copy_within(end + 4..have, 0);
                    have -= end + 4;
                }
            }
        });
    }
}

/// A new client connection that has made one request and read its answer.
fn exchange(to: SocketAddr) -> TcpStream {
    let mut c = TcpStream::connect(to).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    c.write_all(REQUEST).expect("request");
    read_response(&mut c);
    c
}

fn read_response(c: &mut TcpStream) {
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !got.ends_with(b"ok") {
        let k = c.read(&mut buf).expect("response");
        assert!(k > 0, "closed before the answer: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..k]);
    }
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("address")
}
