//! Per-client limits and outlier detection in the dashboard, in real headless Chromium
//! (`tests/browser/protection.mjs`): the Stats tab's limits table with the clients closest to
//! their limit, a key cleared from it, the session-rate Limit cell, and an ejected server's
//! reason.

use std::net::IpAddr;

use crate::run_script;
use crate::support::*;

#[test]
fn the_stats_tab_shows_the_clients_at_their_limit_clears_one_and_says_why_a_server_is_out() {
    let good = Nginx::start("good", "TARGET");
    let bad = Nginx::start("bad", "TARGET");
    bad.fail(true);
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.health]\nkind = \"none\"\n\
         [service.outlier]\nconsecutive_5xx = 2\nmax_ejection_percent = 50\nbase_ejection_time = \"1h\"\n\
         [[service.limit]]\nname = \"slow\"\ncount = \"requests\"\nlimit = 3\nperiod = \"1m\"\nburst = 2\n\
         [[service.server]]\naddress = \"{}\"\n[[service.server]]\naddress = \"{}\"\n",
        good.addr, bad.addr
    ));
    // One client past its limit; another within it. The failing server answers two 503s and is
    // ejected.
    let limited = IpAddr::from([127, 0, 0, 77]);
    let statuses: Vec<u16> = (0..5).map(|_| http_get_from(Some(limited), f.listen, "/flaky").unwrap().0).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 2, "{statuses:?}");
    for _ in 0..2 {
        http_get_from(Some(IpAddr::from([127, 0, 0, 78])), f.listen, "/flaky").unwrap();
    }
    wait_until("the failing server ejected", std::time::Duration::from_secs(5), || f.server_stats(&bad.addr.to_string())["state"] == "ejected");
    run_script("protection.mjs", &[("DASHBOARD_URL", format!("http://{}/", f.admin)), ("LIMITED", limited.to_string()), ("EJECTED", bad.addr.to_string())]);
    // Cleared in the browser: the client is let through at once.
    assert_eq!(http_get_from(Some(limited), f.listen, "/name").unwrap().0, 200);
}
