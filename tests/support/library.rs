//! The library-style samples (`tests/fixtures/library/<template>/`: `template.yaml`,
//! `constraint.yaml`, `example_allowed.yaml`, `example_disallowed.yaml`; see its README).

use serde_json::Value;
use std::path::{Path, PathBuf};

/// The namespace every sample's constraint matches and every example lives in.
pub const NS: &str = "library-samples";

/// Each sample's folder name and the message its disallowed example is denied with.
pub const SAMPLES: [(&str, &str); 4] = [
    (
        "k8sallowedrepos",
        "every container image must come from an allowed repository",
    ),
    ("k8sdisallowedtags", "container image uses a disallowed tag"),
    ("k8sreplicalimits", "replicas out of range"),
    ("k8srequiredlabels", "missing required labels: cost-center"),
];

/// `tests/fixtures/library`.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/library")
}

/// The folder of sample `name`.
pub fn dir(name: &str) -> PathBuf {
    root().join(name)
}

/// A YAML document of a sample, as JSON.
pub fn sample(dir: &Path, file: &str) -> Value {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
