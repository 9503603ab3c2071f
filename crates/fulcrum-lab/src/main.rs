//! The `fulcrum-lab` command, which `fulcrum lab` runs: argument parsing and the exit code (0,
//! 1 for an error, 3 when a scenario's checks failed); the experiments are in the library.

use std::process::ExitCode;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "fulcrum lab", bin_name = "fulcrum lab", version, about = "Reproduce the source papers' experiments and compare the algorithms (report, JSON, plots)")]
struct Cli {
    #[command(flatten)]
    lab: fulcrum_lab::LabArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    if let Err(e) = fulcrum_lab::prepare(&cli.lab) {
        eprintln!("fulcrum lab: error: {e:#}");
        return ExitCode::FAILURE;
    }
    let outcome = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(anyhow::Error::from).and_then(|rt| rt.block_on(fulcrum_lab::run(cli.lab)));
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(3),
        Err(e) => {
            eprintln!("fulcrum lab: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
