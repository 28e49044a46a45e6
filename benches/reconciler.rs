//! Reconciler benchmark on a real kube-apiserver + etcd (a private `testenv`):
//! T templates × C constraints (default 200 × 25 = 5,000 bindings).
//!
//! Each round, on the same server, after it has gone quiet:
//! 1. Lower bound: the exact objects the reconciler would write (the plan of the pure
//!    analysis), created by a plain client with 16 requests in flight (VAPs, then bindings);
//!    then deleted again.
//! 2. Cold convergence of the real binary (`kubectl-vap run --binding-wait=0s`): from spawn
//!    until its `/metrics` shows every write done and an empty queue; the analysis of the live
//!    cluster must then plan nothing.
//!
//! Per round: wall time, the ratio, CPU seconds of kube-apiserver, etcd and the client; medians
//! are reported. After the last round: API requests by verb (the API server's own
//! `apiserver_request_total`), writes in steady state, peak RSS (VmHWM) of the reconciler.
//!
//! Run: `KUBEBUILDER_ASSETS=$(bash tests/kubeenv/build.sh) cargo bench --bench reconciler`
//! (`BENCH_TEMPLATES`, `BENCH_CONSTRAINTS`, `BENCH_ROUNDS`, `BENCH_STEADY_SECS`,
//! `BENCH_WORKERS`, `BENCH_LOG`, `BENCH_PPROF`, `BENCH_WRAP`: see docs/benchmarks.md). Under
//! `cargo test --all-targets` (no `--bench` argument) it returns at once.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

#[path = "../tests/support/mod.rs"]
mod support;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kubectl_vap::cluster::{AdmissionApi, list_snapshot};
use kubectl_vap::core::{Options, PlannedWrite, Verb, analyze};
use kubectl_vap::load::cel::default_options;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::bench::{apiserver_profile, block_on, env_num, median};
use support::cli::{self, Served};
use support::cluster;
use support::metrics::{growth, label, requests_by, sum as metric};
use testenv::{TestEnv, gatekeeper};

/// `apiserver_request_total` summed by verb (and by verb+resource for admissionregistration).
fn requests(metrics: &str) -> BTreeMap<String, f64> {
    requests_by(metrics, |l| {
        let verb = label(l, "verb");
        let mut keys = vec![verb.to_string()];
        // Every write by resource (what at rest is spent on, Events and the Lease included);
        // reads by resource for the objects the benchmark is about.
        let write = matches!(verb, "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE");
        if write || label(l, "group") == "admissionregistration.k8s.io" {
            keys.push(format!("{verb} {}", label(l, "resource")));
        }
        keys
    })
}

async fn plan_len(client: &kube::Client, opts: &Options) -> (usize, usize, usize) {
    let (snap, _) = list_snapshot(client, &AdmissionApi::v1())
        .await
        .expect("list");
    let plan = analyze(&snap, opts).plan;
    (plan.len(), snap.policies.len(), snap.bindings.len())
}

fn print_requests(title: &str, r: &BTreeMap<String, f64>) {
    println!("\n{title}");
    for (k, v) in r {
        println!("  {k:<60} {v:>8.0}");
    }
}

fn main() {
    if !support::bench::benchmarking() {
        // `cargo test --all-targets` builds and runs benches without `--bench`: nothing to do.
        return;
    }
    block_on(run());
}

/// CPU used by the API server, etcd and this process (the lower bound's client), read together.
#[derive(Clone, Copy, Default)]
struct Cpu {
    apiserver: f64,
    etcd: f64,
    bench: f64,
}

impl Cpu {
    fn now(env: &TestEnv) -> Cpu {
        let of = |pid: Option<u32>| pid.map(testenv::cpu_secs).unwrap_or(0.0);
        Cpu {
            apiserver: of(env.apiserver_pid()),
            etcd: of(env.etcd_pid()),
            bench: testenv::own_cpu_secs(),
        }
    }
    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            apiserver: self.apiserver - before.apiserver,
            etcd: self.etcd - before.etcd,
            bench: self.bench - before.bench,
        }
    }
}

/// One measured phase.
struct Phase {
    wall: Duration,
    cpu: Cpu,
    /// The reconciler's own CPU (convergence only).
    client_cpu: f64,
    requests: BTreeMap<String, f64>,
    /// Spawn → first write (convergence only).
    startup: Option<Duration>,
    /// CPU of the API server, etcd and kubectl-vap during that startup.
    startup_cpu: f64,
}

/// Waits until the API server and etcd are quiet (under 10% of a core for half a second), so
/// that neither phase pays for the tail of the one before it (the admission plugin compiling
/// or dropping 5,000 bindings keeps the server busy after the last response).
async fn settle(env: &TestEnv) {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(60);
    let mut before = Cpu::now(env);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = Cpu::now(env);
        let used = now.since(before);
        if used.apiserver + used.etcd < 0.05 {
            println!("  (server quiet after {:.1?})", start.elapsed());
            return;
        }
        before = now;
    }
    println!("(the server did not settle within 60 s; measuring anyway)");
}

/// Deletes every VAP and binding: back to cold.
async fn delete_generated(client: &kube::Client, opts: &Options) {
    let admission = AdmissionApi::v1();
    for ar in [admission.binding(), admission.policy()] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        api.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .expect("delete collection");
    }
    let (_, p, b) = plan_len(client, opts).await;
    assert_eq!((p, b), (0, 0), "cold again");
}

/// The plan's objects created by a plain client, VAPs first, 16 in flight.
async fn lower_bound(env: &TestEnv, client: &kube::Client, plan: &[PlannedWrite]) -> Phase {
    let admission = AdmissionApi::v1();
    let (policies, bindings): (Vec<_>, Vec<_>) = plan
        .iter()
        .partition(|w| w.object.kind == "ValidatingAdmissionPolicy");
    let create_all = |objs: Vec<Value>, ar: kube::core::ApiResource| {
        let client = client.clone();
        async move {
            futures::stream::iter(objs)
                .map(|body| {
                    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
                    async move {
                        let obj: DynamicObject = serde_json::from_value(body).expect("object");
                        api.create(&PostParams::default(), &obj)
                            .await
                            .expect("raw create");
                    }
                })
                .buffer_unordered(16)
                .collect::<Vec<_>>()
                .await
        }
    };
    let before = requests(&env.apiserver_metrics().await.expect("metrics"));
    let cpu = Cpu::now(env);
    let t = Instant::now();
    create_all(
        policies.iter().filter_map(|w| w.body.clone()).collect(),
        admission.policy(),
    )
    .await;
    create_all(
        bindings.iter().filter_map(|w| w.body.clone()).collect(),
        admission.binding(),
    )
    .await;
    let wall = t.elapsed();
    let cpu = Cpu::now(env).since(cpu);
    Phase {
        wall,
        client_cpu: cpu.bench,
        cpu,
        requests: growth(
            &requests(&env.apiserver_metrics().await.expect("metrics")),
            &before,
        ),
        startup: None,
        startup_cpu: 0.0,
    }
}

/// SIGTERM (the lease is released), then wait.
fn stop(rec: Served) {
    let _ = rec.terminate();
}

/// Cold convergence of the real binary: spawn → every write done and the queue empty.
async fn converge(env: &TestEnv, expected: usize) -> (Phase, Served) {
    let before = requests(&env.apiserver_metrics().await.expect("metrics"));
    let cpu = Cpu::now(env);
    let t = Instant::now();
    // BENCH_WRAP="perf record -o /tmp/perf.data --" profiles the reconciler (its CPU figure
    // is then the wrapper's).
    let wrap: Vec<String> = std::env::var("BENCH_WRAP")
        .map(|w| w.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    let bin = cli::BIN.to_string();
    let (program, pre) = match wrap.split_first() {
        Some((p, rest)) => (p.clone(), [rest, std::slice::from_ref(&bin)].concat()),
        None => (bin, Vec::new()),
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(pre)
        .args(["run", "--binding-wait=0s"])
        .args(std::env::var("BENCH_WORKERS").map(|w| format!("--workers={w}")))
        .arg(format!(
            "--log={}",
            std::env::var("BENCH_LOG").unwrap_or_else(|_| "warn".into())
        ))
        .arg("--kubeconfig")
        .arg(env.kubeconfig_admin());
    let rec = Served::spawn(cmd);
    let pid = rec.pid();
    let mut converged = None;
    let mut client_cpu = 0.0;
    let mut first_write = None;
    let mut startup_cpu = 0.0;
    while t.elapsed() < Duration::from_secs(900) {
        let m = rec.metrics();
        let writes = metric(&m, "kubectl_vap_writes_total");
        if first_write.is_none() && writes > 0.0 {
            first_write = Some(t.elapsed());
            let c = Cpu::now(env).since(cpu);
            startup_cpu = c.apiserver + c.etcd + testenv::cpu_secs(pid);
        }
        if writes >= expected as f64 && metric(&m, "kubectl_vap_queue_depth") == 0.0 {
            converged = Some(t.elapsed());
            client_cpu = testenv::cpu_secs(pid);
            break;
        }
        // Short polls: the poll interval is part of what is measured.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let wall = converged.expect("converged within 15 minutes");
    let cpu = Cpu::now(env).since(cpu);
    let phase = Phase {
        wall,
        cpu,
        client_cpu,
        requests: growth(
            &requests(&env.apiserver_metrics().await.expect("metrics")),
            &before,
        ),
        startup: first_write,
        startup_cpu,
    };
    (phase, rec)
}

async fn run() {
    let templates = env_num("BENCH_TEMPLATES", 200);
    let per = env_num("BENCH_CONSTRAINTS", 25);
    let steady = env_num("BENCH_STEADY_SECS", 60);
    let rounds = env_num("BENCH_ROUNDS", 3).max(1);
    println!(
        "kubectl-vap reconciler benchmark: {templates} templates × {per} constraints = {} bindings, {rounds} rounds",
        templates * per
    );
    let env: &'static TestEnv = Box::leak(Box::new(TestEnv::start()));
    let client = env.client_admin().await;
    gatekeeper::install_gatekeeper_crds(&client)
        .await
        .expect("template CRD");
    // The narrowed shape, as docs/benchmarks.md measured it (one VAP per template at any
    // BENCH_CONSTRAINTS; the default, auto, is the same above 10 constraints a template).
    let opts = Options {
        binding_wait: Duration::from_secs(0),
        policy_shape: kubectl_vap::core::PolicyShape::Narrowed,
        ..default_options()
    };

    // Setup (not measured): templates, their CRDs, constraints.
    let t0 = Instant::now();
    let kinds: Vec<String> = (0..templates).map(|i| format!("K8sBench{i:04}")).collect();
    futures::stream::iter(kinds.iter().cloned())
        .for_each_concurrent(8, |kind| {
            let client = client.clone();
            async move {
                // The exact CRD kubectl-vap builds (an earlier run's): the measured writes are
                // the VAPs and bindings, as in the lower bound.
                let t = support::objects::labels_template(&kind, Some(true), None);
                cluster::create_template_and_crd(&client, &t).await;
            }
        })
        .await;
    let items: Vec<(String, usize)> = kinds
        .iter()
        .flat_map(|k| (0..per).map(move |c| (k.clone(), c)))
        .collect();
    futures::stream::iter(items)
        .for_each_concurrent(32, |(kind, c)| {
            let client = client.clone();
            async move {
                let spec = json!({ "enforcementAction": if c % 3 == 0 { "warn" } else { "deny" },
                                   "match": { "labelSelector": { "matchLabels": { "bench": "inert" } } },
                                   "parameters": { "labels": ["owner"] } });
                let c = gatekeeper::constraint(&kind, &format!("c{c:03}"), spec);
                cluster::create_constraint(&client, &c).await;
            }
        })
        .await;
    testenv::ensure_namespace(&client, "gatekeeper-system")
        .await
        .expect("namespace");
    println!("setup (templates, CRDs, constraints): {:?}", t0.elapsed());

    let (snap, _) = list_snapshot(&client, &AdmissionApi::v1())
        .await
        .expect("list");
    let plan = analyze(&snap, &opts).plan;
    assert!(plan.iter().all(|w| w.verb == Verb::Create));
    drop(snap);
    let vaps = plan
        .iter()
        .filter(|w| w.object.kind == "ValidatingAdmissionPolicy")
        .count();

    // Rounds: the lower bound and the reconciler alternate on the same server, so drift in
    // the machine's load touches both; the medians are what the docs report.
    let mut lows = Vec::new();
    let mut convs = Vec::new();
    let mut last = None;
    for round in 1..=rounds {
        settle(env).await;
        let prof = apiserver_profile(&client, &format!("lower-{round}"), 3);
        let low = lower_bound(env, &client, &plan).await;
        if let Some(p) = prof {
            let _ = p.await;
        }
        delete_generated(&client, &opts).await;
        settle(env).await;
        let prof = apiserver_profile(&client, &format!("kubectl-vap-{round}"), 4);
        let (conv, rec) = converge(env, plan.len()).await;
        if let Some(p) = prof {
            let _ = p.await;
        }
        let (left, p, b) = plan_len(&client, &opts).await;
        assert_eq!(left, 0, "converged: the analysis plans nothing more");
        println!(
            "round {round}: lower bound {:.2?}, kubectl-vap {:.2?} ({:.2}×; startup {:.2?} using {:.2} s CPU; {p} VAPs, {b} bindings)",
            low.wall,
            conv.wall,
            conv.wall.as_secs_f64() / low.wall.as_secs_f64(),
            conv.startup.unwrap_or_default(),
            conv.startup_cpu,
        );
        lows.push(low);
        convs.push(conv);
        if round < rounds {
            stop(rec);
            delete_generated(&client, &opts).await;
        } else {
            last = Some(rec);
        }
    }
    let rec = last.expect("at least one round");
    let writes_conv = metric(&rec.metrics(), "kubectl_vap_writes_total");

    // Steady state, after the last round.
    let before = requests(&env.apiserver_metrics().await.expect("metrics"));
    tokio::time::sleep(Duration::from_secs(steady as u64)).await;
    let writes_steady = metric(&rec.metrics(), "kubectl_vap_writes_total") - writes_conv;
    let steady_reqs = growth(
        &requests(&env.apiserver_metrics().await.expect("metrics")),
        &before,
    );
    let rss = testenv::peak_rss_kib(rec.pid());
    stop(rec);

    let secs =
        |v: &[Phase], f: &dyn Fn(&Phase) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    let ratios: Vec<f64> = lows
        .iter()
        .zip(&convs)
        .map(|(l, c)| c.wall.as_secs_f64() / l.wall.as_secs_f64())
        .collect();
    println!("\n## Results (medians of {rounds} rounds)\n");
    println!("| measurement | lower bound | kubectl-vap |");
    println!("|---|---|---|");
    println!(
        "| objects | {vaps} VAPs + {} bindings | same |",
        plan.len() - vaps
    );
    println!(
        "| wall time (lower bound: creates only; kubectl-vap: spawn → converged) | {:.2} s | {:.2} s |",
        secs(&lows, &|p| p.wall.as_secs_f64()),
        secs(&convs, &|p| p.wall.as_secs_f64()),
    );
    println!(
        "| ratio per round | — | {} |",
        ratios
            .iter()
            .map(|r| format!("{r:.2}×"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("| **median ratio** | — | **{:.2}×** |", median(&ratios));
    println!(
        "| of which startup (spawn → first write) | — | {:.2} s |",
        secs(&convs, &|p| p.startup.unwrap_or_default().as_secs_f64())
    );
    println!(
        "| CPU: kube-apiserver | {:.2} s | {:.2} s |",
        secs(&lows, &|p| p.cpu.apiserver),
        secs(&convs, &|p| p.cpu.apiserver)
    );
    println!(
        "| CPU: etcd | {:.2} s | {:.2} s |",
        secs(&lows, &|p| p.cpu.etcd),
        secs(&convs, &|p| p.cpu.etcd)
    );
    println!(
        "| CPU: the client (plain client / kubectl-vap) | {:.2} s | {:.2} s |",
        secs(&lows, &|p| p.client_cpu),
        secs(&convs, &|p| p.client_cpu)
    );
    println!(
        "| writes by kubectl-vap during convergence (last round) | {} | {writes_conv:.0} |",
        plan.len()
    );
    println!(
        "| writes by kubectl-vap during {steady} s of steady state | — | {writes_steady:.0} |"
    );
    println!(
        "| peak RSS of kubectl-vap (VmHWM) | — | {} MiB |",
        rss.map(|k| k / 1024).unwrap_or_default()
    );
    print_requests(
        "API requests, lower bound, last round (by verb):",
        &lows[lows.len() - 1].requests,
    );
    print_requests(
        "API requests during kubectl-vap's convergence, last round (by verb):",
        &convs[convs.len() - 1].requests,
    );
    print_requests(
        &format!("API requests during {steady} s of steady state (by verb):"),
        &steady_reqs,
    );
}
