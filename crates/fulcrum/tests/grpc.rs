//! gRPC through Fulcrum: grpcio clients and servers (Python), HTTP/2 on both sides (h2c with
//! prior knowledge to Fulcrum, `protocol = "h2"` to the servers). Calls over one client channel
//! are balanced per request, a server's error status arrives in its trailers, and with no server
//! left the client gets UNAVAILABLE from Fulcrum.

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::*;

fn script(name: &str) -> String {
    format!("{}/tests/grpc/{name}", env!("CARGO_MANIFEST_DIR"))
}

struct GrpcServer {
    addr: SocketAddr,
    child: Child,
}

impl GrpcServer {
    fn start(name: &str) -> GrpcServer {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new("python3")
            .args([script("server.py"), name.into(), addr.port().to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("python3 with grpcio (scripts/test installs it)");
        wait_until(&format!("gRPC server {name}"), Duration::from_secs(20), || std::net::TcpStream::connect(addr).is_ok());
        GrpcServer { addr, child }
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn calls(target: SocketAddr, method: &str, count: usize) -> Vec<String> {
    let out = Command::new("python3").args([script("client.py"), target.to_string(), method.into(), count.to_string()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[test]
fn grpc_calls_are_balanced_per_request_with_trailers_and_unavailable_from_fulcrum() {
    let (a, b) = (GrpcServer::start("g1"), GrpcServer::start("g2"));
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"grpc\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\nprotocol = \"h2\"\nalgorithm = \"round-robin\"\n[service.http]\nh2c = true\n[service.health]\nkind = \"none\"\n\
         [[service.server]]\naddress = \"{}\"\n[[service.server]]\naddress = \"{}\"\n",
        a.addr, b.addr
    ));
    // One channel, one HTTP/2 connection to Fulcrum: its calls still go to both servers.
    let replies = calls(f.listen, "Name", 10);
    assert_eq!(replies.iter().filter(|r| *r == "ok g1").count(), 5, "{replies:?}");
    assert_eq!(replies.iter().filter(|r| *r == "ok g2").count(), 5, "{replies:?}");

    // The status a server ends a call with travels in the trailers.
    let failed = calls(f.listen, "Fail", 2);
    assert!(failed.iter().all(|r| r.starts_with("NOT_FOUND nothing here on g")), "{failed:?}");

    // No server left: Fulcrum's own answer is a gRPC status.
    drop((a, b));
    let gone = calls(f.listen, "Name", 1);
    assert!(gone[0].starts_with("UNAVAILABLE Fulcrum: "), "{gone:?}");
}
