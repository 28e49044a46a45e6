//! plugin.yaml follows krew's rules, and its version is the crate's.

use serde_json::Value;

#[test]
fn plugin_manifest_passes_krew_rules() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/plugin.yaml"))
        .expect("plugin.yaml");
    let m: Value = serde_norway::from_str(&text).expect("valid YAML");
    assert_eq!(
        m["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(m["kind"], "Plugin");
    assert_eq!(m["metadata"]["name"], "vap", "the plugin is `kubectl vap`");
    let version = m["spec"]["version"].as_str().expect("version");
    assert_eq!(version, format!("v{}", env!("CARGO_PKG_VERSION")));
    let short = m["spec"]["shortDescription"]
        .as_str()
        .expect("shortDescription");
    assert!(short.len() < 50 && !short.contains('\n'), "{short:?}");
    assert!(
        m["spec"]["homepage"]
            .as_str()
            .is_some_and(|h| h.starts_with("https://"))
    );
    let platforms = m["spec"]["platforms"].as_array().expect("platforms");
    let mut seen = Vec::new();
    for p in platforms {
        let os = p["selector"]["matchLabels"]["os"].as_str().expect("os");
        let arch = p["selector"]["matchLabels"]["arch"].as_str().expect("arch");
        seen.push(format!("{os}/{arch}"));
        let sha = p["sha256"].as_str().expect("sha256");
        assert!(
            sha.len() == 64 && sha.chars().all(|c| c.is_ascii_hexdigit()),
            "{os}/{arch}: {sha}"
        );
        let uri = p["uri"].as_str().expect("uri");
        assert!(
            uri.starts_with("https://") && uri.contains(&format!("/{version}/")),
            "{uri}"
        );
        let bin = p["bin"].as_str().expect("bin");
        assert_eq!(
            bin,
            if os == "windows" {
                "kubectl-vap.exe"
            } else {
                "kubectl-vap"
            }
        );
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "darwin/amd64",
            "darwin/arm64",
            "linux/amd64",
            "linux/arm64",
            "windows/amd64"
        ]
    );
}
