//! Authentication of admin requests: a bearer token read from a file, or HTTP basic with an
//! Argon2 password hash. Off only on a loopback listener with nothing configured (validation
//! refuses any other address without it). Verified basic credentials are remembered, so a
//! dashboard polling every second does not pay for an Argon2 hash each time.

use std::collections::HashSet;
use std::sync::Mutex;

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
        Ok(Auth { token, basic, verified: Mutex::default() })
    }

    pub fn required(&self) -> bool {
        self.token.is_some() || self.basic.is_some()
    }

    /// Whether an `Authorization` header value is accepted.
    pub fn check(&self, header: Option<&str>) -> bool {
        if !self.required() {
            return true;
        }
        let Some(value) = header else { return false };
        let token_matches = |given: &str| self.token.as_ref().is_some_and(|t| bool::from(t.as_bytes().ct_eq(given.as_bytes())));
        if let Some(given) = value.strip_prefix("Bearer ") {
            return token_matches(given.trim());
        }
        let Some((user, password)) = value.strip_prefix("Basic ").and_then(basic_credentials) else { return false };
        // A browser can only send basic credentials from its own prompt: with a token configured,
        // the token as the password (any user name) is accepted too.
        if token_matches(&password) {
            return true;
        }
        let Some((want_user, hash)) = &self.basic else { return false };
        if self.verified.lock().map(|v| v.contains(value)).unwrap_or(false) {
            return true;
        }
        let Ok(parsed) = PasswordHash::new(hash) else { return false };
        let ok = bool::from(user.as_bytes().ct_eq(want_user.as_bytes())) && argon2::Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok();
        if let (true, Ok(mut v)) = (ok, self.verified.lock()) {
            if v.len() >= REMEMBER {
                v.clear();
            }
            v.insert(value.to_string());
        }
        ok
    }
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
    use super::*;

    #[test]
    fn basic_credentials_are_checked_against_the_argon2_hash() {
        let hash = hash_password("s3cret").unwrap();
        let admin = Admin { listen: "0.0.0.0:9090".into(), token_file: None, user: Some("admin".into()), password_hash: Some(hash) };
        let auth = Auth::from_config(&admin).unwrap();
        let good = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("admin:s3cret"));
        let bad = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("admin:wrong"));
        assert!(auth.check(Some(&good)));
        assert!(auth.check(Some(&good)), "remembered");
        assert!(!auth.check(Some(&bad)));
        assert!(!auth.check(None));
        assert!(!auth.check(Some("Basic !!!")));
    }

    #[test]
    fn a_token_is_accepted_as_bearer_or_as_a_basic_password() {
        let dir = std::env::temp_dir().join(format!("fulcrum-token-{}", std::process::id()));
        std::fs::write(&dir, "0123456789abcdef0123\n").unwrap();
        let admin = Admin { listen: "0.0.0.0:9090".into(), token_file: Some(dir.display().to_string()), user: None, password_hash: None };
        let auth = Auth::from_config(&admin).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert!(auth.check(Some("Bearer 0123456789abcdef0123")));
        assert!(!auth.check(Some("Bearer 0123456789abcdef012")));
        let basic = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("anyone:0123456789abcdef0123"));
        assert!(auth.check(Some(&basic)));
        assert!(!auth.check(Some("Digest x")));
    }

    #[test]
    fn no_auth_configured_lets_everything_through() {
        assert!(Auth::default().check(None));
    }
}
