//! Commands: each one gathers input (files or cluster), calls the pure core, prints.

pub mod admission;
pub mod args;
pub mod completion;
pub mod exit;
pub mod install;
pub mod jsonpath;
pub mod live;
pub mod output;
pub mod render;
pub mod report;
pub mod static_check;
pub mod stdio;
pub mod topics;
pub mod version;
pub mod watch;

/// Kept for the TUI's live source until the controller redesign updates it to `crate::text`.
pub use crate::text::error_text;
use args::{Cli, Command};
use exit::Exit;

/// What a failed command says on its last line. A `--context` the kubeconfig does not have
/// is said in kubectl's words alone (`context "x" does not exist`, with the fix): what was
/// being done around it (connecting, loading the kubeconfig) adds nothing a user needs.
pub fn error_said(e: &anyhow::Error) -> String {
    let speaks_alone = e.chain().find_map(|c| match c.downcast_ref() {
        Some(k @ crate::cluster::KubeError::NoContext { .. }) => Some(k.to_string()),
        _ => None,
    });
    let text = speaks_alone.unwrap_or_else(|| error_text(&**e));
    match hint_for(&text) {
        Some(hint) => format!("{text}\n{hint}"),
        None => text,
    }
}

/// What fixes an error a kubectl user meets first, said under it as kubectl would point to it.
/// Matched on the text: the TLS stack's error types are not ours to name (rustls says
/// `invalid peer certificate: …` for a server certificate it cannot verify).
fn hint_for(text: &str) -> Option<&'static str> {
    text.contains("invalid peer certificate").then_some(
        "hint: the server's certificate is not signed by a CA this client trusts: give the cluster's CA with --certificate-authority FILE (or certificate-authority-data in the kubeconfig), or skip the check with --insecure-skip-tls-verify (insecure)",
    )
}

/// Runs the parsed command line. `Ok` carries the row of the exit-code table it ended on;
/// `Err` ends on 2 (cannot tell) or, for an [`exit::UsageError`], 3.
pub fn dispatch(mut cli: Cli) -> anyhow::Result<Exit> {
    // Every request says which command sent it (User-Agent `kubectl-vap/<version> (<command>)`).
    cli.conn.command = Some(
        cli.command
            .as_ref()
            .map_or("tui", Command::name)
            .to_string(),
    );
    cli.gen_flags().validate().map_err(exit::usage)?;
    match &cli.command {
        // The TUI owns the screen: its logs go to a file.
        None => crate::logging::init_file(cli.log.as_deref()),
        Some(Command::Run(r)) if r.in_cluster => crate::logging::init_json(cli.log.as_deref()),
        _ => crate::logging::init_cli(
            cli.log.as_deref(),
            matches!(cli.command, Some(Command::Run(_))),
            // A CI log shows escape codes as noise: colour on a terminal only, unless asked.
            cli.color
                .colour(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        ),
    }
    match &cli.command {
        Some(Command::Test(args)) => admission::test(&cli, args),
        Some(Command::Audit(args)) => admission::audit(&cli, args),
        Some(Command::Version { out }) => version::print(out.output),
        Some(Command::Help { topic }) => topics::help(topic.as_deref()),
        Some(Command::Completion { shell }) => completion::print_script(*shell),
        Some(Command::Check(c)) if c.watch && !c.input.filenames.is_empty() => Err(exit::usage(
            "check -w watches a cluster for changes; files (-f) are read once: leave out -w",
        )),
        Some(Command::Check(c)) if c.audit => admission::check_audit(&cli, &c.out),
        Some(Command::Check(c)) if !c.input.filenames.is_empty() => {
            report::check_files(&cli, &c.out)
        }
        Some(Command::Plan(p)) if !p.input.filenames.is_empty() => report::plan_files(&cli, p),
        Some(Command::Render(r)) => render::render(&cli, r),
        Some(Command::Check(c)) if c.watch => watch::check_watch(&cli, &c.out),
        Some(Command::Check(c)) => live::check(&cli, &c.out),
        Some(Command::Plan(p)) => live::plan(&cli, p),
        Some(Command::Run(args)) => live::run(&cli, args),
        Some(Command::Replay { template, .. }) => {
            live::one_shot(&cli, crate::controller::Command::Replay(template.clone()))
        }
        Some(Command::Reconcile { template, all, .. }) => {
            let cmd = match (template, all) {
                (Some(t), false) => crate::controller::Command::Reconcile(t.clone()),
                _ => crate::controller::Command::ReconcileAll,
            };
            live::one_shot(&cli, cmd)
        }
        // `install` applies nothing: it says so, and how to apply, rather than print
        // manifests someone may take for an installation.
        Some(Command::Install(i)) if !i.print => Err(exit::usage(
            "install only prints the manifests, it applies nothing; to install: kubectl vap install --print | kubectl apply -f -",
        )),
        Some(Command::Install(i)) => install::install(&install::InstallOptions {
            namespace: i.namespace.clone(),
            image: i.image.clone(),
            metrics_service: i.metrics_service,
        }),
        None => tui(&cli),
    }
}

/// `kubectl vap` with no command: the TUI on files (`-f`) or on the current context.
fn tui(cli: &Cli) -> anyhow::Result<Exit> {
    let t = &cli.tui;
    let opts = cli.generation_options();
    let source: Box<dyn crate::tui::Source> = if t.input.filenames.is_empty() {
        Box::new(crate::tui::live_source::Live::new(
            crate::cluster::client::ConnectionOptions::from(&cli.conn),
            opts,
            t.reconcile && !t.readonly,
            (t.lease.lease_namespace.clone(), t.lease.lease_name.clone()),
        ))
    } else {
        // Bad input fails here (file and line, exit 2), before the screen is taken.
        let snapshot = report::load_files(cli)?;
        Box::new(crate::tui::Offline::new(
            snapshot,
            t.input.filenames.clone(),
            opts,
        ))
    };
    let tui = crate::tui::TuiOptions {
        readonly: t.readonly,
        // The screen is a terminal: only --color=never and NO_COLOR take the colour away.
        colour: cli.color.colour(true),
    };
    // The TUI ends with an error (2) or because its user quit: clean.
    crate::tui::run(source, &tui)?;
    Ok(Exit::Clean)
}
