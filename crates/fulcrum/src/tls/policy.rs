//! Which protocol versions and cipher suites one side of TLS allows: `min_version`,
//! `max_version` and `cipher_suites`, set the same way on `[service.tls]` (clients) and
//! `server_tls` (servers), turned here into the provider and version list rustls builds with.
//! `check` runs the same function, so a name it does not know or a list that leaves an allowed
//! version without a suite is refused before anything serves.

use std::sync::Arc;

use rustls::SupportedProtocolVersion;
use rustls::crypto::CryptoProvider;

use crate::config::{Protocols, TlsVersion};

/// What rustls builds a side with: the provider (its suites in the order given) and the versions.
pub struct Policy {
    pub provider: Arc<CryptoProvider>,
    pub versions: Vec<&'static SupportedProtocolVersion>,
}

/// Why the versions and suites set cannot serve, with the key at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("min_version {min} is above max_version {max}")]
    Versions { min: TlsVersion, max: TlsVersion },
    #[error("unknown cipher suite {name:?}; the suites are {valid}")]
    UnknownSuite { name: String, valid: String },
    #[error("cipher_suites leaves TLS {version} (allowed by min_version and max_version) no suite; its suites are {valid}")]
    NoSuiteFor { version: TlsVersion, valid: String },
}

impl PolicyError {
    /// The key of the config the error is about.
    pub fn key(&self) -> &'static str {
        match self {
            PolicyError::Versions { .. } => "min_version",
            PolicyError::UnknownSuite { .. } | PolicyError::NoSuiteFor { .. } => "cipher_suites",
        }
    }
}

/// The provider and versions of `protocols`: the suites of `base` named in `cipher_suites`, in
/// that order (every one of `base`'s, in its order, when unset), and the versions from
/// `min_version` to `max_version` (1.2 to 1.3 when unset).
pub fn policy(protocols: Protocols<'_>, base: CryptoProvider) -> Result<Policy, PolicyError> {
    let (min, max) = (protocols.min_version.unwrap_or(TlsVersion::V1_2), protocols.max_version.unwrap_or(TlsVersion::V1_3));
    if min > max {
        return Err(PolicyError::Versions { min, max });
    }
    let allowed: Vec<TlsVersion> = [TlsVersion::V1_3, TlsVersion::V1_2].into_iter().filter(|v| (min..=max).contains(v)).collect();
    let mut provider = base;
    if let Some(names) = protocols.cipher_suites {
        let mut chosen = Vec::with_capacity(names.len());
        for name in names {
            let Some(suite) = provider.cipher_suites.iter().find(|s| names_suite(name, s)) else {
                return Err(PolicyError::UnknownSuite { name: name.clone(), valid: list(&provider, None) });
            };
            if !chosen.iter().any(|c: &rustls::SupportedCipherSuite| c.suite() == suite.suite()) {
                chosen.push(*suite);
            }
        }
        for &version in &allowed {
            if !chosen.iter().any(|s| version_of(s) == version) {
                return Err(PolicyError::NoSuiteFor { version, valid: list(&provider, Some(version)) });
            }
        }
        provider.cipher_suites = chosen;
    }
    let versions = allowed
        .iter()
        .map(|v| match v {
            TlsVersion::V1_3 => &rustls::version::TLS13,
            TlsVersion::V1_2 => &rustls::version::TLS12,
        })
        .collect();
    Ok(Policy { provider: Arc::new(provider), versions })
}

fn version_of(suite: &rustls::SupportedCipherSuite) -> TlsVersion {
    if suite.version() == &rustls::version::TLS13 { TlsVersion::V1_3 } else { TlsVersion::V1_2 }
}

/// rustls's name of a suite (`TLS13_AES_128_GCM_SHA256`,
/// `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`).
fn name_of(suite: &rustls::SupportedCipherSuite) -> &'static str {
    suite.suite().as_str().unwrap_or("unnamed")
}

/// Whether `name` is the suite's, in any case: rustls's name, or for TLS 1.3 IANA's (and
/// OpenSSL's), which says `TLS_` where rustls says `TLS13_`.
fn names_suite(name: &str, suite: &rustls::SupportedCipherSuite) -> bool {
    let own = name_of(suite);
    let iana = own.strip_prefix("TLS13_").map(|rest| format!("TLS_{rest}"));
    name.eq_ignore_ascii_case(own) || iana.is_some_and(|iana| name.eq_ignore_ascii_case(&iana))
}

/// The names of `provider`'s suites (of `version` only, when given), for an error message.
fn list(provider: &CryptoProvider, version: Option<TlsVersion>) -> String {
    let names: Vec<&str> = provider.cipher_suites.iter().filter(|s| version.is_none_or(|v| version_of(s) == v)).map(name_of).collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suites(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn of(min: Option<TlsVersion>, max: Option<TlsVersion>, names: Option<&[String]>) -> Result<Policy, PolicyError> {
        policy(Protocols { min_version: min, max_version: max, cipher_suites: names }, super::super::provider())
    }

    #[test]
    fn unset_allows_both_versions_and_every_suite_in_the_providers_order() {
        let p = of(None, None, None).unwrap();
        assert_eq!(p.versions.len(), 2);
        assert_eq!(p.provider.cipher_suites.len(), super::super::provider().cipher_suites.len());
        assert_eq!(name_of(&p.provider.cipher_suites[0]), "TLS13_AES_128_GCM_SHA256");
    }

    #[test]
    fn named_suites_keep_the_order_given_under_either_spelling() {
        let names = suites(&["TLS_CHACHA20_POLY1305_SHA256", "tls13_aes_256_gcm_sha384", "TLS13_AES_256_GCM_SHA384"]);
        let p = of(Some(TlsVersion::V1_3), None, Some(&names)).unwrap();
        assert_eq!(p.versions, vec![&rustls::version::TLS13]);
        let got: Vec<&str> = p.provider.cipher_suites.iter().map(name_of).collect();
        assert_eq!(got, ["TLS13_CHACHA20_POLY1305_SHA256", "TLS13_AES_256_GCM_SHA384"]);
    }

    #[test]
    fn bad_values_are_refused_with_what_would_do() {
        assert_eq!(of(Some(TlsVersion::V1_3), Some(TlsVersion::V1_2), None).err().unwrap().key(), "min_version");
        let e = of(None, None, Some(&suites(&["TLS_RSA_WITH_RC4_128_SHA"]))).err().unwrap();
        assert!(
            matches!(&e, PolicyError::UnknownSuite { name, valid } if name == "TLS_RSA_WITH_RC4_128_SHA" && valid.contains("TLS13_AES_128_GCM_SHA256") && valid.contains("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384")),
            "{e}"
        );
        // Only TLS 1.3 suites while 1.2 is allowed, and the other way round.
        let e = of(None, None, Some(&suites(&["TLS13_AES_128_GCM_SHA256"]))).err().unwrap();
        assert!(matches!(&e, PolicyError::NoSuiteFor { version: TlsVersion::V1_2, valid } if !valid.contains("TLS13")), "{e}");
        let e = of(Some(TlsVersion::V1_3), None, Some(&suites(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]))).err().unwrap();
        assert!(matches!(e, PolicyError::NoSuiteFor { version: TlsVersion::V1_3, .. }), "{e}");
        assert!(of(None, Some(TlsVersion::V1_2), Some(&suites(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]))).is_ok());
    }
}
