//! Soak (issue 27): two `kubectl-vap run` copies on a real kube-apiserver + etcd for
//! `SOAK_MINUTES` (default 30) of steady churn — constraints and templates created, changed and
//! deleted at `SOAK_OPS_PER_SEC` (default 1) — with an API server restart a third of the way
//! in (`SOAK_RESTARTS` of them, spread over the second phase; default 1) and one SIGKILL of
//! the leader two thirds of the way in (a new copy starts 10 s later, as a kubelet would
//! restart it). The churn is level by default: a create only while below the
//! starting count of constraints (or templates), a delete only while above it, so memory that
//! climbs is not a world that grew (`SOAK_LEVEL=0`: the roll alone decides, and the world grows).
//!
//! Reported, with the command that produced them (docs/benchmarks.md, "Soak"):
//! - CPU of every copy at rest (20 s, converged, nothing changing) after each phase;
//! - RSS of every copy over time (sampled every second) and its slope, and just before each
//!   API server restart (does each restart add a step that is never given back?);
//! - writes: the API server's own count of write requests for CRDs, VAPs and bindings against
//!   the minimum — each change applied alone to a model of the converged cluster and planned
//!   by the pure analysis (the same code as `plan`) until nothing is left;
//! - the time from each change to its convergence, read by this process from the API server
//!   (a binding with the constraint's action, or gone; a constraint CRD established, or
//!   gone), per phase: median, p99 and the longest;
//! - Lease losses of a copy that was never killed (its `kubectl_vap_leader` going 1 → 0);
//! - the templates and constraints in the cluster at the start and end of every phase.
//!
//! The copies die with this process however it ends (Ctrl-C, SIGTERM, SIGKILL, a panic): they
//! are spawned with a parent-death signal (`Served`), as testenv's API server and etcd are.
//!
//! Run: `KUBEBUILDER_ASSETS=$(bash tests/kubeenv/build.sh) cargo bench --bench soak`
//! (`SOAK_MINUTES`, `SOAK_OPS_PER_SEC`, `SOAK_TEMPLATES` (20), `SOAK_CONSTRAINTS` per
//! template at start (5), `SOAK_SEED` (1), `SOAK_LEVEL` (1), `SOAK_RESTARTS` (1)). Under
//! `cargo test --all-targets` it returns at once.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

#[path = "../tests/support/mod.rs"]
mod support;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kubectl_vap::cluster::{AdmissionApi, list_snapshot};
use kubectl_vap::core::{Options, PlannedWrite, Verb, analyze};
use kubectl_vap::load::cel::default_options;
use kubectl_vap::snapshot::Snapshot;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::bench::{block_on, env_num, median, quantile};
use support::cli::{self, Served};
use support::metrics::{label, requests_by, sum as metric};
use support::objects::{binding_name, crd_name, labels_template};
use support::{cluster, poll};
use testenv::{TestEnv, gatekeeper};

fn main() {
    if !support::bench::benchmarking() {
        return;
    }
    block_on(run());
}

/// The namespace every constraint selects (its ConfigMaps are what the policies judge).
const NS: &str = "soak";

/// A copy of the reconciler, as the samples name it.
struct Copy {
    name: String,
    served: Served,
}

/// One second's look at every copy.
#[derive(Clone)]
struct Sample {
    at: Duration,
    copy: String,
    leader: bool,
    rss_mib: f64,
}

#[derive(Default)]
struct Shared {
    copies: Vec<Copy>,
    samples: Vec<Sample>,
    /// Copies killed on purpose: their last lead ends without a loss.
    killed: Vec<String>,
}

fn spawn_copy(env: &TestEnv, name: &str) -> Copy {
    let log = env.dir().join(format!("soak-{name}.log"));
    let file = std::fs::File::create(&log).expect("log file");
    let mut cmd = Command::new(cli::BIN);
    // The command line's default shape, named: the minimum below is computed for it.
    cmd.args([
        "run",
        "--binding-wait=0s",
        "--policy-shape=auto",
        "--log=info",
    ])
    .arg("--kubeconfig")
    .arg(env.kubeconfig_admin())
    .stdout(Stdio::null())
    .stderr(file);
    println!("  copy {name} started (log: {})", log.display());
    Copy {
        name: name.into(),
        served: Served::spawn(cmd),
    }
}

/// A process's resident memory in MiB.
fn rss_mib(pid: u32) -> Option<f64> {
    Some(testenv::rss_kib(pid)? as f64 / 1024.0)
}

/// Every second: each copy's leader gauge and RSS.
fn sampler(shared: Arc<Mutex<Shared>>, t0: Instant, stop: Arc<std::sync::atomic::AtomicBool>) {
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let looks: Vec<(String, u32, String)> = {
            let s = shared.lock().expect("lock");
            s.copies
                .iter()
                .map(|c| (c.name.clone(), c.served.pid(), c.served.metrics()))
                .collect()
        };
        let mut new: Vec<Sample> = looks
            .into_iter()
            .filter_map(|(copy, pid, m)| {
                Some(Sample {
                    at: t0.elapsed(),
                    copy,
                    leader: metric(&m, "kubectl_vap_leader") == 1.0,
                    rss_mib: rss_mib(pid)?,
                })
            })
            .collect();
        shared.lock().expect("lock").samples.append(&mut new);
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// What one change was, and what the cluster shows once it has converged.
#[derive(Debug, Clone)]
enum Change {
    CreateConstraint {
        kind: String,
        name: String,
    },
    SetAction {
        kind: String,
        name: String,
        warn: bool,
    },
    DeleteConstraint {
        kind: String,
        name: String,
    },
    CreateTemplate {
        kind: String,
    },
    UpdateTemplate {
        kind: String,
        message: String,
    },
    DeleteTemplate {
        kind: String,
    },
}

impl Change {
    fn label(&self) -> &'static str {
        match self {
            Change::CreateConstraint { .. } => "create constraint",
            Change::SetAction { .. } => "change constraint",
            Change::DeleteConstraint { .. } => "delete constraint",
            Change::CreateTemplate { .. } => "create template",
            Change::UpdateTemplate { .. } => "change template",
            Change::DeleteTemplate { .. } => "delete template",
        }
    }
}

fn spec(warn: bool) -> Value {
    json!({
        "enforcementAction": if warn { "warn" } else { "deny" },
        "match": { "kinds": [{ "apiGroups": [""], "kinds": ["ConfigMap"] }], "namespaces": [NS] },
        "parameters": { "labels": ["owner"] },
    })
}

fn template(kind: &str, message: &str) -> Value {
    labels_template(kind, Some(true), Some(message))
}

/// Whether the cluster shows `change` converged.
async fn converged(client: &kube::Client, change: &Change) -> bool {
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    match change {
        Change::CreateConstraint { kind, name } | Change::SetAction { kind, name, .. } => {
            let warn = matches!(change, Change::SetAction { warn: true, .. });
            let want = if warn { "Warn" } else { "Deny" };
            matches!(cluster::binding(client, &binding_name(kind, name)).await,
                Some(b) if b.spec.as_ref().and_then(|s| s.validation_actions.as_deref()) == Some(&[want.to_string()][..]))
        }
        Change::DeleteConstraint { kind, name } => {
            cluster::binding(client, &binding_name(kind, name))
                .await
                .is_none()
        }
        Change::CreateTemplate { kind } => crds
            .get_opt(&crd_name(kind))
            .await
            .ok()
            .flatten()
            .is_some_and(|c| {
                c.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            }),
        // The message reaches the template's VAP(s); the shape decides which: counted in the
        // writes, not timed.
        Change::UpdateTemplate { .. } => true,
        Change::DeleteTemplate { kind } => matches!(crds.get_opt(&crd_name(kind)).await, Ok(None)),
    }
}

impl Change {
    /// The objects this change is to: the constraint (and its template, whose deletion takes
    /// the binding too), or the template.
    fn keys(&self) -> Vec<String> {
        match self {
            Change::CreateConstraint { kind, name }
            | Change::SetAction { kind, name, .. }
            | Change::DeleteConstraint { kind, name } => {
                vec![format!("t/{kind}"), format!("c/{kind}/{name}")]
            }
            Change::CreateTemplate { kind }
            | Change::UpdateTemplate { kind, .. }
            | Change::DeleteTemplate { kind } => vec![format!("t/{kind}")],
        }
    }
}

/// The latest change (its sequence number) sent to each object ([`Change::keys`]).
type Latest = Arc<Mutex<std::collections::HashMap<String, u64>>>;

enum Probe {
    Converged(Duration),
    /// A later change to the same object came before this one showed: what the cluster
    /// converges to is that one's.
    Superseded,
    NotConverged,
}

/// Polls until `change` (number `seq`) shows, every 100 ms, for at most 5 minutes: how long
/// it took.
async fn time_to_converge(
    client: kube::Client,
    change: Change,
    seq: u64,
    latest: Latest,
    since: Instant,
) -> Probe {
    let keys = change.keys();
    while since.elapsed() < Duration::from_secs(300) {
        if converged(&client, &change).await {
            return Probe::Converged(since.elapsed());
        }
        let later = {
            let l = latest.lock().expect("lock");
            keys.iter().any(|k| l.get(k).is_some_and(|&n| n > seq))
        };
        if later {
            return Probe::Superseded;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Probe::NotConverged
}

/// The converged cluster as the reconciler should leave it, changed as the churn changes the
/// real one: the minimum number of writes of each change is what the pure analysis plans for
/// it, applied until nothing is left.
struct Model {
    snapshot: Snapshot,
    opts: Options,
    uid: u64,
}

impl Model {
    fn remove(&mut self, kind: &str, name: &str) {
        let s = &mut self.snapshot;
        match kind {
            "ValidatingAdmissionPolicy" => s.policies.retain(|p| p.meta.name != name),
            "ValidatingAdmissionPolicyBinding" => s.bindings.retain(|b| b.meta.name != name),
            "CustomResourceDefinition" => s.crds.retain(|c| c.name != name),
            "ConstraintTemplate" => s.templates.retain(|t| t.meta.name != name),
            _ => s
                .constraints
                .retain(|c| !(c.kind == kind && c.meta.name == name)),
        }
    }

    fn put(&mut self, mut raw: Value) {
        self.uid += 1;
        if raw["metadata"]["uid"].is_null() {
            raw["metadata"]["uid"] = json!(format!("soak-uid-{}", self.uid));
        }
        raw["metadata"]["resourceVersion"] = json!(self.uid.to_string());
        if raw["kind"] == "CustomResourceDefinition" {
            let now = chrono::Utc::now().to_rfc3339();
            raw["status"] = json!({ "conditions": [
                { "type": "Established", "status": "True", "lastTransitionTime": now } ] });
        }
        let kind = raw["kind"].as_str().unwrap_or_default().to_string();
        let name = raw["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.remove(&kind, &name);
        self.snapshot
            .insert(raw, Default::default())
            .expect("a planned body is a valid object");
    }

    fn apply(&mut self, w: &PlannedWrite) {
        match (w.verb, &w.body) {
            (Verb::Delete, _) => self.remove(&w.object.kind, &w.object.name),
            (_, Some(body)) => self.put(body.clone()),
            (_, None) => {}
        }
    }

    /// Plans and applies until the analysis plans nothing: the writes that took.
    fn settle(&mut self) -> usize {
        let mut writes = 0;
        for _ in 0..8 {
            self.snapshot.now = Some(chrono::Utc::now());
            let plan = analyze(&self.snapshot, &self.opts).plan;
            if plan.is_empty() {
                break;
            }
            writes += plan.len();
            for w in &plan {
                self.apply(w);
            }
        }
        writes
    }

    /// The minimum writes `change` needs from a converged cluster.
    fn change(&mut self, change: &Change) -> usize {
        let extra = match change {
            Change::CreateConstraint { kind, name } => {
                self.put(gatekeeper::constraint(kind, name, spec(false)));
                0
            }
            Change::SetAction { kind, name, warn } => {
                self.put(gatekeeper::constraint(kind, name, spec(*warn)));
                0
            }
            Change::DeleteConstraint { kind, name } => {
                self.remove(kind, name);
                0
            }
            Change::CreateTemplate { kind } | Change::UpdateTemplate { kind, .. } => {
                let message = match change {
                    Change::UpdateTemplate { message, .. } => message.as_str(),
                    _ => "missing: ",
                };
                self.put(template(kind, message));
                0
            }
            Change::DeleteTemplate { kind } => {
                // The reconciler deletes the CRD of a template it saw go (the analysis of a
                // snapshot reports it instead); the CRD's deletion takes its constraints.
                self.remove("ConstraintTemplate", &kind.to_lowercase());
                self.remove("CustomResourceDefinition", &crd_name(kind));
                self.snapshot.constraints.retain(|c| &c.kind != kind);
                1
            }
        };
        extra + self.settle()
    }
}

/// Write requests for what the reconciler writes, by the API server's own count.
fn write_requests(metrics: &str) -> f64 {
    requests_by(metrics, |l| {
        let verb = label(l, "verb");
        let resource = label(l, "resource");
        let write = matches!(verb, "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE");
        let ours = matches!(
            resource,
            "customresourcedefinitions"
                | "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
        );
        if write && ours {
            vec!["w".to_string()]
        } else {
            vec![]
        }
    })
    .values()
    .sum()
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: a fixed sequence per seed, so two runs churn alike.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// What the churn has made so far (anchors: one constraint per starting template that is
/// never touched, so the narrowed VAPs' union stays put and each change costs what it says).
struct World {
    templates: Vec<String>,
    churn_templates: Vec<String>,
    constraints: Vec<(String, String, bool)>,
    next: u64,
    rng: Rng,
    /// Level churn: what the counts are steered back to (`None`: the world may grow).
    level: Option<Level>,
}

/// The starting counts level churn steers back to.
struct Level {
    templates: usize,
    constraints: usize,
}

/// Which way level churn goes with `now` objects against `start`: create below, delete above,
/// the roll at it.
fn steer(now: usize, start: usize) -> Option<bool> {
    match now.cmp(&start) {
        std::cmp::Ordering::Less => Some(true),
        std::cmp::Ordering::Greater => Some(false),
        std::cmp::Ordering::Equal => None,
    }
}

impl World {
    /// Create (`Some(true)`) or delete (`Some(false)`) templates, or whichever the roll says.
    fn steer_templates(&self) -> Option<bool> {
        let l = self.level.as_ref()?;
        steer(self.templates.len(), l.templates)
    }

    fn steer_constraints(&self) -> Option<bool> {
        let l = self.level.as_ref()?;
        steer(self.constraints.len(), l.constraints)
    }

    // The rolls are drawn alike with and without steering, so `SOAK_LEVEL=0` replays the
    // growing runs of before.
    fn pick(&mut self) -> Change {
        self.next += 1;
        let n = self.next;
        let roll = self.rng.below(100);
        if roll < 10 || self.constraints.is_empty() {
            let t = match (self.rng.below(3), self.steer_templates()) {
                (1, _) => 1,
                (_, Some(true)) => 0,
                (_, Some(false)) => 2,
                (t, None) => t,
            };
            if t == 0 || self.churn_templates.is_empty() {
                let kind = format!("K8sSoakNew{n:05}");
                self.templates.push(kind.clone());
                self.churn_templates.push(kind.clone());
                return Change::CreateTemplate { kind };
            }
            let i = self.rng.below(self.churn_templates.len());
            if t == 1 {
                let kind = self.churn_templates[i].clone();
                return Change::UpdateTemplate {
                    kind,
                    message: format!("missing ({n}): "),
                };
            }
            let kind = self.churn_templates.remove(i);
            self.templates.retain(|k| *k != kind);
            self.constraints.retain(|(k, _, _)| *k != kind);
            return Change::DeleteTemplate { kind };
        }
        // 40% create, 25% switch the action, 25% delete; steered, a create or delete is
        // whichever brings the count back.
        let create = match (roll, self.steer_constraints()) {
            (50..75, _) => false,
            (_, Some(grow)) => grow,
            (r, None) => r < 50,
        };
        if create {
            let kind = self.templates[self.rng.below(self.templates.len())].clone();
            let name = format!("c{n:05}");
            self.constraints.push((kind.clone(), name.clone(), false));
            return Change::CreateConstraint { kind, name };
        }
        let i = self.rng.below(self.constraints.len());
        if (50..75).contains(&roll) {
            let c = &mut self.constraints[i];
            c.2 = !c.2;
            return Change::SetAction {
                kind: c.0.clone(),
                name: c.1.clone(),
                warn: c.2,
            };
        }
        let (kind, name, _) = self.constraints.remove(i);
        Change::DeleteConstraint { kind, name }
    }
}

/// Sends `change` to the API server (retried while it is unreachable).
async fn send(client: &kube::Client, change: &Change) {
    let pp = PatchParams::apply("soak").force();
    for _ in 0..600 {
        let r = match change {
            Change::CreateConstraint { kind, name } | Change::SetAction { kind, name, .. } => {
                let warn = matches!(change, Change::SetAction { warn: true, .. });
                cluster::constraints(client, kind)
                    .patch(
                        name,
                        &pp,
                        &Patch::Apply(gatekeeper::constraint(kind, name, spec(warn))),
                    )
                    .await
                    .map(drop)
            }
            Change::DeleteConstraint { kind, name } => cluster::constraints(client, kind)
                .delete(name, &DeleteParams::default())
                .await
                .map(drop),
            Change::CreateTemplate { kind } | Change::UpdateTemplate { kind, .. } => {
                let message = match change {
                    Change::UpdateTemplate { message, .. } => message.as_str(),
                    _ => "missing: ",
                };
                cluster::templates(client)
                    .patch(
                        &kind.to_lowercase(),
                        &pp,
                        &Patch::Apply(template(kind, message)),
                    )
                    .await
                    .map(drop)
            }
            Change::DeleteTemplate { kind } => cluster::templates(client)
                .delete(&kind.to_lowercase(), &DeleteParams::default())
                .await
                .map(drop),
        };
        match r {
            Ok(()) => return,
            // A constraint of a kind whose CRD is not there yet (a new template): wait for it.
            Err(kube::Error::Api(s))
                if s.code == 404
                    && !matches!(
                        change,
                        Change::DeleteConstraint { .. } | Change::DeleteTemplate { .. }
                    ) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return,
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("could not send {change:?} within a minute");
}

/// Waits until the analysis of the cluster plans nothing and every copy's queue is empty.
async fn wait_converged(
    client: &kube::Client,
    opts: &Options,
    shared: &Arc<Mutex<Shared>>,
) -> Duration {
    let t = Instant::now();
    poll::eventually_some(
        "the cluster converged",
        Duration::from_secs(600),
        || async {
            let (mut snap, _) = list_snapshot(client, &AdmissionApi::v1()).await.ok()?;
            snap.now = Some(chrono::Utc::now());
            let planned = analyze(&snap, opts).plan.len();
            let queued: f64 = {
                let s = shared.lock().expect("lock");
                s.copies
                    .iter()
                    .map(|c| metric(&c.served.metrics(), "kubectl_vap_queue_depth"))
                    .sum()
            };
            (planned == 0 && queued == 0.0).then_some(())
        },
    )
    .await;
    t.elapsed()
}

/// A copy at rest: its CPU over 20 s in % of a core, and its RSS at the end in MiB.
type Rest = Vec<(String, f64, f64)>;

/// Every copy over 20 s at rest.
async fn at_rest(shared: &Arc<Mutex<Shared>>) -> Rest {
    // Let Events and the last renewals of the convergence go out first.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before: Vec<(String, u32, f64)> = {
        let s = shared.lock().expect("lock");
        s.copies
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    c.served.pid(),
                    testenv::cpu_secs(c.served.pid()),
                )
            })
            .collect()
    };
    let span = Duration::from_secs(20);
    tokio::time::sleep(span).await;
    before
        .into_iter()
        .map(|(name, pid, cpu)| {
            (
                name,
                (testenv::cpu_secs(pid) - cpu) / span.as_secs_f64() * 100.0,
                rss_mib(pid).unwrap_or_default(),
            )
        })
        .collect()
}

/// Templates and constraints in the cluster.
#[derive(Clone, Copy)]
struct Count {
    templates: usize,
    constraints: usize,
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} / {}", self.templates, self.constraints)
    }
}

/// What the API server holds, not what the churn thinks it made: the report's proof that the
/// world stayed level (or how much it grew).
async fn count(client: &kube::Client) -> Count {
    let (snap, _) = list_snapshot(client, &AdmissionApi::v1())
        .await
        .expect("list the cluster");
    Count {
        templates: snap.templates.len(),
        constraints: snap.constraints.len(),
    }
}

/// Least-squares slope of RSS over time, MiB per hour, after the first two minutes of a copy.
fn rss_slope(samples: &[Sample], copy: &str, started: Duration) -> Option<f64> {
    let pts: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.copy == copy && s.at > started + Duration::from_secs(120))
        .map(|s| (s.at.as_secs_f64() / 3600.0, s.rss_mib))
        .collect();
    if pts.len() < 30 {
        return None;
    }
    let n = pts.len() as f64;
    let (sx, sy) = pts.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = pts.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    (den > 0.0).then(|| num / den)
}

struct Phase {
    name: &'static str,
    latencies: Vec<Duration>,
    unconverged: usize,
    superseded: usize,
    changes: BTreeMap<&'static str, usize>,
    min_writes: usize,
    rest: Rest,
    settle: Duration,
    /// The cluster's objects at the start and the end of the phase.
    objects: (Count, Count),
}

async fn run() {
    let minutes = env_num("SOAK_MINUTES", 30).max(3);
    let rate = env_num("SOAK_OPS_PER_SEC", 1).max(1);
    let templates = env_num("SOAK_TEMPLATES", 20);
    let per = env_num("SOAK_CONSTRAINTS", 5);
    let seed = env_num("SOAK_SEED", 1) as u64;
    let level = env_num("SOAK_LEVEL", 1) != 0;
    let restarts = env_num("SOAK_RESTARTS", 1).max(1) as u32;
    let churn = if level {
        "level churn"
    } else {
        "growing churn (SOAK_LEVEL=0)"
    };
    println!(
        "kubectl-vap soak: {minutes} min, {rate} change(s)/s, {churn}, {templates} templates × {per} constraints at start, seed {seed}"
    );
    let env: &'static TestEnv = Box::leak(Box::new(TestEnv::start()));
    let client = env.client_admin().await;
    gatekeeper::install_gatekeeper_crds(&client)
        .await
        .expect("template CRD");
    testenv::ensure_namespace(&client, NS)
        .await
        .expect("namespace");
    testenv::ensure_namespace(&client, "gatekeeper-system")
        .await
        .expect("namespace");
    let opts = Options {
        binding_wait: Duration::from_secs(0),
        policy_shape: kubectl_vap::core::PolicyShape::Auto,
        ..default_options()
    };

    // Start: templates and their anchors, then two copies.
    let mut world = World {
        templates: (0..templates).map(|i| format!("K8sSoak{i:03}")).collect(),
        churn_templates: Vec::new(),
        constraints: Vec::new(),
        next: 0,
        rng: Rng(seed.max(1) * 0x9e37_79b9_7f4a_7c15),
        level: None,
    };
    for kind in world.templates.clone() {
        send(&client, &Change::CreateTemplate { kind: kind.clone() }).await;
    }
    let t0 = Instant::now();
    let shared = Arc::new(Mutex::new(Shared::default()));
    for name in ["A", "B"] {
        shared
            .lock()
            .expect("lock")
            .copies
            .push(spawn_copy(env, name));
    }
    for kind in world.templates.clone() {
        send(
            &client,
            &Change::CreateConstraint {
                kind: kind.clone(),
                name: "anchor".into(),
            },
        )
        .await;
        for c in 0..per.saturating_sub(1) {
            let name = format!("s{c:02}");
            send(
                &client,
                &Change::CreateConstraint {
                    kind: kind.clone(),
                    name: name.clone(),
                },
            )
            .await;
            world.constraints.push((kind.clone(), name, false));
        }
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampling = {
        let (shared, stop) = (shared.clone(), stop.clone());
        std::thread::spawn(move || sampler(shared, t0, stop))
    };
    if level {
        world.level = Some(Level {
            templates: world.templates.len(),
            constraints: world.constraints.len(),
        });
    }
    let first = wait_converged(&client, &opts, &shared).await;
    let mut objects = count(&client).await;
    println!(
        "start: converged {first:.1?} after the copies started; templates / constraints {objects}"
    );
    let (mut snapshot, _) = list_snapshot(&client, &AdmissionApi::v1())
        .await
        .expect("list");
    snapshot.now = Some(chrono::Utc::now());
    let mut model = Model {
        snapshot,
        opts: opts.clone(),
        uid: 0,
    };
    assert_eq!(
        model.settle(),
        0,
        "the model of a converged cluster plans nothing"
    );
    let rest0 = at_rest(&shared).await;
    println!("start: at rest {rest0:?}");

    let mut apiserver_writes = 0.0;
    let mut mark = write_requests(&env.apiserver_metrics().await.expect("metrics"));
    let per_phase = Duration::from_secs(minutes as u64 * 60 / 3);
    let every = Duration::from_secs(1) / rate as u32;
    let mut phases = Vec::new();
    let latest: Latest = Arc::default();
    let mut seq = 0u64;
    for (i, name) in [
        "churn",
        "churn + API server restart",
        "churn + leader SIGKILL",
    ]
    .into_iter()
    .enumerate()
    {
        println!(
            "phase {}: {name} for {per_phase:?} (from {:.1} min)",
            i + 1,
            t0.elapsed().as_secs_f64() / 60.0
        );
        let start = Instant::now();
        let mut probes = Vec::new();
        let mut changes: BTreeMap<&'static str, usize> = BTreeMap::new();
        let mut min_writes = 0;
        let mut disrupted = false;
        // Phase 2's restarts: the first a minute in, the rest spread over what is left but
        // its last 30 s.
        let mut restart_at = (0..restarts).map(|k| {
            let gap = per_phase.saturating_sub(Duration::from_secs(90)) / restarts;
            Duration::from_secs(60) + gap * k
        });
        let mut next_restart = restart_at.next();
        let mut respawn_at = None;
        while start.elapsed() < per_phase {
            let tick = Instant::now();
            if i == 1 && next_restart.is_some_and(|at| start.elapsed() > at) {
                next_restart = restart_at.next();
                {
                    let s = shared.lock().expect("lock");
                    let rss: Vec<String> = s
                        .copies
                        .iter()
                        .filter_map(|c| {
                            Some(format!("{} {:.1} MiB", c.name, rss_mib(c.served.pid())?))
                        })
                        .collect();
                    println!("  RSS before the restart: {}", rss.join(", "));
                }
                apiserver_writes +=
                    write_requests(&env.apiserver_metrics().await.expect("metrics")) - mark;
                let t = Instant::now();
                env.stop_apiserver().await;
                env.start_apiserver().await.expect("API server back");
                mark = write_requests(&env.apiserver_metrics().await.expect("metrics"));
                println!(
                    "  API server restarted in {:.1?} (at {:.1} min)",
                    t.elapsed(),
                    t0.elapsed().as_secs_f64() / 60.0
                );
            }
            if i == 2 && !disrupted && start.elapsed() > Duration::from_secs(60) {
                disrupted = true;
                let mut s = shared.lock().expect("lock");
                let leader = s
                    .copies
                    .iter()
                    .position(|c| metric(&c.served.metrics(), "kubectl_vap_leader") == 1.0);
                if let Some(l) = leader {
                    let c = s.copies.remove(l);
                    println!(
                        "  SIGKILL to the leader, copy {} (at {:.1} min)",
                        c.name,
                        t0.elapsed().as_secs_f64() / 60.0
                    );
                    c.served.signal(libc::SIGKILL);
                    s.killed.push(c.name.clone());
                    drop(c);
                    respawn_at = Some(Instant::now() + Duration::from_secs(10));
                }
            }
            if respawn_at.is_some_and(|t| Instant::now() >= t) {
                respawn_at = None;
                shared
                    .lock()
                    .expect("lock")
                    .copies
                    .push(spawn_copy(env, "C"));
            }
            let change = world.pick();
            *changes.entry(change.label()).or_default() += 1;
            min_writes += model.change(&change);
            seq += 1;
            {
                let mut l = latest.lock().expect("lock");
                for k in change.keys() {
                    l.insert(k, seq);
                }
            }
            send(&client, &change).await;
            let at = Instant::now();
            probes.push(tokio::spawn(time_to_converge(
                client.clone(),
                change,
                seq,
                latest.clone(),
                at,
            )));
            if let Some(left) = every.checked_sub(tick.elapsed()) {
                tokio::time::sleep(left).await;
            }
        }
        let mut latencies = Vec::new();
        let (mut unconverged, mut superseded) = (0, 0);
        for p in probes {
            match p.await.expect("probe") {
                Probe::Converged(d) => latencies.push(d),
                Probe::Superseded => superseded += 1,
                Probe::NotConverged => unconverged += 1,
            }
        }
        let settle = wait_converged(&client, &opts, &shared).await;
        let rest = at_rest(&shared).await;
        let end = count(&client).await;
        println!(
            "  {} changes ({changes:?}), converged {settle:.1?} after the last; at rest {rest:?}; templates / constraints {objects} → {end}",
            latencies.len() + unconverged + superseded
        );
        phases.push(Phase {
            name,
            latencies,
            unconverged,
            superseded,
            changes,
            min_writes,
            rest,
            settle,
            objects: (objects, end),
        });
        objects = end;
    }
    apiserver_writes += write_requests(&env.apiserver_metrics().await.expect("metrics")) - mark;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = sampling.join();

    // The report.
    let s = shared.lock().expect("lock");
    println!("\n## Soak: {minutes} min, {rate} change/s, {churn}, seed {seed}\n");
    println!(
        "| phase | changes | templates / constraints, start → end | change → converged: median / p99 / longest | superseded before they showed | not converged in 5 min | converged after the last change | copies' CPU at rest (20 s) | copies' RSS at rest (MiB) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let start = phases.first().map(|p| p.objects.0);
    println!(
        "| start | {} constraints on {templates} templates | {} | first convergence {first:.1?} | – | – | – | {} | {} |",
        templates * per,
        start.map_or("–".into(), |c| c.to_string()),
        rest_words(&rest0),
        rss_words(&rest0)
    );
    for p in &phases {
        println!(
            "| {} | {} | {} → {} | {:.2?} / {:.2?} / {:.2?} | {} | {} | {:.1?} | {} | {} |",
            p.name,
            p.changes.values().sum::<usize>(),
            p.objects.0,
            p.objects.1,
            median(&p.latencies),
            quantile(&p.latencies, 0.99),
            p.latencies.iter().max().copied().unwrap_or_default(),
            p.superseded,
            p.unconverged,
            p.settle,
            rest_words(&p.rest),
            rss_words(&p.rest)
        );
    }
    let min: usize = phases.iter().map(|p| p.min_writes).sum();
    println!(
        "\nWrites (API server's count of write requests for CRDs, VAPs, bindings; the restart's gap excluded): {apiserver_writes:.0}, minimum {min} ({:.2}×)",
        apiserver_writes / min.max(1) as f64
    );
    let mut names: Vec<String> = s.samples.iter().map(|x| x.copy.clone()).collect();
    names.sort();
    names.dedup();
    println!(
        "\n| copy | RSS first / last / peak (MiB) | slope after its first 2 min (MiB/h) | Lease losses |"
    );
    println!("|---|---|---|---|");
    for name in names {
        let mine: Vec<&Sample> = s.samples.iter().filter(|x| x.copy == name).collect();
        let started = mine.first().map(|x| x.at).unwrap_or_default();
        let peak = mine.iter().map(|x| x.rss_mib).fold(0.0, f64::max);
        // When each loss came (minutes into the run): an outage longer than the Lease is one
        // by design, a loss in calm churn is not.
        let losses: Vec<String> = mine
            .windows(2)
            .filter(|w| w[0].leader && !w[1].leader)
            .map(|w| format!("{:.1} min", w[1].at.as_secs_f64() / 60.0))
            .collect();
        let losses = if losses.is_empty() {
            "0".to_string()
        } else {
            format!("{} (at {})", losses.len(), losses.join(", "))
        };
        let killed = s.killed.contains(&name);
        println!(
            "| {name}{} | {:.0} / {:.0} / {peak:.0} | {} | {losses} |",
            if killed { " (killed)" } else { "" },
            mine.first().map(|x| x.rss_mib).unwrap_or_default(),
            mine.last().map(|x| x.rss_mib).unwrap_or_default(),
            rss_slope(&s.samples, &name, started).map_or("–".into(), |v| format!("{v:+.1}")),
        );
    }
    println!(
        "\n(changes: {:?})",
        phases.iter().map(|p| &p.changes).collect::<Vec<_>>()
    );
}

fn rest_words(rest: &Rest) -> String {
    rest.iter()
        .map(|(n, p, _)| format!("{n} {p:.2}%"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn rss_words(rest: &Rest) -> String {
    rest.iter()
        .map(|(n, _, m)| format!("{n} {m:.1}"))
        .collect::<Vec<_>>()
        .join(", ")
}
