//! The balancing algorithms by name: one line each in [`registry!`] below, naming the entry its
//! file defines ([`Registered`], `entry.rs`: what it is and how to make one). The config reads the names,
//! `GET /api/algorithms` and the dashboard's lists show what each is, and `live` builds the
//! balancer of a pool from the same entry, so adding an algorithm is its file, its line here and
//! its tests.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Balancer;
use super::entry::Tuning;
pub use super::entry::{About, Registered};
use crate::mode::Mode;

/// `Variant => entry`: the enum of algorithms, the list of them in the dashboard's order, and the
/// lookups by name, all from one list.
macro_rules! registry {
    ($($(#[$doc:meta])* $variant:ident => $entry:path,)*) => {
        /// The balancing algorithm of a service.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Algorithm {
            $($(#[$doc])* $variant,)*
        }

        impl Algorithm {
            /// Every algorithm, in the order the dashboard offers them.
            pub const ALL: &[Algorithm] = &[$(Algorithm::$variant,)*];
            /// Their names in the config, in the same order.
            pub const NAMES: &[&str] = &[$($entry.about.name,)*];

            /// Its entry.
            pub fn registered(self) -> &'static Registered {
                match self {
                    $(Algorithm::$variant => &$entry,)*
                }
            }
        }
    };
}

registry! {
    RoundRobin => super::round_robin::ROUND_ROBIN,
    StaticRr => super::static_rr::STATIC_RR,
    Random => super::random::RANDOM,
    LeastConn => super::least_conn::LEAST_CONN,
    SourceHash => super::source_hash::SOURCE_HASH,
    PassiveRatio => super::passive_ratio::PASSIVE_RATIO,
    P2cEwma => super::p2c_ewma::P2C_EWMA,
    /// HTTP: Maglev over the request path (and query, with `hash_query`).
    UriHash => super::source_hash::URI_HASH,
    /// HTTP: Maglev over the value of `hash_header`.
    HeaderHash => super::source_hash::HEADER_HASH,
    /// HTTP: the server named by the affinity cookie, round robin for a client without one.
    Cookie => super::round_robin::COOKIE,
}

impl Algorithm {
    pub fn as_str(self) -> &'static str {
        self.about().name
    }

    pub fn about(self) -> About {
        self.registered().about
    }

    /// Whether it serves a service of `mode`.
    pub fn serves(self, mode: Mode) -> bool {
        self.about().modes.contains(&mode)
    }

    /// A new balancer of this algorithm, for one pool.
    pub fn build(self, tuning: &Tuning) -> Box<dyn Balancer> {
        (self.registered().build)(tuning)
    }

    /// The algorithm named `name` in the config.
    pub fn named(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.iter().copied().find(|a| a.as_str() == name)
    }
}

impl Serialize for Algorithm {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Algorithm {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Algorithm, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Algorithm::named(&name).ok_or_else(|| serde::de::Error::unknown_variant(&name, Algorithm::NAMES))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_is_listed_once_under_the_name_the_config_reads() {
        let mut names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.as_str()).collect();
        for &a in Algorithm::ALL {
            let read: Algorithm = serde_json::from_value(serde_json::json!(a.as_str())).unwrap();
            assert_eq!(read, a);
            assert_eq!(serde_json::to_value(a).unwrap(), serde_json::json!(a.as_str()));
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Algorithm::ALL.len());
        assert_eq!(Algorithm::NAMES.len(), Algorithm::ALL.len());
    }

    #[test]
    fn an_unknown_name_is_refused_naming_the_known_ones() {
        let e = serde_json::from_value::<Algorithm>(serde_json::json!("fastest")).unwrap_err().to_string();
        assert!(e.contains("unknown variant `fastest`") && e.contains("round-robin") && e.contains("cookie"), "{e}");
    }

    #[test]
    fn each_entry_builds_a_balancer() {
        let pool = crate::balance::testing::FakePool::with_weights(&[1, 1]);
        for &a in Algorithm::ALL {
            let b = a.build(&Tuning { delta: 0.1, slot: std::time::Duration::from_secs(1), window_slots: 3, min_samples: 10 });
            b.update(&pool);
            assert!(b.pick(&crate::balance::testing::FakePool::pick(&[]), &pool).is_some(), "{a:?}");
        }
    }
}
