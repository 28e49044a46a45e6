//! The folded shape (`core::fold`) on the real kube-apiserver: for templates with several
//! constraints each (differing parameters, namespaces, label and namespace selectors, a
//! scope, a name glob, a constraint without `parameters`, parameters that are all booleans,
//! messages from `messageExpression`), the folded VAP of each template (one per template, no
//! `paramKind`) is accepted by the API server's CEL compiler, and a table of compliant and
//! violating ConfigMaps and Namespaces (server-side dry-run creates) gets from it the verdicts
//! the inline shape's VAPs (one per constraint) give — and the denial names the constraint.
//!
//! Both shapes are in force at once on the shared server, each seeing only its own requests:
//! every binding's object selector also asks for the label `fold-e2e/shape` (`inline` or
//! `folded`), which every request of the table carries. Nothing else of the generated objects
//! is changed.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1 as ar;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use kube::api::{Api, PostParams};
use kubectl_vap::core::decide::{Action, TemplateVerdict, decide_template};
use kubectl_vap::core::fold::{self, FoldInput};
use kubectl_vap::core::generate::{self, PolicyBody};
use kubectl_vap::core::scope::{self, Coverage};
use kubectl_vap::core::{Options, PolicyShape};
use kubectl_vap::load::cel::default_options;
use kubectl_vap::model::served::Served;
use kubectl_vap::model::{Constraint, ConstraintTemplate};
use serde_json::{Value, json};
use support::cluster;
use testenv::{TestEnv, gatekeeper};

/// How long the admission plugin may take to see new policies and bindings.
const SETTLE: Duration = Duration::from_secs(90);
/// The label that keeps each shape's bindings to its own requests.
const SHAPE_LABEL: &str = "fold-e2e/shape";

/// One template and its constraints, as JSON.
struct Case {
    template: Value,
    constraints: Vec<Value>,
}

fn template(kind: &str, source: Value) -> Value {
    let mut source = source;
    source["generateVAP"] = json!(true);
    let mut t = gatekeeper::template(kind, "v1", json!({}), gatekeeper::cel_targets(source));
    t["metadata"]["uid"] = json!(format!("uid-{}", kind.to_lowercase()));
    t
}

fn constraint(kind: &str, name: &str, spec: Value) -> Value {
    let mut c = gatekeeper::constraint(kind, name, spec);
    c["metadata"]["uid"] = json!(format!("uid-{name}"));
    c
}

fn configmaps() -> Value {
    json!([{ "apiGroups": [""], "kinds": ["ConfigMap"] }])
}

/// The three templates of the test and their constraints; `a` is labelled `env: prod`, `b`
/// `env: dev`.
fn cases(env: &TestEnv, a: &str, b: &str) -> Vec<Case> {
    let labels = env.unique_kind("FoldLabels");
    let not_empty = env.unique_kind("FoldNotEmpty");
    let keys = env.unique_kind("FoldKeys");
    let owned = env.unique_kind("FoldOwned");
    vec![
        // Required labels: template variables that read the parameters and each other, a
        // message expression; namespaces, a label selector, a namespace selector, and a
        // constraint without parameters.
        Case {
            template: template(
                &labels,
                json!({
                    "variables": [
                        { "name": "required", "expression": "variables.params == null || !has(variables.params.labels) ? [] : variables.params.labels" },
                        { "name": "missing", "expression": "variables.required.filter(l, !has(object.metadata.labels) || !(l in object.metadata.labels))" }
                    ],
                    "validations": [{ "expression": "size(variables.missing) == 0",
                                      "messageExpression": "'missing labels: ' + variables.missing.join(', ')" }]
                }),
            ),
            constraints: vec![
                constraint(
                    &labels,
                    "owner-a",
                    json!({ "match": { "kinds": configmaps(), "namespaces": [a] },
                            "parameters": { "labels": ["owner"] } }),
                ),
                constraint(
                    &labels,
                    "team-b",
                    json!({ "match": { "kinds": configmaps(), "namespaces": [b] },
                            "parameters": { "labels": ["team"] } }),
                ),
                constraint(
                    &labels,
                    "tier-web",
                    json!({ "match": { "kinds": configmaps(), "namespaces": [a, b],
                                       "labelSelector": { "matchExpressions": [{ "key": "app", "operator": "In", "values": ["web"] }] } },
                            "parameters": { "labels": ["tier"] } }),
                ),
                constraint(
                    &labels,
                    "cost-prod",
                    json!({ "match": { "kinds": configmaps(), "namespaces": [a, b],
                                       "namespaceSelector": { "matchLabels": { "env": "prod" } } },
                            "parameters": { "labels": ["cost"] } }),
                ),
                constraint(
                    &labels,
                    "none",
                    json!({ "match": { "kinds": configmaps(), "namespaces": [a, b] } }),
                ),
            ],
        },
        // Parameters that are all booleans (typed `map(string, bool)` without `dyn`), read
        // with has(); a scope.
        Case {
            template: template(
                &not_empty,
                json!({ "validations": [{
                    "expression": "(has(variables.params.allowEmpty) && variables.params.allowEmpty) || (has(object.data) && size(object.data) > 0)",
                    "message": "an empty ConfigMap" }] }),
            ),
            constraints: vec![
                constraint(
                    &not_empty,
                    "no-empty",
                    json!({ "match": { "kinds": configmaps(), "namespaces": [a], "scope": "Namespaced" },
                            "parameters": { "allowEmpty": false, "strict": true } }),
                ),
                constraint(
                    &not_empty,
                    "empty-ok",
                    json!({ "match": { "kinds": configmaps(), "namespaces": [b] },
                            "parameters": { "allowEmpty": true } }),
                ),
            ],
        },
        // Two validations, one with a message expression over the parameters (numbers and
        // lists); a name glob.
        Case {
            template: template(
                &keys,
                json!({ "validations": [
                    { "expression": "!has(object.data) || size(object.data) <= variables.params.maxKeys",
                      "messageExpression": "'too many keys: ' + string(size(object.data)) + ' > ' + string(variables.params.maxKeys)" },
                    { "expression": "!has(object.data) || !object.data.exists(k, k in variables.params.forbidden)",
                      "message": "a forbidden key" }
                ] }),
            ),
            constraints: vec![
                constraint(
                    &keys,
                    "max1-a",
                    json!({ "match": { "kinds": configmaps(), "namespaces": [a] },
                            "parameters": { "maxKeys": 1, "forbidden": ["x"] } }),
                ),
                constraint(
                    &keys,
                    "cm-names",
                    json!({ "match": { "kinds": configmaps(), "namespaces": [a, b], "name": "cm-*" },
                            "parameters": { "maxKeys": 3, "forbidden": ["y"] } }),
                ),
            ],
        },
        // Namespaces, judged by their own labels: a namespace selector, and a constraint of
        // scope Cluster over ConfigMaps and Namespaces (so Namespaces only).
        Case {
            template: template(
                &owned,
                json!({ "validations": [{
                    "expression": "has(object.metadata.labels) && 'owner' in object.metadata.labels",
                    "message": "no owner" }] }),
            ),
            constraints: vec![
                constraint(
                    &owned,
                    "prod-namespaces",
                    json!({ "match": { "kinds": [{ "apiGroups": [""], "kinds": ["Namespace"] }],
                                       "namespaceSelector": { "matchLabels": { "env": "prod" } } } }),
                ),
                constraint(
                    &owned,
                    "cluster-scoped",
                    json!({ "match": { "kinds": [{ "apiGroups": [""], "kinds": ["ConfigMap", "Namespace"] }],
                                       "scope": "Cluster",
                                       "labelSelector": { "matchExpressions": [{ "key": "needs-owner", "operator": "Exists" }] } } }),
                ),
            ],
        },
    ]
}

/// One request of the table: a ConfigMap, and what it should get — `None` admitted,
/// `Some((constraint, words))` denied by that constraint with a message holding `words`.
struct Request {
    what: &'static str,
    object: Value,
    denied_by: Option<(&'static str, &'static str)>,
}

fn table(env: &TestEnv, a: &str, b: &str) -> Vec<Request> {
    let namespace = |prefix: &str, labels: Value| {
        json!({ "apiVersion": "v1", "kind": "Namespace",
                "metadata": { "name": env.unique_name(prefix), "labels": labels } })
    };
    let cm = |name: &str, ns: &str, labels: Value, data: Option<Value>| {
        let mut o = json!({ "apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": { "name": name, "namespace": ns, "labels": labels } });
        if let Some(d) = data {
            o["data"] = d;
        }
        o
    };
    let one = || Some(json!({ "k": "v" }));
    vec![
        Request {
            what: "compliant in a",
            object: cm("ok", a, json!({ "owner": "o", "cost": "c" }), one()),
            denied_by: None,
        },
        Request {
            what: "no owner in a",
            object: cm("no-owner", a, json!({ "cost": "c" }), one()),
            denied_by: Some(("owner-a", "missing labels: owner")),
        },
        Request {
            what: "no cost in prod",
            object: cm("no-cost", a, json!({ "owner": "o" }), one()),
            denied_by: Some(("cost-prod", "missing labels: cost")),
        },
        Request {
            what: "empty in a",
            object: cm("empty", a, json!({ "owner": "o", "cost": "c" }), None),
            denied_by: Some(("no-empty", "an empty ConfigMap")),
        },
        Request {
            what: "two keys in a",
            object: cm(
                "two",
                a,
                json!({ "owner": "o", "cost": "c" }),
                Some(json!({ "k": "v", "l": "w" })),
            ),
            denied_by: Some(("max1-a", "too many keys: 2 > 1")),
        },
        Request {
            what: "key x in a",
            object: cm(
                "x",
                a,
                json!({ "owner": "o", "cost": "c" }),
                Some(json!({ "x": "v" })),
            ),
            denied_by: Some(("max1-a", "a forbidden key")),
        },
        Request {
            what: "key y in a, named cm-*",
            object: cm(
                "cm-1",
                a,
                json!({ "owner": "o", "cost": "c" }),
                Some(json!({ "y": "v" })),
            ),
            denied_by: Some(("cm-names", "a forbidden key")),
        },
        Request {
            what: "key y in a, another name",
            object: cm(
                "other",
                a,
                json!({ "owner": "o", "cost": "c" }),
                Some(json!({ "y": "v" })),
            ),
            denied_by: None,
        },
        Request {
            what: "compliant in b (dev: no cost)",
            object: cm("ok", b, json!({ "team": "t" }), one()),
            denied_by: None,
        },
        Request {
            what: "empty in b (allowed there)",
            object: cm("empty", b, json!({ "team": "t" }), None),
            denied_by: None,
        },
        Request {
            what: "no team in b",
            object: cm("no-team", b, json!({}), one()),
            denied_by: Some(("team-b", "missing labels: team")),
        },
        Request {
            what: "app web without tier in b",
            object: cm("web", b, json!({ "team": "t", "app": "web" }), one()),
            denied_by: Some(("tier-web", "missing labels: tier")),
        },
        Request {
            what: "app web with tier in b",
            object: cm(
                "web-tier",
                b,
                json!({ "team": "t", "app": "web", "tier": "1" }),
                one(),
            ),
            denied_by: None,
        },
        Request {
            what: "app api in b",
            object: cm("api", b, json!({ "team": "t", "app": "api" }), one()),
            denied_by: None,
        },
        Request {
            what: "a prod namespace without owner",
            object: namespace("fold-prod", json!({ "env": "prod" })),
            denied_by: Some(("prod-namespaces", "no owner")),
        },
        Request {
            what: "a prod namespace with an owner",
            object: namespace("fold-prod", json!({ "env": "prod", "owner": "o" })),
            denied_by: None,
        },
        Request {
            what: "a dev namespace without owner",
            object: namespace("fold-dev", json!({ "env": "dev" })),
            denied_by: None,
        },
        Request {
            what: "a namespace that needs an owner",
            object: namespace("fold-needs", json!({ "needs-owner": "y" })),
            denied_by: Some(("cluster-scoped", "no owner")),
        },
        Request {
            what: "a ConfigMap that needs an owner (namespaced: not in scope)",
            object: cm(
                "needs",
                b,
                json!({ "team": "t", "needs-owner": "y" }),
                one(),
            ),
            denied_by: None,
        },
    ]
}

/// The generator's inputs for one case, as the reconciler would have them.
struct Generated {
    template: ConstraintTemplate,
    body: PolicyBody,
    constraints: Vec<Constraint>,
}

fn generated(case: &Case, opts: &Options) -> Generated {
    let snap = support::objects::snapshot(
        std::iter::once(case.template.clone())
            .chain(case.constraints.iter().cloned())
            .collect(),
    );
    let t = snap.templates[0].clone();
    let TemplateVerdict::Generate {
        source,
        failure_policy,
        ..
    } = decide_template(&t, opts)
    else {
        panic!("{} generates", t.name())
    };
    Generated {
        body: PolicyBody {
            source,
            failure_policy,
            operations: generate::operations(&t),
        },
        template: t,
        constraints: snap.constraints.clone(),
    }
}

/// `binding` made to see only requests labelled `shape`.
fn only_for(
    mut binding: ar::ValidatingAdmissionPolicyBinding,
    shape: &str,
) -> ar::ValidatingAdmissionPolicyBinding {
    let spec = binding.spec.as_mut().expect("spec");
    let resources = spec.match_resources.get_or_insert_with(Default::default);
    let selector = resources
        .object_selector
        .get_or_insert_with(Default::default);
    selector
        .match_expressions
        .get_or_insert_with(Vec::new)
        .push(LabelSelectorRequirement {
            key: SHAPE_LABEL.into(),
            operator: "In".into(),
            values: Some(vec![shape.into()]),
        });
    binding
}

/// The inline shape's objects for every constraint of `g`: a VAP and a binding each.
fn inline_objects(
    g: &Generated,
    opts: &Options,
) -> Vec<(
    ar::ValidatingAdmissionPolicy,
    ar::ValidatingAdmissionPolicyBinding,
)> {
    let served = Served::builtin();
    g.constraints
        .iter()
        .map(|c| {
            let (binding, coverage) = generate::binding(
                c,
                &[Action::Deny],
                PolicyShape::Inline,
                &opts.exemptions,
                &served,
            )
            .expect("binding");
            let policy = generate::inline_policy(c, &g.body, &coverage, &opts.exemptions, false)
                .expect("inline VAP");
            (policy, only_for(binding, "inline"))
        })
        .collect()
}

/// The folded shape's objects for `g`: one VAP, one binding.
fn folded_objects(
    g: &Generated,
    opts: &Options,
) -> (
    ar::ValidatingAdmissionPolicy,
    ar::ValidatingAdmissionPolicyBinding,
) {
    let mut coverage = Coverage::default();
    for c in &g.constraints {
        coverage.union(&scope::coverage_of(&c.matcher, &Served::builtin()).0);
    }
    let constraints: Vec<&Constraint> = g.constraints.iter().collect();
    let input = FoldInput {
        template: &g.template,
        body: &g.body,
        actions: &[Action::Deny],
        constraints: &constraints,
        coverage: &coverage,
        exemptions: &opts.exemptions,
    };
    let policy = fold::folded_policy(&input, &opts.cel).expect("the templates fold");
    (policy, only_for(fold::folded_binding(&input), "folded"))
}

async fn labelled_namespace(
    env: &TestEnv,
    client: &kube::Client,
    prefix: &str,
    env_label: &str,
) -> String {
    let name = env.unique_name(prefix);
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": { "name": name, "labels": { "env": env_label } }
    }))
    .expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
    name
}

/// What the API server answered one dry-run create: `None` admitted, else its message.
async fn verdict(client: &kube::Client, object: &Value, shape: &str) -> Option<String> {
    let mut object = object.clone();
    object["metadata"]["labels"][SHAPE_LABEL] = json!(shape);
    let uri = match object["metadata"]["namespace"].as_str() {
        Some(ns) => format!("/api/v1/namespaces/{ns}/configmaps?dryRun=All"),
        None => "/api/v1/namespaces?dryRun=All".to_string(),
    };
    let req = http::Request::builder()
        .method("POST")
        .uri(uri)
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&object).expect("json"))
        .expect("request");
    let reply = kubectl_vap::admission::dryrun::send(client, req)
        .await
        .expect("an answer");
    reply.status_message().map(str::to_string)
}

/// Where `got` departs from what `r` should get in `shape`: the folded shape's message must
/// name the constraint (`[name] words`), the inline one's hold the words.
fn departure(r: &Request, shape: &str, got: &Option<String>) -> Option<String> {
    let fine = match (&r.denied_by, got) {
        (None, None) => true,
        (Some((constraint, words)), Some(message)) => {
            if shape == "folded" {
                message.contains(&format!("[{constraint}] {words}"))
            } else {
                message.contains(words)
            }
        }
        _ => false,
    };
    (!fine).then(|| {
        format!(
            "{shape}: {}: expected {:?}, got {got:?}",
            r.what, r.denied_by
        )
    })
}

/// Every request of `table` as `shape`; the departures from what it should get.
async fn departures(client: &kube::Client, table: &[Request], shape: &str) -> Vec<String> {
    let mut out = Vec::new();
    for r in table {
        let got = verdict(client, &r.object, shape).await;
        out.extend(departure(r, shape, &got));
    }
    out
}

/// Waits until `shape` gives the table's verdicts; the departures left when it does not.
async fn settled(client: &kube::Client, table: &[Request], shape: &str) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let left = departures(client, table, shape).await;
        if left.is_empty() || tokio::time::Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_the_folded_policy_compiles_and_judges_as_the_inline_policies_do() {
    let env = TestEnv::shared();
    let client = env.client_admin().await;
    let a = labelled_namespace(env, &client, "fold-a", "prod").await;
    let b = labelled_namespace(env, &client, "fold-b", "dev").await;
    let opts = default_options();
    for case in cases(env, &a, &b) {
        let g = generated(&case, &opts);
        for (policy, binding) in inline_objects(&g, &opts) {
            cluster::create_policy(&client, &policy).await;
            cluster::create_binding(&client, &binding).await;
        }
        let (policy, binding) = folded_objects(&g, &opts);
        // The API server compiles every expression on create: a type error is a 422 here.
        cluster::policies(&client)
            .create(&PostParams::default(), &policy)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "the API server refuses the folded VAP of {}: {e}",
                    g.template.name()
                )
            });
        cluster::create_binding(&client, &binding).await;
    }
    let table = table(env, &a, &b);
    let inline = settled(&client, &table, "inline").await;
    assert!(
        inline.is_empty(),
        "the inline shape (the reference) departs from the table:\n{}",
        inline.join("\n")
    );
    let folded = settled(&client, &table, "folded").await;
    assert!(
        folded.is_empty(),
        "the folded shape judges otherwise than the inline one:\n{}",
        folded.join("\n")
    );
    // Once both are in force, every request once more, side by side: the same verdict.
    for r in &table {
        let (i, f) = (
            verdict(&client, &r.object, "inline").await,
            verdict(&client, &r.object, "folded").await,
        );
        assert_eq!(
            i.is_some(),
            f.is_some(),
            "{}: inline {i:?}, folded {f:?}",
            r.what
        );
    }
}
