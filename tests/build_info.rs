//! build.rs's facts for `kubectl vap version`: the commit of a checkout, of a crate tarball
//! (`.cargo_vcs_info.json`), `unknown` otherwise; k8s-openapi's level from its build metadata.
//! The script's functions run here on folders made for each case.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

#[allow(dead_code)]
#[path = "../build.rs"]
mod build_script;

use build_script::{commit, k8s_openapi_level};
use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    git(dir.path(), &["init", "-q"]);
    std::fs::write(dir.path().join("Cargo.toml"), "[package]\n").expect("write");
    git(dir.path(), &["add", "Cargo.toml"]);
    git(dir.path(), &["commit", "-q", "-m", "one"]);
    dir
}

#[test]
fn a_checkout_reports_its_commit_and_whether_it_was_edited() {
    let dir = repo();
    let head = git(dir.path(), &["rev-parse", "HEAD"]);
    assert_eq!(head.len(), 40);
    assert_eq!(commit(dir.path()), head);

    std::fs::write(dir.path().join("Cargo.toml"), "[package]\nname = \"x\"\n").expect("edit");
    assert_eq!(commit(dir.path()), format!("{head}-dirty"));
}

/// A crate inside another project's checkout (vendored, unpacked) is not that project's commit.
#[test]
fn a_folder_inside_another_checkout_is_unknown() {
    let dir = repo();
    let vendored = dir.path().join("vendor/kubectl-vap");
    std::fs::create_dir_all(&vendored).expect("mkdir");
    assert_eq!(commit(&vendored), "unknown");
}

#[test]
fn a_crate_tarball_reports_the_commit_cargo_package_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(commit(dir.path()), "unknown", "no git, no vcs info");

    let sha = "0123456789abcdef0123456789abcdef01234567";
    let info = dir.path().join(".cargo_vcs_info.json");
    std::fs::write(
        &info,
        format!("{{\n  \"git\": {{\n    \"sha1\": \"{sha}\"\n  }},\n  \"path_in_vcs\": \"\"\n}}"),
    )
    .expect("write");
    assert_eq!(commit(dir.path()), sha);

    std::fs::write(
        &info,
        format!("{{\"git\":{{\"sha1\":\"{sha}\",\"dirty\":true}},\"path_in_vcs\":\"\"}}"),
    )
    .expect("write");
    assert_eq!(commit(dir.path()), format!("{sha}-dirty"));

    std::fs::write(&info, "{\"git\":{\"sha1\":\"\"}}").expect("write");
    assert_eq!(commit(dir.path()), "unknown", "an empty sha is no commit");
}

#[test]
fn k8s_openapi_metadata_gives_the_crate_and_the_kubernetes_version() {
    // What k8s-openapi 0.29's build script emits with the v1_33 feature: 0x00_01_21_00.
    let vars = [
        ("CARGO_PKG_NAME".to_string(), "kubectl-vap".to_string()),
        (
            "DEP_K8S_OPENAPI_0_29_0_VERSION".to_string(),
            (0x0001_0000u32 | (33 << 8)).to_string(),
        ),
    ];
    assert_eq!(
        k8s_openapi_level(vars),
        Some(("0.29.0".to_string(), "1.33".to_string()))
    );
    assert_eq!(k8s_openapi_level(Vec::new()), None);
}
