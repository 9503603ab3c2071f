//! Authentication of admin requests: a bearer token read from a file, or HTTP basic with an
//! Argon2 password hash. Off only on a loopback listener with nothing configured (validation
//! refuses any other address without it). Verified basic credentials are remembered, so a
//! dashboard polling every second does not pay for an Argon2 hash each time.
//!
//! A password costs an Argon2 hash to check, so checking must not let wrong passwords take the
//! CPU from the traffic: hashes run on a few threads off the runtime's ([`hashers`]), and an
//! address whose passwords keep failing waits longer and longer before its next one is hashed
//! ([`throttle`]). Tokens are compared in constant time at no cost and, at 16 characters or
//! more, cannot be guessed, so only passwords are throttled.

mod hashers;
mod throttle;

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use argon2::password_hash::{PasswordHash, PasswordVerifier};
use base64::Engine;
use subtle::ConstantTimeEq;

use crate::config::Admin;

#[derive(Default)]
pub struct Auth {
    token: Option<String>,
    basic: Option<(String, String)>,
    /// `Authorization` header values already verified against the password hash.
    verified: Mutex<HashSet<String>>,
    hashers: hashers::Hashers,
    throttle: Mutex<throttle::Throttle>,
}

/// The answer to a request's credentials.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Accepted,
    Refused,
    /// Not checked: the client's address must wait this long after its failures.
    Throttled(Duration),
    /// Not checked: as many passwords are being checked as the hashers take.
    Busy,
}

/// Why the configured credentials cannot be used, or a password cannot be hashed. The messages
/// include their causes' text, so causes are not also returned as `source()`.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot read token_file {file}: {cause}")]
    TokenFile { file: String, cause: std::io::Error },
    #[error("password_hash is not a valid PHC string: {0}")]
    PasswordHash(argon2::password_hash::Error),
    #[error("{0}")]
    Hash(argon2::password_hash::Error),
}

/// Most distinct verified credentials remembered (a few browsers and scripts).
const REMEMBER: usize = 32;

impl Auth {
    pub fn from_config(admin: &Admin) -> Result<Auth, AuthError> {
        let token = match &admin.token_file {
            Some(f) => Some(std::fs::read_to_string(f).map_err(|cause| AuthError::TokenFile { file: f.clone(), cause })?.trim().to_string()),
            None => None,
        };
        let basic = match (&admin.user, &admin.password_hash) {
            (Some(u), Some(h)) => {
                PasswordHash::new(h).map_err(AuthError::PasswordHash)?;
                Some((u.clone(), h.clone()))
            }
            _ => None,
        };
        Ok(Auth { token, basic, ..Auth::default() })
    }

    pub fn required(&self) -> bool {
        self.token.is_some() || self.basic.is_some()
    }

    /// Whether an `Authorization` header value sent from `client` is accepted. A password is
    /// hashed only when the client's address is not waiting and the hashers have room.
    pub async fn check(&self, header: Option<&str>, client: IpAddr) -> Verdict {
        if !self.required() {
            return Verdict::Accepted;
        }
        let Some(value) = header else { return Verdict::Refused };
        let token_matches = |given: &str| self.token.as_ref().is_some_and(|t| bool::from(t.as_bytes().ct_eq(given.as_bytes())));
        let (scheme, credentials) = value.trim().split_once(' ').unwrap_or((value, ""));
        // Schemes are case-insensitive (RFC 9110 11.1).
        if scheme.eq_ignore_ascii_case("bearer") {
            return verdict(token_matches(credentials.trim()));
        }
        if !scheme.eq_ignore_ascii_case("basic") {
            return Verdict::Refused;
        }
        let Some((user, password)) = basic_credentials(credentials) else { return Verdict::Refused };
        // A browser can only send basic credentials from its own prompt: with a token configured,
        // the token as the password (any user name) is accepted too.
        if token_matches(&password) {
            return Verdict::Accepted;
        }
        let Some((want_user, hash)) = &self.basic else { return Verdict::Refused };
        if self.verified.lock().unwrap_or_else(PoisonError::into_inner).contains(value) {
            return Verdict::Accepted;
        }
        let Some(place) = self.hashers.enter() else { return Verdict::Busy };
        if let Err(wait) = self.throttle().begin(client, crate::clock::timer_now()) {
            return Verdict::Throttled(wait);
        }
        // Recorded when dropped, so a request abandoned while its hash runs counts as a failure
        // and never leaves its address marked as being checked.
        let mut attempt = Attempt { auth: self, client, accepted: false };
        // The hash runs even for a wrong user name, so the time taken does not tell user names apart.
        let user_matches = bool::from(user.as_bytes().ct_eq(want_user.as_bytes()));
        let hash = hash.clone();
        let password_matches =
            place.run(move || PasswordHash::new(&hash).is_ok_and(|parsed| argon2::Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok())).await;
        attempt.accepted = user_matches && password_matches == Some(true);
        if attempt.accepted {
            let mut v = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
            if v.len() >= REMEMBER {
                v.clear();
            }
            v.insert(value.to_string());
        }
        verdict(attempt.accepted)
    }

    fn throttle(&self) -> std::sync::MutexGuard<'_, throttle::Throttle> {
        // The table stays consistent between statements, so a panic elsewhere leaves it usable.
        self.throttle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One password check admitted by the throttle; its outcome is recorded when it ends.
struct Attempt<'a> {
    auth: &'a Auth,
    client: IpAddr,
    accepted: bool,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        let mut throttle = self.auth.throttle();
        if self.accepted {
            throttle.succeeded(self.client);
        } else {
            throttle.failed(self.client, crate::clock::timer_now());
        }
    }
}

fn verdict(accepted: bool) -> Verdict {
    if accepted { Verdict::Accepted } else { Verdict::Refused }
}

/// Who sent an accepted request, for the fleet's audit: the basic user, or how it
/// authenticated, at its address. Only called after `check` accepted the header.
pub fn who(header: Option<&str>, client: IpAddr) -> String {
    let (scheme, credentials) = header.map(|v| v.trim().split_once(' ').unwrap_or((v, ""))).unwrap_or_default();
    if scheme.eq_ignore_ascii_case("basic")
        && let Some((user, _)) = basic_credentials(credentials)
    {
        return format!("{user}@{client}");
    }
    if scheme.eq_ignore_ascii_case("bearer") { format!("token@{client}") } else { client.to_string() }
}

/// User and password from the base64 part of a basic `Authorization` header.
fn basic_credentials(b64: &str) -> Option<(String, String)> {
    let raw = base64::engine::general_purpose::STANDARD.decode(b64.trim()).ok()?;
    let (user, password) = String::from_utf8(raw).ok()?.split_once(':').map(|(u, p)| (u.to_string(), p.to_string()))?;
    Some((user, password))
}

/// An Argon2id hash of `password` in PHC form, for `[admin] password_hash`.
pub fn hash_password(password: &str) -> Result<String, AuthError> {
    use argon2::password_hash::{PasswordHasher, SaltString, rand_core::OsRng};
    let salt = SaltString::generate(&mut OsRng);
    argon2::Argon2::default().hash_password(password.as_bytes(), &salt).map(|h| h.to_string()).map_err(AuthError::Hash)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    const HERE: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn basic(credentials: &str) -> String {
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(credentials))
    }

    fn with_password(password: &str) -> Auth {
        let hash = hash_password(password).unwrap();
        let admin = Admin { listen: Some("0.0.0.0:9090".into()), user: Some("admin".into()), password_hash: Some(hash), ..Admin::default() };
        Auth::from_config(&admin).unwrap()
    }

    fn with_token(token: &str) -> Auth {
        let file = std::env::temp_dir().join(format!("fulcrum-token-{}-{token}", std::process::id()));
        std::fs::write(&file, format!("{token}\n")).unwrap();
        let admin = Admin { listen: Some("0.0.0.0:9090".into()), token_file: Some(file.display().to_string()), ..Admin::default() };
        let auth = Auth::from_config(&admin).unwrap();
        std::fs::remove_file(&file).unwrap();
        auth
    }

    #[tokio::test]
    async fn basic_credentials_are_checked_against_the_argon2_hash() {
        let auth = with_password("s3cret");
        let good = basic("admin:s3cret");
        assert_eq!(auth.check(Some(&good), HERE).await, Verdict::Accepted);
        assert_eq!(auth.check(Some(&good), HERE).await, Verdict::Accepted, "remembered");
        assert_eq!(auth.check(None, HERE).await, Verdict::Refused);
        assert_eq!(auth.check(Some("Basic !!!"), HERE).await, Verdict::Refused);
        assert_eq!(auth.check(Some(&basic("admin:wrong")), HERE).await, Verdict::Refused);
    }

    #[tokio::test]
    async fn after_a_wrong_password_the_address_waits_even_with_the_right_one() {
        let auth = with_password("s3cret");
        let elsewhere = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        assert_eq!(auth.check(Some(&basic("admin:wrong")), HERE).await, Verdict::Refused);
        let Verdict::Throttled(wait) = auth.check(Some(&basic("admin:s3cret")), HERE).await else { panic!("the address must wait") };
        assert!(wait > Duration::ZERO && wait <= throttle::BASE, "{wait:?}");
        assert_eq!(auth.check(Some(&basic("admin:s3cret")), elsewhere).await, Verdict::Accepted);
        // Remembered credentials are not hashed, so they are not held back either.
        assert_eq!(auth.check(Some(&basic("admin:s3cret")), HERE).await, Verdict::Accepted);
    }

    #[tokio::test]
    async fn full_hashers_answer_busy_without_hashing() {
        let auth = Auth { hashers: hashers::Hashers::new(1, 0), ..with_password("s3cret") };
        let held = auth.hashers.enter().unwrap();
        assert_eq!(auth.check(Some(&basic("admin:s3cret")), HERE).await, Verdict::Busy);
        drop(held);
        assert_eq!(auth.check(Some(&basic("admin:s3cret")), HERE).await, Verdict::Accepted);
    }

    #[tokio::test]
    async fn a_token_is_accepted_as_bearer_or_as_a_basic_password() {
        let auth = with_token("0123456789abcdef0123");
        assert_eq!(auth.check(Some("Bearer 0123456789abcdef0123"), HERE).await, Verdict::Accepted);
        assert_eq!(auth.check(Some("Bearer 0123456789abcdef012"), HERE).await, Verdict::Refused);
        assert_eq!(auth.check(Some(&basic("anyone:0123456789abcdef0123")), HERE).await, Verdict::Accepted);
        assert_eq!(auth.check(Some("Digest x"), HERE).await, Verdict::Refused);
    }

    #[tokio::test]
    async fn schemes_are_matched_whatever_their_case() {
        let auth = with_token("0123456789abcdef0123");
        for scheme in ["bearer", "BEARER", "bEaReR"] {
            assert_eq!(auth.check(Some(&format!("{scheme} 0123456789abcdef0123")), HERE).await, Verdict::Accepted, "{scheme}");
        }
        let credentials = basic("anyone:0123456789abcdef0123");
        for scheme in ["basic", "BASIC"] {
            let value = credentials.replacen("Basic", scheme, 1);
            assert_eq!(auth.check(Some(&value), HERE).await, Verdict::Accepted, "{scheme}");
        }
    }

    #[tokio::test]
    async fn no_auth_configured_lets_everything_through() {
        assert_eq!(Auth::default().check(None, HERE).await, Verdict::Accepted);
    }
}
