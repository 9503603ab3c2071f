//! Checks of `[service.tls.acme]`: names to order (given or derived from the routes' hosts),
//! each a DNS name a challenge can prove; a directory over HTTPS; a storage directory that
//! exists (on an instance alone: a fleet keeps the state in etcd); for http-01, a plain-HTTP
//! service on the same address to answer the validator; an EAB key that decodes.

use std::net::SocketAddr;

use super::super::schema::{AcmeChallenge, Config, Mode, Service};
use super::{Report, Seg};

/// Names in one certificate: Let's Encrypt's limit.
pub const MOST_NAMES: usize = 100;
/// Contact addresses of an account.
pub const MOST_CONTACTS: usize = 8;

pub(super) fn validate_acme(config: &Config, i: usize, service: &Service, report: &mut Report<'_>) {
    let Some(acme) = service.tls.as_ref().and_then(|t| t.acme.as_ref()) else { return };
    let at = |key: &'static str| vec![Seg::Key("service"), Seg::Index(i), Seg::Key("tls"), Seg::Key("acme"), Seg::Key(key)];
    let names = acme.names_of(service);
    if names.is_empty() {
        report.error(&at("names"), "[service.tls.acme] has no names, and the service's routes match no host to take them from".into(), "set names = [\"www.example.com\"]");
    }
    if names.len() > MOST_NAMES {
        report.error(&at("names"), format!("{} names: a certificate holds at most {MOST_NAMES}", names.len()), "split the names among services");
    }
    for name in &names {
        if let Some(why) = name_problem(name) {
            report.error(&at("names"), format!("{name:?} cannot be ordered: {why}"), "write DNS names such as www.example.com, without wildcards");
        }
    }
    if !acme.directory.starts_with("https://") || acme.directory.parse::<hyper::Uri>().is_err() {
        report.error(
            &at("directory"),
            format!("directory {:?} is not an https:// URL", acme.directory),
            "use the CA's ACME directory URL, e.g. https://acme-v02.api.letsencrypt.org/directory",
        );
    }
    if let Some(ca) = &acme.directory_ca
        && let Err(e) = crate::tls::ca_file(ca)
    {
        report.error(&at("directory_ca"), format!("directory_ca: {e}"), "a PEM file of the CA certificate the directory's HTTPS chains to");
    }
    if acme.contact.len() > MOST_CONTACTS {
        report.error(&at("contact"), format!("{} contacts: at most {MOST_CONTACTS}", acme.contact.len()), "name fewer addresses");
    }
    for c in &acme.contact {
        let address = c.strip_prefix("mailto:").unwrap_or(c);
        if address.split_once('@').is_none_or(|(user, host)| user.is_empty() || host.is_empty() || address.contains([' ', ',', '\n'])) {
            report.error(&at("contact"), format!("contact {c:?} is not an email address"), "write ops@example.com");
        }
    }
    // A fleet keeps the state in etcd (`fleet::acme`): `storage` is for an instance alone.
    let alone = config.fleet.is_none() && report.scope == super::super::Scope::Instance;
    match (&acme.storage, alone) {
        (None, true) => report.error(
            &at("storage"),
            "[service.tls.acme] needs a storage directory for the account and certificates".into(),
            "set storage = \"/var/lib/fulcrum/acme\" (made 0700)",
        ),
        (Some(dir), true) if !std::path::Path::new(dir).is_dir() => {
            report.error(&at("storage"), format!("storage directory {dir} does not exist"), "create it (mkdir -m 700) for the user Fulcrum runs as")
        }
        _ => {}
    }
    if let Some(eab) = &acme.eab {
        use base64::Engine;
        if base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(eab.hmac_key.trim_end_matches('=')).is_err() {
            report.error(&at("eab"), "eab.hmac_key is not base64url".into(), "paste the HMAC key exactly as the CA gave it");
        }
    }
    if let Some(name) = &acme.http01_service {
        let plain = config.services.iter().find(|s| &s.name == name);
        if acme.challenge != AcmeChallenge::Http01 {
            report.error(&at("http01_service"), "http01_service is for challenge = \"http-01\"".into(), "remove it, or set challenge = \"http-01\"");
        } else if !plain.is_some_and(|s| s.enabled && s.mode == Mode::Http && s.tls.is_none()) {
            report.error(
                &at("http01_service"),
                format!("http01_service {name:?} is not an enabled plain-HTTP service of this config"),
                "name a service with mode = \"http\" and no [service.tls]",
            );
        }
    } else if acme.challenge == AcmeChallenge::Http01 && !has_plain_sibling(config, service) {
        report.error(
            &at("challenge"),
            format!("http-01 is answered by a plain-HTTP service on the same address as {}, and there is none", service.listen),
            "add a service with mode = \"http\" and no [service.tls] on the same IP address (port 80), name one with http01_service, or use challenge = \"tls-alpn-01\"",
        );
    }
}

/// Why `name` cannot be ordered with http-01 or tls-alpn-01, if it cannot.
fn name_problem(name: &str) -> Option<&'static str> {
    if name.starts_with("*.") {
        return Some("a wildcard needs the dns-01 challenge, which Fulcrum does not answer");
    }
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Some("an IP address, not a DNS name");
    }
    if name.len() > 253 || !name.contains('.') {
        return Some("not a fully qualified DNS name");
    }
    let label_ok = |l: &str| !l.is_empty() && l.len() <= 63 && !l.starts_with('-') && !l.ends_with('-') && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    (!name.split('.').all(label_ok)).then_some("not a DNS name (letters, digits and hyphens in labels of 63 at most)")
}

/// Whether a plain-HTTP service of `config` listens on the same IP address as `service` (or on
/// every address).
fn has_plain_sibling(config: &Config, service: &Service) -> bool {
    let ip = |s: &Service| s.listen.parse::<SocketAddr>().ok().map(|a| a.ip());
    let Some(own) = ip(service) else { return true };
    config.services.iter().filter(|s| s.enabled && s.mode == Mode::Http && s.tls.is_none()).filter_map(ip).any(|other| other == own || other.is_unspecified())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(services: &str) -> String {
        crate::config::parse(services, "t").err().map(|e| e.to_string()).unwrap_or_default()
    }

    fn service(name: &str, listen: &str, acme: &str) -> String {
        format!("[[service]]\nname = \"{name}\"\nlisten = \"{listen}\"\nmode = \"http\"\n[[service.server]]\naddress = \"127.0.0.1:9\"\n[service.tls.acme]\n{acme}\n")
    }

    #[test]
    fn check_refuses_acme_that_cannot_work_and_says_how_to_fix_it() {
        let dir = std::env::temp_dir().display().to_string();
        let base = format!("directory = \"https://ca.test/dir\"\nstorage = \"{dir}\"\n");
        // No names, and no routes to take them from.
        let e = errors(&service("a", "127.0.0.1:1443", &base));
        assert!(e.contains("has no names"), "{e}");
        // A wildcard, an http:// directory, a storage directory that is not there.
        let e = errors(&service("a", "127.0.0.1:1443", "directory = \"http://ca.test/dir\"\nnames = [\"*.a.test\"]\nstorage = \"/nonexistent/acme\""));
        assert!(e.contains("a wildcard needs the dns-01 challenge"), "{e}");
        assert!(e.contains("is not an https:// URL"), "{e}");
        assert!(e.contains("storage directory /nonexistent/acme does not exist"), "{e}");
        // No storage at all on a standalone instance.
        let e = errors(&service("a", "127.0.0.1:1443", "directory = \"https://ca.test/dir\"\nnames = [\"a.test\"]"));
        assert!(e.contains("needs a storage directory"), "{e}");
        // http-01 without a plain-HTTP service on the same address, then with one.
        let http01 = format!("{base}names = [\"a.test\"]\nchallenge = \"http-01\"");
        let e = errors(&service("a", "127.0.0.1:1443", &http01));
        assert!(e.contains("http-01 is answered by a plain-HTTP service"), "{e}");
        let plain = "[[service]]\nname = \"plain\"\nlisten = \"0.0.0.0:1080\"\nmode = \"http\"\n[[service.server]]\naddress = \"127.0.0.1:9\"\n";
        assert_eq!(errors(&(service("a", "127.0.0.1:1443", &http01) + plain)), "");
        // Or one named, on another address; a name that is not a plain-HTTP service is refused.
        let elsewhere = plain.replace("0.0.0.0:1080", "127.0.0.2:1080");
        let named = |name: &str| service("a", "127.0.0.1:1443", &format!("{http01}\nhttp01_service = \"{name}\"")) + &elsewhere;
        assert!(errors(&(service("a", "127.0.0.1:1443", &http01) + &elsewhere)).contains("http-01 is answered by"));
        assert_eq!(errors(&named("plain")), "");
        assert!(errors(&named("a")).contains("is not an enabled plain-HTTP service"), "{}", errors(&named("a")));
        // Names from the routes' hosts.
        let routed = format!("{}[[service.route]]\nhost = [\"www.a.test\"]\n", service("a", "127.0.0.1:1443", &base));
        assert_eq!(errors(&routed), "");
        let unknown = errors(&service("a", "127.0.0.1:1443", &format!("{base}names = [\"a.test\"]\nrenew = true")));
        assert!(unknown.contains("renew"), "{unknown}");
    }

    #[test]
    fn only_plain_dns_names_can_be_ordered() {
        for ok in ["www.example.com", "a-b.example.co.uk", "x.acme.test"] {
            assert_eq!(name_problem(ok), None, "{ok}");
        }
        for bad in ["*.example.com", "127.0.0.1", "localhost", "-a.example.com", "a..example.com", "a_b.example.com", &format!("{}.com", "a".repeat(64))] {
            assert!(name_problem(bad).is_some(), "{bad}");
        }
    }
}
