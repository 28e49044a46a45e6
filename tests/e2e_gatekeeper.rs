//! kubectl-vap beside a real Gatekeeper v3.23.1 (`tests/gatekeeper`, `testenv::gatekeeper`) on
//! a private kube-apiserver: the constraint CRDs that Gatekeeper's `generate` operation used to
//! create are ours once it is off, and either side takes over the other's CRDs without a write.
//!
//! Each test has an API server of its own (Gatekeeper installs its chart's CRDs, and a running
//! Gatekeeper must not see the other tests' templates).

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kubectl_vap::controller::Controller as Running;
use kubectl_vap::controller::state::{EventResult, EventVerb};
use kubectl_vap::controller::{Config, Mode};
use kubectl_vap::controller::{Tuning, launch};
use kubectl_vap::core::Options;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use testenv::TestEnv;
use testenv::gatekeeper::{self, GATEKEEPER_NAMESPACE, Gatekeeper, GatekeeperOptions};

const TIMEOUT: Duration = Duration::from_secs(90);
const CRD_KIND: &str = "CustomResourceDefinition";

fn template(kind: &str, api_version: &str, crd_spec: Value, targets: Value) -> Value {
    let mut spec = crd_spec;
    spec["names"]["kind"] = json!(kind);
    json!({
        "apiVersion": api_version,
        "kind": "ConstraintTemplate",
        "metadata": { "name": kind.to_lowercase() },
        "spec": { "crd": { "spec": spec }, "targets": targets }
    })
}

fn nested_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "labels": { "type": "array", "items": {
                "type": "object",
                "properties": { "key": { "type": "string" }, "allowedRegex": { "type": "string" } } } },
            "options": { "type": "object", "properties": {
                "strict": { "type": "boolean" },
                "exemptImages": { "type": "array", "items": { "type": "string" } } } }
        }
    })
}

fn rego(kind: &str) -> Value {
    json!([{
        "target": "admission.k8s.gatekeeper.sh",
        "rego": format!("package {}\nviolation[{{\"msg\": \"no\"}}] {{ false }}\n", kind.to_lowercase())
    }])
}

/// A CEL template that generates a VAP (`failurePolicy: Ignore`: a policy whose paramKind the
/// admission plugin has not discovered yet must not deny this test's own requests, #4530).
fn cel_template(kind: &str) -> Value {
    template(
        kind,
        "templates.gatekeeper.sh/v1",
        json!({ "validation": { "openAPIV3Schema": nested_schema() } }),
        json!([{
            "target": "admission.k8s.gatekeeper.sh",
            "code": [{ "engine": "K8sNativeValidation", "source": {
                "generateVAP": true,
                "failurePolicy": "Ignore",
                "validations": [{ "expression": "!has(variables.params.labels) || variables.params.labels.all(l, has(variables.anyObject.metadata.labels) && l.key in variables.anyObject.metadata.labels)" }]
            } }]
        }]),
    )
}

/// Templates whose CRDs differ in every way Gatekeeper's builder knows: nested parameters
/// (CEL), `legacySchema` true and false, no schema at all, and a v1beta1 template with short
/// names (whose `legacySchema` defaults to true).
fn templates() -> Vec<Value> {
    vec![
        cel_template("K8sGkCel"),
        template(
            "K8sGkLegacy",
            "templates.gatekeeper.sh/v1",
            json!({ "validation": { "legacySchema": true, "openAPIV3Schema": nested_schema() } }),
            rego("K8sGkLegacy"),
        ),
        template(
            "K8sGkStructural",
            "templates.gatekeeper.sh/v1",
            json!({ "validation": { "legacySchema": false, "openAPIV3Schema": nested_schema() } }),
            rego("K8sGkStructural"),
        ),
        template(
            "K8sGkNoSchema",
            "templates.gatekeeper.sh/v1",
            json!({}),
            rego("K8sGkNoSchema"),
        ),
        template(
            "K8sGkShort",
            "templates.gatekeeper.sh/v1beta1",
            json!({ "names": { "shortNames": ["gkshort"] },
                    "validation": { "openAPIV3Schema": { "type": "object", "properties": { "n": { "type": "integer" } } } } }),
            rego("K8sGkShort"),
        ),
    ]
}

fn crd_name(t: &Value) -> String {
    format!(
        "{}.constraints.gatekeeper.sh",
        t["metadata"]["name"].as_str().expect("name")
    )
}

struct Cluster {
    env: TestEnv,
    client: kube::Client,
}

impl Cluster {
    async fn new() -> Cluster {
        let env = TestEnv::start();
        let client = env.client_admin().await;
        let assets = gatekeeper::GatekeeperAssets::discover().expect("Gatekeeper's assets");
        gatekeeper::install_chart_crds(&client, &assets)
            .await
            .expect("Gatekeeper's chart CRDs");
        let ns = json!({ "metadata": { "name": GATEKEEPER_NAMESPACE } });
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(ns).expect("namespace"),
            )
            .await;
        Cluster { env, client }
    }

    fn templates_api(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &gatekeeper::template_api_resource())
    }

    fn crds(&self) -> Api<CustomResourceDefinition> {
        Api::all(self.client.clone())
    }

    /// Creates the template at its own apiVersion (so the server applies that version's
    /// defaults, `legacySchema` among them).
    async fn apply_template(&self, t: &Value) {
        let obj: DynamicObject = serde_json::from_value(t.clone()).expect("template");
        let mut ar = gatekeeper::template_api_resource();
        ar.api_version = t["apiVersion"].as_str().expect("apiVersion").to_string();
        ar.version = ar
            .api_version
            .rsplit('/')
            .next()
            .unwrap_or("v1")
            .to_string();
        Api::<DynamicObject>::all_with(self.client.clone(), &ar)
            .create(&PostParams::default(), &obj)
            .await
            .expect("create template");
    }

    async fn gatekeeper(&self, operations: &[&str]) -> Gatekeeper {
        Gatekeeper::start(&self.env, GatekeeperOptions::with_operations(operations))
            .await
            .expect("Gatekeeper starts")
    }

    /// A leading kubectl-vap reconciler (in this process) as `client`'s user.
    async fn reconciler(&self, client: kube::Client) -> Running {
        let mut config = Config::new(
            Options {
                binding_wait: Duration::ZERO,
                ..Options::default()
            },
            Mode::Elect {
                lease_namespace: GATEKEEPER_NAMESPACE.into(),
                lease_name: "kubectl-vap".into(),
                take_over: false,
            },
        );
        config.workers = 4;
        let r = launch(client, config, Tuning::default())
            .await
            .expect("the reconciler starts");
        r.leading(Duration::from_secs(20)).await.expect("it leads");
        r
    }

    /// Every template's CRD exists and is Established; returns their resourceVersions.
    async fn crds_established(&self, templates: &[Value]) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for t in templates {
            let name = crd_name(t);
            let crd = eventually(&format!("{name} Established"), || async {
                self.crds()
                    .get_opt(&name)
                    .await
                    .ok()
                    .flatten()
                    .filter(established)
            })
            .await;
            out.insert(name, crd.metadata.resource_version.unwrap_or_default());
        }
        out
    }

    async fn resource_versions(&self, templates: &[Value]) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for t in templates {
            let name = crd_name(t);
            let crd = self.crds().get(&name).await.expect("the CRD");
            out.insert(name, crd.metadata.resource_version.unwrap_or_default());
        }
        out
    }
}

fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(start.elapsed() < TIMEOUT, "{what}: not within {TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn idle(r: &Running) {
    assert!(
        r.idle(TIMEOUT).await,
        "the reconciler is not idle within {TIMEOUT:?}"
    );
}

/// The writes of `kind` this copy sent successfully, as `verb name`.
fn writes_of(r: &Running, kind: &str) -> Vec<String> {
    Some(r.events())
        .map(|events| {
            events
                .iter()
                .filter(|e| e.result == EventResult::Ok && e.object.kind == kind)
                .filter_map(|e| {
                    let verb = match e.verb {
                        EventVerb::Create => "create",
                        EventVerb::Update => "update",
                        EventVerb::Delete => "delete",
                        _ => return None,
                    };
                    Some(format!("{verb} {}", e.object.name))
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn stop(r: Running) {
    let _ = r.stop(Duration::from_secs(15)).await;
}

/// The ClusterRole and lease Role of `install --print`, bound to the test's non-admin user.
async fn grant_install_rbac(client: &kube::Client) {
    let pp = PostParams::default();
    let user = json!([{ "kind": "User", "name": testenv::USER_NAME, "apiGroup": "rbac.authorization.k8s.io" }]);
    let name = "kubectl-vap-test";
    let cr: ClusterRole = serde_json::from_value(json!({
        "metadata": { "name": name }, "rules": kubectl_vap::cli::install::cluster_role_rules()
    }))
    .expect("cluster role");
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": GATEKEEPER_NAMESPACE },
        "rules": kubectl_vap::cli::install::lease_role_rules("kubectl-vap")
    }))
    .expect("role");
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name },
        "subjects": user
    }))
    .expect("crb");
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": GATEKEEPER_NAMESPACE },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
        "subjects": user
    }))
    .expect("rb");
    Api::<ClusterRole>::all(client.clone())
        .create(&pp, &cr)
        .await
        .expect("create cluster role");
    Api::<Role>::namespaced(client.clone(), GATEKEEPER_NAMESPACE)
        .create(&pp, &role)
        .await
        .expect("create role");
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&pp, &crb)
        .await
        .expect("create crb");
    Api::<RoleBinding>::namespaced(client.clone(), GATEKEEPER_NAMESPACE)
        .create(&pp, &rb)
        .await
        .expect("create rb");
}

/// The "done when": Gatekeeper runs without `generate` (as our docs ask); a new
/// template gets its CRD, VAP and bindings from `run`, with the RBAC of `install --print`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn beside_gatekeeper_without_generate_a_new_template_gets_crd_vap_and_bindings() {
    let c = Cluster::new().await;
    let mut gk = c.gatekeeper(&["audit", "status"]).await;
    grant_install_rbac(&c.client).await;
    let r = c.reconciler(c.env.client_user().await).await;

    let cel = cel_template("K8sGkNew");
    let rego_only = template(
        "K8sGkNewRego",
        "templates.gatekeeper.sh/v1",
        json!({}),
        rego("K8sGkNewRego"),
    );
    c.apply_template(&cel).await;
    c.apply_template(&rego_only).await;
    c.crds_established(&[cel.clone(), rego_only.clone()]).await;
    let crd = c.crds().get(&crd_name(&cel)).await.expect("CRD");
    let owner = &crd.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("ConstraintTemplate", "k8sgknew")
    );
    assert_eq!(
        crd.metadata
            .labels
            .unwrap_or_default()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("kubectl-vap"),
        "kubectl-vap wrote it, not Gatekeeper"
    );

    let constraints = Api::<DynamicObject>::all_with(
        c.client.clone(),
        &gatekeeper::constraint_api_resource("K8sGkNew"),
    );
    let constraint: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "constraints.gatekeeper.sh/v1beta1",
        "kind": "K8sGkNew",
        "metadata": { "name": "owner" },
        "spec": { "parameters": { "labels": [{ "key": "owner" }] } }
    }))
    .expect("constraint");
    // The CRD's schema is Gatekeeper's: typed parameters are accepted.
    constraints
        .create(&PostParams::default(), &constraint)
        .await
        .expect("create constraint");
    let vaps = Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>::all(
        c.client.clone(),
    );
    let vapbs =
        Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>::all(
            c.client.clone(),
        );
    eventually("the VAP", || async {
        vaps.get_opt("gatekeeper-k8sgknew").await.ok().flatten()
    })
    .await;
    eventually("the binding", || async {
        vapbs
            .get_opt("gatekeeper-k8sgknew-owner")
            .await
            .ok()
            .flatten()
    })
    .await;
    idle(&r).await;
    assert!(
        writes_of(&r, CRD_KIND).len() == 2,
        "one create per CRD: {:?}",
        writes_of(&r, CRD_KIND)
    );
    assert!(
        gk.exit_status().is_none(),
        "Gatekeeper still runs:\n{}",
        gk.logs_tail(40)
    );
    stop(r).await;
    gk.stop();
}

/// Gatekeeper (with `generate`) made the CRDs; it is switched off and kubectl-vap takes over:
/// not one CRD write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn crds_gatekeeper_made_are_adopted_without_a_write() {
    let c = Cluster::new().await;
    let gk = c.gatekeeper(&["generate", "audit", "status"]).await;
    let templates = templates();
    for t in &templates {
        c.apply_template(t).await;
    }
    c.crds_established(&templates).await;
    // Let Gatekeeper finish what it does after creating a CRD (it may update it once more).
    tokio::time::sleep(Duration::from_secs(3)).await;
    gk.stop();
    let before = c.resource_versions(&templates).await;

    let r = c.reconciler(c.client.clone()).await;
    idle(&r).await;
    assert_eq!(
        writes_of(&r, CRD_KIND),
        Vec::<String>::new(),
        "kubectl-vap rewrote CRDs Gatekeeper made"
    );
    assert_eq!(c.resource_versions(&templates).await, before);
    stop(r).await;
}

/// kubectl-vap made the CRDs; Gatekeeper with `generate` starts on that cluster: it writes
/// nothing to them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn gatekeeper_writes_nothing_to_crds_kubectl_vap_made() {
    let c = Cluster::new().await;
    let templates = templates();
    let r = c.reconciler(c.client.clone()).await;
    for t in &templates {
        c.apply_template(t).await;
    }
    c.crds_established(&templates).await;
    idle(&r).await;
    assert_eq!(writes_of(&r, CRD_KIND).len(), templates.len());
    stop(r).await;
    let before = c.resource_versions(&templates).await;

    let gk = c.gatekeeper(&["generate", "audit", "status"]).await;
    // Gatekeeper has handled every template once it reports its pod status for it (written
    // after the CRD step of its reconcile).
    for t in &templates {
        let name = t["metadata"]["name"].as_str().expect("name").to_string();
        eventually(&format!("Gatekeeper reconciled {name}"), || async {
            let t = c.templates_api().get(&name).await.ok()?;
            let by_pod = t.data["status"]["byPod"].as_array()?;
            by_pod
                .iter()
                .any(|p| p["observedGeneration"] == json!(t.metadata.generation))
                .then_some(())
        })
        .await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = gk.log_text();
    assert_eq!(
        c.resource_versions(&templates).await,
        before,
        "Gatekeeper rewrote CRDs kubectl-vap made; its log:\n{}",
        log.lines()
            .filter(|l| l.contains("crd"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(!log.contains("updating crd"), "Gatekeeper updated a CRD");
    gk.stop();
}

/// With a garbage collector racing it: a deleted template takes its bindings, its VAP and its
/// CRD with it, each deleted once at the most by kubectl-vap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn a_deleted_template_takes_its_crd_vap_and_bindings_with_gc_running() {
    let c = Cluster::new().await;
    let _kcm = c
        .env
        .start_controller_manager()
        .await
        .expect("kube-controller-manager");
    let r = c.reconciler(c.client.clone()).await;
    let t = cel_template("K8sGkGone");
    c.apply_template(&t).await;
    c.crds_established(std::slice::from_ref(&t)).await;
    let constraints = Api::<DynamicObject>::all_with(
        c.client.clone(),
        &gatekeeper::constraint_api_resource("K8sGkGone"),
    );
    for name in ["a", "b"] {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sGkGone",
            "metadata": { "name": name }, "spec": {}
        }))
        .expect("constraint");
        constraints
            .create(&PostParams::default(), &obj)
            .await
            .expect("constraint");
    }
    let vapbs =
        Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>::all(
            c.client.clone(),
        );
    for b in ["gatekeeper-k8sgkgone-a", "gatekeeper-k8sgkgone-b"] {
        eventually(b, || async { vapbs.get_opt(b).await.ok().flatten() }).await;
    }
    idle(&r).await;

    c.templates_api()
        .delete("k8sgkgone", &DeleteParams::default())
        .await
        .expect("delete template");
    let crd = crd_name(&t);
    eventually("the CRD gone", || async {
        match c.crds().get_opt(&crd).await {
            Ok(None) => Some(()),
            _ => None,
        }
    })
    .await;
    let vaps = Api::<k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy>::all(
        c.client.clone(),
    );
    eventually("the VAP gone", || async {
        matches!(vaps.get_opt("gatekeeper-k8sgkgone").await, Ok(None)).then_some(())
    })
    .await;
    for b in ["gatekeeper-k8sgkgone-a", "gatekeeper-k8sgkgone-b"] {
        eventually(&format!("{b} gone"), || async {
            matches!(vapbs.get_opt(b).await, Ok(None)).then_some(())
        })
        .await;
    }
    idle(&r).await;
    let mut deletes: Vec<String> = [
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
        CRD_KIND,
    ]
    .iter()
    .flat_map(|k| writes_of(&r, k))
    .filter(|w| w.starts_with("delete"))
    .collect();
    deletes.sort();
    let mut unique = deletes.clone();
    unique.dedup();
    assert_eq!(deletes, unique, "an object deleted twice");
    stop(r).await;
}
