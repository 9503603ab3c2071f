//! One record of the audit trail: who changed the config, when, through what, what the change
//! did and whether it took. A standalone instance keeps them in its audit log (`app::audit`), a
//! fleet in etcd (`fleet::write`), in this one shape, so one reader reads both.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::Config;

/// The most bytes of a record's diff: a replaced config of thousands of servers is cut there,
/// with a line that says so, so one record stays a line a log shipper takes.
pub const DIFF_MAX: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub unix_ms: u64,
    /// The same instant in RFC 3339 (UTC), for a reader of the file.
    pub time: String,
    /// Who: `user@address` (basic authentication), `token@address`, the address alone (no
    /// authentication), `signal` for SIGHUP, `fulcrum` for what the process did by itself.
    pub who: String,
    pub source: Source,
    /// The change in a few words (`weight 5 for server 10.0.0.5:80 of web`, `reload`, `save`).
    pub what: String,
    /// The config's TOML before and after, as a unified diff; empty when nothing changed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diff: String,
    pub outcome: Outcome,
    /// What the process answered: what it applied, or why it refused.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// In a fleet: the instance that wrote the change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// In a fleet: the etcd revision the editor saw (`If-Match`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub based_on: Option<i64>,
    /// In a fleet: the service keys the change wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<usize>,
}

/// Through what a change came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The admin API (and so the dashboard): an edit, a reload or a save.
    Api,
    /// The config file: read at start, or a `fulcrum fleet import`.
    File,
    /// SIGHUP (`systemctl reload`): the file read again.
    Signal,
    /// Written to, or applied from, the fleet's etcd.
    Fleet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Applied,
    Refused,
}

impl Record {
    /// A record stamped now, with no diff and no fleet fields.
    pub fn now(who: impl Into<String>, source: Source, what: impl Into<String>, outcome: Outcome, message: impl Into<String>) -> Record {
        let now = crate::clock::since_epoch();
        let time = humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + now).to_string();
        Record {
            unix_ms: now.as_millis() as u64,
            time,
            who: who.into(),
            source,
            what: what.into(),
            diff: String::new(),
            outcome,
            message: message.into(),
            instance: None,
            based_on: None,
            services: None,
        }
    }

    /// A record of `result`: applied with its message, or refused with why.
    pub fn of(who: &str, source: Source, what: impl Into<String>, result: &Result<String, impl std::fmt::Display>) -> Record {
        match result {
            Ok(message) => Record::now(who, source, what, Outcome::Applied, message.clone()),
            Err(e) => Record::now(who, source, what, Outcome::Refused, e.to_string()),
        }
    }

    pub fn with_diff(mut self, diff: String) -> Record {
        self.diff = diff;
        self
    }
}

/// The unified diff from `before` to `after` (two config texts), two lines of context, at most
/// [`DIFF_MAX`] bytes; empty when they are the same.
pub fn diff(before: &str, after: &str, names: (&str, &str)) -> String {
    if before == after {
        return String::new();
    }
    let mut text = similar::TextDiff::from_lines(before, after).unified_diff().context_radius(2).header(names.0, names.1).to_string();
    if text.len() > DIFF_MAX {
        let mut cut = DIFF_MAX;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n... (diff cut at 64 KiB)\n");
    }
    text
}

/// The unified diff from `before` to `after` (two configs) over what differs between them: the
/// process's settings when they changed, and each shared pool and service added, removed or
/// changed, written out alone as `[[pool]]` and `[[service]]` sections. Its cost follows the
/// change, not the config: one weight edited among 1,000 services writes out one service twice,
/// where writing out and diffing both whole configs took most of an edit's 200-300 ms.
pub fn diff_configs(before: &Config, after: &Config, names: (&str, &str)) -> String {
    let d = super::diff(before, after);
    if d.is_empty() {
        return String::new();
    }
    let (mut old, mut new) = (String::new(), String::new());
    if d.global {
        old += &super::to_toml(&before.settings());
        new += &super::to_toml(&after.settings());
    }
    for name in &d.pools {
        old += &section("pool", before.shared(name));
        new += &section("pool", after.shared(name));
    }
    fn services(c: &Config) -> HashMap<&str, &super::Service> {
        c.services.iter().map(|s| (s.name.as_str(), s)).collect()
    }
    let (was, is) = (services(before), services(after));
    for name in d.changed.iter().map(|c| &c.name).chain(&d.added).chain(&d.removed) {
        old += &section("service", was.get(name.as_str()));
        new += &section("service", is.get(name.as_str()));
    }
    diff(&old, &new, names)
}

/// One `[[key]]` section as the config file has it; nothing for `None`.
fn section<T: Serialize>(key: &str, item: Option<&T>) -> String {
    let Some(item) = item else { return String::new() };
    let one: HashMap<&str, [&T; 1]> = HashMap::from([(key, [item])]);
    toml::to_string_pretty(&one).map_or_else(|e| format!("# cannot write {key}: {e}\n"), |t| t + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        super::super::parse(text, "t.toml").unwrap()
    }

    const TWO: &str = "[[service]]\nname = \"a\"\nlisten = \"127.0.0.1:1000\"\n[[service.server]]\naddress = \"127.0.0.1:1001\"\n\
                       [[service]]\nname = \"b\"\nlisten = \"127.0.0.1:2000\"\n[[service.server]]\naddress = \"127.0.0.1:2001\"\n";

    #[test]
    fn a_config_diff_shows_the_changed_service_alone_and_nothing_when_none_changed() {
        let edited = TWO.replace("address = \"127.0.0.1:2001\"\n", "address = \"127.0.0.1:2001\"\nweight = 3\n");
        let d = diff_configs(&config(TWO), &config(&edited), ("before", "after"));
        assert!(d.starts_with("--- before\n+++ after\n"), "{d}");
        assert!(d.contains("-weight = 1\n+weight = 3\n"), "{d}");
        // Service b alone was written out: its lines are numbered from its own start, and a's are not there.
        assert!(d.contains("127.0.0.1:2001") && !d.contains("127.0.0.1:1001"), "an unchanged service is written out: {d}");
        assert_eq!(diff_configs(&config(TWO), &config(TWO), ("before", "after")), "");
    }

    #[test]
    fn a_config_diff_shows_added_and_removed_services_and_changed_settings() {
        let only_a = TWO.split("[[service]]\nname = \"b\"").next().unwrap().to_string();
        let d = diff_configs(&config(TWO), &config(&format!("maxconn = 50\n{only_a}")), ("before", "after"));
        assert!(d.contains("+maxconn = 50\n"), "{d}");
        assert!(d.contains("-name = \"b\"\n"), "the removed service is not shown: {d}");
        let d = diff_configs(&config(&only_a), &config(TWO), ("before", "after"));
        assert!(d.contains("+name = \"b\"\n") && d.lines().skip(2).all(|l| !l.starts_with('-')), "{d}");
    }

    #[test]
    fn a_diff_names_the_lines_that_changed_and_nothing_when_none_did() {
        let d = diff("a = 1\nb = 2\nc = 3\n", "a = 1\nb = 5\nc = 3\n", ("file", "running"));
        assert!(d.starts_with("--- file\n+++ running\n"), "{d}");
        assert!(d.contains("-b = 2\n+b = 5\n"), "{d}");
        assert_eq!(diff("x\n", "x\n", ("a", "b")), "");
    }

    #[test]
    fn a_long_diff_is_cut_with_a_note() {
        let before: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        let d = diff(&before, "", ("a", "b"));
        assert!(d.len() <= DIFF_MAX + 40 && d.ends_with("(diff cut at 64 KiB)\n"), "{}", d.len());
    }

    #[test]
    fn a_record_is_one_json_line_with_its_fields() {
        let r = Record::now("admin@127.0.0.1", Source::Api, "weight 5 for server a of web", Outcome::Applied, "config applied");
        let line = serde_json::to_string(&r).unwrap();
        assert!(!line.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!((v["source"].as_str(), v["outcome"].as_str(), v["who"].as_str()), (Some("api"), Some("applied"), Some("admin@127.0.0.1")));
        assert!(v["time"].as_str().unwrap().ends_with('Z') && v.get("instance").is_none(), "{v}");
    }
}
