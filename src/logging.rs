//! Logging set up in one place. Logs go to stderr (never stdout, which carries reports);
//! the TUI sends them to a file instead, because the screen belongs to the UI.

use tracing_subscriber::{EnvFilter, fmt};

/// Human logs on stderr. `verbose` raises the default level to info (for `run`).
pub fn init_cli(filter: Option<&str>, verbose: bool) {
    let default = if verbose { "info" } else { "warn" };
    let filter =
        EnvFilter::try_new(filter.unwrap_or(default)).unwrap_or_else(|_| EnvFilter::new(default));
    let _ = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// JSON logs on stderr (in-cluster).
pub fn init_json(filter: Option<&str>) {
    let filter =
        EnvFilter::try_new(filter.unwrap_or("info")).unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
