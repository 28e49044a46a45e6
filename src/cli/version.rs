//! `kubectl vap version`: what a bug report needs. The build facts come from build.rs; the API
//! versions from the code that talks to the server (`cluster::discovery`), not a list of their
//! own.

use super::args::Format;
use super::exit::Exit;
use crate::cluster::discovery;
use serde::Serialize;

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VersionInfo {
    pub version: &'static str,
    /// The commit built, `-dirty` when the tree differed from it, or `unknown`.
    pub git_commit: &'static str,
    /// RFC 3339, UTC.
    pub build_date: String,
    pub target: &'static str,
    pub k8s_openapi: K8sOpenapi,
    /// Every API group kubectl-vap reads or writes, at the versions it speaks.
    pub apis: Vec<ApiGroup>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct K8sOpenapi {
    /// The crate's version.
    pub version: &'static str,
    /// The Kubernetes version whose API the crate was built for (its `v1_*` feature).
    pub kubernetes: &'static str,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct ApiGroup {
    pub group: String,
    /// Preferred first.
    pub versions: Vec<String>,
    /// What is read or written there.
    pub objects: &'static str,
}

impl VersionInfo {
    pub fn current() -> VersionInfo {
        let epoch: i64 = env!("KUBECTL_VAP_BUILD_EPOCH").parse().unwrap_or(0);
        let build_date = chrono::DateTime::from_timestamp(epoch, 0)
            .map(|d| d.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_else(|| "unknown".into());
        let one = |r: kube::discovery::ApiResource, objects| ApiGroup {
            group: r.group,
            versions: vec![r.version],
            objects,
        };
        let [template_status, _] = discovery::pod_status_resources();
        VersionInfo {
            version: env!("CARGO_PKG_VERSION"),
            git_commit: env!("KUBECTL_VAP_GIT_COMMIT"),
            build_date,
            target: env!("KUBECTL_VAP_TARGET"),
            k8s_openapi: K8sOpenapi {
                version: env!("KUBECTL_VAP_K8S_OPENAPI"),
                kubernetes: env!("KUBECTL_VAP_K8S_API_LEVEL"),
            },
            apis: vec![
                one(
                    discovery::AdmissionApi::v1().policy(),
                    "ValidatingAdmissionPolicies and bindings (Kubernetes 1.30 or later)",
                ),
                one(discovery::templates_resource(), "ConstraintTemplates"),
                one(
                    discovery::constraint_resource("", ""),
                    "constraints (Gatekeeper's storage version)",
                ),
                one(discovery::crds_resource(), "constraint CRDs"),
                one(template_status, "Gatekeeper's pod statuses"),
            ],
        }
    }

    /// The table: the version line `kubectl-vap X.Y.Z` first (what `--version` prints), then
    /// one fact a line.
    pub fn table(&self) -> String {
        let mut out = format!("kubectl-vap {}\n", self.version);
        let facts = [
            ("commit", self.git_commit.to_string()),
            ("built", self.build_date.clone()),
            ("target", self.target.to_string()),
            (
                "k8s-openapi",
                format!(
                    "{} (Kubernetes {} API)",
                    self.k8s_openapi.version, self.k8s_openapi.kubernetes
                ),
            ),
        ];
        for (name, value) in facts {
            out.push_str(&format!("{:<12} {value}\n", format!("{name}:")));
        }
        out.push_str("APIs:\n");
        let rows: Vec<Vec<String>> = self
            .apis
            .iter()
            .map(|a| {
                vec![
                    format!("  {}", a.group),
                    a.versions.join(", "),
                    a.objects.to_string(),
                ]
            })
            .collect();
        // The table helper's header row is skipped: three columns need no titles here.
        let table = super::output::table(&["", "", ""], &rows);
        out.extend(table.lines().skip(1).map(|l| format!("{l}\n")));
        out
    }
}

pub fn print(format: Format) -> anyhow::Result<Exit> {
    let info = VersionInfo::current();
    let text = match super::output::structured(&info, format)? {
        Some(text) => text,
        None => info.table(),
    };
    super::stdio::stdout(&text)?;
    Ok(Exit::Clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_facts_are_filled_in() {
        let info = VersionInfo::current();
        // A checkout: a commit (tests run from one). `unknown` means build.rs found no git.
        let commit = info.git_commit.trim_end_matches("-dirty");
        assert!(
            commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit()),
            "{info:?}"
        );
        assert!(
            chrono::DateTime::parse_from_rfc3339(&info.build_date).is_ok(),
            "{info:?}"
        );
        assert!(info.target.contains('-'), "a target triple: {info:?}");
    }

    /// The level k8s-openapi reports is the feature Cargo.toml enables, the crate the one
    /// Cargo.lock holds.
    #[test]
    fn k8s_openapi_level_is_the_enabled_feature() {
        let info = VersionInfo::current();
        let feature = format!("\"v{}\"", info.k8s_openapi.kubernetes.replace('.', "_"));
        let line = include_str!("../../Cargo.toml")
            .lines()
            .find(|l| l.starts_with("k8s-openapi = "))
            .expect("k8s-openapi in Cargo.toml");
        assert!(line.contains(&feature), "{feature} in {line}");
        let locked = format!(
            "name = \"k8s-openapi\"\nversion = \"{}\"\n",
            info.k8s_openapi.version
        );
        assert!(
            include_str!("../../Cargo.lock").contains(&locked),
            "{locked:?} in Cargo.lock"
        );
    }

    #[test]
    fn the_table_names_every_api_group_at_its_versions() {
        let info = VersionInfo::current();
        let table = info.table();
        assert!(table.starts_with(&format!("kubectl-vap {}\n", env!("CARGO_PKG_VERSION"))));
        for expected in [
            "admissionregistration.k8s.io  v1 ",
            "templates.gatekeeper.sh       v1 ",
            "constraints.gatekeeper.sh     v1beta1",
            "apiextensions.k8s.io          v1 ",
            "status.gatekeeper.sh          v1beta1",
        ] {
            assert!(table.contains(expected), "{expected:?} in\n{table}");
        }
    }
}
