//! `kubectl-vap`: parses the command line, runs the command, maps errors to exit codes
//! (2: usage, input or connection; 1: `check` found problems; 0: fine).

use clap::Parser;
use kubectl_vap::cli::{self, args::Cli};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli::dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
