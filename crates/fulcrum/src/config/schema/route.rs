//! `[[service.route]]`: the rules of an HTTP service (and the server-name routes of a TCP one).
//! A route is a rule: conditions, and-ed, and the actions taken when they all hold, in this order:
//! `deny` or `allow`, `redirect`, the request's rewrites (headers, path, query), the pool, the
//! response's headers. Routes are tried in config order and the first that takes a request wins.
//!
//! Patterns are compiled and header templates parsed while the config is read, so a bad one is an
//! error with its line and column, and a request never waits on either.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::*;

/// `[[service.route]]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
// `other` is where serde refuses unknown keys, not a guard against building a `Route` by hand.
#[allow(clippy::manual_non_exhaustive)]
pub struct Route {
    /// The `[[service.pool]]` the request goes to; unset: `default_pool`, or the service's own
    /// servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// What the request must show.
    #[serde(flatten)]
    pub when: Conditions,
    /// Catches a key that neither a condition nor an action is: serde's `flatten` hands
    /// `Conditions` only the keys it names, so `deny_unknown_fields` alone would let a typo pass.
    #[serde(flatten, default, skip_serializing, deserialize_with = "no_other_keys")]
    pub(crate) other: (),
    /// What it must not show: each condition given here must fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not: Option<Conditions>,
    /// Refuse the request with this status, 400 to 599 (403 is usual).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deny: Option<u16>,
    /// Take the request and do nothing more than the rest of this route says: the routes after
    /// it (a `deny` among them) are not tried.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<Redirect>,
    /// Headers of the request as the server gets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_headers: Option<HeaderActions>,
    /// Removes this text from the front of the path (`/api/users` to `/users`; `/api` to `/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strip_prefix: Option<String>,
    /// Replaces the front of the path: `{ from = "/old", to = "/new" }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_prefix: Option<ReplacePrefix>,
    /// Rewrites the path by a regex with `$1`-style captures: `{ pattern = "^/u/(\\d+)$", with = "/users/$1" }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite_path: Option<RewritePath>,
    /// The query the server gets, without `?`; `""` drops it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_query: Option<String>,
    /// Bytes of request body the requests this route takes may send, 0 (no limit) to 1 TiB: in
    /// place of `[service.http] max_request_body` for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_request_body: Option<u64>,
    /// Error pages for the requests this route takes, by status, before the service's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub error_pages: BTreeMap<String, String>,
    /// Headers of the response as the client gets it, Fulcrum's own answers included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_headers: Option<HeaderActions>,
    /// `false`: this route's responses are never compressed (e.g. pages that echo a secret
    /// beside what a client sends, BREACH); `true`: compressed even where the service has no
    /// `[http.compression]`, with its defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compress: Option<bool>,
    /// Per-client limits on the requests this route takes (`requests`, `bytes`, `errors`), after
    /// the service's.
    #[serde(default, rename = "limit", skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<Limit>,
}

impl Route {
    /// Whether the route changes the request on its way to a server.
    pub fn rewrites(&self) -> bool {
        self.request_headers.is_some() || self.strip_prefix.is_some() || self.replace_prefix.is_some() || self.rewrite_path.is_some() || self.set_query.is_some()
    }

    /// Whether one of the route's templates names `var`; a redirect built from the request's
    /// own URL (no `location`) reads its host, path and query too.
    pub fn uses(&self, var: Variable) -> bool {
        let redirect = self.redirect.as_ref();
        if redirect.is_some_and(|r| r.location.is_none()) && matches!(var, Variable::Host | Variable::Path | Variable::Query) {
            return true;
        }
        let headers = [&self.request_headers, &self.response_headers].into_iter().flatten().flat_map(|a| a.set.values().chain(a.add.values()));
        redirect.and_then(|r| r.location.as_ref()).into_iter().chain(headers).any(|t| t.pieces.contains(&Piece::Var(var)))
    }
}

/// Refuses the keys left once the route's own and its conditions' are taken.
fn no_other_keys<'de, D: serde::Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    let rest = BTreeMap::<String, serde::de::IgnoredAny>::deserialize(d)?;
    match rest.keys().next() {
        Some(key) => Err(serde::de::Error::custom(format!("unknown key `{key}` in a route; see docs/configuration.md for the conditions and actions a route takes"))),
        None => Ok(()),
    }
}

/// The conditions of a route; a list holds when any of its entries does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conditions {
    /// Whole paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<String>,
    /// Whole path segments: `/static` takes `/static` and `/static/x`, not `/staticfoo`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_prefix: Vec<String>,
    /// HAProxy's `path_beg`: any path that starts with the text, `/staticfoo` for `/static` too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_beg: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_suffix: Vec<String>,
    /// Regexes (the `regex` crate's syntax, linear time) the path must match somewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_regex: Vec<Pattern>,
    /// Compare paths, header values, query and cookie values without regard to ASCII case
    /// (HAProxy's `-i`); host names and methods always are.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ignore_case: bool,
    /// Host names, compared without the port and case-insensitively.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host: Vec<String>,
    /// Request methods (`GET`, `POST`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub method: Vec<String>,
    /// A header that must be present, and equal `header_value` or match `header_regex` when
    /// one of them is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_regex: Option<Pattern>,
    /// Query parameters: `name` (present) or `name=value` (equal, as sent, not decoded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query: Vec<String>,
    /// Cookies: `name` (present) or `name=value`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cookie: Vec<String>,
    /// The client's address is in one of these networks (after the PROXY protocol when the
    /// service accepts it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client: Vec<crate::config::Network>,
    /// A file of networks, one per line (`#` comments), the client's address must be in: large
    /// allow or deny lists (up to a million networks, looked up in a binary search). Read with
    /// the config, so a reload reads it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_file: Option<crate::config::NetworkFile>,
    /// The server name of the client's TLS hello: in mode = "tcp" what a pass-through route
    /// routes on, in mode = "http" the SNI of a connection Fulcrum's TLS terminated. Compared
    /// case-insensitively; `*.example.com` covers one label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sni: Vec<String>,
    /// The client's HTTP version: `"1.0"`, `"1.1"` or `"2"`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub version: Vec<String>,
    /// Which conditions are given, worked out on the first request: a request reads one word to
    /// pass over the conditions a route does not have.
    #[serde(skip)]
    pub given: Given,
}

/// The conditions a `Conditions` has, one bit each (`Conditions::given_bits`), and its header's
/// name parsed, made once. Never part of a config's equality: it only caches what the config says.
#[derive(Debug, Clone, Default)]
pub struct Given(std::sync::OnceLock<(u16, Option<hyper::header::HeaderName>)>);

impl PartialEq for Given {
    fn eq(&self, _: &Given) -> bool {
        true
    }
}

impl Conditions {
    pub const METHOD: u16 = 1;
    pub const VERSION: u16 = 1 << 1;
    pub const CLIENT: u16 = 1 << 2;
    pub const CLIENT_FILE: u16 = 1 << 3;
    pub const SNI: u16 = 1 << 4;
    pub const HOST: u16 = 1 << 5;
    pub const PATH: u16 = 1 << 6;
    pub const PATH_PREFIX: u16 = 1 << 7;
    pub const PATH_BEG: u16 = 1 << 8;
    pub const PATH_SUFFIX: u16 = 1 << 9;
    pub const PATH_REGEX: u16 = 1 << 10;
    pub const HEADER: u16 = 1 << 11;
    pub const QUERY: u16 = 1 << 12;
    pub const COOKIE: u16 = 1 << 13;

    /// The conditions given, as bits.
    pub fn given_bits(&self) -> u16 {
        self.given().0
    }

    /// The `header` condition's name, parsed (`None` without one, or for a name `check` refuses).
    pub fn header_name(&self) -> Option<&hyper::header::HeaderName> {
        self.given().1.as_ref()
    }

    fn given(&self) -> &(u16, Option<hyper::header::HeaderName>) {
        self.given.0.get_or_init(|| {
            let bits = [
                (Self::METHOD, !self.method.is_empty()),
                (Self::VERSION, !self.version.is_empty()),
                (Self::CLIENT, !self.client.is_empty()),
                (Self::CLIENT_FILE, self.client_file.is_some()),
                (Self::SNI, !self.sni.is_empty()),
                (Self::HOST, !self.host.is_empty()),
                (Self::PATH, !self.path.is_empty()),
                (Self::PATH_PREFIX, !self.path_prefix.is_empty()),
                (Self::PATH_BEG, !self.path_beg.is_empty()),
                (Self::PATH_SUFFIX, !self.path_suffix.is_empty()),
                (Self::PATH_REGEX, !self.path_regex.is_empty()),
                (Self::HEADER, self.header.is_some()),
                (Self::QUERY, !self.query.is_empty()),
                (Self::COOKIE, !self.cookie.is_empty()),
            ]
            .iter()
            .filter(|(_, given)| *given)
            .fold(0, |bits, (bit, _)| bits | bit);
            (bits, self.header.as_ref().and_then(|h| hyper::header::HeaderName::from_bytes(h.as_bytes()).ok()))
        })
    }

    /// Whether any condition reads the HTTP request (every one but `sni` and `client`).
    pub fn reads_request(&self) -> bool {
        self.given_bits() & !(Self::CLIENT | Self::CLIENT_FILE | Self::SNI) != 0
    }

    /// Whether no condition is given.
    pub fn is_empty(&self) -> bool {
        self.given_bits() == 0
    }
}

/// `redirect = { ... }`: answer with a redirect instead of forwarding. `location` is the whole
/// target; otherwise the request's own URL with what is given replaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Redirect {
    /// 301, 302, 303, 307 or 308.
    #[serde(default = "defaults::redirect_status")]
    pub status: u16,
    /// The whole `Location`, with the variables of header templates (`{host}`, `{path}`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Template>,
    /// `http` or `https`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// The host (and port, if any) of the target; unset: the request's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The path of the target; unset: the request's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Put before the request's path (HAProxy's `redirect prefix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Leave the request's query off the target.
    #[serde(default, skip_serializing_if = "is_false")]
    pub drop_query: bool,
}

/// `request_headers` and `response_headers`: applied in this order: `delete`, `set` (replaces
/// every field of the name), `add` (one more field). Values are templates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "RawHeaderActions")]
pub struct HeaderActions {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, Template>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub add: BTreeMap<String, Template>,
    /// The same with each name parsed as the config is read, so a request parses none (a name
    /// that is not one is left out here, and refused by `check`).
    #[serde(skip)]
    pub parsed: ParsedActions,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ParsedActions {
    pub delete: Vec<hyper::header::HeaderName>,
    pub set: Vec<(hyper::header::HeaderName, Template)>,
    pub add: Vec<(hyper::header::HeaderName, Template)>,
}

/// `HeaderActions` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeaderActions {
    #[serde(default)]
    delete: Vec<String>,
    #[serde(default)]
    set: BTreeMap<String, Template>,
    #[serde(default)]
    add: BTreeMap<String, Template>,
}

impl From<RawHeaderActions> for HeaderActions {
    fn from(raw: RawHeaderActions) -> HeaderActions {
        let name = |n: &String| hyper::header::HeaderName::from_bytes(n.as_bytes()).ok();
        let pairs = |m: &BTreeMap<String, Template>| m.iter().filter_map(|(n, t)| Some((name(n)?, t.clone()))).collect();
        let parsed = ParsedActions { delete: raw.delete.iter().filter_map(name).collect(), set: pairs(&raw.set), add: pairs(&raw.add) };
        HeaderActions { delete: raw.delete, set: raw.set, add: raw.add, parsed }
    }
}

/// `replace_prefix = { from = "/old", to = "/new" }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplacePrefix {
    pub from: String,
    pub to: String,
}

/// `rewrite_path = { pattern = "...", with = "..." }`: the first match in the path is replaced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewritePath {
    pub pattern: Pattern,
    pub with: String,
}

/// A regex, compiled as the config is read. Its source is at most [`Pattern::MAX_LEN`] bytes and
/// its compiled program at most [`Pattern::MAX_SIZE`], so neither a config nor the requests it
/// matches can make Fulcrum hold more; matching is linear in the input (the `regex` crate).
#[derive(Clone)]
pub struct Pattern(regex::Regex);

impl Pattern {
    pub const MAX_LEN: usize = 1024;
    pub const MAX_SIZE: usize = 1 << 20;

    pub fn regex(&self) -> &regex::Regex {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Pattern, String> {
        if s.len() > Pattern::MAX_LEN {
            return Err(format!("a pattern is at most {} bytes; this one is {}", Pattern::MAX_LEN, s.len()));
        }
        regex::RegexBuilder::new(s).size_limit(Pattern::MAX_SIZE).build().map(Pattern).map_err(|e| format!("{s:?} is not a regex: {e}"))
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.as_str() == other.as_str()
    }
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl Serialize for Pattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Pattern, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// What a header template or a redirect's `location` can name in braces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variable {
    /// The client's IP address.
    ClientIp,
    ClientPort,
    /// The request's id (`[service.http] request_id`), empty without one.
    RequestId,
    /// The server name of the client's TLS hello, empty without one.
    Sni,
    /// The request's host, without the port.
    Host,
    /// The request's path, before any rewrite.
    Path,
    /// The request's query, without `?`.
    Query,
    /// The entry of `path_prefix` or `path_beg` that took the request, empty without one.
    MatchedPrefix,
    /// `http` or `https`.
    Scheme,
    /// The server's address (`host:port`), in response headers; empty in request headers,
    /// which are made before the pick.
    Server,
}

impl Variable {
    pub const ALL: [(&'static str, Variable); 10] = [
        ("client_ip", Variable::ClientIp),
        ("client_port", Variable::ClientPort),
        ("request_id", Variable::RequestId),
        ("sni", Variable::Sni),
        ("host", Variable::Host),
        ("path", Variable::Path),
        ("query", Variable::Query),
        ("matched_prefix", Variable::MatchedPrefix),
        ("scheme", Variable::Scheme),
        ("server", Variable::Server),
    ];
}

/// One piece of a template: text, or what is named in braces (a header template's `Variable`,
/// an access log format's field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece<V = Variable> {
    Text(String),
    Var(V),
}

/// Splits `s` into text and the names in braces (`{{` and `}}` for braces), each looked up in
/// `names`; `what` is what a name is called in the error (`variable`, `field`).
pub(crate) fn pieces<V: Copy>(s: &str, names: &[(&'static str, V)], what: &str) -> Result<Vec<Piece<V>>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(i) = rest.find(['{', '}']) {
        text.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            text.push_str(&tail[..1]);
            rest = &tail[2..];
            continue;
        }
        if tail.starts_with('}') {
            return Err(format!("{s:?}: a lone '}}' (write '}}}}' for a brace)"));
        }
        let end = tail.find('}').ok_or_else(|| format!("{s:?}: '{{' without its '}}' (write '{{{{' for a brace)"))?;
        let name = &tail[1..end];
        let var = names
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| format!("{s:?}: no {what} {{{name}}}; there are {}", names.iter().map(|(n, _)| format!("{{{n}}}")).collect::<Vec<_>>().join(", ")))?;
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
        }
        pieces.push(Piece::Var(var));
        rest = &tail[end + 1..];
    }
    text.push_str(rest);
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

/// A header value with `{variable}`s (`{{` and `}}` for braces), parsed as the config is read.
/// Its text holds no control character, and a variable's value loses any it has when the
/// template is filled in (`proxy::http::rules`), so no template can end a header line.
#[derive(Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    pub pieces: Vec<Piece>,
    /// The header value of a template without variables, made once.
    literal_value: Option<hyper::header::HeaderValue>,
}

impl Template {
    /// Longest template source, in bytes.
    pub const MAX_LEN: usize = 4096;

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The template's header value when it names no variable.
    pub fn literal_value(&self) -> Option<&hyper::header::HeaderValue> {
        self.literal_value.as_ref()
    }

    /// The template's value when it names no variable.
    pub fn literal(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [] => Some(""),
            [Piece::Text(t)] => Some(t),
            _ => None,
        }
    }
}

impl FromStr for Template {
    type Err = String;
    fn from_str(s: &str) -> Result<Template, String> {
        if s.len() > Template::MAX_LEN {
            return Err(format!("a header template is at most {} bytes; this one is {}", Template::MAX_LEN, s.len()));
        }
        if let Some(c) = s.chars().find(|c| c.is_control() && *c != '\t') {
            return Err(format!("{s:?} holds the control character {c:?}, which no header value may"));
        }
        let mut t = Template { source: s.to_string(), pieces: pieces(s, &Variable::ALL, "variable")?, literal_value: None };
        t.literal_value = t.literal().and_then(|text| hyper::header::HeaderValue::from_str(text).ok());
        Ok(t)
    }
}

impl fmt::Debug for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.source)
    }
}

impl Serialize for Template {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.source)
    }
}

impl<'de> Deserialize<'de> for Template {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Template, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_their_variables_and_refuse_what_could_end_a_line() {
        let t: Template = "for={client_ip}:{client_port} {{x}}".parse().unwrap();
        assert_eq!(t.pieces, [Piece::Text("for=".into()), Piece::Var(Variable::ClientIp), Piece::Text(":".into()), Piece::Var(Variable::ClientPort), Piece::Text(" {x}".into())]);
        assert_eq!("plain".parse::<Template>().unwrap().literal(), Some("plain"));
        assert!("a\r\nb".parse::<Template>().unwrap_err().contains("control character"));
        assert!("{nope}".parse::<Template>().unwrap_err().contains("no variable {nope}"));
        assert!("{host".parse::<Template>().is_err() && "a}".parse::<Template>().is_err());
        assert!("x".repeat(Template::MAX_LEN + 1).parse::<Template>().is_err());
    }

    #[test]
    fn patterns_are_bounded_and_compare_by_source() {
        assert!("(".parse::<Pattern>().unwrap_err().contains("is not a regex"));
        assert!("a".repeat(Pattern::MAX_LEN + 1).parse::<Pattern>().is_err());
        assert!(r"\w{1000}{1000}".parse::<Pattern>().is_err(), "a program over the size limit");
        assert_eq!("^/a".parse::<Pattern>().unwrap(), "^/a".parse::<Pattern>().unwrap());
    }

    #[test]
    fn a_route_reads_its_conditions_flat_and_refuses_unknown_keys() {
        let r: Route = toml::from_str("pool = \"p\"\npath_prefix = [\"/a\"]\nnot = { client = [\"10.0.0.0/8\"] }\ndeny = 403").unwrap();
        assert_eq!((r.pool.as_deref(), r.when.path_prefix.len(), r.not.as_ref().map(|n| n.client.len()), r.deny), (Some("p"), 1, Some(1), Some(403)));
        let e = toml::from_str::<Route>("pool = \"p\"\npath_prefx = [\"/a\"]").unwrap_err().to_string();
        assert!(e.contains("path_prefx"), "{e}");
        let back = toml::to_string(&r).unwrap();
        assert_eq!(toml::from_str::<Route>(&back).unwrap(), r);
    }
}
