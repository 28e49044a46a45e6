//! Tier 3: the reconciler against a real kube-apiserver + etcd (`testenv`).
//!
//! Every reconciler watches the whole cluster, so the tests of this binary run one at a time
//! (`serial()`), each with its own kinds and its own Lease, and each removes what it created.
//! The pure analysis is the oracle: at quiescence `analyze(list_snapshot())` plans nothing.

// The serializing guard is held for a whole test on purpose; each test has its own runtime,
// so the lock is never contended within one runtime.
#![allow(clippy::await_holding_lock)]

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kubectl_vap::cluster::{AdmissionApi, list_snapshot};
use kubectl_vap::controller::Controller as Running;
use kubectl_vap::controller::state::EventVerb;
use kubectl_vap::controller::{Config, Mode};
use kubectl_vap::controller::{Tuning, launch};
use kubectl_vap::core::{Options, analyze};
use serde_json::{Value, json};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use testenv::{TestEnv, gatekeeper, http_get};

const LEASE_NS: &str = "kubectl-vap-e2e";
const TIMEOUT: Duration = Duration::from_secs(60);

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn opts(wait_secs: u64) -> Options {
    Options {
        binding_wait: Duration::from_secs(wait_secs),
        ..Options::default()
    }
}

fn template(kind: &str, generate: Option<bool>) -> Value {
    let mut source = json!({
        // Ignore: a policy whose paramKind the admission plugin has not discovered yet must
        // not deny the requests of the rest of the suite (Gatekeeper #4530).
        "failurePolicy": "Ignore",
        "validations": [{
            "expression": "variables.params.labels.all(l, has(variables.anyObject.metadata.labels) && l in variables.anyObject.metadata.labels)",
            "messageExpression": "'missing required labels: ' + variables.params.labels.join(', ')"
        }]
    });
    if let Some(g) = generate {
        source["generateVAP"] = json!(g);
    }
    json!({
        "apiVersion": "templates.gatekeeper.sh/v1",
        "kind": "ConstraintTemplate",
        "metadata": { "name": kind.to_lowercase() },
        "spec": {
            "crd": { "spec": { "names": { "kind": kind }, "validation": { "openAPIV3Schema": {
                "type": "object", "properties": { "labels": { "type": "array", "items": { "type": "string" } } } } } } },
            "targets": [{ "target": "admission.k8s.gatekeeper.sh",
                          "code": [{ "engine": "K8sNativeValidation", "source": source }] }]
        }
    })
}

struct Env {
    env: &'static TestEnv,
    client: kube::Client,
}

impl Env {
    async fn new() -> Env {
        let env = TestEnv::shared();
        Env::with(env).await
    }

    /// An API server of this test's own, for tests that stop it (it lives until the process ends).
    async fn private() -> Env {
        Env::with(Box::leak(Box::new(TestEnv::start()))).await
    }

    async fn with(env: &'static TestEnv) -> Env {
        let client = env.client_admin().await;
        gatekeeper::install_gatekeeper_crds(&client)
            .await
            .expect("ConstraintTemplate CRD");
        let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": LEASE_NS } }))
            .expect("namespace literal");
        let _ = Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await;
        Env { env, client }
    }

    fn templates(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &gatekeeper::template_api_resource())
    }

    fn constraints(&self, kind: &str) -> Api<DynamicObject> {
        Api::all_with(
            self.client.clone(),
            &gatekeeper::constraint_api_resource(kind),
        )
    }

    /// Creates (or replaces) the template and its constraint CRD, as Gatekeeper would.
    async fn put_template(&self, t: &Value) {
        let name = t["metadata"]["name"].as_str().expect("name");
        let mut obj: DynamicObject = serde_json::from_value(t.clone()).expect("template");
        let written = match self.templates().get_opt(name).await.expect("get template") {
            Some(cur) => {
                obj.metadata.resource_version = cur.metadata.resource_version;
                self.templates()
                    .replace(name, &PostParams::default(), &obj)
                    .await
                    .expect("replace template")
            }
            None => self
                .templates()
                .create(&PostParams::default(), &obj)
                .await
                .expect("create template"),
        };
        Self::exact_crd(&self.client, &written).await;
    }

    /// The constraint CRD exactly as kubectl-vap builds it for `template` (as the server has it:
    /// with its uid), Established: what an earlier run left, so a test's writes are its own.
    async fn exact_crd(client: &kube::Client, template: &DynamicObject) {
        let mut v = serde_json::to_value(template).expect("template json");
        v["apiVersion"] = json!("templates.gatekeeper.sh/v1");
        v["kind"] = json!("ConstraintTemplate");
        let t = kubectl_vap::model::ConstraintTemplate::from_value(v, Default::default());
        let kind = t.kind.clone().expect("kind");
        let crd = kubectl_vap::core::crd::desired_crd(&t, &kind).expect("crd");
        gatekeeper::apply_crd(client, &crd)
            .await
            .expect("constraint CRD");
    }

    /// A new kind: a template that generates a VAP, and one constraint `constraint` of it.
    async fn generating_kind(&self, prefix: &str, constraint: &str) -> String {
        let kind = self.env.unique_kind(prefix);
        self.put_template(&template(&kind, Some(true))).await;
        self.put_constraint(
            &kind,
            constraint,
            json!({ "parameters": { "labels": ["x"] } }),
        )
        .await;
        kind
    }

    /// Creates or replaces a constraint. Unless the spec selects objects itself, it selects
    /// only objects labelled `e2e-reconciler: inert` (none exist), so test policies never deny
    /// anything else on the shared server.
    async fn put_constraint(&self, kind: &str, name: &str, mut spec: Value) {
        if spec["match"]["labelSelector"].is_null() {
            spec["match"]["labelSelector"] =
                json!({ "matchLabels": { "e2e-reconciler": "inert" } });
        }
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": kind,
            "metadata": { "name": name }, "spec": spec
        }))
        .expect("constraint");
        let api = self.constraints(kind);
        match api.get_opt(name).await.expect("get constraint") {
            Some(cur) => {
                let mut obj = obj;
                obj.metadata.resource_version = cur.metadata.resource_version;
                api.replace(name, &PostParams::default(), &obj)
                    .await
                    .expect("replace constraint");
            }
            None => {
                api.create(&PostParams::default(), &obj)
                    .await
                    .expect("create constraint");
            }
        }
    }

    async fn vap(&self, name: &str) -> Option<ValidatingAdmissionPolicy> {
        Api::<ValidatingAdmissionPolicy>::all(self.client.clone())
            .get_opt(name)
            .await
            .expect("get VAP")
    }

    async fn vapb(&self, name: &str) -> Option<ValidatingAdmissionPolicyBinding> {
        Api::<ValidatingAdmissionPolicyBinding>::all(self.client.clone())
            .get_opt(name)
            .await
            .expect("get VAPB")
    }

    async fn actions(&self, binding: &str) -> Option<Vec<String>> {
        self.vapb(binding)
            .await
            .and_then(|b| b.spec)
            .and_then(|s| s.validation_actions)
    }

    /// The oracle: the analysis of the live cluster plans nothing.
    async fn assert_converged(&self, o: &Options, context: &str) {
        let start = Instant::now();
        loop {
            let (snap, errors) = list_snapshot(&self.client, &AdmissionApi::v1())
                .await
                .expect("list");
            assert!(errors.is_empty(), "{context}: {errors:?}");
            let plan: Vec<String> = analyze(&snap, o)
                .plan
                .iter()
                .map(|w| format!("{} {} ({})", w.verb.as_str(), w.object, w.reason))
                .collect();
            if plan.is_empty() {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{context}: I3: the cluster is not converged: {plan:#?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn reconciler(&self, lease: &str, o: Options) -> Running {
        self.reconciler_with(lease, o, Tuning::default()).await
    }

    async fn reconciler_with(&self, lease: &str, o: Options, tuning: Tuning) -> Running {
        let mut config = Config::new(
            o,
            Mode::Elect {
                lease_namespace: LEASE_NS.into(),
                lease_name: lease.into(),
                take_over: false,
            },
        );
        config.workers = 4;
        launch(self.env_client().await, config, tuning)
            .await
            .expect("reconciler starts")
    }

    async fn env_client(&self) -> kube::Client {
        self.env.client_admin().await
    }

    /// A reconciler on Lease `lease` that holds it (within 20 s).
    async fn leader(&self, lease: &str, o: Options) -> Running {
        let r = self.reconciler(lease, o).await;
        r.leading(Duration::from_secs(20))
            .await
            .expect("the new reconciler leads");
        r
    }

    /// Deletes what `kinds` left ([`Env::cleanup`]) and lets a fresh reconciler sweep the
    /// VAPs and bindings of a test that ran none of its own at the end.
    async fn sweep(&self, kinds: &[&str], lease_prefix: &str) {
        self.cleanup(kinds).await;
        let r = self
            .leader(&self.env.unique_name(lease_prefix), opts(0))
            .await;
        assert_idle(&r, TIMEOUT).await;
        stop(r).await;
    }

    /// [`Env::cleanup`] with `r` still running, so it deletes the VAPs and bindings of `kinds`
    /// too; then stops it.
    async fn clean_up_with(&self, r: Running, kinds: &[&str]) {
        self.cleanup(kinds).await;
        assert_idle(&r, TIMEOUT).await;
        stop(r).await;
    }

    /// Deletes templates and constraints of `kinds` (their CRDs stay: no GC here).
    async fn cleanup(&self, kinds: &[&str]) {
        for kind in kinds {
            let api = self.constraints(kind);
            if let Ok(list) = api.list(&Default::default()).await {
                for c in list.items {
                    if let Some(n) = c.metadata.name {
                        let _ = api.delete(&n, &DeleteParams::default()).await;
                    }
                }
            }
            let _ = self
                .templates()
                .delete(&kind.to_lowercase(), &DeleteParams::default())
                .await;
        }
    }
}

async fn eventually<F, Fut>(what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !probe().await {
        assert!(start.elapsed() < TIMEOUT, "{what}: not within {TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn stop(r: Running) {
    let _ = r.stop(Duration::from_secs(15)).await;
}

/// `kubectl-vap run --once --binding-wait=0s` on Lease `lease` (in the test namespace) as
/// the user of `kubeconfig`, with `extra` arguments.
fn run_once(kubeconfig: &std::path::Path, lease: &str, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-vap"))
        .args([
            "run",
            "--once",
            "--binding-wait=0s",
            "--lease-namespace",
            LEASE_NS,
        ])
        .args(["--lease-name", lease])
        .args(extra)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .expect("run kubectl-vap run --once")
}

/// A Deployment that looks like Gatekeeper's, running with `args`.
fn gatekeeper_deployment(name: &str, args: &[&str]) -> k8s_openapi::api::apps::v1::Deployment {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "gk" } },
                  "template": { "metadata": { "labels": { "app": "gk" } },
                                "spec": { "containers": [{ "name": "manager", "image": "openpolicyagent/gatekeeper:v3.23.0",
                                                           "args": args }] } } }
    }))
    .expect("deployment")
}

/// Waits for the reconciler to be idle ([`wait_idle`]); if it is not, fails with what it is
/// still doing, so a slow or stuck run says why.
async fn assert_idle(r: &Running, timeout: Duration) {
    if r.idle(timeout).await {
        return;
    }
    panic!("not idle within {timeout:?}: {}", r.progress_report());
}

/// The writes a reconciler logged (for failure messages).
fn writes_of(r: &Running) -> Vec<String> {
    use kubectl_vap::controller::state::EventVerb;
    Some(r.events())
        .map(|e| {
            e.iter()
                .filter(|e| {
                    matches!(
                        e.verb,
                        EventVerb::Create | EventVerb::Update | EventVerb::Delete
                    )
                })
                .map(|e| {
                    format!(
                        "{} {}: {} ({:?})",
                        e.verb.as_str(),
                        e.object,
                        e.message,
                        e.result
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn bname(kind: &str, c: &str) -> String {
    format!("gatekeeper-{}-{c}", kind.to_lowercase())
}
fn pname(kind: &str) -> String {
    format!("gatekeeper-{}", kind.to_lowercase())
}

// ---------------------------------------------------------------------------------------------

/// generateVAP on/off/unset; deny/warn/dryrun/scoped with and without vap.k8s.io; then
/// enforcement change, constraint delete, template off and template delete — with the
/// analysis of the live cluster as the oracle after each step, and one write per change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_generation_flows_default_flags() {
    let _s = serial();
    let e = Env::new().await;
    let on = e.env.unique_kind("On");
    let off = e.env.unique_kind("Off");
    let unset = e.env.unique_kind("Unset");
    e.put_template(&template(&on, Some(true))).await;
    e.put_template(&template(&off, Some(false))).await;
    e.put_template(&template(&unset, None)).await;
    let labels = json!({ "labels": ["owner"] });
    for kind in [&on, &off, &unset] {
        e.put_constraint(
            kind,
            "deny",
            json!({ "enforcementAction": "deny", "parameters": labels }),
        )
        .await;
    }
    e.put_constraint(
        &on,
        "warn",
        json!({ "enforcementAction": "warn", "parameters": labels }),
    )
    .await;
    e.put_constraint(
        &on,
        "dryrun",
        json!({ "enforcementAction": "dryrun", "parameters": labels }),
    )
    .await;
    e.put_constraint(&on, "scoped", json!({ "enforcementAction": "scoped", "parameters": labels,
        "scopedEnforcementActions": [{ "action": "warn", "enforcementPoints": [{ "name": "vap.k8s.io" }, { "name": "validation.gatekeeper.sh" }] }] })).await;
    e.put_constraint(&on, "notvap", json!({ "enforcementAction": "scoped", "parameters": labels,
        "scopedEnforcementActions": [{ "action": "deny", "enforcementPoints": [{ "name": "validation.gatekeeper.sh" }] }] })).await;

    let o = opts(0);
    let r = e.leader(&e.env.unique_name("flows"), o.clone()).await;
    assert_idle(&r, TIMEOUT).await;
    e.assert_converged(&o, "initial").await;
    assert!(e.vap(&pname(&on)).await.is_some());
    assert!(
        e.vap(&pname(&unset)).await.is_some(),
        "unset + default flag true"
    );
    assert!(e.vap(&pname(&off)).await.is_none());
    assert_eq!(
        e.actions(&bname(&on, "deny")).await,
        Some(vec!["Deny".into()])
    );
    assert_eq!(
        e.actions(&bname(&on, "warn")).await,
        Some(vec!["Warn".into()])
    );
    assert_eq!(
        e.actions(&bname(&on, "dryrun")).await,
        Some(vec!["Audit".into()])
    );
    assert_eq!(
        e.actions(&bname(&on, "scoped")).await,
        Some(vec!["Warn".into()])
    );
    assert!(e.vapb(&bname(&on, "notvap")).await.is_none());
    assert!(e.vapb(&bname(&off, "deny")).await.is_none());
    assert!(e.vapb(&bname(&unset, "deny")).await.is_some());
    let vap = e.vap(&pname(&on)).await.expect("vap");
    let owner = &vap.metadata.owner_references.expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("ConstraintTemplate", Some(true))
    );

    // I4: a full resync sends nothing.
    let w0 = r.writes_total();
    r.request(kubectl_vap::controller::Command::ReconcileAll)
        .await
        .expect("command");
    assert_idle(&r, TIMEOUT).await;
    assert_eq!(r.writes_total(), w0, "I4: steady state writes nothing");

    // One change, one write: deny → warn.
    e.put_constraint(
        &on,
        "deny",
        json!({ "enforcementAction": "warn", "parameters": labels }),
    )
    .await;
    let b = bname(&on, "deny");
    eventually("binding updated to Warn", || async {
        e.actions(&b).await == Some(vec!["Warn".into()])
    })
    .await;
    assert_idle(&r, TIMEOUT).await;
    assert_eq!(r.writes_total(), w0 + 1, "one change = one write");
    e.assert_converged(&o, "after deny→warn").await;

    // Constraint deleted → its binding goes (no GC here).
    e.constraints(&on)
        .delete("dryrun", &DeleteParams::default())
        .await
        .expect("delete");
    let b = bname(&on, "dryrun");
    eventually("binding of a deleted constraint removed", || async {
        e.vapb(&b).await.is_none()
    })
    .await;

    // Template off → bindings first, then the VAP.
    e.put_template(&template(&on, Some(false))).await;
    let p = pname(&on);
    eventually("VAP removed after generateVAP: false", || async {
        e.vap(&p).await.is_none()
    })
    .await;
    assert!(e.vapb(&bname(&on, "warn")).await.is_none());
    assert_idle(&r, TIMEOUT).await;
    e.assert_converged(&o, "after off").await;

    // Template deleted → its VAP and bindings go.
    e.templates()
        .delete(&unset.to_lowercase(), &DeleteParams::default())
        .await
        .expect("delete template");
    let p = pname(&unset);
    eventually("VAP of a deleted template removed", || async {
        e.vap(&p).await.is_none()
    })
    .await;
    assert!(e.vapb(&bname(&unset, "deny")).await.is_none());
    e.clean_up_with(r, &[&on, &off, &unset]).await;
}

/// The two default-create flags off: unset templates do not generate, deny/warn/dryrun
/// constraints are not bound, scoped vap.k8s.io ones are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_generation_flows_flags_off() {
    let _s = serial();
    let e = Env::new().await;
    let on = e.env.unique_kind("FOn");
    let unset = e.env.unique_kind("FUnset");
    e.put_template(&template(&on, Some(true))).await;
    e.put_template(&template(&unset, None)).await;
    let labels = json!({ "labels": ["owner"] });
    e.put_constraint(
        &on,
        "deny",
        json!({ "enforcementAction": "deny", "parameters": labels }),
    )
    .await;
    e.put_constraint(&on, "scoped", json!({ "enforcementAction": "scoped", "parameters": labels,
        "scopedEnforcementActions": [{ "action": "dryrun", "enforcementPoints": [{ "name": "*" }] }] })).await;
    e.put_constraint(&unset, "scoped", json!({ "enforcementAction": "scoped", "parameters": labels,
        "scopedEnforcementActions": [{ "action": "deny", "enforcementPoints": [{ "name": "vap.k8s.io" }] }] })).await;
    let o = Options {
        default_create_vap_for_templates: false,
        default_create_vap_binding_for_constraints: false,
        ..opts(0)
    };
    let r = e.leader(&e.env.unique_name("flags"), o.clone()).await;
    assert_idle(&r, TIMEOUT).await;
    e.assert_converged(&o, "flags off").await;
    assert!(e.vap(&pname(&on)).await.is_some());
    assert!(e.vap(&pname(&unset)).await.is_none(), "unset + flag false");
    assert!(
        e.vapb(&bname(&on, "deny")).await.is_none(),
        "deny + binding flag false"
    );
    assert_eq!(
        e.actions(&bname(&on, "scoped")).await,
        Some(vec!["Audit".into()])
    );
    assert!(
        e.vapb(&bname(&unset, "scoped")).await.is_none(),
        "no VAP, no binding"
    );
    e.clean_up_with(r, &[&on, &unset]).await;
}

/// `--binding-wait`: the first binding of a kind waits for the CRD's Established time + wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_binding_waits_for_the_crd() {
    let _s = serial();
    let e = Env::new().await;
    let o = opts(6);
    let r = e.leader(&e.env.unique_name("wait"), o.clone()).await;
    let kind = e.env.unique_kind("Wait");
    let start = Instant::now();
    e.put_template(&template(&kind, Some(true))).await;
    e.put_constraint(&kind, "c", json!({ "parameters": { "labels": ["a"] } }))
        .await;
    let p = pname(&kind);
    eventually("VAP written at once", || async {
        e.vap(&p).await.is_some()
    })
    .await;
    assert!(
        e.vapb(&bname(&kind, "c")).await.is_none(),
        "no binding within the wait"
    );
    let b = bname(&kind, "c");
    eventually("binding after the wait", || async {
        e.vapb(&b).await.is_some()
    })
    .await;
    // lastTransitionTime has a 1 s resolution.
    assert!(
        start.elapsed() >= Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    e.clean_up_with(r, &[&kind]).await;
}

/// Edited and deleted owned objects are restored at once; a foreign object with our name is
/// never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_drift_repair_and_foreign_objects() {
    let _s = serial();
    let e = Env::new().await;
    let kind = e.env.unique_kind("Drift");
    e.put_template(&template(&kind, Some(true))).await;
    let labels = json!({ "labels": ["owner"] });
    e.put_constraint(&kind, "c", json!({ "parameters": labels }))
        .await;
    // A foreign binding holding the name constraint "f" needs.
    let foreign: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": { "name": bname(&kind, "f") },
        "spec": { "policyName": pname(&kind), "validationActions": ["Audit"] }
    }))
    .expect("binding");
    let bapi = Api::<ValidatingAdmissionPolicyBinding>::all(e.client.clone());
    bapi.create(&PostParams::default(), &foreign)
        .await
        .expect("foreign binding");
    e.put_constraint(&kind, "f", json!({ "parameters": labels }))
        .await;
    // A legacy-named binding (Gatekeeper v3.16–v3.22) controlled by a constraint, and an orphan
    // VAP whose template does not exist: both are ours to sweep (no GC here).
    let legacy_c = e.env.unique_name("legacy");
    e.put_constraint(&kind, &legacy_c, json!({ "parameters": labels }))
        .await;
    let legacy_uid = e
        .constraints(&kind)
        .get(&legacy_c)
        .await
        .expect("constraint")
        .metadata
        .uid
        .expect("uid");
    let legacy: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": { "name": format!("gatekeeper-{legacy_c}"),
                      "ownerReferences": [{ "apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": kind,
                                            "name": legacy_c, "uid": legacy_uid, "controller": true }] },
        "spec": { "policyName": pname(&kind), "validationActions": ["Deny"],
                  "paramRef": { "name": legacy_c, "parameterNotFoundAction": "Allow" } }
    }))
    .expect("legacy binding");
    bapi.create(&PostParams::default(), &legacy)
        .await
        .expect("legacy binding");
    let ghost = e.env.unique_name("ghost");
    let orphan: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": { "name": format!("gatekeeper-{ghost}"),
                      "ownerReferences": [{ "apiVersion": "templates.gatekeeper.sh/v1beta1", "kind": "ConstraintTemplate",
                                            "name": ghost, "uid": "00000000-0000-4000-8000-000000000000", "controller": true }] },
        "spec": { "failurePolicy": "Ignore",
                  "matchConstraints": { "resourceRules": [{ "apiGroups": [""], "apiVersions": ["v1"],
                                                            "resources": ["configmaps"], "operations": ["CREATE"] }] },
                  "validations": [{ "expression": "true" }] }
    }))
    .expect("orphan VAP");
    Api::<ValidatingAdmissionPolicy>::all(e.client.clone())
        .create(&PostParams::default(), &orphan)
        .await
        .expect("orphan VAP");

    let o = opts(0);
    let r = e.leader(&e.env.unique_name("drift"), o.clone()).await;
    assert_idle(&r, TIMEOUT).await;
    let b = bname(&kind, "c");
    let p = pname(&kind);
    assert!(e.vapb(&b).await.is_some());
    let legacy_name = format!("gatekeeper-{legacy_c}");
    eventually("legacy-named binding swept", || async {
        e.vapb(&legacy_name).await.is_none()
    })
    .await;
    assert!(
        e.vapb(&bname(&kind, &legacy_c)).await.is_some(),
        "new name written"
    );
    let orphan_name = format!("gatekeeper-{ghost}");
    eventually("orphan VAP swept", || async {
        e.vap(&orphan_name).await.is_none()
    })
    .await;

    // Edit the binding.
    let mut cur = e.vapb(&b).await.expect("binding");
    cur.spec.as_mut().expect("spec").validation_actions = Some(vec!["Audit".into()]);
    bapi.replace(&b, &PostParams::default(), &cur)
        .await
        .expect("edit");
    eventually("edited binding restored", || async {
        e.actions(&b).await == Some(vec!["Deny".into()])
    })
    .await;
    // Delete the binding.
    bapi.delete(&b, &DeleteParams::default())
        .await
        .expect("delete binding");
    eventually("deleted binding restored", || async {
        e.vapb(&b).await.is_some()
    })
    .await;
    // Edit the VAP.
    let papi = Api::<ValidatingAdmissionPolicy>::all(e.client.clone());
    let mut vap = e.vap(&p).await.expect("vap");
    vap.spec.as_mut().expect("spec").failure_policy = Some("Fail".into());
    papi.replace(&p, &PostParams::default(), &vap)
        .await
        .expect("edit vap");
    eventually("edited VAP restored", || async {
        e.vap(&p)
            .await
            .and_then(|v| v.spec)
            .and_then(|s| s.failure_policy)
            == Some("Ignore".into())
    })
    .await;
    // Delete the VAP.
    papi.delete(&p, &DeleteParams::default())
        .await
        .expect("delete vap");
    eventually("deleted VAP restored", || async {
        e.vap(&p).await.is_some()
    })
    .await;
    assert_idle(&r, TIMEOUT).await;

    let f = e
        .vapb(&bname(&kind, "f"))
        .await
        .expect("foreign binding still there");
    assert_eq!(f.metadata.uid, foreign_uid(&e, &kind).await);
    assert_eq!(
        f.spec.and_then(|s| s.validation_actions),
        Some(vec!["Audit".into()]),
        "the foreign binding is untouched"
    );
    bapi.delete(&bname(&kind, "f"), &DeleteParams::default())
        .await
        .expect("cleanup");
    e.clean_up_with(r, &[&kind]).await;
}

async fn foreign_uid(e: &Env, kind: &str) -> Option<String> {
    e.vapb(&bname(kind, "f")).await.and_then(|b| b.metadata.uid)
}

/// Two copies on one Lease: both watch, only the holder writes; the other takes over when the
/// holder stops (graceful release), and again when a holder process is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_two_copies_one_writer_and_handover() {
    let _s = serial();
    let e = Env::new().await;
    let lease = e.env.unique_name("pair");
    let o = opts(0);
    let a = e.leader(&lease, o.clone()).await;
    let b = e.reconciler(&lease, o.clone()).await;
    let kind = e.env.unique_kind("Pair");
    e.put_template(&template(&kind, Some(true))).await;
    for c in ["c1", "c2", "c3"] {
        e.put_constraint(&kind, c, json!({ "parameters": { "labels": ["x"] } }))
            .await;
    }
    let bn = bname(&kind, "c3");
    eventually("bindings written", || async { e.vapb(&bn).await.is_some() }).await;
    assert_idle(&a, TIMEOUT).await;
    assert_idle(&b, TIMEOUT).await;
    assert!(a.writes_total() >= 4, "the holder wrote");
    assert_eq!(b.writes_total(), 0, "the other copy never writes");
    // Both caches are warm: the follower reached the same opinion.
    assert_eq!(a.opinion(&kind), b.opinion(&kind));

    // Graceful stop releases the lease: b takes over at once.
    let t = Instant::now();
    stop(a).await;
    b.leading(Duration::from_secs(10))
        .await
        .expect("b takes over after a release");
    eprintln!("takeover after release: {:?}", t.elapsed());
    e.put_constraint(&kind, "c4", json!({ "parameters": { "labels": ["x"] } }))
        .await;
    let bn = bname(&kind, "c4");
    eventually("new leader writes", || async {
        e.vapb(&bn).await.is_some()
    })
    .await;
    stop(b).await;

    // A holder that dies without releasing: its lease expires, the other copy takes over.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-vap"))
        .args([
            "run",
            "--binding-wait=0s",
            "--lease-namespace",
            LEASE_NS,
            "--lease-name",
            &lease,
        ])
        .arg("--kubeconfig")
        .arg(e.env.kubeconfig_admin())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn kubectl-vap run");
    eventually("the process holds the lease", || async {
        kubectl_vap::controller::read_lease(&e.client, LEASE_NS, &lease)
            .await
            .ok()
            .and_then(|v| v.holder)
            .is_some_and(|h| h.contains(&child.id().to_string()))
    })
    .await;
    let c = e.reconciler(&lease, o.clone()).await;
    assert!(c.leading(Duration::from_secs(3)).await.is_err(), "c waits");
    // SIGKILL: no release.
    child.kill().expect("kill");
    let _ = child.wait();
    let t = Instant::now();
    c.leading(Duration::from_secs(40))
        .await
        .expect("c takes over after expiry");
    eprintln!("takeover after kill: {:?}", t.elapsed());
    e.put_constraint(&kind, "c5", json!({ "parameters": { "labels": ["x"] } }))
        .await;
    let bn = bname(&kind, "c5");
    eventually("the new leader writes", || async {
        e.vapb(&bn).await.is_some()
    })
    .await;
    e.clean_up_with(c, &[&kind]).await;
}

/// `run --once` with the real binary, then real admission: a violating object is denied and
/// a compliant one admitted, for parameters, namespaces, excludedNamespaces, kinds and name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_run_once_then_real_admission() {
    let _s = serial();
    let e = Env::new().await;
    let kind = e.env.unique_kind("Adm");
    let ns_in = e.env.create_namespace("adm-in").await;
    let ns_out = e.env.create_namespace("adm-out").await;
    let id = e.env.unique_name("adm");
    e.put_template(&template(&kind, Some(true))).await;
    let sel = json!({ "matchLabels": { "e2e-id": id } });
    e.put_constraint(&kind, "params", json!({ "parameters": { "labels": ["owner"] },
        "match": { "labelSelector": sel, "namespaces": [ns_in], "kinds": [{ "apiGroups": [""], "kinds": ["ConfigMap"] }], "name": "cm-*" } })).await;
    e.put_constraint(&kind, "excluded", json!({ "parameters": { "labels": ["team"] },
        "match": { "labelSelector": sel, "excludedNamespaces": [ns_in], "kinds": [{ "apiGroups": [""], "kinds": ["ConfigMap"] }] } })).await;
    // scope: Cluster (Gatekeeper ignores spec.match.scope; kubectl-vap honours it).
    e.put_constraint(
        &kind,
        "cluster",
        json!({ "parameters": { "labels": ["zone"] },
        "match": { "labelSelector": sel, "scope": "Cluster" } }),
    )
    .await;
    let lease = e.env.unique_name("once");
    let out = run_once(&e.env.kubeconfig_admin(), &lease, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run --once failed: {stderr}");
    assert!(stderr.contains("converged"), "{stderr}");
    e.assert_converged(&opts(0), "after run --once").await;

    let cm = |name: &str, labels: Value| -> ConfigMap {
        let mut l = labels;
        l["e2e-id"] = json!(id);
        serde_json::from_value(json!({ "metadata": { "name": name, "labels": l } })).expect("cm")
    };
    let create = |ns: String, c: ConfigMap| {
        let client = e.client.clone();
        async move {
            Api::<ConfigMap>::namespaced(client, &ns)
                .create(&PostParams::default(), &c)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };
    // params + namespaces + kinds + name: cm-* in ns_in without owner → denied.
    let start = Instant::now();
    let mut n = 0;
    loop {
        n += 1;
        let r = create(
            ns_in.clone(),
            cm(&format!("cm-bad-{n}"), json!({ "team": "t" })),
        )
        .await;
        match r {
            Err(msg) if msg.contains("missing required labels: owner") => break,
            other => {
                assert!(start.elapsed() < TIMEOUT, "not denied: {other:?}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
    eprintln!("denied after {:?}", start.elapsed());
    // Compliant.
    create(
        ns_in.clone(),
        cm("cm-good", json!({ "owner": "me", "team": "t" })),
    )
    .await
    .expect("compliant admitted");
    // name does not match cm-*: the "params" constraint does not apply.
    create(ns_in.clone(), cm("other-name", json!({ "team": "t" })))
        .await
        .expect("name not matched → admitted");
    // excludedNamespaces: ns_in is excluded from "excluded" (labels: team) → admitted above;
    // in ns_out (not in namespaces of "params") a missing team label is denied by "excluded".
    let r = create(ns_out.clone(), cm("cm-x", json!({ "owner": "me" }))).await;
    assert!(
        r.as_ref()
            .is_err_and(|m| m.contains("missing required labels: team")),
        "{r:?}"
    );
    create(
        ns_out.clone(),
        cm("cm-y", json!({ "owner": "me", "team": "t" })),
    )
    .await
    .expect("admitted");
    // kinds: a Secret is not matched.
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(
        json!({ "metadata": { "name": "cm-secret", "labels": { "e2e-id": id } } }),
    )
    .expect("secret");
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(e.client.clone(), &ns_in)
        .create(&PostParams::default(), &secret)
        .await
        .expect("kind not matched → admitted");
    // scope: Cluster — namespaced objects without `zone` were admitted above; a Namespace
    // (cluster-scoped) without it is denied, with it admitted.
    let nsapi = Api::<Namespace>::all(e.client.clone());
    let ns_obj = |name: &str, labels: Value| -> Namespace {
        let mut l = labels;
        l["e2e-id"] = json!(id);
        serde_json::from_value(json!({ "metadata": { "name": name, "labels": l } })).expect("ns")
    };
    let r = nsapi
        .create(
            &PostParams::default(),
            &ns_obj(&e.env.unique_name("scope-bad"), json!({})),
        )
        .await;
    assert!(
        r.as_ref()
            .is_err_and(|m| m.to_string().contains("missing required labels: zone")),
        "a cluster-scoped object is in scope: {r:?}"
    );
    nsapi
        .create(
            &PostParams::default(),
            &ns_obj(&e.env.unique_name("scope-ok"), json!({ "zone": "a" })),
        )
        .await
        .expect("compliant Namespace admitted");

    // Clean up through the reconciler again.
    e.cleanup(&[&kind]).await;
    let out = run_once(&e.env.kubeconfig_admin(), &lease, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(e.vap(&pname(&kind)).await.is_none());
}

/// The one-shot commands while a copy leads elsewhere ask it (and print its answer, without
/// joining the election); with the Lease free they lead briefly, and `reconcile TEMPLATE`
/// writes only that template's objects; `reconcile --all` converges everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_one_shot_commands_and_the_lease() {
    let _s = serial();
    let e = Env::new().await;
    let kind = e.generating_kind("Shot", "c").await;
    let other = e.generating_kind("Other", "c").await;
    // The one-shot commands use the default Lease gatekeeper-system/kubectl-vap.
    let ns: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": "gatekeeper-system" } })).expect("ns");
    let _ = Api::<Namespace>::all(e.client.clone())
        .create(&PostParams::default(), &ns)
        .await;
    let one_shot = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-vap"))
            .args(args)
            .arg("--binding-wait=0s")
            .arg("--kubeconfig")
            .arg(e.env.kubeconfig_admin())
            .output()
            .expect("one-shot command")
    };
    let holder = e.reconciler_on("gatekeeper-system", "kubectl-vap").await;
    holder
        .leading(Duration::from_secs(30))
        .await
        .expect("holder leads");
    assert_idle(&holder, TIMEOUT).await;
    let template = kind.to_lowercase();
    let out = one_shot(&["replay", &template]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("is held by") && stderr.contains("asking it"),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!(
            "replayed 1 constraint of template {template}: 0 writes"
        )) && stdout.contains(holder.identity()),
        "the holder's answer: {stdout}"
    );
    assert!(
        holder
            .events()
            .iter()
            .any(|ev| ev.verb == EventVerb::Replay),
        "the holder handled it"
    );
    // An unknown template: the holder says so (bad input: exit 2).
    let out = one_shot(&["replay", "nosuchtemplate"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("template nosuchtemplate not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stop(holder).await;

    // Lease free: `reconcile TEMPLATE` leads briefly and writes that template's objects only.
    for k in [&kind, &other] {
        Api::<ValidatingAdmissionPolicyBinding>::all(e.client.clone())
            .delete(&bname(k, "c"), &DeleteParams::default())
            .await
            .expect("delete a binding by hand");
    }
    let out = one_shot(&["reconcile", &template]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("reconciled template {template}")),
        "{stdout}"
    );
    assert!(e.vapb(&bname(&kind, "c")).await.is_some(), "{stdout}");
    assert!(
        e.vapb(&bname(&other, "c")).await.is_none(),
        "another template's binding is not written: {stdout}"
    );
    // Lease free: reconcile --all takes it, converges and releases it.
    let out = one_shot(&["reconcile", "--all"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("reconciled everything"), "{stdout}");
    assert!(e.vapb(&bname(&other, "c")).await.is_some());
    e.cleanup(&[&kind, &other]).await;
    let out = one_shot(&["reconcile", "--all"]);
    assert!(out.status.success());
}

/// A copy that does not lead (the TUI without --reconcile) asks the holder and gets its
/// answer; the holder's outcomes are Kubernetes Events that the observer sees and `kubectl
/// events` shows; the holder's health rides on its renewals; once it stops, the observer sees
/// the Lease vacant and a request says nobody reconciles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_requests_reach_the_leader_and_outcomes_are_events() {
    use kubectl_vap::controller::Command;
    let _s = serial();
    let e = Env::new().await;
    let kind = e.generating_kind("Ask", "c0").await;
    for i in 1..3 {
        e.put_constraint(
            &kind,
            &format!("c{i}"),
            json!({ "parameters": { "labels": ["x"] } }),
        )
        .await;
    }
    let template = kind.to_lowercase();
    let lease = e.env.unique_name("ask");
    let leader = e.leader(&lease, opts(0)).await;
    assert_idle(&leader, TIMEOUT).await;
    let observer = launch(
        e.env_client().await,
        Config::new(
            opts(0),
            Mode::ReadOnly {
                lease_namespace: LEASE_NS.into(),
                lease_name: lease.clone(),
            },
        ),
        Tuning::default(),
    )
    .await
    .expect("observer starts");
    eventually("the observer sees the holder and its health", || async {
        let st = observer.state();
        st.lease.holder.as_deref() == Some(leader.identity())
            && !st.lease.vacant
            && st.lease.since.is_some()
            && st
                .lease
                .health
                .as_ref()
                .is_some_and(|h| h.last_sync.is_some())
    })
    .await;

    // A binding deleted while nobody looks is a write the replay makes.
    let _ = Api::<ValidatingAdmissionPolicyBinding>::all(e.client.clone())
        .delete(&bname(&kind, "c1"), &DeleteParams::default())
        .await;
    let outcome = observer
        .request(Command::Replay(template.clone()))
        .await
        .expect("the holder answers");
    assert_eq!(outcome.handled_by, leader.identity());
    assert!(
        outcome
            .summary
            .starts_with(&format!("replayed 3 constraints of template {template}")),
        "{outcome:?}"
    );
    assert!(outcome.writes <= 1 && outcome.failures == 0, "{outcome:?}");
    assert!(e.vapb(&bname(&kind, "c1")).await.is_some());
    let outcome = observer
        .request(Command::Reconcile(template.clone()))
        .await
        .expect("the holder answers");
    assert_eq!(
        (outcome.writes, outcome.failures),
        (0, 0),
        "converged: {outcome:?}"
    );

    // The outcomes, as Events the observer reads back and kubectl shows.
    eventually("the observer shows the holder's Events", || async {
        let st = observer.state();
        let of_template = |reason: &str| {
            st.cluster_events.iter().any(|ev| {
                ev.reason == reason
                    && ev.regarding.name == template
                    && ev.reporter == leader.identity()
            })
        };
        of_template("Written") && of_template("Replayed") && of_template("Reconciled")
    })
    .await;
    let written = observer
        .state()
        .cluster_events
        .iter()
        .find(|ev| ev.reason == "Written" && ev.regarding.name == template)
        .map(|ev| ev.note.clone())
        .unwrap_or_default();
    assert!(
        written.contains("created VAP") && written.contains("created 3 bindings"),
        "one Event for the first convergence of the template: {written}"
    );
    let kubectl = std::process::Command::new(&e.env.binaries().kubectl)
        .arg("--kubeconfig")
        .arg(e.env.kubeconfig_admin())
        .args(["events", "-n", "default", "--for"])
        .arg(format!("constrainttemplate/{template}"))
        .output()
        .expect("kubectl events");
    let text = String::from_utf8_lossy(&kubectl.stdout);
    assert!(
        text.contains("Replayed") && text.contains("Written"),
        "kubectl events --for constrainttemplate/{template}:\n{text}{}",
        String::from_utf8_lossy(&kubectl.stderr)
    );

    // The leader goes: the observer sees the Lease vacant; a request says nobody reconciles.
    stop(leader).await;
    eventually("the observer sees nobody leads", || async {
        observer.state().lease.vacant
    })
    .await;
    let err = observer
        .request(Command::Replay(template.clone()))
        .await
        .expect_err("nobody to ask");
    assert!(err.to_string().contains("no copy reconciles"), "{err}");
    stop(observer).await;
    e.sweep(&[&kind], "ask-clean").await;
}

impl Env {
    async fn reconciler_on(&self, ns: &str, lease: &str) -> Running {
        let config = Config::new(
            opts(0),
            Mode::Elect {
                lease_namespace: ns.into(),
                lease_name: lease.into(),
                take_over: false,
            },
        );
        launch(self.env_client().await, config, Tuning::default())
            .await
            .expect("reconciler starts")
    }
}

/// A Deployment that looks like Gatekeeper's generator makes `run` refuse (with how to turn
/// it off), unless `--take-over`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_refuses_next_to_gatekeepers_generator() {
    let _s = serial();
    let e = Env::new().await;
    let ns = e.env.create_namespace("gk").await;
    let d = gatekeeper_deployment(
        "gatekeeper-audit",
        &["--operation=audit", "--operation=generate"],
    );
    let dapi = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(e.client.clone(), &ns);
    dapi.create(&PostParams::default(), &d)
        .await
        .expect("deployment");
    let lease = e.env.unique_name("gk");
    let run = |extra: &[&str]| run_once(&e.env.kubeconfig_admin(), &lease, extra);
    let out = run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("audit.disableGenerateOperation=true") && stderr.contains("--take-over"),
        "{stderr}"
    );
    let out = run(&["--take-over"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dapi.delete("gatekeeper-audit", &DeleteParams::default())
        .await
        .expect("cleanup");
}

/// Gatekeeper's generator switched on while `run` writes: writing stops, and says why, until
/// it is off again; then everything is reconciled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_stops_writing_while_gatekeepers_generator_is_on() {
    let _s = serial();
    let e = Env::new().await;
    let tuning = Tuning {
        gatekeeper_recheck: Duration::from_millis(300),
        ..Tuning::default()
    };
    let r = e
        .reconciler_with(&e.env.unique_name("gk-later"), opts(0), tuning)
        .await;
    r.leading(Duration::from_secs(20)).await.expect("leads");
    let ns = e.env.create_namespace("gk-later").await;
    let d = gatekeeper_deployment("gatekeeper-controller-manager", &["--port=8443"]);
    let dapi = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(e.client.clone(), &ns);
    dapi.create(&PostParams::default(), &d)
        .await
        .expect("deployment");
    eventually("writes stop", || async {
        !r.writes_enabled() && r.state().gatekeeper_generator.is_some()
    })
    .await;
    let writes = r.writes_total();
    let kind = e.generating_kind("GkLater", "c").await;
    assert_idle(&r, TIMEOUT).await;
    assert!(e.vap(&pname(&kind)).await.is_none(), "nothing written");
    assert_eq!(r.writes_total(), writes);

    dapi.delete("gatekeeper-controller-manager", &DeleteParams::default())
        .await
        .expect("delete deployment");
    let bn = bname(&kind, "c");
    eventually("written once the generator is off", || async {
        e.vap(&pname(&kind)).await.is_some() && e.vapb(&bn).await.is_some()
    })
    .await;
    assert!(r.writes_enabled());
    e.clean_up_with(r, &[&kind]).await;
}

/// The ClusterRole and lease Role of `install --print`, bound to the non-admin user, are
/// enough to converge; without the binding-write verbs the run fails with a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_rbac_least_privilege() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let _s = serial();
    let e = Env::new().await;
    let kind = e.generating_kind("Rbac", "c").await;
    let role_name = e.env.unique_name("vap-rbac");
    // The manifests `install --print` prints, bound to the test user instead of the SA.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-vap"))
        .args(["install", "--print", "--namespace", LEASE_NS])
        .output()
        .expect("install --print");
    assert!(out.status.success());
    let manifests = String::from_utf8(out.stdout).expect("utf-8");
    let mut cluster_role: Option<ClusterRole> = None;
    let mut role: Option<Role> = None;
    for doc in manifests.split("\n---\n") {
        let v: Value = match serde_norway::from_str(doc) {
            Ok(v) => v,
            Err(_) => continue,
        };
        // The reconciler's own roles (the operator's ClusterRole and the events Role too).
        match (v["kind"].as_str(), v["metadata"]["name"].as_str()) {
            (Some("ClusterRole"), Some("kubectl-vap")) => {
                cluster_role = serde_json::from_value(v).ok()
            }
            (Some("Role"), Some("kubectl-vap-lease")) => role = serde_json::from_value(v).ok(),
            _ => {}
        }
    }
    let mut cluster_role = cluster_role.expect("ClusterRole in install --print");
    let mut role = role.expect("Role in install --print");
    cluster_role.metadata.name = Some(role_name.clone());
    role.metadata.name = Some(role_name.clone());
    role.metadata.namespace = Some(LEASE_NS.into());
    let lease = e.env.unique_name("rbac");
    // install --print names the default Lease; this test uses its own.
    role.rules = serde_json::from_value(kubectl_vap::cli::install::lease_role_rules(&lease))
        .expect("lease rules");
    let user = json!([{ "kind": "User", "name": testenv::USER_NAME, "apiGroup": "rbac.authorization.k8s.io" }]);
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": { "name": role_name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name },
        "subjects": user
    }))
    .expect("crb");
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": role_name, "namespace": LEASE_NS },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name },
        "subjects": user
    }))
    .expect("rb");
    let pp = PostParams::default();
    let crapi = Api::<ClusterRole>::all(e.client.clone());
    crapi
        .create(&pp, &cluster_role)
        .await
        .expect("cluster role");
    Api::<Role>::namespaced(e.client.clone(), LEASE_NS)
        .create(&pp, &role)
        .await
        .expect("role");
    Api::<ClusterRoleBinding>::all(e.client.clone())
        .create(&pp, &crb)
        .await
        .expect("crb");
    Api::<RoleBinding>::namespaced(e.client.clone(), LEASE_NS)
        .create(&pp, &rb)
        .await
        .expect("rb");
    let run = || run_once(&e.env.kubeconfig_user(), &lease, &[]);
    // RBAC caches: give the authorizer a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let out = run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the install --print role is enough: {stderr}"
    );
    assert!(e.vapb(&bname(&kind, "c")).await.is_some());

    // The same grants in a pod's shoes: `run --in-cluster` reads the service-account token,
    // CA and namespace from their files and logs JSON.
    e.put_constraint(&kind, "pod", json!({ "parameters": { "labels": ["x"] } }))
        .await;
    let out = e
        .env
        .in_pod_command(
            std::path::Path::new(env!("CARGO_BIN_EXE_kubectl-vap")),
            LEASE_NS,
        )
        .expect("in-pod command")
        .args(["run", "--in-cluster", "--once", "--binding-wait=0s"])
        .args(["--lease-namespace", LEASE_NS, "--lease-name", &lease])
        .output()
        .expect("run --in-cluster");
    let logs =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "run --in-cluster --once: {logs}");
    assert!(e.vapb(&bname(&kind, "pod")).await.is_some(), "{logs}");
    // Logs (stderr) are JSON; stdout is the report of what `--once` did.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "in-cluster mode logs: {logs}");
    for line in lines {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|err| panic!("not a JSON log line ({err}): {line}"));
        assert!(v["level"].is_string(), "no level: {line}");
    }

    // Narrower: no create/update/delete on bindings.
    let full = crapi.get(&role_name).await.expect("role");
    let mut narrow = full.clone();
    for rule in narrow.rules.iter_mut().flatten() {
        if rule
            .resources
            .iter()
            .flatten()
            .any(|r| r == "validatingadmissionpolicybindings")
        {
            rule.resources = Some(vec!["validatingadmissionpolicies".into()]);
        }
    }
    narrow.rules.get_or_insert_with(Vec::new).push(
        serde_json::from_value(json!({ "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingadmissionpolicybindings"], "verbs": ["list", "watch"] }))
        .expect("rule"),
    );
    crapi
        .replace(&role_name, &pp, &narrow)
        .await
        .expect("narrow role");
    e.put_constraint(&kind, "c2", json!({ "parameters": { "labels": ["x"] } }))
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let out = run_once(&e.env.kubeconfig_user(), &lease, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("forbidden") && stderr.contains("install --print"),
        "{stderr}"
    );

    // A copy that keeps running keeps retrying (with backoff): the refusal is counted and
    // logged, and once the grant is back the binding is written without a restart.
    let mut config = Config::new(
        opts(0),
        Mode::Elect {
            lease_namespace: LEASE_NS.into(),
            lease_name: lease.clone(),
            take_over: false,
        },
    );
    config.workers = 4;
    let r = launch(e.env.client_user().await, config, Tuning::default())
        .await
        .expect("reconciler starts as the user");
    r.leading(Duration::from_secs(20)).await.expect("leads");
    eventually("the forbidden write is reported", || async {
        r.metrics_text()
            .lines()
            .any(|l| l.starts_with("kubectl_vap_write_errors_total{reason=\"forbidden\"}"))
    })
    .await;
    let failed = writes_of(&r);
    assert!(
        failed
            .iter()
            .any(|w| w.contains(&bname(&kind, "c2")) && w.contains("Failed(\"forbidden")),
        "the failed create is in the event log: {failed:#?}"
    );
    assert!(e.vapb(&bname(&kind, "c2")).await.is_none());
    let mut full = full;
    full.metadata.resource_version = None;
    crapi
        .replace(&role_name, &pp, &full)
        .await
        .expect("role granted again");
    eventually("written once the grant is back", || async {
        e.vapb(&bname(&kind, "c2")).await.is_some()
    })
    .await;
    assert_idle(&r, TIMEOUT).await;
    stop(r).await;
    e.sweep(&[&kind], "rbac-clean").await;
}

/// The API server restarts in the middle of convergence: the reconciler resumes (watches
/// re-list, writes retried) and converges exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_apiserver_restart_mid_convergence() {
    let _s = serial();
    let e = Env::private().await;
    let env = e.env;
    let kinds: Vec<String> = (0..10)
        .map(|i| env.unique_kind(&format!("Restart{i}")))
        .collect();
    for k in &kinds {
        e.put_template(&template(k, Some(true))).await;
        for c in 0..10 {
            e.put_constraint(
                k,
                &format!("c{c}"),
                json!({ "parameters": { "labels": ["x"] } }),
            )
            .await;
        }
    }
    let o = opts(0);
    let r = e.leader(&env.unique_name("restart"), o.clone()).await;
    // Let some writes through, then pull the server away.
    let start = Instant::now();
    while r.writes_total() < 10 && start.elapsed() < TIMEOUT {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.stop_apiserver().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    env.start_apiserver().await.expect("apiserver back");
    // The lease may have been lost meanwhile; the copy re-acquires it.
    r.leading(Duration::from_secs(60))
        .await
        .expect("leads again");
    assert_idle(&r, Duration::from_secs(120)).await;
    let client = env.client_admin().await;
    let e2 = Env { env, client };
    e2.assert_converged(&o, "after the restart").await;
    stop(r).await;
}

/// A watch gap: while this copy's API server is away, another API server on the same etcd
/// deletes a constraint, adds one, turns a template off, deletes a binding by hand and adds a
/// template with a constraint. The server comes back with a fresh watch cache, so the watches
/// learn of all that only by relisting (no delete event for what vanished). The copy keeps the
/// lease throughout (a long lease: no resync-on-gain to hide behind) and converges exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_changes_during_a_watch_gap_are_reconciled_after_the_relist() {
    let _s = serial();
    let e = Env::private().await;
    let env = e.env;
    let [k1, k2, k3] = ["GapA", "GapB", "GapC"].map(|p| env.unique_kind(p));
    for k in [&k1, &k2] {
        e.put_template(&template(k, Some(true))).await;
    }
    for c in ["a", "b"] {
        e.put_constraint(&k1, c, json!({ "parameters": { "labels": ["x"] } }))
            .await;
    }
    e.put_constraint(&k2, "c", json!({ "parameters": { "labels": ["x"] } }))
        .await;
    let o = opts(0);
    let tuning = Tuning {
        lease_duration: Duration::from_secs(600),
        ..Tuning::default()
    };
    let r = e
        .reconciler_with(&env.unique_name("gap"), o.clone(), tuning)
        .await;
    r.leading(Duration::from_secs(20)).await.expect("leads");
    eventually("converged before the gap", || async {
        e.vapb(&bname(&k2, "c")).await.is_some() && e.vapb(&bname(&k1, "b")).await.is_some()
    })
    .await;
    assert_idle(&r, TIMEOUT).await;

    env.stop_apiserver().await;
    let other = Env {
        env,
        client: env
            .start_apiserver_elsewhere()
            .await
            .expect("second server"),
    };
    other
        .constraints(&k1)
        .delete("a", &DeleteParams::default())
        .await
        .expect("delete constraint a");
    other
        .put_constraint(&k1, "new", json!({ "parameters": { "labels": ["x"] } }))
        .await;
    other.put_template(&template(&k2, Some(false))).await;
    Api::<ValidatingAdmissionPolicyBinding>::all(other.client.clone())
        .delete(&bname(&k1, "b"), &DeleteParams::default())
        .await
        .expect("delete binding b by hand");
    other.put_template(&template(&k3, Some(true))).await;
    eventually("the new kind is served", || async {
        other
            .constraints(&k3)
            .list(&Default::default())
            .await
            .is_ok()
    })
    .await;
    other
        .put_constraint(&k3, "d", json!({ "parameters": { "labels": ["x"] } }))
        .await;
    env.stop_apiserver().await;
    env.start_apiserver().await.expect("apiserver back");

    // The watches reconnect with backoff; then every change above is acted on.
    for (what, binding, present) in [
        ("constraint a deleted", bname(&k1, "a"), false),
        ("constraint new added", bname(&k1, "new"), true),
        ("binding b restored", bname(&k1, "b"), true),
        ("template B off", bname(&k2, "c"), false),
        ("template C added", bname(&k3, "d"), true),
    ] {
        let start = Instant::now();
        while e.vapb(&binding).await.is_some() != present {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "{what}: {binding} {} after the gap; writes: {:#?}",
                if present { "missing" } else { "still there" },
                writes_of(&r)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    eventually("the VAP of template B deleted", || async {
        e.vap(&pname(&k2)).await.is_none()
    })
    .await;
    assert_idle(&r, TIMEOUT).await;
    e.assert_converged(&o, "after the watch gap").await;
    let lease_events = Some(r.events())
        .map(|ev| {
            ev.iter()
                .filter(|e| matches!(e.verb, kubectl_vap::controller::state::EventVerb::Lease))
                .count()
        })
        .unwrap_or_default();
    assert_eq!(lease_events, 1, "the copy kept the lease across the gap");
    stop(r).await;
}

/// Constraint kinds come and go with their CRDs at run time: deleting a constraint CRD (the API
/// server deletes its constraints) stops the kind's watch and deletes its bindings; creating it
/// again starts a new watch and the binding is written again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_crd_deleted_by_hand_comes_back_without_its_constraints() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let _s = serial();
    let e = Env::new().await;
    let kind = e.generating_kind("Crd", "c").await;
    let r = e.leader(&e.env.unique_name("crd"), opts(0)).await;
    let bn = bname(&kind, "c");
    eventually("bound", || async { e.vapb(&bn).await.is_some() }).await;
    let watching = |r: &Running| r.watched_kinds().contains(&kind);
    assert!(watching(&r));

    let crd = format!("{}.constraints.gatekeeper.sh", kind.to_lowercase());
    let crds: Api<CustomResourceDefinition> = Api::all(e.client.clone());
    let uid = |c: &CustomResourceDefinition| c.metadata.uid.clone().unwrap_or_default();
    let first = crds.get(&crd).await.expect("the CRD");
    // Deleted by hand: the server deletes its constraints with it.
    crds.delete(&crd, &DeleteParams::default())
        .await
        .expect("delete the constraint CRD");
    eventually("the binding of the deleted constraint deleted", || async {
        e.vapb(&bn).await.is_none()
    })
    .await;
    // Its template is still there: the template side creates the CRD again.
    eventually("the CRD created again by kubectl-vap", || async {
        crds.get_opt(&crd)
            .await
            .ok()
            .flatten()
            .is_some_and(|c| uid(&c) != uid(&first))
    })
    .await;
    eventually("the kind watched again", || async { watching(&r) }).await;
    assert_idle(&r, TIMEOUT).await;
    assert!(
        r.access_errors().is_empty(),
        "a restarted watch leaves no access error"
    );
    assert!(
        e.vap(&pname(&kind)).await.is_some(),
        "the template's VAP stays"
    );

    // The user creates the constraint again: bound again.
    e.put_constraint(&kind, "c", json!({ "parameters": { "labels": ["x"] } }))
        .await;
    eventually("bound again", || async { e.vapb(&bn).await.is_some() }).await;
    assert!(watching(&r));
    assert_idle(&r, TIMEOUT).await;
    e.clean_up_with(r, &[&kind]).await;
}

/// `run --metrics-addr`: `/healthz`, `/readyz` and `/metrics` (writes, errors, queue depth,
/// leader gauge) next to a running reconciler; SIGTERM releases the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_run_serves_metrics_and_releases_on_sigterm() {
    let _s = serial();
    let e = Env::new().await;
    let kind = e.generating_kind("Metrics", "c").await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let lease = e.env.unique_name("metrics");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-vap"))
        .args([
            "run",
            "--binding-wait=0s",
            "--lease-namespace",
            LEASE_NS,
            "--lease-name",
            &lease,
        ])
        .arg(format!("--metrics-addr=127.0.0.1:{port}"))
        .arg("--kubeconfig")
        .arg(e.env.kubeconfig_admin())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn run");
    eventually("/readyz answers 200", || async {
        http_get(port, "/readyz").starts_with("HTTP/1.1 200")
    })
    .await;
    assert!(http_get(port, "/healthz").starts_with("HTTP/1.1 200"));
    eventually("/metrics shows the leader and the writes", || async {
        let m = http_get(port, "/metrics");
        m.contains("kubectl_vap_leader 1")
            && m.contains("kubectl_vap_writes_total{verb=\"create\",resource=\"validatingadmissionpolicybindings\"}")
            && m.contains("kubectl_vap_queue_depth")
    })
    .await;
    // SIGTERM: the lease is released (holder cleared), the process exits 0.
    // SAFETY: plain kill(2) on our own child.
    unsafe {
        libc_kill(child.id() as i32, 15);
    }
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status:?}");
    let holder = kubectl_vap::controller::read_lease(&e.client, LEASE_NS, &lease)
        .await
        .expect("lease")
        .holder;
    assert_eq!(holder, None, "the lease is released on SIGTERM");
    e.sweep(&[&kind], "metrics-clean").await;
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// `check` and `plan` against the live cluster (the real binary): nothing to report for a
/// converged kind; a deleted binding is `binding-missing` (exit 1) and planned as a create;
/// a user without rights (`--as`, impersonated) gets exit 2 naming what it cannot read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_live_check_and_plan() {
    let _s = serial();
    let e = Env::new().await;
    let kind = e.generating_kind("Check", "c").await;
    let r = e.leader(&e.env.unique_name("check"), opts(0)).await;
    assert_idle(&r, TIMEOUT).await;
    stop(r).await;
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-vap"))
            .args(args)
            .arg("--binding-wait=0s")
            .arg("--kubeconfig")
            .arg(e.env.kubeconfig_admin())
            .output()
            .expect("kubectl-vap")
    };
    let mine = |out: &std::process::Output, key: &str| -> Vec<Value> {
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&out.stdout)));
        v[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| {
                f["object"]["name"]
                    .as_str()
                    .is_some_and(|n| n.contains(&kind.to_lowercase()))
            })
            .cloned()
            .collect()
    };
    let out = cli(&["check", "-o", "json"]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    assert!(mine(&out, "findings").is_empty(), "converged: {out:?}");

    Api::<ValidatingAdmissionPolicyBinding>::all(e.client.clone())
        .delete(&bname(&kind, "c"), &DeleteParams::default())
        .await
        .expect("delete binding");
    let out = cli(&["check", "-o", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let findings = mine(&out, "findings");
    assert!(
        findings.iter().any(|f| f["code"] == "binding-missing"),
        "{findings:?}"
    );
    let out = cli(&["plan", "-o", "json"]);
    assert!(out.status.success());
    let actions = mine(&out, "actions");
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert_eq!(actions[0]["verb"], "create");

    let out = cli(&["check", "--as", "nobody-e2e"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("forbidden"), "{stderr}");

    e.sweep(&[&kind], "check-clean").await;
}

/// A Lease that cannot be used (its namespace does not exist) fails `run --once` quickly with
/// a message saying why, instead of waiting or claiming another copy holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_unusable_lease_is_explained() {
    let _s = serial();
    let e = Env::new().await;
    let start = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-vap"))
        .args([
            "run",
            "--once",
            "--lease-namespace",
            "no-such-namespace-e2e",
        ])
        .arg("--kubeconfig")
        .arg(e.env.kubeconfig_admin())
        .output()
        .expect("run --once");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot use Lease no-such-namespace-e2e/kubectl-vap")
            && stderr.contains("namespace must exist"),
        "{stderr}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

/// Taking over from Gatekeeper: objects Gatekeeper wrote (no managed-by label, its own CEL
/// text for the four matchers) that carry the same intent are left as they are — zero writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_takes_over_gatekeeper_objects_without_rewriting() {
    use kubectl_vap::core::decide::{Action, TemplateVerdict, decide_template};
    use kubectl_vap::core::generate;
    use kubectl_vap::model::{Constraint, ConstraintTemplate, Source};
    let _s = serial();
    let e = Env::new().await;
    let kind = e.generating_kind("Gk", "c").await;
    let t = e
        .templates()
        .get(&kind.to_lowercase())
        .await
        .expect("template");
    let t =
        ConstraintTemplate::from_value(serde_json::to_value(&t).expect("json"), Source::default());
    let TemplateVerdict::Generate {
        source,
        failure_policy,
        ..
    } = decide_template(&t, &opts(0))
    else {
        panic!("generates")
    };
    // What Gatekeeper writes: no labels, its own matcher CEL.
    let mut vap = generate::policy(&t, &kind, &source, failure_policy);
    vap.metadata.labels = None;
    for m in vap
        .spec
        .as_mut()
        .and_then(|s| s.match_conditions.as_mut())
        .into_iter()
        .flatten()
    {
        if m.name.starts_with("gatekeeper_internal_") {
            m.expression = "true".into();
        }
    }
    let c = e.constraints(&kind).get("c").await.expect("constraint");
    let mut c_json = serde_json::to_value(&c).expect("json");
    c_json["apiVersion"] = json!("constraints.gatekeeper.sh/v1beta1");
    c_json["kind"] = json!(kind);
    let c = Constraint::from_value(c_json, Source::default());
    let mut vapb = generate::binding(&c, &[Action::Deny]).expect("binding");
    vapb.metadata.labels = None;
    let pp = PostParams::default();
    let papi = Api::<ValidatingAdmissionPolicy>::all(e.client.clone());
    let bapi = Api::<ValidatingAdmissionPolicyBinding>::all(e.client.clone());
    let vap = papi.create(&pp, &vap).await.expect("Gatekeeper-style VAP");
    let vapb = bapi
        .create(&pp, &vapb)
        .await
        .expect("Gatekeeper-style VAPB");

    let r = e.leader(&e.env.unique_name("gk"), opts(0)).await;
    assert_idle(&r, TIMEOUT).await;
    assert_eq!(
        r.writes_total(),
        0,
        "Gatekeeper's equivalent objects are not rewritten"
    );
    let now_vap = e.vap(&pname(&kind)).await.expect("vap");
    let now_vapb = e.vapb(&bname(&kind, "c")).await.expect("vapb");
    assert_eq!(
        now_vap.metadata.resource_version,
        vap.metadata.resource_version
    );
    assert_eq!(
        now_vapb.metadata.resource_version,
        vapb.metadata.resource_version
    );
    // An intent change is still applied (one write), and then the object is ours.
    e.put_constraint(
        &kind,
        "c",
        json!({ "enforcementAction": "warn", "parameters": { "labels": ["x"] } }),
    )
    .await;
    let b = bname(&kind, "c");
    eventually("intent change applied", || async {
        e.actions(&b).await == Some(vec!["Warn".into()])
    })
    .await;
    assert_idle(&r, TIMEOUT).await;
    assert_eq!(r.writes_total(), 1);
    e.clean_up_with(r, &[&kind]).await;
}

/// The #3287 race on the real API server: a template flipped off → on → off faster than a
/// reconcile, while its constraints exist; then a seeded storm of template flips and
/// constraint churn (create, delete, change action) sent without waiting. At quiescence the
/// analysis of the live cluster plans nothing and finds nothing dangling or missing (I3), and
/// no binding ever outlives its policy once things settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_race_3287_and_a_storm_of_flips_and_churn() {
    use kubectl_vap::core::Code;
    let _s = serial();
    let e = Env::new().await;
    let kinds: Vec<String> = (0..3)
        .map(|i| e.env.unique_kind(&format!("Storm{i}")))
        .collect();
    let labels = json!({ "labels": ["owner"] });
    for k in &kinds {
        e.put_template(&template(k, Some(false))).await;
        for c in 0..4 {
            e.put_constraint(k, &format!("c{c}"), json!({ "parameters": labels }))
                .await;
        }
    }
    let o = opts(0);
    let r = e.leader(&e.env.unique_name("storm"), o.clone()).await;
    assert_idle(&r, TIMEOUT).await;
    e.assert_converged(&o, "before the race").await;

    // The exact #3287 sequence: no-generate / generate / no-generate, back to back.
    let k = &kinds[0];
    e.put_template(&template(k, Some(true))).await;
    e.put_template(&template(k, Some(false))).await;
    assert_idle(&r, TIMEOUT).await;
    e.assert_converged(&o, "after off/on/off").await;
    assert!(e.vap(&pname(k)).await.is_none(), "the last word was off");
    for c in 0..4 {
        assert!(
            e.vapb(&bname(k, &format!("c{c}"))).await.is_none(),
            "no dangling binding c{c}"
        );
    }

    // A seeded storm (a small LCG: reproducible, no extra dependency).
    let mut seed: u64 = 0x3287;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let actions = ["deny", "warn", "dryrun"];
    for _ in 0..60 {
        let k = &kinds[next(kinds.len() as u64) as usize];
        let c = format!("c{}", next(6));
        match next(4) {
            0 => e.put_template(&template(k, Some(next(2) == 0))).await,
            1 => {
                let action = actions[next(3) as usize];
                e.put_constraint(
                    k,
                    &c,
                    json!({ "enforcementAction": action, "parameters": labels }),
                )
                .await
            }
            2 => {
                let _ = e.constraints(k).delete(&c, &DeleteParams::default()).await;
            }
            _ => {
                e.put_constraint(k, &c, json!({ "parameters": labels }))
                    .await
            }
        }
    }
    assert_idle(&r, TIMEOUT).await; // the storm settles
    e.assert_converged(&o, "after the storm").await;
    let (snap, _) = list_snapshot(&e.client, &AdmissionApi::v1())
        .await
        .expect("list");
    let faults: Vec<String> = analyze(&snap, &o)
        .findings
        .iter()
        .filter(|f| {
            matches!(
                f.code,
                Code::BindingDangling
                    | Code::BindingMissing
                    | Code::PolicyMissing
                    | Code::PolicyDangling
                    | Code::BindingOutOfSync
                    | Code::PolicyOutOfSync
            )
        })
        .filter(|f| kinds.iter().any(|k| f.object.name.starts_with(&pname(k))))
        .map(|f| format!("{} {}", f.code, f.object))
        .collect();
    assert!(faults.is_empty(), "after the storm: {faults:#?}");
    // Every binding of these kinds points at a policy that exists.
    for b in snap
        .bindings
        .iter()
        .filter(|b| kinds.iter().any(|k| b.name().starts_with(&pname(k))))
    {
        assert!(
            snap.policies.iter().any(|p| p.name() == b.policy_name()),
            "{} dangles",
            b.name()
        );
    }
    stop(r).await;
    let refs: Vec<&str> = kinds.iter().map(String::as_str).collect();
    e.cleanup(&refs).await;
}

/// A copy started on a converged cluster writes nothing, even while its constraint kinds are
/// still listing: a binding whose constraint is not listed yet must not look orphaned. And a
/// copy started after every constraint was deleted deletes every binding, one write each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_restart_on_a_converged_cluster_writes_nothing() {
    let _s = serial();
    let e = Env::new().await;
    let lease = e.env.unique_name("restart");
    let kinds: Vec<String> = (0..24).map(|_| e.env.unique_kind("Restart")).collect();
    futures::future::join_all(kinds.iter().map(|kind| async {
        e.put_template(&template(kind, Some(true))).await;
        for c in ["c1", "c2"] {
            e.put_constraint(kind, c, json!({ "parameters": { "labels": ["x"] } }))
                .await;
        }
    }))
    .await;
    let a = e.leader(&lease, opts(0)).await;
    for kind in &kinds {
        let bn = bname(kind, "c2");
        eventually("bindings written", || async { e.vapb(&bn).await.is_some() }).await;
    }
    assert_idle(&a, TIMEOUT).await;
    stop(a).await;

    let b = e.leader(&lease, opts(0)).await;
    assert_idle(&b, TIMEOUT).await;
    assert_eq!(
        b.writes_total(),
        0,
        "a restart on a converged cluster writes nothing: {:#?}",
        writes_of(&b)
    );
    for kind in &kinds {
        for c in ["c1", "c2"] {
            assert!(e.vapb(&bname(kind, c)).await.is_some(), "{kind}/{c} kept");
        }
    }
    stop(b).await;

    // While no copy runs, every constraint is deleted. The next copy learns of it only from
    // its lists (no delete events): each binding's owner key must survive the start-up, when
    // keys of a kind whose list is just completing race with that kind's handler.
    for kind in &kinds {
        for c in ["c1", "c2"] {
            e.constraints(kind)
                .delete(c, &DeleteParams::default())
                .await
                .expect("delete constraint");
        }
    }
    let c = e.leader(&lease, opts(0)).await;
    assert_idle(&c, TIMEOUT).await;
    let mut kept = Vec::new();
    for kind in &kinds {
        for n in ["c1", "c2"] {
            if e.vapb(&bname(kind, n)).await.is_some() {
                kept.push(bname(kind, n));
            }
        }
    }
    assert!(
        kept.is_empty(),
        "bindings of deleted constraints left behind: {kept:?}; writes: {:#?}",
        writes_of(&c)
    );
    assert_eq!(c.writes_total(), 48, "one delete per binding");
    let refs: Vec<&str> = kinds.iter().map(String::as_str).collect();
    e.clean_up_with(c, &refs).await;
}

/// Grants `rules` cluster-wide and the Lease rules for `lease` to user `user` (impersonated
/// with `--as`: a user of its own, so no grant another test left applies); returns what to
/// delete afterwards.
async fn grant(e: &Env, user: &str, rules: Value, lease: &str) -> String {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let name = e.env.unique_name("vap-grant");
    let subjects =
        json!([{ "kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io" }]);
    let pp = PostParams::default();
    let cr: ClusterRole =
        serde_json::from_value(json!({ "metadata": { "name": name }, "rules": rules }))
            .expect("cluster role");
    Api::<ClusterRole>::all(e.client.clone())
        .create(&pp, &cr)
        .await
        .expect("create cluster role");
    let crb: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name },
        "subjects": subjects
    }))
    .expect("crb");
    Api::<ClusterRoleBinding>::all(e.client.clone())
        .create(&pp, &crb)
        .await
        .expect("create crb");
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": LEASE_NS },
        "rules": kubectl_vap::cli::install::lease_role_rules(lease)
    }))
    .expect("role");
    Api::<Role>::namespaced(e.client.clone(), LEASE_NS)
        .create(&pp, &role)
        .await
        .expect("create role");
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": LEASE_NS },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
        "subjects": subjects
    }))
    .expect("rb");
    Api::<RoleBinding>::namespaced(e.client.clone(), LEASE_NS)
        .create(&pp, &rb)
        .await
        .expect("create rb");
    name
}

async fn revoke(e: &Env, name: &str) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let dp = DeleteParams::default();
    let _ = Api::<ClusterRoleBinding>::all(e.client.clone())
        .delete(name, &dp)
        .await;
    let _ = Api::<ClusterRole>::all(e.client.clone())
        .delete(name, &dp)
        .await;
    let _ = Api::<RoleBinding>::namespaced(e.client.clone(), LEASE_NS)
        .delete(name, &dp)
        .await;
    let _ = Api::<Role>::namespaced(e.client.clone(), LEASE_NS)
        .delete(name, &dp)
        .await;
}

/// The ClusterRole rules of `install --print` with `verbs` removed on `resource` (a rule
/// naming other resources too is split, so only `resource` loses them).
fn rules_without(resource: &str, verbs: &[&str]) -> Value {
    let mut out = Vec::new();
    for rule in kubectl_vap::cli::install::cluster_role_rules()
        .as_array()
        .expect("rules")
    {
        let resources: Vec<&str> = rule["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .filter_map(|r| r.as_str())
            .collect();
        if !resources.contains(&resource) {
            out.push(rule.clone());
            continue;
        }
        let others: Vec<&str> = resources
            .iter()
            .copied()
            .filter(|r| *r != resource)
            .collect();
        if !others.is_empty() {
            let mut r = rule.clone();
            r["resources"] = json!(others);
            out.push(r);
        }
        let kept: Vec<&str> = rule["verbs"]
            .as_array()
            .expect("verbs")
            .iter()
            .filter_map(|v| v.as_str())
            .filter(|v| !verbs.contains(v))
            .collect();
        if !kept.is_empty() {
            let mut r = rule.clone();
            r["resources"] = json!([resource]);
            r["verbs"] = json!(kept);
            out.push(r);
        }
    }
    json!(out)
}

/// name → resourceVersion of the kind's VAP, bindings and CRD: any write changes one.
async fn versions_of(e: &Env, kind: &str) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let prefix = bname(kind, "");
    for b in Api::<ValidatingAdmissionPolicyBinding>::all(e.client.clone())
        .list(&Default::default())
        .await
        .expect("list bindings")
    {
        let n = b.metadata.name.clone().unwrap_or_default();
        if n.starts_with(&prefix) {
            out.insert(n, b.metadata.resource_version.unwrap_or_default());
        }
    }
    if let Some(p) = e.vap(&pname(kind)).await {
        out.insert(pname(kind), p.metadata.resource_version.unwrap_or_default());
    }
    let crd = format!("{}.constraints.gatekeeper.sh", kind.to_lowercase());
    if let Some(c) = Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(e.client.clone())
        .get_opt(&crd)
        .await
        .expect("get crd")
    {
        out.insert(crd, c.metadata.resource_version.unwrap_or_default());
    }
    out
}

/// Knowledge before action, on the real API server: from a converged kind (VAP, 3 bindings),
/// `run --once` as a user whose ClusterRole is `install --print`'s minus one right. Each time:
/// no write at all (every resourceVersion unchanged, no write in the report), exit 2, and the
/// message names what could not be read. Before: without `list` on CRDs every binding was
/// deleted ("constraint … is gone") with exit 0; without `watch` on CRDs or list/watch on
/// constraints, exit 0 "converged"; without list/watch on bindings, blind creates (409).
/// A continuous `run` without `list` on CRDs answers `/readyz` 503 naming them, and writes
/// nothing either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_unreadable_stores_mean_no_writes() {
    let _s = serial();
    let e = Env::new().await;
    let kind = e.generating_kind("Unread", "c0").await;
    for c in ["c1", "c2"] {
        e.put_constraint(&kind, c, json!({ "parameters": { "labels": ["x"] } }))
            .await;
    }
    let r = e.leader(&e.env.unique_name("unread-setup"), opts(0)).await;
    assert_idle(&r, TIMEOUT).await;
    stop(r).await;
    let converged = versions_of(&e, &kind).await;
    assert_eq!(converged.len(), 5, "VAP, 3 bindings, CRD: {converged:?}");

    let cases: [(&str, &[&str], &str); 7] = [
        (
            "customresourcedefinitions",
            &["list"],
            "customresourcedefinitions",
        ),
        (
            "customresourcedefinitions",
            &["list", "watch"],
            "customresourcedefinitions",
        ),
        (
            "customresourcedefinitions",
            &["watch"],
            "customresourcedefinitions",
        ),
        ("*", &["list", "watch"], ".constraints.gatekeeper.sh"),
        (
            "constrainttemplates",
            &["list", "watch"],
            "constrainttemplates",
        ),
        (
            "validatingadmissionpolicybindings",
            &["list", "watch"],
            "validatingadmissionpolicybindings",
        ),
        (
            "validatingadmissionpolicies",
            &["list", "watch"],
            "validatingadmissionpolicies.",
        ),
    ];
    for (resource, verbs, named) in cases {
        let user = e.env.unique_name("vap-unread");
        let lease = e.env.unique_name("unread");
        let grant_name = grant(&e, &user, rules_without(resource, verbs), &lease).await;
        // RBAC caches: give the authorizer a moment.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let out = run_once(&e.env.kubeconfig_admin(), &lease, &["--as", &user]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let case = format!("without {verbs:?} on {resource}");
        assert_eq!(out.status.code(), Some(2), "{case}: exit code: {stderr}");
        assert!(
            stderr.contains("cannot read everything") && stderr.contains(named),
            "{case}: the message names what could not be read: {stderr}"
        );
        assert!(
            !stderr.lines().any(|l| ["create ", "update ", "delete "]
                .iter()
                .any(|v| l.starts_with(v))),
            "{case}: no write was even attempted: {stderr}"
        );
        assert_eq!(versions_of(&e, &kind).await, converged, "{case}: {stderr}");
        revoke(&e, &grant_name).await;
    }

    // A continuous run without `list` on CRDs: not ready, and says why; writes nothing.
    let user = e.env.unique_name("vap-unread");
    let lease = e.env.unique_name("unread");
    let grant_name = grant(
        &e,
        &user,
        rules_without("customresourcedefinitions", &["list"]),
        &lease,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-vap"))
        .args([
            "run",
            "--binding-wait=0s",
            "--lease-namespace",
            LEASE_NS,
            "--lease-name",
            &lease,
        ])
        .arg(format!("--metrics-addr=127.0.0.1:{port}"))
        .arg("--kubeconfig")
        .arg(e.env.kubeconfig_admin())
        .args(["--as", &user])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn run");
    eventually("the copy leads", || async {
        http_get(port, "/metrics").contains("kubectl_vap_leader 1")
    })
    .await;
    eventually("/readyz is 503 and names the CRDs", || async {
        let r = http_get(port, "/readyz");
        r.starts_with("HTTP/1.1 503") && r.contains("customresourcedefinitions")
    })
    .await;
    // Leading for a while, with everything queued reconciled: still nothing written.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let metrics = http_get(port, "/metrics");
    assert!(!metrics.contains("kubectl_vap_writes_total{"), "{metrics}");
    assert!(http_get(port, "/readyz").starts_with("HTTP/1.1 503"));
    // SAFETY: plain kill(2) on our own child.
    unsafe {
        libc_kill(child.id() as i32, 15);
    }
    let _ = child.wait();
    revoke(&e, &grant_name).await;
    assert_eq!(versions_of(&e, &kind).await, converged, "continuous run");
    e.sweep(&[&kind], "unread-clean").await;
}

/// Fencing, with the real binary and the API server's audit log. Copy A leads, converges, and
/// is stopped (SIGSTOP) past its lease; copy B takes over; constraints are deleted and added,
/// and a binding is deleted by hand, while A sleeps. After SIGCONT, A must not send a single
/// create, update, patch or delete to anything but its Lease: its renew deadline has passed,
/// so it re-checks the Lease (held by B), drops its queue and relists. Before, A sent 13
/// writes within 22 ms, some of them binding creates for constraints already deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_paused_leader_writes_nothing_after_it_resumes() {
    let _s = serial();
    let e = Env::with(Box::leak(Box::new(TestEnv::start_audited()))).await;
    let kind = e.env.unique_kind("Fence");
    e.put_template(&template(&kind, Some(true))).await;
    for i in 0..6 {
        e.put_constraint(
            &kind,
            &format!("c{i}"),
            json!({ "parameters": { "labels": ["x"] } }),
        )
        .await;
    }
    let lease = e.env.unique_name("fence");
    let old = "vap-old-leader";
    let grant_name = grant(
        &e,
        old,
        kubectl_vap::cli::install::cluster_role_rules(),
        &lease,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let log = e.env.dir().join("old-leader.log");
    let mut a = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-vap"))
        .args(["run", "--binding-wait=0s", "--lease-duration=3s"])
        .args(["--lease-namespace", LEASE_NS, "--lease-name", &lease])
        .arg(format!("--metrics-addr=127.0.0.1:{port}"))
        .arg("--kubeconfig")
        .arg(e.env.kubeconfig_admin())
        .args(["--as", old])
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn the old leader");
    for i in 0..6 {
        let b = bname(&kind, &format!("c{i}"));
        eventually("A converges", || async { e.vapb(&b).await.is_some() }).await;
    }
    let writes_by_old = || {
        e.env
            .audit_events()
            .into_iter()
            .filter(|ev| {
                ev["impersonatedUser"]["username"] == old
                    && ev["stage"] == "ResponseComplete"
                    && ev["objectRef"]["resource"] != "leases"
            })
            .map(|ev| {
                format!(
                    "{} {}/{} → {}",
                    ev["verb"],
                    ev["objectRef"]["resource"],
                    ev["objectRef"]["name"],
                    ev["responseStatus"]["code"]
                )
            })
            .collect::<Vec<_>>()
    };
    // SAFETY: plain kill(2) on our own child. 19: SIGSTOP.
    unsafe {
        libc_kill(a.id() as i32, 19);
    }
    let before = writes_by_old();
    assert!(!before.is_empty(), "A wrote while it led");

    // B takes over once A's lease has expired (it has seen no renewal for a whole duration).
    let tuning = Tuning {
        lease_duration: Duration::from_secs(3),
        ..Tuning::default()
    };
    let b = e.reconciler_with(&lease, opts(0), tuning).await;
    b.leading(Duration::from_secs(30))
        .await
        .expect("B takes the expired lease");
    for i in 0..3 {
        let _ = e
            .constraints(&kind)
            .delete(&format!("c{i}"), &DeleteParams::default())
            .await;
    }
    for i in 6..9 {
        e.put_constraint(
            &kind,
            &format!("c{i}"),
            json!({ "parameters": { "labels": ["x"] } }),
        )
        .await;
    }
    let _ = Api::<ValidatingAdmissionPolicyBinding>::all(e.client.clone())
        .delete(&bname(&kind, "c3"), &DeleteParams::default())
        .await;
    eventually("B converges", || async {
        e.vapb(&bname(&kind, "c0")).await.is_none()
            && e.vapb(&bname(&kind, "c3")).await.is_some()
            && e.vapb(&bname(&kind, "c8")).await.is_some()
    })
    .await;
    assert_idle(&b, TIMEOUT).await;

    // SIGCONT: A wakes up with a stale queue and stale stores.
    unsafe {
        libc_kill(a.id() as i32, 18);
    }
    // A is running again (it serves), has found the Lease taken, and has relisted.
    eventually("A answers again and knows it does not lead", || async {
        let m = http_get(port, "/metrics");
        m.contains("kubectl_vap_leader 0")
    })
    .await;
    eventually("A has relisted", || async {
        http_get(port, "/readyz").starts_with("HTTP/1.1 200")
    })
    .await;
    // Let anything A might still send arrive.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = writes_by_old();
    let logs = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        after[before.len()..],
        [] as [String; 0],
        "writes by the old leader after it resumed; its log:\n{logs}"
    );
    assert!(logs.contains("lost Lease"), "{logs}");
    e.assert_converged(&opts(0), "B's state stands").await;
    unsafe {
        libc_kill(a.id() as i32, 15);
    }
    let _ = a.wait();
    revoke(&e, &grant_name).await;
    let kinds = [kind.as_str()];
    e.clean_up_with(b, &kinds).await;
}

/// `kubectl_vap_write_errors_total{reason="<reason>"}` of a running copy (0 when absent).
fn write_errors(r: &Running, reason: &str) -> u64 {
    let prefix = format!("kubectl_vap_write_errors_total{{reason=\"{reason}\"}} ");
    r.metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// The create attempts of `object` in the event log that the server refused, with why.
fn refused_creates(r: &Running, object: &str) -> Vec<String> {
    use kubectl_vap::controller::state::EventVerb;
    Some(r.events())
        .map(|e| {
            e.iter()
                .filter(|e| e.verb == EventVerb::Create && e.object.name == object)
                .filter_map(|e| e.result.failure())
                .collect()
        })
        .unwrap_or_default()
}

/// A template whose CEL parses (so the offline check lets it through and `run` plans the VAP)
/// but that the API server refuses (422: a type error): the create is sent once, reported with
/// the server's message, and not sent again until the template changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_an_invalid_policy_is_sent_once_until_its_template_changes() {
    let _s = serial();
    let e = Env::new().await;
    let kind = e.env.unique_kind("Invalid");
    let with_expression = |expr: &str| {
        let mut t = template(&kind, Some(true));
        t["spec"]["targets"][0]["code"][0]["source"]["validations"][0]["expression"] = json!(expr);
        t
    };
    // Parses; the server's type checker refuses it: no '+' for (string, int).
    let bad = "'a' + 1 == 2";
    assert_eq!(
        kubectl_vap::core::cel_syntax::parse(bad),
        Ok(()),
        "the offline check accepts it (else nothing would be sent)"
    );
    e.put_template(&with_expression(bad)).await;
    e.put_constraint(&kind, "c", json!({ "parameters": { "labels": ["x"] } }))
        .await;
    let r = e.leader(&e.env.unique_name("invalid"), opts(0)).await;
    let policy = pname(&kind);
    eventually("the refused create is reported", || async {
        write_errors(&r, "invalid") >= 1
    })
    .await;
    // Longer than the first five steps of the retry backoff (0.1 + 0.2 + 0.4 + 0.8 + 1.6 s):
    // a copy that retried a 422 would have sent it again several times by now.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let refused = refused_creates(&r, &policy);
    assert_eq!(
        (write_errors(&r, "invalid"), refused.len()),
        (1, 1),
        "one attempt, not retried: {refused:#?}"
    );
    assert!(
        refused[0].contains("no matching overload") || refused[0].contains("Invalid value"),
        "the server's message is reported: {}",
        refused[0]
    );
    assert!(e.vap(&policy).await.is_none());
    assert!(
        e.vapb(&bname(&kind, "c")).await.is_none(),
        "I1: no binding without its VAP"
    );

    // An edit of the template (still invalid) is a new attempt: exactly one more.
    e.put_template(&with_expression("'b' + 1 == 2")).await;
    eventually("the edited template is tried again", || async {
        write_errors(&r, "invalid") >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(write_errors(&r, "invalid"), 2);
    // Fixed: the VAP, then the binding.
    e.put_template(&template(&kind, Some(true))).await;
    eventually("the fixed template gets its VAP and binding", || async {
        e.vap(&policy).await.is_some() && e.vapb(&bname(&kind, "c")).await.is_some()
    })
    .await;
    assert_eq!(write_errors(&r, "invalid"), 2);
    e.clean_up_with(r, &[&kind]).await;
}

/// `run` (the real binary) through a 10 s API server outage: a handful of log lines — the
/// first failure, a summary "API server unreachable for …s, N retries", one line on recovery —
/// not one per retry; and it converges afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_an_outage_is_logged_in_a_few_lines_and_converges_after() {
    let _s = serial();
    let e = Env::private().await;
    let kind = e.env.unique_kind("Outage");
    e.put_template(&template(&kind, Some(true))).await;
    e.put_constraint(&kind, "c", json!({ "parameters": { "labels": ["x"] } }))
        .await;
    let lease = e.env.unique_name("outage");
    let log = e.env.dir().join("outage.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-vap"))
        .args(["run", "--binding-wait=0s"])
        .args(["--lease-namespace", LEASE_NS, "--lease-name", &lease])
        .arg("--kubeconfig")
        .arg(e.env.kubeconfig_admin())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn run");
    eventually("converged before the outage", || async {
        e.vapb(&bname(&kind, "c")).await.is_some()
    })
    .await;
    let before = std::fs::read_to_string(&log).unwrap_or_default().len();
    e.env.stop_apiserver().await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    e.env.start_apiserver().await.expect("apiserver back");
    e.put_constraint(&kind, "after", json!({ "parameters": { "labels": ["x"] } }))
        .await;
    eventually("a constraint created after the outage is bound", || async {
        e.vapb(&bname(&kind, "after")).await.is_some()
    })
    .await;
    let logs = std::fs::read_to_string(&log).unwrap_or_default();
    let outage = &logs[before..];
    let loud: Vec<&str> = outage
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert!(
        !loud.is_empty() && loud.len() <= 20,
        "{} WARN/ERROR lines for one outage:\n{outage}",
        loud.len()
    );
    let summary = loud
        .iter()
        .any(|l| l.contains("API server unreachable for") && l.contains("retries"));
    assert!(summary, "no outage summary with a retry count:\n{outage}");
    assert!(
        outage.contains("API server reachable again"),
        "no recovery line:\n{outage}"
    );
    unsafe {
        libc_kill(child.id() as i32, 15);
    }
    let _ = child.wait();
}
