//! The nftables side of kernel mode: the text of a service's table, the counters read back as
//! JSON, and `nft` run as a child process with a bound on its time.
//!
//! One table per service, `ip fulcrum_<service>`, so nothing else on the host is touched and
//! `nft list ruleset` says whose rules these are. It holds:
//! - `nat_prerouting` (hook prerouting, clients the host forwards: the paper's setup) and
//!   `nat_output` (hook output, clients on the host itself), each one rule that DNATs a new
//!   connection to the virtual address through `numgen ... map { ... }` (`split`), or drops it
//!   while no server is usable: a client's SYN retries then reach a server that comes back
//!   within them, where a reset would end the connect at once;
//! - a named counter per server for the SYNs sent to it and one for the SYN-ACKs it answered,
//!   bumped in `count_forward` and `count_output` (SYNs) and `count_forward` and `count_input`
//!   (SYN-ACKs): after DNAT a SYN carries the server's address, and a reply carries it until the
//!   source NAT of postrouting (forwarded) or input (local, priority 100, after the filter's 0)
//!   restores the virtual one. Only connections to the virtual address are counted (`ct
//!   original`), so health checks and direct traffic are not; a retransmitted SYN passes the
//!   hooks again and is counted again, as the paper's R needs.
//!
//! Every change is one `nft -f -` transaction that declares the table (creating what is missing,
//! keeping the counters' values), flushes the chains and fills them again, and deletes the
//! counters of servers that left: the kernel applies all of it or none, and a connection already
//! placed keeps its server through conntrack, whatever the rules say now.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use super::split::Split;

/// The longest an `nft` run may take: it talks to the kernel over netlink and returns in
/// milliseconds, so one that hangs is killed rather than waited on.
const NFT_TIMEOUT: Duration = Duration::from_secs(10);

/// The table of the service `service`.
pub fn table_name(service: &str) -> String {
    format!("fulcrum_{service}")
}

/// The names of the counters of a server: SYNs sent to it, SYN-ACKs it answered.
pub fn counter_names(server: SocketAddrV4) -> (String, String) {
    let tag = format!("{}_{}", server.ip().to_string().replace('.', "_"), server.port());
    (format!("syn_{tag}"), format!("synack_{tag}"))
}

/// What one service's table holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ruleset {
    pub table: String,
    /// The virtual address: the service's `listen`.
    pub vip: SocketAddrV4,
    /// Every server counted, up or not, each once.
    pub counted: Vec<SocketAddrV4>,
    /// The servers the map sends new connections to, by `split`'s indexes.
    pub targets: Vec<SocketAddrV4>,
    pub split: Split,
}

impl Ruleset {
    /// The transaction that makes the table this, from whatever it holds now; `stale` names
    /// counters to delete (their servers left).
    pub fn write(&self, stale: &[String]) -> String {
        let t = &self.table;
        let mut out = format!("table ip {t} {{\n");
        for (syn, synack) in self.counted.iter().map(|&s| counter_names(s)) {
            let _ = writeln!(out, "  counter {syn} {{ }}\n  counter {synack} {{ }}");
        }
        for (chain, kind, hook, priority) in CHAINS {
            let _ = writeln!(out, "  chain {chain} {{ type {kind} hook {hook} priority {priority}; policy accept; }}");
        }
        out.push_str("}\n");
        for (chain, ..) in CHAINS {
            let _ = writeln!(out, "flush chain ip {t} {chain}");
        }
        let dnat = self.dnat();
        let _ = writeln!(out, "add rule ip {t} nat_prerouting {dnat}\nadd rule ip {t} nat_output {dnat}");
        if !self.counted.is_empty() {
            let syn = self.count("syn", ("daddr", "dport"), |(syn, _)| syn);
            let synack = self.count("syn|ack", ("saddr", "sport"), |(_, synack)| synack);
            for (chain, rule) in [("count_forward", &syn), ("count_output", &syn), ("count_forward", &synack), ("count_input", &synack)] {
                let _ = writeln!(out, "add rule ip {t} {chain} {rule}");
            }
        }
        for name in stale {
            let _ = writeln!(out, "delete counter ip {t} {name}");
        }
        out
    }

    /// The transaction that replaces whatever table of this name there is (one an earlier
    /// process left) with this one: a connection it placed keeps its server through conntrack.
    pub fn fresh(&self) -> String {
        format!("{}{}", remove(&self.table), self.write(&[]))
    }

    /// The NAT rule: DNAT by the map, or drop while it is empty.
    fn dnat(&self) -> String {
        let matched = format!("ip daddr {} tcp dport {}", self.vip.ip(), self.vip.port());
        if self.split.is_empty() {
            return format!("{matched} drop");
        }
        let entries: Vec<String> = self
            .split
            .entries
            .iter()
            .filter_map(|e| {
                let to = self.targets.get(e.server)?;
                let range = if e.first == e.last { e.first.to_string() } else { format!("{}-{}", e.first, e.last) };
                Some(format!("{range} : {} . {}", to.ip(), to.port()))
            })
            .collect();
        format!("{matched} dnat ip to numgen {} mod {} map {{ {} }}", self.split.draw.as_str(), self.split.modulus, entries.join(", "))
    }

    /// A counting rule: packets of connections to the virtual address whose flags are `flags`
    /// (of SYN and ACK), counted by the server their address and port fields name (the
    /// destination of a SYN, the source of a SYN-ACK) into the one of its two counters `which`
    /// takes.
    fn count(&self, flags: &str, (addr, port): (&str, &str), which: fn((String, String)) -> String) -> String {
        let by_server: Vec<String> = self.counted.iter().map(|&s| format!("{} . {} : \"{}\"", s.ip(), s.port(), which(counter_names(s)))).collect();
        format!(
            "meta l4proto tcp ct original ip daddr {} ct original proto-dst {} tcp flags & (syn|ack) == {flags} counter name ip {addr} . tcp {port} map {{ {} }}",
            self.vip.ip(),
            self.vip.port(),
            by_server.join(", ")
        )
    }
}

/// The chains of a table: name, type, hook, priority. NAT at -100 (dstnat), so counting at 0
/// (filter) sees the server's address.
const CHAINS: [(&str, &str, &str, i32); 5] = [
    ("nat_prerouting", "nat", "prerouting", -100),
    ("nat_output", "nat", "output", -100),
    ("count_forward", "filter", "forward", 0),
    ("count_output", "filter", "output", 0),
    ("count_input", "filter", "input", 0),
];

/// The transaction that removes the table `table`, whether it exists or not.
pub fn remove(table: &str) -> String {
    format!("add table ip {table}\ndelete table ip {table}\n")
}

/// `nft -j list counters table ...`: the counters' packets by name.
pub fn parse_counters(json: &str) -> Result<BTreeMap<String, u64>, serde_json::Error> {
    #[derive(Deserialize)]
    struct Listing {
        nftables: Vec<Item>,
    }
    /// One object of the listing; `metainfo` and anything else leave `counter` unset.
    #[derive(Deserialize)]
    struct Item {
        counter: Option<Counter>,
    }
    #[derive(Deserialize)]
    struct Counter {
        name: String,
        packets: u64,
    }
    let listing: Listing = serde_json::from_str(json)?;
    Ok(listing.nftables.into_iter().filter_map(|i| i.counter).map(|c| (c.name, c.packets)).collect())
}

/// Why `nft` did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("cannot run {program}: {cause}; mode = \"kernel\" needs nftables' nft command (apt-get install nftables)")]
    Missing { program: String, cause: std::io::Error },
    #[error("cannot run nft: {0}")]
    Spawn(std::io::Error),
    #[error("nft was refused ({said}): mode = \"kernel\" needs CAP_NET_ADMIN; run Fulcrum as root (allow_root = true) or with that capability")]
    NotPermitted { said: String },
    #[error("nft failed ({status}): {said}")]
    Failed { status: std::process::ExitStatus, said: String },
    #[error("nft did not finish within {0:?} and was killed")]
    Timeout(Duration),
    #[error("nft's JSON: {0}")]
    Json(serde_json::Error),
}

impl NftError {
    /// Whether nft said the table is not there (someone removed it; the next write makes it).
    pub fn no_table(&self) -> bool {
        matches!(self, NftError::Failed { said, .. } if said.contains("No such file or directory"))
    }
}

/// Applies the transaction `text` (`nft -f -`); with `check`, only checks it (`nft --check`),
/// which still needs the rights to ask the kernel.
pub async fn apply(text: &str, check: bool) -> Result<(), NftError> {
    let args: &[&str] = if check { &["--check", "-f", "-"] } else { &["-f", "-"] };
    run(args, Some(text)).await.map(drop)
}

/// The packets of every counter of `table`, by name.
pub async fn counters(table: &str) -> Result<BTreeMap<String, u64>, NftError> {
    parse_counters(&run(&["-j", "list", "counters", "table", "ip", table], None).await?).map_err(NftError::Json)
}

/// Runs nft with `args`, `input` on its standard input; what it printed.
async fn run(args: &[&str], input: Option<&str>) -> Result<String, NftError> {
    let program = program();
    let mut child = tokio::process::Command::new(&program)
        .args(args)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|cause| match cause.kind() {
            std::io::ErrorKind::NotFound => NftError::Missing { program: program.display().to_string(), cause },
            _ => NftError::Spawn(cause),
        })?;
    let talk = async {
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin.write_all(text.as_bytes()).await.map_err(NftError::Spawn)?;
        }
        child.wait_with_output().await.map_err(NftError::Spawn)
    };
    let out = tokio::time::timeout(NFT_TIMEOUT, talk).await.map_err(|_| NftError::Timeout(NFT_TIMEOUT))??;
    let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false if said.contains("Operation not permitted") => Err(NftError::NotPermitted { said }),
        false => Err(NftError::Failed { status: out.status, said }),
    }
}

/// `nft` on the PATH, else where Debian and most distributions install it (a PATH without the
/// sbin directories is common for a service's environment).
fn program() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join("nft")).find(|f| f.is_file()));
    on_path.or_else(|| ["/usr/sbin/nft", "/sbin/nft"].map(PathBuf::from).into_iter().find(|f| f.is_file())).unwrap_or_else(|| PathBuf::from("nft"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ruleset(split: Split) -> Ruleset {
        let s = |last: u8| SocketAddrV4::new([10, 0, 1, last].into(), 8080);
        Ruleset { table: table_name("web"), vip: "10.0.0.1:80".parse().unwrap(), counted: vec![s(2), s(3)], targets: vec![s(2), s(3)], split }
    }

    #[test]
    fn the_nat_rules_map_the_ratios_ranges_to_the_servers_in_both_hooks() {
        let text = ruleset(Split::random(&[0.7, 0.3])).write(&[]);
        let rule = "ip daddr 10.0.0.1 tcp dport 80 dnat ip to numgen random mod 10000 map { 0-6999 : 10.0.1.2 . 8080, 7000-9999 : 10.0.1.3 . 8080 }";
        assert!(text.contains(&format!("add rule ip fulcrum_web nat_prerouting {rule}\n")), "{text}");
        assert!(text.contains(&format!("add rule ip fulcrum_web nat_output {rule}\n")), "{text}");
        assert!(text.starts_with("table ip fulcrum_web {\n"));
        assert!(text.contains("chain nat_prerouting { type nat hook prerouting priority -100; policy accept; }"));
    }

    #[test]
    fn a_rotation_takes_turns_one_number_each() {
        let text = ruleset(Split::rotation(&[1, 1])).write(&[]);
        assert!(text.contains("dnat ip to numgen inc mod 2 map { 0 : 10.0.1.2 . 8080, 1 : 10.0.1.3 . 8080 }"), "{text}");
    }

    #[test]
    fn with_no_usable_server_new_connections_are_dropped_and_still_counted() {
        let text = ruleset(Split::random(&[0.0, 0.0])).write(&[]);
        assert!(text.contains("add rule ip fulcrum_web nat_prerouting ip daddr 10.0.0.1 tcp dport 80 drop\n"), "{text}");
        assert!(text.contains("count_forward"));
    }

    #[test]
    fn syns_and_syn_acks_of_the_virtual_address_are_counted_per_server_in_the_hooks_that_see_them() {
        let text = ruleset(Split::random(&[1.0, 1.0])).write(&[]);
        assert!(text.contains("  counter syn_10_0_1_2_8080 { }\n  counter synack_10_0_1_2_8080 { }\n"), "{text}");
        let syn = "meta l4proto tcp ct original ip daddr 10.0.0.1 ct original proto-dst 80 tcp flags & (syn|ack) == syn counter name ip daddr . tcp dport map { 10.0.1.2 . 8080 : \"syn_10_0_1_2_8080\", 10.0.1.3 . 8080 : \"syn_10_0_1_3_8080\" }";
        let synack = "tcp flags & (syn|ack) == syn|ack counter name ip saddr . tcp sport map { 10.0.1.2 . 8080 : \"synack_10_0_1_2_8080\"";
        for chain in ["count_forward", "count_output"] {
            assert!(text.contains(&format!("add rule ip fulcrum_web {chain} {syn}\n")), "{chain}: {text}");
        }
        for chain in ["count_forward", "count_input"] {
            let line = text.lines().find(|l| l.starts_with(&format!("add rule ip fulcrum_web {chain} ")) && l.contains("== syn|ack")).unwrap_or_default();
            assert!(line.contains(synack), "{chain}: {text}");
        }
    }

    #[test]
    fn a_write_flushes_every_chain_and_deletes_the_counters_of_servers_that_left() {
        let text = ruleset(Split::random(&[1.0, 1.0])).write(&["syn_10_0_1_9_8080".into()]);
        for (chain, ..) in CHAINS {
            let flush = text.find(&format!("flush chain ip fulcrum_web {chain}\n")).unwrap();
            assert!(flush < text.find(&format!("add rule ip fulcrum_web {chain} ")).unwrap(), "{text}");
        }
        assert!(text.ends_with("delete counter ip fulcrum_web syn_10_0_1_9_8080\n"), "{text}");
        let fresh = ruleset(Split::random(&[1.0])).fresh();
        assert!(fresh.starts_with("add table ip fulcrum_web\ndelete table ip fulcrum_web\ntable ip fulcrum_web {\n"), "{fresh}");
    }

    #[test]
    fn counters_are_read_from_nfts_json_by_name() {
        let json = r#"{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},
            {"counter": {"family": "ip", "name": "syn_10_0_1_2_8080", "table": "fulcrum_web", "handle": 4, "packets": 42, "bytes": 2520}},
            {"counter": {"family": "ip", "name": "synack_10_0_1_2_8080", "table": "fulcrum_web", "handle": 5, "packets": 40, "bytes": 2400}}]}"#;
        let counts = parse_counters(json).unwrap();
        assert_eq!(counts.get("syn_10_0_1_2_8080"), Some(&42));
        assert_eq!(counts.get("synack_10_0_1_2_8080"), Some(&40));
        assert_eq!(counts.len(), 2);
        assert!(parse_counters("{\"nftables\": [{\"counter\": {\"name\": \"x\"}}]}").is_err(), "a counter without packets is an error, not a zero");
    }

    #[test]
    fn names_say_whose_they_are() {
        assert_eq!(table_name("web-1.a"), "fulcrum_web-1.a");
        assert_eq!(counter_names("192.168.10.7:443".parse().unwrap()), ("syn_192_168_10_7_443".into(), "synack_192_168_10_7_443".into()));
    }
}
