//! The fixture every test of this binary uses: [`Env`] (an API server with Gatekeeper's
//! template CRD and the Lease namespace), the labels templates and constraints it puts there,
//! reconcilers on Leases of their own, the real binary, and the oracle.

use crate::support::cli;
use crate::support::cluster;
use crate::support::objects::{labels_template, template_of};
use crate::support::reconciler::{self, Reconciler, Start, Tuning};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::api::{Api, DeleteParams, DynamicObject};
use kubectl_vap::cluster::{AdmissionApi, list_snapshot};
use kubectl_vap::core::{Options, PolicyShape, analyze};
use kubectl_vap::load::cel::default_options;
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use testenv::{TestEnv, gatekeeper};

pub const LEASE_NS: &str = "kubectl-vap-e2e";
pub const TIMEOUT: Duration = Duration::from_secs(60);

static SERIAL: Mutex<()> = Mutex::new(());

/// Every reconciler watches the whole cluster: the tests of this binary run one at a time, each
/// holding this lock through its [`Env`].
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The options of a copy on Lease namespace [`LEASE_NS`] (which it exempts, as `run
/// --lease-namespace` does), so the oracle judges by what every copy writes. The command
/// line's default shape (`auto`: a template of at most 10 constraints gets a VAP per
/// constraint, [`crate::support::objects::inline_policy_name`], and no VAP of its own), not
/// the library's (`narrowed`), and the binary this suite runs is started with its defaults
/// too (`cli::kubectl_vap`), issue 39. A test about another shape says so ([`opts_shaped`],
/// `--policy-shape`).
pub fn opts(wait_secs: u64) -> Options {
    opts_shaped(wait_secs, PolicyShape::Auto)
}

/// [`opts`] in `shape`, for the tests about that shape.
pub fn opts_shaped(wait_secs: u64, shape: PolicyShape) -> Options {
    let mut o = Options {
        binding_wait: Duration::from_secs(wait_secs),
        policy_shape: shape,
        ..default_options()
    };
    o.exemptions = kubectl_vap::core::Exemptions::lease_namespace(LEASE_NS);
    o
}

/// A labels template of `kind` (message `missing required labels: …`), `generateVAP` as given.
pub fn template(kind: &str, generate: Option<bool>) -> Value {
    labels_template(kind, generate, Some("missing required labels: "))
}

/// A constraint spec requiring `label`.
pub fn requiring(label: &str) -> Value {
    json!({ "parameters": { "labels": [label] } })
}

/// [`crate::support::poll::eventually`] within [`TIMEOUT`].
pub async fn eventually<F, Fut>(what: &str, probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    crate::support::poll::eventually(what, TIMEOUT, probe).await
}

/// One test's view of its API server. The test that makes one runs alone until it drops it
/// ([`serial`]).
pub struct Env {
    pub env: &'static TestEnv,
    pub client: kube::Client,
    _serial: Option<MutexGuard<'static, ()>>,
}

impl Env {
    /// On the binary's shared API server.
    pub async fn new() -> Env {
        let serial = serial();
        Env::with(TestEnv::shared(), serial).await
    }

    /// [`Env::new`] with the default Lease namespace, for one-shot commands with default flags.
    pub async fn with_default_lease_namespace() -> Env {
        let e = Env::new().await;
        testenv::ensure_namespace(&e.client, "gatekeeper-system")
            .await
            .expect("namespace");
        e
    }

    /// An API server of this test's own, for tests that stop it (it lives until the process ends).
    pub async fn private() -> Env {
        let serial = serial();
        Env::with(Box::leak(Box::new(TestEnv::start())), serial).await
    }

    /// A private API server that writes an audit log.
    pub async fn audited() -> Env {
        let serial = serial();
        Env::with(Box::leak(Box::new(TestEnv::start_audited())), serial).await
    }

    async fn with(env: &'static TestEnv, serial: MutexGuard<'static, ()>) -> Env {
        let client = env.client_admin().await;
        gatekeeper::install_gatekeeper_crds(&client)
            .await
            .expect("ConstraintTemplate CRD");
        testenv::ensure_namespace(&client, LEASE_NS)
            .await
            .expect("the Lease namespace");
        Env {
            env,
            client,
            _serial: Some(serial),
        }
    }

    /// The same env through `client` (another address, or a fresh connection).
    pub fn through(&self, client: kube::Client) -> Env {
        Env {
            env: self.env,
            client,
            _serial: None,
        }
    }

    pub fn templates(&self) -> Api<DynamicObject> {
        cluster::templates(&self.client)
    }

    pub fn constraints(&self, kind: &str) -> Api<DynamicObject> {
        cluster::constraints(&self.client, kind)
    }

    /// Creates (or replaces) the template and its constraint CRD exactly as kubectl-vap builds
    /// it, Established: what an earlier run left, so a test's writes are its own.
    pub async fn put_template(&self, t: &Value) {
        let written = cluster::put(&self.templates(), t).await;
        let t = template_of(serde_json::to_value(&written).expect("template json"));
        cluster::apply_exact_crd(&self.client, &t).await;
    }

    /// Creates or replaces a constraint. Unless the spec selects objects itself, it selects
    /// only objects labelled `e2e-reconciler: inert` (none exist), so test policies never deny
    /// anything else on the shared server.
    pub async fn put_constraint(&self, kind: &str, name: &str, mut spec: Value) {
        if spec["match"]["labelSelector"].is_null() {
            spec["match"]["labelSelector"] =
                json!({ "matchLabels": { "e2e-reconciler": "inert" } });
        }
        let c = gatekeeper::constraint(kind, name, spec);
        cluster::put(&self.constraints(kind), &c).await;
    }

    /// [`Env::put_constraint`] requiring the label `x`.
    pub async fn constrain(&self, kind: &str, name: &str) {
        self.put_constraint(kind, name, requiring("x")).await
    }

    /// A new kind and its template, generating a VAP.
    pub async fn new_kind(&self, prefix: &str) -> String {
        let kind = self.env.unique_kind(prefix);
        self.put_template(&template(&kind, Some(true))).await;
        kind
    }

    /// A new kind ([`Env::new_kind`]) and one constraint `constraint` of it.
    pub async fn generating_kind(&self, prefix: &str, constraint: &str) -> String {
        let kind = self.new_kind(prefix).await;
        self.constrain(&kind, constraint).await;
        kind
    }

    pub async fn vap(&self, name: &str) -> Option<ValidatingAdmissionPolicy> {
        cluster::policy(&self.client, name).await
    }

    pub async fn vapb(&self, name: &str) -> Option<ValidatingAdmissionPolicyBinding> {
        cluster::binding(&self.client, name).await
    }

    pub fn vapbs(&self) -> Api<ValidatingAdmissionPolicyBinding> {
        cluster::bindings(&self.client)
    }

    pub async fn actions(&self, binding: &str) -> Option<Vec<String>> {
        self.vapb(binding)
            .await
            .and_then(|b| b.spec)
            .and_then(|s| s.validation_actions)
    }

    /// Waits until binding `name` exists (`present`) or is gone.
    pub async fn until_vapb(&self, what: &str, name: &str, present: bool) {
        eventually(what, || async {
            self.vapb(name).await.is_some() == present
        })
        .await
    }

    /// Waits until VAP `name` exists (`present`) or is gone.
    pub async fn until_vap(&self, what: &str, name: &str, present: bool) {
        eventually(what, || async { self.vap(name).await.is_some() == present }).await
    }

    /// Waits until binding `name` has exactly `actions`.
    pub async fn until_actions(&self, what: &str, name: &str, actions: &[&str]) {
        let want: Vec<String> = actions.iter().map(|a| a.to_string()).collect();
        eventually(what, || async {
            self.actions(name).await.as_ref() == Some(&want)
        })
        .await
    }

    /// The oracle: the analysis of the live cluster plans nothing (within 20 s).
    pub async fn assert_converged(&self, o: &Options, context: &str) {
        let plan = crate::support::poll::within(
            Duration::from_secs(20),
            crate::support::poll::EVERY,
            || async {
                let (snap, errors) = list_snapshot(&self.client, &AdmissionApi::v1())
                    .await
                    .expect("list");
                assert!(errors.is_empty(), "{context}: {errors:?}");
                let plan: Vec<String> = analyze(&snap, o)
                    .plan
                    .iter()
                    .map(|w| format!("{} {} ({})", w.verb.as_str(), w.object, w.reason))
                    .collect();
                if plan.is_empty() { Ok(()) } else { Err(plan) }
            },
        )
        .await;
        if let Err(plan) = plan {
            panic!("{context}: I3: the cluster is not converged: {plan:#?}");
        }
    }

    /// A reconciler on Lease `lease` of the test namespace, with 4 workers.
    pub async fn reconciler(&self, lease: &str, o: Options) -> Reconciler {
        self.reconciler_with(lease, o, Tuning::default()).await
    }

    pub async fn reconciler_with(&self, lease: &str, o: Options, tuning: Tuning) -> Reconciler {
        let start = Start::on(LEASE_NS, lease, o).workers(4).tuning(tuning);
        reconciler::start(self.env.client_admin().await, start).await
    }

    /// A reconciler on Lease `ns/lease` with the default workers.
    pub async fn reconciler_on(&self, ns: &str, lease: &str) -> Reconciler {
        reconciler::start(self.env.client_admin().await, Start::on(ns, lease, opts(0))).await
    }

    /// A reconciler on Lease `lease` that holds it (within 20 s).
    pub async fn leader(&self, lease: &str, o: Options) -> Reconciler {
        let r = self.reconciler(lease, o).await;
        leads(&r).await;
        r
    }

    /// Deletes what `kinds` left ([`Env::cleanup`]) and lets a fresh reconciler sweep the
    /// VAPs and bindings of a test that ran none of its own at the end.
    pub async fn sweep(&self, kinds: &[&str], lease_prefix: &str) {
        self.cleanup(kinds).await;
        let r = self
            .leader(&self.env.unique_name(lease_prefix), opts(0))
            .await;
        r.assert_idle(TIMEOUT).await;
        r.stop().await;
    }

    /// [`Env::cleanup`] with `r` still running, so it deletes the VAPs and bindings of `kinds`
    /// too; then stops it.
    pub async fn clean_up_with(&self, r: Reconciler, kinds: &[&str]) {
        self.cleanup(kinds).await;
        r.assert_idle(TIMEOUT).await;
        r.stop().await;
    }

    /// Deletes templates and constraints of `kinds` (their CRDs stay: no GC here).
    pub async fn cleanup(&self, kinds: &[&str]) {
        for kind in kinds {
            // One request for all of them: the server deletes what this client could not
            // decode (fence.rs's constraint nested too deep; its reply is ignored).
            let _ = self
                .constraints(kind)
                .delete_collection(&DeleteParams::default(), &Default::default())
                .await;
            let _ = self
                .templates()
                .delete(&kind.to_lowercase(), &DeleteParams::default())
                .await;
        }
    }

    /// The real binary with `args` and every default of its command line, as the admin.
    pub fn cli(&self, args: &[&str]) -> Output {
        cli::output(
            cli::kubectl_vap()
                .args(args)
                .arg("--kubeconfig")
                .arg(self.env.kubeconfig_admin()),
        )
    }

    /// The names of every VAP of constraint kind `kind` there is: its template's
    /// (`gatekeeper-<lower(kind)>`) and its constraints' inline ones
    /// (`gatekeeper-<lower(kind)>.<constraint>`), sorted.
    pub async fn vaps_of(&self, kind: &str) -> Vec<String> {
        let template = crate::support::objects::policy_name(kind);
        let inline = format!("{template}.");
        let mut names: Vec<String> = cluster::policies(&self.client)
            .list(&Default::default())
            .await
            .expect("list VAPs")
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .filter(|n| *n == template || n.starts_with(&inline))
            .collect();
        names.sort();
        names
    }

    /// What `kubectl events -n default --for constrainttemplate/<template>` prints (stdout,
    /// then stderr), as the admin.
    pub fn kubectl_events_for(&self, template: &str) -> String {
        self.kubectl_events("default", &format!("constrainttemplate/{template}"))
    }

    /// `kubectl events -n NAMESPACE --for OBJECT` as the admin: what it printed, stdout then
    /// stderr, for assertions and their messages.
    pub fn kubectl_events(&self, namespace: &str, object: &str) -> String {
        let out = cli::output(
            Command::new(&self.env.binaries().kubectl)
                .arg("--kubeconfig")
                .arg(self.env.kubeconfig_admin())
                .args(["events", "-n", namespace, "--for", object]),
        );
        String::from_utf8_lossy(&out.stdout).into_owned() + &cli::stderr(&out)
    }

    /// `kubectl-vap run --binding-wait=0s` on Lease `lease` (in the test namespace) as the
    /// admin, not started.
    pub fn run(&self, lease: &str) -> Command {
        run_as(&self.env.kubeconfig_admin(), lease)
    }

    /// `kubectl-vap run --once --binding-wait=0s` on Lease `lease` as the user of
    /// `kubeconfig`, with `extra` arguments.
    pub fn run_once(&self, kubeconfig: &Path, lease: &str, extra: &[&str]) -> Output {
        cli::output(run_as(kubeconfig, lease).arg("--once").args(extra))
    }
}

/// `kubectl-vap run --binding-wait=0s` on Lease `lease` (in the test namespace) as the user of
/// `kubeconfig` (another server address too: a proxy's), not started.
pub fn run_as(kubeconfig: &Path, lease: &str) -> Command {
    let mut cmd = cli::kubectl_vap();
    cmd.args(["run", "--binding-wait=0s"])
        .args(["--lease-namespace", LEASE_NS, "--lease-name", lease])
        .arg("--kubeconfig")
        .arg(kubeconfig);
    cmd
}

/// Waits (20 s) until `r` holds its Lease.
pub async fn leads(r: &Reconciler) {
    r.wait_leading(Duration::from_secs(20))
        .await
        .expect("the reconciler leads");
}
