//! The per-object steps of `core::step` on their own: the rules `analyze` and the live
//! reconcilers share (which name is swept, who is foreign, when a VAP may be written, which
//! CRD may be deleted), checked where both sides take them.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use kubectl_vap::core::decide::{TemplateVerdict, decide_template};
use kubectl_vap::core::desired::{self, BindingDecision, CrdState, Opinion};
use kubectl_vap::core::plan::Diff;
use kubectl_vap::core::scope::Coverage;
use kubectl_vap::core::step::{self, Action, BindingInput};
use kubectl_vap::core::{Code, PolicyShape, Verb, analyze};
use kubectl_vap::load::cel::default_options;
use kubectl_vap::snapshot::Snapshot;
use serde_json::{Value, json};
use support::objects::*;

/// A template and a constraint of its kind, with the VAP, binding and CRD the plan creates,
/// as the API server returns them (uid and resourceVersion set; the CRD Established).
fn converged() -> Vec<Value> {
    converged_in(&default_options())
}

/// [`converged`] under `opts`.
fn converged_in(opts: &kubectl_vap::core::Options) -> Vec<Value> {
    let mut objects = vec![
        template("k8sx", "K8sX", cel_source(Some(true))),
        constraint("K8sX", "a", json!({"parameters": {"labels": ["owner"]}})),
    ];
    let plan = analyze(&snapshot(objects.clone()), opts).plan;
    for (i, w) in plan.into_iter().enumerate() {
        let mut body = w.body.expect("creates carry a body");
        body["metadata"]["uid"] = json!(format!("uid-{i}"));
        body["metadata"]["resourceVersion"] = json!("1");
        objects.push(body);
    }
    let t = &snapshot(objects.clone()).templates[0];
    let mut crd = kubectl_vap::core::crd::desired_crd(t, "K8sX").expect("crd");
    crd["metadata"]["uid"] = json!("uid-crd");
    crd["metadata"]["resourceVersion"] = json!("5");
    crd["status"] = json!({ "conditions": [{ "type": "Established", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z" }] });
    objects.push(crd);
    objects
}

fn snap(objects: Vec<Value>) -> Snapshot {
    let mut s = snapshot(objects);
    s.crds_listed = true;
    s
}

/// What the kind's VAP matches: what its constraints want.
fn cov(s: &Snapshot) -> Coverage {
    desired::policy_coverage(&s.constraints, |_| None, &default_options(), &s.served)
}

fn foreign(o: &mut Value) {
    o["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "someone", "uid": "x", "controller": true}]);
}

/// The objects, with `f` applied to the one named `name`.
fn edited(mut objects: Vec<Value>, name: &str, f: impl Fn(&mut Value)) -> Vec<Value> {
    for o in &mut objects {
        if o["metadata"]["name"] == name {
            f(o);
        }
    }
    objects
}

fn verdict(s: &Snapshot) -> TemplateVerdict {
    decide_template(&s.templates[0], &default_options())
}

#[test]
fn the_legacy_name_is_swept_and_the_current_one_is_the_decisions() {
    let s = snap(converged());
    let renamed = edited(converged(), "gatekeeper-k8sx-a", |b| {
        b["metadata"]["name"] = json!("gatekeeper-a");
    });
    let legacy = snap(renamed.clone());
    let c = &s.constraints[0];
    let old = &legacy.bindings[0];
    let sweep = step::sweep_binding("K8sX", "a", old, Some(c)).expect("legacy name swept");
    assert_eq!(sweep.reason, "legacy name from Gatekeeper v3.16–v3.22");
    assert_eq!(sweep.write(Diff::Skip).verb, Verb::Delete);
    // The constraint gone: the same object goes for that reason, and so does its binding.
    let gone = step::sweep_binding("K8sX", "a", old, None).expect("swept");
    assert_eq!(gone.reason, "constraint K8sX a is gone");
    let current = &s.bindings[0];
    assert!(step::sweep_binding("K8sX", "a", current, None).is_some());
    // The binding under its name, while the constraint exists, is binding_step's.
    assert!(step::sweep_binding("K8sX", "a", current, Some(c)).is_none());
    // Another constraint's binding, or another controller's: never.
    assert!(step::sweep_binding("K8sX", "b", current, None).is_none());
    let theirs = snap(edited(renamed, "gatekeeper-a", foreign));
    assert!(step::sweep_binding("K8sX", "a", &theirs.bindings[0], None).is_none());
}

#[test]
fn a_foreign_binding_is_foreign_whatever_the_decision() {
    let s = snap(edited(converged(), "gatekeeper-k8sx-a", foreign));
    let input = BindingInput {
        constraint: &s.constraints[0],
        opinion: None,
        crd: CrdState::Unknown,
        observed: s.bindings.first(),
        observed_policy: None,
        opts: &default_options(),
        served: &s.served,
        now: chrono::Utc::now(),
    };
    let step = step::binding_step(input);
    assert_eq!(step.decision, BindingDecision::Orphan);
    assert!(matches!(step.action, Action::Foreign(_)));
    assert!(step.write(Diff::Skip).is_none());
    assert!(step.constraint_finding().is_none(), "no orphan finding");
    assert_eq!(
        step.binding_finding().map(|f| f.code),
        Some(Code::BindingForeign)
    );
}

#[test]
fn a_written_binding_is_kept_while_its_crd_settles() {
    let s = snap(converged());
    let ready = Opinion::of(
        &s.templates[0],
        &verdict(&s),
        true,
        cov(&s),
        PolicyShape::Narrowed,
    );
    let now = chrono::Utc::now();
    let input = BindingInput {
        constraint: &s.constraints[0],
        opinion: Some(&ready),
        crd: CrdState::Established(Some(now)),
        observed: s.bindings.first(),
        observed_policy: None,
        opts: &default_options(),
        served: &s.served,
        now,
    };
    let kept = step::binding_step(input);
    assert_eq!(kept.action, Action::Keep);
    assert!(kept.write(Diff::Skip).is_none());
    assert!(kept.wait_until().is_some(), "come back when the wait ends");
    let first = step::binding_step(BindingInput {
        observed: None,
        ..input
    });
    assert_eq!(first.action, Action::Wait);
    assert_eq!(
        first.binding_finding().map(|f| f.code),
        Some(Code::BindingWaiting)
    );
}

#[test]
fn the_vap_waits_for_its_kind_to_be_served_and_says_when_bindings_may_rest_on_it() {
    // The template's VAP (`policy_step`) is the narrowed shape's: the default's, inline, is
    // the constraint's (tests/core_inline.rs). That shape by name.
    let narrowed = narrowed_options();
    let s = snap(converged_in(&narrowed));
    let v = verdict(&s);
    let t = &s.templates[0];
    let waiting = step::policy_step(t, &v, false, None, &cov(&s), &narrowed);
    assert_eq!(waiting.action, Action::Wait);
    assert!(waiting.write(Diff::Skip).is_none() && !waiting.ready_once_written());
    let create = step::policy_step(t, &v, true, None, &cov(&s), &narrowed);
    assert!(matches!(create.action, Action::Create(_)) && create.ready_once_written());
    let in_sync = step::policy_step(t, &v, true, s.policies.first(), &cov(&s), &narrowed);
    assert_eq!(in_sync.action, Action::InSync);
    // A foreign VAP: never written, bindings never rest on it.
    let theirs = snap(edited(converged_in(&narrowed), "gatekeeper-k8sx", foreign));
    let f = step::policy_step(t, &v, true, theirs.policies.first(), &cov(&s), &narrowed);
    assert!(matches!(f.action, Action::Foreign(_)) && !f.ready_once_written());
    assert_eq!(f.finding().map(|f| f.code), Some(Code::PolicyForeign));
    // The CRD step says whether the kind is served: an Established CRD is.
    let crd = step::crd_step(t, "K8sX", &v, s.crds.first());
    assert!(crd.served());
    assert!(!step::crd_step(t, "K8sX", &v, None).served());
}

#[test]
fn not_generating_deletes_our_vap_and_an_invalid_template_keeps_it() {
    // The template's VAP (`policy_step`) is the narrowed shape's: that shape by name.
    let narrowed = narrowed_options();
    let s = snap(converged_in(&narrowed));
    let t = &s.templates[0];
    let skip = TemplateVerdict::Skip {
        reason: "generateVAP: false".into(),
    };
    let gone = step::policy_step(t, &skip, true, s.policies.first(), &cov(&s), &narrowed);
    assert_eq!(
        gone.action,
        Action::Delete("template does not generate (generateVAP: false)".into())
    );
    let invalid = TemplateVerdict::Invalid {
        reason: "bad".into(),
    };
    let kept = step::policy_step(t, &invalid, true, s.policies.first(), &cov(&s), &narrowed);
    assert_eq!(kept.action, Action::Keep);
    assert!(kept.write(Diff::Skip).is_none());
    assert_eq!(
        step::crd_step(t, "K8sX", &invalid, s.crds.first()).action,
        Action::Keep
    );
    // A foreign VAP of a template that does not generate is not a finding.
    let theirs = snap(edited(converged_in(&narrowed), "gatekeeper-k8sx", foreign));
    let f = step::policy_step(t, &skip, true, theirs.policies.first(), &cov(&s), &narrowed);
    assert!(matches!(f.action, Action::Foreign(_)) && f.finding().is_none());
}

#[test]
fn a_gone_templates_vap_is_swept_and_its_crd_deleted_only_with_the_seen_uid() {
    // A template's VAP is the narrowed shape's (the default's, inline, are its constraints'):
    // that shape by name.
    let s = snap(converged_in(&narrowed_options()));
    let p = &s.policies[0];
    let sweep = step::sweep_policy("k8sx", p).expect("controlled by k8sx");
    assert_eq!(sweep.reason, "template k8sx is gone");
    let finding = sweep.finding();
    assert_eq!(finding.code, Code::PolicyDangling);
    assert_eq!(
        finding.message,
        format!("{}: template k8sx is gone; reconcile deletes it", p.name())
    );
    assert_eq!(sweep.param_kind(), Some("K8sX"));
    assert!(step::sweep_policy("other", p).is_none(), "not its name");
    let crd = &s.crds[0];
    let uid = &s.templates[0].meta.uid;
    let w = step::crd::delete_of_gone_template("k8sx", uid, crd, Diff::Skip).expect("ours");
    assert_eq!((w.verb, w.code), (Verb::Delete, Code::CrdOrphan));
    assert_eq!(w.uid.as_deref(), Some("uid-crd"));
    // A recreated template (another uid), or none recorded: not ours to delete.
    assert!(step::crd::delete_of_gone_template("k8sx", "other", crd, Diff::Skip).is_none());
    assert!(step::crd::delete_of_gone_template("k8sx", "", crd, Diff::Skip).is_none());
}
