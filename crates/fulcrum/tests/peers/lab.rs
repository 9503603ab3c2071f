//! `fulcrum lab`: every scenario in `--quick` mode, its results read back from `results.json` and
//! checked against what the algorithms promise; `lab compare`; and clean errors for bad input.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::scratch;
use serde_json::Value;

/// The scenarios that load the machine (java-slb, haproxy, scaling: throughput and CPU) run one
/// at a time; `passive`, a few dozen requests a second whose figures are a slow server's queue
/// and the kernel's SYN retransmissions, runs beside them.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `fulcrum lab SCENARIO --quick` into a fresh folder; returns the folder and results.json.
fn lab(scenario: &str) -> (PathBuf, Value) {
    lab_with(scenario, &[])
}

/// `lab` with more arguments, such as `--repeat`.
fn lab_with(scenario: &str, args: &[&str]) -> (PathBuf, Value) {
    let _turn = (scenario != "passive").then(|| ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner()));
    let out = scratch(&format!("lab-{scenario}"));
    let o = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["lab", scenario, "--quick", "--seed", "3"]).args(args).arg("--out").arg(&out).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    println!("{stderr}");
    assert!(o.status.success(), "fulcrum lab {scenario} failed ({}):\n{stderr}", o.status);
    for f in ["report.md", "results.json"] {
        assert!(out.join(f).exists(), "{scenario}: no {f}");
    }
    let svgs = std::fs::read_dir(&out).unwrap().filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "svg")).count();
    assert!(svgs >= 1, "{scenario}: no plot");
    let results: Value = serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["scenario"], scenario);
    assert!(results["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(results["duration_secs"].as_f64().is_some_and(|d| d > 0.0), "the run's duration: {}", results["duration_secs"]);
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("; the run took "));
    // The head names the commit the lab ran, its conditions and its deviations from the paper.
    assert!(report.contains(" at commit `") && results["commit"]["hash"].as_str().is_some_and(|h| h.len() == 40), "{}", results["commit"]);
    assert!(report.contains("Run conditions:\n") && report.contains("Deviations from the paper:\n"), "{report}");
    assert!(report.contains("\n- build: Fulcrum at opt-level "), "the head names the build it measured: {report}");
    assert!(results["checks"].as_array().unwrap().iter().all(|c| c["passed"] == true), "{}", results["checks"]);
    (out, results)
}

fn runs(results: &Value) -> &Vec<Value> {
    results["raw"]["runs"].as_array().unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn java_slb_round_robin_is_even_and_source_hash_is_sticky() {
    let (out, results) = lab("java-slb");
    let runs = runs(&results);
    let algorithms: Vec<&str> = runs.iter().map(|r| r["algorithm"].as_str().unwrap()).collect();
    assert_eq!(algorithms[..4], ["round-robin", "source-hash", "least-conn", "random"], "the paper's four first");
    assert!(algorithms.contains(&"passive-ratio") && algorithms.contains(&"p2c-ewma"));
    // Three repeats of each of the seven (the quick default).
    assert_eq!(runs.len(), 21);
    assert_eq!(runs.iter().filter(|r| r["repeat"] == 2).count(), 7);
    for r in runs {
        let clients = r["clients"].as_array().unwrap();
        assert_eq!(clients.len(), 10);
        assert!(clients.iter().all(|c| u(&c["failed"]) == 0 && c["mean_ms"].as_f64().unwrap() > 0.0), "{r}");
        assert!(r["fulcrum"]["peak_rss_kib"].as_u64().unwrap() > 0);
        let servers = r["servers"].as_array().unwrap();
        assert!(servers.iter().all(|s| u(&s["peak_rss_kib"]) > 0 && s["cpu_secs"].as_f64().unwrap() >= 0.0), "{r}");
        assert_eq!(r["server_timelines"].as_array().unwrap().len(), 4);
    }
    for rr in runs.iter().filter(|r| r["algorithm"] == "round-robin") {
        let per_server: Vec<u64> = rr["servers"].as_array().unwrap().iter().map(|s| u(&s["requests"])).collect();
        let mean = per_server.iter().sum::<u64>() as f64 / 4.0;
        assert!(per_server.iter().all(|&n| (n as f64 - mean).abs() <= mean * 0.01), "round robin within 1% of equal: {per_server:?}");
    }
    for sh in runs.iter().filter(|r| r["algorithm"] == "source-hash") {
        assert!(sh["clients"].as_array().unwrap().iter().all(|c| u(&c["servers_seen"]) == 1), "source hash keeps each client on one server: {sh}");
    }
    assert_eq!(results["estimates"]["round-robin.mean_response_ms"]["values"].as_array().unwrap().len(), 3, "{}", results["estimates"]);
    // The FTP half (scripts/test installs vsftpd and curl): ten clients, the paper's four
    // algorithms, three repeats; each vsftpd measured with the processes it forked.
    let ftp = results["raw"]["ftp"].as_array().unwrap_or_else(|| panic!("the FTP half ran: {}", results["raw"]["ftp"]));
    assert_eq!(ftp.len(), 12);
    for r in ftp {
        let clients = r["clients"].as_array().unwrap();
        assert!(clients.len() == 10 && clients.iter().all(|c| u(&c["failed"]) == 0 && u(&c["sessions"]) == 2), "{r}");
        assert!(r["sessions_per_server"].as_array().unwrap().iter().map(u).sum::<u64>() >= 20, "{r}");
        let servers = r["servers"].as_array().unwrap();
        assert!(servers.len() == 4 && servers.iter().all(|s| u(&s["max_rss_kib"]) > 0), "{r}");
        assert!(servers.iter().map(|s| s["cpu_secs"].as_f64().unwrap()).sum::<f64>() > 0.0, "the sessions' CPU is counted: {r}");
        assert!(r["fulcrum"]["cpu_percent"].as_f64().unwrap() > 0.0, "{r}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for table in [
        "Table 1.",
        "Table 2.",
        "Table 3. Maximum memory usage with Round Robin",
        "Table 6. Maximum memory usage with Random",
        "Table 7.",
        "Table 8.",
        "Client 10 (127.0.0.20)",
        "FTP, as Table 4",
        "- FTP sessions per client, per algorithm and repeat: 2",
        "- FTP run length per algorithm and repeat: ",
    ] {
        assert!(report.contains(table), "report.md has {table}");
    }
    // Table 8: every row either ranks with a tested `<` (its Holm-adjusted p beside it), names
    // the pairs further apart that its test separates, or says no two differ.
    let table8 = report.split("Table 8.").nth(1).unwrap().split("\n## ").next().unwrap();
    let rows: Vec<&str> = table8.lines().filter(|l| l.starts_with("| HTTP") || l.starts_with("| FTP")).collect();
    assert_eq!(rows.len(), 11, "six HTTP measures and five FTP: {table8}");
    assert!(rows.iter().all(|l| l.contains(" < (p ") || l.contains("; further apart, separated: ") || l.contains("no significant difference between any two")), "{table8}");
    assert!(report.contains("Holm's correction"), "{report}");
    // Every row of the paper's Table 8 gets its line: agrees, disagrees or not shown.
    let against = report.split("## Table 8 against the paper").nth(1).unwrap_or_else(|| panic!("{report}")).split("\n## ").next().unwrap();
    let rows: Vec<&str> = against.lines().filter(|l| l.starts_with("| HTTP") || l.starts_with("| FTP")).collect();
    assert_eq!(rows.len(), 10, "the paper's ten rows: {against}");
    assert!(rows.iter().all(|l| ["| agrees: ", "| disagrees", "| not shown ("].iter().any(|v| l.contains(v))), "{against}");
    assert!(rows.iter().filter(|l| !l.contains("| agrees: ")).all(|l| l.contains("Why it may differ: ")), "{against}");
    for svg in ["http-servers-cpu-round-robin.svg", "http-servers-memory-random.svg", "ftp-servers-cpu-least-conn.svg", "response-per-client.svg"] {
        assert!(out.join(svg).exists(), "{svg}");
    }
}

#[test]
fn passive_ratio_gives_the_degraded_server_the_smallest_share() {
    // Three repeats (the quick default, named so the figures below stay right if it changes):
    // the report's check that the slow server gets the smallest share asks a t-test, which two
    // repeats (t = 12.7) pass only while their shares are within a point or so of each other. The
    // three run side by side (`--lanes 3`), each with servers of its own: a minute and a half
    // instead of four.
    let (out, results) = lab_with("passive", &["--repeat", "3", "--lanes", "3"]);
    let all = runs(&results);
    // Both degradations ran: the paper's stress inside the slow server's quota, and throttled
    // accepts, where R must see the dropped SYNs.
    for d in ["stress", "throttled-accepts"] {
        assert!(all.iter().any(|r| r["degradation"] == d), "{d} ran");
    }
    let runs: Vec<&Value> = all.iter().filter(|r| r["degradation"] == "throttled-accepts").collect();
    let top = runs.iter().map(|r| r["rate"].as_f64().unwrap()).fold(0.0, f64::max);
    let pr = runs.iter().find(|r| r["algorithm"] == "passive-ratio" && r["rate"].as_f64() == Some(top)).unwrap();
    let share = |n: &str| pr["shares"][n].as_f64().unwrap();
    assert!(share("slow") < share("fast1") && share("slow") < share("fast2"), "{pr}");
    let ratios = pr["controller_ratios"].as_array().unwrap();
    let last = &ratios.last().unwrap()[1];
    assert!(last[2].as_f64().unwrap() < 0.3, "the controller cut the slow server's ratio: {last}");
    for a in ["equal-split", "round-robin", "least-conn", "p2c-ewma", "kernel-passive-ratio"] {
        assert!(runs.iter().any(|r| r["algorithm"] == a), "{a} ran");
    }
    // Three repeats each, reported as a mean with its interval, and a reading that ranks only
    // what the test separates.
    assert_eq!(results["raw"]["repeats"], 3);
    assert_eq!(results["raw"]["lanes"], 3);
    let estimates = results["raw"]["estimates"].as_array().unwrap();
    assert_eq!(estimates.len(), 2 * 2 * 6, "two degradations, two rates each, six configurations (the kernel balancer's too)");
    for e in estimates {
        let values = e["mean_ms"]["values"].as_array().unwrap();
        assert_eq!(values.len(), 3, "{e}");
        let mean = values.iter().map(|v| v.as_f64().unwrap()).sum::<f64>() / 3.0;
        assert!((e["mean_ms"]["mean"].as_f64().unwrap() - mean).abs() < 1e-9, "{e}");
        assert!(e["mean_ms"]["ci95"].as_f64().is_some_and(f64::is_finite), "{e}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for d in ["stress", "throttled-accepts"] {
        let reading = report.split(&format!("## {d}: reading")).nth(1).unwrap_or_else(|| panic!("{d}: {report}")).split("\n## ").next().unwrap();
        assert_eq!(reading.lines().filter(|l| l.starts_with("- ")).count(), 2 * 5, "{reading}");
        assert!(reading.lines().filter(|l| l.starts_with("- ")).all(|l| l.contains("(paired t-test, Holm p = ") || l.contains("no significant difference")), "{reading}");
        let check = format!("{d}: passive-ratio is not slower than the equal split under the heaviest load");
        assert!(results["checks"].as_array().unwrap().iter().any(|c| c["name"] == check.as_str()), "{check}");
    }
    // The run's own check that the machine did not hide the effect, with its figures.
    assert!(results["checks"].as_array().unwrap().iter().any(|c| c["name"].as_str().unwrap().starts_with("the clients and the balancer stayed under 70% of a core")));
    assert!(report.contains("- real servers: each in a network namespace of its own"), "{report}");
    // Figure 2: R and the connection time, two rates three times; above the server's capacity
    // SYNs are dropped, and each unit of R costs about Linux's first SYN retransmission timeout
    // (1 s): more when some need a second (2 s more), less when some connects time out
    // uncounted (5 s).
    let figure2 = &results["raw"]["figure2"];
    let points = figure2["runs"].as_array().unwrap_or_else(|| panic!("figure 2 ran: {figure2}"));
    assert_eq!(points.len(), 6, "{figure2}");
    assert!(points.iter().filter(|p| p["rate"].as_f64() == Some(14.0)).all(|p| p["r"].as_f64().unwrap() > 0.0 && p["connect_ms"].as_f64().unwrap() > 0.0), "{figure2}");
    let slope = figure2["fit_ms_per_r"].as_f64().unwrap_or_else(|| panic!("a fitted line: {figure2}"));
    assert!((400.0..4000.0).contains(&slope), "about 1000 ms per unit of R: {figure2}");
    assert!(report.contains("the paper's Figure 2") && out.join("connection-time-vs-r.svg").exists());

    // compare: a run against itself shows each figure's interval, and no change beyond noise.
    let o = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["lab", "compare"]).arg(&out).arg(&out).output().unwrap();
    let table = String::from_utf8_lossy(&o.stdout);
    let row = table.lines().find(|l| l.starts_with("| throttled-accepts.passive-ratio.40.mean_ms |")).unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains(" ± ") && row.ends_with("| 1.00 | within noise (p = 1.000) |"), "{row}");
}

#[test]
fn haproxy_posts_spread_by_the_weights_with_no_error() {
    let (out, results) = lab("haproxy");
    let runs = runs(&results);
    assert_eq!(runs.len(), 6 * 3 * 2, "three algorithms in two setups, three repeats each (--quick), through Fulcrum and through HAProxy");
    for imp in ["Fulcrum", "HAProxy"] {
        let paper = runs.iter().filter(|r| r["implementation"] == imp && r["concurrency"] == 1000 && r["algorithm"] == "static-rr" && r["weights"] == serde_json::json!([1, 1]));
        assert_eq!(paper.count(), 3, "the paper's setup through {imp}");
    }
    for e in results["raw"]["estimates"].as_array().unwrap() {
        for figure in ["mean_ms", "requests_per_s", "balancer_cpu_s"] {
            assert_eq!(e[figure]["values"].as_array().unwrap().len(), 3, "{e}");
            assert!(e[figure]["ci95"].as_f64().is_some_and(f64::is_finite), "{e}");
        }
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    let reading = report.split("## Reading").nth(1).unwrap().split("\n## ").next().unwrap();
    let lines: Vec<&str> = reading.lines().filter(|l| l.starts_with("- ")).collect();
    // Each pair of algorithms within each implementation, and each algorithm in the two, in
    // each setup, by time and by rate.
    assert_eq!(lines.len(), 2 * (2 * 3 + 3) * 2, "{reading}");
    assert!(lines.iter().all(|l| l.contains("(Welch's t-test, Holm p = ") || l.contains("(paired t-test, Holm p = ") || l.contains("no significant difference")), "{reading}");
    assert_eq!(lines.iter().filter(|l| l.contains("HAProxy round-robin") && l.contains("Fulcrum round-robin")).count(), 2 * 2, "{reading}");
    for r in runs {
        assert_eq!(u(&r["failed"]), 0, "{r}");
        let p: Vec<u64> = r["per_server"].as_array().unwrap().iter().map(u).collect();
        assert_eq!(p.iter().sum::<u64>(), u(&results["raw"]["requests"]), "{r}");
        let first = p[0] as f64 / (p[0] + p[1]) as f64;
        let w: Vec<f64> = r["weights"].as_array().unwrap().iter().map(|w| w.as_f64().unwrap()).collect();
        match r["algorithm"].as_str().unwrap() {
            "least-conn" => assert!(p.iter().all(|&n| n > 0), "{p:?}"),
            _ => assert!((first - w[0] / (w[0] + w[1])).abs() <= 0.01, "{p:?} by weights {w:?}"),
        }
    }
}

#[test]
fn scaling_gives_more_requests_per_second_with_more_servers() {
    // Four repeats, not the quick default of three: the report's checks rank only what Welch's
    // t-test separates, and with few repeats (two leave one degree of freedom, t = 12.7) a spread
    // of a few percent between them leaves even a 25% against 0% failure rate undefended.
    let (a, results) = lab_with("scaling", &["--repeat", "4"]);
    // Four servers give more requests/s at concurrency 50 than one (the report's own check,
    // passed, also asks the t-test, and that no added server is slower beyond noise). Each step
    // alone is the reading's to judge: this test runs beside the other tiers on two cores.
    let high = |n: u64| -> Vec<f64> {
        runs(&results).iter().filter(|r| r["cluster"] == "equal" && u(&r["servers"]) == n && u(&r["concurrency"]) == 50).map(|r| r["requests_per_s"].as_f64().unwrap()).collect()
    };
    let means: Vec<f64> = (1..=4).map(|n| high(n).iter().sum::<f64>() / high(n).len() as f64).collect();
    assert!((1..=4).all(|n| high(n).len() == 4), "four repeats of each size");
    assert!(means[3] > means[0], "mean req/s by servers at concurrency 50: {means:?}");
    assert!(runs(&results).iter().filter(|r| r["cluster"] != "overloaded").all(|r| u(&r["failed"]) == 0));
    // Servers that refuse past eight waiting: one alone fails requests (the article's 62 of 500).
    let overloaded_one: Vec<&Value> = runs(&results).iter().filter(|r| r["cluster"] == "overloaded" && u(&r["servers"]) == 1).collect();
    assert!(overloaded_one.len() == 4 && overloaded_one.iter().all(|r| u(&r["failed"]) > 0), "{overloaded_one:?}");
    // Servers three times apart: 3:1 splits 75/25 on every repeat (the report's checks, passed,
    // also ask that it beats 1:1).
    for r in runs(&results).iter().filter(|r| r["cluster"] == "unequal" && r["weights"] == serde_json::json!([3, 1])) {
        let p: Vec<u64> = r["per_server"].as_array().unwrap().iter().map(u).collect();
        assert!((p[0] as f64 / (p[0] + p[1]) as f64 - 0.75).abs() <= 0.01, "{r}");
    }
    assert!(runs(&results).iter().any(|r| r["cluster"] == "one-worker" && u(&r["servers"]) == 4));

    // compare: a folder against itself gives ratios of 1.00, and no change beyond noise.
    let o = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["lab", "compare"]).arg(&a).arg(&a).output().unwrap();
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(table.lines().any(|l| l.starts_with("| 4servers.1:1:1:1.c50.requests_per_s |") && l.contains(" ± ") && l.ends_with("| 1.00 | within noise (p = 1.000) |")), "{table}");
}

#[test]
fn bad_input_gets_a_clear_error() {
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(args).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stderr).to_string())
    };
    let missing = scratch("lab-missing");
    let (code, err) = run(&["lab", "compare", missing.to_str().unwrap(), missing.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is a lab result folder?") || err.contains("lab result folder"), "{err}");
    let file = missing.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let (code, err) = run(&["lab", "haproxy", "--quick", "--out", file.join("sub").to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot create the result folder"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let (code, err) = run(&["lab", "nonsense"]);
    assert_eq!(code, Some(2), "{err}");
    // The tests' profile builds fulcrum unoptimised (Cargo.toml), whose CPU and memory a full
    // run would publish as Fulcrum's: it is refused before anything starts.
    let version = Command::new(env!("CARGO_BIN_EXE_fulcrum")).arg("--version").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), concat!("fulcrum ", env!("CARGO_PKG_VERSION"), " (opt-level 0)"));
    let (code, err) = run(&["lab", "haproxy", "--out", missing.join("full").to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("fulcrum was built without optimisation (opt-level 0)") && err.contains("--quick runs any build"), "{err}");
    assert!(!missing.join("full").exists(), "no result folder for a refused run");
    assert!(Path::new(env!("CARGO_BIN_EXE_fulcrum")).exists());
}

/// The live processes whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            // Field 4, after the command name in parentheses, is the parent's pid.
            stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok()) == Some(pid)
        })
        .collect()
}

#[test]
fn ctrl_c_stops_the_real_servers_and_fulcrum_it_started() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = scratch("lab-interrupted");
    let lab = Command::new(env!("CARGO_BIN_EXE_fulcrum")).args(["lab", "passive", "--quick", "--out"]).arg(&out).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let started = loop {
        let c = children(lab.id());
        if c.len() >= 4 || std::time::Instant::now() > deadline {
            break c;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(started.len() >= 4, "three real servers and Fulcrum: {started:?}");
    assert!(Command::new("kill").args(["-INT", &lab.id().to_string()]).status().unwrap().success());
    // Bounded: children left running would hold the standard error pipe open, so the lab's end
    // is awaited by its status, and what is left is killed before the pipe is read.
    let mut lab = lab;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        match lab.try_wait().unwrap() {
            Some(status) => break Some(status),
            None if std::time::Instant::now() > deadline => break None,
            None => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    let left: Vec<u32> = started.into_iter().filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists()).collect();
    for p in &left {
        let _ = Command::new("kill").arg(p.to_string()).status();
    }
    let _ = lab.kill();
    let o = lab.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let status = status.unwrap_or_else(|| panic!("the lab did not end within 20 s of SIGINT: {err}"));
    assert!(left.is_empty(), "children left running: {left:?}; {err}");
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("interrupted"), "{err}");
}
