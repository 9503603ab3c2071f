//! gRPC through Fulcrum: grpcio clients and servers (Python), HTTP/2 on both sides (h2c with
//! prior knowledge to Fulcrum, `protocol = "h2"` to the servers). Calls over one client channel
//! are balanced per request, a server's error status arrives in its trailers, and with no server
//! left the client gets UNAVAILABLE from Fulcrum. Health checks speak the gRPC health protocol.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::*;

fn script(name: &str) -> String {
    format!("{}/tests/grpc/{name}", env!("CARGO_MANIFEST_DIR"))
}

struct GrpcServer {
    addr: SocketAddr,
    child: Child,
    /// What its health service answers: SERVING, NOT_SERVING.
    health: std::path::PathBuf,
}

impl GrpcServer {
    fn start(name: &str) -> GrpcServer {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let health = scratch("grpc-health").join(format!("{name}-{}", addr.port()));
        let child = Command::new("python3")
            .args([script("server.py"), name.into(), addr.port().to_string(), health.display().to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("python3 with grpcio (scripts/test installs it)");
        wait_until(&format!("gRPC server {name}"), Duration::from_secs(20), || std::net::TcpStream::connect(addr).is_ok());
        GrpcServer { addr, child, health }
    }

    fn set_health(&self, status: &str) {
        std::fs::write(&self.health, status).unwrap();
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

/// `kind = "grpc"`: a server whose health service says NOT_SERVING is taken out with the reason
/// and gets no call; back to SERVING, it is back in. A service name the servers do not know
/// (SERVICE_UNKNOWN) keeps them down.
#[test]
fn grpc_health_checks_follow_the_servers_serving_status() {
    let (a, b) = (GrpcServer::start("h1"), GrpcServer::start("h2"));
    let config = |service: &str| {
        format!(
            "[[service]]\nname = \"grpc\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\nprotocol = \"h2\"\nalgorithm = \"round-robin\"\n[service.http]\nh2c = true\n\
             [service.health]\nkind = \"grpc\"\ninterval = \"100ms\"\nrise = 1\nfall = 1\ngrpc_service = \"{service}\"\n\
             [[service.server]]\naddress = \"{}\"\n[[service.server]]\naddress = \"{}\"\n",
            a.addr, b.addr
        )
    };
    let f = Fulcrum::start(&config("fulcrum.Echo"));
    f.wait_all_up();
    let b_state = || f.server_stats(&b.addr.to_string());
    assert!(b_state()["last_check"].as_str().unwrap().starts_with("pass: gRPC health SERVING"), "{}", b_state());

    b.set_health("NOT_SERVING");
    wait_until("h2 taken out", Duration::from_secs(5), || b_state()["check_up"] == false);
    assert!(b_state()["last_check"].as_str().unwrap().contains("NOT_SERVING"), "{}", b_state());
    let replies = calls(f.listen, "Name", 4);
    assert!(replies.iter().all(|r| r == "ok h1"), "{replies:?}");

    b.set_health("SERVING");
    wait_until("h2 back", Duration::from_secs(5), || b_state()["check_up"] == true);
    let replies = calls(f.listen, "Name", 4);
    assert_eq!(replies.iter().filter(|r| *r == "ok h2").count(), 2, "{replies:?}");

    let unknown = Fulcrum::start(&config("no.Such"));
    let state = || unknown.server_stats(&a.addr.to_string());
    wait_until("a check of an unknown service", Duration::from_secs(5), || state()["last_check"].as_str().unwrap().starts_with("fail"));
    assert!(state()["last_check"].as_str().unwrap().contains("SERVICE_UNKNOWN"), "{}", state());
    assert_eq!(state()["check_up"], false);
}
