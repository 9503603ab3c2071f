//! `fulcrum fleet import FILE` and `fulcrum fleet export`: a config file into and out of etcd;
//! `fulcrum fleet check`: whether the instances agree (`fleet::agreement`).

use std::path::PathBuf;

use anyhow::Context;
use etcd_client::GetOptions;
use serde_json::json;

use super::agreement;
use super::connect;
use super::snapshot::{Keys, Member, Snapshot};
use super::write::replace_services;
use crate::config::{self, Resolve};

#[derive(Debug, clap::Args)]
pub struct FleetArgs {
    /// An instance's config file: its `[fleet]` says where etcd is and which prefix.
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// etcd's client URLs, comma separated (instead of --config).
    #[arg(long, global = true, value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// The fleet's key prefix (with --endpoints).
    #[arg(long, global = true, default_value = "/fulcrum")]
    pub prefix: String,
    #[command(subcommand)]
    pub command: FleetCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum FleetCommand {
    /// Replace the fleet's services with those of a config file (validated first); every
    /// instance applies them from its watch.
    Import { file: PathBuf },
    /// Print the fleet's services as a config file.
    Export,
    /// Ask every registered instance what it runs and balances; exit 1, naming the instance and
    /// what differs, unless all agree and none runs degraded (a shared limit without Redis).
    Check {
        /// A file holding the admin API's bearer token, when the instances require one.
        #[arg(long)]
        token_file: Option<PathBuf>,
    },
}

pub async fn run(args: FleetArgs) -> anyhow::Result<()> {
    let fleet = settings(args.config.as_deref(), &args.endpoints, &args.prefix)?;
    let keys = Keys::new(&fleet.prefix);
    let connect = || async { connect(&fleet).await.with_context(|| format!("cannot connect to etcd at {}", fleet.endpoints.join(","))) };
    match args.command {
        FleetCommand::Import { file } => {
            // The file is validated before etcd is asked anything.
            let path = file.clone();
            let loaded =
                tokio::task::spawn_blocking(move || config::load_in(&path, config::Scope::Fleet)).await?.map_err(|d| anyhow::anyhow!("{d}\n{}: not imported", file.display()))?;
            anyhow::ensure!(loaded.config.fleet.is_none(), "{} has [fleet]: import a file of services", file.display());
            let mut client = connect().await?;
            let who = std::env::var("USER").unwrap_or_else(|_| "fulcrum fleet import".into());
            let what = format!("import {} ({})", file.display(), config::services(loaded.config.services.len()));
            let revision = replace_services(&mut client, &keys, &loaded.config.services, &who, &what).await?;
            println!("imported {} from {} into {} at etcd revision {revision}", config::services(loaded.config.services.len()), file.display(), fleet.prefix);
            let per_instance = loaded.config.admin.is_some() || loaded.config.workers != 0 || loaded.config.reuse_port || loaded.config.maxconn.is_some();
            if per_instance {
                println!("note: [admin], workers, reuse_port and maxconn are per instance: they stay in each instance's own file");
            }
        }
        FleetCommand::Export => {
            let mut client = connect().await?;
            let read = client.get(keys.services(), Some(GetOptions::new().with_prefix())).await?;
            let revision = read.header().map_or(0, |h| h.revision());
            let mut snapshot = Snapshot { revision, ..Snapshot::default() };
            for kv in read.kvs() {
                snapshot.set(&keys, &String::from_utf8_lossy(kv.key()), Some(kv.value()), kv.mod_revision());
            }
            let empty = config::parse_with("", "export", Resolve::No).map_err(|d| anyhow::anyhow!("{d}"))?;
            let composed = tokio::task::spawn_blocking(move || snapshot.compose(&empty)).await?.map_err(|d| anyhow::anyhow!("the fleet's services do not validate:\n{d}"))?;
            println!("# The services of fleet {} at etcd revision {revision}.\n", fleet.prefix);
            print!("{}", config::to_toml(&composed));
        }
        FleetCommand::Check { token_file } => {
            let authorization = match token_file {
                Some(f) => Some(format!("Bearer {}", std::fs::read_to_string(&f).with_context(|| format!("cannot read {}", f.display()))?.trim())),
                None => None,
            };
            let mut client = connect().await?;
            let read = client.get(keys.members(), Some(GetOptions::new().with_prefix())).await?;
            let members: Vec<Member> = read.kvs().iter().filter_map(|kv| serde_json::from_slice(kv.value()).ok()).collect();
            anyhow::ensure!(!members.is_empty(), "no instance is registered under {}", fleet.prefix);
            let mut seen = Vec::new();
            let mut unreachable = Vec::new();
            for m in &members {
                match agreement::ask(m, authorization.as_deref()).await {
                    Ok(s) => {
                        let revision = s.facts.get("config revision").cloned().unwrap_or_default();
                        println!(
                            "{}: admin {}, config revision {revision}, {}",
                            m.name,
                            m.admin.as_deref().unwrap_or("-"),
                            config::services(s.facts.keys().filter(|k| k.ends_with(": algorithm")).count())
                        );
                        seen.push(s);
                    }
                    Err(e) => unreachable.push(format!("{} cannot be asked: {e:#}", m.name)),
                }
            }
            let differences = agreement::disagreements(&seen);
            let degraded: Vec<String> = seen.iter().flat_map(|s| s.warnings.iter().map(move |w| format!("{}: {w}", s.name))).collect();
            for line in unreachable.iter().chain(&differences).chain(&degraded) {
                println!("{line}");
            }
            anyhow::ensure!(unreachable.is_empty() && differences.is_empty(), "the fleet does not agree ({} instances)", members.len());
            anyhow::ensure!(degraded.is_empty(), "the {} instances agree, but not all run whole (above)", members.len());
            println!("{} instances agree", members.len());
        }
    }
    Ok(())
}

/// Where etcd is: from an instance's file (`config`), or from the command line.
pub fn settings(config: Option<&std::path::Path>, endpoints: &[String], prefix: &str) -> anyhow::Result<config::Fleet> {
    if let Some(path) = config {
        let loaded = config::load(path).map_err(|d| anyhow::anyhow!("{d}"))?;
        return loaded.config.fleet.with_context(|| format!("{} has no [fleet]", path.display()));
    }
    anyhow::ensure!(!endpoints.is_empty(), "say where etcd is: --config FILE (with [fleet]) or --endpoints URL[,URL...]");
    let text = toml::to_string(&json!({ "fleet": { "endpoints": endpoints, "prefix": prefix } }))?;
    let config = config::parse_with(&text, "command line", Resolve::No).map_err(|d| anyhow::anyhow!("{d}"))?;
    config.fleet.context("no [fleet]")
}
