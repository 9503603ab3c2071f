//! What a request must be to go on to a server in HTTP/1.1, from either client version:
//!
//! - the asterisk form (`*`) names the server itself and only OPTIONS asks about that (RFC 9112
//!   section 3.2.4, RFC 9113 section 8.3.1), so `GET *` is refused in both versions;
//! - an HTTP/2 field value that begins or ends with whitespace is malformed (RFC 9113 section
//!   8.2.1): HTTP/1.1 would trim it where HTTP/2 kept it, so the two sides could read two values;
//! - HTTP/2 may split `cookie` into several fields, which MUST be joined with `; ` into one before
//!   the request goes on as HTTP/1.1 (RFC 9113 section 8.2.3), where a server reads only one.
//!
//! Pure, so the fuzz target `h2_to_h1` runs the very code the data path does.

use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Uri};

/// Why a request is refused with a 400; the text is the answer's and the log's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("the request target * is for OPTIONS only")]
    Asterisk,
    #[error("the value of {0} begins or ends with whitespace")]
    Whitespace(String),
}

/// The request target `*` with a method other than OPTIONS.
pub fn target_problem(method: &Method, uri: &Uri) -> Option<Malformed> {
    (uri.path() == "*" && method != Method::OPTIONS).then_some(Malformed::Asterisk)
}

/// Makes an HTTP/2 request's fields those of an HTTP/1.1 one: refuses a value with whitespace at
/// either end, and joins the `cookie` fields into one.
pub fn h2_fields_to_h1(headers: &mut HeaderMap) -> Result<(), Malformed> {
    if let Some((name, _)) = headers.iter().find(|(_, v)| edge_whitespace(v.as_bytes())) {
        return Err(Malformed::Whitespace(name.as_str().to_string()));
    }
    let mut cookies = headers.get_all(header::COOKIE).iter();
    if let (Some(_), Some(_)) = (cookies.next(), cookies.next()) {
        let joined = headers.get_all(header::COOKIE).iter().map(HeaderValue::as_bytes).collect::<Vec<_>>().join(&b"; "[..]);
        // Each part was a valid value and "; " is too, so the whole is one.
        if let Ok(one) = HeaderValue::from_bytes(&joined) {
            headers.insert(header::COOKIE, one);
        }
    }
    Ok(())
}

fn edge_whitespace(value: &[u8]) -> bool {
    let ws = |b: Option<&u8>| matches!(b, Some(b' ' | b'\t'));
    ws(value.first()) || ws(value.last())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_joined_in_their_order() {
        let mut h = HeaderMap::new();
        for c in ["a=1", "b=2", "c=3"] {
            h.append(header::COOKIE, c.parse().unwrap());
        }
        h.insert(header::ACCEPT, "*/*".parse().unwrap());
        h2_fields_to_h1(&mut h).unwrap();
        assert_eq!(h.get_all(header::COOKIE).iter().collect::<Vec<_>>(), ["a=1; b=2; c=3"]);
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn a_value_with_whitespace_at_an_end_is_refused() {
        for v in [" x", "x\t", " "] {
            let mut h = HeaderMap::new();
            h.insert("x-a", HeaderValue::from_str(v).unwrap());
            assert_eq!(h2_fields_to_h1(&mut h), Err(Malformed::Whitespace("x-a".into())), "{v:?}");
        }
        let mut h = HeaderMap::new();
        h.insert("x-a", "in side".parse().unwrap());
        h.insert("x-b", "".parse().unwrap());
        assert_eq!(h2_fields_to_h1(&mut h), Ok(()));
    }

    #[test]
    fn the_asterisk_is_for_options_only() {
        let star: Uri = "*".parse().unwrap();
        assert_eq!(target_problem(&Method::OPTIONS, &star), None);
        assert_eq!(target_problem(&Method::GET, &star), Some(Malformed::Asterisk));
        assert_eq!(target_problem(&Method::GET, &"/".parse().unwrap()), None);
        assert_eq!(target_problem(&Method::OPTIONS, &"/*".parse().unwrap()), None);
    }
}
