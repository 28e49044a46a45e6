//! plugin.yaml against what krew's own validator cannot know: the crate's version, the platforms
//! scripts/release builds, and the archive names scripts/archive writes. krew's rules (fields,
//! selectors, sha256 format, name) are checked by krew-index's real validator in
//! tests/krew_install.rs.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn manifest() -> Value {
    let text = std::fs::read_to_string(format!("{ROOT}/plugin.yaml")).expect("plugin.yaml");
    serde_norway::from_str(&text).expect("valid YAML")
}

/// The krew platforms (`os_arch`) in scripts/release's table of Rust targets.
fn release_platforms() -> Vec<String> {
    let script = std::fs::read_to_string(format!("{ROOT}/scripts/release")).expect("release");
    let mut platforms: Vec<String> = script
        .lines()
        .filter_map(|l| l.trim().strip_prefix('['))
        .filter_map(|l| l.split_once("]=").map(|(p, _)| p.to_string()))
        .collect();
    platforms.sort();
    platforms
}

#[test]
fn plugin_manifest_matches_the_crate_and_the_release() {
    let m = manifest();
    assert_eq!(m["metadata"]["name"], "vap", "the plugin is `kubectl vap`");
    let version = m["spec"]["version"].as_str().expect("version");
    assert_eq!(version, format!("v{}", env!("CARGO_PKG_VERSION")));
    // krew-index's review asks for a short one-liner (the validator only refuses line breaks).
    let short = m["spec"]["shortDescription"]
        .as_str()
        .expect("shortDescription");
    assert!(short.len() < 50, "{short:?}");

    let mut seen = Vec::new();
    for p in m["spec"]["platforms"].as_array().expect("platforms") {
        let os = p["selector"]["matchLabels"]["os"].as_str().expect("os");
        let arch = p["selector"]["matchLabels"]["arch"].as_str().expect("arch");
        let platform = format!("{os}_{arch}");
        // scripts/archive's names, under this version's release.
        let (exe, ext) = if os == "windows" {
            ("kubectl-vap.exe", "zip")
        } else {
            ("kubectl-vap", "tar.gz")
        };
        let uri = p["uri"].as_str().expect("uri");
        assert_eq!(
            uri,
            format!(
                "https://github.com/kubectl-vap/kubectl-vap/releases/download/{version}/kubectl-vap_{platform}.{ext}"
            )
        );
        assert_eq!(p["bin"], exe, "{platform}");
        seen.push(platform);
    }
    seen.sort();
    assert_eq!(seen, release_platforms(), "plugin.yaml vs scripts/release");
    assert_eq!(seen.len(), 5, "{seen:?}");
}
