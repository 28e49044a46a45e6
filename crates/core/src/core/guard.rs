//! The guard: the ValidatingAdmissionPolicy and binding `install --print` ships to confine the
//! reconciler's service account where RBAC cannot, and what a running copy judges of the guard
//! the API server holds. Kubernetes evaluates no admission policy on VAPs and bindings, so the
//! account the guard confines can delete the guard itself; a copy told which guard protects it
//! (`run --guard`) says so when it is gone, unbound or changed.

use serde_json::{Value, json};

/// The guard policy and its binding. Not `gatekeeper-…` (the reconciler's names) and not
/// labelled managed-by kubectl-vap: nothing the reconciler owns, so it never touches it.
pub const GUARD_NAME: &str = "kubectl-vap-guard";
/// The `app.kubernetes.io/name` and `part-of` of what `install --print` ships.
const NAME: &str = "kubectl-vap";

/// A CEL string literal (names and namespaces are DNS labels; quoted all the same).
fn cel_string(s: &str) -> String {
    Value::from(s).to_string()
}

/// The guard: a ValidatingAdmissionPolicy and its binding that confine what `user` (the
/// ServiceAccount) may write where RBAC cannot name the objects in advance. RBAC grants
/// create/update/delete on every CustomResourceDefinition (the constraint CRDs' names come
/// from templates) and create of Leases and ConfigMaps (a create is authorized before the name
/// is known); the guard lets through only CRDs of the group `constraints.gatekeeper.sh` without a
/// conversion webhook, and in `namespace` only the Lease `lease` and its requests ConfigMap `requests`, and
/// of Gatekeeper's pod statuses only those labelled with kubectl-vap's id (the Lease's name).
/// Kubernetes evaluates no admission policy (nor webhook) on VAPs and bindings themselves, so
/// that no policy can lock out the admission chain: those stay confined by RBAC alone.
pub fn guard_objects(namespace: &str, lease: &str, requests: &str, user: &str) -> [Value; 2] {
    let labels = json!({ "app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": NAME });
    let ns = cel_string(namespace);
    let requests = cel_string(requests);
    let group = cel_string(crate::model::CONSTRAINTS_GROUP);
    let name_is = |resource: &str, name: &str| {
        format!(
            "request.resource.resource != '{resource}' || (request.namespace == {ns} && variables.target.metadata.name == {name})"
        )
    };
    let rule = |group: &str, resource: &str| {
        json!({ "apiGroups": [group], "apiVersions": ["*"], "resources": [resource],
                "operations": ["CREATE", "UPDATE", "DELETE"] })
    };
    [
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": { "name": GUARD_NAME, "labels": labels },
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": { "resourceRules": [
                    rule("apiextensions.k8s.io", "customresourcedefinitions"),
                    rule("coordination.k8s.io", "leases"),
                    rule("", "configmaps"),
                    rule(crate::model::STATUS_GROUP, "constrainttemplatepodstatuses"),
                    rule(crate::model::STATUS_GROUP, "constraintpodstatuses"),
                ] },
                // Only the reconciler's own requests: nobody else is confined by this policy.
                "matchConditions": [{
                    "name": "the-reconciler",
                    "expression": format!("request.userInfo.username == {}", cel_string(user))
                }],
                // A delete has no new object: what it removes is the old one.
                "variables": [{
                    "name": "target",
                    "expression": "request.operation == 'DELETE' ? oldObject : object"
                }],
                "validations": [
                    {
                        "expression": format!(
                            "request.resource.resource != 'customresourcedefinitions' || variables.target.spec.group == {group}"
                        ),
                        "messageExpression": format!(
                            "'kubectl-vap writes only constraint CRDs (group ' + {group} + '), not ' + variables.target.metadata.name"
                        ),
                        "reason": "Forbidden"
                    },
                    {
                        // A conversion webhook would send every constraint of the kind, on
                        // every read, to a URL the CRD names: ours never has one.
                        "expression": "request.resource.resource != 'customresourcedefinitions' || request.operation == 'DELETE' || !has(object.spec.conversion) || object.spec.conversion.strategy != 'Webhook'",
                        "messageExpression": "'kubectl-vap writes no conversion webhook, and CRD ' + object.metadata.name + ' has one'",
                        "reason": "Forbidden"
                    },
                    {
                        "expression": name_is("leases", &cel_string(lease)),
                        "messageExpression": format!(
                            "'kubectl-vap writes only its Lease ' + {ns} + '/' + {}", cel_string(lease)
                        ),
                        "reason": "Forbidden"
                    },
                    {
                        "expression": name_is("configmaps", &requests),
                        "messageExpression": format!(
                            "'kubectl-vap writes only its ConfigMap ' + {ns} + '/' + {requests}"
                        ),
                        "reason": "Forbidden"
                    },
                    {
                        // Gatekeeper's pods write theirs beside ours: ours carry our id.
                        "expression": format!(
                            "!request.resource.resource.endsWith('podstatuses') || (has(variables.target.metadata.labels) && {pod} in variables.target.metadata.labels && variables.target.metadata.labels[{pod}] == {lease})",
                            pod = cel_string(crate::core::pod_status::POD_LABEL),
                            lease = cel_string(lease)
                        ),
                        "messageExpression": format!(
                            "'kubectl-vap writes only the pod statuses labelled ' + {} + '=' + {}",
                            cel_string(crate::core::pod_status::POD_LABEL),
                            cel_string(lease)
                        ),
                        "reason": "Forbidden"
                    }
                ]
            }
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": { "name": GUARD_NAME, "labels": labels },
            "spec": { "policyName": GUARD_NAME, "validationActions": ["Deny"] }
        }),
    ]
}

/// What is wrong with the guard the API server holds, if anything: `policy` and `binding` are
/// the VAP and binding named [`GUARD_NAME`] (JSON, `None` when absent), `expected` the policy
/// [`guard_objects`] builds. Every rule of `expected` must be there, word for word, and the
/// binding must deny over everything the policy matches; the user it confines is not compared
/// (a copy does not know its own name for certain). The words say what is wrong and what fixes
/// it.
pub fn guard_problem(
    expected: &Value,
    policy: Option<&Value>,
    binding: Option<&Value>,
) -> Option<String> {
    let again = "apply it again (`kubectl vap install --print`)";
    let Some(policy) = policy else {
        return Some(format!(
            "the guard policy {GUARD_NAME} does not exist: the service account's CRD, Lease, ConfigMap and pod-status writes are confined by RBAC alone; {again}"
        ));
    };
    let failure_policy = policy["spec"]["failurePolicy"].as_str().unwrap_or("Fail");
    if failure_policy != "Fail" {
        return Some(format!(
            "the guard policy {GUARD_NAME} has failurePolicy {failure_policy}: a rule that cannot be evaluated lets the write through; {again}"
        ));
    }
    let expressions = |p: &Value| -> Vec<String> {
        p["spec"]["validations"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["expression"].as_str().map(str::to_string))
            .collect()
    };
    let held = expressions(policy);
    let missing = expressions(expected)
        .into_iter()
        .filter(|e| !held.contains(e))
        .count();
    if missing > 0 {
        return Some(format!(
            "the guard policy {GUARD_NAME} differs from the one install prints: {missing} of its rules are missing or changed; {again}"
        ));
    }
    let Some(binding) = binding else {
        return Some(format!(
            "the guard binding {GUARD_NAME} does not exist, so the guard policy judges nothing: {again}"
        ));
    };
    let spec = &binding["spec"];
    let denies = spec["validationActions"]
        .as_array()
        .is_some_and(|actions| actions.iter().any(|a| a == "Deny"));
    if spec["policyName"] != GUARD_NAME || !denies {
        return Some(format!(
            "the guard binding {GUARD_NAME} does not deny through policy {GUARD_NAME} (policyName {}, validationActions {}): {again}",
            spec["policyName"], spec["validationActions"]
        ));
    }
    if !spec["matchResources"].is_null() && spec["matchResources"] != json!({}) {
        return Some(format!(
            "the guard binding {GUARD_NAME} narrows what the guard judges (matchResources {}): {again}",
            spec["matchResources"]
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn printed() -> [Value; 2] {
        guard_objects(
            "vap-system",
            "kubectl-vap",
            "kubectl-vap-requests",
            "system:serviceaccount:vap-system:kubectl-vap",
        )
    }

    #[test]
    fn the_printed_guard_holds() {
        let [policy, binding] = printed();
        assert_eq!(guard_problem(&policy, Some(&policy), Some(&binding)), None);
        // The server's defaults on the binding change nothing.
        let mut defaulted = binding.clone();
        defaulted["spec"]["matchResources"] = json!({});
        assert_eq!(
            guard_problem(&policy, Some(&policy), Some(&defaulted)),
            None
        );
    }

    #[test]
    fn a_guard_gone_unbound_weakened_or_narrowed_is_said() {
        let [policy, binding] = printed();
        let problem = |p: Option<&Value>, b: Option<&Value>| {
            guard_problem(&policy, p, b).unwrap_or_else(|| panic!("a problem: {p:?} {b:?}"))
        };
        assert!(problem(None, Some(&binding)).contains("does not exist"));
        assert!(problem(Some(&policy), None).contains("binding kubectl-vap-guard does not exist"));
        let mut ignore = policy.clone();
        ignore["spec"]["failurePolicy"] = json!("Ignore");
        assert!(problem(Some(&ignore), Some(&binding)).contains("failurePolicy Ignore"));
        let mut loosened = policy.clone();
        loosened["spec"]["validations"][0]["expression"] = json!("true");
        assert!(problem(Some(&loosened), Some(&binding)).contains("1 of its rules"));
        let mut warns = binding.clone();
        warns["spec"]["validationActions"] = json!(["Warn"]);
        assert!(problem(Some(&policy), Some(&warns)).contains("does not deny"));
        let mut elsewhere = binding.clone();
        elsewhere["spec"]["policyName"] = json!("other");
        assert!(problem(Some(&policy), Some(&elsewhere)).contains("does not deny"));
        let mut narrowed = binding.clone();
        narrowed["spec"]["matchResources"] =
            json!({ "namespaceSelector": { "matchLabels": { "nothing": "here" } } });
        assert!(problem(Some(&policy), Some(&narrowed)).contains("narrows"));
    }
}
