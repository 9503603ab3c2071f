//! `fulcrum certs`: the certificates an instance serves (names, issuer, expiry, where they come
//! from, the next renewal of ACME's), read from its admin API like `fulcrum ctl`; with `--fleet`,
//! those of every registered instance and of the fleet's ACME state in etcd
//! (`fleet_certs`), and where an instance does not serve what etcd holds.
//!
//! The exit code is 0 when everything could be read (and, for a fleet, every instance serves
//! the ACME certificates etcd holds), 1 otherwise; a certificate near its end is marked in the
//! listing, and left to the metrics (`fulcrum_tls_certificate_expiry_seconds`) to alert on.

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{Reach, client};

#[derive(Debug, Args)]
pub struct CertsArgs {
    #[command(flatten)]
    pub reach: Reach,
    /// Every instance of the fleet (from etcd's registrations) and the fleet's ACME certificates
    /// in etcd; etcd is where --config's `[fleet]` says, or --endpoints.
    #[arg(long)]
    pub fleet: bool,
    /// etcd's client URLs, comma separated (with --fleet, instead of --config).
    #[arg(long, value_delimiter = ',', requires = "fleet")]
    pub endpoints: Vec<String>,
    /// The fleet's key prefix (with --endpoints).
    #[arg(long, default_value = "/fulcrum", requires = "fleet")]
    pub prefix: String,
}

/// One served certificate, as `/api/stats` lists it under its service's `tls`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Row {
    /// The instance serving it (with --fleet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    #[serde(default)]
    pub service: String,
    #[serde(default)]
    pub names: Vec<String>,
    #[serde(default)]
    pub issuer: String,
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub file: String,
    #[serde(default)]
    pub expires: String,
    #[serde(default)]
    pub expires_unix: i64,
    #[serde(default)]
    pub expires_in_seconds: u64,
    #[serde(default)]
    pub expiring: bool,
    #[serde(default)]
    pub next_renewal: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
}

/// Every certificate of every TLS service in an instance's `/api/stats`, in its order.
pub fn rows(stats: &serde_json::Value) -> Vec<Row> {
    let mut out = Vec::new();
    for service in stats.get("services").and_then(|s| s.as_array()).into_iter().flatten() {
        let name = service.get("name").and_then(|n| n.as_str()).unwrap_or_default();
        for c in service.pointer("/tls/certificates").and_then(|c| c.as_array()).into_iter().flatten() {
            if let Ok(mut row) = serde_json::from_value::<Row>(c.clone()) {
                row.service = name.to_string();
                out.push(row);
            }
        }
    }
    out
}

/// Runs `fulcrum certs`.
pub async fn run(args: CertsArgs) -> ExitCode {
    let done = if args.fleet { fleet(&args).await } else { local(&args.reach).await };
    match done {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("fulcrum certs: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn local(reach: &Reach) -> anyhow::Result<bool> {
    let target = super::target(reach)?;
    let answer = client::request(&target, "GET", "/api/stats", None).await?;
    let json = answer.json();
    anyhow::ensure!((200..300).contains(&answer.status), "the {target} answered {}: {}", answer.status, super::show::text(&json).trim_end());
    let rows = rows(&json);
    if reach.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", table(&rows));
    }
    Ok(true)
}

async fn fleet(args: &CertsArgs) -> anyhow::Result<bool> {
    let settings = crate::fleet::cli::settings(args.reach.config.as_deref(), &args.endpoints, &args.prefix)?;
    let token = match &args.reach.token_file {
        Some(file) => Some(super::read_token(file)?),
        None => None,
    };
    let seen = super::fleet_certs::gather(&settings, token).await?;
    let whole = seen.differences.is_empty() && seen.instances.iter().all(|i| i.error.is_none());
    if args.reach.json {
        println!("{}", serde_json::to_string_pretty(&seen)?);
    } else {
        print!("{}", super::fleet_certs::show(&seen));
    }
    Ok(whole)
}

/// Left in days (or hours, under two days), marked when within 14 days of the end.
fn left(row: &Row) -> String {
    let s = row.expires_in_seconds;
    let text = match s {
        0 => "expired".to_string(),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    };
    if row.expiring && s > 0 { format!("{text} (expiring)") } else { text }
}

/// The rows as aligned columns, a note under the row it belongs to.
pub fn table(rows: &[Row]) -> String {
    if rows.is_empty() {
        return "no certificates\n".into();
    }
    let with_instance = rows.iter().any(|r| r.instance.is_some());
    let mut lines: Vec<Vec<String>> = vec![["INSTANCE", "SERVICE", "NAMES", "SOURCE", "ISSUER", "NOT AFTER", "LEFT", "NEXT RENEWAL"].iter().map(|s| s.to_string()).collect()];
    for r in rows {
        lines.push(vec![
            r.instance.clone().unwrap_or_default(),
            r.service.clone(),
            r.names.join(","),
            r.source.clone(),
            r.issuer.clone(),
            r.expires.clone(),
            left(r),
            r.next_renewal.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    let skip = usize::from(!with_instance);
    let widths: Vec<usize> = (0..8).map(|c| lines.iter().map(|l| l[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let cells: Vec<String> = (skip..8).map(|c| if c == 7 { line[c].clone() } else { format!("{:<w$}", line[c], w = widths[c]) }).collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        if let Some(note) = i.checked_sub(1).and_then(|r| rows[r].note.as_deref()) {
            let _ = writeln!(out, "  note: {note}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_tls_service_s_certificates_are_rows_with_a_note_under_its_row_and_the_expiring_marked() {
        let stats = json!({ "services": [
            { "name": "plain" },
            { "name": "web", "tls": { "certificates": [
                { "file": "a.pem", "names": ["a.test", "*.a.test"], "issuer": "CN=Test CA", "source": "file", "expires": "2027-01-01T00:00:00Z",
                  "expires_unix": 1, "expires_in_seconds": 40 * 86_400, "expiring": false, "next_renewal": null, "note": null },
                { "file": "acme:b.test", "names": ["b.test"], "issuer": "CN=b.test", "source": "acme", "expires": "2026-12-01T00:00:00Z",
                  "expires_unix": 1, "expires_in_seconds": 3 * 86_400, "expiring": true, "next_renewal": "2026-11-28T00:00:00Z",
                  "note": "self-signed while none is issued: the CA refused" } ] } } ] });
        let rows = rows(&stats);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[1].service.as_str(), rows[1].source.as_str()), ("web", "acme"));
        let shown = table(&rows);
        let lines: Vec<&str> = shown.lines().collect();
        assert!(lines[0].starts_with("SERVICE  NAMES") && lines[0].ends_with("NEXT RENEWAL"), "{shown}");
        assert!(lines[1].contains("a.test,*.a.test") && lines[1].contains("40d") && lines[1].ends_with(" -"), "{shown}");
        assert!(lines[2].contains("3d (expiring)") && lines[2].ends_with("2026-11-28T00:00:00Z"), "{shown}");
        assert_eq!(lines[3], "  note: self-signed while none is issued: the CA refused");
        assert_eq!(table(&[]), "no certificates\n");
    }
}
