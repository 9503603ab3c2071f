//! "Check now": `POST /api/services/{service}/servers/{address}/check` runs a server's health
//! check at once against a real nginx and answers its result; the result counts toward rise and
//! fall as a scheduled check's would, so two failures in a row take it down with `fall = 2`.

use crate::support::*;

#[test]
fn a_check_run_now_answers_its_result_and_counts_toward_rise_and_fall() {
    let s1 = Nginx::start("s1", "TARGET");
    let other = Nginx::start("other", "TARGET");
    // An hour between scheduled checks: after the first round, only the asked ones run.
    let f = Fulcrum::start(&format!(
        "[[service]]\nname = \"web\"\nlisten = \"{{LISTEN}}\"\nmode = \"http\"\n[service.health]\nkind = \"http\"\npath = \"/flaky\"\ninterval = \"1h\"\nrise = 2\nfall = 2\n[[service.server]]\naddress = \"{}\"\n\
         [[service]]\nname = \"unchecked\"\nlisten = \"127.0.0.1:{}\"\n[service.health]\nkind = \"none\"\n[[service.server]]\naddress = \"{}\"\n",
        s1.addr,
        free_port(),
        other.addr
    ));
    f.wait_all_up();
    let path = format!("/api/services/web/servers/{}/check", s1.addr);
    let check = |f: &Fulcrum| {
        let (code, answer) = f.api("POST", &path, None);
        assert_eq!(code, 200, "{answer}");
        answer["check"].clone()
    };
    s1.fail(true);
    let c = check(&f);
    assert_eq!((c["passed"].as_bool(), c["state"].as_str(), c["check_streak"].as_u64()), (Some(false), Some("up"), Some(1)), "one failure of fall = 2: {c}");
    assert!(c["result"].as_str().unwrap().starts_with("fail: GET /flaky answered 503"), "{c}");
    assert_eq!(f.server_stats(&s1.addr.to_string())["check_streak"], 1, "the stats count it");
    let c = check(&f);
    assert_eq!((c["passed"].as_bool(), c["state"].as_str(), c["check_up"].as_bool(), c["check_streak"].as_u64()), (Some(false), Some("down"), Some(false), Some(0)), "{c}");
    f.wait_log("server down: GET /flaky answered 503");
    s1.fail(false);
    let c = check(&f);
    assert_eq!((c["passed"].as_bool(), c["state"].as_str(), c["check_streak"].as_u64()), (Some(true), Some("down"), Some(1)), "one pass of rise = 2: {c}");
    assert!(c["result"].as_str().unwrap().starts_with("pass: GET /flaky answered 200"), "{c}");
    let c = check(&f);
    assert_eq!((c["passed"].as_bool(), c["state"].as_str()), (Some(true), Some("up")), "{c}");
    assert_eq!(http_get(f.listen, "/name"), (200, "s1\n".into()));

    let (code, answer) = f.api("POST", "/api/services/web/servers/127.0.0.1:9/check", None);
    assert_eq!(code, 404, "{answer}");
    let (code, answer) = f.api("POST", &format!("/api/services/unchecked/servers/{}/check", other.addr), None);
    assert_eq!(code, 409, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("no active check"), "{answer}");
}
