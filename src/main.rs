//! `kubectl-vap`: parses the command line, runs the command, maps errors to exit codes
//! (2: usage, input or connection; 1: `check` found problems; 0: fine).

use kubectl_vap::cli::{self, args::Cli};
use kubectl_vap::text::{error_text, printable};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse_args();
    // In-cluster, logs are JSON lines and so is the last word.
    let json = matches!(&cli.command, Some(cli::args::Command::Run(r)) if r.in_cluster);
    match cli::dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            let text = error_text(&*e);
            if json {
                tracing::error!("{text}");
            } else {
                // File names and messages can hold what the input put there.
                eprintln!("error: {}", printable(&text));
            }
            ExitCode::from(2)
        }
    }
}
