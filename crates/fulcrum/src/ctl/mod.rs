//! `fulcrum ctl`: the admin API from the command line, for operators and scripts on the same
//! machine. It talks to the control socket (`[admin] socket`), where the socket file's
//! permissions are the authentication, or to the admin listener with `--url` and a token.
//!
//! Each subcommand is one API request ([`client`]); the answer is shown for a person ([`show`])
//! or, with `--json`, as the API gave it. The exit code is 0 when the API did it, 1 when it
//! refused (its message on standard error) or could not be reached. `fulcrum certs` ([`certs`])
//! lists the certificates an instance, or every instance of a fleet, serves.

pub mod certs;
pub mod client;
mod fleet_certs;
mod show;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

pub use client::Target;

/// Where the control socket is unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/fulcrum/admin.sock";

#[derive(Debug, Args)]
pub struct CtlArgs {
    #[command(flatten)]
    pub reach: Reach,
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// `fulcrum upgrade`: `fulcrum ctl upgrade`, as the command an operator looks for.
#[derive(Debug, Args)]
pub struct UpgradeArgs {
    #[command(flatten)]
    pub reach: Reach,
    /// Upgrade although edits made through the API are not saved (the new binary reads the file).
    #[arg(long)]
    pub force: bool,
}

/// Which instance a command reaches, and how it prints the answer.
#[derive(Debug, Args)]
pub struct Reach {
    /// The control socket's path; default: the config's `[admin] socket` with --config, else
    /// /run/fulcrum/admin.sock.
    #[arg(long, global = true, conflicts_with = "url")]
    pub socket: Option<PathBuf>,
    /// A config file to find the control socket in (or, without one, its admin listener).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// The admin listener instead of the socket, e.g. http://127.0.0.1:9090.
    #[arg(long, global = true)]
    pub url: Option<String>,
    /// A file holding the admin listener's bearer token (`[admin] token_file`).
    #[arg(long, global = true)]
    pub token_file: Option<PathBuf>,
    /// Print the API's JSON answer as it is.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// Put a server back into rotation.
    Enable { service: String, server: String },
    /// Take a server out of rotation (its connections finish unless terminate_on_disable).
    Disable { service: String, server: String },
    /// Let a server finish its connections and sessions, with no new ones.
    Drain { service: String, server: String },
    /// Set a server's weight (1 to 256).
    Weight { service: String, server: String, weight: u32 },
    /// Show the services and their servers (one service with its name).
    Stats { service: Option<String> },
    /// Re-read the config file and apply it (refused while edits made through the API are not
    /// saved, unless --force).
    Reload {
        #[arg(long)]
        force: bool,
    },
    /// Start the binary at the running one's path and hand it the listening sockets and the
    /// servers' state; answers once it serves (the old process then drains and exits).
    Upgrade {
        #[arg(long)]
        force: bool,
    },
    /// Write the running config to its file (the previous one kept as FILE.toml.bak).
    Save,
    /// Open a stopped service's listener.
    Start { service: String },
    /// Close a service's listener; its config stays.
    Stop { service: String },
    /// Why a client would go to the server it goes to, without sending anything.
    Explain {
        service: String,
        /// The client's address (default: 127.0.0.1).
        #[arg(long)]
        client: Option<String>,
        #[arg(long)]
        path: Option<String>,
        #[arg(long)]
        host: Option<String>,
        #[arg(long)]
        cookie: Option<String>,
        #[arg(long)]
        sni: Option<String>,
        #[arg(long)]
        method: Option<String>,
    },
    /// The running config as TOML.
    Config,
    /// Whether the instance serves (exit 0) or not (exit 1).
    Ready,
}

/// Runs one `fulcrum ctl` command; its exit code says whether the API did it.
pub async fn run(args: CtlArgs) -> ExitCode {
    match execute(&args.reach, &args.command).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("fulcrum ctl: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// One request, and its answer shown; `false` when the API refused.
async fn execute(args: &Reach, command: &CtlCommand) -> anyhow::Result<bool> {
    let target = target(args)?;
    let (method, path, body) = request_of(command);
    let answer = client::request(&target, method, &path, body).await?;
    let mut json = answer.json();
    let ok = (200..300).contains(&answer.status);
    // `stats SERVICE` keeps that service's part, in JSON as in tables.
    if let (CtlCommand::Stats { service: Some(name) }, Some(services)) = (command, json.get_mut("services").and_then(|s| s.as_array_mut())) {
        services.retain(|s| s.get("name").and_then(|n| n.as_str()) == Some(name.as_str()));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else if !ok {
        let error = json.get("error").and_then(|e| e.as_str()).map(str::to_string).unwrap_or_else(|| show::text(&json));
        eprintln!("fulcrum ctl: refused ({}): {}", answer.status, error.trim_end());
    } else {
        print!("{}", show::answer(command, &json));
    }
    Ok(ok)
}

/// The API request of a command: method, path and query, JSON body.
fn request_of(command: &CtlCommand) -> (&'static str, String, Option<serde_json::Value>) {
    use serde_json::json;
    let server = |service: &str, server: &str, what: &str| format!("/api/services/{}/servers/{}/{what}", encode(service), encode(server));
    match command {
        CtlCommand::Enable { service, server: s } => ("POST", server(service, s, "state"), Some(json!({ "state": "enable" }))),
        CtlCommand::Disable { service, server: s } => ("POST", server(service, s, "state"), Some(json!({ "state": "disable" }))),
        CtlCommand::Drain { service, server: s } => ("POST", server(service, s, "state"), Some(json!({ "state": "drain" }))),
        CtlCommand::Weight { service, server: s, weight } => ("POST", server(service, s, "weight"), Some(json!({ "weight": weight }))),
        CtlCommand::Stats { .. } => ("GET", "/api/stats".into(), None),
        CtlCommand::Reload { force } => ("POST", format!("/api/reload{}", if *force { "?force=true" } else { "" }), None),
        CtlCommand::Upgrade { force } => ("POST", format!("/api/upgrade{}", if *force { "?force=true" } else { "" }), None),
        CtlCommand::Save => ("POST", "/api/save".into(), None),
        CtlCommand::Start { service } => ("POST", format!("/api/services/{}/start", encode(service)), None),
        CtlCommand::Stop { service } => ("POST", format!("/api/services/{}/stop", encode(service)), None),
        CtlCommand::Explain { service, client, path, host, cookie, sni, method } => {
            let mut query = format!("/api/explain?service={}", encode(service));
            let given = [("client", client), ("path", path), ("host", host), ("cookie", cookie), ("sni", sni), ("method", method)];
            for (key, value) in given.iter().filter_map(|(k, v)| v.as_ref().map(|v| (k, v))) {
                query.push_str(&format!("&{key}={}", encode(value)));
            }
            ("GET", query, None)
        }
        CtlCommand::Config => ("GET", "/api/config".into(), None),
        CtlCommand::Ready => ("GET", "/ready".into(), None),
    }
}

/// Where to send the request: `--url`, else `--socket`, else what `--config` names, else the
/// default socket.
fn target(args: &Reach) -> anyhow::Result<Target> {
    let token = match &args.token_file {
        Some(file) => Some(read_token(file)?),
        None => None,
    };
    if let Some(url) = &args.url {
        return Ok(Target::Listener { authority: authority(url)?, token });
    }
    if let Some(socket) = &args.socket {
        return Ok(Target::Socket(socket.clone()));
    }
    let Some(config) = &args.config else { return Ok(Target::Socket(DEFAULT_SOCKET.into())) };
    let text = std::fs::read_to_string(config).with_context(|| format!("cannot read {}", config.display()))?;
    let table: toml::Table = toml::from_str(&text).with_context(|| format!("{} is not TOML", config.display()))?;
    let admin: crate::config::Admin = match table.get("admin") {
        Some(admin) => admin.clone().try_into().with_context(|| format!("{}: [admin]", config.display()))?,
        None => anyhow::bail!("{} has no [admin] table: give --socket or --url", config.display()),
    };
    if let Some(socket) = admin.socket {
        return Ok(Target::Socket(socket.into()));
    }
    let listen = admin.tcp_listen().unwrap_or_default();
    let token = match (token, &admin.token_file) {
        (Some(t), _) => Some(t),
        (None, Some(file)) => Some(read_token(Path::new(file))?),
        (None, None) => None,
    };
    Ok(Target::Listener { authority: listen, token })
}

/// `host:port` of an `http://` URL; the admin listener speaks plain HTTP.
fn authority(url: &str) -> anyhow::Result<String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| anyhow::anyhow!("--url {url:?}: give the admin listener as http://HOST:PORT"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    anyhow::ensure!(!authority.is_empty(), "--url {url:?} names no host");
    Ok(if authority.rsplit_once(':').is_some_and(|(_, port)| port.bytes().all(|b| b.is_ascii_digit())) { authority.to_string() } else { format!("{authority}:80") })
}

fn read_token(file: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read the token file {}", file.display()))?;
    Ok(text.trim().to_string())
}

/// Percent-encodes all but the unreserved characters (RFC 3986 2.3), for a path segment or a
/// query value.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_address_is_one_path_segment_however_it_is_written() {
        assert_eq!(encode("10.0.0.5:80"), "10.0.0.5%3A80");
        assert_eq!(encode("[::1]:80"), "%5B%3A%3A1%5D%3A80");
        assert_eq!(encode("a/b c"), "a%2Fb%20c");
        let (method, path, body) = request_of(&CtlCommand::Drain { service: "web".into(), server: "[::1]:80".into() });
        assert_eq!((method, path.as_str()), ("POST", "/api/services/web/servers/%5B%3A%3A1%5D%3A80/state"));
        assert_eq!(body.unwrap()["state"], "drain");
    }

    #[test]
    fn an_admin_url_gives_its_host_and_port() {
        assert_eq!(authority("http://127.0.0.1:9090").unwrap(), "127.0.0.1:9090");
        assert_eq!(authority("http://[::1]:9090/").unwrap(), "[::1]:9090");
        assert_eq!(authority("http://localhost").unwrap(), "localhost:80");
        assert!(authority("https://127.0.0.1:9090").is_err());
    }
}
