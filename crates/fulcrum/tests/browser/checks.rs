//! A server's Check now button and In flight view in the dashboard, in real headless Chromium
//! (`tests/browser/checks.mjs`), while a real client holds a slow request to the real server.

use std::io::Write;
use std::net::TcpStream;

use crate::run_script;
use crate::support::*;

#[test]
fn check_now_says_the_result_and_in_flight_lists_a_held_request() {
    let backend = Backend::start("slow");
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.health]\nkind = \"http\"\ninterval = \"1h\"\n[[service.server]]\naddress = \"{}\"\n",
        backend.addr
    ));
    f.wait_all_up();
    // Held for as long as Chromium may take to start on a busy machine; it ends with the test.
    let mut held = TcpStream::connect(f.listen).unwrap();
    held.write_all(b"GET /slow/60000 HTTP/1.1\r\nHost: web\r\n\r\n").unwrap();
    let client = held.local_addr().unwrap();
    run_script("checks.mjs", &[("DASHBOARD_URL", format!("http://{}/", f.admin)), ("SERVER", backend.addr.to_string()), ("CLIENT", client.to_string())]);
    assert_eq!(f.server_stats(&backend.addr.to_string())["check_streak"], 0, "a passing check of an up server");
}
