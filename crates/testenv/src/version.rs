//! The version knob: `KUBEENV_VERSION=1.30` runs a test binary on that Kubernetes minor.
//! `tests/kubeenv/build.sh` reads the same variable and prints that version's folder (for
//! `KUBEBUILDER_ASSETS`); here it makes sure the kube-apiserver found is of that minor, so a
//! run never claims a version it did not test. Unset, the env runs whatever kube-apiserver it
//! finds (`scripts/test`: the main version, 1.36).

use anyhow::{Context as _, bail};
use std::path::Path;
use std::process::Command;

/// The variable: a Kubernetes minor, `1.30`.
pub const VERSION_VAR: &str = "KUBEENV_VERSION";

/// The minor `KUBEENV_VERSION` asks for; `None` when it is unset or empty.
pub fn wanted() -> anyhow::Result<Option<String>> {
    wanted_from(std::env::var(VERSION_VAR).ok())
}

fn wanted_from(value: Option<String>) -> anyhow::Result<Option<String>> {
    match value.as_deref().map(str::trim) {
        None | Some("") => Ok(None),
        Some(v) if is_minor(v) => Ok(Some(v.to_string())),
        Some(v) => bail!("{VERSION_VAR}={v:?} is not a Kubernetes minor such as 1.30"),
    }
}

/// `1.<digits>`.
fn is_minor(v: &str) -> bool {
    v.strip_prefix("1.")
        .is_some_and(|m| !m.is_empty() && m.chars().all(|c| c.is_ascii_digit()))
}

/// Whether `version` (`v1.30.14`) is of `minor` (`1.30`).
pub fn is_of_minor(version: &str, minor: &str) -> bool {
    version
        .strip_prefix('v')
        .and_then(|v| v.strip_prefix(minor))
        .is_some_and(|rest| rest.starts_with('.'))
}

/// What `kube-apiserver --version` says it is (`v1.30.14`).
pub fn binary_version(kube_apiserver: &Path) -> anyhow::Result<String> {
    let out = Command::new(kube_apiserver)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", kube_apiserver.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "Kubernetes v1.30.14"
    match text.split_whitespace().collect::<Vec<_>>()[..] {
        ["Kubernetes", v] if out.status.success() => Ok(v.to_string()),
        _ => bail!(
            "{} --version said {:?} ({}), not `Kubernetes v1.x.y`",
            kube_apiserver.display(),
            text.trim(),
            out.status
        ),
    }
}

/// `version` (of the kube-apiserver at `path`) when it is of the minor `wanted`; else an
/// error that says how to get that version's folder.
pub(crate) fn check(path: &Path, version: &str, wanted: &str) -> anyhow::Result<()> {
    if is_of_minor(version, wanted) {
        return Ok(());
    }
    bail!(
        "{VERSION_VAR}={wanted}, but {} is Kubernetes {version}: export KUBEBUILDER_ASSETS=$({VERSION_VAR}={wanted} bash tests/kubeenv/build.sh) (that version's folder), or unset {VERSION_VAR}",
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_knob_takes_a_minor_and_nothing_else() {
        assert_eq!(wanted_from(None).expect("unset"), None);
        assert_eq!(wanted_from(Some(" ".into())).expect("empty"), None);
        assert_eq!(
            wanted_from(Some("1.30".into())).expect("a minor"),
            Some("1.30".into())
        );
        for bad in ["1.30.14", "v1.30", "1.", "130", "1.3x"] {
            let e = wanted_from(Some(bad.into())).expect_err(bad);
            assert!(e.to_string().contains("KUBEENV_VERSION"), "{e}");
        }
    }

    #[test]
    fn a_version_is_of_its_minor_only() {
        assert!(is_of_minor("v1.30.14", "1.30"));
        assert!(!is_of_minor("v1.300.1", "1.30"));
        assert!(!is_of_minor("v1.3.0", "1.30"));
        assert!(!is_of_minor("v1.36.3", "1.30"));
        let e = check(Path::new("/x/kube-apiserver"), "v1.36.3", "1.30").expect_err("1.36");
        let said = e.to_string();
        assert!(
            said.contains("/x/kube-apiserver is Kubernetes v1.36.3"),
            "{said}"
        );
        assert!(
            said.contains("KUBEENV_VERSION=1.30 bash tests/kubeenv/build.sh"),
            "{said}"
        );
    }
}
