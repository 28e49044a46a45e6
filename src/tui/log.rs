//! The UI's logs go to a file: the screen belongs to the UI. `KUBECTL_VAP_LOG_FILE` chooses
//! the file (default: `kubectl-vap-tui.log` in the temp directory).

use std::path::PathBuf;
use tracing::Dispatch;

pub fn log_path() -> PathBuf {
    std::env::var_os("KUBECTL_VAP_LOG_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("kubectl-vap-tui.log"))
}

/// A dispatcher writing to the log file; when the file cannot be opened, one that drops
/// everything (logs are never drawn over the UI).
pub fn file_dispatch(filter: Option<&str>) -> Dispatch {
    let (filter, problem) = crate::logging::filter(filter, "info");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path());
    match file {
        Ok(file) => {
            let dispatch = Dispatch::new(
                tracing_subscriber::fmt()
                    .with_env_filter(filter)
                    .with_ansi(false)
                    .with_writer(std::sync::Mutex::new(file))
                    .finish(),
            );
            if let Some(p) = problem {
                tracing::dispatcher::with_default(&dispatch, || tracing::warn!("{p}"));
            }
            dispatch
        }
        Err(_) => Dispatch::none(),
    }
}
