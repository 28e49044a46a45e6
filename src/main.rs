//! `kubectl-vap`: parses the command line, runs the command, ends with the exit code of the
//! one table (`cli::exit::TABLE`: 0 clean, 1 findings, 2 cannot tell, 3 usage).
#![forbid(unsafe_code)]

use kubectl_vap::cli::{self, args::Cli, exit};
use kubectl_vap::text::printable_lines;
use std::process::ExitCode;

fn main() -> ExitCode {
    // kubectl's plugin completion (`kubectl_complete-vap __complete WORDS…`): the words are
    // the half-typed command line, not ours to parse as flags.
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if args.first().map(String::as_str) == Some(cli::completion::COMPLETE) {
        return cli::completion::kubectl_complete(&args[1..]);
    }
    let cli = Cli::parse_args();
    // In-cluster, logs are JSON lines and so is the last word.
    let json = matches!(&cli.command, Some(cli::args::Command::Run(r)) if r.in_cluster);
    match cli::dispatch(cli) {
        Ok(exit) => exit.into(),
        Err(e) => {
            let text = cli::error_said(&e);
            if json {
                tracing::error!("{text}");
            } else {
                // A message of several lines prints as lines; each line is escaped, since file
                // names and messages can hold what the input put there.
                cli::stdio::stderr_line(&format!("error: {}", printable_lines(&text)));
            }
            exit::of_error(&e).into()
        }
    }
}
