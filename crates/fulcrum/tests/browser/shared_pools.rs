//! A shared pool (`[[pool]]`) in the dashboard, in real headless Chromium
//! (`tests/browser/shared_pools.mjs`): one Stats entry for the pool, whichever service its
//! traffic came in on, and a server disabled from the Real Servers tab leaves both services.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use crate::run_script;
use crate::support::*;

#[test]
fn the_dashboard_shows_a_shared_pool_once_and_disables_its_server_for_every_service() {
    let (s1, s2) = (Nginx::start("s1", "TARGET"), Nginx::start("s2", "TARGET"));
    let raw: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let f = Fulcrum::start(&format!(
        "[[pool]]\nname = \"back\"\nalgorithm = \"least-conn\"\n[pool.health]\n{HTTP_CHECK}\n\
         [[pool.server]]\naddress = \"{}\"\n[[pool.server]]\naddress = \"{}\"\n\
         [[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\ndefault_pool = \"back\"\n\
         [[service]]\nname = \"raw\"\nlisten = \"{raw}\"\ndefault_pool = \"back\"\n",
        s1.addr, s2.addr
    ));
    f.wait_all_up();
    run_script("shared_pools.mjs", &[("DASHBOARD_URL", format!("http://{}/", f.admin)), ("DISABLED", s1.addr.to_string())]);
    // Both services now send everything to s2.
    for _ in 0..4 {
        assert_eq!(http_get(f.listen, "/name"), (200, "s2\n".to_string()));
        let mut c = TcpStream::connect(raw).unwrap();
        c.write_all(b"GET /name HTTP/1.0\r\n\r\n").unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).unwrap();
        assert_eq!(parse_response(&got).unwrap(), (200, "s2\n".to_string()));
    }
}
