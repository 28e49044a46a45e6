//! kubectl-vap beside a real Gatekeeper v3.23.1 (`tests/gatekeeper`, `testenv::gatekeeper`) on
//! a private kube-apiserver: the constraint CRDs that Gatekeeper's `generate` operation used to
//! create are ours once it is off, and either side takes over the other's CRDs without a write.
//!
//! Each test has an API server of its own (Gatekeeper installs its chart's CRDs, and a running
//! Gatekeeper must not see the other tests' templates).

mod support;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams};
use kubectl_vap::core::Options;
use kubectl_vap::load::cel::default_options;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use support::cluster;
use support::objects::{binding_name, crd_name, policy_name};
use support::poll::eventually_some;
use support::rbac::{self, Grant};
use support::reconciler::{self, Reconciler, Start};
use testenv::TestEnv;
use testenv::gatekeeper::{
    self, GATEKEEPER_NAMESPACE, Gatekeeper, GatekeeperOptions, cel_targets, established, template,
};

const TIMEOUT: Duration = Duration::from_secs(90);
const CRD_KIND: &str = "CustomResourceDefinition";

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
        "v1",
        json!({ "validation": { "openAPIV3Schema": nested_schema() } }),
        cel_targets(json!({
            "generateVAP": true,
            "failurePolicy": "Ignore",
            "validations": [{ "expression": "!has(variables.params.labels) || variables.params.labels.all(l, has(variables.anyObject.metadata.labels) && l.key in variables.anyObject.metadata.labels)" }]
        })),
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
            "v1",
            json!({ "validation": { "legacySchema": true, "openAPIV3Schema": nested_schema() } }),
            rego("K8sGkLegacy"),
        ),
        template(
            "K8sGkStructural",
            "v1",
            json!({ "validation": { "legacySchema": false, "openAPIV3Schema": nested_schema() } }),
            rego("K8sGkStructural"),
        ),
        template("K8sGkNoSchema", "v1", json!({}), rego("K8sGkNoSchema")),
        template(
            "K8sGkShort",
            "v1beta1",
            json!({ "names": { "shortNames": ["gkshort"] },
                    "validation": { "openAPIV3Schema": { "type": "object", "properties": { "n": { "type": "integer" } } } } }),
            rego("K8sGkShort"),
        ),
    ]
}

/// The constraint CRD of template `t`.
fn crd_of(t: &Value) -> String {
    crd_name(
        t["spec"]["crd"]["spec"]["names"]["kind"]
            .as_str()
            .expect("kind"),
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
        gatekeeper::install_chart(&client, &assets)
            .await
            .expect("Gatekeeper's chart CRDs and namespace");
        Cluster { env, client }
    }

    fn templates_api(&self) -> Api<kube::api::DynamicObject> {
        cluster::templates(&self.client)
    }

    fn crds(&self) -> Api<CustomResourceDefinition> {
        Api::all(self.client.clone())
    }

    /// Creates the template at its own apiVersion (so the server applies that version's
    /// defaults, `legacySchema` among them).
    async fn apply_template(&self, t: &Value) {
        let mut ar = gatekeeper::template_api_resource();
        ar.api_version = t["apiVersion"].as_str().expect("apiVersion").to_string();
        ar.version = ar
            .api_version
            .rsplit('/')
            .next()
            .unwrap_or("v1")
            .to_string();
        cluster::create(&Api::all_with(self.client.clone(), &ar), t).await;
    }

    async fn gatekeeper(&self, operations: &[&str]) -> Gatekeeper {
        Gatekeeper::start(&self.env, GatekeeperOptions::with_operations(operations))
            .await
            .expect("Gatekeeper starts")
    }

    /// A leading kubectl-vap reconciler (in this process) as `client`'s user.
    async fn reconciler(&self, client: kube::Client) -> Reconciler {
        let options = Options {
            binding_wait: Duration::ZERO,
            ..default_options()
        };
        let start = Start::on(GATEKEEPER_NAMESPACE, "kubectl-vap", options).workers(4);
        let r = reconciler::start(client, start).await;
        r.wait_leading(Duration::from_secs(20))
            .await
            .expect("it leads");
        r
    }

    /// Every template's CRD exists and is Established; returns their resourceVersions.
    async fn crds_established(&self, templates: &[Value]) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for t in templates {
            let name = crd_of(t);
            let crd = eventually_some(&format!("{name} Established"), TIMEOUT, || async {
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
            let name = crd_of(t);
            let crd = self.crds().get(&name).await.expect("the CRD");
            out.insert(name, crd.metadata.resource_version.unwrap_or_default());
        }
        out
    }
}

/// Object `name` of `api`, when it exists and reads.
async fn read<K>(api: Api<K>, name: &str) -> Option<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.ok().flatten()
}

/// [`eventually_some`] within [`TIMEOUT`].
async fn eventually<T, F, Fut>(what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_some(what, TIMEOUT, probe).await
}

/// The ClusterRole and lease Role of `install --print`, bound to the test's non-admin user.
async fn grant_install_rbac(client: &kube::Client) {
    let g = Grant::install(
        "kubectl-vap-test",
        testenv::USER_NAME,
        GATEKEEPER_NAMESPACE,
        "kubectl-vap",
    );
    rbac::grant(client, &g).await;
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
    let rego_only = template("K8sGkNewRego", "v1", json!({}), rego("K8sGkNewRego"));
    c.apply_template(&cel).await;
    c.apply_template(&rego_only).await;
    c.crds_established(&[cel.clone(), rego_only.clone()]).await;
    let crd = c.crds().get(&crd_of(&cel)).await.expect("CRD");
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

    // The CRD's schema is Gatekeeper's: typed parameters are accepted.
    cluster::create_constraint(
        &c.client,
        &gatekeeper::constraint(
            "K8sGkNew",
            "owner",
            json!({ "parameters": { "labels": [{ "key": "owner" }] } }),
        ),
    )
    .await;
    eventually("the VAP", || async {
        read(cluster::policies(&c.client), &policy_name("K8sGkNew")).await
    })
    .await;
    eventually("the binding", || async {
        read(
            cluster::bindings(&c.client),
            &binding_name("K8sGkNew", "owner"),
        )
        .await
    })
    .await;
    r.assert_idle(TIMEOUT).await;
    assert!(
        r.ok_writes_of(CRD_KIND).len() == 2,
        "one create per CRD: {:?}",
        r.ok_writes_of(CRD_KIND)
    );
    assert!(
        gk.exit_status().is_none(),
        "Gatekeeper still runs:\n{}",
        gk.logs_tail(40)
    );
    r.stop().await;
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
    r.assert_idle(TIMEOUT).await;
    assert_eq!(
        r.ok_writes_of(CRD_KIND),
        Vec::<String>::new(),
        "kubectl-vap rewrote CRDs Gatekeeper made"
    );
    assert_eq!(c.resource_versions(&templates).await, before);
    r.stop().await;
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
    r.assert_idle(TIMEOUT).await;
    assert_eq!(r.ok_writes_of(CRD_KIND).len(), templates.len());
    r.stop().await;
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
    let bindings = ["a", "b"].map(|name| binding_name("K8sGkGone", name));
    for name in ["a", "b"] {
        cluster::create_constraint(
            &c.client,
            &gatekeeper::constraint("K8sGkGone", name, json!({})),
        )
        .await;
    }
    for b in &bindings {
        eventually(b, || read(cluster::bindings(&c.client), b)).await;
    }
    r.assert_idle(TIMEOUT).await;

    c.templates_api()
        .delete("k8sgkgone", &DeleteParams::default())
        .await
        .expect("delete template");
    let crd = crd_of(&t);
    eventually("the CRD gone", || async {
        match c.crds().get_opt(&crd).await {
            Ok(None) => Some(()),
            _ => None,
        }
    })
    .await;
    let vap = policy_name("K8sGkGone");
    eventually("the VAP gone", || async {
        matches!(cluster::policies(&c.client).get_opt(&vap).await, Ok(None)).then_some(())
    })
    .await;
    for b in &bindings {
        eventually(&format!("{b} gone"), || async {
            matches!(cluster::bindings(&c.client).get_opt(b).await, Ok(None)).then_some(())
        })
        .await;
    }
    r.assert_idle(TIMEOUT).await;
    let mut deletes: Vec<String> = [
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
        CRD_KIND,
    ]
    .iter()
    .flat_map(|k| r.ok_writes_of(k))
    .filter(|w| w.starts_with("delete"))
    .collect();
    deletes.sort();
    let mut unique = deletes.clone();
    unique.dedup();
    assert_eq!(deletes, unique, "an object deleted twice");
    r.stop().await;
}
