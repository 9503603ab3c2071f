//! Subcommands: `run`, `check`, `demo`, `lab`, `backend`, `hash-password`, `fleet`, `ctl`, `certs`,
//! `upgrade`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::app::App;
use crate::config;
use crate::shutdown::Shutdown;
use realserver::BackendArgs;

#[derive(Debug, Parser)]
// `--version` names the optimisation level the binary was built at, which the lab records: a
// measurement of an unoptimised build says little about a release.
#[command(name = "fulcrum", version, long_version = concat!(env!("CARGO_PKG_VERSION"), " (opt-level ", env!("OPT_LEVEL"), ")"), about = "A TCP, HTTP and FTP server load balancer")]
pub struct Cli {
    /// Log filter (error, warn, info, debug, trace, or a tracing filter); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "info")]
    pub log: String,
    /// `text` (coloured only on a terminal) or `json` (one object per line, for a log shipper).
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the services of a config file; SIGHUP reloads it, SIGTERM drains and exits.
    Run { config: PathBuf },
    /// Validate config files and print every error with its line and a hint.
    Check {
        #[arg(required = true)]
        configs: Vec<PathBuf>,
    },
    /// Start four built-in real servers, a service over them and light traffic.
    Demo(crate::demo::DemoArgs),
    /// Reproduce the source papers' experiments and compare the algorithms (report, JSON, plots):
    /// runs `fulcrum-lab` with these arguments (`fulcrum lab --help` lists its scenarios).
    #[command(disable_help_flag = true)]
    Lab {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Run one real server (HTTP) for tests, the demo and the lab.
    Backend(BackendArgs),
    /// Read a password on standard input and print its Argon2 hash for `[admin] password_hash`.
    HashPassword,
    /// The fleet's config in etcd: import a config file's services, export them.
    Fleet(crate::fleet::cli::FleetArgs),
    /// Drive a running instance over its control socket (or admin listener): enable, disable,
    /// drain, weight, stats, reload, save, explain...
    Ctl(crate::ctl::CtlArgs),
    /// Replace the running binary with the one at its path, with no connection refused: the
    /// running process starts it and hands it its listening sockets (`fulcrum ctl upgrade`).
    Upgrade(crate::ctl::UpgradeArgs),
    /// List the certificates served (names, issuer, expiry, file or ACME, next renewal), by this
    /// instance through its control socket or admin listener, or with --fleet by every instance
    /// of the fleet, with the fleet's ACME certificates in etcd.
    Certs(crate::ctl::certs::CertsArgs),
}

pub fn main() -> ExitCode {
    crate::stats::process::mark_start();
    crate::app::upgrade::remember_exe();
    let cli = Cli::parse();
    init_tracing(&cli.log, cli.log_format);
    let result = match cli.command {
        Command::Check { configs } => return check(&configs),
        Command::Upgrade(u) => match runtime(1, false) {
            Ok(rt) => return rt.block_on(crate::ctl::run(crate::ctl::CtlArgs { reach: u.reach, command: crate::ctl::CtlCommand::Upgrade { force: u.force } })),
            Err(e) => Err(e),
        },
        Command::Certs(args) => match runtime(1, false) {
            Ok(rt) => return rt.block_on(crate::ctl::certs::run(args)),
            Err(e) => Err(e),
        },
        Command::Ctl(args) => match runtime(1, false) {
            Ok(rt) => return rt.block_on(crate::ctl::run(args)),
            Err(e) => Err(e),
        },
        Command::Run { config } => run(config),
        Command::Demo(args) => {
            crate::live::budget::raise_descriptor_limit();
            runtime(0, false).and_then(|rt| rt.block_on(crate::demo::run(args)))
        }
        Command::HashPassword => hash_password(),
        Command::Fleet(args) => runtime(1, false).and_then(|rt| rt.block_on(crate::fleet::cli::run(args))),
        Command::Lab { args } => lab(&args),
        Command::Backend(args) => runtime(1, false).and_then(|rt| rt.block_on(realserver::serve(args, ctrl_c()))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fulcrum: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(level: &str, format: LogFormat) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().or_else(|_| EnvFilter::try_new(level)).unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        // Colour codes only where a terminal shows them: not in journald, a file or a pipe.
        LogFormat::Text => fmt.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => fmt.json().flatten_event(true).init(),
    }
}

fn check(paths: &[PathBuf]) -> ExitCode {
    let mut failed = false;
    for path in paths {
        match config::load(path) {
            Ok(l) => {
                let (errors, notes) = check_kernel(&l.config);
                for note in &notes {
                    eprintln!("{}: note: {note}", path.display());
                }
                if !errors.is_empty() {
                    failed = true;
                    for e in &errors {
                        eprintln!("{}: {e}", path.display());
                    }
                    eprintln!("{}: {} error{}", path.display(), errors.len(), if errors.len() == 1 { "" } else { "s" });
                    continue;
                }
                let n = l.config.services.len();
                println!("{}: ok ({})", path.display(), crate::config::services(n));
            }
            Err(d) => {
                failed = true;
                eprintln!("{d}");
                eprintln!("{}: {} error{}", path.display(), d.len(), if d.len() == 1 { "" } else { "s" });
            }
        }
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// What only this host can say of a config's kernel-mode services (`kernel::check`: nft runs
/// and may change the ruleset), on a runtime of its own; nothing without such a service.
fn check_kernel(config: &crate::config::Config) -> (Vec<String>, Vec<String>) {
    if !config.services.iter().any(|s| s.mode == crate::mode::Mode::Kernel) {
        return (Vec::new(), Vec::new());
    }
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt.block_on(crate::kernel::check(config)),
        Err(e) => (vec![format!("cannot start a runtime to run nft: {e}")], Vec::new()),
    }
}

/// The async runtime: `workers` threads (0: one per core). One worker runs on the calling thread
/// itself, which spares every wake-up a hand-over between threads. With `reuse_port` the
/// workers are threads of their own (`proxy::workers`), and this one thread keeps the rest.
fn runtime(workers: usize, reuse_port: bool) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut b = if workers == 1 || reuse_port {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if workers > 1 {
            b.worker_threads(workers);
        }
        b
    };
    b.enable_all().build().context("cannot start the async runtime")
}

fn run(path: PathBuf) -> anyhow::Result<()> {
    // Started by a running Fulcrum to take its place (`app::upgrade`): its sockets and servers,
    // and where to say whether this process serves; any error on the way is said there too.
    let (inherited, answer) = crate::app::upgrade::Inherited::take().context("cannot take over from the running process")?.unzip();
    let mut answer = answer;
    let result = serve(path, inherited, &mut answer);
    if let (Err(e), Some(a)) = (&result, answer.take()) {
        a.fail(&format!("{e:#}"));
    }
    result
}

fn serve(path: PathBuf, inherited: Option<crate::app::upgrade::Inherited>, answer: &mut Option<crate::app::upgrade::Answer>) -> anyhow::Result<()> {
    let loaded = config::load(&path).map_err(|d| anyhow::anyhow!("invalid config:\n{d}"))?;
    // Who the process runs as: refused as root without `user` or `allow_root`, or switched
    // before the runtime's threads start (keeping a capability) or once the listeners are bound.
    let switch = crate::app::privilege::plan(&loaded.config)?;
    crate::live::budget::raise_descriptor_limit();
    if let Some(plan) = switch.as_ref().filter(|p| p.early()) {
        crate::admin::socket::prepare_directory(&loaded.config)?;
        plan.switch()?;
    }
    let rt = runtime(loaded.config.workers, loaded.config.reuse_port)?;
    rt.block_on(async move {
        let signals = crate::app::Signals::install()?;
        let app = App::start_inheriting(loaded.config, Some(path), Shutdown::new(), inherited).await?;
        if let Some(plan) = switch.filter(|p| !p.early()) {
            plan.switch()?;
        }
        let services = app.live.current().services.len();
        let status = format!("serving {services} service{}", if services == 1 { "" } else { "s" });
        match answer.take() {
            Some(a) => {
                a.ready().context("cannot tell the previous process this one serves")?;
                crate::app::systemd::took_over(&status);
            }
            None => crate::app::systemd::ready(&status),
        }
        app.run_until_signal(signals).await?;
        Ok(())
    })
}

fn hash_password() -> anyhow::Result<()> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).context("reading the password from standard input")?;
    let password = line.trim_end_matches(['\r', '\n']);
    anyhow::ensure!(!password.is_empty(), "no password given on standard input");
    println!("{}", crate::admin::hash_password(password)?);
    Ok(())
}

/// The lab is its own binary, so the load balancer carries none of its plotting and reporting:
/// `fulcrum lab ARGS` runs `fulcrum-lab ARGS` from beside this executable and tells it where this
/// executable is (every scenario runs it as `fulcrum run` and `fulcrum backend`). Under `cargo
/// run`, a lab not built yet is built first, so the commands of docs/lab.md work as typed.
fn lab(args: &[std::ffi::OsString]) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let me = std::env::current_exe().context("cannot find the fulcrum executable")?;
    let dir = me.parent().context("the fulcrum executable has no folder")?;
    let lab = dir.join("fulcrum-lab");
    if !lab.exists() {
        let Some(cargo) = std::env::var_os("CARGO") else {
            anyhow::bail!("{} is missing: the lab is built with `cargo build --release --workspace`", lab.display());
        };
        let release = dir.file_name().is_some_and(|d| d == "release");
        // The whole workspace, not `-p fulcrum-lab` alone: built together, the crates share one
        // set of features, so the load balancer's dependencies are reused, not compiled again.
        eprintln!("fulcrum: building the lab first (cargo build{} --workspace)", if release { " --release" } else { "" });
        let mut build = std::process::Command::new(cargo);
        build.args(["build", "--workspace"]);
        if release {
            build.arg("--release");
        }
        let status = build.status().context("cannot run cargo to build the lab")?;
        anyhow::ensure!(status.success() && lab.exists(), "building the lab failed ({status})");
    }
    let err = std::process::Command::new(&lab).args(args).env("FULCRUM_EXE", &me).exec();
    Err(anyhow::Error::new(err).context(format!("cannot run {}", lab.display())))
}

async fn ctrl_c() {
    let _ = tokio::signal::ctrl_c().await;
}
