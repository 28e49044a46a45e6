//! The real `kubectl` finds and runs the plugin. Needs the kubectl that `tests/kubeenv/build.sh`
//! builds (or envtest's), so it runs in `scripts/test`, not a bare `cargo test`.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn kubectl() -> PathBuf {
    if let Ok(p) = std::env::var("TEST_ASSET_KUBECTL") {
        return PathBuf::from(p);
    }
    let assets = std::env::var("KUBEBUILDER_ASSETS")
        .expect("KUBEBUILDER_ASSETS is not set: run scripts/test, or export KUBEBUILDER_ASSETS=$(tests/kubeenv/build.sh)");
    Path::new(&assets).join("kubectl")
}

/// A PATH with only a folder holding the plugin (so no other kubectl-* plugin interferes).
fn plugin_path() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_kubectl-vap"),
        dir.path().join("kubectl-vap"),
    )
    .expect("symlink");
    let path = format!("{}:/usr/bin:/bin", dir.path().display());
    (dir, path)
}

#[test]
#[ignore = "needs the kubeenv kubectl: run scripts/test"]
fn kubectl_lists_and_runs_the_plugin() {
    let (_dir, path) = plugin_path();
    let list = Command::new(kubectl())
        .args(["plugin", "list"])
        .env("PATH", &path)
        .output()
        .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&list.stderr)
    );
    assert!(stdout.contains("kubectl-vap"), "{stdout}");

    let version = Command::new(kubectl())
        .args(["vap", "version"])
        .env("PATH", &path)
        .output()
        .expect("kubectl runs");
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).lines().next(),
        Some(format!("kubectl-vap {}", env!("CARGO_PKG_VERSION")).as_str())
    );

    // Flags and exit codes pass through kubectl unchanged.
    let demo = format!("{}/assets/demo", env!("CARGO_MANIFEST_DIR"));
    let check = Command::new(kubectl())
        .args(["vap", "check", "-f", &demo, "-o", "json"])
        .env("PATH", &path)
        .output()
        .expect("kubectl runs");
    assert_eq!(check.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&check.stdout).contains("\"policy-missing\""));
}
