//! The apiVersions of the kinds we read. An object of one of our kinds at a version nobody
//! serves (`templates.gatekeeper.sh/v999`, a VAP at `v1alpha1`) is a mistake the cluster would
//! refuse or ignore: reading it as if it were served would analyse something that cannot exist.

use crate::snapshot::{ObjectClass, classify};
use serde_json::Value;

/// Versions by class, newest first, and who decides which are served.
fn known(class: ObjectClass) -> Option<(&'static [&'static str], &'static str)> {
    Some(match class {
        ObjectClass::Template => (
            &[
                "templates.gatekeeper.sh/v1",
                "templates.gatekeeper.sh/v1beta1",
                "templates.gatekeeper.sh/v1alpha1",
            ],
            "Gatekeeper serves",
        ),
        // Gatekeeper's constraint CRDs serve these two (v1beta1 stored).
        ObjectClass::Constraint => (
            &[
                "constraints.gatekeeper.sh/v1beta1",
                "constraints.gatekeeper.sh/v1alpha1",
            ],
            "Gatekeeper serves",
        ),
        ObjectClass::PodStatus => (&["status.gatekeeper.sh/v1beta1"], "Gatekeeper serves"),
        // v1beta1 CRDs left Kubernetes in 1.22.
        ObjectClass::ConstraintCrd => (&["apiextensions.k8s.io/v1"], "kubectl-vap reads"),
        ObjectClass::Policy | ObjectClass::Binding => (
            &[
                "admissionregistration.k8s.io/v1",
                "admissionregistration.k8s.io/v1beta1",
            ],
            "kubectl-vap reads",
        ),
        ObjectClass::GatekeeperConfig => (&["config.gatekeeper.sh/v1alpha1"], "Gatekeeper serves"),
        ObjectClass::WebhookConfiguration => {
            (&["admissionregistration.k8s.io/v1"], "kubectl-vap reads")
        }
        ObjectClass::List | ObjectClass::Other => return None,
    })
}

/// `Err` names the object's kind and apiVersion and the known ones. A List's items are checked
/// one by one.
pub fn check(raw: &Value) -> Result<(), String> {
    let class = classify(raw);
    if class == ObjectClass::List {
        if let Some(items) = raw.get("items").and_then(Value::as_array) {
            for (i, item) in items.iter().enumerate() {
                check(item).map_err(|e| format!("items[{i}]: {e}"))?;
            }
        }
        return Ok(());
    }
    let Some((versions, who)) = known(class) else {
        return Ok(());
    };
    let (api_version, kind) = crate::model::meta::type_of(raw);
    if versions.contains(&api_version) {
        return Ok(());
    }
    Err(format!(
        "{kind} {api_version} is not a version {who} (known: {})",
        versions.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn our_kinds_at_unknown_versions_are_refused_others_pass() {
        let ok = |v: Value| check(&v).is_ok();
        assert!(ok(
            json!({"apiVersion": "templates.gatekeeper.sh/v1beta1", "kind": "ConstraintTemplate"})
        ));
        assert!(!ok(
            json!({"apiVersion": "templates.gatekeeper.sh/v2", "kind": "ConstraintTemplate"})
        ));
        assert!(ok(
            json!({"apiVersion": "constraints.gatekeeper.sh/v1alpha1", "kind": "K8sX"})
        ));
        assert!(!ok(
            json!({"apiVersion": "constraints.gatekeeper.sh/v1", "kind": "K8sX"})
        ));
        assert!(!ok(
            json!({"apiVersion": "admissionregistration.k8s.io/v1alpha1", "kind": "ValidatingAdmissionPolicyBinding"})
        ));
        assert!(!ok(
            json!({"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "CustomResourceDefinition", "spec": {"group": "constraints.gatekeeper.sh"}})
        ));
        // Not ours: any version.
        assert!(ok(
            json!({"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "CustomResourceDefinition", "spec": {"group": "example.com"}})
        ));
        assert!(ok(json!({"apiVersion": "v9", "kind": "ConfigMap"})));
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "status.gatekeeper.sh/v1beta1", "kind": "ConstraintPodStatus"},
            {"apiVersion": "status.gatekeeper.sh/v1", "kind": "ConstraintPodStatus"},
        ]});
        assert_eq!(
            check(&list),
            Err("items[1]: ConstraintPodStatus status.gatekeeper.sh/v1 is not a version Gatekeeper serves (known: status.gatekeeper.sh/v1beta1)".into())
        );
    }
}
