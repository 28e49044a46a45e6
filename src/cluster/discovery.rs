//! Which VAP API the server serves: `admissionregistration.k8s.io/v1`, else `v1beta1`
//! (Gatekeeper's `IsVapAPIEnabled`). Errors are returned, never cached, so callers retry.

use super::KubeError;
use crate::model::served::{Served, ServedResource};
use kube::core::{ApiResource, GroupVersionKind};

pub const GROUP: &str = "admissionregistration.k8s.io";
pub use crate::model::{VAP_KIND, VAPB_KIND};

/// The served admission API version, and the resources for VAP and VAPB in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionApi {
    /// `v1` or `v1beta1`.
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

/// The versions of `admissionregistration.k8s.io` we read and write VAPs at, preferred first.
pub const ADMISSION_VERSIONS: [&str; 2] = ["v1", "v1beta1"];

/// Tries v1, then v1beta1; `VapApiMissing` when neither serves `validatingadmissionpolicies`.
pub async fn discover_admission_api(client: &kube::Client) -> Result<AdmissionApi, KubeError> {
    for version in ADMISSION_VERSIONS {
        let gv = format!("{GROUP}/{version}");
        match client.list_api_group_resources(&gv).await {
            Ok(list) => {
                if list
                    .resources
                    .iter()
                    .any(|r| r.name == "validatingadmissionpolicies")
                {
                    return Ok(AdmissionApi {
                        version: version.into(),
                    });
                }
            }
            Err(e) if super::status_code(&e) == Some(404) => continue,
            Err(e) => return Err(KubeError::request(format!("discovering {gv}"), e)),
        }
    }
    Err(KubeError::VapApiMissing)
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
