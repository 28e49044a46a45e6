//! Build facts for `kubectl vap version` (src/cli/version.rs), as compile-time variables:
//!
//! - `KUBECTL_VAP_GIT_COMMIT`: the checkout's commit (`-dirty` when tracked files differ from
//!   it); from a crate tarball, the commit `cargo package` recorded in `.cargo_vcs_info.json`;
//!   otherwise `unknown`.
//! - `KUBECTL_VAP_BUILD_EPOCH`: `SOURCE_DATE_EPOCH` when set (scripts/release and scripts/image
//!   set it to the commit's time, so a rebuild is byte-identical), else the time of this build.
//! - `KUBECTL_VAP_TARGET`: the target triple.
//! - `KUBECTL_VAP_K8S_OPENAPI`, `KUBECTL_VAP_K8S_API_LEVEL`: the k8s-openapi crate and the
//!   Kubernetes version whose API it was built for (the `v1_*` feature), from the metadata
//!   k8s-openapi's own build script passes to its dependents.
//!
//! No dependencies: git is run as a command, and its absence is `unknown`, never a failed build.
//! tests/build_info.rs includes this file to test the functions below.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // A source edit can make the tree dirty (src/, and crates/: the pure core is compiled into
    // the binary); HEAD and the branch's ref move with a commit.
    // Only existing paths: cargo reruns a script whose watched path is missing on every build.
    let sources = [dir.join("src"), dir.join("crates")];
    for watched in sources.into_iter().chain(git_watch_paths(&dir)) {
        if watched.exists() {
            println!("cargo::rerun-if-changed={}", watched.display());
        }
    }
    println!("cargo::rustc-env=KUBECTL_VAP_GIT_COMMIT={}", commit(&dir));
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => s.trim().parse::<i64>().unwrap_or_else(|_| {
            println!(
                "cargo::warning=SOURCE_DATE_EPOCH={s:?} is not a number of seconds; using now"
            );
            now()
        }),
        Err(_) => now(),
    };
    println!("cargo::rustc-env=KUBECTL_VAP_BUILD_EPOCH={epoch}");
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".into());
    println!("cargo::rustc-env=KUBECTL_VAP_TARGET={target}");
    let (crate_version, level) =
        k8s_openapi_level(std::env::vars()).unwrap_or_else(|| ("unknown".into(), "unknown".into()));
    println!("cargo::rustc-env=KUBECTL_VAP_K8S_OPENAPI={crate_version}");
    println!("cargo::rustc-env=KUBECTL_VAP_K8S_API_LEVEL={level}");
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `git` in `dir`: its trimmed stdout, or `None` when git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Whether `dir` is the top of a git checkout (not a folder inside another project's one: a
/// crate unpacked in a vendored tree must not report that tree's commit).
fn is_checkout_top(dir: &Path) -> bool {
    let Some(top) = git(dir, &["rev-parse", "--show-toplevel"]) else {
        return false;
    };
    match (Path::new(&top).canonicalize(), dir.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The commit the sources in `dir` come from, `-dirty` when they differ from it; `unknown`.
pub fn commit(dir: &Path) -> String {
    if is_checkout_top(dir)
        && let Some(head) = git(dir, &["rev-parse", "HEAD"])
    {
        // `git diff --quiet` exits 1 on a difference: only then is the tree dirty (a failing
        // git says nothing either way).
        let dirty = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["diff", "--quiet", "HEAD", "--"])
            .status()
            .is_ok_and(|s| s.code() == Some(1));
        return if dirty { format!("{head}-dirty") } else { head };
    }
    vcs_info_commit(dir).unwrap_or_else(|| "unknown".into())
}

/// The commit in `.cargo_vcs_info.json`, which `cargo package` writes into a crate tarball:
/// `{"git": {"sha1": "…", "dirty": true}, "path_in_vcs": ""}` (`dirty` only when it was).
fn vcs_info_commit(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(".cargo_vcs_info.json")).ok()?;
    let after = text.split("\"sha1\"").nth(1)?;
    let sha: String = after
        .trim_start_matches([' ', ':', '"', '\n', '\t'])
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    if sha.len() < 7 {
        return None;
    }
    let dirty = text.split("\"dirty\"").nth(1).is_some_and(|rest| {
        rest.trim_start_matches([' ', ':', '\n', '\t'])
            .starts_with("true")
    });
    Some(if dirty { format!("{sha}-dirty") } else { sha })
}

/// Files whose change means another commit: HEAD and the ref it points to (per worktree or
/// shared, as git says), and packed-refs.
fn git_watch_paths(dir: &Path) -> Vec<PathBuf> {
    if !is_checkout_top(dir) {
        return Vec::new();
    }
    let mut names = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(head_ref) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        names.push(head_ref);
    }
    names
        .iter()
        .filter_map(|n| git(dir, &["rev-parse", "--git-path", n]))
        .map(|p| dir.join(p))
        .collect()
}

/// k8s-openapi's `links` metadata: `DEP_K8S_OPENAPI_<crate version>_VERSION` holds the enabled
/// Kubernetes version as `0x00_MM_mm_00` (major, minor). `("0.29.0", "1.33")`.
pub fn k8s_openapi_level(
    vars: impl IntoIterator<Item = (String, String)>,
) -> Option<(String, String)> {
    vars.into_iter().find_map(|(name, value)| {
        let crate_version = name
            .strip_prefix("DEP_K8S_OPENAPI_")?
            .strip_suffix("_VERSION")?
            .replace('_', ".");
        let v: u32 = value.trim().parse().ok()?;
        Some((
            crate_version,
            format!("{}.{}", (v >> 16) & 0xff, (v >> 8) & 0xff),
        ))
    })
}
