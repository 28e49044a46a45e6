//! Every finding code from a minimal snapshot, the plan's order and preconditions, and the
//! steady state: a cluster that matches gives no finding and no write.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use kubectl_vap::core::findings::Code;
use kubectl_vap::core::{Options, PolicyShape, Verb, analyze};
use kubectl_vap::load::cel::default_options;
use kubectl_vap::snapshot::Snapshot;
use serde_json::{Value, json};
use support::objects::*;

fn codes(s: &Snapshot) -> Vec<Code> {
    codes_with(s, &default_options())
}

fn codes_with(s: &Snapshot, opts: &Options) -> Vec<Code> {
    let mut c: Vec<Code> = analyze(s, opts).findings.iter().map(|f| f.code).collect();
    c.sort();
    c
}

/// A constraint's spec naming ConfigMaps: one that names no kinds is a finding of its own
/// (`constraint-matches-everything`).
fn configmaps() -> Value {
    json!({"match": {"kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}]}, "parameters": {"labels": ["owner"]}})
}

fn base() -> Vec<Value> {
    vec![
        template("k8sx", "K8sX", cel_source(Some(true))),
        constraint("K8sX", "a", configmaps()),
    ]
}

#[test]
fn a_constraint_of_every_kind_under_a_fail_closed_policy_is_a_warning() {
    let mut objs = converged(base());
    replace(&mut objs, "a", |c| {
        c["spec"] = json!({"parameters": {"labels": ["owner"]}})
    });
    let s = snapshot(objs.clone());
    let a = analyze(&s, &default_options());
    let f: Vec<_> = a
        .findings
        .iter()
        .filter(|f| f.code == Code::ConstraintMatchesEverything)
        .collect();
    assert_eq!(f.len(), 1, "{:#?}", a.findings);
    assert!(
        f[0].message.contains("failurePolicy: Ignore"),
        "{}",
        f[0].message
    );
    // Under failurePolicy: Ignore nothing is refused at bootstrap: no warning.
    replace(&mut objs, "k8sx", |t| {
        t["spec"]["targets"][0]["code"][0]["source"]["failurePolicy"] = json!("Ignore")
    });
    assert!(!codes(&snapshot(objs)).contains(&Code::ConstraintMatchesEverything));
    // Nor in Gatekeeper's shape, where every binding matches everything anyway.
    let gatekeeper = Options {
        policy_shape: PolicyShape::Gatekeeper,
        ..default_options()
    };
    assert!(!codes_with(&s, &gatekeeper).contains(&Code::ConstraintMatchesEverything));
}

/// The objects the plan would create, as the API server would return them (defaults filled,
/// uid and resourceVersion set): what a converged cluster holds.
fn converged(objects: Vec<Value>) -> Vec<Value> {
    converged_in(objects, &default_options())
}

/// [`converged`] under `opts`.
fn converged_in(objects: Vec<Value>, opts: &Options) -> Vec<Value> {
    let s = snapshot(objects.clone());
    let mut out = objects;
    for (i, w) in analyze(&s, opts).plan.into_iter().enumerate() {
        assert_eq!(w.verb, Verb::Create);
        let mut body = w.body.expect("creates carry a body");
        body["metadata"]["uid"] = json!(format!("uid-{i}"));
        body["metadata"]["resourceVersion"] = json!("1");
        // Server defaults written back explicitly, as a GET returns them: an absent selector
        // comes back empty (the inline shape's binding has a namespaceSelector of its own).
        if body["kind"] == "ValidatingAdmissionPolicyBinding" {
            let resources = &mut body["spec"]["matchResources"];
            for selector in ["objectSelector", "namespaceSelector"] {
                if resources[selector].is_null() {
                    resources[selector] = json!({});
                }
            }
        }
        out.push(body);
    }
    out
}

fn replace(objects: &mut [Value], name: &str, f: impl Fn(&mut Value)) {
    let o = objects
        .iter_mut()
        .find(|o| o["metadata"]["name"] == name)
        .expect("object present");
    f(o);
}

/// The plan's writes as (verb, kind), in order.
fn order(plan: &[kubectl_vap::core::PlannedWrite]) -> Vec<(&str, &str)> {
    plan.iter()
        .map(|w| (w.verb.as_str(), w.object.kind.as_str()))
        .collect()
}

#[test]
fn converged_cluster_has_no_findings_and_no_writes() {
    let s = snapshot(converged(base()));
    let a = analyze(&s, &default_options());
    assert!(a.findings.is_empty(), "{:#?}", a.findings);
    assert!(a.plan.is_empty(), "{:#?}", a.plan);
}

/// Issue 39: a constraint kind whose name ends in `List` is a constraint kind like any other
/// (it was taken for a list type: its objects called dangling, their deletion planned).
#[test]
fn a_constraint_kind_named_like_a_list_is_a_constraint_kind() {
    let objects = vec![
        template("k8sallowlist", "K8sAllowList", cel_source(Some(true))),
        constraint("K8sAllowList", "a", configmaps()),
    ];
    let s = snapshot(objects.clone());
    assert_eq!(s.constraints.len(), 1, "read as a constraint");
    let a = analyze(&snapshot(converged(objects)), &default_options());
    assert!(a.findings.is_empty(), "{:#?}", a.findings);
    assert!(a.plan.is_empty(), "{:#?}", a.plan);
}

#[test]
fn missing_policy_and_binding_are_created_policy_first() {
    let a = analyze(&snapshot(base()), &default_options());
    assert_eq!(
        codes(&snapshot(base())),
        vec![Code::PolicyMissing, Code::BindingMissing]
    );
    assert_eq!(
        order(&a.plan),
        vec![
            ("create", "ValidatingAdmissionPolicy"),
            ("create", "ValidatingAdmissionPolicyBinding")
        ]
    );
}

#[test]
fn out_of_sync_objects_are_updated_once_with_their_resource_version() {
    let mut objs = converged(base());
    replace(&mut objs, &inline_policy_name("K8sX", "a"), |p| {
        p["spec"]["failurePolicy"] = json!("Ignore")
    });
    replace(&mut objs, "gatekeeper-k8sx-a", |b| {
        b["spec"]["validationActions"] = json!(["Warn"])
    });
    let s = snapshot(objs);
    assert_eq!(
        codes(&s),
        vec![Code::PolicyOutOfSync, Code::BindingOutOfSync]
    );
    let plan = analyze(&s, &default_options()).plan;
    assert_eq!(plan.len(), 2);
    assert!(
        plan.iter()
            .all(|w| w.verb == Verb::Update && w.resource_version.as_deref() == Some("1"))
    );
    assert!(
        plan[0].diff.contains("-  failurePolicy: Ignore")
            && plan[0].diff.contains("+  failurePolicy: Fail"),
        "{}",
        plan[0].diff
    );
}

#[test]
fn turning_generation_off_deletes_bindings_before_the_policy() {
    let mut objs = converged(base());
    replace(&mut objs, "k8sx", |t| {
        t["spec"]["targets"][0]["code"][0]["source"]["generateVAP"] = json!(false)
    });
    let s = snapshot(objs);
    assert_eq!(codes(&s), vec![Code::PolicyDangling, Code::BindingDangling]);
    let plan = analyze(&s, &default_options()).plan;
    assert_eq!(
        order(&plan),
        vec![
            ("delete", "ValidatingAdmissionPolicyBinding"),
            ("delete", "ValidatingAdmissionPolicy")
        ]
    );
    assert!(
        plan.iter().all(|w| w.uid.is_some()),
        "deletes carry a uid precondition"
    );
}

#[test]
fn gone_owners_and_legacy_names_dangle() {
    let mut objs = converged(base());
    let legacy = {
        let mut b = objs
            .iter()
            .find(|o| o["metadata"]["name"] == "gatekeeper-k8sx-a")
            .expect("binding")
            .clone();
        b["metadata"]["name"] = json!("gatekeeper-a");
        b
    };
    objs.push(legacy);
    let s = snapshot(objs.clone());
    assert_eq!(codes(&s), vec![Code::BindingDangling]);
    // Constraint and template deleted: everything they controlled dangles.
    objs.retain(|o| o["kind"] != "K8sX" && o["kind"] != "ConstraintTemplate");
    let s = snapshot(objs);
    assert_eq!(
        codes(&s),
        vec![
            Code::PolicyDangling,
            Code::BindingDangling,
            Code::BindingDangling
        ]
    );
}

#[test]
fn foreign_objects_are_reported_and_never_written() {
    let mut objs = converged(base());
    for name in [inline_policy_name("K8sX", "a"), binding_name("K8sX", "a")] {
        replace(&mut objs, &name, |o| {
            o["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "someone", "uid": "x", "controller": true}]);
            o["spec"]["failurePolicy"] = json!("Ignore");
        });
    }
    let s = snapshot(objs);
    assert_eq!(codes(&s), vec![Code::PolicyForeign, Code::BindingForeign]);
    assert!(analyze(&s, &default_options()).plan.is_empty());
}

#[test]
fn an_unlabelled_object_without_controller_is_foreign_not_ours() {
    let mut objs = converged(base());
    replace(&mut objs, "gatekeeper-k8sx-a", |o| {
        unset(&mut o["metadata"], "ownerReferences");
    });
    assert_eq!(codes(&snapshot(objs)), vec![Code::BindingForeign]);
}

#[test]
fn a_recreated_owner_is_adopted_with_one_update() {
    let mut objs = converged(base());
    replace(&mut objs, "a", |c| {
        c["metadata"]["uid"] = json!("uid-c-a-recreated")
    });
    let s = snapshot(objs);
    let a = analyze(&s, &default_options());
    // The constraint controls its own VAP (the default shape's, inline) and its binding: each
    // is adopted with one update.
    assert_eq!(
        codes(&s),
        vec![Code::PolicyOutOfSync, Code::BindingOutOfSync]
    );
    assert_eq!(a.plan.len(), 2, "{:#?}", a.plan);
    for w in &a.plan {
        assert_eq!(w.verb, Verb::Update);
        let body = w.body.as_ref().expect("body");
        assert_eq!(
            body["metadata"]["ownerReferences"][0]["uid"],
            "uid-c-a-recreated"
        );
    }
}

#[test]
fn gatekeeper_written_objects_are_judged_on_intent() {
    // About the template's VAP Gatekeeper writes and the narrowed shape's judgement of it: one
    // VAP per template, so the narrowed shape by name (the default's would be the constraint's).
    let narrowed = narrowed_options();
    let mut objs = converged_in(base(), &narrowed);
    // As Gatekeeper writes them: no label, its own CEL text, no explicit defaults.
    replace(&mut objs, "gatekeeper-k8sx", |p| {
        unset(&mut p["metadata"], "labels");
        for m in p["spec"]["matchConditions"]
            .as_array_mut()
            .expect("conditions")
        {
            m["expression"] = json!("true /* gatekeeper's text */");
        }
        p["spec"]["variables"][0]["expression"] = json!("object");
        p["spec"]["matchConstraints"] = json!({"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["CREATE", "UPDATE"]}]});
    });
    replace(&mut objs, "gatekeeper-k8sx-a", |b| {
        unset(&mut b["metadata"], "labels");
        b["spec"]["matchResources"] = json!({});
    });
    let s = snapshot(objs.clone());
    let gatekeeper = Options {
        policy_shape: PolicyShape::Gatekeeper,
        ..default_options()
    };
    assert_eq!(codes_with(&s, &gatekeeper), Vec::<Code>::new());
    // The narrowed shape rewrites both once: what they match is what it changes.
    assert_eq!(
        codes_with(&s, &narrowed),
        vec![Code::PolicyOutOfSync, Code::BindingOutOfSync]
    );
    let objs_narrowed: Vec<_> = analyze(&s, &narrowed)
        .plan
        .iter()
        .map(|w| w.object.name.clone())
        .collect();
    assert_eq!(objs_narrowed, vec!["gatekeeper-k8sx", "gatekeeper-k8sx-a"]);
    // But a changed validation or a missing matcher is a real difference.
    replace(&mut objs, "gatekeeper-k8sx", |p| {
        p["spec"]["matchConditions"]
            .as_array_mut()
            .expect("conditions")
            .pop();
    });
    assert_eq!(
        codes_with(&snapshot(objs), &gatekeeper),
        vec![Code::PolicyOutOfSync]
    );
}

#[test]
fn template_and_constraint_errors_freeze_what_exists() {
    let mut objs = converged(base());
    replace(&mut objs, "k8sx", |t| {
        t["spec"]["targets"][0]["code"][0]["source"]["failurePolicy"] = json!("Maybe")
    });
    let s = snapshot(objs.clone());
    assert_eq!(codes(&s), vec![Code::TemplateError]);
    assert!(
        analyze(&s, &default_options()).plan.is_empty(),
        "an invalid template deletes nothing"
    );

    let mut objs = converged(base());
    replace(&mut objs, "a", |c| {
        c["spec"]["enforcementAction"] = json!("block")
    });
    let s = snapshot(objs);
    assert_eq!(codes(&s), vec![Code::ConstraintError]);
    assert!(analyze(&s, &default_options()).plan.is_empty());
}

/// A stub of an object the cluster layer could not decode (its spec gone, `UNDECODABLE`
/// saying why) is an error of that object, which freezes what exists: its binding, or its
/// template's VAP and bindings, stay; nothing else is touched.
#[test]
fn an_undecodable_object_is_a_finding_on_itself_and_freezes_what_exists() {
    let undecodable = kubectl_vap::model::UNDECODABLE;
    let why = "it nests deeper than the 128 levels a JSON decoder here accepts";
    let mut objs = converged(base());
    replace(&mut objs, "a", |c| {
        c["spec"] = json!({});
        c[undecodable] = json!(why);
    });
    let s = snapshot(objs);
    let a = analyze(&s, &default_options());
    assert_eq!(codes(&s), vec![Code::ConstraintError]);
    assert!(
        a.findings[0].message.contains("cannot be decoded") && a.findings[0].message.contains(why),
        "{:?}",
        a.findings
    );
    assert!(a.plan.is_empty(), "its binding stays: {:?}", a.plan);

    let mut objs = converged(base());
    replace(&mut objs, "k8sx", |t| {
        t["spec"] = json!({ "crd": { "spec": { "names": { "kind": "K8sX" } } } });
        t[undecodable] = json!(why);
    });
    let s = snapshot(objs);
    assert_eq!(codes(&s), vec![Code::TemplateError]);
    assert!(analyze(&s, &default_options()).plan.is_empty());
}

#[test]
fn orphan_constraints_and_waiting_bindings_are_info() {
    let mut objs = base();
    objs.push(constraint("K8sNoTemplate", "lost", json!({})));
    objs.push(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "k8sx.constraints.gatekeeper.sh"},
        "spec": {"group": "constraints.gatekeeper.sh", "names": {"kind": "K8sX"}},
        "status": {"conditions": [{"type": "Established", "status": "True", "lastTransitionTime": chrono::Utc::now().to_rfc3339()}]}
    }));
    let s = snapshot(objs);
    // The binding wait is the narrowed shape's (a paramKind to be discovered; an inline
    // binding is written right after its VAP): that shape by name.
    let a = analyze(&s, &narrowed_options());
    let got: Vec<(Code, &str)> = a
        .findings
        .iter()
        .map(|f| (f.code, f.severity.as_str()))
        .collect();
    assert!(got.contains(&(Code::BindingWaiting, "info")), "{got:?}");
    assert!(got.contains(&(Code::ConstraintOrphan, "info")), "{got:?}");
    assert!(
        a.plan
            .iter()
            .all(|w| w.object.kind != "ValidatingAdmissionPolicyBinding"),
        "no binding within --binding-wait"
    );
    let no_wait = Options {
        binding_wait: std::time::Duration::ZERO,
        ..narrowed_options()
    };
    assert!(
        analyze(&s, &no_wait)
            .plan
            .iter()
            .any(|w| w.object.kind == "ValidatingAdmissionPolicyBinding")
    );
}

/// The core never reads the clock: the same CRD, established a moment ago, makes the binding
/// wait against the snapshot's clock, and counts as long established without one.
#[test]
fn the_binding_wait_is_measured_against_the_snapshot_clock_only() {
    let mut objs = base();
    objs.push(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "k8sx.constraints.gatekeeper.sh"},
        "spec": {"group": "constraints.gatekeeper.sh", "names": {"kind": "K8sX"}},
        "status": {"conditions": [{"type": "Established", "status": "True", "lastTransitionTime": chrono::Utc::now().to_rfc3339()}]}
    }));
    // The binding wait is the narrowed shape's (an inline binding does not wait): that shape.
    let binding_writes = |s: &Snapshot| {
        analyze(s, &narrowed_options())
            .plan
            .iter()
            .filter(|w| w.object.kind == "ValidatingAdmissionPolicyBinding")
            .count()
    };
    let mut s = snapshot(objs);
    assert!(s.now.is_some());
    assert_eq!(binding_writes(&s), 0, "within --binding-wait of the clock");
    s.now = None;
    assert!(
        binding_writes(&s) > 0,
        "no clock: the wait counts as elapsed"
    );
}

#[test]
fn every_code_has_a_title_and_a_stable_name() {
    let names: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(names.len(), 28);
    for c in Code::ALL {
        assert!(!c.title().is_empty());
        assert_eq!(
            serde_json::to_value(c).expect("serializes"),
            json!(c.as_str())
        );
    }
}

#[test]
fn a_foreign_policy_keeps_the_kinds_bindings_waiting() {
    // The kind's one VAP is the narrowed shape's (an inline constraint's own foreign VAP:
    // tests/core_inline.rs): that shape by name.
    let narrowed = narrowed_options();
    let mut objs = converged_in(base(), &narrowed);
    objs.retain(|o| o["metadata"]["name"] != "gatekeeper-k8sx-a");
    replace(&mut objs, "gatekeeper-k8sx", |o| {
        o["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "someone", "uid": "x", "controller": true}]);
    });
    let s = snapshot(objs);
    assert_eq!(
        codes_with(&s, &narrowed),
        vec![Code::PolicyForeign, Code::BindingWaiting]
    );
    assert!(
        analyze(&s, &narrowed).plan.is_empty(),
        "I1: no binding without our policy"
    );
}

#[test]
fn what_cannot_be_read_proves_nothing() {
    // Bindings unreadable (403): no binding-missing, no creates. In the default shape the
    // constraint's own VAP is written only with its binding known (as the reconciler does):
    // nothing at all.
    let mut s = snapshot(base());
    s.unreadable
        .insert("validatingadmissionpolicybindings.admissionregistration.k8s.io".into());
    assert_eq!(codes(&s), Vec::<Code>::new());
    assert!(analyze(&s, &default_options()).plan.is_empty());
    // The narrowed shape's VAP is the template's, which rests on no binding: it is created.
    let narrowed = narrowed_options();
    assert_eq!(codes_with(&s, &narrowed), vec![Code::PolicyMissing]);
    let a = analyze(&s, &narrowed);
    assert!(
        !a.plan.is_empty()
            && a.plan
                .iter()
                .all(|w| w.object.kind == "ValidatingAdmissionPolicy")
    );
    let attached: usize = a
        .tree
        .iter()
        .flat_map(|n| n.walk())
        .map(|n| n.findings.len())
        .sum();
    assert_eq!(attached, a.findings.len(), "tree indices stay valid");

    // A constraint kind unreadable: its bindings and inline VAPs are not dangling, and never
    // deleted.
    let mut objs = converged(base());
    objs.retain(|o| o["kind"] != "K8sX");
    let mut s = snapshot(objs);
    assert_eq!(
        codes(&s),
        vec![Code::PolicyDangling, Code::BindingDangling],
        "readable: the constraint is gone, and with it its own VAP and binding"
    );
    s.unreadable.insert("k8sx.constraints.gatekeeper.sh".into());
    assert_eq!(codes(&s), Vec::<Code>::new());
    assert!(analyze(&s, &default_options()).plan.is_empty());

    // Templates unreadable: nothing dangles, nothing is deleted.
    let mut objs = converged(base());
    objs.retain(|o| o["kind"] != "ConstraintTemplate");
    let mut s = snapshot(objs);
    s.unreadable
        .insert("constrainttemplates.templates.gatekeeper.sh".into());
    assert_eq!(codes(&s), Vec::<Code>::new());
    assert!(analyze(&s, &default_options()).plan.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Constraint CRDs
// ---------------------------------------------------------------------------------------------

/// Another group's CRD: the input holds CRDs, so the constraint CRDs are checked.
fn other_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "widgets.example.com" },
        "spec": { "group": "example.com", "names": { "kind": "Widget", "plural": "widgets" }, "scope": "Cluster" }
    })
}

/// The CRD the template of `base()` defines, as the server returns it (Established).
fn desired_crd() -> Value {
    let s = snapshot(base());
    let t = &s.templates[0];
    let mut crd = kubectl_vap::core::crd::desired_crd(t, "K8sX").expect("crd");
    crd["metadata"]["uid"] = json!("uid-crd");
    crd["metadata"]["resourceVersion"] = json!("5");
    crd["status"] = json!({ "conditions": [{ "type": "Established", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z" }] });
    crd
}

fn crd_codes(objects: Vec<Value>) -> (Vec<Code>, Vec<(String, String)>) {
    let s = snapshot(objects);
    let a = analyze(&s, &default_options());
    let mut codes: Vec<Code> = a
        .findings
        .iter()
        .map(|f| f.code)
        .filter(|c| c.as_str().starts_with("crd-"))
        .collect();
    codes.sort();
    let writes = a
        .plan
        .iter()
        .filter(|w| w.object.kind == "CustomResourceDefinition")
        .map(|w| (w.verb.as_str().to_string(), w.object.name.clone()))
        .collect();
    (codes, writes)
}

/// Removes `key` from the object `o`.
fn unset(o: &mut Value, key: &str) {
    o.as_object_mut().expect("an object").remove(key);
}

/// No CRD finding and no CRD write for `objects`.
fn assert_crds_untouched(objects: Vec<Value>) {
    let (codes, writes) = crd_codes(objects);
    assert!(
        codes.is_empty() && writes.is_empty(),
        "{codes:?} {writes:?}"
    );
}

#[test]
fn files_without_crds_are_not_missing_crds() {
    assert_crds_untouched(base());
}

#[test]
fn a_missing_crd_is_created_before_anything_else() {
    let mut objs = base();
    objs.push(other_crd());
    let a = analyze(&snapshot(objs.clone()), &default_options());
    assert_eq!(a.plan[0].object.kind, "CustomResourceDefinition");
    assert_eq!(a.plan[0].verb, Verb::Create);
    assert_eq!(a.plan[0].object.name, "k8sx.constraints.gatekeeper.sh");
    assert_eq!(a.plan[1].object.kind, "ValidatingAdmissionPolicy");
    assert_eq!(
        crd_codes(objs).0,
        vec![Code::CrdMissing],
        "a Rego-only template needs its CRD as much as a CEL one"
    );
}

#[test]
fn a_crd_that_matches_is_in_sync_whoever_wrote_it() {
    let mut ours = converged(base());
    ours.push(desired_crd());
    assert_eq!(crd_codes(ours.clone()), (vec![], vec![]));
    // Gatekeeper writes no managed-by label; an ownerless CRD is adopted without a write.
    let mut gk = converged(base());
    let mut crd = desired_crd();
    crd["metadata"]["labels"] = json!({ "gatekeeper.sh/constraint": "yes" });
    gk.push(crd.clone());
    assert_eq!(crd_codes(gk.clone()), (vec![], vec![]));
    unset(&mut crd["metadata"], "ownerReferences");
    let mut ownerless = converged(base());
    ownerless.push(crd);
    assert_eq!(crd_codes(ownerless), (vec![], vec![]));
}

#[test]
fn a_crd_that_differs_is_updated_once_and_adopted() {
    let mut objs = converged(base());
    let mut crd = desired_crd();
    unset(&mut crd["metadata"], "ownerReferences");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["parameters"] =
        json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true });
    objs.push(crd);
    let s = snapshot(objs.clone());
    let a = analyze(&s, &default_options());
    let w = a
        .plan
        .iter()
        .find(|w| w.object.kind == "CustomResourceDefinition")
        .expect("a CRD write");
    assert_eq!(w.verb, Verb::Update);
    assert_eq!(w.resource_version.as_deref(), Some("5"));
    let body = w.body.as_ref().expect("body");
    assert_eq!(body["metadata"]["ownerReferences"][0]["name"], "k8sx");
    assert_eq!(body["metadata"]["ownerReferences"][0]["controller"], true);
    assert!(w.diff.contains("parameters"), "{}", w.diff);
    assert_eq!(crd_codes(objs).0, vec![Code::CrdOutOfSync]);
}

#[test]
fn a_foreign_crd_and_an_orphan_crd_are_reported_never_written() {
    let mut objs = converged(base());
    let mut crd = desired_crd();
    crd["metadata"]["ownerReferences"] = json!([{ "apiVersion": "apps/v1", "kind": "Deployment", "name": "op", "uid": "d", "controller": true }]);
    crd["spec"]["scope"] = json!("Namespaced");
    objs.push(crd);
    // The CRD of a template that is gone.
    let mut orphan = desired_crd();
    let text = orphan
        .to_string()
        .replace("K8sX", "K8sGone")
        .replace("k8sx", "k8sgone");
    orphan = serde_json::from_str(&text).expect("json");
    objs.push(orphan);
    let (codes, writes) = crd_codes(objs);
    assert_eq!(codes, vec![Code::CrdOrphan, Code::CrdForeign]);
    assert!(
        writes.is_empty(),
        "never written, never deleted: {writes:?}"
    );
}

#[test]
fn an_invalid_template_freezes_its_crd() {
    let mut objs = vec![
        template(
            "k8sx",
            "K8sX",
            json!({ "failurePolicy": "Sometimes", "validations": [{ "expression": "true" }] }),
        ),
        constraint("K8sX", "a", json!({})),
    ];
    let mut crd = desired_crd();
    crd["spec"]["scope"] = json!("Namespaced");
    objs.push(crd);
    assert_crds_untouched(objs);
}

#[test]
fn unreadable_crds_prove_nothing() {
    let mut objs = base();
    objs.push(other_crd());
    let mut s = snapshot(objs);
    s.unreadable
        .insert("customresourcedefinitions.apiextensions.k8s.io".into());
    let a = analyze(&s, &default_options());
    assert!(
        a.findings
            .iter()
            .all(|f| !f.code.as_str().starts_with("crd-")),
        "{:#?}",
        a.findings
    );
    assert!(
        a.plan
            .iter()
            .all(|w| w.object.kind != "CustomResourceDefinition")
    );
}

/// The type checker's warnings (kube-controller-manager's), as it writes them into a VAP's
/// status (the same shape in v1 and v1beta1), about the object's current generation.
fn with_type_warning(vap: &mut Value, api_version: &str) {
    vap["apiVersion"] = json!(api_version);
    vap["metadata"]["generation"] = json!(1);
    vap["status"] = json!({
        "observedGeneration": 1,
        "typeChecking": {"expressionWarnings": [{
            "fieldRef": "spec.validations[0].expression",
            "warning": "/v1, Kind=ConfigMap: ERROR: <input>:1:7: undefined field 'nosuchfield'\n | object.nosuchfield == 'x'\n | ......^"
        }]}
    });
}

/// Issue 38: a VAP of ours whose expressions the type checker warns about is a
/// warning naming the VAP, its template (and its constraint, for an inline VAP), the
/// expression and the checker's words; without them, none. Status never plans a write.
#[test]
fn the_type_checkers_warnings_on_our_vap_are_a_finding_and_never_a_write() {
    for shape in [PolicyShape::Narrowed, PolicyShape::Inline] {
        let opts = Options {
            policy_shape: shape,
            ..default_options()
        };
        let s = snapshot(base());
        let mut objs = base();
        for (i, w) in analyze(&s, &opts).plan.into_iter().enumerate() {
            let mut body = w.body.expect("creates carry a body");
            body["metadata"]["uid"] = json!(format!("uid-{i}"));
            body["metadata"]["resourceVersion"] = json!("1");
            objs.push(body);
        }
        let clean = analyze(&snapshot(objs.clone()), &opts);
        assert!(
            clean.findings.is_empty(),
            "{shape:?}: {:#?}",
            clean.findings
        );
        let vap = objs
            .iter()
            .position(|o| o["kind"] == "ValidatingAdmissionPolicy")
            .expect("a VAP");
        let name = objs[vap]["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_string();
        for version in [
            "admissionregistration.k8s.io/v1",
            "admissionregistration.k8s.io/v1beta1",
        ] {
            with_type_warning(&mut objs[vap], version);
            let a = analyze(&snapshot(objs.clone()), &opts);
            assert!(a.plan.is_empty(), "{shape:?} {version}: {:#?}", a.plan);
            assert_eq!(
                a.findings.len(),
                1,
                "{shape:?} {version}: {:#?}",
                a.findings
            );
            let f = &a.findings[0];
            assert_eq!(f.code, Code::PolicyTypeWarning);
            assert_eq!(f.code.as_str(), "policy-type-warning");
            assert_eq!(f.severity.as_str(), "warning");
            assert_eq!(f.object.kind, "ValidatingAdmissionPolicy");
            assert_eq!(f.object.name, name);
            assert!(
                f.related
                    .iter()
                    .any(|r| r.kind == "ConstraintTemplate" && r.name == "k8sx"),
                "{f:#?}"
            );
            for words in [
                "template k8sx",
                "spec.validations[0].expression",
                "undefined field 'nosuchfield'",
            ] {
                assert!(f.message.contains(words), "{words}: {}", f.message);
            }
            // The checker's excerpt and caret are left out: one line.
            assert!(!f.message.contains('\n'), "{}", f.message);
            if shape == PolicyShape::Inline {
                assert!(f.message.contains("constraint K8sX a"), "{}", f.message);
                assert!(
                    f.related.iter().any(|r| r.kind == "K8sX" && r.name == "a"),
                    "{f:#?}"
                );
            }
            // The finding marks the VAP's node in the tree (the TUI's mark).
            let marked = nodes(&a.tree)
                .into_iter()
                .find(|n| n.object.as_ref().is_some_and(|o| o == &f.object))
                .expect("the VAP's node");
            assert_eq!(marked.findings, vec![0], "{shape:?}");
        }
        // Warnings about an older generation are about a spec that is no longer there.
        objs[vap]["metadata"]["generation"] = json!(2);
        let a = analyze(&snapshot(objs.clone()), &opts);
        assert!(a.findings.is_empty(), "{shape:?}: {:#?}", a.findings);
        // Status never makes a write, whatever it holds: a VAP out of sync is updated for
        // its spec, and its update carries no status.
        objs[vap]["metadata"]["generation"] = json!(1);
        objs[vap]["spec"]["failurePolicy"] = json!("Ignore");
        let a = analyze(&snapshot(objs.clone()), &opts);
        assert_eq!(
            order(&a.plan),
            vec![("update", "ValidatingAdmissionPolicy")]
        );
        let body = a.plan[0].body.as_ref().expect("an update carries a body");
        assert!(body.get("status").is_none(), "{body:#}");
        let mut got: Vec<Code> = a.findings.iter().map(|f| f.code).collect();
        got.sort();
        assert_eq!(got, vec![Code::PolicyOutOfSync, Code::PolicyTypeWarning]);
    }
}

/// A VAP that is not ours says nothing of its checker's warnings (another controller's
/// problem); nor does one of ours that goes.
#[test]
fn type_checking_warnings_on_a_vap_not_ours_or_going_are_not_findings() {
    let mut objs = converged(base());
    let name = objs
        .iter()
        .find(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .and_then(|o| o["metadata"]["name"].as_str())
        .expect("a VAP")
        .to_string();
    replace(&mut objs, &name, |v| {
        with_type_warning(v, "admissionregistration.k8s.io/v1")
    });
    let mut foreign = objs.clone();
    replace(&mut foreign, &name, |v| {
        v["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "someone", "uid": "x", "controller": true}]);
    });
    assert!(!codes(&snapshot(foreign)).contains(&Code::PolicyTypeWarning));
    // The template stops generating: its VAP goes, and the warning with it.
    replace(&mut objs, "k8sx", |t| {
        t["spec"]["targets"][0]["code"][0]["source"]["generateVAP"] = json!(false)
    });
    let got = codes(&snapshot(objs));
    assert!(!got.contains(&Code::PolicyTypeWarning), "{got:?}");
    assert!(got.contains(&Code::PolicyDangling), "{got:?}");
}

fn nodes(tree: &[kubectl_vap::core::tree::Node]) -> Vec<&kubectl_vap::core::tree::Node> {
    let mut out = Vec::new();
    for n in tree {
        out.push(n);
        out.extend(nodes(&n.children));
    }
    out
}
