//! The inline shape (`--policy-shape inline`, issue 29), offline: a constraint's own VAP with
//! its parameters and `spec.match` written into the CEL, how `plan` moves a cluster into and
//! out of it (each object written once, in the invariants' order, then nothing), and the
//! parameters' literal read back by a CEL interpreter equal to the JSON it was built from.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use kubectl_vap::core::cel_literal::{self, LiteralError, MAX_CODE_POINTS};
use kubectl_vap::core::decide::decide_template;
use kubectl_vap::core::desired::{self, BindingDecision, CrdState, Opinion};
use kubectl_vap::core::{Code, Options, PolicyShape, Verb, analyze};
use kubectl_vap::load::cel::default_options;
use kubectl_vap::model::served::Served;
use kubectl_vap::model::{Constraint, Source};
use proptest::prelude::*;
use serde_json::{Value, json};
use support::objects::*;

fn inline() -> Options {
    Options {
        policy_shape: PolicyShape::Inline,
        ..default_options()
    }
}

fn narrowed() -> Options {
    narrowed_options()
}

/// The parameters a careless generator would turn into CEL of their own.
fn hostile_parameters() -> Value {
    json!({
        "labels": ["owner", "a\"b", "back\\slash", "line\nbreak", "\") || true || (\"", "é€😀"],
        "message": "it's \"quoted\"",
        "limits": {"cpu": 2, "ratio": 0.5, "huge": 1e300, "flag": true, "none": null},
        "nested": [[1, "x"], {"k": []}],
    })
}

fn template_and_constraint(params: Value) -> Vec<Value> {
    vec![
        template("k8sx", "K8sX", cel_source(Some(true))),
        constraint(
            "K8sX",
            "a",
            json!({
                "match": {"kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}],
                          "namespaces": ["team-a", "team-*"], "excludedNamespaces": ["team-x"],
                          "name": "cm-*"},
                "parameters": params
            }),
        ),
    ]
}

/// Objects as the API server returns them after the plan's writes: creates added (with a uid),
/// updates replace, deletes remove; and every constraint CRD Established.
fn apply_plan(mut objects: Vec<Value>, opts: &Options) -> Vec<Value> {
    let plan = analyze(&snapshot(objects.clone()), opts).plan;
    for (i, w) in plan.into_iter().enumerate() {
        let same = |o: &Value| o["kind"] == w.object.kind && o["metadata"]["name"] == w.object.name;
        match w.verb {
            Verb::Delete => objects.retain(|o| !same(o)),
            Verb::Create | Verb::Update => {
                let mut body = w.body.expect("a body");
                body["metadata"]["uid"] = json!(format!("uid-{}-{i}", w.object.name));
                body["metadata"]["resourceVersion"] = json!("1");
                objects.retain(|o| !same(o));
                objects.push(body);
            }
        }
    }
    let t = &snapshot(objects.clone()).templates[0];
    if !objects
        .iter()
        .any(|o| o["kind"] == "CustomResourceDefinition")
    {
        let mut crd = kubectl_vap::core::crd::desired_crd(t, "K8sX").expect("crd");
        crd["metadata"]["uid"] = json!("uid-crd");
        crd["status"] = json!({ "conditions": [{ "type": "Established", "status": "True",
            "lastTransitionTime": "2026-01-01T00:00:00Z" }] });
        objects.push(crd);
    }
    objects
}

/// The plan as `verb kind/name` lines.
fn plan_lines(objects: &[Value], opts: &Options) -> Vec<String> {
    analyze(&snapshot(objects.to_vec()), opts)
        .plan
        .iter()
        .map(|w| format!("{:?} {}/{}", w.verb, w.object.kind, w.object.name))
        .collect()
}

#[test]
fn golden_inline_policy_and_binding() {
    let objects = template_and_constraint(hostile_parameters());
    let s = snapshot(objects);
    let opts = inline();
    let c = &s.constraints[0];
    let verdict = decide_template(&s.templates[0], &opts);
    let opinion = Opinion::of(
        &s.templates[0],
        &verdict,
        true,
        Default::default(),
        PolicyShape::Inline,
    );
    let decision = desired::binding_decision(
        c,
        Some(&opinion),
        // The binding wait is for a paramKind's discovery: an inline VAP has none.
        CrdState::Established(Some(chrono::Utc::now())),
        &opts,
        &Served::builtin(),
        chrono::Utc::now(),
    );
    let BindingDecision::Want {
        binding,
        policy: Some(policy),
    } = decision
    else {
        panic!("wants its binding and its VAP: {decision:?}")
    };
    let spec = policy.spec.as_ref().expect("spec");
    assert_eq!(spec.param_kind, None, "nothing to sync after a restart");
    let b = binding.spec.as_ref().expect("spec");
    assert_eq!(b.param_ref, None);
    assert_eq!(
        b.policy_name.as_deref(),
        Some("gatekeeper-k8sx.a"),
        "the binding names the constraint's own VAP"
    );
    insta::assert_yaml_snapshot!("inline_policy", policy);
    insta::assert_yaml_snapshot!("inline_binding", binding);
}

#[test]
fn plan_moves_a_cluster_into_the_inline_shape_and_back_each_object_once_in_order() {
    let narrowed_cluster = apply_plan(
        template_and_constraint(json!({"labels": ["owner"]})),
        &narrowed(),
    );
    assert_eq!(
        plan_lines(&narrowed_cluster, &narrowed()),
        Vec::<String>::new()
    );
    // Into inline: the constraint's VAP first (I1), its binding repointed, then the
    // template's VAP, which no binding points at any more.
    assert_eq!(
        plan_lines(&narrowed_cluster, &inline()),
        [
            "Create ValidatingAdmissionPolicy/gatekeeper-k8sx.a",
            "Update ValidatingAdmissionPolicyBinding/gatekeeper-k8sx-a",
            "Delete ValidatingAdmissionPolicy/gatekeeper-k8sx",
        ]
    );
    let inline_cluster = apply_plan(narrowed_cluster, &inline());
    assert_eq!(
        plan_lines(&inline_cluster, &inline()),
        Vec::<String>::new(),
        "then nothing"
    );
    let a = analyze(&snapshot(inline_cluster.clone()), &inline());
    assert!(a.findings.is_empty(), "{:?}", a.findings);
    // And back: the template's VAP first, the binding repointed, the constraint's VAP last.
    assert_eq!(
        plan_lines(&inline_cluster, &narrowed()),
        [
            "Create ValidatingAdmissionPolicy/gatekeeper-k8sx",
            "Update ValidatingAdmissionPolicyBinding/gatekeeper-k8sx-a",
            "Delete ValidatingAdmissionPolicy/gatekeeper-k8sx.a",
        ]
    );
    let back = apply_plan(inline_cluster, &narrowed());
    assert_eq!(plan_lines(&back, &narrowed()), Vec::<String>::new());
}

#[test]
fn a_gone_constraints_vap_goes_after_its_binding_and_a_foreign_one_blocks_the_binding() {
    let cluster = apply_plan(
        template_and_constraint(json!({"labels": ["owner"]})),
        &inline(),
    );
    let without: Vec<Value> = cluster
        .iter()
        .filter(|o| o["kind"] != "K8sX")
        .cloned()
        .collect();
    assert_eq!(
        plan_lines(&without, &inline()),
        [
            "Delete ValidatingAdmissionPolicyBinding/gatekeeper-k8sx-a",
            "Delete ValidatingAdmissionPolicy/gatekeeper-k8sx.a",
        ]
    );
    // Another controller holds the VAP's name: left alone, and no binding rests on it.
    let theirs: Vec<Value> = cluster
        .into_iter()
        .filter(|o| o["kind"] != "ValidatingAdmissionPolicyBinding")
        .map(|mut o| {
            if o["metadata"]["name"] == "gatekeeper-k8sx.a" {
                o["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
                    "kind": "Deployment", "name": "someone", "uid": "x", "controller": true}]);
            }
            o
        })
        .collect();
    let a = analyze(&snapshot(theirs), &inline());
    assert!(a.plan.is_empty(), "{:?}", a.plan);
    let codes: Vec<Code> = a.findings.iter().map(|f| f.code).collect();
    assert!(codes.contains(&Code::PolicyForeign), "{codes:?}");
    assert!(codes.contains(&Code::BindingWaiting), "{codes:?}");
}

#[test]
fn a_foreign_vap_with_the_narrowed_name_is_no_finding_in_the_inline_shape() {
    // Inline, the template wants no VAP of its own: another controller's VAP named as the
    // narrowed shape would name it is not "the name the template needs", and is left alone.
    let mut cluster = apply_plan(
        template_and_constraint(json!({"labels": ["owner"]})),
        &inline(),
    );
    let mut theirs = cluster
        .iter()
        .find(|o| o["metadata"]["name"] == "gatekeeper-k8sx.a")
        .expect("the constraint's VAP")
        .clone();
    theirs["metadata"]["name"] = json!("gatekeeper-k8sx");
    theirs["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
        "kind": "Deployment", "name": "someone", "uid": "x", "controller": true}]);
    cluster.push(theirs);
    let a = analyze(&snapshot(cluster.clone()), &inline());
    assert!(a.plan.is_empty(), "{:?}", a.plan);
    assert!(
        a.findings
            .iter()
            .all(|f| f.object.name != "gatekeeper-k8sx"),
        "{:?}",
        a.findings
    );
    // Narrowed, the template needs that name: the same object is a foreign VAP.
    let a = analyze(&snapshot(cluster), &narrowed());
    assert!(
        a.findings
            .iter()
            .any(|f| f.code == Code::PolicyForeign && f.object.name == "gatekeeper-k8sx"),
        "{:?}",
        a.findings
    );
}

#[test]
fn a_constraint_that_cannot_be_inlined_is_a_constraint_error_and_its_binding_is_kept() {
    let long = json!({"labels": ["x".repeat(MAX_CODE_POINTS)]});
    let a = analyze(&snapshot(template_and_constraint(long.clone())), &inline());
    let f = a
        .findings
        .iter()
        .find(|f| f.code == Code::ConstraintError)
        .expect("a constraint error");
    assert!(
        f.message.contains("cannot be inlined")
            && f.message.contains("spec.parameters")
            && f.message.contains("over the limit of 100000"),
        "{}",
        f.message
    );
    assert!(
        a.plan
            .iter()
            .all(|w| !w.object.name.starts_with("gatekeeper-k8sx")),
        "nothing written for it: {:?}",
        a.plan
    );
    // What an earlier, smaller version had written stays as it is.
    let cluster = apply_plan(
        template_and_constraint(json!({"labels": ["owner"]})),
        &inline(),
    );
    let grown: Vec<Value> = cluster
        .into_iter()
        .map(|mut o| {
            if o["kind"] == "K8sX" {
                o["spec"]["parameters"] = long.clone();
            }
            o
        })
        .collect();
    assert_eq!(plan_lines(&grown, &inline()), Vec::<String>::new());
    let a = analyze(&snapshot(grown), &inline());
    assert!(a.findings.iter().any(|f| f.code == Code::ConstraintError));
}

#[test]
fn literal_limits_say_why() {
    let mut deep = json!("x");
    for _ in 0..40 {
        deep = json!([deep]);
    }
    assert_eq!(cel_literal::literal(&deep), Err(LiteralError::TooDeep));
    let c = Constraint::from_value(
        constraint("K8sX", "a", json!({"parameters": {"deep": deep}})),
        Source::default(),
    );
    let a = analyze(
        &snapshot(vec![
            template("k8sx", "K8sX", cel_source(Some(true))),
            c.raw.clone(),
        ]),
        &inline(),
    );
    assert!(
        a.findings
            .iter()
            .any(|f| f.code == Code::ConstraintError && f.message.contains("nests more than 32")),
        "{:?}",
        a.findings
    );
}

/// A CEL value back as JSON (cel-rust's interpreter; what the API server's cel-go builds from
/// the same literal is the e2e tests' to show).
fn json_of(v: &cel::Value) -> Value {
    match v {
        cel::Value::Null => Value::Null,
        cel::Value::Bool(b) => json!(b),
        cel::Value::Int(i) => json!(i),
        cel::Value::UInt(u) => json!(u),
        cel::Value::Float(f) => json!(f),
        cel::Value::String(s) => json!(s.as_str()),
        cel::Value::List(l) => Value::Array(l.iter().map(json_of).collect()),
        cel::Value::Map(m) => Value::Object(
            m.map
                .iter()
                .map(|(k, v)| {
                    let cel::objects::Key::String(k) = k else {
                        panic!("a map key that is not a string: {k:?}")
                    };
                    (k.to_string(), json_of(v))
                })
                .collect(),
        ),
        other => panic!("not JSON: {other:?}"),
    }
}

fn evaluated(literal: &str) -> Value {
    let program = cel::Program::compile(literal).unwrap_or_else(|e| panic!("{literal}: {e}"));
    let value = program
        .execute(&cel::Context::default())
        .unwrap_or_else(|e| panic!("{literal}: {e}"));
    json_of(&value)
}

#[test]
fn hostile_parameters_come_back_as_they_were() {
    let v = hostile_parameters();
    let lit = cel_literal::literal(&v).expect("a literal");
    assert_eq!(evaluated(&lit), v, "{lit}");
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        // i64::MIN is written `-9223372036854775808`, which cel-go reads and cel-rust does
        // not: the e2e tests send it to the real API server.
        (i64::MIN + 1..=i64::MAX).prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Whatever the JSON, its literal parses and evaluates to the same value.
    #[test]
    fn any_json_round_trips_through_its_literal(v in json_value()) {
        let lit = cel_literal::literal(&v).expect("small values fit");
        prop_assert_eq!(evaluated(&lit), v);
    }
}

/// `--policy-shape auto`, the command line's default: a template with at most
/// `INLINE_AT_MOST` constraints gets a VAP per constraint, one with more one VAP with its
/// constraints as params; crossing the line moves the kind over, each object once.
#[test]
fn auto_inlines_a_template_of_few_constraints_and_narrows_one_of_many() {
    use kubectl_vap::core::options::INLINE_AT_MOST;
    let auto = Options {
        policy_shape: PolicyShape::Auto,
        ..default_options()
    };
    assert_eq!(PolicyShape::Auto.for_template(0), PolicyShape::Inline);
    assert_eq!(
        PolicyShape::Auto.for_template(INLINE_AT_MOST),
        PolicyShape::Inline
    );
    assert_eq!(
        PolicyShape::Auto.for_template(INLINE_AT_MOST + 1),
        PolicyShape::Narrowed
    );
    assert_eq!(PolicyShape::Narrowed.for_template(1), PolicyShape::Narrowed);
    let with = |n: usize| {
        let mut objects = vec![template("k8sx", "K8sX", cel_source(Some(true)))];
        for i in 0..n {
            objects.push(constraint(
                "K8sX",
                &format!("c{i}"),
                json!({"parameters": {"labels": ["owner"]}}),
            ));
        }
        objects
    };
    let creates = |objects: &[Value]| -> Vec<String> {
        analyze(&snapshot(objects.to_vec()), &auto)
            .plan
            .iter()
            .filter(|w| w.object.kind == "ValidatingAdmissionPolicy")
            .map(|w| w.object.name.clone())
            .collect()
    };
    let few = creates(&with(INLINE_AT_MOST));
    assert_eq!(few.len(), INLINE_AT_MOST, "{few:?}");
    assert!(
        few.iter().all(|n| n.starts_with("gatekeeper-k8sx.")),
        "{few:?}"
    );
    assert_eq!(creates(&with(INLINE_AT_MOST + 1)), ["gatekeeper-k8sx"]);
    // An eleventh constraint on a converged inline kind: the template's VAP first, the
    // bindings repointed, the constraints' VAPs last.
    let cluster = apply_plan(with(INLINE_AT_MOST), &auto);
    assert_eq!(plan_lines(&cluster, &auto), Vec::<String>::new());
    let mut grown = cluster;
    grown.push(constraint(
        "K8sX",
        "c-more",
        json!({"parameters": {"labels": ["owner"]}}),
    ));
    let lines = plan_lines(&grown, &auto);
    assert_eq!(
        lines[0], "Create ValidatingAdmissionPolicy/gatekeeper-k8sx",
        "{lines:?}"
    );
    let first_delete = lines
        .iter()
        .position(|l| l.starts_with("Delete"))
        .expect("deletes");
    assert!(
        lines[..first_delete]
            .iter()
            .all(|l| !l.starts_with("Delete"))
            && lines[first_delete..]
                .iter()
                .all(|l| l.starts_with("Delete ValidatingAdmissionPolicy/gatekeeper-k8sx.")),
        "{lines:?}"
    );
    assert_eq!(
        lines.len(),
        1 + (INLINE_AT_MOST + 1) + INLINE_AT_MOST,
        "{lines:?}"
    );
    let moved = apply_plan(grown, &auto);
    assert_eq!(
        plan_lines(&moved, &auto),
        Vec::<String>::new(),
        "then nothing"
    );
}

fn auto() -> Options {
    Options {
        policy_shape: PolicyShape::Auto,
        ..default_options()
    }
}

/// The names of the VAPs a plan creates.
fn created_policies(objects: &[Value], opts: &Options) -> Vec<String> {
    analyze(&snapshot(objects.to_vec()), opts)
        .plan
        .iter()
        .filter(|w| w.verb == Verb::Create && w.object.kind == "ValidatingAdmissionPolicy")
        .map(|w| w.object.name.clone())
        .collect()
}

/// The expression of an inline VAP's `variables.params` in the plan.
fn planned_params(objects: &[Value], opts: &Options) -> String {
    let plan = analyze(&snapshot(objects.to_vec()), opts).plan;
    let vap = plan
        .iter()
        .find(|w| w.object.kind == "ValidatingAdmissionPolicy")
        .and_then(|w| w.body.clone())
        .expect("a VAP planned");
    vap["spec"]["variables"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "params")
        .and_then(|v| v["expression"].as_str())
        .expect("variables.params")
        .to_string()
}

/// Issue 39: the API server type-checks an inline VAP, and a literal's type is known to it
/// (`null`, `map(string, bool)`) where the template was written for the unknown type of
/// `params.spec.parameters`: `has(variables.params.x)` on `null` and a list macro on a
/// `bool` were refused (422). Every parameters' literal is `dyn`, as that field is.
#[test]
fn inline_parameters_are_dyn_as_a_params_object_is() {
    let one = |spec: Value| {
        vec![
            template("k8sx", "K8sX", cel_source(Some(true))),
            constraint("K8sX", "a", spec),
        ]
    };
    assert_eq!(planned_params(&one(json!({})), &inline()), "dyn(null)");
    assert_eq!(
        planned_params(
            &one(json!({"parameters": {"hostNetwork": false}})),
            &inline()
        ),
        r#"dyn({"hostNetwork": false})"#
    );
    assert_eq!(
        planned_params(&one(json!({"parameters": {}})), &inline()),
        "dyn({})"
    );
    assert_eq!(
        planned_params(&one(json!({"parameters": {"labels": ["a"]}})), &auto()),
        r#"dyn({"labels": dyn(["a"])})"#
    );
}

/// A template whose CEL reads `params` itself (`params.spec.parameters.x`, valid for
/// Gatekeeper, whose VAP has a paramKind): `auto` keeps it in the narrowed shape, which has
/// `params`; `inline` cannot serve it, and says so on the template with the fix.
#[test]
fn a_template_reading_params_itself_is_narrowed_by_auto_and_an_error_for_inline() {
    let source = json!({"generateVAP": true, "validations": [{
        "expression": "!has(object.metadata.labels) || !(params.spec.parameters.label in object.metadata.labels)",
        "message": "forbidden label"}]});
    let objects = vec![
        template("k8sx", "K8sX", source),
        constraint("K8sX", "a", json!({"parameters": {"label": "bad"}})),
    ];
    assert_eq!(created_policies(&objects, &auto()), ["gatekeeper-k8sx"]);
    let a = analyze(&snapshot(objects.clone()), &auto());
    assert!(
        !a.findings
            .iter()
            .any(|f| matches!(f.code, Code::TemplateError | Code::ConstraintError)),
        "{:?}",
        a.findings
    );
    let a = analyze(&snapshot(objects.clone()), &inline());
    let f = a
        .findings
        .iter()
        .find(|f| f.code == Code::TemplateError)
        .expect("a template error under --policy-shape inline");
    assert!(
        f.message
            .contains("validations[0].expression reads `params`")
            && f.message.contains("variables.params.<name>"),
        "{}",
        f.message
    );
    assert_eq!(created_policies(&objects, &inline()), Vec::<String>::new());
    // A macro's own variable named `params`, or `variables.params`, reads no `params`.
    let bound = json!({"generateVAP": true, "validations": [
        {"expression": "variables.params.labels.all(params, params in object.metadata.labels)"}]});
    let objects = vec![
        template("k8sx", "K8sX", bound),
        constraint("K8sX", "a", json!({"parameters": {"labels": ["a"]}})),
    ];
    assert_eq!(created_policies(&objects, &auto()), ["gatekeeper-k8sx.a"]);
}

/// A constraint `auto` cannot write into a VAP of its own (parameters past CEL's limits, or a
/// VAP too large for one object) does not leave its template unenforced: the template keeps
/// one VAP with params, which serves every constraint; no constraint error.
#[test]
fn auto_narrows_a_template_whose_constraint_cannot_be_inlined() {
    use kubectl_vap::core::generate::MAX_OBJECT_BYTES;
    let with = |source: Value, params: Value| {
        vec![
            template("k8sx", "K8sX", source),
            constraint(
                "K8sX",
                "small",
                json!({"parameters": {"labels": ["owner"]}}),
            ),
            constraint("K8sX", "big", json!({"parameters": params})),
        ]
    };
    let mut deep = json!("x");
    for _ in 0..40 {
        deep = json!([deep]);
    }
    // A message that leaves the template's VAP within one object's size, but not with the
    // constraint's parameters written in beside it.
    let mut near_limit = cel_source(Some(true));
    near_limit["validations"][0]["message"] = json!("m".repeat(MAX_OBJECT_BYTES - 50_000));
    for (source, params, what) in [
        (
            cel_source(Some(true)),
            json!({"labels": ["x".repeat(MAX_CODE_POINTS)]}),
            "too long",
        ),
        (cel_source(Some(true)), json!({"labels": deep}), "too deep"),
        (
            near_limit,
            json!({"labels": ["y".repeat(60_000)]}),
            "too large",
        ),
    ] {
        let objects = with(source, params);
        assert_eq!(
            created_policies(&objects, &auto()),
            ["gatekeeper-k8sx"],
            "{what}"
        );
        let a = analyze(&snapshot(objects), &auto());
        assert!(
            !a.findings
                .iter()
                .any(|f| matches!(f.code, Code::TemplateError | Code::ConstraintError)),
            "{what}: {:?}",
            a.findings
        );
        assert_eq!(
            a.plan
                .iter()
                .filter(|w| w.object.kind == "ValidatingAdmissionPolicyBinding")
                .count(),
            2,
            "{what}: both constraints bound"
        );
    }
}

/// A VAP too large for one object is never planned (etcd would refuse the write on every
/// retry): the template's own VAP too, in any shape, is a template error that says so.
#[test]
fn a_vap_too_large_to_store_is_a_template_error_not_a_write() {
    use kubectl_vap::core::generate::MAX_OBJECT_BYTES;
    let mut huge = cel_source(Some(true));
    huge["validations"][0]["message"] = json!("m".repeat(MAX_OBJECT_BYTES + 1));
    let objects = vec![
        template("k8sx", "K8sX", huge),
        constraint("K8sX", "a", json!({"parameters": {"labels": ["owner"]}})),
    ];
    for opts in [narrowed(), auto()] {
        let a = analyze(&snapshot(objects.clone()), &opts);
        assert_eq!(created_policies(&objects, &opts), Vec::<String>::new());
        assert!(
            a.findings.iter().any(|f| matches!(
                f.code,
                Code::TemplateError | Code::ConstraintError
            ) && f.message.contains("bytes of JSON")),
            "{:?}",
            a.findings
        );
    }
}
