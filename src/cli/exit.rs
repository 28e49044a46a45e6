//! The one exit-code table every command follows; `--help` and the docs print [`TABLE`].
//!
//! A command says which row it ends on ([`Exit`]); an error that reaches `main` is "cannot
//! tell" unless it is a [`UsageError`] (the command line itself is wrong).

use std::process::ExitCode;

/// How a command ended. The numbers are the contract scripts rely on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done, and nothing to report.
    Clean,
    /// 1: done, and the answer is "something is wrong" (findings, planned or refused writes,
    /// denials, violations, writes that failed).
    Findings,
    /// 2: the command could not find out (cluster unreachable or forbidden, a resource not
    /// served, a name that does not exist, unreadable input, another copy leading).
    CannotTell,
    /// 3: the command line is wrong (unknown flag, missing argument, flags that would be
    /// ignored).
    Usage,
    /// 130: interrupted by Ctrl-C or SIGTERM; `audit` prints what it found so far.
    Interrupted,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Clean => 0,
            Exit::Findings => 1,
            Exit::CannotTell => 2,
            Exit::Usage => 3,
            Exit::Interrupted => 130,
        }
    }

    /// Clean or findings, as a yes/no question's answer.
    pub fn findings_if(found: bool) -> Exit {
        if found { Exit::Findings } else { Exit::Clean }
    }

    /// A report's own number (the admission layer's `exit_code()`, which follows this table).
    pub fn of_report(code: u8) -> Exit {
        match code {
            0 => Exit::Clean,
            1 => Exit::Findings,
            3 => Exit::Usage,
            130 => Exit::Interrupted,
            _ => Exit::CannotTell,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

/// The table as `--help` and `kubectl vap help exit-codes` print it.
pub const TABLE: &str = "\
Exit codes (every command):
  0  clean: done, nothing to report
  1  findings: check found a warning or error, plan --exit-code plans writes (plan: the
     server refuses one), test saw a denial or warning, audit found violations, run --once
     did not converge or left an error finding, replay/reconcile had writes fail, render
     could not render something selected (its findings on stderr)
  2  cannot tell: the cluster is unreachable or forbids a read or write, it serves no
     ValidatingAdmissionPolicy v1 (Kubernetes before 1.30), the ConstraintTemplate CRD is not
     served, a named template or constraint does not exist, input cannot be read, another
     copy leads (run --once), a task of the reconciler died (run)
  3  usage: the command line is wrong (unknown or missing arguments, flags that would be
     ignored)
  130  interrupted (Ctrl-C, SIGTERM): audit prints what it found so far";

/// The command line is wrong in a way clap cannot see (a flag that needs another, a command
/// that only prints): exit 3.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A usage error, for `anyhow`'s `?`.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// The row an error that reached `main` ends on.
pub fn of_error(e: &anyhow::Error) -> Exit {
    if e.downcast_ref::<UsageError>().is_some() {
        Exit::Usage
    } else {
        Exit::CannotTell
    }
}

/// A clap error ends the process as the table says: help and `--version` exit 0 (printed on
/// stdout, which may be closed: that is not an error), a usage error 3.
pub fn exit_on_clap_error(e: clap::Error) -> ! {
    // Printing can only fail on a closed stream; the exit code still says what happened.
    let _ = e.print();
    let code = if e.use_stderr() {
        Exit::Usage
    } else {
        Exit::Clean
    };
    std::process::exit(i32::from(code.code()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers are the contract; `of_report` reads the admission layer's back.
    #[test]
    fn the_table_is_the_contract() {
        let rows = [
            (Exit::Clean, 0),
            (Exit::Findings, 1),
            (Exit::CannotTell, 2),
            (Exit::Usage, 3),
            (Exit::Interrupted, 130),
        ];
        for (exit, code) in rows {
            assert_eq!(exit.code(), code);
            assert_eq!(Exit::of_report(code), exit);
            assert!(
                TABLE.contains(&format!("\n  {code}  ")),
                "{code} in the table"
            );
        }
        assert_eq!(Exit::findings_if(true), Exit::Findings);
        assert_eq!(Exit::findings_if(false), Exit::Clean);
    }

    #[test]
    fn a_usage_error_is_3_anything_else_2() {
        assert_eq!(of_error(&usage("wrong")), Exit::Usage);
        let wrapped = usage("wrong").context("while parsing");
        assert_eq!(of_error(&wrapped), Exit::Usage, "context keeps the row");
        assert_eq!(of_error(&anyhow::anyhow!("unreachable")), Exit::CannotTell);
    }
}
