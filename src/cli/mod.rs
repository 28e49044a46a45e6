//! Commands: each one gathers input (files or cluster), calls the pure core, prints.

pub mod admission;
pub mod args;
pub mod install;
pub mod live;
pub mod output;
pub mod report;

/// Kept for the TUI's live source until the controller redesign updates it to `crate::text`.
pub use crate::text::error_text;
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
    // `-f` is global (it is the TUI's too), so every subcommand accepts it: one that reads no
    // files would ignore it silently.
    if let Some((name, instead)) = cli.command.as_ref().and_then(reads_no_files)
        && !cli.input.filenames.is_empty()
    {
        anyhow::bail!("-f/--filename is for check, plan, test and the TUI; {name} {instead}")
    }
    match &cli.command {
        Some(Command::Test(args)) => admission::test(&cli, args),
        Some(Command::Audit(args)) => admission::audit(&cli, args),
        Some(Command::Version) => {
            println!("kubectl-vap {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Check(c)) if c.audit => admission::check_audit(&cli, &c.out),
        Some(Command::Check(c)) if !cli.input.filenames.is_empty() => {
            report::check_files(&cli, &c.out)
        }
        Some(Command::Plan(p)) if !cli.input.filenames.is_empty() => report::plan_files(&cli, p),
        Some(Command::Check(c)) => live::check(&cli, &c.out),
        Some(Command::Plan(p)) => live::plan(&cli, p),
        Some(Command::Run(args)) => live::run(&cli, args),
        Some(Command::Replay { template }) => {
            live::one_shot(&cli, crate::controller::Command::Replay(template.clone()))
        }
        Some(Command::Reconcile { template, all }) => {
            let cmd = match (template, all) {
                (Some(t), false) => crate::controller::Command::Reconcile(t.clone()),
                _ => crate::controller::Command::ReconcileAll,
            };
            live::one_shot(&cli, cmd)
        }
        Some(Command::Install {
            print: _,
            namespace,
            image,
            metrics_service,
        }) => install::install(&install::InstallOptions {
            namespace: namespace.clone(),
            image: image.clone(),
            metrics_service: *metrics_service,
        }),
        None => tui(&cli),
    }
}

/// A subcommand that reads no files: its name and what it does instead.
fn reads_no_files(command: &Command) -> Option<(&'static str, &'static str)> {
    const CLUSTER: &str = "acts on the cluster of the current context";
    Some(match command {
        Command::Run(_) => ("run", CLUSTER),
        Command::Replay { .. } => ("replay", CLUSTER),
        Command::Reconcile { .. } => ("reconcile", CLUSTER),
        Command::Audit(_) => (
            "audit",
            "audits the objects in the cluster of the current context",
        ),
        Command::Install { .. } => ("install", "prints manifests and reads nothing"),
        Command::Version => ("version", "reads nothing"),
        Command::Check(_) | Command::Plan(_) | Command::Test(_) => return None,
    })
}

/// `kubectl vap` with no command: the TUI on files (`-f`) or on the current context.
fn tui(cli: &Cli) -> anyhow::Result<ExitCode> {
    let opts = cli.generation_options();
    let source: Box<dyn crate::tui::Source> = if cli.input.filenames.is_empty() {
        Box::new(crate::tui::live_source::Live::new(
            crate::cluster::client::ConnectionOptions::from(&cli.conn),
            opts,
            cli.reconcile && !cli.readonly,
            (cli.lease_namespace.clone(), cli.lease_name.clone()),
        ))
    } else {
        // Bad input fails here (file and line, exit 2), before the screen is taken.
        let snapshot = report::load_files(cli)?;
        Box::new(crate::tui::Offline::new(
            snapshot,
            cli.input.filenames.clone(),
            opts,
        ))
    };
    let tui = crate::tui::TuiOptions {
        readonly: cli.readonly,
        log_filter: cli.log.clone(),
    };
    crate::tui::run(source, &tui)
}
