//! The balancing algorithms by name, and what each is: the modes it serves, whether it hashes,
//! and a line that says how it picks. One table ([`Algorithm::about`]) serves validation,
//! `GET /api/algorithms` and the dashboard's lists; the implementations are `balance`'s.

use serde::{Deserialize, Serialize};

use super::Mode;

/// The balancing algorithm of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Algorithm {
    RoundRobin,
    StaticRr,
    Random,
    LeastConn,
    SourceHash,
    PassiveRatio,
    P2cEwma,
    /// HTTP: Maglev over the request path (and query, with `hash_query`).
    UriHash,
    /// HTTP: Maglev over the value of `hash_header`.
    HeaderHash,
    /// HTTP: the server named by the affinity cookie, round robin for a client without one.
    Cookie,
}

/// What an algorithm is, as `GET /api/algorithms` says it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct About {
    /// Its name in the config.
    pub name: &'static str,
    /// Its name for people (the dashboard's lists).
    pub title: &'static str,
    /// The service modes it serves.
    pub modes: &'static [Mode],
    /// It maps a key (client address, path, header) to a server through a table.
    pub hashes: bool,
    pub description: &'static str,
}

const EVERY_MODE: &[Mode] = &[Mode::Tcp, Mode::Http, Mode::Ftp];
const HTTP: &[Mode] = &[Mode::Http];

impl Algorithm {
    /// Every algorithm, in the order the dashboard offers them.
    pub const ALL: [Algorithm; 10] = [
        Algorithm::RoundRobin,
        Algorithm::StaticRr,
        Algorithm::Random,
        Algorithm::LeastConn,
        Algorithm::SourceHash,
        Algorithm::PassiveRatio,
        Algorithm::P2cEwma,
        Algorithm::UriHash,
        Algorithm::HeaderHash,
        Algorithm::Cookie,
    ];

    pub fn as_str(self) -> &'static str {
        self.about().name
    }

    pub fn about(self) -> About {
        let (name, title, modes, hashes, description) = match self {
            Algorithm::RoundRobin => {
                ("round-robin", "Round robin", EVERY_MODE, false, "each server in turn, as often as its weight says (smooth weighted rotation); a server coming back starts afresh")
            }
            Algorithm::StaticRr => (
                "static-rr",
                "Static round robin (weights)",
                EVERY_MODE,
                false,
                "a fixed weighted sequence built when a weight or state changes, walked by one cursor (HAProxy's static-rr)",
            ),
            Algorithm::Random => ("random", "Random", EVERY_MODE, false, "a server drawn at random in proportion to its weight"),
            Algorithm::LeastConn => ("least-conn", "Least connection", EVERY_MODE, false, "the server with the fewest connections in flight per unit of weight; equals in turn"),
            Algorithm::SourceHash => (
                "source-hash",
                "Source IP hash",
                EVERY_MODE,
                true,
                "the client's address hashed onto a Maglev table: a client keeps its server, and a server leaving moves only its own clients",
            ),
            Algorithm::PassiveRatio => (
                "passive-ratio",
                "Passive measurement (SYN / SYN-ACK ratio)",
                EVERY_MODE,
                false,
                "traffic ratios that move away from the server whose connects fail or lag most, measured from the SYNs sent and SYN-ACKs received",
            ),
            Algorithm::P2cEwma => (
                "p2c-ewma",
                "Power of two choices, peak EWMA",
                EVERY_MODE,
                false,
                "the less loaded of two servers drawn at random, load being the peak EWMA of connect time times connections in flight",
            ),
            Algorithm::UriHash => {
                ("uri-hash", "URI hash (HTTP)", HTTP, true, "the request's path (and query, with hash_query) hashed onto a Maglev table: a path keeps its server, for caches")
            }
            Algorithm::HeaderHash => {
                ("header-hash", "Header hash (HTTP)", HTTP, true, "the value of the hash_header request header hashed onto a Maglev table; the client's address without it")
            }
            Algorithm::Cookie => (
                "cookie",
                "Cookie affinity (HTTP)",
                HTTP,
                false,
                "the server the affinity cookie names while it is usable; round robin for a client without one, which then gets the cookie",
            ),
        };
        About { name, title, modes, hashes, description }
    }

    /// Whether it serves a service of `mode`.
    pub fn serves(self, mode: Mode) -> bool {
        self.about().modes.contains(&mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_is_listed_once_under_the_name_the_config_reads() {
        let mut names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.as_str()).collect();
        for a in Algorithm::ALL {
            let read: Algorithm = serde_json::from_value(serde_json::json!(a.as_str())).unwrap();
            assert_eq!(read, a);
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Algorithm::ALL.len());
    }
}
