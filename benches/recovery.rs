//! Recovery after an API server restart (issue 42, items 6 and 10): how soon after the server's
//! first answer a running `kubectl-vap run` is back at work, side by side with the server's own
//! pace measured in the same run.
//!
//! Setup: `BENCH_KINDS` (30) templates × `BENCH_CONSTRAINTS` (10) constraints, every binding
//! written by one `run` (the default shape: a VAP and a binding per constraint). Then
//! `BENCH_ROUNDS` (3) rounds of two phases, each timed from the server's **first answer** (the
//! first moment this process lists a constraint kind successfully, polled every 10 ms from the
//! restart's spawn):
//!
//! - **SIGKILL restart** (item 6): kube-apiserver killed and started again at once; as soon as
//!   the server takes a create, one new constraint per kind. Measured: until every kind is listed
//!   by this process (the lower bound: the server serves each kind's list), and until every new
//!   constraint's binding exists (the copy's constraint watches listed again, the constraint
//!   reconciled, its binding written).
//! - **Outage with the bindings gone** (item 10): every binding deleted while the copy is
//!   paused (SIGSTOP), kube-apiserver killed, the copy resumed, the server started again after
//!   `BENCH_OUTAGE_SECS` (8). Measured: until every kind is listed (the lower bound), and until
//!   every binding exists again. The copy's metrics say what it did: as run here, its watches
//!   had not delivered the deletes before the kill (no write failed during the outage), so this
//!   times the relist after the outage and the rewrites; keys whose writes failed during an
//!   outage being released when the server answers is the unit test
//!   `keys_that_met_an_outage_are_due_when_the_server_answers`.
//!
//! Run: `KUBEBUILDER_ASSETS=$(bash tests/kubeenv/build.sh) cargo bench --bench recovery`.
//! Under `cargo test --all-targets` it returns at once.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

#[path = "../tests/support/mod.rs"]
mod support;

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;
use std::time::{Duration, Instant};
use support::bench::{block_on, env_num, median};
use support::cli::{self, Served};
use support::cluster;
use support::metrics::sum;
use testenv::{TestEnv, gatekeeper};

const PREFIX: &str = "K8sRecovery";

fn main() {
    if !support::bench::benchmarking() {
        // `cargo test --all-targets` builds and runs benches without `--bench`: nothing to do.
        return;
    }
    block_on(run());
}

/// One phase's times, from the server's first answer.
struct Phase {
    /// Every constraint kind listed by this process.
    lower_bound: Duration,
    /// What the copy had to do, done.
    copy: Duration,
}

impl Phase {
    fn say(&self, round: usize, phase: &str, copy: &str) {
        println!(
            "round {round}, {phase}: every kind listed after {:.2?}; {copy} after {:.2?}",
            self.lower_bound, self.copy
        );
    }
}

/// `work` (the copy's, watched from here) and the lower bound, both timed from `first`.
async fn timed(
    env: &TestEnv,
    kinds: &[String],
    first: Instant,
    work: impl std::future::Future<Output = ()>,
) -> Phase {
    let (lower_bound, copy) = tokio::join!(all_listed(env, kinds, first), async {
        work.await;
        first.elapsed()
    });
    Phase { lower_bound, copy }
}

async fn run() {
    let kinds_n = env_num("BENCH_KINDS", 30);
    let per = env_num("BENCH_CONSTRAINTS", 10);
    let rounds = env_num("BENCH_ROUNDS", 3).max(1);
    let outage = Duration::from_secs(env_num("BENCH_OUTAGE_SECS", 8) as u64);
    println!(
        "kubectl-vap recovery benchmark: {kinds_n} kinds × {per} constraints = {} bindings, {rounds} rounds, outage {outage:?}",
        kinds_n * per
    );
    let env: &'static TestEnv = Box::leak(Box::new(TestEnv::start()));
    let client = cluster::prepared(env, &["gatekeeper-system"]).await;
    let kinds: Vec<String> = (0..kinds_n).map(|i| format!("{PREFIX}{i:03}")).collect();
    futures::stream::iter(kinds.iter().cloned())
        .for_each_concurrent(8, |kind| {
            let client = client.clone();
            async move {
                let t = support::objects::labels_template(&kind, Some(true), None);
                cluster::create_template_and_crd(&client, &t).await;
                for c in 0..per {
                    cluster::create_constraint(&client, &inert(&kind, &format!("c{c:03}"))).await;
                }
            }
        })
        .await;

    let mut cmd = std::process::Command::new(cli::BIN);
    cmd.args(["run", "--binding-wait=0s", "--log=warn"])
        .arg("--kubeconfig")
        .arg(env.kubeconfig_admin());
    let copy = Served::spawn(cmd);
    let mut expected = kinds.len() * per;
    until_bindings(&client, expected, Duration::from_secs(600)).await;
    println!("converged: {expected} bindings");

    let mut restarts = Vec::new();
    let mut outages = Vec::new();
    for round in 0..rounds {
        // SIGKILL restart, then a new constraint of every kind.
        env.kill_apiserver().await;
        env.spawn_apiserver_again().expect("kube-apiserver again");
        let first = first_answer(env, &kinds[0]).await;
        let made = kinds.iter().map(|kind| {
            let client = client.clone();
            async move {
                let c = inert(kind, &format!("after{round}"));
                let api = cluster::constraints(&client, kind);
                let obj = serde_json::from_value(c).expect("a constraint");
                // The server takes creates a moment after its first answer.
                while api.create(&Default::default(), &obj).await.is_err() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        });
        expected += kinds.len();
        let phase = timed(env, &kinds, first, async {
            futures::future::join_all(made).await;
            until_bindings(&client, expected, Duration::from_secs(300)).await;
        })
        .await;
        phase.say(round, "SIGKILL restart", "every new constraint bound");
        restarts.push(phase);

        // Every binding deleted while the copy is paused (SIGSTOP), and the server killed before
        // it goes on (deleted with the copy running, it rewrote every one before the kill).
        let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
        let ours = ListParams::default().labels("app.kubernetes.io/managed-by=kubectl-vap");
        let counts = || {
            let m = copy.metrics();
            let unreachable = "kubectl_vap_write_errors_total{reason=\"unreachable\"}";
            (sum(&m, "kubectl_vap_writes_total"), sum(&m, unreachable))
        };
        let (writes_before, failed_before) = counts();
        testenv::signal(copy.pid(), libc::SIGSTOP);
        bindings
            .delete_collection(&DeleteParams::default(), &ours)
            .await
            .expect("bindings deleted");
        env.kill_apiserver().await;
        testenv::signal(copy.pid(), libc::SIGCONT);
        tokio::time::sleep(outage).await;
        env.spawn_apiserver_again().expect("kube-apiserver again");
        let first = first_answer(env, &kinds[0]).await;
        let phase = timed(env, &kinds, first, async {
            until_bindings(&client, expected, Duration::from_secs(300)).await;
        })
        .await;
        phase.say(
            round,
            &format!("{outage:?} outage mid-write"),
            "every binding back",
        );
        // What the copy did: writes that failed unanswered during the outage (waiting on their
        // retries), and writes after it.
        let (writes, failed) = counts();
        println!(
            "round {round}: {} of the copy's writes failed unanswered during the outage, {} written after",
            failed - failed_before,
            writes - writes_before
        );
        outages.push(phase);
    }
    let _ = copy.terminate();

    for (what, phases) in [
        ("SIGKILL restart: new constraints bound", &restarts),
        ("outage mid-write: every binding back", &outages),
    ] {
        let lower: Vec<Duration> = phases.iter().map(|p| p.lower_bound).collect();
        let copy: Vec<Duration> = phases.iter().map(|p| p.copy).collect();
        let ratios: Vec<f64> = phases
            .iter()
            .map(|p| p.copy.as_secs_f64() / p.lower_bound.as_secs_f64().max(0.001))
            .collect();
        println!(
            "{what}: median {:.2?} after the first answer (lower bound, every kind listed: median {:.2?}); ratio median {:.1}",
            median(&copy),
            median(&lower),
            median(&ratios)
        );
    }
}

/// A constraint of `kind` that matches nothing in this benchmark (its label is on no object).
fn inert(kind: &str, name: &str) -> serde_json::Value {
    gatekeeper::constraint(
        kind,
        name,
        json!({ "match": { "labelSelector": { "matchLabels": { "bench": "inert" } } },
                "parameters": { "labels": ["owner"] } }),
    )
}

/// When this process first lists constraints of `kind` successfully, polling every 10 ms (the
/// server's first answer that serves anything of ours).
async fn first_answer(env: &TestEnv, kind: &str) -> Instant {
    let client = env.client_admin().await;
    let api = cluster::constraints(&client, kind);
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if api.list(&ListParams::default().limit(1)).await.is_ok() {
            return Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("kube-apiserver did not answer within 120 s of its restart");
}

/// How long after `first` every kind of `kinds` was listed by this process (each polled every
/// 10 ms until it is): the server's own pace, the lower bound of any watch's relist.
async fn all_listed(env: &TestEnv, kinds: &[String], first: Instant) -> Duration {
    let client = env.client_admin().await;
    futures::future::join_all(kinds.iter().map(|kind| {
        let api = cluster::constraints(&client, kind);
        async move {
            while api.list(&ListParams::default().limit(1)).await.is_err() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }))
    .await;
    first.elapsed()
}

/// Waits until `n` bindings of this benchmark's kinds exist (polled every 20 ms).
async fn until_bindings(client: &kube::Client, n: usize, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut seen = 0;
    while Instant::now() < deadline {
        seen = count_bindings(client).await;
        if seen >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{seen} of {n} bindings after {timeout:?}");
}

/// The bindings of this benchmark's kinds (0 when the list fails).
async fn count_bindings(client: &kube::Client) -> usize {
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let prefix = format!("gatekeeper-{}", PREFIX.to_lowercase());
    let Ok(list) = bindings.list(&ListParams::default()).await else {
        return 0;
    };
    let ours = |b: &&ValidatingAdmissionPolicyBinding| {
        b.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with(&prefix))
    };
    list.items.iter().filter(ours).count()
}
