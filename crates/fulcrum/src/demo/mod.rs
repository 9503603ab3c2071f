//! `fulcrum demo`: the embedded default. Four built-in real servers, the paper's `http` rule over
//! them (`demo.toml` beside this file), light traffic, the dashboard on the admin address, and a line every
//! few seconds of what each server got. With `--fleet`, the rule lives in a local etcd and two
//! instances run it (`demo::fleet`).

mod fleet;

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use tokio_util::sync::CancellationToken;

use crate::admin::Control;
use crate::app::App;
use crate::config;
use crate::shutdown::Shutdown;
use realserver::{self as backend, BackendArgs};

/// How often the demo prints what each server got.
const REPORT_EVERY: Duration = Duration::from_secs(5);

const TEMPLATE: &str = include_str!("demo.toml");

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// The service's virtual address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The admin API's address.
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub admin: SocketAddr,
    /// Requests per second of the built-in traffic (0: none, at most 10000; a second divided by
    /// more than a billion is a zero period, which tokio's interval refuses with a panic).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(..=10_000))]
    pub rate: u32,
    /// Also serve HTTPS (HTTP mode, TLS terminated by Fulcrum) over the same servers, with a
    /// certificate for localhost and 127.0.0.1 made at start.
    #[arg(long)]
    pub tls: bool,
    /// The HTTPS service's address (with --tls).
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub tls_listen: SocketAddr,
    /// Run the demo as a fleet: a local etcd (Debian's etcd-server) holds the service, and two
    /// instances run it, the second on the next port after --listen and --admin. A change in one
    /// dashboard shows in the other.
    #[arg(long, conflicts_with = "tls")]
    pub fleet: bool,
    /// Stop after this many seconds (0: run until Ctrl-C).
    #[arg(long, default_value_t = 0)]
    pub seconds: u64,
}

pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let mut text = TEMPLATE.replace("{LISTEN}", &args.listen.to_string()).replace("{ADMIN}", &args.admin.to_string());
    for i in 1..=4 {
        let name = format!("server{i}");
        let (addr, serving) = backend::bind(
            BackendArgs { listen: "127.0.0.1:0".parse()?, name: name.clone(), index_text: None, large_size: 64 << 20, backlog: 1024, degrade: Default::default() },
            CancellationToken::new(),
        )
        .await
        .with_context(|| format!("starting built-in real server {name}"))?;
        tokio::spawn(serving);
        text = text.replace(&format!("{{SERVER{i}}}"), &addr.to_string());
    }
    // The running config gets a file of its own, so the dashboard's Save and Reload work in the
    // demo as they would in production.
    let dir = std::env::temp_dir().join(format!("fulcrum-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // The directory goes whichever way the demo ends, a port already taken included.
    let result = if args.fleet { run_fleet(&args, &text, &dir).await } else { serve(&args, text, &dir).await };
    let _ = std::fs::remove_dir_all(&dir);
    result.map_err(|e| name_the_flag(e, &args))
}

/// A busy address's error names the flag that moves it.
fn name_the_flag(e: anyhow::Error, args: &DemoArgs) -> anyhow::Error {
    let flag = match e.downcast_ref::<crate::app::StartError>() {
        Some(crate::app::StartError::AdminBind { .. }) => "--admin",
        Some(crate::app::StartError::Bind { address, .. }) if *address == args.tls_listen => "--tls-listen",
        Some(crate::app::StartError::Bind { .. }) => "--listen",
        _ => return e,
    };
    e.context(format!("the address is taken (another demo running?): choose another with {flag}"))
}

async fn serve(args: &DemoArgs, mut text: String, dir: &std::path::Path) -> anyhow::Result<()> {
    let certificate = if args.tls { Some(https_service(&mut text, dir, args.tls_listen)?) } else { None };
    let config = config::parse(&text, "demo.toml").map_err(|d| anyhow::anyhow!("embedded demo config is invalid:\n{d}"))?;
    let path = dir.join("demo.toml");
    std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    let shutdown = Shutdown::new();
    let app = App::start(config, Some(path.clone()), shutdown.clone()).await?;
    println!("Fulcrum demo");
    println!("  dashboard:                                      http://{}/", args.admin);
    println!("  service http (round robin over 4 real servers): http://{}/", args.listen);
    println!("  stats (JSON):                                   http://{}/api/stats", args.admin);
    println!("  config file (Save in the dashboard writes it):  {}", path.display());
    if let Some(cert) = &certificate {
        println!("  service https (HTTP mode, TLS by Fulcrum):      https://{}/", args.tls_listen);
        println!("  its certificate (made now, for localhost):      {}", cert.display());
        println!("  try: curl -s --cacert {} https://localhost:{}/name", cert.display(), args.tls_listen.port());
    }
    println!("  try: curl -s http://{}/name ; press Ctrl-C to stop", args.listen);
    if args.rate > 0 {
        tokio::spawn(traffic(args.listen, args.rate));
    }
    let report = tokio::spawn(report(app.clone()));
    wait(args.seconds).await;
    report.abort();
    app.stop().await;
    Ok(())
}

/// Until `seconds` have passed, or Ctrl-C when 0.
async fn wait(seconds: u64) {
    if seconds > 0 {
        tokio::time::sleep(Duration::from_secs(seconds)).await;
    } else {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn run_fleet(args: &DemoArgs, text: &str, dir: &std::path::Path) -> anyhow::Result<()> {
    println!("Fulcrum fleet demo");
    let (etcd, instances) = fleet::start(text, dir, args.listen, args.admin).await?;
    for (name, _, listen, admin) in &instances {
        println!("  {name}: dashboard http://{admin}/   service http://{listen}/");
    }
    println!("  change a weight in one dashboard and watch the other's Real Servers tab follow;");
    println!("  the audit: etcdctl --endpoints {} get --prefix /fulcrum-demo/audit/ --print-value-only", etcd.endpoint);
    println!("  press Ctrl-C to stop");
    let mut reports = Vec::new();
    for (name, app, listen, _) in &instances {
        if args.rate > 0 {
            tokio::spawn(traffic(*listen, args.rate));
        }
        reports.push(tokio::spawn(fleet_report(name.clone(), app.clone())));
    }
    wait(args.seconds).await;
    for r in reports {
        r.abort();
    }
    for (_, app, _, _) in &instances {
        app.stop().await;
    }
    drop(etcd);
    Ok(())
}

/// Every five seconds, what one instance runs: the fleet's revision and each server's weight.
async fn fleet_report(name: String, app: std::sync::Arc<App>) {
    let mut tick = tokio::time::interval(REPORT_EVERY);
    tick.tick().await;
    loop {
        tick.tick().await;
        let revision =
            app.fleet.as_ref().map(|f| f.status()).map_or_else(|| "-".to_string(), |s| if s.connected { s.revision.to_string() } else { format!("{} (disconnected)", s.revision) });
        let snap = crate::stats::snapshot(&app.current());
        for s in &snap.services {
            let servers: Vec<String> = s.servers.iter().map(|v| format!("{} weight {} {} connections", v.address, v.weight, v.total)).collect();
            println!("  {name} revision {revision} {}: {}", s.name, servers.join(" | "));
        }
    }
}

/// Adds the `https` service to the demo's config `text`: the same four servers in HTTP mode behind
/// TLS, with a self-signed certificate for localhost and 127.0.0.1 written into `dir`. Returns
/// the certificate's path (what a client trusts).
fn https_service(text: &mut String, dir: &std::path::Path, listen: SocketAddr) -> anyhow::Result<std::path::PathBuf> {
    let key = rcgen::KeyPair::generate().context("making the demo's key")?;
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).context("the demo certificate's names")?;
    params.distinguished_name.push(rcgen::DnType::CommonName, "Fulcrum demo");
    let cert = params.self_signed(&key).context("making the demo's certificate")?;
    let (cert_path, key_path) = (dir.join("demo.pem"), dir.join("demo.key"));
    std::fs::write(&cert_path, cert.pem()).with_context(|| format!("writing {}", cert_path.display()))?;
    std::fs::write(&key_path, key.serialize_pem()).with_context(|| format!("writing {}", key_path.display()))?;
    let servers: String = text.match_indices("[[service.server]]").map(|(i, _)| &text[i..]).map(|rest| rest.lines().take(2).collect::<Vec<_>>().join("\n") + "\n\n").collect();
    text.push_str(&format!(
        "\n[[service]]\nname = \"https\"\nlisten = \"{listen}\"\nmode = \"http\"\n\n[service.tls]\n[[service.tls.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n\n[service.health]\nkind = \"http\"\npath = \"/index.html\"\nexpect_text = \"TARGET\"\n\n{servers}",
        cert_path.display(),
        key_path.display()
    ));
    Ok(cert_path)
}

/// Light traffic: `rate` requests a second, one connection each, as the paper's clients did.
async fn traffic(target: SocketAddr, rate: u32) {
    let mut tick = tokio::time::interval(Duration::from_secs(1) / rate);
    loop {
        tick.tick().await;
        tokio::spawn(async move {
            if let Ok(Ok(mut s)) = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(target)).await {
                let _ = s.write_all(b"GET /name HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n").await;
                let mut sink = Vec::new();
                let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut sink)).await;
            }
        });
    }
}

/// Prints each server's state and total connections every five seconds.
async fn report(control: std::sync::Arc<impl Control>) {
    let mut tick = tokio::time::interval(REPORT_EVERY);
    tick.tick().await;
    loop {
        tick.tick().await;
        let snap = crate::stats::snapshot(&control.current());
        for s in &snap.services {
            let line: Vec<String> = s.servers.iter().map(|v| format!("{} {} {} connections", v.address, format!("{:?}", v.state).to_lowercase(), v.total)).collect();
            println!("  {}: {}", s.name, line.join(" | "));
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::Cli;

    #[test]
    fn a_rate_whose_period_tokio_cannot_tick_is_refused() {
        assert!(Cli::try_parse_from(["fulcrum", "demo", "--rate", "10000"]).is_ok());
        let e = Cli::try_parse_from(["fulcrum", "demo", "--rate", "4294967295"]).unwrap_err().to_string();
        assert!(e.contains("is not in 0..=10000"), "{e}");
    }
}
