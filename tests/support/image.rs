//! The image's facts as three places state them — the config `scripts/image` writes, the
//! `Dockerfile`'s final stage, and `install --print` — and the checks that they agree.

use kubectl_vap::cli::install::{
    DEFAULT_IMAGE, IMAGE_ENTRYPOINT, IMAGE_UID, InstallOptions, METRICS_PORT, install_objects,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Labels that must be equal everywhere (revision and creation time depend on the build).
pub const FIXED_LABELS: [&str; 5] = [
    "org.opencontainers.image.title",
    "org.opencontainers.image.description",
    "org.opencontainers.image.source",
    "org.opencontainers.image.version",
    "org.opencontainers.image.licenses",
];

/// What a container runtime takes from an image config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFacts {
    pub user: String,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `8080/tcp`
    pub ports: Vec<String>,
    pub labels: BTreeMap<String, String>,
}

impl ImageFacts {
    /// From an OCI image config (`{"config": {"User": …}}`).
    pub fn from_config(config: &Value) -> ImageFacts {
        let c = &config["config"];
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        };
        ImageFacts {
            user: c["User"].as_str().unwrap_or_default().to_string(),
            entrypoint: strings(&c["Entrypoint"]),
            cmd: strings(&c["Cmd"]),
            ports: c["ExposedPorts"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
            labels: c["Labels"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect(),
        }
    }

    /// The labels every build has in common.
    pub fn fixed_labels(&self) -> BTreeMap<String, String> {
        self.labels
            .iter()
            .filter(|(k, _)| FIXED_LABELS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// `scripts/image --print-config`: the config it builds with, without building.
pub fn script_config() -> Value {
    // Needs bash and python3.
    let out = testenv::stdout_of(
        std::process::Command::new("bash")
            .arg(Path::new(ROOT).join("scripts/image"))
            .arg("--print-config"),
    );
    serde_json::from_str(&out).expect("scripts/image --print-config prints JSON")
}

/// The Dockerfile's final stage.
#[derive(Debug)]
pub struct Dockerfile {
    pub facts: ImageFacts,
    /// `FROM` of the final stage.
    pub base: String,
    /// Destinations of its `COPY` instructions.
    pub copies: Vec<String>,
    /// `ARG` names of the final stage.
    pub args: Vec<String>,
}

/// Parses the instructions this Dockerfile uses (JSON-form ENTRYPOINT/CMD, `LABEL k="v"`).
pub fn parse_dockerfile(text: &str) -> Dockerfile {
    // Join continuation lines, drop comments and blank lines.
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for raw in text.lines() {
        let t = raw.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => {
                cur.push_str(head);
                cur.push(' ');
            }
            None => {
                cur.push_str(t);
                lines.push(std::mem::take(&mut cur));
            }
        }
    }
    let last_from = lines
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .expect("a FROM");
    let mut d = Dockerfile {
        facts: ImageFacts {
            user: String::new(),
            entrypoint: Vec::new(),
            cmd: Vec::new(),
            ports: Vec::new(),
            labels: BTreeMap::new(),
        },
        base: lines[last_from]["FROM ".len()..].trim().to_string(),
        copies: Vec::new(),
        args: Vec::new(),
    };
    for line in &lines[last_from + 1..] {
        let (instr, rest) = line.split_once(' ').unwrap_or((line, ""));
        let rest = rest.trim();
        let json_list = || -> Vec<String> {
            serde_json::from_str(rest).unwrap_or_else(|e| panic!("{instr} {rest}: JSON form: {e}"))
        };
        match instr {
            "USER" => d.facts.user = rest.to_string(),
            "EXPOSE" => d.facts.ports.extend(rest.split_whitespace().map(|p| {
                if p.contains('/') {
                    p.to_string()
                } else {
                    format!("{p}/tcp")
                }
            })),
            "ENTRYPOINT" => d.facts.entrypoint = json_list(),
            "CMD" => d.facts.cmd = json_list(),
            "LABEL" => d.facts.labels.extend(parse_labels(rest)),
            "ARG" => d
                .args
                .push(rest.split('=').next().unwrap_or_default().to_string()),
            "COPY" => d.copies.push(
                rest.split_whitespace()
                    .last()
                    .unwrap_or_default()
                    .to_string(),
            ),
            other => panic!("Dockerfile: {other} in the final stage is not compared; add it here"),
        }
    }
    d
}

/// `k="v" k2="v2"` (values double-quoted, no escapes).
fn parse_labels(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").expect("LABEL key=\"value\"");
        let (value, after) = after.split_once('"').expect("closing quote");
        out.push((key.trim().to_string(), value.to_string()));
        rest = after.trim();
    }
    out
}

pub fn dockerfile() -> Dockerfile {
    let text = std::fs::read_to_string(Path::new(ROOT).join("Dockerfile")).expect("Dockerfile");
    parse_dockerfile(&text)
}

/// The Deployment of `install --print` (as objects).
pub fn deployment(image: &str) -> Value {
    install_objects(&InstallOptions {
        namespace: "ns".into(),
        image: image.into(),
        metrics_service: true,
    })
    .into_iter()
    .find(|d| d["kind"] == "Deployment")
    .expect("a Deployment")
}

/// Panics unless `facts` (of an image or a recipe) is what `install --print` expects.
pub fn assert_matches_install(facts: &ImageFacts, what: &str) {
    assert_eq!(
        facts.user,
        format!("{IMAGE_UID}:{IMAGE_UID}"),
        "{what}: user (install --print runs as {IMAGE_UID})"
    );
    assert_eq!(facts.entrypoint, IMAGE_ENTRYPOINT, "{what}: entrypoint");
    assert_eq!(
        facts.ports,
        [format!("{METRICS_PORT}/tcp")],
        "{what}: exposed ports"
    );
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        facts.labels["org.opencontainers.image.version"], version,
        "{what}: version label"
    );
    assert!(
        DEFAULT_IMAGE.ends_with(&format!(":{version}")),
        "{DEFAULT_IMAGE}"
    );
    assert_eq!(
        facts.labels["org.opencontainers.image.licenses"],
        "Apache-2.0"
    );
    assert!(facts.labels["org.opencontainers.image.source"].starts_with("https://"));

    let dep = deployment("x");
    let pod = &dep["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    // The Deployment states the reconciler's command line itself (the image's binary, then
    // `run --in-cluster`) rather than relying on the image's entrypoint.
    assert_eq!(
        strings(&c["command"]),
        [facts.entrypoint[0].clone()],
        "{what}: install --print runs the image's binary"
    );
    assert_eq!(
        strings(&c["args"])[..2],
        ["run", "--in-cluster"],
        "{what}: install --print says `run --in-cluster`"
    );
    assert_eq!(pod["securityContext"]["runAsUser"], IMAGE_UID);
    assert_eq!(pod["securityContext"]["runAsGroup"], IMAGE_UID);
    let port = c["ports"][0]["containerPort"]
        .as_u64()
        .expect("containerPort");
    assert!(
        facts.ports.contains(&format!("{port}/tcp")),
        "{what}: containerPort {port} exposed"
    );
    // The image's default arguments and the Deployment's serve probes on the same port.
    for args in [&facts.cmd, &strings(&c["args"])] {
        assert!(
            args.iter()
                .any(|a| a.starts_with("--metrics-addr=") && a.ends_with(&format!(":{port}"))),
            "{what}: --metrics-addr on {port} in {args:?}"
        );
    }
}

pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(String::from))
        .collect()
}

/// An OCI image layout (what `scripts/image` writes): its one manifest and config.
pub struct Layout {
    pub dir: PathBuf,
    /// `org.opencontainers.image.ref.name` of the manifest (the tag in the layout).
    pub reference: String,
    pub manifest_digest: String,
    pub manifest: Value,
    pub config: Value,
}

impl Layout {
    pub fn open(dir: &Path) -> Layout {
        let read_json = |p: PathBuf| -> Value {
            let bytes =
                std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()))
        };
        let index = read_json(dir.join("index.json"));
        let manifests = index["manifests"].as_array().expect("index.manifests");
        assert_eq!(manifests.len(), 1, "one image in {}", dir.display());
        let desc = &manifests[0];
        let digest = desc["digest"].as_str().expect("digest").to_string();
        let blob = |d: &str| {
            dir.join("blobs/sha256")
                .join(d.strip_prefix("sha256:").expect("sha256 digest"))
        };
        let manifest = read_json(blob(&digest));
        let config = read_json(blob(
            manifest["config"]["digest"]
                .as_str()
                .expect("config digest"),
        ));
        Layout {
            dir: dir.to_path_buf(),
            reference: desc["annotations"]["org.opencontainers.image.ref.name"]
                .as_str()
                .expect("ref.name")
                .to_string(),
            manifest_digest: digest,
            manifest,
            config,
        }
    }

    pub fn blob_path(&self, digest: &str) -> PathBuf {
        self.dir
            .join("blobs/sha256")
            .join(digest.strip_prefix("sha256:").expect("sha256 digest"))
    }
}
