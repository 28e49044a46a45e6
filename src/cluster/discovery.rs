//! Whether the server serves the VAP API we write, `admissionregistration.k8s.io/v1` (from
//! Kubernetes 1.30), and what else it serves (for the narrowed bindings). Errors are returned,
//! never cached, so callers retry.

use super::KubeError;
use crate::model::served::{Served, ServedResource};
use kube::core::{ApiResource, GroupVersionKind};

pub const GROUP: &str = "admissionregistration.k8s.io";
pub use crate::model::{VAP_KIND, VAPB_KIND};

/// The served admission API version, and the resources for VAP and VAPB in it. Live it is
/// always `v1`: a server without it is refused ([`NoVapV1`]); `v1beta1` objects are read only
/// from files (`-f`), into the v1 types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionApi {
    /// `v1`.
    pub version: String,
}

impl AdmissionApi {
    pub fn v1() -> Self {
        AdmissionApi {
            version: "v1".into(),
        }
    }
    pub fn api_version(&self) -> String {
        format!("{GROUP}/{}", self.version)
    }
    pub fn policy(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, &self.version, VAP_KIND),
            "validatingadmissionpolicies",
        )
    }
    pub fn binding(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, &self.version, VAPB_KIND),
            "validatingadmissionpolicybindings",
        )
    }
}

/// The first Kubernetes minor (1.x) that serves `admissionregistration.k8s.io/v1`
/// ValidatingAdmissionPolicy, on by default (KEP-3488's GA).
pub const VAP_V1_SINCE_MINOR: u32 = 30;

/// `v1` when the server serves VAPs there; [`KubeError::NoVapV1`] (saying the server's version
/// and what it would take) when it does not. The beta (`v1beta1`, 1.28–1.29 behind a feature
/// gate) is never used: it is looked up only to say so.
pub async fn discover_admission_api(client: &kube::Client) -> Result<AdmissionApi, KubeError> {
    if serves_policies(client, "v1").await? {
        return Ok(AdmissionApi::v1());
    }
    // Only for the message: a failure here leaves that part out rather than hide the refusal.
    let (beta, version) = tokio::join!(
        serves_policies(client, "v1beta1"),
        client.apiserver_version()
    );
    Err(KubeError::NoVapV1(NoVapV1 {
        server_version: version.ok().map(|v| v.git_version),
        beta_served: beta.unwrap_or(false),
    }))
}

/// Whether `admissionregistration.k8s.io/<version>` lists `validatingadmissionpolicies`.
async fn serves_policies(client: &kube::Client, version: &str) -> Result<bool, KubeError> {
    serves(
        client,
        &format!("{GROUP}/{version}"),
        "validatingadmissionpolicies",
    )
    .await
}

/// Whether Gatekeeper's ConstraintTemplate CRD is served ([`templates_resource`]): the commands
/// that act on templates ask before they act, as `check` learns it from its listing, so none
/// of them reports success on a cluster that has no templates to act on.
pub async fn serves_templates(client: &kube::Client) -> Result<bool, KubeError> {
    let ar = templates_resource();
    serves(client, &ar.api_version, &ar.plural).await
}

/// Whether group version `gv` lists resource `plural` (a group version that is not served at
/// all answers 404).
async fn serves(client: &kube::Client, gv: &str, plural: &str) -> Result<bool, KubeError> {
    match client.list_api_group_resources(gv).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == plural)),
        Err(e) if super::status_code(&e) == Some(404) => Ok(false),
        Err(e) => Err(KubeError::request(format!("discovering {gv}"), e)),
    }
}

/// A server that does not serve ValidatingAdmissionPolicy v1: what `check`, `plan`, `run`,
/// `test`, `audit` and the TUI say (one sentence for all), from what the server told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoVapV1 {
    /// `/version`'s `gitVersion` (`v1.29.4`), when the server answered it.
    pub server_version: Option<String>,
    /// Whether it serves the beta, `v1beta1`, instead.
    pub beta_served: bool,
}

impl std::fmt::Display for NoVapV1 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ValidatingAdmissionPolicy v1 ({GROUP}/v1) is served from Kubernetes 1.{VAP_V1_SINCE_MINOR}; "
        )?;
        let version = self.server_version.as_deref();
        let beta = if self.beta_served {
            " (it serves v1beta1, the beta, which kubectl-vap does not use)"
        } else {
            ""
        };
        match version.map(|v| (v, minor_of(v))) {
            Some((v, Some(minor))) if minor < VAP_V1_SINCE_MINOR => write!(
                f,
                "this server ({v}) is older and does not serve it{beta}: upgrade the cluster to Kubernetes 1.{VAP_V1_SINCE_MINOR} or later"
            ),
            Some((v, Some(_))) => write!(
                f,
                "this server ({v}) has it switched off{beta}: turn it on in kube-apiserver's --runtime-config, with the ValidatingAdmissionPolicy admission plugin"
            ),
            Some((v, None)) => write!(f, "this server ({v}) does not serve it{beta}"),
            None => write!(
                f,
                "this server (its version unknown) does not serve it{beta}"
            ),
        }
    }
}

/// The minor of a Kubernetes `gitVersion` (`v1.29.4-gke.100` → 29); `None` for anything that
/// is not `v1.<n>…`.
pub fn minor_of(git_version: &str) -> Option<u32> {
    let rest = git_version.strip_prefix('v').unwrap_or(git_version);
    let mut parts = rest.splitn(3, '.');
    if parts.next()? != "1" {
        return None;
    }
    let minor = parts.next()?;
    let digits = minor
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(minor.len());
    minor[..digits].parse().ok()
}

/// ConstraintTemplates, read at v1 (served by every Gatekeeper since v3.6).
pub fn templates_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(crate::model::TEMPLATES_GROUP, "v1", "ConstraintTemplate"),
        "constrainttemplates",
    )
}

/// Gatekeeper's Configs (`model::gatekeeper_config`).
pub fn gatekeeper_config_resource() -> ApiResource {
    use crate::model::gatekeeper_config::{CONFIG_GROUP, CONFIG_KIND};
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(CONFIG_GROUP, "v1alpha1", CONFIG_KIND),
        "configs",
    )
}

/// CustomResourceDefinitions (constraint CRDs are written as v1).
pub fn crds_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    )
}

/// Constraints of one kind, at v1beta1 (Gatekeeper's storage version), `plural` from the CRD.
pub fn constraint_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(crate::model::CONSTRAINTS_GROUP, "v1beta1", kind),
        plural,
    )
}

/// Gatekeeper's per-pod status objects (shown, never decided on).
pub fn pod_status_resources() -> [ApiResource; 2] {
    [
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(
                crate::model::STATUS_GROUP,
                "v1beta1",
                "ConstraintTemplatePodStatus",
            ),
            "constrainttemplatepodstatuses",
        ),
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(crate::model::STATUS_GROUP, "v1beta1", "ConstraintPodStatus"),
            "constraintpodstatuses",
        ),
    ]
}

/// `plural.group` for messages about a resource.
pub fn resource_name(ar: &ApiResource) -> String {
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}

/// What the API server serves, for the narrowed bindings (`model::served`): every resource and
/// subresource of every group version, with the kind its requests carry. A group whose
/// listing fails (an aggregated API that is down) is recorded in `failed_groups`: its kinds
/// are unknown, not absent. The core group failing, or the group list, fails the whole.
pub async fn discover_served(client: &kube::Client) -> Result<Served, KubeError> {
    use futures::stream::{self, StreamExt};
    let mut served = Served::default();
    let core = client
        .list_core_api_versions()
        .await
        .map_err(|e| KubeError::request("discovering the core API versions", e))?;
    for v in &core.versions {
        let list = client
            .list_core_api_resources(v)
            .await
            .map_err(|e| KubeError::request(format!("discovering the core API {v}"), e))?;
        add_list(&mut served, "", &list.resources);
    }
    let groups = client
        .list_api_groups()
        .await
        .map_err(|e| KubeError::request("discovering the API groups", e))?;
    let versions: Vec<(String, String)> = groups
        .groups
        .iter()
        .flat_map(|g| {
            g.versions
                .iter()
                .map(move |v| (g.name.clone(), v.group_version.clone()))
        })
        .collect();
    // A few at a time: ~30 group versions on a bare API server, hundreds on some clusters.
    let lists: Vec<_> = stream::iter(versions)
        .map(|(group, gv)| async move {
            let list = client.list_api_group_resources(&gv).await;
            (group, gv, list)
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for (group, gv, list) in lists {
        match list {
            Ok(list) => add_list(&mut served, &group, &list.resources),
            Err(e) => {
                tracing::debug!("discovering {gv}: {}", crate::text::error_text(&e));
                served.failed_groups.insert(group);
            }
        }
    }
    Ok(served)
}

fn add_list(
    served: &mut Served,
    group: &str,
    resources: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource],
) {
    for r in resources {
        // A subresource names its kind's group when it differs (`deployments/scale`:
        // autoscaling Scale); a resource's own kind is in its group.
        let kind_group = r.group.clone().unwrap_or_else(|| group.to_string());
        served.add(ServedResource {
            group: group.to_string(),
            resource: r.name.clone(),
            kind_group,
            kind: r.kind.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minor_is_read_from_any_vendors_git_version() {
        assert_eq!(minor_of("v1.29.4"), Some(29));
        assert_eq!(minor_of("v1.30.14-gke.1000"), Some(30));
        assert_eq!(minor_of("v1.37.2+k3s1"), Some(37));
        assert_eq!(minor_of("1.36.3"), Some(36));
        assert_eq!(minor_of("v2.0.0"), None);
        assert_eq!(minor_of("v1"), None);
        assert_eq!(minor_of("v1.x"), None);
        assert_eq!(minor_of(""), None);
    }

    /// One sentence says what is missing, from which version it exists, and what this server is.
    #[test]
    fn a_server_without_vap_v1_is_told_what_is_missing_and_since_when() {
        let said = |v: Option<&str>, beta| {
            NoVapV1 {
                server_version: v.map(String::from),
                beta_served: beta,
            }
            .to_string()
        };
        let since = "ValidatingAdmissionPolicy v1 (admissionregistration.k8s.io/v1) is served from Kubernetes 1.30; ";
        assert_eq!(
            said(Some("v1.29.4"), false),
            format!(
                "{since}this server (v1.29.4) is older and does not serve it: upgrade the cluster to Kubernetes 1.30 or later"
            )
        );
        assert_eq!(
            said(Some("v1.28.15"), true),
            format!(
                "{since}this server (v1.28.15) is older and does not serve it (it serves v1beta1, the beta, which kubectl-vap does not use): upgrade the cluster to Kubernetes 1.30 or later"
            )
        );
        assert_eq!(
            said(Some("v1.36.3"), false),
            format!(
                "{since}this server (v1.36.3) has it switched off: turn it on in kube-apiserver's --runtime-config, with the ValidatingAdmissionPolicy admission plugin"
            )
        );
        assert_eq!(
            said(None, false),
            format!("{since}this server (its version unknown) does not serve it")
        );
        assert_eq!(
            said(Some("weird"), false),
            format!("{since}this server (weird) does not serve it")
        );
        // The same words through the error every command ends with.
        let e = KubeError::NoVapV1(NoVapV1 {
            server_version: Some("v1.29.4".into()),
            beta_served: false,
        });
        assert_eq!(e.to_string(), said(Some("v1.29.4"), false));
    }
}
