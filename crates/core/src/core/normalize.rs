//! Normalization of server defaults and the comparison of desired vs observed objects.
//!
//! The API server fills in `matchPolicy: Equivalent`, empty selectors, `scope: "*"` and
//! `failurePolicy: Fail`; `validationActions` is a set. Comparing raw specs would see a change
//! on every pass and write forever (Gatekeeper #4640, #4793); comparing normalized specs gives
//! zero writes in steady state (invariant I4).

use super::cel::MATCHER_NAMES;
use k8s_openapi::api::admissionregistration::v1 as ar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

fn none_if_empty<T>(v: Option<Vec<T>>) -> Option<Vec<T>> {
    v.filter(|v| !v.is_empty())
}

fn selector(s: Option<LabelSelector>) -> Option<LabelSelector> {
    let s = s.unwrap_or_default();
    Some(LabelSelector {
        match_labels: s.match_labels.filter(|m| !m.is_empty()),
        match_expressions: none_if_empty(s.match_expressions),
    })
}

fn match_resources(m: Option<ar::MatchResources>) -> Option<ar::MatchResources> {
    let m = m.unwrap_or_default();
    let rules = |r: Option<Vec<ar::NamedRuleWithOperations>>| {
        none_if_empty(r).map(|rules| {
            rules
                .into_iter()
                .map(|mut r| {
                    r.scope = Some(r.scope.unwrap_or_else(|| "*".into()));
                    r.resource_names = none_if_empty(r.resource_names);
                    r
                })
                .collect()
        })
    };
    Some(ar::MatchResources {
        match_policy: Some(m.match_policy.unwrap_or_else(|| "Equivalent".into())),
        namespace_selector: selector(m.namespace_selector),
        object_selector: selector(m.object_selector),
        resource_rules: rules(m.resource_rules),
        exclude_resource_rules: rules(m.exclude_resource_rules),
    })
}

pub fn policy_spec(
    spec: Option<ar::ValidatingAdmissionPolicySpec>,
) -> ar::ValidatingAdmissionPolicySpec {
    let s = spec.unwrap_or_default();
    ar::ValidatingAdmissionPolicySpec {
        audit_annotations: none_if_empty(s.audit_annotations),
        failure_policy: Some(s.failure_policy.unwrap_or_else(|| "Fail".into())),
        match_conditions: none_if_empty(s.match_conditions),
        match_constraints: match_resources(s.match_constraints),
        param_kind: s.param_kind,
        validations: none_if_empty(s.validations).map(|vs| {
            vs.into_iter()
                .map(|mut v| {
                    v.message = v.message.filter(|m| !m.is_empty());
                    v.message_expression = v.message_expression.filter(|m| !m.is_empty());
                    v.reason = v.reason.filter(|m| !m.is_empty());
                    v
                })
                .collect()
        }),
        variables: none_if_empty(s.variables),
    }
}

pub fn binding_spec(
    spec: Option<ar::ValidatingAdmissionPolicyBindingSpec>,
) -> ar::ValidatingAdmissionPolicyBindingSpec {
    let s = spec.unwrap_or_default();
    let mut actions = s.validation_actions.unwrap_or_default();
    actions.sort();
    actions.dedup();
    ar::ValidatingAdmissionPolicyBindingSpec {
        match_resources: match_resources(s.match_resources),
        param_ref: s.param_ref.map(|mut p| {
            p.namespace = p.namespace.filter(|n| !n.is_empty());
            p
        }),
        policy_name: s.policy_name,
        validation_actions: Some(actions),
    }
}

/// Field paths in which two normalized policy specs differ. Empty means in sync.
pub fn policy_diff(
    desired: &ar::ValidatingAdmissionPolicySpec,
    observed: &ar::ValidatingAdmissionPolicySpec,
) -> Vec<&'static str> {
    let mut d = Vec::new();
    if desired.param_kind != observed.param_kind {
        d.push("spec.paramKind");
    }
    if desired.match_constraints != observed.match_constraints {
        d.push("spec.matchConstraints");
    }
    if desired.match_conditions != observed.match_conditions {
        d.push("spec.matchConditions");
    }
    if desired.validations != observed.validations {
        d.push("spec.validations");
    }
    if desired.variables != observed.variables {
        d.push("spec.variables");
    }
    if desired.failure_policy != observed.failure_policy {
        d.push("spec.failurePolicy");
    }
    if desired.audit_annotations != observed.audit_annotations {
        d.push("spec.auditAnnotations");
    }
    d
}

fn own_conditions(s: &ar::ValidatingAdmissionPolicySpec) -> Vec<&ar::MatchCondition> {
    s.match_conditions
        .iter()
        .flatten()
        .filter(|m| !m.name.starts_with("gatekeeper_internal_"))
        .collect()
}

fn own_variables(s: &ar::ValidatingAdmissionPolicySpec) -> Vec<&ar::Variable> {
    s.variables
        .iter()
        .flatten()
        .filter(|v| v.name != "params" && v.name != "anyObject")
        .collect()
}

/// Gatekeeper's own `matchConstraints` (every resource, no selector): the one a policy in
/// Gatekeeper's shape wants, whatever Gatekeeper copied from its webhook instead.
fn is_gatekeeper_wide(m: Option<&ar::MatchResources>) -> bool {
    let Some(m) = m else { return true };
    let rules = m.resource_rules.as_deref().unwrap_or_default();
    let empty =
        |s: &Option<LabelSelector>| s.as_ref().is_none_or(|s| *s == LabelSelector::default());
    empty(&m.namespace_selector)
        && empty(&m.object_selector)
        && matches!(rules, [r] if r.api_groups.as_deref() == Some(&["*".to_string()][..])
            && r.resources.as_deref() == Some(&["*".to_string()][..]))
}

/// The comparison for a policy written by Gatekeeper: only the fields that carry user intent,
/// and Gatekeeper's four matchers by name (their CEL text is Gatekeeper's, not ours). What it
/// matches counts only when we want it narrowed: in Gatekeeper's shape, Gatekeeper's copy of
/// its webhook's scope is left as it is.
pub fn policy_diff_semantic(
    desired: &ar::ValidatingAdmissionPolicySpec,
    observed: &ar::ValidatingAdmissionPolicySpec,
) -> Vec<&'static str> {
    let mut d = Vec::new();
    if !is_gatekeeper_wide(desired.match_constraints.as_ref())
        && desired.match_constraints != observed.match_constraints
    {
        d.push("spec.matchConstraints");
    }
    if desired.param_kind != observed.param_kind {
        d.push("spec.paramKind");
    }
    if desired.validations != observed.validations {
        d.push("spec.validations");
    }
    if own_conditions(desired) != own_conditions(observed) {
        d.push("spec.matchConditions");
    }
    let has_matchers = MATCHER_NAMES.iter().all(|name| {
        observed
            .match_conditions
            .iter()
            .flatten()
            .any(|m| m.name == *name)
    });
    if !has_matchers && !d.contains(&"spec.matchConditions") {
        d.push("spec.matchConditions");
    }
    if own_variables(desired) != own_variables(observed) {
        d.push("spec.variables");
    }
    if desired.failure_policy != observed.failure_policy {
        d.push("spec.failurePolicy");
    }
    d
}

pub fn binding_diff(
    desired: &ar::ValidatingAdmissionPolicyBindingSpec,
    observed: &ar::ValidatingAdmissionPolicyBindingSpec,
    semantic: bool,
) -> Vec<&'static str> {
    let mut d = Vec::new();
    if desired.policy_name != observed.policy_name {
        d.push("spec.policyName");
    }
    if desired.param_ref != observed.param_ref {
        d.push("spec.paramRef");
    }
    if desired.validation_actions != observed.validation_actions {
        d.push("spec.validationActions");
    }
    let (dm, om) = (
        desired.match_resources.clone().unwrap_or_default(),
        observed.match_resources.clone().unwrap_or_default(),
    );
    if semantic {
        // Gatekeeper writes only the selectors; rules are ours (scope), so judge selectors.
        if dm.object_selector != om.object_selector
            || dm.namespace_selector != om.namespace_selector
        {
            d.push("spec.matchResources");
        }
        if dm.resource_rules.is_some() && dm.resource_rules != om.resource_rules {
            // spec.match.scope is set: Gatekeeper's binding does not enforce it.
            if !d.contains(&"spec.matchResources") {
                d.push("spec.matchResources");
            }
        }
    } else if dm != om {
        d.push("spec.matchResources");
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_defaults_normalize_to_the_same_spec() {
        let written = ar::ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some("p".into()),
            validation_actions: Some(vec!["Warn".into(), "Audit".into(), "Warn".into()]),
            match_resources: None,
            param_ref: None,
        };
        let served = ar::ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some("p".into()),
            validation_actions: Some(vec!["Audit".into(), "Warn".into()]),
            match_resources: Some(ar::MatchResources {
                match_policy: Some("Equivalent".into()),
                namespace_selector: Some(LabelSelector::default()),
                object_selector: Some(LabelSelector {
                    match_labels: Some(Default::default()),
                    match_expressions: Some(vec![]),
                }),
                ..Default::default()
            }),
            param_ref: None,
        };
        assert_eq!(binding_spec(Some(written)), binding_spec(Some(served)));
    }

    #[test]
    fn a_real_difference_survives_normalization() {
        let a = binding_spec(Some(ar::ValidatingAdmissionPolicyBindingSpec {
            validation_actions: Some(vec!["Deny".into()]),
            ..Default::default()
        }));
        let b = binding_spec(Some(ar::ValidatingAdmissionPolicyBindingSpec {
            validation_actions: Some(vec!["Warn".into()]),
            ..Default::default()
        }));
        assert_eq!(binding_diff(&a, &b, false), vec!["spec.validationActions"]);
    }

    #[test]
    fn rule_scope_defaults_to_star() {
        let rule = |scope: Option<&str>| ar::ValidatingAdmissionPolicySpec {
            match_constraints: Some(ar::MatchResources {
                resource_rules: Some(vec![ar::NamedRuleWithOperations {
                    resources: Some(vec!["*".into()]),
                    scope: scope.map(Into::into),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            policy_spec(Some(rule(None))),
            policy_spec(Some(rule(Some("*"))))
        );
        assert_ne!(
            policy_spec(Some(rule(None))),
            policy_spec(Some(rule(Some("Cluster"))))
        );
    }
}
