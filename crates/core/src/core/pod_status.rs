//! What kubectl-vap decided, written where Gatekeeper's users and their tools look (issue 38).
//! Gatekeeper's status controller aggregates every `ConstraintTemplatePodStatus` and
//! `ConstraintPodStatus` in its namespace that is labelled for a template or constraint into
//! that object's `status.byPod`, whoever wrote it, and sets a template's `status.created` once
//! one of them has no errors. So the leader writes one of each, as a pod of Gatekeeper's
//! `generate` operation would: `vapGenerationStatus` on the template's, the `vap.k8s.io`
//! entry of `enforcementPointsStatus` on the constraint's, in Gatekeeper's words
//! (`generated`, `waiting`, `error`), under an id that stays when the Lease changes hands.
//!
//! Pure: the objects as JSON, for the controller to compare and write.

use super::decide::TemplateVerdict;
use super::desired::BindingDecision;
use super::step::{Action, BindingStep, PolicyStep};
use crate::model::{Constraint, ConstraintTemplate, STATUS_GROUP, VAP_ENFORCEMENT_POINT};
use serde_json::{Value, json};

pub const TEMPLATE_STATUS_KIND: &str = "ConstraintTemplatePodStatus";
pub const CONSTRAINT_STATUS_KIND: &str = "ConstraintPodStatus";
/// Gatekeeper's labels (`apis/status/v1beta1/labels.go`): how its status controller finds the
/// statuses of an object.
pub const TEMPLATE_NAME_LABEL: &str = "internal.gatekeeper.sh/constrainttemplate-name";
pub const CONSTRAINT_NAME_LABEL: &str = "internal.gatekeeper.sh/constraint-name";
pub const CONSTRAINT_KIND_LABEL: &str = "internal.gatekeeper.sh/constraint-kind";
pub const POD_LABEL: &str = "internal.gatekeeper.sh/pod";
/// What the entries say this writer does, in the `operations` Gatekeeper's pods list theirs.
const OPERATIONS: [&str; 1] = ["generate"];

/// Gatekeeper's state words (`pkg/controller/constrainttemplate/constants.go`,
/// `constraint_controller.go`).
pub const GENERATED: &str = "generated";
pub const WAITING: &str = "waiting";
pub const ERROR: &str = "error";

/// How far the template side got with a template's VAP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateGeneration {
    /// Its VAP (or its constraints' own, in the inline shape) is what the template asks for.
    Generated,
    /// It cannot be generated as written, or the API server refused what was: why.
    Error(String),
}

/// How far the constraint side got with a constraint's binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindingGeneration {
    Generated,
    /// Not written yet, and why (the CRD not Established for `--binding-wait`, the VAP not
    /// written yet).
    Waiting(String),
    /// It cannot be bound as written, or the API server refused the binding: why.
    Error(String),
}

/// What became of a reconcile's writes, as the status tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// Every write was done (or none was needed).
    Done,
    /// A write failed and is retried: why.
    Retrying(String),
    /// The API server refused a write and will refuse it again (invalid, forbidden): its
    /// answer.
    Refused(String),
}

/// A template's entry: `None` when it generates nothing (no entry, as a Gatekeeper pod
/// without `generate` writes none) or its VAP waits for its constraint CRD. `policy`: its VAP
/// step, when one was taken.
pub fn template_generation(
    verdict: &TemplateVerdict,
    policy: Option<&PolicyStep<'_>>,
    written: &Written,
) -> Option<TemplateGeneration> {
    let action = policy.map(|p| &p.action);
    match verdict {
        TemplateVerdict::Skip { .. } => None,
        TemplateVerdict::Invalid { reason } => Some(TemplateGeneration::Error(reason.clone())),
        TemplateVerdict::Generate { .. } => match (action?, written) {
            (Action::Unbuildable(why), _) => Some(TemplateGeneration::Error(why.clone())),
            (Action::Foreign(why), _) => Some(TemplateGeneration::Error(format!(
                "its VAP's name is taken: {why}"
            ))),
            (_, Written::Refused(why)) => Some(TemplateGeneration::Error(why.clone())),
            (Action::Wait, _) | (_, Written::Retrying(_)) => None,
            _ => Some(TemplateGeneration::Generated),
        },
    }
}

/// A constraint's entry: `None` when it wants no binding (not scoped to `vap.k8s.io`, its
/// template does not generate, no template).
pub fn binding_generation(step: &BindingStep<'_>, written: &Written) -> Option<BindingGeneration> {
    match &step.decision {
        BindingDecision::NotWanted { .. } | BindingDecision::Orphan => None,
        BindingDecision::Waiting { reason, .. } => Some(BindingGeneration::Waiting(reason.clone())),
        BindingDecision::Frozen { reason, .. } => Some(BindingGeneration::Error(reason.clone())),
        BindingDecision::Want { .. } => Some(match (&step.action, written) {
            (Action::Foreign(why), _) => {
                BindingGeneration::Error(format!("its binding's name is taken: {why}"))
            }
            (_, Written::Refused(why)) => BindingGeneration::Error(why.clone()),
            (_, Written::Retrying(why)) => {
                BindingGeneration::Waiting(format!("not written yet: {why}"))
            }
            (Action::Wait, _) => BindingGeneration::Waiting(step.binding_state().1),
            _ => BindingGeneration::Generated,
        }),
    }
}

/// Gatekeeper's name packing (`dashPacker`): the parts joined by `-`, each part's own `-`
/// doubled, so the name says which parts it holds. `None` for a part that is empty or starts
/// or ends with `-` (Gatekeeper refuses those too).
pub fn dash_pack(parts: &[&str]) -> Option<String> {
    if parts.is_empty()
        || parts
            .iter()
            .any(|p| p.is_empty() || p.starts_with('-') || p.ends_with('-'))
    {
        return None;
    }
    let escaped: Vec<String> = parts.iter().map(|p| p.replace('-', "--")).collect();
    Some(escaped.join("-"))
}

/// The name of the template status `id` writes for `template`.
pub fn template_status_name(id: &str, template: &str) -> Option<String> {
    dash_pack(&[id, template])
}

/// The name of the constraint status `id` writes for constraint `kind`/`name`.
pub fn constraint_status_name(id: &str, kind: &str, name: &str) -> Option<String> {
    dash_pack(&[id, &kind.to_lowercase(), name])
}

/// The `ConstraintTemplatePodStatus` `id` writes in `namespace` for `t`; `None` when its name
/// cannot be packed (an id or template name that starts or ends with `-`).
pub fn template_status(
    id: &str,
    namespace: &str,
    t: &ConstraintTemplate,
    generation: &TemplateGeneration,
) -> Option<Value> {
    let name = template_status_name(id, t.name())?;
    let (state, warning) = match generation {
        TemplateGeneration::Generated => (GENERATED, None),
        TemplateGeneration::Error(why) => (
            ERROR,
            Some(format!("ValidatingAdmissionPolicy is not generated: {why}")),
        ),
    };
    let mut vap_status = json!({ "state": state, "observedGeneration": t.meta.generation });
    if let Some(w) = warning {
        vap_status["warning"] = json!(w);
    }
    Some(json!({
        "apiVersion": format!("{STATUS_GROUP}/v1beta1"),
        "kind": TEMPLATE_STATUS_KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                TEMPLATE_NAME_LABEL: t.name(),
                POD_LABEL: id,
                crate::model::MANAGED_BY_LABEL: crate::model::MANAGED_BY_VALUE,
            },
            // Not the controller: the template is the user's. Garbage collection removes the
            // status with it, where the reconciler has not already.
            "ownerReferences": [{
                "apiVersion": crate::model::TEMPLATE_OWNER_API_VERSION,
                "kind": "ConstraintTemplate",
                "name": t.name(),
                "uid": t.meta.uid,
            }],
        },
        "status": {
            "id": id,
            "templateUID": t.meta.uid,
            "operations": OPERATIONS,
            "observedGeneration": t.meta.generation,
            "vapGenerationStatus": vap_status,
        },
    }))
}

/// The `ConstraintPodStatus` `id` writes in `namespace` for `c`; `None` when its name cannot
/// be packed. `enforced`: the API server enforces it (its binding is written).
pub fn constraint_status(
    id: &str,
    namespace: &str,
    c: &Constraint,
    generation: &BindingGeneration,
) -> Option<Value> {
    let name = constraint_status_name(id, &c.kind, c.name())?;
    let (state, message) = match generation {
        BindingGeneration::Generated => (GENERATED, None),
        BindingGeneration::Waiting(why) => (WAITING, Some(why.clone())),
        BindingGeneration::Error(why) => (ERROR, Some(why.clone())),
    };
    let mut point = json!({
        "enforcementPoint": VAP_ENFORCEMENT_POINT,
        "state": state,
        "observedGeneration": c.meta.generation,
    });
    if let Some(m) = message {
        point["message"] = json!(m);
    }
    Some(json!({
        "apiVersion": format!("{STATUS_GROUP}/v1beta1"),
        "kind": CONSTRAINT_STATUS_KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                CONSTRAINT_NAME_LABEL: c.name(),
                CONSTRAINT_KIND_LABEL: c.kind,
                TEMPLATE_NAME_LABEL: c.kind.to_lowercase(),
                POD_LABEL: id,
                crate::model::MANAGED_BY_LABEL: crate::model::MANAGED_BY_VALUE,
            },
            "ownerReferences": [{
                "apiVersion": crate::model::CONSTRAINT_API_VERSION,
                "kind": c.kind,
                "name": c.name(),
                "uid": c.meta.uid,
            }],
        },
        "status": {
            "id": id,
            "constraintUID": c.meta.uid,
            "operations": OPERATIONS,
            "enforced": *generation == BindingGeneration::Generated,
            "observedGeneration": c.meta.generation,
            "enforcementPointsStatus": [point],
        },
    }))
}

/// Whether `observed` (as the API server returns it) already says what `desired` says: the
/// same labels of ours and the same `status`. Server fields (uid, resourceVersion,
/// managedFields, timestamps) and labels others added are not compared, so a converged copy
/// writes nothing.
pub fn says_the_same(desired: &Value, observed: &Value) -> bool {
    let labels_held = desired["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| observed["metadata"]["labels"].get(k) == Some(v));
    labels_held && desired["status"] == observed["status"]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_packed_as_gatekeeper_packs_them() {
        assert_eq!(
            dash_pack(&["kubectl-vap", "k8sx"]).as_deref(),
            Some("kubectl--vap-k8sx")
        );
        assert_eq!(
            constraint_status_name("kubectl-vap", "K8sX", "no-host").as_deref(),
            Some("kubectl--vap-k8sx-no--host")
        );
        assert_eq!(dash_pack(&["a", ""]), None);
        assert_eq!(dash_pack(&["-a", "b"]), None);
        assert_eq!(dash_pack(&["a", "b-"]), None);
        assert_eq!(dash_pack(&[]), None);
    }

    #[test]
    fn the_same_status_under_other_server_fields_is_the_same() {
        let desired = json!({"metadata": {"labels": {"a": "1"}}, "status": {"id": "x"}});
        let observed = json!({"metadata": {"labels": {"a": "1", "other": "2"}, "uid": "u",
                              "resourceVersion": "7"}, "status": {"id": "x"}});
        assert!(says_the_same(&desired, &observed));
        let changed = json!({"metadata": {"labels": {"a": "1"}}, "status": {"id": "y"}});
        assert!(!says_the_same(&desired, &changed));
        let unlabelled = json!({"metadata": {}, "status": {"id": "x"}});
        assert!(!says_the_same(&desired, &unlabelled));
    }
}
