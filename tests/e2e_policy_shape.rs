//! Issue 19's proof against the real kube-apiserver: the narrowed policies (`--policy-shape
//! narrowed`, the default) admit, warn and deny exactly what Gatekeeper's shape
//! (`--policy-shape gatekeeper`) does, and a restarting API server refuses nothing the
//! constraints do not select.
//!
//! - The differential test: two API servers, the same templates, constraints and objects, each
//!   converged by the real binary (`kubectl-vap run --once --policy-shape X`); a matrix of
//!   server-side dry-run requests (namespaced and cluster-scoped kinds, core and CRD kinds,
//!   `pods/status` and `pods/ephemeralcontainers`, Namespaces, exact, glob and excluded
//!   namespaces, label selectors, DELETE, deny, warn and dryrun actions) gets the same verdict
//!   from both: status, message, warnings and the audit annotation a `dryrun` binding writes.
//! - The restart test: `kubectl-vap run` leading, kube-apiserver restarted 10 times; Leases
//!   created in a namespace no constraint selects from the first moment it answers are never
//!   refused, and the reconciler keeps its Lease.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::api::{Api, ListParams};
use kube::core::Resource as _;
use serde_json::{Value, json};
use support::{cli, cluster};
use testenv::{TestEnv, gatekeeper};

/// The Lease namespace of the reconciler (exempt in the narrowed shape).
const LEASE_NS: &str = "vap-system";
/// The namespaces of the matrix, with their labels.
const NS_A: &str = "team-a";
const NS_B: &str = "team-b";
const NS_GLOB: &str = "glob-1";
const NS_OTHER: &str = "other";
/// Labelled `admission.gatekeeper.sh/ignore`: exempt in the narrowed shape.
const NS_IGNORED: &str = "ignored";
/// The test's own CRD group: a namespaced `Widget` and a cluster-scoped `Gadget`.
const GROUP: &str = "shape.e2e.kubectl-vap.test";
const LABELS_KIND: &str = "ShapeLabels";
const PROTECT_KIND: &str = "ShapeProtect";
const NOBAD_KIND: &str = "ShapeNoBad";
/// How long the admission plugin may take to see what `run --once` wrote.
const SETTLE: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// The world: templates, constraints, CRDs, namespaces and objects, the same on every server.
// ---------------------------------------------------------------------------------------------

/// A CEL template of `kind`; `operations` as the template's target lists them (none: the
/// default CREATE/UPDATE); failurePolicy left to the default (Fail).
fn template(kind: &str, crd_spec: Value, validation: Value, operations: &[&str]) -> Value {
    let mut targets =
        gatekeeper::cel_targets(json!({ "generateVAP": true, "validations": [validation] }));
    if !operations.is_empty() {
        targets[0]["operations"] = json!(operations);
    }
    gatekeeper::template(kind, "v1", crd_spec, targets)
}

/// Every label in `parameters.labels` is required.
fn labels_template() -> Value {
    let has = "has(variables.anyObject.metadata.labels)";
    let labels = "variables.anyObject.metadata.labels";
    template(
        LABELS_KIND,
        support::objects::labels_crd_spec(),
        json!({
            "expression": format!("variables.params.labels.all(l, {has} && l in {labels})"),
            "messageExpression": format!(
                "'missing labels: ' + variables.params.labels.filter(l, !{has} || !(l in {labels})).join(', ')"
            ),
        }),
        &[],
    )
}

/// An object labelled `protected` may not be created, updated or deleted.
fn protect_template() -> Value {
    template(
        PROTECT_KIND,
        json!({}),
        json!({
            "expression": "!has(variables.anyObject.metadata.labels) || !('protected' in variables.anyObject.metadata.labels)",
            "message": "protected",
        }),
        &["CREATE", "UPDATE", "DELETE"],
    )
}

/// An object labelled `bad` is refused; its constraint names no kinds (it stays wide).
fn nobad_template() -> Value {
    template(
        NOBAD_KIND,
        json!({}),
        json!({
            "expression": "!has(variables.anyObject.metadata.labels) || !('bad' in variables.anyObject.metadata.labels)",
            "message": "bad",
        }),
        &[],
    )
}

fn kinds(group: &str, kinds: &[&str]) -> Value {
    json!({ "apiGroups": [group], "kinds": kinds })
}

/// The constraints: (kind, name, spec).
fn constraints() -> Vec<(&'static str, &'static str, Value)> {
    let owner = json!({ "labels": ["owner"] });
    vec![
        // An exact namespace, a core kind (and its subresources).
        (
            LABELS_KIND,
            "pods-in-a",
            json!({ "match": { "kinds": [kinds("", &["Pod"])], "namespaces": [NS_A] },
                    "parameters": owner }),
        ),
        // A glob namespace, warn.
        (
            LABELS_KIND,
            "configmaps-glob",
            json!({ "enforcementAction": "warn",
                    "match": { "kinds": [kinds("", &["ConfigMap"])], "namespaces": ["glob-*"] },
                    "parameters": owner }),
        ),
        // A label selector (set-based).
        (
            LABELS_KIND,
            "configmaps-web",
            json!({ "match": { "kinds": [kinds("", &["ConfigMap"])],
                               "labelSelector": { "matchExpressions": [
                                   { "key": "tier", "operator": "In", "values": ["web"] }] } },
                    "parameters": owner }),
        ),
        // A CRD kind, an excluded namespace and a namespaceSelector.
        (
            LABELS_KIND,
            "widgets",
            json!({ "match": { "kinds": [kinds(GROUP, &["Widget"])],
                               "excludedNamespaces": [NS_B],
                               "namespaceSelector": { "matchLabels": { "team": "red" } } },
                    "parameters": owner }),
        ),
        // A cluster-scoped CRD kind, warn.
        (
            LABELS_KIND,
            "gadgets",
            json!({ "enforcementAction": "warn",
                    "match": { "kinds": [kinds(GROUP, &["Gadget"])] },
                    "parameters": owner }),
        ),
        // Namespace objects themselves, by label.
        (
            LABELS_KIND,
            "checked-namespaces",
            json!({ "match": { "kinds": [kinds("", &["Namespace"])],
                               "labelSelector": { "matchLabels": { "check": "yes" } } },
                    "parameters": owner }),
        ),
        // dryrun: only the audit log says.
        (
            LABELS_KIND,
            "secrets-dryrun",
            json!({ "enforcementAction": "dryrun",
                    "match": { "kinds": [kinds("", &["Secret"])] },
                    "parameters": owner }),
        ),
        // Two kinds in two groups, two exact namespaces.
        (
            LABELS_KIND,
            "services-and-deployments",
            json!({ "match": { "kinds": [kinds("", &["Service"]), kinds("apps", &["Deployment"])],
                               "namespaces": [NS_A, NS_GLOB] },
                    "parameters": owner }),
        ),
        // DELETE (the template asks for it).
        (
            PROTECT_KIND,
            "protected-configmaps",
            json!({ "match": { "kinds": [kinds("", &["ConfigMap"])], "namespaces": [NS_A] } }),
        ),
        // No match at all: every kind, warn. (No namespaces or excludedNamespaces: their
        // matchers read `request.namespace`, which cluster-scoped requests lack.)
        (NOBAD_KIND, "no-bad", json!({ "enforcementAction": "warn" })),
    ]
}

fn crd(kind: &str, plural: &str, scope: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{plural}.{GROUP}") },
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": { "kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                       "listKind": format!("{kind}List") },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true } },
                "subresources": { "status": {} },
            }],
        },
    })
}

fn namespace(name: &str, labels: Value) -> Value {
    json!({ "apiVersion": "v1", "kind": "Namespace",
            "metadata": { "name": name, "labels": labels } })
}

fn meta(name: &str, ns: Option<&str>, labels: Value) -> Value {
    let mut m = json!({ "name": name, "labels": labels });
    if let Some(ns) = ns {
        m["namespace"] = json!(ns);
    }
    m
}

fn pod(name: &str, ns: &str, labels: Value) -> Value {
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": meta(name, Some(ns), labels),
            "spec": { "containers": [{ "name": "c", "image": "registry.invalid/app:1" }] } })
}

/// A Deployment's pod template, labelled `app: <app>`.
fn pod_template(app: &str) -> Value {
    json!({ "metadata": { "labels": { "app": app } },
            "spec": { "containers": [{ "name": "c", "image": "registry.invalid/app:1" }] } })
}

fn configmap(name: &str, ns: &str, labels: Value) -> Value {
    json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(name, Some(ns), labels),
            "data": { "k": "v" } })
}

/// The objects that exist before the policies do (so the updates and deletes of the matrix
/// have something to act on): what violates is already there, as in any cluster.
fn existing_objects() -> Vec<Value> {
    vec![
        namespace(NS_A, json!({ "team": "red" })),
        namespace(NS_B, json!({ "team": "red" })),
        namespace(NS_GLOB, json!({})),
        namespace(NS_OTHER, json!({})),
        namespace(
            NS_IGNORED,
            json!({ "admission.gatekeeper.sh/ignore": "yes" }),
        ),
        namespace("checked", json!({ "check": "yes" })),
        pod("bare", NS_A, json!({})),
        pod("owned", NS_A, json!({ "owner": "me" })),
        pod("bare", NS_OTHER, json!({})),
        pod("flagged", NS_OTHER, json!({ "owner": "me", "bad": "yes" })),
        configmap("plain", NS_A, json!({})),
        configmap("protected", NS_A, json!({ "protected": "yes" })),
        configmap("protected", NS_OTHER, json!({ "protected": "yes" })),
    ]
}

/// Server-side apply (as the admin) of `obj`; the resource from discovery.
async fn apply(client: &kube::Client, obj: &Value) {
    let r = resolve(client, obj).await;
    let ns = obj["metadata"]["namespace"].as_str();
    let name = obj["metadata"]["name"].as_str().expect("a name");
    let api: Api<kube::api::DynamicObject> = match (r.namespaced, ns) {
        (true, Some(ns)) => Api::namespaced_with(client.clone(), ns, &r.resource),
        _ => Api::all_with(client.clone(), &r.resource),
    };
    api.patch(
        name,
        &kube::api::PatchParams::apply("e2e-policy-shape").force(),
        &kube::api::Patch::Apply(obj),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {} {name}: {e}", obj["kind"]));
}

async fn resolve(client: &kube::Client, obj: &Value) -> kubectl_vap::admission::dryrun::Resolved {
    let api_version = obj["apiVersion"].as_str().expect("apiVersion");
    let kind = obj["kind"].as_str().expect("kind");
    // Discovery of a CRD just Established may lag: retry.
    support::poll::eventually_some(&format!("{kind} is served"), SETTLE, || async {
        kubectl_vap::admission::dryrun::Resolver::default()
            .resolve(client, api_version, kind)
            .await
            .ok()
    })
    .await
}

/// Everything but the policies: Gatekeeper's template CRD, the test CRDs, the templates and
/// their exact constraint CRDs, the constraints, the namespaces and the existing objects.
async fn build_world(env: &TestEnv) {
    let client = env.client_admin().await;
    gatekeeper::install_gatekeeper_crds(&client)
        .await
        .expect("template CRD");
    for c in [
        crd("Widget", "widgets", "Namespaced"),
        crd("Gadget", "gadgets", "Cluster"),
    ] {
        gatekeeper::apply_crd(&client, &c).await.expect("test CRD");
    }
    testenv::ensure_namespace(&client, LEASE_NS)
        .await
        .expect("lease namespace");
    for t in [labels_template(), protect_template(), nobad_template()] {
        cluster::create_template_and_crd(&client, &t).await;
    }
    for (kind, name, spec) in constraints() {
        cluster::create_constraint(&client, &gatekeeper::constraint(kind, name, spec)).await;
    }
    for o in existing_objects() {
        apply(&client, &o).await;
    }
}

/// `kubectl-vap run --once --policy-shape <shape>` on `env`.
fn converge(env: &TestEnv, shape: &str) {
    let mut cmd = cli::kubectl_vap_narrowed();
    cmd.arg("--kubeconfig").arg(env.kubeconfig_admin()).args([
        "run",
        "--once",
        "--binding-wait=0s",
        "--lease-namespace",
        LEASE_NS,
    ]);
    cmd.arg(format!("--policy-shape={shape}"));
    let out = cli::output(&mut cmd);
    assert!(
        out.status.success(),
        "run --once --policy-shape {shape} failed: {}",
        cli::stderr(&out)
    );
}

// ---------------------------------------------------------------------------------------------
// The matrix.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Verb {
    Create,
    /// A full replace of the live object (read first) with changes.
    Update,
    Delete,
}

/// One request of the matrix.
struct Req {
    name: &'static str,
    verb: Verb,
    /// The object (for create and update: what is sent; for delete: its identity).
    obj: Value,
    /// `status` or `ephemeralcontainers`.
    subresource: Option<&'static str>,
    /// What Gatekeeper's semantics give: `A` admitted, `W` warned, `D` denied, `DW` both,
    /// `X` admitted with an audit annotation (dryrun). A readiness check, and what makes the
    /// table non-trivial; the comparison between shapes is on the whole verdict.
    expect: &'static str,
    /// In a namespace the narrowed shape exempts: admitted there whatever Gatekeeper's shape
    /// says.
    exempt: bool,
    /// What Gatekeeper's own objects give instead, where they differ from `expect` by design:
    /// without its webhook, Gatekeeper v3.23.1's VAP matches CREATE and UPDATE whatever the
    /// template's `targets[].operations` say (`buildDefaultMatchConstraints`); the other shapes
    /// honour them. The other shapes are held to `expect` on these rows.
    gatekeeper: Option<&'static str>,
}

fn req(name: &'static str, verb: Verb, obj: Value, expect: &'static str) -> Req {
    Req {
        name,
        verb,
        obj,
        subresource: None,
        expect,
        exempt: false,
        gatekeeper: None,
    }
}

impl Req {
    /// Gatekeeper's own objects give `category` here (see [`Req::gatekeeper`]).
    fn in_gatekeepers_shape(mut self, category: &'static str) -> Req {
        self.gatekeeper = Some(category);
        self
    }
}

fn widget(name: &str, ns: &str, labels: Value) -> Value {
    json!({ "apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
            "metadata": meta(name, Some(ns), labels), "spec": {} })
}

fn gadget(name: &str, labels: Value) -> Value {
    json!({ "apiVersion": format!("{GROUP}/v1"), "kind": "Gadget",
            "metadata": meta(name, None, labels), "spec": {} })
}

fn lease(name: &str, ns: &str, labels: Value) -> Value {
    json!({ "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": meta(name, Some(ns), labels), "spec": { "holderIdentity": "x" } })
}

fn matrix() -> Vec<Req> {
    use Verb::*;
    let none = json!({});
    let owner = json!({ "owner": "me" });
    let bad = json!({ "owner": "me", "bad": "yes" });
    let mut m = vec![
        req(
            "pod in exact ns, no owner",
            Create,
            pod("p1", NS_A, none.clone()),
            "D",
        ),
        req(
            "pod in exact ns, owner",
            Create,
            pod("p2", NS_A, owner.clone()),
            "A",
        ),
        req(
            "pod in other ns, no owner",
            Create,
            pod("p3", NS_OTHER, none.clone()),
            "A",
        ),
        req(
            "pod in exact ns, bad",
            Create,
            pod("p4", NS_A, bad.clone()),
            "W",
        ),
        req(
            "pod delete (not asked for)",
            Delete,
            pod("bare", NS_A, none.clone()),
            "A",
        ),
        req(
            "configmap in glob ns, no owner",
            Create,
            configmap("c1", NS_GLOB, none.clone()),
            "W",
        ),
        req(
            "configmap in glob ns, owner",
            Create,
            configmap("c2", NS_GLOB, owner.clone()),
            "A",
        ),
        req(
            "configmap tier=web, no owner",
            Create,
            configmap("c3", NS_OTHER, json!({ "tier": "web" })),
            "D",
        ),
        req(
            "configmap tier=db, no owner",
            Create,
            configmap("c4", NS_OTHER, json!({ "tier": "db" })),
            "A",
        ),
        req(
            "configmap tier=web in glob ns",
            Create,
            configmap("c5", NS_GLOB, json!({ "tier": "web" })),
            "DW",
        ),
        req(
            "configmap protected create",
            Create,
            configmap("c6", NS_A, json!({ "protected": "yes" })),
            "D",
        ),
        req(
            "configmap update to protected",
            Update,
            configmap("plain", NS_A, json!({ "protected": "yes" })),
            "D",
        ),
        req(
            "configmap delete protected",
            Delete,
            configmap("protected", NS_A, none.clone()),
            "D",
        )
        .in_gatekeepers_shape("A"),
        req(
            "configmap delete plain",
            Delete,
            configmap("plain", NS_A, none.clone()),
            "A",
        ),
        req(
            "configmap delete protected, other ns",
            Delete,
            configmap("protected", NS_OTHER, none.clone()),
            "A",
        ),
        req(
            "widget, no owner",
            Create,
            widget("w1", NS_A, none.clone()),
            "D",
        ),
        req(
            "widget, owner",
            Create,
            widget("w2", NS_A, owner.clone()),
            "A",
        ),
        req(
            "widget in excluded ns",
            Create,
            widget("w3", NS_B, none.clone()),
            "A",
        ),
        req(
            "widget outside the namespaceSelector",
            Create,
            widget("w4", NS_OTHER, none.clone()),
            "A",
        ),
        req("gadget, no owner", Create, gadget("g1", none.clone()), "W"),
        req("gadget, owner", Create, gadget("g2", owner.clone()), "A"),
        req("gadget, bad", Create, gadget("g3", bad.clone()), "W"),
        req(
            "namespace check=yes, no owner",
            Create,
            namespace("n1", json!({ "check": "yes" })),
            "D",
        ),
        req(
            "namespace check=yes, owner",
            Create,
            namespace("n2", json!({ "check": "yes", "owner": "me" })),
            "A",
        ),
        req(
            "namespace unchecked",
            Create,
            namespace("n3", none.clone()),
            "A",
        ),
        req(
            "namespace update, checked",
            Update,
            namespace("checked", json!({ "check": "yes", "more": "x" })),
            "D",
        ),
        req(
            "secret, no owner (dryrun)",
            Create,
            json!({ "apiVersion": "v1", "kind": "Secret",
                    "metadata": meta("s1", Some(NS_OTHER), none.clone()) }),
            "X",
        ),
        req(
            "service in glob ns, no owner",
            Create,
            json!({ "apiVersion": "v1", "kind": "Service",
                    "metadata": meta("svc1", Some(NS_GLOB), none.clone()),
                    "spec": { "ports": [{ "port": 80 }] } }),
            "D",
        ),
        req(
            "deployment in exact ns, no owner",
            Create,
            json!({ "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": meta("d1", Some(NS_A), none.clone()),
                    "spec": { "selector": { "matchLabels": { "app": "d1" } },
                              "template": pod_template("d1") } }),
            "D",
        ),
        req(
            "deployment in other ns, no owner",
            Create,
            json!({ "apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": meta("d2", Some(NS_OTHER), none.clone()),
                    "spec": { "selector": { "matchLabels": { "app": "d2" } },
                              "template": pod_template("d2") } }),
            "A",
        ),
        req(
            "lease, plain",
            Create,
            lease("l1", NS_OTHER, none.clone()),
            "A",
        ),
        req(
            "lease, bad",
            Create,
            lease("l2", NS_OTHER, bad.clone()),
            "W",
        ),
        req(
            "clusterrole, bad",
            Create,
            json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                    "metadata": meta("cr1", None, bad.clone()), "rules": [] }),
            "W",
        ),
    ];
    // Subresources: their request.kind is Pod, but Gatekeeper's rule (`resources: ["*"]`)
    // matches no subresource, so no constraint applies to them in its shape; the narrowed
    // shape must not start enforcing there (a kubelet's status update of a Pod that violates
    // must not be refused).
    for (name, pod_name, ns, sub, expect) in [
        ("pods/status, no owner", "bare", NS_A, "status", "A"),
        ("pods/status, owner", "owned", NS_A, "status", "A"),
        ("pods/status, other ns", "bare", NS_OTHER, "status", "A"),
        (
            "pods/status, bad (no kinds)",
            "flagged",
            NS_OTHER,
            "status",
            "A",
        ),
        (
            "pods/ephemeralcontainers, no owner",
            "bare",
            NS_A,
            "ephemeralcontainers",
            "A",
        ),
        (
            "pods/ephemeralcontainers, owner",
            "owned",
            NS_A,
            "ephemeralcontainers",
            "A",
        ),
        (
            "pods/ephemeralcontainers, bad (no kinds)",
            "flagged",
            NS_OTHER,
            "ephemeralcontainers",
            "A",
        ),
    ] {
        m.push(Req {
            subresource: Some(sub),
            ..req(name, Verb::Update, pod(pod_name, ns, json!(null)), expect)
        });
    }
    // Exempt in the narrowed shape: the lease namespace, and a namespace labelled
    // `admission.gatekeeper.sh/ignore`.
    for (name, obj) in [
        (
            "configmap bad, ignored ns",
            configmap("c9", NS_IGNORED, bad.clone()),
        ),
        ("lease bad, lease ns", lease("l9", LEASE_NS, bad.clone())),
    ] {
        m.push(Req {
            exempt: true,
            ..req(name, Verb::Create, obj, "W")
        });
    }
    m
}

/// What the server answered to one request, as compared between shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Verdict {
    code: u16,
    message: String,
    warnings: Vec<String>,
    /// The `validation_failure` audit annotation (a dryrun binding's verdict).
    audit: Option<String>,
}

impl Verdict {
    fn category(&self) -> String {
        let mut c = String::new();
        if !(200..300).contains(&self.code) {
            c.push('D');
        }
        if !self.warnings.is_empty() {
            c.push('W');
        }
        if self.audit.is_some() {
            c.push('X');
        }
        if c.is_empty() {
            c.push('A');
        }
        c
    }

    fn admitted(&self) -> bool {
        self.category() == "A"
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.category(), self.code)?;
        if !self.message.is_empty() {
            write!(f, " {:?}", self.message)?;
        }
        for w in &self.warnings {
            write!(f, " warn:{w:?}")?;
        }
        if let Some(a) = &self.audit {
            write!(f, " audit:{a}")?;
        }
        Ok(())
    }
}

const AUDIT_ANNOTATION: &str = "validation.policy.admission.k8s.io/validation_failure";

/// Sends `r` as a server-side dry-run (admission runs, nothing is stored), with an `Audit-ID`
/// of its own so the audit event (and a dryrun binding's annotation) can be found.
async fn send(env: &TestEnv, client: &kube::Client, r: &Req, audit_id: &str) -> Verdict {
    let res = resolve(client, &r.obj).await;
    let ns = r.obj["metadata"]["namespace"].as_str();
    let name = r.obj["metadata"]["name"].as_str().expect("a name");
    let base = kube::api::DynamicObject::url_path(&res.resource, ns.filter(|_| res.namespaced));
    let (method, path, body) = match r.verb {
        Verb::Create => ("POST", base, Some(r.obj.clone())),
        Verb::Delete => ("DELETE", format!("{base}/{name}"), None),
        Verb::Update => {
            // Read the live object, change what the request changes, send it back whole.
            let live = kubectl_vap::admission::dryrun::get(client, &res, ns, name)
                .await
                .expect("get");
            assert!(
                live.ok(),
                "{}: reading the live object: {:?}",
                r.name,
                live.body
            );
            let mut obj = live.body;
            match r.subresource {
                Some("status") => {
                    obj["status"]["conditions"] = json!([{ "type": "E2EShape", "status": "True" }]);
                }
                Some("ephemeralcontainers") => {
                    obj["spec"]["ephemeralContainers"] = json!([{ "name": "debug",
                        "image": "registry.invalid/debug:1", "terminationMessagePolicy": "File",
                        "imagePullPolicy": "IfNotPresent" }]);
                }
                _ => {
                    if let Some(labels) = r.obj["metadata"]["labels"].as_object() {
                        for (k, v) in labels {
                            obj["metadata"]["labels"][k] = v.clone();
                        }
                    }
                }
            }
            let path = match r.subresource {
                Some(sub) => format!("{base}/{name}/{sub}"),
                None => format!("{base}/{name}"),
            };
            ("PUT", path, Some(obj))
        }
    };
    let body = body.map_or_else(Vec::new, |b| serde_json::to_vec(&b).expect("json"));
    let req = http::Request::builder()
        .method(method)
        .uri(format!("{path}?dryRun=All"))
        .header("Content-Type", "application/json")
        .header("Audit-ID", audit_id)
        .body(body)
        .expect("request");
    let reply = kubectl_vap::admission::dryrun::send(client, req)
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", r.name));
    let mut warnings = reply.warnings.clone();
    warnings.sort();
    Verdict {
        code: reply.code,
        message: reply.status_message().unwrap_or_default().to_string(),
        warnings,
        audit: audit_annotation(env, audit_id).await,
    }
}

/// The `validation_failure` annotation of the audit event `audit_id` (the log is written when
/// the request completes; a moment's grace for the file).
async fn audit_annotation(env: &TestEnv, audit_id: &str) -> Option<String> {
    for _ in 0..20 {
        let event = env
            .audit_events()
            .into_iter()
            .find(|e| e["auditID"] == audit_id && e["stage"] == "ResponseComplete");
        if let Some(e) = event {
            return e["annotations"][AUDIT_ANNOTATION]
                .as_str()
                .map(str::to_string);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no audit event {audit_id}")
}

/// The matrix's verdicts on `env`, by request name.
async fn table(env: &TestEnv, round: usize) -> BTreeMap<&'static str, Verdict> {
    let client = env.client_admin().await;
    let mut out = BTreeMap::new();
    for (i, r) in matrix().iter().enumerate() {
        let id = format!("e2e-shape-{round}-{i}-{}", env.unique_name("r"));
        out.insert(r.name, send(env, &client, r, &id).await);
    }
    out
}

fn render(t: &BTreeMap<&'static str, Verdict>) -> String {
    t.iter().map(|(k, v)| format!("  {k:<40} {v}\n")).collect()
}

type Table = BTreeMap<&'static str, Verdict>;

/// Polls the matrix on `env` until every request's category is what Gatekeeper's shape gives
/// (so the admission plugin has seen every object), the exempt ones admitted when
/// `exempt_admitted`; `Err` with what is still wrong and the last table after [`SETTLE`].
async fn settled(
    env: &TestEnv,
    exempt_admitted: bool,
    gatekeepers: bool,
) -> Result<Table, (String, Table)> {
    let deadline = Instant::now() + SETTLE;
    let mut round = 0;
    loop {
        let t = table(env, round).await;
        let wrong: Vec<String> = matrix()
            .iter()
            .filter_map(|r| {
                let v = &t[r.name];
                let want = match (r.exempt && exempt_admitted, r.gatekeeper) {
                    (true, _) => "A",
                    (false, Some(g)) if gatekeepers => g,
                    _ => r.expect,
                };
                (v.category() != want).then(|| format!("  {} (want {want}, got {v})", r.name))
            })
            .collect();
        if wrong.is_empty() {
            return Ok(t);
        }
        if Instant::now() > deadline {
            return Err((wrong.join("\n"), t));
        }
        round += 1;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The rows where the two tables differ (the exempt rows: the narrowed shape admits where
/// Gatekeeper's does not, when `exempt_admitted`).
fn differences(gk: &Table, narrow: &Table, exempt_admitted: bool) -> Vec<String> {
    let rows = matrix();
    let exempt: Vec<&str> = rows.iter().filter(|r| r.exempt).map(|r| r.name).collect();
    let mut diff = Vec::new();
    for (name, g) in gk {
        let Some(n) = narrow.get(name) else { continue };
        let by_design = rows
            .iter()
            .find(|r| r.name == *name && r.gatekeeper.is_some());
        let same = if exempt.contains(name) && exempt_admitted {
            n.admitted() && !g.admitted()
        } else if let Some(r) = by_design {
            n.category() == r.expect
        } else {
            g == n
        };
        if !same {
            diff.push(format!(
                "  {name}\n    gatekeeper: {g}\n    narrowed:   {n}"
            ));
        }
    }
    diff
}

/// The narrowed shape really is narrower: every binding of a constraint that names kinds has
/// `resourceRules`, and no VAP whose constraints all name kinds matches `*`.
async fn assert_narrowed(client: &kube::Client) {
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("bindings");
    let rules_of = |name: &str| {
        bindings
            .items
            .iter()
            .find(|b| b.metadata.name.as_deref() == Some(name))
            .and_then(|b| {
                b.spec
                    .as_ref()?
                    .match_resources
                    .as_ref()?
                    .resource_rules
                    .clone()
            })
            .unwrap_or_default()
    };
    for (kind, name, spec) in constraints() {
        let b = support::objects::binding_name(kind, name);
        let rules = rules_of(&b);
        if spec["match"]["kinds"].is_array() {
            assert!(
                !rules.is_empty()
                    && rules.iter().all(|r| r
                        .resources
                        .as_ref()
                        .is_some_and(|rs| !rs.iter().any(|x| x.starts_with('*')))),
                "binding {b} is not narrowed to its kinds: {rules:?}"
            );
        }
    }
    let policies = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("policies");
    for kind in [LABELS_KIND, PROTECT_KIND] {
        let name = support::objects::policy_name(kind);
        let p = policies
            .items
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(&name))
            .unwrap_or_else(|| panic!("no VAP {name}"));
        let mc = p.spec.as_ref().and_then(|s| s.match_constraints.clone());
        let rules = mc
            .as_ref()
            .and_then(|m| m.resource_rules.clone())
            .unwrap_or_default();
        assert!(
            !rules.is_empty()
                && rules.iter().all(|r| r
                    .resources
                    .as_ref()
                    .is_some_and(|rs| !rs.iter().any(|x| x.starts_with('*')))),
            "VAP {name}'s matchConstraints are not narrowed: {mc:?}"
        );
        assert!(
            mc.and_then(|m| m.namespace_selector)
                .and_then(|s| s.match_expressions)
                .is_some_and(|e| !e.is_empty()),
            "VAP {name} does not exclude the exempt namespaces"
        );
    }
}

/// The differential: the same world on two API servers, one converged with each shape; every
/// request of the matrix gets the same verdict (status, message, warnings, audit annotation)
/// from both, except in the namespaces the narrowed shape exempts, where it admits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_narrowed_policies_admit_warn_and_deny_exactly_as_gatekeepers_shape() {
    let (gk, narrow, inline) = tokio::join!(
        tokio::task::spawn_blocking(TestEnv::start_audited),
        tokio::task::spawn_blocking(TestEnv::start_audited),
        tokio::task::spawn_blocking(TestEnv::start_audited),
    );
    let (gk, narrow, inline) = (gk.expect("env"), narrow.expect("env"), inline.expect("env"));
    for env in [&gk, &narrow, &inline] {
        build_world(env).await;
    }
    // The binary, blocking: off the runtime's workers.
    std::thread::scope(|s| {
        s.spawn(|| converge(&gk, "gatekeeper"));
        s.spawn(|| converge(&narrow, "narrowed"));
        s.spawn(|| converge(&inline, "inline"));
    });

    // The narrowed objects really are narrower (else the comparison proves nothing).
    assert_narrowed(&narrow.client_admin().await).await;
    // The narrowed shape admits in the exempt namespaces.
    let exempt_admitted = true;
    let want_gk = settled(&gk, false, true).await.unwrap_or_else(|(wrong, t)| {
        panic!(
            "Gatekeeper's shape: the verdicts are not what the constraints say after {SETTLE:?}:\n{wrong}\ntable:\n{}",
            render(&t)
        )
    });
    // Non-trivial: each kind of verdict is there.
    let cats: Vec<String> = want_gk.values().map(Verdict::category).collect();
    for c in ["A", "W", "D", "DW", "X"] {
        assert!(
            cats.iter().any(|x| x == c),
            "no {c} verdict in the table:\n{}",
            render(&want_gk)
        );
    }
    let narrow_table = match settled(&narrow, exempt_admitted, false).await {
        Ok(t) => t,
        Err((wrong, t)) => panic!(
            "the narrowed shape does not settle on Gatekeeper's verdicts after {SETTLE:?}:\n{wrong}\n\ndifferences:\n{}\n\ngatekeeper shape:\n{}\nnarrowed shape:\n{}",
            differences(&want_gk, &t, exempt_admitted).join("\n"),
            render(&want_gk),
            render(&t)
        ),
    };
    let diff = differences(&want_gk, &narrow_table, exempt_admitted);
    assert!(
        diff.is_empty(),
        "the shapes differ:\n{}\n\ngatekeeper shape:\n{}\nnarrowed shape:\n{}",
        diff.join("\n"),
        render(&want_gk),
        render(&narrow_table)
    );

    // The inline shape (issue 29): the same verdicts, its VAPs one per constraint with no
    // paramKind; the servers' words name its VAPs, read here as their templates'.
    assert_inline(&inline.client_admin().await).await;
    let inline_table = match settled(&inline, exempt_admitted, false).await {
        Ok(t) => as_templates_policies(t),
        Err((wrong, t)) => panic!(
            "the inline shape does not settle on Gatekeeper's verdicts after {SETTLE:?}:\n{wrong}\n\ngatekeeper shape:\n{}\ninline shape:\n{}",
            render(&want_gk),
            render(&t)
        ),
    };
    let diff = differences(&want_gk, &inline_table, exempt_admitted);
    assert!(
        diff.is_empty(),
        "the inline shape differs:\n{}\n\ngatekeeper shape:\n{}\ninline shape:\n{}",
        diff.join("\n"),
        render(&want_gk),
        render(&inline_table)
    );
}

/// The inline VAPs' names (`gatekeeper-<lower kind>.<constraint>`) in a table's texts as their
/// templates' (`gatekeeper-<lower kind>`), so the tables compare on everything else.
fn as_templates_policies(mut t: Table) -> Table {
    let rename = |s: &mut String| {
        for (kind, name, _) in constraints() {
            let kind = kind.to_lowercase();
            *s = s.replace(
                &format!("gatekeeper-{kind}.{name}"),
                &format!("gatekeeper-{kind}"),
            );
        }
    };
    for v in t.values_mut() {
        rename(&mut v.message);
        v.warnings.iter_mut().for_each(rename);
        v.warnings.sort();
        if let Some(a) = v.audit.as_mut() {
            rename(a);
        }
    }
    t
}

/// The inline shape really is inline: a VAP per constraint of a generating template, none
/// with a paramKind, and no template's VAP left.
async fn assert_inline(client: &kube::Client) {
    let policies = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("policies");
    let names: Vec<&str> = policies
        .items
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    for (kind, name, _) in constraints() {
        let want = format!("gatekeeper-{}.{name}", kind.to_lowercase());
        assert!(names.contains(&want.as_str()), "no VAP {want}: {names:?}");
    }
    for kind in [LABELS_KIND, PROTECT_KIND, NOBAD_KIND] {
        let template_vap = support::objects::policy_name(kind);
        assert!(
            !names.contains(&template_vap.as_str()),
            "{template_vap} is still there"
        );
    }
    assert!(
        policies
            .items
            .iter()
            .all(|p| p.spec.as_ref().is_some_and(|s| s.param_kind.is_none())),
        "an inline VAP has a paramKind"
    );
}

// ---------------------------------------------------------------------------------------------
// The restart test.
// ---------------------------------------------------------------------------------------------

const RESTARTS: usize = 10;
/// How long Leases are created after the API server first answers, each restart.
const HAMMER: Duration = Duration::from_secs(8);
const EVERY: Duration = Duration::from_millis(50);

/// The shape under test: narrowed (the default); `E2E_POLICY_SHAPE=gatekeeper` runs the same
/// scenario on Gatekeeper's shape, by hand, to see the refusals the issue measured.
fn restart_shape() -> String {
    std::env::var("E2E_POLICY_SHAPE").unwrap_or_else(|_| "narrowed".into())
}

/// One request's outcome during a restart.
enum Outcome {
    /// Nothing answered (connection refused, TLS not up yet).
    Silent,
    Created,
    /// Any other answer: status and message.
    Refused(u16, String),
}

async fn create_lease(client: &kube::Client, ns: &str, name: &str) -> Outcome {
    let body = serde_json::to_vec(&lease(name, ns, json!({}))).expect("json");
    let req = http::Request::builder()
        .method("POST")
        .uri(format!(
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
        ))
        .header("Content-Type", "application/json")
        .body(body)
        .expect("request");
    match tokio::time::timeout(
        Duration::from_secs(5),
        kubectl_vap::admission::dryrun::send(client, req),
    )
    .await
    {
        Err(_) | Ok(Err(_)) => Outcome::Silent,
        Ok(Ok(r)) if r.ok() => Outcome::Created,
        Ok(Ok(r)) => Outcome::Refused(r.code, r.status_message().unwrap_or_default().into()),
    }
}

/// The policies' refusals: a 503 "not ready" or the like before the API server's own
/// informers sync is not one of them, and is reported apart.
fn by_policy(message: &str) -> bool {
    message.contains("ValidatingAdmissionPolicy")
        || message.contains("paramKind")
        || message.contains("binding")
}

/// The reconciler's Lease as `holder (transitions n)`: a renewal refused long enough to lose
/// it shows as a new transition even when the same copy takes it back.
async fn lease_state(client: &kube::Client) -> Option<String> {
    let l = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), LEASE_NS)
        .get_opt("restart")
        .await
        .ok()??;
    let spec = l.spec?;
    Some(format!(
        "{} (transitions {})",
        spec.holder_identity?,
        spec.lease_transitions.unwrap_or(0)
    ))
}

/// kube-apiserver restarted 10 times under a leading `kubectl-vap run` (the real binary): a
/// Lease in a namespace no constraint selects, created every 50 ms from the first moment the
/// server answers, is never refused, and the reconciler keeps its Lease. On Gatekeeper's shape
/// (`E2E_POLICY_SHAPE=gatekeeper`, by hand) the first requests after some restarts are refused
/// (`paramKind … not yet synced`): see docs/generation.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_restarting_apiserver_refuses_nothing_the_constraints_do_not_select() {
    let shape = restart_shape();
    let (env, client) = private_env(&[LEASE_NS, "probe", "elsewhere"]).await;
    // Two templates under failurePolicy Fail: one whose constraint selects Leases in `probe`,
    // one whose constraint selects ConfigMaps. Leases in `elsewhere` are selected by neither.
    let lease_kind = "RestartLeases";
    let cm_kind = "RestartConfigMaps";
    for (kind, c) in [
        (
            lease_kind,
            json!({ "match": { "kinds": [kinds("coordination.k8s.io", &["Lease"])],
                               "namespaces": ["probe"] },
                    "parameters": { "labels": ["owner"] } }),
        ),
        (
            cm_kind,
            json!({ "match": { "kinds": [kinds("", &["ConfigMap"])] },
                    "parameters": { "labels": ["owner"] } }),
        ),
    ] {
        let mut t = labels_template();
        t = gatekeeper::template(
            kind,
            "v1",
            t["spec"]["crd"]["spec"].clone(),
            t["spec"]["targets"].clone(),
        );
        cluster::create_template_and_crd(&client, &t).await;
        cluster::create_constraint(&client, &gatekeeper::constraint(kind, "only", c)).await;
    }

    // The reconciler, leading, in the background; its log kept.
    let log_path = env.dir().join("kubectl-vap-run.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut cmd = cli::kubectl_vap_narrowed();
    cmd.arg("--kubeconfig")
        .arg(env.kubeconfig_admin())
        .args(["--log", "info", "run", "--binding-wait=0s"])
        .args(["--lease-namespace", LEASE_NS, "--lease-name", "restart"])
        .stdout(Stdio::null())
        .stderr(log);
    cmd.arg(format!("--policy-shape={shape}"));
    let served = cli::Served::spawn(cmd);
    served
        .wait_ready(Duration::from_secs(120), support::poll::EVERY)
        .await;
    let holder =
        support::poll::eventually_some("the reconciler leads", SETTLE, || lease_state(&client))
            .await;
    // Both policies work: a Lease in `probe` and a ConfigMap without the label are denied.
    support::poll::eventually("both constraints deny", SETTLE, || async {
        let l = create_lease(&client, "probe", &env.unique_name("warm")).await;
        let c = kubectl_vap::admission::dryrun::create(
            &client,
            &resolve(&client, &configmap("x", "elsewhere", json!({}))).await,
            Some("elsewhere"),
            &configmap(&env.unique_name("warm"), "elsewhere", json!({})),
        )
        .await
        .expect("configmap");
        // A VAP's denial is 422 (Invalid) here; any policy refusal will do.
        let lease_denied = matches!(&l, Outcome::Refused(_, m) if by_policy(m));
        lease_denied && c.status_message().is_some_and(by_policy)
    })
    .await;

    let mut report = Vec::new();
    let mut first_refusal: Option<String> = None;
    for restart in 0..RESTARTS {
        env.stop_apiserver().await;
        env.spawn_apiserver_again().expect("spawn kube-apiserver");
        // Silent until it answers (bounded); then a create every 50 ms for HAMMER.
        let spawned = Instant::now();
        let mut answered: Option<Instant> = None;
        let (mut created, mut refused, mut other) = (0, 0, Vec::new());
        let mut n = 0;
        loop {
            if let Some(status) = env.apiserver_exited() {
                panic!("kube-apiserver exited ({status}):\n{}", env.logs_tail());
            }
            if answered.is_some_and(|t| t.elapsed() > HAMMER) {
                break;
            }
            assert!(
                spawned.elapsed() < Duration::from_secs(120),
                "kube-apiserver did not answer within 120 s:\n{}",
                env.logs_tail()
            );
            n += 1;
            let name = format!("r{restart}-{n}");
            match create_lease(&client, "elsewhere", &name).await {
                Outcome::Silent => {}
                Outcome::Created => {
                    answered.get_or_insert_with(Instant::now);
                    created += 1;
                }
                Outcome::Refused(code, msg) => {
                    answered.get_or_insert_with(Instant::now);
                    if by_policy(&msg) {
                        refused += 1;
                        first_refusal.get_or_insert(format!("restart {restart}: {code} {msg}"));
                    } else {
                        other.push(format!("{code} {msg}"));
                    }
                }
            }
            tokio::time::sleep(EVERY).await;
        }
        let now = lease_state(&client).await;
        report.push(format!(
            "restart {restart}: {created} created, {refused} refused by a policy, {} other answers {:?}; holder {now:?}",
            other.len(),
            other.iter().take(3).collect::<Vec<_>>()
        ));
        eprintln!("{}", report.last().expect("a line"));
        assert!(
            first_refusal.is_none(),
            "shape {shape}: a Lease no constraint selects was refused: {}\n{}",
            first_refusal.unwrap_or_default(),
            report.join("\n")
        );
        assert!(
            created > 0,
            "restart {restart}: no Lease was created\n{}",
            report.join("\n")
        );
        assert_eq!(
            now.as_deref(),
            Some(holder.as_str()),
            "shape {shape}: the reconciler lost its Lease at restart {restart}\n{}",
            report.join("\n")
        );
    }
    // The reconciler kept its Lease, and none of its writes was refused by a policy.
    let after = lease_state(&client).await;
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let refused_writes: Vec<&str> = log
        .lines()
        // What the API server says when a policy refuses a request (the reconciler's own log
        // names the VAPs it writes, so the kind alone proves nothing).
        .filter(|l| l.contains("denied request") || l.contains("failed to configure"))
        .collect();
    drop(served);
    assert_eq!(
        after.as_deref(),
        Some(holder.as_str()),
        "shape {shape}: the reconciler lost its Lease\n{}",
        report.join("\n")
    );
    assert!(
        refused_writes.is_empty(),
        "shape {shape}: the reconciler's writes were refused by a policy:\n{}",
        refused_writes.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// The restart test for selected requests (issue 29).
// ---------------------------------------------------------------------------------------------

/// Restarts of the selected-requests test: the first half stopped with SIGTERM (graceful
/// shutdown), the second killed with SIGKILL.
const SELECTED_RESTARTS: usize = 10;

/// How long requests are sent after the API server first answers, each restart
/// (`E2E_RESTART_PROBE_SECS`, default 10: the refusals measured in issue 29 began with the
/// first answer and lasted up to 33 s, so a window shows within the first seconds).
fn probe_time() -> Duration {
    let secs = std::env::var("E2E_RESTART_PROBE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    Duration::from_secs(secs)
}

/// The shape of the selected-requests test: the default's (`run` without the flag), or
/// `E2E_POLICY_SHAPE` (narrowed, gatekeeper: by hand, to measure their windows).
fn selected_shape() -> Option<String> {
    std::env::var("E2E_POLICY_SHAPE").ok()
}

/// One dry-run create: `Ok(None)` admitted, `Ok(Some(message))` refused, `Err(())` no answer.
async fn dry_create(
    client: &kube::Client,
    obj: &Value,
    plural: &str,
) -> Result<Option<String>, ()> {
    let ns = obj["metadata"]["namespace"].as_str().expect("namespaced");
    let body = serde_json::to_vec(obj).expect("json");
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("/api/v1/namespaces/{ns}/{plural}?dryRun=All"))
        .header("Content-Type", "application/json")
        .body(body)
        .expect("request");
    match tokio::time::timeout(
        Duration::from_secs(5),
        kubectl_vap::admission::dryrun::send(client, req),
    )
    .await
    {
        Err(_) | Ok(Err(_)) => Err(()),
        Ok(Ok(r)) if r.ok() => Ok(None),
        Ok(Ok(r)) => Ok(Some(format!(
            "{} {}",
            r.code,
            r.status_message().unwrap_or_default()
        ))),
    }
}

/// What one restart saw, from the first answer on.
#[derive(Default)]
struct Probed {
    rounds: usize,
    /// Compliant requests refused by a policy (the window): the first message and a count.
    compliant_refused: Vec<String>,
    /// Violating requests admitted.
    violating_admitted: Vec<String>,
    /// Refusals not by a policy (the admission plugin not ready yet: it refuses every
    /// request, policy or none), counted apart.
    not_ready: usize,
    /// Seconds from the first answer to the last compliant refusal, if any.
    window: Option<f64>,
}

/// kube-apiserver stopped and started again 10 times (5 SIGTERM, 5 SIGKILL) under a leading
/// `kubectl-vap run` with its defaults, two `failurePolicy: Fail` templates requiring a label,
/// one constraint selecting ConfigMaps and one selecting Pods in namespace `probe`: from the
/// first moment the server answers, a compliant ConfigMap and Pod are never refused by a policy
/// and a violating one is never admitted (server-side dry runs every ~100 ms for
/// `E2E_RESTART_PROBE_SECS`). On the narrowed shape (`E2E_POLICY_SHAPE=narrowed`, by hand)
/// compliant requests are refused after SIGTERM restarts (`failed to configure policy`, issue
/// 29); the report says for how long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_restarting_apiserver_judges_selected_requests_from_its_first_answer() {
    let shape = selected_shape();
    let label = shape.clone().unwrap_or_else(|| "the default".into());
    let (env, client) = private_env(&[LEASE_NS, "probe"]).await;
    for (kind, resource) in [("SelectedConfigMaps", "ConfigMap"), ("SelectedPods", "Pod")] {
        let t = labels_template();
        let t = gatekeeper::template(
            kind,
            "v1",
            t["spec"]["crd"]["spec"].clone(),
            t["spec"]["targets"].clone(),
        );
        cluster::create_template_and_crd(&client, &t).await;
        let spec = json!({ "match": { "kinds": [kinds("", &[resource])], "namespaces": ["probe"] },
                           "parameters": { "labels": ["owner"] } });
        cluster::create_constraint(&client, &gatekeeper::constraint(kind, "owner", spec)).await;
    }
    let mut cmd = cli::kubectl_vap_defaults();
    cmd.arg("--kubeconfig")
        .arg(env.kubeconfig_admin())
        .args([
            "run",
            "--lease-namespace",
            LEASE_NS,
            "--lease-name",
            "selected",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(shape) = &shape {
        cmd.arg(format!("--policy-shape={shape}"));
    }
    let served = cli::Served::spawn(cmd);
    served
        .wait_ready(Duration::from_secs(120), support::poll::EVERY)
        .await;
    let compliant_cm = |n: usize| configmap(&format!("ok-{n}"), "probe", json!({"owner": "me"}));
    let violating_cm = |n: usize| configmap(&format!("bad-{n}"), "probe", json!({}));
    let compliant_pod = |n: usize| pod(&format!("ok-{n}"), "probe", json!({"owner": "me"}));
    let violating_pod = |n: usize| pod(&format!("bad-{n}"), "probe", json!({}));
    // Enforced before the first restart (the binding-wait included).
    support::poll::eventually("both constraints deny and admit", SETTLE, || async {
        dry_create(&client, &violating_cm(0), "configmaps")
            .await
            .is_ok_and(|r| r.is_some_and(|m| by_policy(&m)))
            && dry_create(&client, &violating_pod(0), "pods")
                .await
                .is_ok_and(|r| r.is_some_and(|m| by_policy(&m)))
            && dry_create(&client, &compliant_cm(0), "configmaps").await == Ok(None)
            && dry_create(&client, &compliant_pod(0), "pods").await == Ok(None)
    })
    .await;

    let mut report = Vec::new();
    let mut failed = false;
    for restart in 0..SELECTED_RESTARTS {
        let how = if restart < SELECTED_RESTARTS / 2 {
            env.stop_apiserver().await;
            "SIGTERM"
        } else {
            env.kill_apiserver().await;
            "SIGKILL"
        };
        env.spawn_apiserver_again().expect("spawn kube-apiserver");
        let spawned = Instant::now();
        let mut first: Option<Instant> = None;
        let mut p = Probed::default();
        let mut n = 0;
        while first.is_none_or(|t| t.elapsed() < probe_time()) {
            if let Some(status) = env.apiserver_exited() {
                panic!("kube-apiserver exited ({status}):\n{}", env.logs_tail());
            }
            assert!(
                spawned.elapsed() < Duration::from_secs(120),
                "kube-apiserver did not answer within 120 s:\n{}",
                env.logs_tail()
            );
            n += 1;
            let requests = [
                (true, compliant_cm(n), "configmaps"),
                (false, violating_cm(n), "configmaps"),
                (true, compliant_pod(n), "pods"),
                (false, violating_pod(n), "pods"),
            ];
            for (compliant, obj, plural) in requests {
                let Ok(answer) = dry_create(&client, &obj, plural).await else {
                    continue;
                };
                let at = *first.get_or_insert_with(Instant::now);
                let what = format!("{} {}", obj["kind"], obj["metadata"]["name"]);
                match (compliant, answer) {
                    (true, Some(m)) if by_policy(&m) => {
                        p.window = Some(at.elapsed().as_secs_f64());
                        p.compliant_refused.push(format!("{what}: {m}"));
                    }
                    (true, Some(_)) => p.not_ready += 1,
                    (false, None) => p.violating_admitted.push(what),
                    (false, Some(_)) | (true, None) => {}
                }
            }
            if first.is_some() {
                p.rounds += 1;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let line = format!(
            "restart {restart} ({how}): {} rounds; compliant refused by a policy: {}{}; violating admitted: {}; compliant refused while not ready: {}{}",
            p.rounds,
            p.compliant_refused.len(),
            p.window
                .map(|w| format!(" (the last {w:.1} s after the first answer)"))
                .unwrap_or_default(),
            p.violating_admitted.len(),
            p.not_ready,
            p.compliant_refused
                .first()
                .map(|m| format!("; first: {m}"))
                .unwrap_or_default(),
        );
        eprintln!("{line}");
        failed |= !p.compliant_refused.is_empty() || !p.violating_admitted.is_empty();
        report.push(line);
    }
    drop(served);
    assert!(
        !failed,
        "shape {label}: selected requests were judged wrongly after a restart:\n{}",
        report.join("\n")
    );
}

/// Strings a careless generator would turn into CEL of its own, and the numbers at the edges
/// of CEL's types (the inline shape writes parameters into the policy's CEL).
fn hostile_strings() -> Vec<&'static str> {
    vec![
        "a\"b",
        "back\\slash",
        "line\nbreak\ttab\rreturn",
        "\") || true || (\"",
        "' + 'x",
        "${x}",
        "é€😀",
        "nul\u{0}and\u{7f}del",
    ]
}

/// The inline shape's literals, judged by the real API server: a VAP whose parameters hold
/// hostile strings and the edges of CEL's numbers is accepted (its CEL compiles), and denies a
/// ConfigMap holding exactly one of those strings, admits one holding anything else, and sees
/// the numbers with their types (`int` at int64's minimum, `double` beyond it, a mixed list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_inline_parameters_reach_the_api_server_as_written() {
    let env = TestEnv::shared();
    let client = env.client_admin().await;
    let ns = env.create_namespace("inline").await;
    let kind = env.unique_kind("InlineHostile");
    let validations = json!([
        { "expression": "!has(object.data) || !object.data.exists(k, object.data[k] in variables.params.forbidden)",
          "message": "a forbidden value" },
        { "expression": "type(variables.params.min) == int && variables.params.min < 0 && type(variables.params.beyond) == double && variables.params.beyond > 9223372036854775807.0 && type(variables.params.half) == double && size(variables.params.mixed) == 3 && variables.params.none == null",
          "message": "the numbers arrived with other types" }
    ]);
    let t = gatekeeper::template(
        &kind,
        "v1",
        json!({}),
        gatekeeper::cel_targets(json!({ "generateVAP": true, "validations": validations })),
    );
    let mut t = t;
    t["metadata"]["uid"] = json!("uid-template");
    let params = json!({
        "forbidden": hostile_strings(),
        "min": i64::MIN,
        "beyond": u64::MAX,
        "half": 0.5,
        "mixed": [1, "two", {"three": [3.0]}],
        "none": null,
    });
    let mut c = gatekeeper::constraint(
        &kind,
        "hostile",
        json!({ "match": { "kinds": [kinds("", &["ConfigMap"])], "namespaces": [ns] },
                "parameters": params }),
    );
    c["metadata"]["uid"] = json!("uid-constraint");
    // The plan of an offline snapshot, applied as it is: the VAP needs no template, CRD or
    // param on the server.
    let opts = kubectl_vap::core::Options {
        policy_shape: kubectl_vap::core::PolicyShape::Inline,
        ..kubectl_vap::load::cel::default_options()
    };
    let plan = kubectl_vap::core::analyze(&support::objects::snapshot(vec![t, c]), &opts).plan;
    let vap = plan
        .iter()
        .find(|w| w.object.kind == "ValidatingAdmissionPolicy")
        .and_then(|w| w.body.clone())
        .expect("a VAP");
    let binding = plan
        .iter()
        .find(|w| w.object.kind == "ValidatingAdmissionPolicyBinding")
        .and_then(|w| w.body.clone())
        .expect("a binding");
    let vaps = cluster::policies(&client);
    vaps.create(
        &Default::default(),
        &serde_json::from_value(vap).expect("VAP"),
    )
    .await
    .expect("the API server accepts the inline VAP (its CEL compiles)");
    cluster::bindings(&client)
        .create(
            &Default::default(),
            &serde_json::from_value(binding).expect("binding"),
        )
        .await
        .expect("binding");
    let cm = |n: &str, v: &str| {
        json!({ "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": n, "namespace": ns }, "data": { "v": v } })
    };
    // In force: a ConfigMap with the first hostile string is denied.
    support::poll::eventually("the inline VAP denies", SETTLE, || async {
        dry_create(&client, &cm("probe", hostile_strings()[0]), "configmaps")
            .await
            .is_ok_and(|r| r.is_some_and(|m| m.contains("a forbidden value")))
    })
    .await;
    for (i, v) in hostile_strings().into_iter().enumerate() {
        let r = dry_create(&client, &cm(&format!("h{i}"), v), "configmaps")
            .await
            .expect("an answer");
        assert!(
            r.as_deref()
                .is_some_and(|m| m.contains("a forbidden value")),
            "{v:?} is one of the parameters, yet: {r:?}"
        );
    }
    for v in ["fine", "a\\\"b", "\")"] {
        let r = dry_create(&client, &cm("fine", v), "configmaps")
            .await
            .expect("an answer");
        assert_eq!(r, None, "{v:?} is not a parameter");
    }
}

/// `--emit-admission-audit-annotations`, on the real API server with an audit log, in the
/// narrowed and the inline shapes: a violating request's audit event holds the failed
/// validation (`Audit` beside `Deny`) and the constraint that evaluated it
/// (`<VAP>/constraint: Kind/name`), and a compliant one's the constraint alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_admission_audit_annotations_name_the_constraint_and_the_failure() {
    let env = tokio::task::spawn_blocking(TestEnv::start_audited)
        .await
        .expect("env");
    let client = env.client_admin().await;
    gatekeeper::install_gatekeeper_crds(&client)
        .await
        .expect("template CRD");
    for ns in [LEASE_NS, "audited"] {
        testenv::ensure_namespace(&client, ns).await.expect("ns");
    }
    cluster::create_template_and_crd(&client, &labels_template()).await;
    let spec = json!({ "match": { "kinds": [kinds("", &["ConfigMap"])], "namespaces": ["audited"] },
                       "parameters": { "labels": ["owner"] } });
    cluster::create_constraint(&client, &gatekeeper::constraint(LABELS_KIND, "owned", spec)).await;
    let lower = LABELS_KIND.to_lowercase();
    for (shape, vap) in [
        ("narrowed", format!("gatekeeper-{lower}")),
        ("inline", format!("gatekeeper-{lower}.owned")),
    ] {
        let mut cmd = cli::kubectl_vap_narrowed();
        cmd.arg("--kubeconfig").arg(env.kubeconfig_admin()).args([
            "run",
            "--once",
            "--binding-wait=0s",
            "--lease-namespace",
            LEASE_NS,
            "--emit-admission-audit-annotations",
        ]);
        cmd.arg(format!("--policy-shape={shape}"));
        let out = cli::output(&mut cmd);
        assert!(out.status.success(), "{shape}: {}", cli::stderr(&out));
        let key = format!("{vap}/constraint");
        // Each request: its own audit ID, its event read back.
        let event =
            |labelled: bool, n: usize| {
                let (env, client, shape) = (&env, &client, shape);
                async move {
                    let labels = if labelled {
                        json!({ "owner": "me" })
                    } else {
                        json!({})
                    };
                    let id = format!("e2e-audit-{shape}-{labelled}-{n}");
                    let obj = configmap(&format!("a{n}"), "audited", labels);
                    let req = http::Request::builder()
                        .method("POST")
                        .uri("/api/v1/namespaces/audited/configmaps?dryRun=All")
                        .header("Content-Type", "application/json")
                        .header("Audit-ID", &id)
                        .body(serde_json::to_vec(&obj).expect("json"))
                        .expect("request");
                    let reply = kubectl_vap::admission::dryrun::send(client, req)
                        .await
                        .expect("an answer");
                    for _ in 0..20 {
                        if let Some(e) = env.audit_events().into_iter().find(|e| {
                            e["auditID"] == id.as_str() && e["stage"] == "ResponseComplete"
                        }) {
                            return (reply.ok(), e["annotations"].clone());
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    panic!("no audit event {id}")
                }
            };
        let mut n = 0;
        let (admitted, annotations) = support::poll::eventually_some(
            &format!("{shape}: the policy in force"),
            SETTLE,
            || {
                n += 1;
                let e = event(false, n);
                let key = key.clone();
                async move {
                    let (admitted, a) = e.await;
                    (!admitted && a.get(&key).is_some()).then_some((admitted, a))
                }
            },
        )
        .await;
        assert!(!admitted);
        assert_eq!(
            annotations[&key],
            json!(format!("{LABELS_KIND}/owned")),
            "{shape}: {annotations}"
        );
        let failure = annotations[AUDIT_ANNOTATION].as_str().unwrap_or_default();
        assert!(
            failure.contains("\"Deny\"")
                && failure.contains("\"Audit\"")
                && failure.contains("missing labels: owner"),
            "{shape}: the failed validation in the audit event: {annotations}"
        );
        let (admitted, annotations) = event(true, 0).await;
        assert!(admitted, "{shape}: a compliant ConfigMap is admitted");
        assert_eq!(annotations[&key], json!(format!("{LABELS_KIND}/owned")));
        assert!(annotations.get(AUDIT_ANNOTATION).is_none());
    }
}

// ---------------------------------------------------------------------------------------------
// Gatekeeper's Config.
// ---------------------------------------------------------------------------------------------

/// An API server of the test's own (a restart or a cluster-wide read must not touch the
/// shared one), with the ConstraintTemplate CRD and `namespaces`.
async fn private_env(namespaces: &[&str]) -> (TestEnv, kube::Client) {
    let env = tokio::task::spawn_blocking(TestEnv::start)
        .await
        .expect("env");
    let client = env.client_admin().await;
    gatekeeper::install_gatekeeper_crds(&client)
        .await
        .expect("template CRD");
    for ns in namespaces {
        testenv::ensure_namespace(&client, ns).await.expect("ns");
    }
    (env, client)
}

/// Whether a ConfigMap without labels in `ns` is refused by a policy (dry run).
async fn configmap_denied(client: &kube::Client, ns: &str) -> bool {
    let cm = configmap("probe", ns, json!({}));
    let reply =
        kubectl_vap::admission::dryrun::create(client, &resolve(client, &cm).await, Some(ns), &cm)
            .await
            .expect("dry-run create");
    reply.status_message().is_some_and(by_policy)
}

/// Gatekeeper's Config excludes namespaces from its webhook (`spec.match[]` with `processes`
/// `webhook` or `*`): the narrowed VAPs leave them out, exact names and globs, and not the
/// namespaces excluded from other processes only; a change of the Config is followed by the
/// running reconciler. Without the feature, `cfg-exact` and `cfg-glob-1` are denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_gatekeepers_config_exclusions_are_exempt_and_followed() {
    // A private server: the reconciler reads Configs cluster-wide.
    let gk_ns = kubectl_vap::core::options::DEFAULT_GATEKEEPER_NAMESPACE;
    let (_env, client) =
        private_env(&[LEASE_NS, gk_ns, "cfg-exact", "cfg-glob-1", "cfg-audit-only"]).await;
    gatekeeper::install_config_crd(&client)
        .await
        .expect("Config CRD");
    let kind = "ConfigExcluded";
    let t = labels_template();
    let t = gatekeeper::template(
        kind,
        "v1",
        t["spec"]["crd"]["spec"].clone(),
        t["spec"]["targets"].clone(),
    );
    cluster::create_template_and_crd(&client, &t).await;
    cluster::create_constraint(
        &client,
        &gatekeeper::constraint(
            kind,
            "all",
            json!({ "match": { "kinds": [kinds("", &["ConfigMap"])] },
                    "parameters": { "labels": ["owner"] } }),
        ),
    )
    .await;
    let configs: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        gk_ns,
        &kubectl_vap::cluster::discovery::gatekeeper_config_resource(),
    );
    let config = |excluded: Value| {
        json!({
            "apiVersion": "config.gatekeeper.sh/v1alpha1", "kind": "Config",
            "metadata": { "name": "config", "namespace": gk_ns },
            "spec": { "match": [
                { "excludedNamespaces": excluded, "processes": ["webhook"] },
                { "excludedNamespaces": ["cfg-audit-only"], "processes": ["audit"] }
            ] }
        })
    };
    let apply_config = |v: Value| {
        let configs = configs.clone();
        async move {
            configs
                .patch(
                    "config",
                    &kube::api::PatchParams::apply("e2e").force(),
                    &kube::api::Patch::Apply(v),
                )
                .await
                .expect("apply the Config");
        }
    };
    apply_config(config(json!(["cfg-exact", "cfg-glob-*"]))).await;

    // The narrowed shape by name: the test reads the template's one VAP.
    let mut opts = kubectl_vap::core::Options {
        binding_wait: Duration::ZERO,
        policy_shape: kubectl_vap::core::PolicyShape::Narrowed,
        ..kubectl_vap::load::cel::default_options()
    };
    opts.exemptions = kubectl_vap::core::Exemptions::lease_namespace(LEASE_NS);
    let r = support::reconciler::start(
        client.clone(),
        support::reconciler::Start::on(LEASE_NS, "config-e2e", opts),
    )
    .await;

    // The policy denies where the Config excludes only from audit; from the first VAP on,
    // the webhook's exclusions are left out (read before the first write).
    support::poll::eventually("the constraint denies in cfg-audit-only", SETTLE, || {
        configmap_denied(&client, "cfg-audit-only")
    })
    .await;
    assert!(
        !configmap_denied(&client, "cfg-exact").await,
        "cfg-exact is excluded"
    );
    assert!(
        !configmap_denied(&client, "cfg-glob-1").await,
        "cfg-glob-* is excluded"
    );
    let vap = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .get(&kubectl_vap::core::names::policy_name_for_kind(kind))
        .await
        .expect("the VAP");
    let vap_text = serde_json::to_string(&vap).expect("json");
    assert!(
        vap_text.contains("gatekeeper_internal_match_global_excluded_namespaces")
            && vap_text.contains("\"cfg-exact\""),
        "{vap_text}"
    );

    // The Config changes: the running reconciler follows.
    apply_config(config(json!(["cfg-glob-*"]))).await;
    support::poll::eventually("cfg-exact is no longer excluded", SETTLE, || {
        configmap_denied(&client, "cfg-exact")
    })
    .await;
    assert!(
        !configmap_denied(&client, "cfg-glob-1").await,
        "cfg-glob-* is still excluded"
    );
    configs
        .delete("config", &Default::default())
        .await
        .expect("delete the Config");
    support::poll::eventually("without a Config nothing is excluded", SETTLE, || {
        configmap_denied(&client, "cfg-glob-1")
    })
    .await;
    r.assert_idle(SETTLE).await;
}
