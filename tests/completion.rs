//! Shell completion as shells run it: clap's bash script sourced in a real `bash`, and
//! kubectl's plugin completion through the real `kubectl` and the krew archive's
//! `kubectl_complete-vap` script.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_kubectl-vap");

/// A folder holding the plugin and the completion helper, as krew's bin (plus the user's copy
/// of the helper) would hold them; PATH has nothing else of kubectl's.
fn plugin_dir() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(BIN, dir.path().join("kubectl-vap")).expect("symlink");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/completion/kubectl_complete-vap"),
        dir.path().join("kubectl_complete-vap"),
    )
    .expect("copy the helper");
    let path = format!("{}:/usr/bin:/bin", dir.path().display());
    (dir, path)
}

/// A kubeconfig with two contexts (no cluster behind them: names only).
fn two_contexts(dir: &Path) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\ncurrent-context: kind-dev\n\
         clusters:\n- name: dev\n  cluster: {server: 'https://127.0.0.1:1'}\n\
         users:\n- name: me\n  user: {token: x}\n\
         contexts:\n- name: kind-dev\n  context: {cluster: dev, user: me}\n\
         - name: prod-eu\n  context: {cluster: dev, user: me}\n",
    )
    .expect("write kubeconfig");
    path
}

/// COMPREPLY after `words` (the cursor on the last one) in a bash that sourced
/// `kubectl-vap completion bash`.
fn bash_completes(words: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = Command::new(BIN)
        .args(["completion", "bash"])
        .env_remove("KUBECONFIG")
        .output()
        .expect("kubectl-vap runs");
    assert!(script.status.success(), "{script:?}");
    let file = dir.path().join("kubectl-vap.bash");
    std::fs::write(&file, &script.stdout).expect("write the script");
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source {file}\n\
         COMP_WORDS=(kubectl-vap {words})\n\
         COMP_CWORD={cword}\n\
         COMP_LINE=\"${{COMP_WORDS[*]}}\"\n\
         COMP_POINT=${{#COMP_LINE}}\n\
         fn=$(complete -p kubectl-vap | sed 's/.* -F \\([^ ]*\\) .*/\\1/')\n\
         \"$fn\" kubectl-vap \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        file = file.display(),
        words = quoted.join(" "),
        cword = words.len(),
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn bash_completes_subcommands_flags_and_values() {
    let subs = bash_completes(&["c"]);
    for sub in ["check", "completion"] {
        assert!(subs.contains(&sub.to_string()), "{sub} in {subs:?}");
    }
    assert!(!subs.iter().any(|s| s == "plan"), "{subs:?}");

    let flags = bash_completes(&["check", "--no"]);
    assert!(
        flags.is_empty() || flags.iter().all(|f| f.starts_with("--no")),
        "{flags:?}"
    );
    let flags = bash_completes(&["check", "--out"]);
    assert_eq!(flags, ["--output"]);

    let formats = bash_completes(&["check", "-o", ""]);
    for f in ["table", "wide", "json", "yaml"] {
        assert!(formats.contains(&f.to_string()), "{f} in {formats:?}");
    }
    assert_eq!(bash_completes(&["completion", "f"]), ["fish"]);
}

#[test]
fn every_shell_gets_a_script() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let out = Command::new(BIN)
            .args(["completion", shell])
            .output()
            .expect("runs");
        assert!(out.status.success(), "{shell}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("kubectl-vap"), "{shell}: {text}");
    }
    let out = Command::new(BIN)
        .args(["completion", "tcsh"])
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(3),
        "an unknown shell is a usage error"
    );
}

/// The protocol kubectl speaks to the helper, without kubectl: subcommands with their
/// summaries, contexts from the kubeconfig, cobra's directive last.
#[test]
fn the_helper_answers_in_cobras_format() {
    let (dir, path) = plugin_dir();
    let kubeconfig = two_contexts(dir.path());
    let out = Command::new(dir.path().join("kubectl_complete-vap"))
        .args(["check", "--context", ""])
        .env("PATH", &path)
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("the helper runs");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "kind-dev\nprod-eu\n:4\n"
    );
}

fn kubectl() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("TEST_ASSET_KUBECTL") {
        return Some(PathBuf::from(p));
    }
    std::env::var("KUBEBUILDER_ASSETS")
        .ok()
        .map(|a| Path::new(&a).join("kubectl"))
}

#[test]
#[ignore = "needs the kubeenv kubectl: run scripts/test"]
fn kubectl_completes_the_plugin_through_the_helper() {
    let kubectl = kubectl().expect("KUBEBUILDER_ASSETS or TEST_ASSET_KUBECTL");
    let (dir, path) = plugin_dir();
    let kubeconfig = two_contexts(dir.path());
    let complete = |words: &[&str]| {
        let out = Command::new(&kubectl)
            .arg("__complete")
            .arg("vap")
            .args(words)
            .env("PATH", &path)
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .expect("kubectl runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let subs = complete(&["ch"]);
    assert!(subs.starts_with("check\t"), "{subs}");
    assert!(subs.ends_with(":4\n"), "{subs}");
    let flags = complete(&["audit", "--qp"]);
    assert!(flags.starts_with("--qps\t"), "{flags}");
    assert_eq!(complete(&["plan", "--context", "pro"]), "prod-eu\n:4\n");
}
