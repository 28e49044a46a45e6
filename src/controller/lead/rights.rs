//! Whether this copy may do what leading needs, asked before it competes: a copy without the
//! rights to renew the Lease or to write VAPs, bindings and constraint CRDs would sit as a
//! ready standby for as long as another copy leads, and learn it cannot lead only when that
//! copy is gone. The API server answers for the user it is (a SelfSubjectAccessReview, which
//! every authenticated user may create); RBAC is what it judges, not the guard policy.

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// What [`crate::controller::Controller::forbidden`] names a copy's missing rights to lead.
pub const RIGHTS: &str = "the rights to lead";

/// How often a copy that lacks rights asks again (a grant may come with a rollout).
pub const ASK_AGAIN: std::time::Duration = std::time::Duration::from_secs(30);

/// One right leading needs: `verb` on `resource` of `group` (in `namespace`, on `name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Right {
    pub verb: &'static str,
    pub group: &'static str,
    pub resource: &'static str,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

impl std::fmt::Display for Right {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            String::new()
        } else {
            format!(".{}", self.group)
        };
        write!(f, "{} {}{group}", self.verb, self.resource)?;
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        if let Some(ns) = &self.namespace {
            write!(f, " in namespace {ns}")?;
        }
        Ok(())
    }
}

/// What leading needs besides reading (the stores say what they cannot read themselves):
/// renewing its Lease and writing the three kinds of object it holds.
pub fn to_lead(lease_namespace: &str, lease_name: &str) -> Vec<Right> {
    let lease = |verb| Right {
        verb,
        group: "coordination.k8s.io",
        resource: "leases",
        namespace: Some(lease_namespace.to_string()),
        name: Some(lease_name.to_string()),
    };
    let mut rights = vec![lease("get"), lease("update")];
    for (group, resource) in [
        (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies",
        ),
        (
            "admissionregistration.k8s.io",
            "validatingadmissionpolicybindings",
        ),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
    ] {
        for verb in ["create", "update", "delete"] {
            rights.push(Right {
                verb,
                group,
                resource,
                namespace: None,
                name: None,
            });
        }
    }
    rights
}

/// The rights of `rights` the API server says this user lacks. `Err` when it could not be
/// asked (no answer, reviews not served): nothing is known, nothing is claimed.
pub async fn missing(client: &kube::Client, rights: &[Right]) -> Result<Vec<Right>, kube::Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let asked = futures::stream::iter(rights.to_vec())
        .map(|right| {
            let api = api.clone();
            async move {
                let review = SelfSubjectAccessReview {
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: Some(ResourceAttributes {
                            verb: Some(right.verb.to_string()),
                            group: Some(right.group.to_string()),
                            resource: Some(right.resource.to_string()),
                            namespace: right.namespace.clone(),
                            name: right.name.clone(),
                            ..ResourceAttributes::default()
                        }),
                        ..SelfSubjectAccessReviewSpec::default()
                    },
                    ..SelfSubjectAccessReview::default()
                };
                let answer = api.create(&PostParams::default(), &review).await?;
                let allowed = answer.status.is_some_and(|s| s.allowed);
                Ok::<_, kube::Error>((!allowed).then_some(right))
            }
        })
        .buffered(8)
        .collect::<Vec<_>>()
        .await;
    let mut lacking = Vec::new();
    for answer in asked {
        lacking.extend(answer?);
    }
    Ok(lacking)
}

/// What a copy without `lacking` says, once, with what fixes it.
pub fn lacking_text(lacking: &[Right]) -> String {
    let rights: Vec<String> = lacking.iter().map(ToString::to_string).collect();
    format!(
        "forbidden: this copy can never lead: it may not {}; grant the kubectl-vap ClusterRole and the Lease Role from `kubectl vap install --print` (`kubectl vap help rbac`)",
        rights.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rights_to_lead_are_said_as_kubectl_auth_can_i_would_ask_them() {
        let rights = to_lead("gatekeeper-system", "kubectl-vap");
        assert_eq!(
            rights[1].to_string(),
            "update leases.coordination.k8s.io kubectl-vap in namespace gatekeeper-system"
        );
        assert!(rights.iter().any(|r| r.to_string()
            == "delete validatingadmissionpolicybindings.admissionregistration.k8s.io"));
        let text = lacking_text(&rights[1..2]);
        assert!(text.starts_with("forbidden: this copy can never lead: it may not update leases"));
        assert!(text.contains("install --print"));
    }
}
