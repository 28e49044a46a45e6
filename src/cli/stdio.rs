//! The only writers of the commands' standard output and error, which survive a closed pipe
//! (`kubectl vap plan | head -1`): what the reader did not want is not written, and the command
//! ends with its own exit code, not a panic (`print!` and `eprintln!` panic there; a test keeps
//! them out of `src/`).

use anyhow::Context;
use std::io::Write;

/// Writes `text` to standard output. A reader that went away (`| head`) is not an error: the
/// rest is dropped. Any other failure (a full disk behind `>`) is, since the report is lost.
pub fn stdout(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("writing to standard output")
        }
        _ => Ok(()),
    }
}

/// Writes `line` and a newline to standard error, for a person; nothing to do if it is closed.
pub fn stderr_line(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

/// `eprintln!` that survives a closed standard error (it panics there).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::stdio::stderr_line(&format!($($arg)*))
    };
}
pub(crate) use errln;
