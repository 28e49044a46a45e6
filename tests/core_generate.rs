//! The generated objects for the spec's representative template and constraint (§7), field by
//! field, plus a golden snapshot of the whole YAML.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use kubectl_vap::core::decide::Action;
use kubectl_vap::core::scope::Coverage;
use kubectl_vap::core::{PolicyShape, cel, desired, generate};
use kubectl_vap::load::cel::default_options;
use kubectl_vap::model::served::Served;
use kubectl_vap::model::{Constraint, ConstraintTemplate, Source};
use serde_json::json;
use support::objects::{constraint, policy_for};

fn spec_template() -> ConstraintTemplate {
    let v = serde_norway::from_str(
        r#"
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8srequiredlabels, uid: ct-uid}
spec:
  crd:
    spec:
      names: {kind: K8sRequiredLabels}
  targets:
  - target: admission.k8s.gatekeeper.sh
    code:
    - engine: K8sNativeValidation
      source:
        generateVAP: true
        matchCondition: [{name: only-labelled, expression: "has(object.metadata.labels)"}]
        variables: [{name: labels, expression: "variables.anyObject.metadata.labels"}]
        validations:
        - expression: "variables.params.labels.all(l, l in variables.labels)"
          message: "missing required labels"
"#,
    )
    .expect("fixture parses");
    ConstraintTemplate::from_value(v, Source::default())
}

fn spec_constraint(extra: serde_json::Value) -> Constraint {
    let mut v = constraint(
        "K8sRequiredLabels",
        "ns-must-have-owner",
        json!({
            "enforcementAction": "deny",
            "match": {"kinds": [{"apiGroups": [""], "kinds": ["Namespace"]}], "labelSelector": {"matchLabels": {"team": "payments"}}},
            "parameters": {"labels": ["owner"]}
        }),
    );
    v["metadata"]["uid"] = json!("constraint-uid");
    if let Some(m) = extra.as_object() {
        for (k, x) in m {
            v["spec"]["match"][k] = x.clone();
        }
    }
    Constraint::from_value(v, Source::default())
}

/// The binding in Gatekeeper's shape (the spec's §7 objects are Gatekeeper's).
fn gk_binding(
    c: &Constraint,
    actions: &[Action],
) -> Result<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding, String> {
    generate::binding(
        c,
        actions,
        PolicyShape::Gatekeeper,
        &default_options().exemptions,
        &Served::builtin(),
    )
    .map(|b| b.0)
}

#[test]
fn policy_matches_the_spec_field_by_field() {
    let t = spec_template();
    let p = policy_for(&t, "K8sRequiredLabels").expect("generates");
    assert_eq!(
        p.metadata.name.as_deref(),
        Some("gatekeeper-k8srequiredlabels")
    );
    assert_eq!(
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/managed-by"))
            .map(String::as_str),
        Some("kubectl-vap")
    );
    let owner = &p.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str()
        ),
        (
            "templates.gatekeeper.sh/v1beta1",
            "ConstraintTemplate",
            "k8srequiredlabels",
            "ct-uid"
        )
    );
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    let spec = p.spec.expect("spec");
    let pk = spec.param_kind.expect("paramKind");
    assert_eq!(
        pk.api_version.as_deref(),
        Some("constraints.gatekeeper.sh/v1beta1")
    );
    assert_eq!(pk.kind.as_deref(), Some("K8sRequiredLabels"));
    let mc = spec.match_constraints.expect("matchConstraints");
    let rule = &mc.resource_rules.expect("rules")[0];
    assert_eq!(
        rule.operations.as_deref(),
        Some(&["CREATE".to_string(), "UPDATE".to_string()][..])
    );
    assert_eq!(rule.scope.as_deref(), Some("*"));
    assert_eq!(mc.match_policy.as_deref(), Some("Equivalent"));
    let names: Vec<&str> = spec
        .match_conditions
        .as_ref()
        .expect("conditions")
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(
        names,
        [&["only-labelled"][..], &cel::MATCHER_NAMES[..]].concat(),
        "template's own conditions first"
    );
    let vars: Vec<&str> = spec
        .variables
        .as_ref()
        .expect("variables")
        .iter()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(vars, ["anyObject", "params", "labels"]);
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    let v = &spec.validations.expect("validations")[0];
    assert_eq!(v.message.as_deref(), Some("missing required labels"));
    assert!(spec.audit_annotations.is_none());
}

/// Gatekeeper's shape copies its webhook's rules, each one's operations intersected with the
/// template's (`*` expanded, canonical order); with no webhook, Gatekeeper's default (CREATE,
/// UPDATE) whatever the template says; no operation in common: no VAP, and why.
#[test]
fn gatekeepers_shape_intersects_its_webhooks_operations_with_the_templates() {
    let mut t = spec_template();
    t.targets[0].operations = vec!["*".into()];
    let ops = |p: &k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy| {
        p.spec
            .clone()
            .and_then(|s| s.match_constraints)
            .and_then(|m| m.resource_rules)
            .expect("rules")[0]
            .operations
            .clone()
            .unwrap_or_default()
    };
    let no_webhook = policy_for(&t, "K8sRequiredLabels").expect("generates");
    assert_eq!(ops(&no_webhook), ["CREATE", "UPDATE"]);
    let webhook = kubectl_vap::model::GatekeeperWebhook {
        configuration: "gatekeeper-validating-webhook-configuration".into(),
        rules: vec![
            k8s_openapi::api::admissionregistration::v1::RuleWithOperations {
                api_groups: Some(vec!["*".into()]),
                api_versions: Some(vec!["*".into()]),
                operations: Some(vec!["UPDATE".into(), "CREATE".into(), "DELETE".into()]),
                resources: Some(vec!["*".into(), "pods/exec".into()]),
                scope: Some("*".into()),
            },
        ],
        match_policy: Some("Exact".into()),
        ..Default::default()
    };
    let opts = default_options();
    let synced = |t: &ConstraintTemplate| {
        let kubectl_vap::core::decide::TemplateVerdict::Generate {
            source,
            failure_policy,
            ..
        } = kubectl_vap::core::decide::decide_template(t, &opts)
        else {
            panic!("generates")
        };
        generate::policy(
            t,
            "K8sRequiredLabels",
            &source,
            failure_policy,
            generate::PolicyMatch::Gatekeeper {
                synced: true,
                webhook: Some(&webhook),
                exemptions: &opts.exemptions,
            },
            false,
        )
    };
    let all = synced(&t).expect("generates");
    assert_eq!(ops(&all), ["CREATE", "UPDATE", "DELETE"]);
    let m = all.spec.and_then(|s| s.match_constraints).expect("match");
    assert_eq!(m.match_policy.as_deref(), Some("Exact"));
    t.targets[0].operations = vec!["UPDATE".into(), "CONNECT".into()];
    assert_eq!(ops(&synced(&t).expect("generates")), ["UPDATE"]);
    t.targets[0].operations = vec![];
    assert_eq!(
        ops(&synced(&t).expect("generates")),
        ["UPDATE", "CREATE", "DELETE"],
        "no operations in the template: the webhook's as they are"
    );
    t.targets[0].operations = vec!["CONNECT".into()];
    let err = synced(&t).expect_err("no operation in common");
    assert!(err.contains("Gatekeeper generates no VAP"), "{err}");
}

#[test]
fn binding_matches_the_spec_field_by_field() {
    let b = gk_binding(&spec_constraint(json!({})), &[Action::Deny]).expect("binds");
    assert_eq!(
        b.metadata.name.as_deref(),
        Some("gatekeeper-k8srequiredlabels-ns-must-have-owner")
    );
    let owner = &b.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (
            owner.api_version.as_str(),
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str(),
            owner.controller
        ),
        (
            "constraints.gatekeeper.sh/v1beta1",
            "K8sRequiredLabels",
            "ns-must-have-owner",
            "constraint-uid",
            Some(true)
        )
    );
    let spec = b.spec.expect("spec");
    assert_eq!(
        spec.policy_name.as_deref(),
        Some("gatekeeper-k8srequiredlabels")
    );
    let pr = spec.param_ref.expect("paramRef");
    assert_eq!(
        (
            pr.name.as_deref(),
            pr.namespace.as_deref(),
            pr.parameter_not_found_action.as_deref()
        ),
        (Some("ns-must-have-owner"), None, Some("Allow"))
    );
    assert_eq!(spec.validation_actions, Some(vec!["Deny".to_string()]));
    let m = spec.match_resources.expect("matchResources");
    assert_eq!(
        m.object_selector
            .and_then(|s| s.match_labels)
            .and_then(|l| l.get("team").cloned())
            .as_deref(),
        Some("payments")
    );
    assert!(m.resource_rules.is_none(), "no scope, no rules");
}

#[test]
fn scope_is_honoured_with_a_binding_rule() {
    for scope in ["Cluster", "Namespaced"] {
        let b =
            gk_binding(&spec_constraint(json!({"scope": scope})), &[Action::Warn]).expect("binds");
        let rules = b
            .spec
            .and_then(|s| s.match_resources)
            .and_then(|m| m.resource_rules)
            .expect("rules");
        assert_eq!(rules[0].scope.as_deref(), Some(scope));
    }
    let b = gk_binding(&spec_constraint(json!({"scope": "*"})), &[Action::Warn]).expect("binds");
    assert!(
        b.spec
            .and_then(|s| s.match_resources)
            .and_then(|m| m.resource_rules)
            .is_none()
    );
}

#[test]
fn a_bad_selector_is_an_error_not_a_panic() {
    let err = gk_binding(
        &spec_constraint(json!({"labelSelector": {"matchLabels": "team"}})),
        &[Action::Deny],
    )
    .unwrap_err();
    assert!(err.contains("spec.match.labelSelector"), "{err}");
}

#[test]
fn golden_policy_and_binding() {
    let t = spec_template();
    insta::assert_yaml_snapshot!(
        "policy",
        policy_for(&t, "K8sRequiredLabels").expect("generates")
    );
    insta::assert_yaml_snapshot!(
        "binding",
        gk_binding(
            &spec_constraint(json!({"scope": "Namespaced"})),
            &[Action::Audit, Action::Deny, Action::Audit]
        )
        .expect("binds")
    );
}

/// The narrowed shape of the same constraint (`kinds: [Namespace]`, exact namespaces) and its
/// kind's VAP: rules from the kinds, exact names as a namespace selector, the Lease's
/// namespace and ignored namespaces left out, prefixes in one condition.
#[test]
fn golden_narrowed_policy_and_binding() {
    let t = spec_template();
    let c = spec_constraint(
        json!({"namespaces": ["payments", "billing"], "excludedNamespaces": ["kube-*", "scratch"]}),
    );
    let (b, coverage) = generate::binding(
        &c,
        &[Action::Deny],
        PolicyShape::Narrowed,
        &default_options().exemptions,
        &Served::builtin(),
    )
    .expect("binds");
    let opts = default_options();
    let vap_coverage = desired::policy_coverage([&c], |_| None, &opts, &Served::builtin());
    assert_eq!(
        vap_coverage, coverage,
        "one constraint: the VAP matches what it does"
    );
    let mut exemptions = opts.exemptions.clone();
    exemptions.prefixes.insert("kube-".into());
    let kubectl_vap::core::decide::TemplateVerdict::Generate {
        source,
        failure_policy,
        ..
    } = kubectl_vap::core::decide::decide_template(&t, &opts)
    else {
        panic!("generates")
    };
    let p = generate::policy(
        &t,
        "K8sRequiredLabels",
        &source,
        failure_policy,
        generate::PolicyMatch::Narrowed {
            coverage: &vap_coverage,
            exemptions: &exemptions,
        },
        false,
    )
    .expect("builds");
    insta::assert_yaml_snapshot!("narrowed_policy", p);
    insta::assert_yaml_snapshot!("narrowed_binding", b);
    // No constraint: a VAP still needs a rule, and matches no request without a binding.
    let none = generate::policy(
        &t,
        "K8sRequiredLabels",
        &source,
        failure_policy,
        generate::PolicyMatch::Narrowed {
            coverage: &Coverage::default(),
            exemptions: &exemptions,
        },
        false,
    )
    .expect("builds");
    let rules = none
        .spec
        .and_then(|s| s.match_constraints)
        .and_then(|m| m.resource_rules);
    assert_eq!(rules.map(|r| r.len()), Some(1));
}
