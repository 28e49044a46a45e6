//! Lease renewals at a cold start (issue 41): whether deciding many templates at once, each
//! with CEL of its own to parse, delays the leader's Lease renewal, which shares the runtime's
//! two worker threads with the reconcilers.
//!
//! On one private kube-apiserver + etcd: `BENCH_TEMPLATES` (200) templates, each with CEL no
//! other has (so no parse answer is remembered), their constraint CRDs created by the bench
//! exactly as kubectl-vap builds them, and `BENCH_CONSTRAINTS` (3) inert constraints each.
//! Then `BENCH_ROUNDS` (3) rounds; in each, every binary of `BENCH_BINARIES` (default the one
//! cargo built; an older one measures "before") in turn: every VAP, binding and the Lease
//! deleted (cold again), `kubectl-vap run` spawned, its Lease read every 50 ms and each new
//! `renewTime` kept (the copy's own stamps, to the microsecond: a gap between two is exact, not
//! a poll's). Reported per binary:
//!
//! - **cold**: the gaps between renewals in the first `BENCH_COLD_SECS` (30) after the spawn,
//!   or until every binding exists if that is later (the time to converge is printed too);
//! - **at rest** (the lower bound, the same copy in the same run): the gaps in the next
//!   `BENCH_REST_SECS` (30), from 5 s after the cold window;
//! - the floor of both, the renew period the copy is configured with (`--lease-duration`
//!   `BENCH_LEASE_SECS`, 15 s by default, / 7).
//!
//! Medians and the largest gap, and the ratios of the cold ones to the median at rest.
//!
//! Run: `KUBEBUILDER_ASSETS=$(bash tests/kubeenv/build.sh) cargo bench --bench lease_cold`.
//! Under `cargo test --all-targets` it returns at once.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

#[path = "../tests/support/mod.rs"]
mod support;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::bench::{block_on, env_list, env_num, median};
use support::cli::{self, Served};
use support::cluster;
use testenv::gatekeeper;

const PREFIX: &str = "K8sColdLease";
const NS: &str = "cold-lease";
const LEASE: &str = "cold-lease";
const OURS: &str = "app.kubernetes.io/managed-by=kubectl-vap";

fn main() {
    if !support::bench::benchmarking() {
        // `cargo test --all-targets` builds and runs benches without `--bench`: nothing to do.
        return;
    }
    block_on(run());
}

/// One copy's cold start: the gaps between its renewals, cold and at rest.
struct Start {
    converged: Duration,
    cold: Vec<Duration>,
    rest: Vec<Duration>,
}

async fn run() {
    let templates = env_num("BENCH_TEMPLATES", 200);
    let per = env_num("BENCH_CONSTRAINTS", 3);
    let rounds = env_num("BENCH_ROUNDS", 3).max(1);
    let lease_secs = env_num("BENCH_LEASE_SECS", 15).max(1);
    let binaries = env_list("BENCH_BINARIES", cli::BIN);
    let renew_period = Duration::from_secs(lease_secs as u64) / 7;
    println!(
        "kubectl-vap Lease renewals at a cold start: {templates} templates (CEL of their own) × {per} constraints, {rounds} rounds, --lease-duration={lease_secs}s (renew period {renew_period:.2?})"
    );
    let env: &'static testenv::TestEnv = Box::leak(Box::new(testenv::TestEnv::start()));
    let client = cluster::prepared(env, &["gatekeeper-system", NS]).await;
    let kinds: Vec<String> = (0..templates).map(|i| format!("{PREFIX}{i:03}")).collect();
    let made = std::sync::atomic::AtomicUsize::new(0);
    futures::StreamExt::for_each_concurrent(
        futures::stream::iter(kinds.iter().enumerate()),
        8,
        |(i, kind)| {
            let (client, made) = (client.clone(), &made);
            async move {
                cluster::create_template_and_crd(&client, &template_of_its_own(kind, i)).await;
                for c in 0..per {
                    cluster::create_constraint(&client, &inert(kind, &format!("c{c}"))).await;
                }
                made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        },
    )
    .await;
    println!(
        "created {} templates and their constraints",
        made.into_inner()
    );

    let mut starts: BTreeMap<&str, Vec<Start>> = BTreeMap::new();
    for round in 0..rounds {
        for bin in &binaries {
            cold_again(&client).await;
            let start = cold_start(env, &client, bin, lease_secs, templates * per).await;
            println!(
                "round {round}, {bin}: converged after {:.2?}; cold gaps {}; at rest {}",
                start.converged,
                said(&start.cold),
                said(&start.rest)
            );
            starts.entry(bin.as_str()).or_default().push(start);
        }
    }
    for (bin, starts) in &starts {
        let all = |pick: fn(&Start) -> &Vec<Duration>| -> Vec<Duration> {
            starts
                .iter()
                .flat_map(|s| pick(s).iter().copied())
                .collect()
        };
        let (cold, rest) = (all(|s| &s.cold), all(|s| &s.rest));
        let converged: Vec<Duration> = starts.iter().map(|s| s.converged).collect();
        let rest_median = median(&rest);
        let max_cold = cold.iter().copied().max().unwrap_or_default();
        let ratio = |d: Duration| d.as_secs_f64() / rest_median.as_secs_f64().max(0.001);
        println!(
            "{bin}: converged in {:.2?} (median of {}); cold gaps: median {:.3?}, max {:.3?} ({} gaps); at rest: median {:.3?}, max {:.3?} ({} gaps); floor {renew_period:.3?}; cold/rest: median {:.2}, max {:.2}",
            median(&converged),
            converged.len(),
            median(&cold),
            max_cold,
            cold.len(),
            rest_median,
            rest.iter().copied().max().unwrap_or_default(),
            rest.len(),
            ratio(median(&cold)),
            ratio(max_cold),
        );
    }
}

/// Gaps as `[a, b, …]` in seconds.
fn said(gaps: &[Duration]) -> String {
    let each: Vec<String> = gaps
        .iter()
        .map(|g| format!("{:.3}", g.as_secs_f64()))
        .collect();
    format!("[{}]", each.join(", "))
}

/// Every VAP and binding kubectl-vap wrote, and the Lease, deleted: the next copy starts cold.
async fn cold_again(client: &kube::Client) {
    let ours = ListParams::default().labels(OURS);
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let dp = DeleteParams::default();
    bindings
        .delete_collection(&dp, &ours)
        .await
        .expect("bindings");
    policies.delete_collection(&dp, &ours).await.expect("VAPs");
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let _ = leases.delete(LEASE, &dp).await;
    support::poll::eventually("cold again", Duration::from_secs(120), || async {
        let left = |n: usize| n == 0;
        bindings
            .list(&ours)
            .await
            .is_ok_and(|l| left(l.items.len()))
            && policies
                .list(&ours)
                .await
                .is_ok_and(|l| left(l.items.len()))
    })
    .await;
}

/// `bin run` spawned on the cold cluster; its renewals read until the rest window ends.
async fn cold_start(
    env: &testenv::TestEnv,
    client: &kube::Client,
    bin: &str,
    lease_secs: usize,
    bindings_wanted: usize,
) -> Start {
    let cold_for = Duration::from_secs(env_num("BENCH_COLD_SECS", 30) as u64);
    let rest_for = Duration::from_secs(env_num("BENCH_REST_SECS", 30) as u64);
    let mut cmd = std::process::Command::new(bin);
    cmd.args(["run", "--binding-wait=0s", "--log=warn"])
        .args(["--lease-namespace", NS, "--lease-name", LEASE])
        .arg(format!("--lease-duration={lease_secs}s"))
        .arg("--kubeconfig")
        .arg(env.kubeconfig_admin());
    let spawned = Instant::now();
    let copy = Served::spawn(cmd);
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let ours = ListParams::default().labels(OURS);
    // Each renewal once: its renewTime, and when this process first saw it.
    let mut renewals: Vec<(k8s_openapi::jiff::Timestamp, Instant)> = Vec::new();
    let mut converged = None;
    let mut next_count = spawned;
    loop {
        if let Ok(Some(l)) = leases.get_opt(LEASE).await
            && let Some(t) = l.spec.and_then(|s| s.renew_time)
            && renewals.last().is_none_or(|(last, _)| *last != t.0)
        {
            renewals.push((t.0, Instant::now()));
        }
        // Bindings counted twice a second until every one exists.
        if converged.is_none() && Instant::now() >= next_count {
            next_count += Duration::from_millis(500);
            let n = bindings.list(&ours).await.map_or(0, |l| l.items.len());
            if n >= bindings_wanted {
                converged = Some(spawned.elapsed());
            }
        }
        let cold_end = converged.map(|c| c.max(cold_for));
        if cold_end.is_some_and(|end| spawned.elapsed() >= end + Duration::from_secs(5) + rest_for)
        {
            break;
        }
        assert!(
            spawned.elapsed() < Duration::from_secs(600),
            "{bin} did not converge within 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = copy.terminate();
    let converged = converged.unwrap_or_default();
    let cold_end = spawned + converged.max(cold_for);
    let rest_start = cold_end + Duration::from_secs(5);
    // A gap belongs to the window its later renewal was seen in.
    let (mut cold, mut rest) = (Vec::new(), Vec::new());
    for pair in renewals.windows(2) {
        let [(before, _), (after, seen)] = pair else {
            continue;
        };
        let gap = Duration::try_from(after.duration_since(*before)).unwrap_or_default();
        if *seen <= cold_end {
            cold.push(gap);
        } else if *seen >= rest_start {
            rest.push(gap);
        }
    }
    Start {
        converged,
        cold,
        rest,
    }
}

/// A labels template of `kind` whose CEL no other template has: the `n`th, with `n` written
/// into every expression (a validation, its message and a variable), so each parse is new.
fn template_of_its_own(kind: &str, n: usize) -> serde_json::Value {
    let has = "has(variables.anyObject.metadata.labels)";
    let labels = "variables.anyObject.metadata.labels";
    let source = json!({
        "failurePolicy": "Ignore",
        "variables": [{ "name": "limit", "expression": format!("{n} + size(variables.params.labels)") }],
        "validations": [{
            "expression": format!("variables.params.labels.all(l, {has} && l in {labels}) || variables.limit < {n}"),
            "messageExpression": format!("'template {n} misses: ' + variables.params.labels.filter(l, !{has} || !(l in {labels})).join(', ')"),
        }],
    });
    gatekeeper::template(
        kind,
        "v1",
        support::objects::labels_crd_spec(),
        gatekeeper::cel_targets(source),
    )
}

/// A constraint of `kind` that matches nothing here (its label is on no object).
fn inert(kind: &str, name: &str) -> serde_json::Value {
    gatekeeper::constraint(
        kind,
        name,
        json!({ "match": { "labelSelector": { "matchLabels": { "bench": "inert" } } },
                "parameters": { "labels": ["owner"] } }),
    )
}
