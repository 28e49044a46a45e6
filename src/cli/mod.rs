//! Commands: each one gathers input (files or cluster), calls the pure core, prints.

pub mod args;
pub mod output;
pub mod report;

use args::{Cli, Command};
use std::process::ExitCode;

/// Runs the parsed command line. `Ok` carries the exit code; `Err` exits 2 with its context.
pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    crate::logging::init_cli(
        cli.log.as_deref(),
        matches!(cli.command, Some(Command::Run(_))),
    );
    match &cli.command {
        Some(Command::Version) => {
            println!("kubectl-vap {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Check(out)) if !cli.input.filenames.is_empty() => {
            report::check_files(&cli, out)
        }
        Some(Command::Plan(out)) if !cli.input.filenames.is_empty() => {
            report::plan_files(&cli, out)
        }
        Some(Command::Check(_)) | Some(Command::Plan(_)) => {
            anyhow::bail!("check/plan against a live cluster is not built yet; use -f PATH")
        }
        Some(Command::Run(_)) | Some(Command::Replay { .. }) | Some(Command::Reconcile { .. }) => {
            anyhow::bail!("the live reconciler is not built yet")
        }
        Some(Command::Install { .. }) => anyhow::bail!("install --print is not built yet"),
        None => crate::tui::run(&cli),
    }
}
