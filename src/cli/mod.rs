//! Commands: each one gathers input (files or cluster), calls the pure core, prints.

pub mod admission;
pub mod args;
pub mod install;
pub mod live;
pub mod output;
pub mod report;
pub mod terminal;

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
        // What acts on a cluster takes no files: a `-f` there would be silently ignored.
        Some(Command::Run(_) | Command::Replay { .. } | Command::Reconcile { .. })
            if !cli.input.filenames.is_empty() =>
        {
            anyhow::bail!(
                "-f/--filename is for check, plan and the TUI; run, replay and reconcile act on the cluster of the current context"
            )
        }
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
        None => crate::tui::run(&cli),
    }
}

/// An error as one line, each cause once. Some errors print their source inside their own
/// message (kube's do), so `{:#}` would repeat it at every level of the chain.
pub fn error_text(e: &anyhow::Error) -> String {
    // kube wraps transport errors as "ServiceError: <the cause>"; the cause follows anyway.
    let clean = |s: &str| s.replace("ServiceError: ", "");
    let segments: Vec<String> = e.chain().map(|c| clean(&c.to_string())).collect();
    let mut out: Vec<String> = Vec::new();
    for (i, seg) in segments.iter().enumerate() {
        let next = segments.get(i + 1).map(String::as_str);
        if next == Some(seg.as_str()) {
            // A transparent wrapper: its source says the same.
            continue;
        }
        let mut seg = seg.as_str();
        if let Some(head) = next
            .and_then(|next| seg.strip_suffix(next))
            .and_then(|h| h.strip_suffix(": "))
        {
            seg = head;
        }
        if seg.is_empty() || out.last().is_some_and(|l| l == seg) {
            continue;
        }
        out.push(seg.to_string());
    }
    out.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{what}: {source}")]
    struct Repeats {
        what: &'static str,
        #[source]
        source: std::io::Error,
    }

    /// Wraps an error and displays exactly what it wraps.
    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Same(#[source] Repeats);

    #[test]
    fn a_wrapper_that_repeats_its_source_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = anyhow::Error::new(Same(Repeats {
            what: "discovering",
            source: io,
        }))
        .context("starting");
        assert_eq!(error_text(&e), "starting: discovering: refused");
    }

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let e = anyhow::Error::new(Repeats {
            what: "discovering admissionregistration.k8s.io/v1",
            source: io,
        })
        .context("starting the reconciler against https://127.0.0.1:1");
        assert_eq!(
            error_text(&e),
            "starting the reconciler against https://127.0.0.1:1: discovering admissionregistration.k8s.io/v1: connection refused"
        );
        assert_eq!(format!("{e:#}").matches("connection refused").count(), 2);
    }
}
