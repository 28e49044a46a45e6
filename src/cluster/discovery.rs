//! Which VAP API the server serves: `admissionregistration.k8s.io/v1`, else `v1beta1`
//! (Gatekeeper's `IsVapAPIEnabled`). Errors are returned, never cached, so callers retry.

use super::KubeError;
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
