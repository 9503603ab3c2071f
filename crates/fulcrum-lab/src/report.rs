//! What a lab run leaves behind: `report.md` (tables in the papers' layouts), `results.json` (every
//! figure, the checks, the machine and the version) and SVG plots, in one folder; and `compare`,
//! which sets two such folders side by side.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::Serialize;
use serde_json::Value;

use crate::stats::{self, Estimate, Family, welch};

/// Mean, spread and tail of a set of values.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub std: f64,
    pub min: f64,
    pub max: f64,
    pub p50: f64,
    pub p99: f64,
}

impl Summary {
    pub fn of(values: &[f64]) -> Summary {
        if values.is_empty() {
            return Summary::default();
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let mean = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        let pct = |p: f64| v[((p * (n - 1) as f64).round() as usize).min(n - 1)];
        Summary { n, mean, std: var.sqrt(), min: v[0], max: v[n - 1], p50: pct(0.5), p99: pct(0.99) }
    }
}

/// A Markdown table.
pub struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: ToString>(head: impl IntoIterator<Item = S>) -> Table {
        Table { head: head.into_iter().map(|s| s.to_string()).collect(), rows: Vec::new() }
    }

    pub fn row<S: ToString>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(|s| s.to_string()).collect());
    }

    pub fn markdown(&self) -> String {
        let mut s = format!("| {} |\n|{}\n", self.head.join(" | "), " --- |".repeat(self.head.len()));
        for r in &self.rows {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        s
    }
}

/// A sanity check of a run's results, reported and recorded.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

/// Everything one scenario run produced, before it is written.
pub struct Report {
    pub scenario: &'static str,
    pub quick: bool,
    pub seed: u64,
    /// Markdown: the tables and their readings, in order.
    pub body: String,
    /// Flat named figures, the ones `compare` sets side by side.
    pub figures: BTreeMap<String, f64>,
    /// The figures measured over repeats, with every repeat's value: what lets `compare` tell a
    /// change from noise.
    pub estimates: BTreeMap<String, Estimate>,
    pub checks: Vec<Check>,
    /// Every raw figure of the run.
    pub raw: Value,
    /// File name and SVG text of each plot.
    pub plots: Vec<(String, String)>,
    /// How long the run took, set by the lab when the scenario ends.
    pub duration: Option<std::time::Duration>,
    /// Every test the report's verdicts and rankings make, judged together after Holm's
    /// correction when the report is written.
    pub tests: Family,
    /// What the run was made under, by name ("sessions per client", "run length"): what a
    /// reader needs to compare two reports, in the report's head and in results.json.
    pub conditions: Vec<(String, String)>,
    /// How this run departs from the paper it reruns, one item each.
    pub deviations: Vec<String>,
}

impl Report {
    pub fn new(scenario: &'static str, quick: bool, seed: u64) -> Report {
        Report {
            scenario,
            quick,
            seed,
            body: String::new(),
            figures: BTreeMap::new(),
            estimates: BTreeMap::new(),
            checks: Vec::new(),
            raw: Value::Null,
            plots: Vec::new(),
            duration: None,
            tests: Family::default(),
            conditions: Vec::new(),
            deviations: Vec::new(),
        }
    }

    /// One condition of the run, `name: value`.
    pub fn condition(&mut self, name: &str, value: impl ToString) {
        self.conditions.push((name.to_string(), value.to_string()));
    }

    /// One way the run departs from the paper.
    pub fn deviation(&mut self, text: &str) {
        self.deviations.push(text.to_string());
    }

    /// The report's Markdown: the head (version, commit, machine, conditions, deviations and the
    /// family of tests), the body with every verdict rendered after Holm's correction, the checks.
    pub fn markdown(&self, machine: &Value, commit: &Value) -> String {
        let mode = if self.quick { "quick" } else { "full" };
        let mut md = format!("# Fulcrum lab: `{}` ({mode} run, seed {})\n\n", self.scenario, self.seed);
        let _ = write!(
            md,
            "Fulcrum {} at commit {} on {} ({} cores, Linux {}){}. Every figure is in `results.json`.\n\n",
            env!("CARGO_PKG_VERSION"),
            commit_text(commit),
            machine["cpu"].as_str().unwrap_or("?"),
            machine["cores"],
            machine["kernel"].as_str().unwrap_or("?"),
            self.duration.map_or_else(String::new, |d| format!("; the run took {}", humantime::format_duration(std::time::Duration::from_secs(d.as_secs())))),
        );
        if !self.conditions.is_empty() {
            md.push_str("Run conditions:\n\n");
            for (name, value) in &self.conditions {
                let _ = writeln!(md, "- {name}: {value}");
            }
            md.push('\n');
        }
        if !self.deviations.is_empty() {
            md.push_str("Deviations from the paper:\n\n");
            for d in &self.deviations {
                let _ = writeln!(md, "- {d}");
            }
            md.push('\n');
        }
        if !self.tests.is_empty() {
            let _ = write!(
                md,
                "The verdicts and rankings below make {}. Each is judged after Holm's correction over all of them (at most a 5% \
                 chance of any false claim in this report); \"Holm p\" is the adjusted p-value, \"raw p\" the test's own.\n\n",
                self.tests.summary()
            );
        }
        md.push_str(&self.tests.render(&self.body));
        md.push_str("## Checks\n\n");
        for c in &self.checks {
            let _ = writeln!(md, "- {} **{}**: {}", if c.passed { "PASS" } else { "FAIL" }, c.name, c.detail);
        }
        md
    }

    pub fn section(&mut self, title: &str, text: &str) {
        let _ = write!(self.body, "## {title}\n\n{text}\n\n");
    }

    pub fn check(&mut self, name: &str, passed: bool, detail: String) {
        self.checks.push(Check { name: name.to_string(), passed, detail });
    }

    pub fn figure(&mut self, name: impl Into<String>, value: f64) {
        self.figures.insert(name.into(), value);
    }

    /// A figure measured over repeats: its mean among the figures, and its repeats for `compare`.
    pub fn estimate(&mut self, name: impl Into<String>, e: &Estimate) {
        let name = name.into();
        self.figures.insert(name.clone(), e.mean);
        self.estimates.insert(name, e.clone());
    }

    pub fn plot(&mut self, file: &str, title: &str, svg: String) {
        let _ = write!(self.body, "![{title}]({file})\n\n");
        self.plots.push((file.to_string(), svg));
    }

    /// Writes report.md, results.json and the plots into `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let machine = machine();
        let commit = commit();
        let md = self.markdown(&machine, &commit);
        let json = serde_json::json!({
            "scenario": self.scenario,
            "mode": if self.quick { "quick" } else { "full" },
            "seed": self.seed,
            "fulcrum_version": env!("CARGO_PKG_VERSION"),
            "commit": commit,
            "conditions": self.conditions.iter().cloned().collect::<BTreeMap<_, _>>(),
            "deviations": self.deviations,
            "duration_secs": self.duration.map(|d| d.as_secs_f64()),
            "machine": machine,
            "figures": self.figures,
            "estimates": self.estimates,
            "tests": self.tests.record(),
            "checks": self.checks,
            "raw": self.raw,
        });
        write(dir, "report.md", &md)?;
        write(dir, "results.json", &serde_json::to_string_pretty(&json)?)?;
        for (name, svg) in &self.plots {
            write(dir, name, svg)?;
        }
        Ok(())
    }
}

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// The commit of the source tree the lab was built from, and whether that tree had changes not
/// committed, read from git when the run is written (null where git or the tree is missing): a
/// report must say which code made it.
fn commit() -> Value {
    let dir = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        std::process::Command::new("git").arg("-C").arg(dir).args(args).output().ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "HEAD"]) {
        Some(hash) => serde_json::json!({ "hash": hash, "dirty": git(&["status", "--porcelain"]).map(|s| !s.is_empty()) }),
        None => Value::Null,
    }
}

/// "`0123abcd`", "`0123abcd` (with changes not committed)" or "unknown".
fn commit_text(commit: &Value) -> String {
    match commit["hash"].as_str() {
        Some(hash) => {
            let short = &hash[..hash.len().min(12)];
            match commit["dirty"].as_bool() {
                Some(true) => format!("`{short}` (with changes not committed)"),
                Some(false) => format!("`{short}`"),
                None => format!("`{short}` (changes unknown)"),
            }
        }
        None => "unknown".into(),
    }
}

/// The machine a run was made on.
fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo.lines().find_map(|l| l.strip_prefix("model name")).map(|v| v.trim_start_matches([' ', '\t', ':']).to_string());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).ok();
    let memory_kib =
        std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| m.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.split_whitespace().next()?.parse::<u64>().ok());
    serde_json::json!({
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cpu": cpu,
        "kernel": kernel,
        "memory_kib": memory_kib,
    })
}

/// `fulcrum lab compare A B`: the figures of two runs side by side, with B/A; for a figure both
/// runs measured over repeats, its interval in each and whether the change is beyond noise
/// (Welch's t-test at the 5% level).
pub fn compare(a: &Path, b: &Path) -> anyhow::Result<String> {
    let (ja, jb) = (load(a)?, load(b)?);
    let fa = ja["figures"].as_object().cloned().unwrap_or_default();
    let fb = jb["figures"].as_object().cloned().unwrap_or_default();
    let mut keys: Vec<&String> = fa.keys().chain(fb.keys()).collect();
    keys.sort();
    keys.dedup();
    let name = |j: &Value, p: &Path| format!("{} ({}, {})", p.display(), j["scenario"].as_str().unwrap_or("?"), j["mode"].as_str().unwrap_or("?"));
    // Rebuilt from the repeats' values, so a run of one repeat (no interval) reads as such.
    let repeats = |j: &Value, k: &str| -> Option<Estimate> {
        let values: Vec<f64> = j["estimates"][k]["values"].as_array()?.iter().filter_map(Value::as_f64).collect();
        (!values.is_empty()).then(|| Estimate::of(&values))
    };
    let mut t = Table::new(["figure".to_string(), name(&ja, a), name(&jb, b), "B/A".to_string(), "change".to_string()]);
    for k in keys {
        let va = fa.get(k).and_then(Value::as_f64);
        let vb = fb.get(k).and_then(Value::as_f64);
        let ratio = match (va, vb) {
            (Some(x), Some(y)) if x != 0.0 => format!("{:.2}", y / x),
            _ => "-".into(),
        };
        let (ea, eb) = (repeats(&ja, k), repeats(&jb, k));
        let show = |v: Option<f64>, e: &Option<Estimate>| match (v, e) {
            (_, Some(e)) if e.ci95.is_finite() => format!("{} ± {}", fmt(e.mean), fmt(e.ci95)),
            (Some(v), _) => fmt(v),
            _ => "-".into(),
        };
        let change = match (&ea, &eb) {
            (Some(x), Some(y)) if x.n() >= 2 && y.n() >= 2 => {
                let c = welch(x, y);
                format!("{} ({})", if c.significant { "beyond noise" } else { "within noise" }, stats::p_text(c.p))
            }
            _ => "no repeats to tell".into(),
        };
        t.row([k.clone(), show(va, &ea), show(vb, &eb), ratio, change]);
    }
    Ok(t.markdown())
}

fn load(dir: &Path) -> anyhow::Result<Value> {
    let path = dir.join("results.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {} (is {} a lab result folder?)", path.display(), dir.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))
}

/// A figure with as many decimals as its size needs.
pub fn fmt(v: f64) -> String {
    match v.abs() {
        x if x >= 100.0 || x == 0.0 => format!("{v:.0}"),
        x if x >= 10.0 => format!("{v:.1}"),
        x if x >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_says_commit_conditions_deviations_and_tests() {
        let mut r = Report::new("demo", true, 1);
        r.condition("sessions per client", 2);
        r.deviation("loopback clients");
        let (a, b) = (Estimate::of(&[1.0, 2.0, 3.0]), Estimate::of(&[1.5, 2.5, 3.5]));
        let v = r.tests.verdict("a", &a, "b", &b, stats::Design::Paired, "faster", " ms");
        r.section("Reading", &v);
        let commit = serde_json::json!({"hash": "0123456789abcdef", "dirty": true});
        let md = r.markdown(&serde_json::json!({"cpu": "x", "cores": 2, "kernel": "6"}), &commit);
        assert!(md.contains("at commit `0123456789ab` (with changes not committed)"), "{md}");
        assert!(md.contains("Run conditions:\n\n- sessions per client: 2\n"), "{md}");
        assert!(md.contains("Deviations from the paper:\n\n- loopback clients\n"), "{md}");
        assert!(md.contains("1 test, 1 significant at p < 0.05 alone, 1 after Holm's correction"), "{md}");
        // The same shift on every repeat: exact, so p = 0.
        assert!(md.contains("a is faster than b (paired t-test, Holm p < 0.001, raw p < 0.001)"), "{md}");
        assert_eq!(commit_text(&Value::Null), "unknown");
    }

    /// The reports in docs/lab/ are published as Fulcrum's figures: each is a full run of a
    /// committed tree, Fulcrum and the lab's clients built optimised.
    #[test]
    fn the_published_reports_are_full_runs_of_an_optimised_build() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/lab");
        let mut scenarios = Vec::new();
        for entry in std::fs::read_dir(&docs).unwrap() {
            let results = entry.unwrap().path().join("results.json");
            if !results.exists() {
                continue;
            }
            let json: Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
            let at = results.display();
            assert_eq!(json["mode"], "full", "{at}");
            assert_eq!(json["commit"]["dirty"], false, "{at}: made from a tree with changes not committed");
            assert_eq!(json["conditions"]["build"], "Fulcrum at opt-level 3, the lab's clients at opt-level 3", "{at}");
            scenarios.push(json["scenario"].as_str().unwrap().to_string());
        }
        scenarios.sort();
        assert_eq!(scenarios, ["haproxy", "java-slb", "passive", "scaling"]);
    }

    #[test]
    fn summary_of_known_values() {
        let s = Summary::of(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!((s.n, s.mean, s.min, s.max), (4, 2.5, 1.0, 4.0));
        assert!((s.std - 1.118).abs() < 0.001);
        assert_eq!(Summary::of(&[]).n, 0);
    }

    #[test]
    fn compare_sets_two_runs_side_by_side() {
        let dir = std::env::temp_dir().join(format!("fulcrum-lab-compare-{}", std::process::id()));
        for (name, v) in [("a", 100.0), ("b", 150.0)] {
            let mut r = Report::new("haproxy", true, 1);
            r.figure("rps", v);
            r.write(&dir.join(name)).unwrap();
        }
        let t = compare(&dir.join("a"), &dir.join("b")).unwrap();
        assert!(t.contains("| rps | 100 | 150 | 1.50 | no repeats to tell |"), "{t}");
        assert!(compare(&dir.join("a"), &dir.join("none")).unwrap_err().to_string().contains("lab result folder"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn compare_tells_a_change_from_noise() {
        let dir = std::env::temp_dir().join(format!("fulcrum-lab-compare-noise-{}", std::process::id()));
        for (name, rps, ms) in [("a", [100.0, 102.0, 98.0], [10.0, 14.0, 12.0]), ("b", [150.0, 151.0, 149.0], [11.0, 15.0, 10.0])] {
            let mut r = Report::new("haproxy", true, 1);
            r.estimate("rps", &Estimate::of(&rps));
            r.estimate("ms", &Estimate::of(&ms));
            r.write(&dir.join(name)).unwrap();
        }
        let t = compare(&dir.join("a"), &dir.join("b")).unwrap();
        // 100 ± 2 (sd 2, t(0.975, 2) = 4.303: 4.97) against 150 ± 2.48: beyond noise.
        assert!(t.contains("| rps | 100 ± 4.97 | 150 ± 2.48 | 1.50 | beyond noise (p < 0.001) |"), "{t}");
        assert!(t.lines().any(|l| l.starts_with("| ms |") && l.contains("within noise")), "{t}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
