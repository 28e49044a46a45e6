//! Every decision rule of spec §1–§2, plus the checks Gatekeeper lacks.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use kubectl_vap::core::decide::{
    Action, ConstraintIntent, TemplateVerdict, decide_constraint, decide_template,
};
use kubectl_vap::core::{FailurePolicy, Options};
use kubectl_vap::load::cel::default_options;
use kubectl_vap::model::{Constraint, ConstraintTemplate, Source};
use serde_json::{Value, json};
use support::objects::*;

fn t(v: Value) -> ConstraintTemplate {
    ConstraintTemplate::from_value(v, Source::default())
}
fn c(spec: Value) -> Constraint {
    Constraint::from_value(constraint("K8sX", "c", spec), Source::default())
}
fn opts(vap: bool, binding: bool) -> Options {
    Options {
        default_create_vap_for_templates: vap,
        default_create_vap_binding_for_constraints: binding,
        ..default_options()
    }
}

#[test]
fn generate_vap_field_decides_and_unset_follows_the_flag() {
    for (field, flag, want) in [
        (Some(true), false, true),
        (Some(true), true, true),
        (Some(false), true, false),
        (Some(false), false, false),
        (None, true, true),
        (None, false, false),
    ] {
        let v = decide_template(
            &t(template("k8sx", "K8sX", cel_source(field))),
            &opts(flag, true),
        );
        assert_eq!(
            v.generates(),
            want,
            "generateVAP={field:?} flag={flag}: {v:?}"
        );
        assert!(!matches!(v, TemplateVerdict::Invalid { .. }));
    }
}

#[test]
fn rego_only_templates_do_not_generate_quietly() {
    let mut v = template("k8sx", "K8sX", json!({}));
    v["spec"]["targets"][0]["code"] = json!([{"engine": "Rego", "source": {"rego": "package x"}}]);
    let d = decide_template(&t(v), &default_options());
    assert!(matches!(d, TemplateVerdict::Skip { .. }), "{d:?}");
    assert!(d.reason().contains("Rego"), "{}", d.reason());
}

fn invalid_reason(v: Value) -> String {
    match decide_template(&t(v), &default_options()) {
        TemplateVerdict::Invalid { reason } => reason,
        other => panic!("expected invalid, got {other:?}"),
    }
}

#[test]
fn invalid_templates_say_why() {
    let mut two = template("k8sx", "K8sX", cel_source(Some(true)));
    let first = two["spec"]["targets"][0].clone();
    two["spec"]["targets"] = json!([first.clone(), first]);
    assert!(invalid_reason(two).contains("exactly one target"));

    let mut none = template("k8sx", "K8sX", cel_source(Some(true)));
    none["spec"]["targets"] = json!([]);
    assert!(invalid_reason(none).contains("empty"));

    let mut no_kind = template("k8sx", "K8sX", cel_source(Some(true)));
    no_kind["spec"]["crd"] = json!({});
    assert!(invalid_reason(no_kind).contains("kind is not set"));

    assert!(
        invalid_reason(template("other", "K8sX", cel_source(Some(true))))
            .contains("lowercase kind")
    );

    let mut fp = cel_source(Some(true));
    fp["failurePolicy"] = json!("Sometimes");
    assert!(invalid_reason(template("k8sx", "K8sX", fp)).contains("Fail or Ignore"));

    let mut reserved = cel_source(Some(true));
    reserved["matchCondition"] = json!([{"name": "gatekeeper_internal_x", "expression": "true"}]);
    assert!(invalid_reason(template("k8sx", "K8sX", reserved)).contains("reserved prefix"));

    for name in ["params", "anyObject", "gatekeeper_internal_v"] {
        let mut s = cel_source(Some(true));
        s["variables"] = json!([{"name": name, "expression": "1"}]);
        assert!(
            invalid_reason(template("k8sx", "K8sX", s)).contains("reserved"),
            "{name}"
        );
    }

    let mut wrong_type = template("k8sx", "K8sX", cel_source(Some(true)));
    wrong_type["spec"]["targets"] = json!("not a list");
    assert!(invalid_reason(wrong_type).contains("spec.targets"));

    assert!(
        invalid_reason(template("k8sx", "K8sX", json!({"validations": []})))
            .contains("no validations")
    );
}

#[test]
fn failure_policy_comes_from_source_else_flag() {
    let mut s = cel_source(Some(true));
    s["failurePolicy"] = json!("Ignore");
    let TemplateVerdict::Generate { failure_policy, .. } =
        decide_template(&t(template("k8sx", "K8sX", s)), &default_options())
    else {
        panic!("generates")
    };
    assert_eq!(failure_policy, FailurePolicy::Ignore);
    let o = Options {
        default_failure_policy: FailurePolicy::Ignore,
        ..default_options()
    };
    let TemplateVerdict::Generate { failure_policy, .. } =
        decide_template(&t(template("k8sx", "K8sX", cel_source(Some(true)))), &o)
    else {
        panic!("generates")
    };
    assert_eq!(failure_policy, FailurePolicy::Ignore);
}

fn actions(spec: Value, binding_flag: bool) -> ConstraintIntent {
    decide_constraint(&c(spec), &opts(true, binding_flag))
}

#[test]
fn plain_actions_map_and_follow_the_binding_flag() {
    for (action, want) in [
        (None, Action::Deny),
        (Some("deny"), Action::Deny),
        (Some("warn"), Action::Warn),
        (Some("dryrun"), Action::Audit),
        (Some(""), Action::Deny),
    ] {
        let spec = match action {
            Some(a) => json!({"enforcementAction": a}),
            None => json!({}),
        };
        assert_eq!(
            actions(spec.clone(), true),
            ConstraintIntent::Bind {
                actions: vec![want],
                reason: format!(
                    "{}; --default-create-vap-binding-for-constraints=true",
                    action.filter(|a| !a.is_empty()).unwrap_or("deny")
                )
            }
        );
        assert!(matches!(
            actions(spec, false),
            ConstraintIntent::NoBinding { .. }
        ));
    }
}

#[test]
fn scoped_actions_pick_vap_and_star_ignore_the_flag_and_deduplicate() {
    let spec = json!({"enforcementAction": "scoped", "scopedEnforcementActions": [
        {"action": "warn", "enforcementPoints": [{"name": "vap.k8s.io"}, {"name": "validation.gatekeeper.sh"}]},
        {"action": "dryrun", "enforcementPoints": [{"name": "*"}]},
        {"action": "warn", "enforcementPoints": [{"name": "*"}]},
        {"action": "deny", "enforcementPoints": [{"name": "audit.gatekeeper.sh"}]}
    ]});
    let ConstraintIntent::Bind { actions: got, .. } = actions(spec, false) else {
        panic!("binds")
    };
    assert_eq!(got, vec![Action::Warn, Action::Audit]);

    let none = json!({"enforcementAction": "scoped", "scopedEnforcementActions": [{"action": "deny", "enforcementPoints": [{"name": "validation.gatekeeper.sh"}]}]});
    assert!(matches!(
        actions(none, true),
        ConstraintIntent::NoBinding { .. }
    ));
}

#[test]
fn deny_with_warn_unknown_actions_and_bad_scope_are_rejected() {
    let both = json!({"enforcementAction": "scoped", "scopedEnforcementActions": [
        {"action": "deny", "enforcementPoints": [{"name": "vap.k8s.io"}]},
        {"action": "warn", "enforcementPoints": [{"name": "*"}]}
    ]});
    let ConstraintIntent::Invalid { reason } = actions(both, true) else {
        panic!("invalid")
    };
    assert!(reason.contains("Deny and Warn"), "{reason}");
    assert!(matches!(
        actions(json!({"enforcementAction": "enforce"}), true),
        ConstraintIntent::Invalid { .. }
    ));
    let bad_scoped = json!({"enforcementAction": "scoped", "scopedEnforcementActions": [{"action": "block", "enforcementPoints": [{"name": "*"}]}]});
    assert!(matches!(
        actions(bad_scoped, true),
        ConstraintIntent::Invalid { .. }
    ));
    assert!(matches!(
        actions(json!({"match": {"scope": "Everywhere"}}), true),
        ConstraintIntent::Invalid { .. }
    ));
    assert!(matches!(
        actions(json!({"match": {"namespaces": "not-a-list"}}), true),
        ConstraintIntent::Invalid { .. }
    ));
    // Deny with Audit is a valid pair.
    let deny_audit = json!({"enforcementAction": "scoped", "scopedEnforcementActions": [
        {"action": "deny", "enforcementPoints": [{"name": "vap.k8s.io"}]},
        {"action": "dryrun", "enforcementPoints": [{"name": "vap.k8s.io"}]}
    ]});
    assert!(matches!(
        actions(deny_audit, true),
        ConstraintIntent::Bind { .. }
    ));
}
