//! Commands: each one gathers input (files or cluster), calls the pure core, prints.

pub mod args;
pub mod live;
pub mod output;
pub mod report;

use args::{Cli, Command};
use std::process::ExitCode;

/// Runs the parsed command line. `Ok` carries the exit code; `Err` exits 2 with its context.
pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match &cli.command {
        // The TUI owns the screen and sets up its own file logger.
        None => {}
        Some(Command::Run(r)) if r.in_cluster => crate::logging::init_json(cli.log.as_deref()),
        _ => crate::logging::init_cli(
            cli.log.as_deref(),
            matches!(cli.command, Some(Command::Run(_))),
        ),
    }
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
        Some(Command::Check(out)) => live::check_or_plan(&cli, out, false),
        Some(Command::Plan(out)) => live::check_or_plan(&cli, out, true),
        Some(Command::Run(args)) => live::run(&cli, args),
        Some(Command::Replay { template }) => {
            live::one_shot(&cli, crate::reconciler::Command::Replay(template.clone()))
        }
        Some(Command::Reconcile { template, all }) => {
            let cmd = match (template, all) {
                (Some(t), false) => crate::reconciler::Command::Reconcile(t.clone()),
                _ => crate::reconciler::Command::ReconcileAll,
            };
            live::one_shot(&cli, cmd)
        }
        Some(Command::Install {
            print: _,
            namespace,
            image,
        }) => live::install(namespace, image),
        None => crate::tui::run(&cli),
    }
}
