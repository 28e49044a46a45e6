//! Objects as JSON, built offline: ConstraintTemplates, constraints, snapshots; the names of
//! what kubectl-vap generates for them (spelled here, independently of `core::names`), and what
//! it generates (`core::generate`, as `analyze` and the reconciler would).

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kubectl_vap::core::PolicyShape;
use kubectl_vap::core::decide::{
    ConstraintIntent, TemplateVerdict, decide_constraint, decide_template,
};
use kubectl_vap::core::generate;
use kubectl_vap::load::cel::default_options;
use kubectl_vap::model::served::Served;
use kubectl_vap::model::{Constraint, ConstraintTemplate, Source};
use kubectl_vap::snapshot::Snapshot;
use serde_json::{Value, json};
use testenv::gatekeeper;

/// A v1 template named `name` (with a uid, as read from a cluster) whose one CEL target has
/// `source`.
pub fn template(name: &str, kind: &str, source: Value) -> Value {
    let mut t = gatekeeper::template(kind, "v1", json!({}), gatekeeper::cel_targets(source));
    t["metadata"] = json!({"name": name, "uid": format!("uid-t-{name}")});
    t
}

/// A CEL source requiring the constraint's `labels`, `generateVAP` as given (absent for
/// `None`).
pub fn cel_source(generate: Option<bool>) -> Value {
    let mut s = json!({"validations": [{"expression": "variables.params.labels.all(l, l in variables.anyObject.metadata.labels)", "message": "missing labels"}]});
    if let Some(g) = generate {
        s["generateVAP"] = json!(g);
    }
    s
}

/// The crd part of the labels templates: `parameters.labels`, a list of strings.
pub fn labels_crd_spec() -> Value {
    json!({ "validation": { "openAPIV3Schema": {
        "type": "object", "properties": { "labels": { "type": "array", "items": { "type": "string" } } } } } })
}

/// The targets of the labels templates: every label in `parameters.labels` is required.
/// `generateVAP` as given (absent for `None`); with `message`, the message is `message`
/// followed by the missing labels. `failurePolicy: Ignore`: a policy whose paramKind the
/// admission plugin has not discovered yet fails to configure, and under Fail that denies every
/// request of every parallel test (Gatekeeper #4530).
pub fn labels_targets(generate: Option<bool>, message: Option<&str>) -> Value {
    let has = "has(variables.anyObject.metadata.labels)";
    let labels = "variables.anyObject.metadata.labels";
    let mut validation =
        json!({ "expression": format!("variables.params.labels.all(l, {has} && l in {labels})") });
    if let Some(message) = message {
        validation["messageExpression"] = json!(format!(
            "'{message}' + variables.params.labels.filter(l, !{has} || !(l in {labels})).join(', ')"
        ));
    }
    let mut source = json!({ "failurePolicy": "Ignore", "validations": [validation] });
    if let Some(g) = generate {
        source["generateVAP"] = json!(g);
    }
    gatekeeper::cel_targets(source)
}

/// A v1 labels template of `kind` (see [`labels_targets`]).
pub fn labels_template(kind: &str, generate: Option<bool>, message: Option<&str>) -> Value {
    gatekeeper::template(
        kind,
        "v1",
        labels_crd_spec(),
        labels_targets(generate, message),
    )
}

/// A labels template that generates a VAP; its message is `message` followed by the missing
/// labels.
pub fn required_labels_template(kind: &str, message: &str) -> Value {
    labels_template(kind, Some(true), Some(message))
}

/// A constraint with a uid, as read from a cluster.
pub fn constraint(kind: &str, name: &str, spec: Value) -> Value {
    let mut c = gatekeeper::constraint(kind, name, spec);
    c["metadata"]["uid"] = json!(format!("uid-c-{name}"));
    c
}

pub fn snapshot(objects: Vec<Value>) -> Snapshot {
    let mut s = Snapshot {
        now: Some(chrono::Utc::now()),
        ..Snapshot::offline()
    };
    for o in objects {
        s.insert(o, Source::default())
            .expect("fixture objects are valid");
    }
    s
}

/// The VAP of a template of `kind`: `gatekeeper-<lower(kind)>`.
pub fn policy_name(kind: &str) -> String {
    format!("gatekeeper-{}", kind.to_lowercase())
}

/// The default options in the narrowed shape (one VAP per template, its constraints bound as
/// its params), for the tests about that shape: the default is `auto`.
pub fn narrowed_options() -> kubectl_vap::core::Options {
    default_options().with_shape(PolicyShape::Narrowed)
}

/// The VAP of constraint `constraint` of `kind` in the inline shape (the default's for a
/// template of at most 10 constraints): `gatekeeper-<lower(kind)>.<constraint>`.
pub fn inline_policy_name(kind: &str, constraint: &str) -> String {
    format!("gatekeeper-{}.{constraint}", kind.to_lowercase())
}

/// The binding of constraint `constraint` of `kind`: `gatekeeper-<lower(kind)>-<constraint>`.
pub fn binding_name(kind: &str, constraint: &str) -> String {
    format!("gatekeeper-{}-{constraint}", kind.to_lowercase())
}

/// The constraint CRD of `kind`: `<lower(kind)>.constraints.gatekeeper.sh`.
pub fn crd_name(kind: &str) -> String {
    format!("{}.{}", kind.to_lowercase(), gatekeeper::CONSTRAINTS_GROUP)
}

/// The VAP kubectl-vap generates for `t` as kind `kind` in Gatekeeper's shape (no webhook read:
/// every create and update, Gatekeeper's own CEL); `None` when the template does not generate
/// one.
pub fn policy_for(t: &ConstraintTemplate, kind: &str) -> Option<ValidatingAdmissionPolicy> {
    policy_matching(t, kind, false)
}

/// The VAP of `t` as kind `kind` with our own matcher CEL (the `narrowed` and `inline` shapes'),
/// matching every request: with [`binding_for`]'s binding (selectors only), our CEL matchers
/// alone decide.
pub fn policy_with_our_matchers(
    t: &ConstraintTemplate,
    kind: &str,
) -> Option<ValidatingAdmissionPolicy> {
    policy_matching(t, kind, true)
}

fn policy_matching(
    t: &ConstraintTemplate,
    kind: &str,
    ours: bool,
) -> Option<ValidatingAdmissionPolicy> {
    let TemplateVerdict::Generate {
        source,
        failure_policy,
        ..
    } = decide_template(t, &default_options())
    else {
        return None;
    };
    let opts = default_options();
    let everything = kubectl_vap::core::scope::Coverage::everything();
    let matching = if ours {
        generate::PolicyMatch::Narrowed {
            coverage: &everything,
            exemptions: &opts.exemptions,
        }
    } else {
        generate::PolicyMatch::Gatekeeper {
            synced: false,
            webhook: None,
            exemptions: &opts.exemptions,
        }
    };
    generate::policy(t, kind, &source, failure_policy, matching, false).ok()
}

/// The binding kubectl-vap generates for `c` under the default options (panics unless it binds),
/// in Gatekeeper's shape: the CEL matchers alone decide (`policy_for`'s VAP matches everything).
pub fn binding_for(c: &Constraint) -> ValidatingAdmissionPolicyBinding {
    binding_shaped(c, PolicyShape::Gatekeeper)
}

/// The binding in `shape`, narrowed by the built-in resources.
pub fn binding_shaped(c: &Constraint, shape: PolicyShape) -> ValidatingAdmissionPolicyBinding {
    let ConstraintIntent::Bind { actions, .. } = decide_constraint(c, &default_options()) else {
        panic!("the constraint binds")
    };
    let opts = default_options();
    generate::binding(c, &actions, shape, &opts.exemptions, &Served::builtin())
        .expect("binding")
        .0
}

/// A template as kubectl-vap reads it, from JSON of the server's (which may lack its type).
pub fn template_of(raw: Value) -> ConstraintTemplate {
    let mut raw = raw;
    raw["apiVersion"] = json!(format!("{}/v1", gatekeeper::TEMPLATES_GROUP));
    raw["kind"] = json!("ConstraintTemplate");
    ConstraintTemplate::from_value(raw, Source::default())
}

/// A constraint of `kind` as kubectl-vap reads it, from JSON of the server's.
pub fn constraint_of(kind: &str, raw: Value) -> Constraint {
    let mut raw = raw;
    raw["apiVersion"] = json!(format!(
        "{}/{}",
        gatekeeper::CONSTRAINTS_GROUP,
        gatekeeper::CONSTRAINTS_VERSION
    ));
    raw["kind"] = json!(kind);
    Constraint::from_value(raw, Source::default())
}
