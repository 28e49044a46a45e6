//! The folded shape's generator (`core::fold`), offline: one VAP per template and set of
//! actions, each constraint's match and parameters written into a copy of every template
//! validation, the template's variables declared once per constraint and read there through
//! the CEL rewrite; names, messages, limits and the errors that name what cannot be folded;
//! the label selectors' CEL held to `matching::selector_matches` by a CEL interpreter. The
//! real API server's verdicts are `tests/e2e_fold.rs`'s.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use k8s_openapi::api::admissionregistration::v1 as ar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kubectl_vap::core::cel_literal;
use kubectl_vap::core::decide::{Action, TemplateVerdict, decide_template};
use kubectl_vap::core::fold::{self, FoldError, FoldInput};
use kubectl_vap::core::generate::PolicyBody;
use kubectl_vap::core::matching::selector_matches;
use kubectl_vap::core::scope::{self, Coverage};
use kubectl_vap::core::{Exemptions, generate};
use kubectl_vap::load::cel::default_options;
use kubectl_vap::model::served::Served;
use kubectl_vap::model::{Constraint, ConstraintTemplate};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use support::objects::{constraint, snapshot, template};

const KIND: &str = "K8sFold";

/// A template with two variables (one reading the parameters, one reading the other), a
/// validation with a message, one with a message expression and one with neither, and a
/// match condition of its own.
fn fold_template() -> Value {
    template(
        "k8sfold",
        KIND,
        json!({
            "generateVAP": true,
            "matchCondition": [{ "name": "not-system", "expression": "!request.namespace.startsWith('kube-')" }],
            "variables": [
                { "name": "required", "expression": "variables.params == null || !has(variables.params.labels) ? [] : variables.params.labels" },
                { "name": "missing", "expression": "variables.required.filter(l, !has(variables.anyObject.metadata.labels) || !(l in variables.anyObject.metadata.labels))" }
            ],
            "validations": [
                { "expression": "size(variables.missing) == 0", "message": "missing labels" },
                { "expression": "variables.params == null || !has(variables.params.maxKeys) || !has(object.data) || size(object.data) <= variables.params.maxKeys // at most",
                  "messageExpression": "'too many keys: ' + string(size(object.data))" },
                { "expression": "!has(object.data) || !('forbidden' in object.data)" }
            ]
        }),
    )
}

fn constraints() -> Vec<Value> {
    vec![
        constraint(
            KIND,
            "owner-in-a",
            json!({ "match": { "kinds": [{ "apiGroups": [""], "kinds": ["ConfigMap"] }],
                               "namespaces": ["team-a"],
                               "labelSelector": { "matchExpressions": [{ "key": "app", "operator": "In", "values": ["web"] }] } },
                    "parameters": { "labels": ["owner"], "maxKeys": 2 } }),
        ),
        // No parameters: `variables.params` is `dyn(null)`.
        constraint(
            KIND,
            "bare",
            json!({ "match": { "kinds": [{ "apiGroups": [""], "kinds": ["ConfigMap"] }],
                               "namespaceSelector": { "matchLabels": { "env": "prod" } } } }),
        ),
        // Every value a bool: typed `map(string, bool)` without `dyn`.
        constraint(
            KIND,
            "all-bool",
            json!({ "match": { "kinds": [{ "apiGroups": [""], "kinds": ["ConfigMap"] }], "scope": "Namespaced" },
                    "parameters": { "strict": true, "loose": false } }),
        ),
    ]
}

struct Folding {
    template: ConstraintTemplate,
    body: PolicyBody,
    constraints: Vec<Constraint>,
    coverage: Coverage,
    exemptions: Exemptions,
}

impl Folding {
    fn of(template: Value, constraints: Vec<Value>) -> Folding {
        let opts = default_options();
        let snap = snapshot(std::iter::once(template).chain(constraints).collect());
        let t = snap.templates[0].clone();
        let TemplateVerdict::Generate {
            source,
            failure_policy,
            ..
        } = decide_template(&t, &opts)
        else {
            panic!("the template generates")
        };
        let mut coverage = Coverage::default();
        for c in &snap.constraints {
            coverage.union(&scope::coverage_of(&c.matcher, &Served::builtin()).0);
        }
        Folding {
            body: PolicyBody {
                source,
                failure_policy,
                operations: generate::operations(&t),
            },
            template: t,
            constraints: snap.constraints.clone(),
            coverage,
            exemptions: opts.exemptions.clone(),
        }
    }

    fn input<'a>(&'a self, constraints: &'a [&'a Constraint]) -> FoldInput<'a> {
        FoldInput {
            template: &self.template,
            body: &self.body,
            actions: &[Action::Deny],
            constraints,
            coverage: &self.coverage,
            exemptions: &self.exemptions,
        }
    }

    fn fold(&self) -> Result<ar::ValidatingAdmissionPolicy, FoldError> {
        let all: Vec<&Constraint> = self.constraints.iter().collect();
        fold::folded_policy(&self.input(&all), &default_options().cel)
    }
}

fn spec(p: &ar::ValidatingAdmissionPolicy) -> &ar::ValidatingAdmissionPolicySpec {
    p.spec.as_ref().expect("a spec")
}

#[test]
fn the_folded_policy_and_its_binding() {
    let f = Folding::of(fold_template(), constraints());
    let policy = f.fold().expect("folds");
    let all: Vec<&Constraint> = f.constraints.iter().collect();
    let binding = fold::folded_binding(&f.input(&all));
    insta::assert_yaml_snapshot!("folded_policy", policy);
    insta::assert_yaml_snapshot!("folded_binding", binding);
}

#[test]
fn one_policy_per_template_and_actions_with_no_param() {
    let f = Folding::of(fold_template(), constraints());
    let p = f.fold().expect("folds");
    assert_eq!(
        p.metadata.name.as_deref(),
        Some("gatekeeper-k8sfold.folded-deny")
    );
    let owner = &p.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("ConstraintTemplate", "k8sfold", Some(true))
    );
    assert_eq!(spec(&p).param_kind, None);
    // The template's own match condition once, not renamed.
    let conditions = spec(&p).match_conditions.as_ref().expect("conditions");
    assert_eq!(conditions[0].name, "not-system");
    assert_eq!(
        fold::folded_name("k8sfold", &[Action::Audit, Action::Deny]),
        "gatekeeper-k8sfold.folded-deny-audit"
    );
    // Never a template's VAP (no dot) nor, but for a constraint named `folded-deny`, an
    // inline one.
    let long = "t".repeat(253);
    let name = fold::folded_name(&long, &[Action::Warn]);
    assert!(name.len() <= 253, "{name}");
}

#[test]
fn each_constraint_has_its_own_variables_read_through_the_rewrite() {
    let f = Folding::of(fold_template(), constraints());
    let p = f.fold().expect("folds");
    let vars: BTreeMap<String, String> = spec(&p)
        .variables
        .iter()
        .flatten()
        .map(|v| (v.name.clone(), v.expression.clone()))
        .collect();
    let names: Vec<&str> = spec(&p)
        .variables
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    // In name order: all-bool, bare, owner-in-a; each constraint's params before the
    // template's variables that read them.
    assert_eq!(
        names,
        [
            "anyObject",
            "c0_params",
            "c0_required",
            "c0_missing",
            "c1_params",
            "c1_required",
            "c1_missing",
            "c2_params",
            "c2_required",
            "c2_missing"
        ]
    );
    assert_eq!(
        vars["c0_params"],
        r#"dyn({"loose": false, "strict": true})"#
    );
    assert_eq!(vars["c1_params"], "dyn(null)");
    assert_eq!(
        vars["c2_params"],
        r#"dyn({"labels": dyn(["owner"]), "maxKeys": dyn(2)})"#
    );
    assert_eq!(
        vars["c2_required"],
        "variables.c2_params == null || !has(variables.c2_params.labels) ? [] : variables.c2_params.labels"
    );
    assert_eq!(
        vars["c2_missing"],
        "variables.c2_required.filter(l, !has(variables.anyObject.metadata.labels) || !(l in variables.anyObject.metadata.labels))"
    );
}

#[test]
fn every_validation_is_guarded_by_its_constraints_match_and_names_it() {
    let f = Folding::of(fold_template(), constraints());
    let p = f.fold().expect("folds");
    let v = spec(&p).validations.as_ref().expect("validations");
    // Three constraints × three validations.
    assert_eq!(v.len(), 9);
    // owner-in-a (c2), the first validation: its kinds, namespaces and label selector.
    let first = &v[6];
    assert!(first.expression.starts_with("!(("), "{}", first.expression);
    for part in [
        "(request.kind.group in [\"\"] && request.kind.kind in [\"ConfigMap\"])",
        "[\"team-a\"].exists(p,",
        "\"app\" in l && l[\"app\"] in [\"web\"]",
        "object != null",
        "oldObject != null",
        ") || (\nsize(variables.c2_missing) == 0\n)",
    ] {
        assert!(
            first.expression.contains(part),
            "{part}: {}",
            first.expression
        );
    }
    assert_eq!(
        first.message.as_deref(),
        Some("[owner-in-a] missing labels")
    );
    // A message expression: prefixed, renamed, its comment closed by a new line.
    let second = &v[7];
    assert_eq!(
        second.message_expression.as_deref(),
        Some("\"[owner-in-a] \" + (\n'too many keys: ' + string(size(object.data))\n)")
    );
    assert!(
        second
            .expression
            .ends_with("variables.c2_params.maxKeys // at most\n)"),
        "{}",
        second.expression
    );
    // No message: the API server's own words, with the constraint's name.
    assert_eq!(
        v[8].message.as_deref(),
        Some("[owner-in-a] failed expression: !has(object.data) || !('forbidden' in object.data)")
    );
    // bare (c1): its namespace selector; all-bool (c0): its scope.
    assert!(
        v[3].expression.contains("namespaceObject"),
        "{}",
        v[3].expression
    );
    assert!(
        v[0].expression
            .contains("request.resource.resource == \"namespaces\"")
    );
}

#[test]
fn a_constraint_that_matches_everything_is_not_guarded() {
    let c = constraint(
        KIND,
        "everything",
        json!({ "parameters": { "labels": ["a"] } }),
    );
    let f = Folding::of(fold_template(), vec![c]);
    let p = f.fold().expect("folds");
    let v = spec(&p).validations.as_ref().expect("validations");
    assert_eq!(v[0].expression, "size(variables.c0_missing) == 0");
}

#[test]
fn what_cannot_be_folded_is_named() {
    // A constraint's parameters over CEL's limit: that constraint is named.
    let huge: Vec<String> = (0..20_000).map(|i| format!("label-{i}")).collect();
    let mut all = constraints();
    all.push(constraint(
        KIND,
        "too-long",
        json!({ "parameters": { "labels": huge } }),
    ));
    let err = Folding::of(fold_template(), all).fold().unwrap_err();
    assert!(
        matches!(&err, FoldError::Constraint { constraint, .. } if constraint == "too-long"),
        "{err}"
    );
    assert!(
        err.to_string().contains("over the limit of 100000"),
        "{err}"
    );

    // A selector Kubernetes would refuse.
    let bad = constraint(
        KIND,
        "bad-selector",
        json!({ "match": { "labelSelector": { "matchExpressions": [{ "key": "a", "operator": "Near" }] } } }),
    );
    let err = Folding::of(fold_template(), vec![bad]).fold().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("constraint bad-selector cannot be folded: spec.match.labelSelector"),
        "{err}"
    );

    // A template that reads `params` itself, or `variables` other than through a field.
    for (expression, says) in [
        ("params.spec.parameters.x == 1", "reads `params`"),
        (
            "variables['params'] != null",
            "other than as `variables.<name>`",
        ),
    ] {
        let t = template(
            "k8sfold",
            KIND,
            json!({ "generateVAP": true, "validations": [{ "expression": expression }] }),
        );
        let err = Folding::of(t, constraints()).fold().unwrap_err();
        assert!(
            matches!(&err, FoldError::Template { .. }) && err.to_string().contains(says),
            "{expression}: {err}"
        );
    }

    // Nothing to fold.
    let f = Folding::of(fold_template(), vec![]);
    assert_eq!(
        fold::folded_policy(&f.input(&[]), &default_options().cel),
        Err(FoldError::NoConstraints)
    );

    // Each expression within the limit, but the whole over what one object may hold.
    let many: Vec<Value> = (0..60)
        .map(|i| {
            let labels: Vec<String> = (0..2_000).map(|j| format!("l-{i}-{j}")).collect();
            constraint(
                KIND,
                &format!("c{i}"),
                json!({ "parameters": { "labels": labels } }),
            )
        })
        .collect();
    match Folding::of(fold_template(), many).fold() {
        Err(FoldError::TooLarge(why)) => assert!(why.contains("bytes of JSON"), "{why}"),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("a VAP over the size of one object"),
    }
}

// ---------------------------------------------------------------------------------------------
// The selectors' CEL, held to the selector matcher by an interpreter.
// ---------------------------------------------------------------------------------------------

fn evaluate(expression: &str) -> bool {
    let program = cel::Program::compile(expression).unwrap_or_else(|e| panic!("{expression}: {e}"));
    match program.execute(&cel::Context::default()) {
        Ok(cel::Value::Bool(b)) => b,
        other => panic!("{expression}: {other:?}"),
    }
}

fn selector(v: Value) -> LabelSelector {
    serde_json::from_value(v).expect("a selector")
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_label_selectors_cel_decides_as_the_selector_matcher_does() {
    let selectors = [
        json!({}),
        json!({ "matchLabels": { "app": "web" } }),
        json!({ "matchLabels": { "app": "web", "tier": "front" } }),
        json!({ "matchExpressions": [{ "key": "app", "operator": "In", "values": ["web", "api"] }] }),
        json!({ "matchExpressions": [{ "key": "app", "operator": "In", "values": [] }] }),
        json!({ "matchExpressions": [{ "key": "app", "operator": "NotIn", "values": ["web"] }] }),
        json!({ "matchExpressions": [{ "key": "app", "operator": "Exists" }] }),
        json!({ "matchExpressions": [{ "key": "app", "operator": "DoesNotExist" }] }),
        json!({ "matchLabels": { "tier": "front" },
                "matchExpressions": [{ "key": "app", "operator": "NotIn", "values": ["db"] },
                                     { "key": "example.com/x", "operator": "Exists" }] }),
        // Keys and values that would end a careless literal.
        json!({ "matchLabels": { "a\"b": "c'd" } }),
    ];
    let label_sets = [
        labels(&[]),
        labels(&[("app", "web")]),
        labels(&[("app", "api")]),
        labels(&[("app", "db"), ("tier", "front")]),
        labels(&[("app", "web"), ("tier", "front"), ("example.com/x", "")]),
        labels(&[("tier", "front"), ("example.com/x", "1")]),
        labels(&[("a\"b", "c'd")]),
        labels(&[("App", "web")]),
    ];
    for s in &selectors {
        let sel = selector(s.clone());
        let test = fold::label_selector_cel(&sel, "l").expect("a known operator");
        for l in &label_sets {
            let want = selector_matches(&sel, l).expect("valid");
            let got = match &test {
                None => true,
                Some(test) => {
                    let map = cel_literal::literal(&json!(l)).expect("a literal");
                    evaluate(&format!("[{map}].all(l, {test})"))
                }
            };
            assert_eq!(got, want, "{s} on {l:?}: {test:?}");
        }
    }
    let unknown = selector(json!({ "matchExpressions": [{ "key": "a", "operator": "Near" }] }));
    assert!(fold::label_selector_cel(&unknown, "l").is_err());
}

/// An object as the API server hands it to CEL, or `null`.
fn object(labels: Option<&[(&str, &str)]>) -> String {
    let v = match labels {
        None => Value::Null,
        Some([]) => json!({ "metadata": { "name": "x" } }),
        Some(l) => json!({ "metadata": { "name": "x", "labels": self::labels(l) } }),
    };
    cel_literal::literal(&v).expect("a literal")
}

#[test]
fn an_object_selector_matches_the_object_or_the_old_object() {
    let sel = selector(json!({ "matchLabels": { "app": "web" } }));
    let test = fold::object_selector_cel(&sel)
        .expect("valid")
        .expect("not empty");
    let web: &[(&str, &str)] = &[("app", "web")];
    let db: &[(&str, &str)] = &[("app", "db")];
    let none: &[(&str, &str)] = &[];
    for (new, old, want) in [
        (Some(web), None, true),
        (Some(db), None, false),
        (Some(none), None, false),
        // An update that removes the label: the old object matches (the API server's rule).
        (Some(db), Some(web), true),
        (Some(web), Some(db), true),
        // A delete: the old object alone.
        (None, Some(web), true),
        (None, Some(db), false),
    ] {
        let e = format!(
            "[{}].all(object, [{}].all(oldObject, {test}))",
            object(new),
            object(old)
        );
        assert_eq!(evaluate(&e), want, "{new:?} {old:?}");
    }
    assert_eq!(fold::object_selector_cel(&selector(json!({}))), Ok(None));
}
