//! Logging set up in one place. Logs go to stderr (never stdout, which carries reports);
//! the TUI sends them to a file instead, because the screen belongs to the UI.

use std::path::PathBuf;
use tracing_subscriber::{EnvFilter, fmt};

/// kube-client logs every failed request at error level ("failed with error …"), and
/// kube-runtime's watcher every refused watch at warn level, with a debug dump of the Status,
/// on every retry; each of those failures also reaches the user through our own error or
/// warning, in words, with what was being done, once. The TLS verifier logs each certificate
/// it refuses at error level, on every attempt; our error says it once, with the fix.
const QUIET: &str =
    "kube_client::client=off,kube_runtime::watcher=error,rustls_platform_verifier=off";

/// The filter for `--log` (or `default`), plus each directive of [`QUIET`] whose crate the
/// user's filter does not name: `--log warn` must not bring back one ERROR line per watch and
/// retry during an outage (a benchmark's `--log=warn` printed 84 in one restart), while
/// `--log debug,kube_client=debug` still shows kube-client's own. A bad `--log` falls back to
/// the default and says why once logging is up.
pub(crate) fn filter(user: Option<&str>, default: &str) -> (EnvFilter, Option<String>) {
    let fallback = || EnvFilter::new(format!("{default},{QUIET}"));
    match user {
        None => (fallback(), None),
        Some(f) => match EnvFilter::try_new(with_quiet(f)) {
            Ok(filter) => (filter, None),
            Err(e) => (
                fallback(),
                Some(format!(
                    "--log {f:?} is not a log filter ({e}); using {default:?} (e.g. --log debug, --log kubectl_vap=debug)"
                )),
            ),
        },
    }
}

/// `user`'s filter with the directives of [`QUIET`] for the crates it does not name.
fn with_quiet(user: &str) -> String {
    let mut filter = user.to_string();
    for directive in QUIET.split(',') {
        let krate = directive.split([':', '=']).next().unwrap_or(directive);
        if !user.contains(krate) {
            filter.push(',');
            filter.push_str(directive);
        }
    }
    filter
}

/// Human logs on stderr. `verbose` raises the default level to info (for `run`); `colour`
/// (decided by `--color`, NO_COLOR and whether stderr is a terminal) writes ANSI colour.
pub fn init_cli(user: Option<&str>, verbose: bool, colour: bool) {
    let (filter, problem) = filter(user, if verbose { "info" } else { "warn" });
    let _ = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A closed stderr (`2>&1 | head`) loses log lines, nothing more: the subscriber would
        // report it with `eprintln!`, which panics there.
        .log_internal_errors(false)
        .with_target(false)
        .with_ansi(colour)
        .try_init();
    if let Some(p) = problem {
        tracing::warn!("{p}");
    }
}

/// JSON logs on stderr (in-cluster).
pub fn init_json(user: Option<&str>) {
    let (filter, problem) = filter(user, "info");
    let _ = fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .log_internal_errors(false)
        .try_init();
    if let Some(p) = problem {
        tracing::warn!("{p}");
    }
}

/// Where the TUI's logs go: `KUBECTL_VAP_LOG_FILE`, else `kubectl-vap-tui.log` in the
/// temp directory.
pub fn tui_log_path() -> PathBuf {
    std::env::var_os("KUBECTL_VAP_LOG_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("kubectl-vap-tui.log"))
}

/// Logs in a file, for the TUI: the screen belongs to the UI. Process-wide, so every thread
/// logs there (the UI's, the data source's, the async runtime's workers, a library's) with
/// nothing set up per thread. A file that cannot be opened drops every log rather than draw
/// over the UI.
pub fn init_file(user: Option<&str>) {
    let (filter, problem) = filter(user, "info");
    let Ok(file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(tui_log_path())
    else {
        return;
    };
    let subscriber = fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .finish();
    if tracing::subscriber::set_global_default(subscriber).is_ok()
        && let Some(p) = problem
    {
        tracing::warn!("{p}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_filter_falls_back_and_says_why() {
        let (_, problem) = filter(Some("kubectl_vap=loud[["), "warn");
        let p = problem.expect("reported");
        assert!(
            p.contains("kubectl_vap=loud[[") && p.contains("\"warn\""),
            "{p}"
        );
        assert!(filter(Some("debug"), "warn").1.is_none());
        // The default silences kube's duplicate request errors and the watcher's Debug dumps
        // (each directive, in whatever order the filter shows them); so does a user's filter
        // that names none of their crates, and one that names a crate gets what it asked.
        let default = filter(None, "warn").0.to_string();
        let level = filter(Some("debug"), "warn").0.to_string();
        let named = filter(Some("debug,kube_client=debug"), "warn")
            .0
            .to_string();
        for directive in QUIET.split(',') {
            assert!(default.contains(directive), "{directive} in {default}");
            assert!(level.contains(directive), "{directive} in {level}");
            let names_it = directive.starts_with("kube_client");
            assert_eq!(
                named.contains(directive),
                !names_it,
                "{directive} in {named}"
            );
        }
    }
}
