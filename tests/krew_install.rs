//! Tier 5: the release archive installed by the real krew, run by the real kubectl.
//!
//! The archive is packed by `scripts/archive` (the step `scripts/release` runs for every
//! platform) from the release binary of the image `scripts/test` builds (`$KUBECTL_VAP_IMAGE`:
//! the static release build of this machine's platform). Its sha256 goes into a copy of
//! plugin.yaml named as krew-index names it (`plugins/vap.yaml`), which krew-index's validator
//! passes; `kubectl krew install --manifest --archive` installs it into a private KREW_ROOT,
//! kubectl runs it from krew's bin folder. Then the way users upgrade: an index (a local git
//! repository, as krew-index is a remote one) serving the archive over HTTP, `kubectl krew
//! install local/vap`, a higher version committed to the index, `kubectl krew upgrade`.
//! Uninstalling leaves nothing of vap in that root.
//!
//! Needs `$KREW_ASSETS` (`tests/krew/build.sh`), the kubeenv kubectl, the image, git and tar:
//! `scripts/test` provides them all; without them the test fails saying what is missing.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use support::image::Layout;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Where plugin.yaml's archives are published (its uris up to the version).
const RELEASES: &str = "https://github.com/kubectl-vap/kubectl-vap/releases/download/";
const HOW_TO: &str = "run scripts/test (it builds all of them), or export \
     KREW_ASSETS=$(tests/krew/build.sh) KUBEBUILDER_ASSETS=$(tests/kubeenv/build.sh) \
     KUBECTL_VAP_IMAGE=$PWD/$(scripts/image)";

struct Tools {
    krew: PathBuf,
    validator: PathBuf,
    kubectl: PathBuf,
    image: PathBuf,
}

/// Every tool the test drives, or a failure naming each missing one and how to get it.
fn tools() -> Tools {
    let mut missing = Vec::new();
    let krew_assets = std::env::var_os("KREW_ASSETS").map(PathBuf::from);
    if krew_assets.is_none() {
        missing.push("KREW_ASSETS (krew and validate-krew-manifest)".to_string());
    }
    let kubectl = match std::env::var_os("TEST_ASSET_KUBECTL") {
        Some(p) => Some(PathBuf::from(p)),
        None => std::env::var_os("KUBEBUILDER_ASSETS").map(|a| Path::new(&a).join("kubectl")),
    };
    if kubectl.is_none() {
        missing.push("KUBEBUILDER_ASSETS (kubectl)".to_string());
    }
    let image = std::env::var_os("KUBECTL_VAP_IMAGE").map(PathBuf::from);
    if image.is_none() {
        missing.push("KUBECTL_VAP_IMAGE (the release binary)".to_string());
    }
    for tool in ["git", "tar"] {
        if !Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            missing.push(format!("`{tool}` on PATH"));
        }
    }
    let (Some(assets), Some(kubectl), Some(image)) = (krew_assets, kubectl, image) else {
        panic!("the krew test needs {}: {HOW_TO}", missing.join(", "));
    };
    assert!(
        missing.is_empty(),
        "the krew test needs {}: {HOW_TO}",
        missing.join(", ")
    );
    let tools = Tools {
        krew: assets.join("krew"),
        validator: assets.join("validate-krew-manifest"),
        kubectl,
        image,
    };
    for p in [&tools.krew, &tools.validator, &tools.kubectl] {
        assert!(p.is_file(), "{} does not exist: {HOW_TO}", p.display());
    }
    tools
}

/// krew's `os_arch` of this machine.
fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("no release archive for {other}"),
    };
    format!("{}_{arch}", std::env::consts::OS)
}

/// The release binary: the one file `kubectl-vap` of the image's one layer.
fn release_binary(image: &Path, into: &Path) -> PathBuf {
    let layout = Layout::open(image);
    let layers = layout.manifest["layers"].as_array().expect("layers");
    let layer = layout.blob_path(layers[0]["digest"].as_str().expect("layer digest"));
    ok(Command::new("tar")
        .arg("-xzf")
        .arg(&layer)
        .arg("-C")
        .arg(into)
        .arg("kubectl-vap"));
    into.join("kubectl-vap")
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `cmd`, fails the test unless it succeeds; its stdout.
fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `scripts/archive` for this platform: the archive's path (the sha256 and `version` written
/// into `manifest`).
fn pack(binary: &Path, out: &Path, manifest: &Path, version: &str) -> PathBuf {
    let path = ok(Command::new("bash")
        .arg(Path::new(ROOT).join("scripts/archive"))
        .args(["--platform", &platform(), "--version", version])
        .arg("--binary")
        .arg(binary)
        .arg("--out")
        .arg(out)
        .arg("--manifest")
        .arg(manifest));
    PathBuf::from(path.trim())
}

/// A private krew root, kubectl with krew's bin folder first on PATH and krew as its plugin.
struct Krew {
    root: PathBuf,
    home: PathBuf,
    path: String,
    kubectl: PathBuf,
}

impl Krew {
    fn new(work: &Path, tools: &Tools) -> Krew {
        let root = work.join("krew-root");
        let plugins = work.join("plugins-of-kubectl");
        let home = work.join("home");
        for d in [&root, &plugins, &home] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        // kubectl finds krew as users have it: a `kubectl-krew` on PATH.
        std::os::unix::fs::symlink(&tools.krew, plugins.join("kubectl-krew")).expect("symlink");
        let kubectl_dir = tools.kubectl.parent().expect("kubectl's folder");
        // Nothing else named kubectl-* (git and tar in the system folders).
        let path = format!(
            "{}:{}:{}:/usr/bin:/bin",
            root.join("bin").display(),
            plugins.display(),
            kubectl_dir.display()
        );
        Krew {
            root,
            home,
            path,
            kubectl: tools.kubectl.clone(),
        }
    }

    fn kubectl(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.args(args)
            .stdin(std::process::Stdio::null())
            .env_clear()
            .env("PATH", &self.path)
            .env("HOME", &self.home)
            .env("KREW_ROOT", &self.root)
            // krew asks GitHub for its latest release at random otherwise.
            .env("KREW_NO_UPGRADE_CHECK", "1")
            .env("KUBECONFIG", self.home.join("no-kubeconfig"));
        cmd
    }

    fn ok(&self, args: &[&str]) -> String {
        ok(&mut self.kubectl(args))
    }

    fn receipt(&self) -> Value {
        let path = self.root.join("receipts/vap.yaml");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("krew's receipt {}: {e}", path.display()));
        serde_norway::from_str(&text).expect("receipt is YAML")
    }

    /// The store folder the plugin's bin link points into (`store/vap/<version>`).
    fn linked_version(&self) -> String {
        let link = std::fs::read_link(self.root.join("bin/kubectl-vap")).expect("bin/kubectl-vap");
        let link = if link.is_absolute() {
            link
        } else {
            self.root.join("bin").join(link)
        };
        let store = self.root.join("store/vap");
        let rel = link
            .strip_prefix(&store)
            .unwrap_or_else(|_| panic!("{} outside {}", link.display(), store.display()));
        rel.components()
            .next()
            .expect("a version folder")
            .as_os_str()
            .to_string_lossy()
            .into_owned()
    }

    /// Paths under the root (but its index copies) that name vap: what an uninstall must remove.
    fn leftovers(&self) -> Vec<String> {
        fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for e in entries.flatten() {
                let p = e.path();
                let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
                if rel == "index" {
                    continue;
                }
                if rel.contains("vap") {
                    out.push(rel.clone());
                }
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&p, root, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &self.root, &mut out);
        out
    }

    fn assert_uninstalled(&self) {
        assert_eq!(
            self.leftovers(),
            Vec::<String>::new(),
            "left after uninstall"
        );
        for dir in ["bin", "store", "receipts"] {
            let p = self.root.join(dir);
            let left: Vec<_> = std::fs::read_dir(&p)
                .map(|d| d.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
            assert!(left.is_empty(), "{}: {left:?}", p.display());
        }
    }

    /// `kubectl vap version` and `check -f assets/demo`, found by kubectl in krew's bin folder.
    fn assert_plugin_answers(&self, version: &str) {
        let plugins = self.ok(&["plugin", "list"]);
        let installed = self.root.join("bin/kubectl-vap");
        assert!(
            plugins.contains(&installed.display().to_string()),
            "kubectl finds {} in\n{plugins}",
            installed.display()
        );

        let table = self.ok(&["vap", "version"]);
        assert_eq!(
            table.lines().next(),
            Some(format!("kubectl-vap {}", version.trim_start_matches('v')).as_str()),
            "{table}"
        );
        let json: Value =
            serde_json::from_str(&self.ok(&["vap", "version", "-o", "json"])).expect("JSON");
        // The release build: a commit, this machine's target, a static binary.
        assert_ne!(json["gitCommit"], "unknown", "{json}");
        let target = json["target"].as_str().expect("target");
        assert!(
            target.starts_with(std::env::consts::ARCH) && target.contains("linux"),
            "{json}"
        );

        let demo = format!("{ROOT}/assets/demo");
        let check = run(&mut self.kubectl(&["vap", "check", "-f", &demo]));
        assert_eq!(
            check.status.code(),
            Some(1),
            "findings exit 1: {}",
            text(&check)
        );
        let stdout = String::from_utf8_lossy(&check.stdout);
        assert!(
            stdout.lines().any(|l| l.contains("policy-missing")
                && l.contains("validatingadmissionpolicy/gatekeeper-k8sallowedrepos")),
            "{stdout}"
        );
        // The release binary says what the sources under test say.
        let here = run(Command::new(support::cli::BIN).args(["check", "-f", &demo]));
        assert_eq!(stdout, String::from_utf8_lossy(&here.stdout));
    }
}

/// A file server for the index's download URIs (`/releases/download/<version>/<file>` from
/// `dir/<version>/<file>`); every path asked for is recorded.
fn serve(dir: PathBuf) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&asked);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(&stream);
            let mut request = String::new();
            if reader.read_line(&mut request).is_err() {
                continue;
            }
            let mut header = String::new();
            while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                header.clear();
            }
            let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
            if let Ok(mut l) = log.lock() {
                l.push(path.clone());
            }
            let file = path
                .strip_prefix("/releases/download/")
                .filter(|p| !p.contains(".."))
                .and_then(|p| std::fs::read(dir.join(p)).ok());
            let mut stream = &stream;
            let _ = match file {
                Some(body) => stream
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .and_then(|()| stream.write_all(&body)),
                None => stream.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                ),
            };
        }
    });
    (base, asked)
}

fn git(dir: &Path, args: &[&str]) {
    ok(Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=test", "-c", "user.email=test@example.com"])
        .args(args));
}

#[test]
#[ignore = "needs krew, the kubeenv kubectl and the image's release binary: run scripts/test"]
fn krew_installs_upgrades_and_uninstalls_the_release_archive() {
    let tools = tools();
    let work = tempfile::tempdir().expect("tempdir");
    let work = work.path();
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    let binary = release_binary(&tools.image, work);

    // The archive, its sha256 in a copy of plugin.yaml named as krew-index names it.
    let manifests = work.join("manifest/plugins");
    std::fs::create_dir_all(&manifests).expect("mkdir");
    let manifest = manifests.join("vap.yaml");
    std::fs::copy(Path::new(ROOT).join("plugin.yaml"), &manifest).expect("copy plugin.yaml");
    let archive = pack(&binary, &work.join("archives"), &manifest, &version);
    let listing = ok(Command::new("tar").arg("-tzf").arg(&archive));
    assert_eq!(
        listing.lines().collect::<Vec<_>>(),
        ["LICENSE", "kubectl-vap", "kubectl_complete-vap"]
    );

    // krew-index's validator: plugin.yaml as the repository names it is refused (krew-index
    // keeps a plugin as plugins/<name>.yaml), the filled-in copy passes.
    let validate = |m: &Path| {
        run(Command::new(&tools.validator)
            .arg("-manifest")
            .arg(m)
            .arg("-skip-install"))
    };
    let as_named = validate(&Path::new(ROOT).join("plugin.yaml"));
    assert!(!as_named.status.success(), "{}", text(&as_named));
    assert!(
        text(&as_named).contains(r#"plugin should be named "plugin", not "vap""#),
        "{}",
        text(&as_named)
    );
    let checked = validate(&manifest);
    assert!(checked.status.success(), "{}", text(&checked));

    // An index, as users have one (krew's list and uninstall refuse to run without): a git
    // repository, as krew-index is, whose manifest downloads the archive over HTTP, as from
    // a GitHub release.
    let downloads = work.join("downloads");
    let (base, asked) = serve(downloads.clone());
    let index = work.join("index");
    std::fs::create_dir_all(index.join("plugins")).expect("mkdir");
    let indexed = index.join("plugins/vap.yaml");
    let published = std::fs::read_to_string(Path::new(ROOT).join("plugin.yaml"))
        .expect("plugin.yaml")
        .replace(RELEASES, &format!("{base}/releases/download/"));
    std::fs::write(&indexed, published).expect("write");
    pack(&binary, &downloads.join(&version), &indexed, &version);
    git(&index, &["init", "-q"]);
    git(&index, &["add", "."]);
    git(&index, &["commit", "-q", "-m", &version]);
    let krew = Krew::new(work, &tools);
    krew.ok(&[
        "krew",
        "index",
        "add",
        "local",
        &index.display().to_string(),
    ]);

    let install = |m: &Path| {
        run(&mut krew.kubectl(&[
            "krew",
            "install",
            &format!("--manifest={}", m.display()),
            &format!("--archive={}", archive.display()),
        ]))
    };
    // The sha256 is checked: the placeholder of the repository's plugin.yaml is refused.
    let unfilled = work.join("unfilled/vap.yaml");
    std::fs::create_dir_all(unfilled.parent().expect("parent")).expect("mkdir");
    std::fs::copy(Path::new(ROOT).join("plugin.yaml"), &unfilled).expect("copy");
    let refused = install(&unfilled);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        text(&refused).contains("checksum does not match"),
        "{}",
        text(&refused)
    );
    krew.assert_uninstalled();

    // Installed from the manifest and the archive, run by kubectl.
    let installed = install(&manifest);
    assert!(installed.status.success(), "{}", text(&installed));
    assert_eq!(krew.receipt()["spec"]["version"], version.as_str());
    assert_eq!(krew.receipt()["status"]["source"]["name"], "detached");
    assert_eq!(krew.linked_version(), version);
    krew.assert_plugin_answers(&version);
    krew.ok(&["krew", "uninstall", "vap"]);
    krew.assert_uninstalled();

    // The upgrade: krew upgrades what an index installed (a --manifest install is "detached",
    // and `krew upgrade` skips it).
    krew.ok(&["krew", "install", "local/vap"]);
    assert_eq!(krew.receipt()["status"]["source"]["name"], "local");
    assert_eq!(krew.linked_version(), version);

    // A higher version published: its archive and the index's manifest.
    let next = {
        let mut parts: Vec<u64> = version
            .trim_start_matches('v')
            .split('.')
            .map(|p| p.parse().expect("numeric version"))
            .collect();
        parts[2] += 1;
        format!("v{}.{}.{}", parts[0], parts[1], parts[2])
    };
    pack(&binary, &downloads.join(&next), &indexed, &next);
    let checked = validate(&indexed);
    assert!(checked.status.success(), "{}", text(&checked));
    git(&index, &["commit", "-q", "-am", &next]);
    let upgraded = run(&mut krew.kubectl(&["krew", "upgrade", "vap"]));
    assert!(upgraded.status.success(), "{}", text(&upgraded));
    assert!(
        text(&upgraded).contains("Upgraded plugin: local/vap"),
        "{}",
        text(&upgraded)
    );
    assert_eq!(krew.receipt()["spec"]["version"], next.as_str());
    assert_eq!(
        krew.linked_version(),
        next,
        "bin/kubectl-vap points at the new version"
    );
    assert!(
        !krew.root.join("store/vap").join(&version).exists(),
        "the old version is removed"
    );
    let file = format!("kubectl-vap_{}.tar.gz", platform());
    let asked = asked.lock().map(|a| a.clone()).unwrap_or_default();
    assert_eq!(
        asked,
        [
            format!("/releases/download/{version}/{file}"),
            format!("/releases/download/{next}/{file}"),
        ],
        "each version's archive downloaded once"
    );
    // Not on a terminal, `krew list` prints the names only: the plugin from the index.
    let listed = krew.ok(&["krew", "list"]);
    assert_eq!(listed.lines().collect::<Vec<_>>(), ["local/vap"]);
    // The same binary in both archives (a second release build would take minutes): it
    // answers as the crate's version, now from the new version's folder.
    krew.assert_plugin_answers(&version);

    krew.ok(&["krew", "uninstall", "vap"]);
    krew.assert_uninstalled();
}
