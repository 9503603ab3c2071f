//! `[service.tls.acme]`: a certificate the service obtains from an ACME CA (RFC 8555) and
//! renews by itself (`tls::acme`).

use super::*;

/// `[service.tls.acme]`: the service serves a certificate for `names` that it orders from the
/// CA at `directory`, proving control of each name by `challenge`, and renews before it expires.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acme {
    /// The CA's ACME directory URL (`https://`), e.g. Let's Encrypt's
    /// `https://acme-v02.api.letsencrypt.org/directory`.
    pub directory: String,
    /// A PEM file of the CA certificate the directory's own HTTPS certificate chains to; unset:
    /// the system's roots. For a private or test CA (Pebble).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory_ca: Option<String>,
    /// Email addresses the CA may write to about the account's certificates (0 to 8).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contact: Vec<String>,
    /// The DNS names the certificate is for (1 to 100, no wildcard: the challenges offered
    /// prove one name each); unset: every host name the service's routes match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
    /// The certificate's key: `"ecdsa-p256"` (the default) or `"rsa-2048"`.
    #[serde(default)]
    pub key_type: AcmeKeyType,
    /// How the CA checks that the service answers for each name: `"tls-alpn-01"` (the default)
    /// on the service's own TLS listener, which must be the CA's port 443; `"http-01"` on
    /// port 80 of the names, which a plain-HTTP service of this config (mode = "http", no
    /// TLS) on the same address answers before its routes.
    #[serde(default)]
    pub challenge: AcmeChallenge,
    /// With http-01: the plain-HTTP service that receives the CA's validator, when it is not on
    /// this service's address (behind NAT, or on another address of the host); unset: one on
    /// the same IP address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http01_service: Option<String>,
    /// The directory where the account, the certificates and their keys are kept (made 0700,
    /// files 0600). Required on a standalone instance; a fleet keeps them in etcd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
    /// External Account Binding, for a CA that requires one (ZeroSSL, Google, private CAs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eab: Option<AcmeEab>,
}

/// The key type of an ACME certificate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AcmeKeyType {
    #[default]
    #[serde(rename = "ecdsa-p256")]
    EcdsaP256,
    #[serde(rename = "rsa-2048")]
    Rsa2048,
}

/// The ACME challenge a service answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AcmeChallenge {
    #[default]
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
    #[serde(rename = "http-01")]
    Http01,
}

/// `[service.tls.acme.eab]`: the key id and HMAC key the CA gave for External Account Binding.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcmeEab {
    pub kid: String,
    /// The HMAC key, base64url as CAs hand it out.
    pub hmac_key: String,
}

impl Acme {
    /// The names to order for `service`: `names`, else the host names of its routes; lower
    /// case, without duplicates, in order.
    pub fn names_of(&self, service: &Service) -> Vec<String> {
        let all: Vec<String> = match &self.names {
            Some(names) => names.clone(),
            None => service.routes.iter().flat_map(|r| r.when.host.iter()).cloned().collect(),
        };
        let mut names: Vec<String> = Vec::new();
        for name in all.into_iter().map(|n| n.trim_end_matches('.').to_ascii_lowercase()) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }
}

impl Service {
    /// The names of its ACME certificate (`Acme::names_of`); empty without `[service.tls.acme]`.
    pub fn acme_names(&self) -> Vec<String> {
        self.tls.as_ref().and_then(|t| t.acme.as_ref()).map(|a| a.names_of(self)).unwrap_or_default()
    }
}
