//! `kubectl vap audit` on a real kube-apiserver + etcd (a private `testenv`): N Pods (default
//! 5,000) under C constraints (default 10, `warn`, so every verdict comes back), against a
//! lower bound measured in the same run: a plain client that lists the same Pods and sends the
//! same dry-run no-op updates with the same concurrency, attributing nothing.
//!
//! Reported: wall time of each (median of the rounds), the ratio, API requests per object from
//! the API server's own `apiserver_request_total`, and that both saw the same violations.
//!
//! Run: `KUBEBUILDER_ASSETS=$(bash tests/kubeenv/build.sh) cargo bench --bench admission`
//! (`BENCH_PODS`, `BENCH_CONSTRAINTS`, `BENCH_ROUNDS`, `BENCH_CONCURRENCY`). Under
//! `cargo test --all-targets` (no `--bench` argument) it returns at once.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

#[path = "../tests/support/mod.rs"]
mod support;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::bench::{block_on, env_num, quantile};
use support::cluster;
use support::metrics::{growth, requests_by_verb};
// Our matcher CEL (the narrowed and inline shapes'), as these were written for: the gatekeeper
// shape's is Gatekeeper's own, under which `namespaces: []` matches nothing.
use support::objects::{
    binding_for, constraint_of, policy_with_our_matchers as policy_for, required_labels_template,
};
use testenv::{TestEnv, gatekeeper};

const KIND: &str = "BenchPodLabels";

fn main() {
    if !support::bench::benchmarking() {
        return;
    }
    block_on(run());
}

async fn run() {
    let pods = env_num("BENCH_PODS", 5000);
    let constraints = env_num("BENCH_CONSTRAINTS", 10);
    let rounds = env_num("BENCH_ROUNDS", 3);
    let concurrency = env_num("BENCH_CONCURRENCY", 16);
    let env = TestEnv::start();
    let client = env.client_admin().await;
    gatekeeper::install_gatekeeper_crds(&client)
        .await
        .expect("template CRD");

    // Template, CRD, policy; C constraints, each requiring its own label on Pods.
    let t = cluster::create_template_and_crd(&client, &required_labels_template(KIND, "missing: "))
        .await;
    cluster::create_policy(&client, &policy_for(&t, KIND).expect("generates")).await;
    let ns = env.create_namespace("bench").await;
    for i in 0..constraints {
        let raw = gatekeeper::constraint(
            KIND,
            &format!("c{i}"),
            json!({"enforcementAction": "warn",
                   "match": {"kinds": [{"apiGroups": [""], "kinds": ["Pod"]}], "namespaces": [ns]},
                   "parameters": {"labels": [format!("l{i}")]}}),
        );
        let c = cluster::create_constraint(&client, &raw).await;
        let c = constraint_of(KIND, serde_json::to_value(c).expect("json"));
        cluster::create_binding(&client, &binding_for(&c)).await;
    }

    // Pods: pod k carries the labels l0..l(k mod (C+1)) minus one, so violations vary.
    let started = Instant::now();
    let api = Api::<Pod>::namespaced(client.clone(), &ns);
    futures::stream::iter(0..pods)
        .for_each_concurrent(32, |k| {
            let api = api.clone();
            let labels: serde_json::Map<String, Value> = (0..(k % (constraints + 1)))
                .map(|i| (format!("l{i}"), json!("x")))
                .collect();
            async move {
                let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": format!("p{k}"), "labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "registry.invalid/x"}]}}))
                .expect("pod");
                api.create(&PostParams::default(), &pod).await.expect("pod");
            }
        })
        .await;
    eprintln!("{pods} Pods created in {:?}", started.elapsed());
    // Every violation expected: pod k misses C - (k mod (C+1)) labels, one per constraint.
    let expected: usize = (0..pods)
        .map(|k| constraints - (k % (constraints + 1)))
        .sum();

    // Wait until the bindings answer (the last one created is known to the plugin).
    let probe = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p0", "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/x"}]}});
    let resolved = kubectl_vap::admission::dryrun::Resolved {
        resource: kube::core::ApiResource::erase::<Pod>(&()),
        namespaced: true,
    };
    // (Measured anyway after a minute.)
    let _ = support::poll::within(Duration::from_secs(60), support::poll::EVERY, || async {
        let r = kubectl_vap::admission::dryrun::create(&client, &resolved, Some(&ns), &probe)
            .await
            .expect("probe");
        if r.warnings.len() >= constraints {
            Ok(())
        } else {
            Err(())
        }
    })
    .await;

    let kubeconfig = env.kubeconfig_admin();
    let (mut ours, mut plain) = (Vec::new(), Vec::new());
    let mut per_object = (0.0, 0.0);
    for round in 0..rounds {
        // Ours: the real binary, unlimited rate, the same concurrency.
        let before = requests_by_verb(&env.apiserver_metrics().await.expect("metrics"));
        let t0 = Instant::now();
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-vap"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["audit", &KIND.to_lowercase(), "-o", "json", "--qps", "0"])
            .args(["--concurrency", &concurrency.to_string()])
            .output()
            .await
            .expect("audit");
        let took = t0.elapsed();
        let after = requests_by_verb(&env.apiserver_metrics().await.expect("metrics"));
        let report: Value = serde_json::from_slice(&out.stdout).expect("audit JSON");
        let found: usize = report["constraints"]
            .as_array()
            .expect("constraints")
            .iter()
            .map(|c| c["violations"].as_array().map_or(0, Vec::len))
            .sum();
        assert_eq!(found, expected, "the audit finds every violation");
        let d = growth(&after, &before);
        let total: f64 = d.values().sum();
        per_object.0 = total / pods as f64;
        eprintln!("round {round}: audit {took:?}, requests {d:?}");
        ours.push(took);

        // Lower bound: list (paged, 500) and dry-run update each Pod, reading only the count
        // of warnings.
        let before = requests_by_verb(&env.apiserver_metrics().await.expect("metrics"));
        let t0 = Instant::now();
        let mut items = Vec::new();
        let mut lp = ListParams::default().limit(500);
        loop {
            let page = api.list(&lp).await.expect("list");
            items.extend(page.items);
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => lp = lp.continue_token(&c),
                None => break,
            }
        }
        let warnings: usize = futures::stream::iter(items)
            .map(|mut p| {
                let client = client.clone();
                let resolved = resolved.clone();
                let ns = ns.clone();
                async move {
                    p.metadata.managed_fields = None;
                    let name = p.metadata.name.clone().unwrap_or_default();
                    let body = serde_json::to_value(&p).expect("json");
                    kubectl_vap::admission::dryrun::update(
                        &client,
                        &resolved,
                        Some(&ns),
                        &name,
                        &body,
                    )
                    .await
                    .map(|r| r.warnings.len())
                    .unwrap_or(0)
                }
            })
            .buffer_unordered(concurrency)
            .fold(0, |a, n| async move { a + n })
            .await;
        let took = t0.elapsed();
        let after = requests_by_verb(&env.apiserver_metrics().await.expect("metrics"));
        let d = growth(&after, &before);
        per_object.1 = d.values().sum::<f64>() / pods as f64;
        assert_eq!(
            warnings, expected,
            "the lower bound sees the same violations"
        );
        eprintln!("round {round}: plain {took:?}, requests {d:?}");
        plain.push(took);
    }
    let (o, p) = (quantile(&ours, 0.5), quantile(&plain, 0.5));
    println!(
        "pods={pods} constraints={constraints} concurrency={concurrency} rounds={rounds} violations={expected}"
    );
    println!(
        "audit (binary, incl. start, snapshot, discovery): {o:?}  lower bound (plain client): {p:?}  ratio {:.2}",
        o.as_secs_f64() / p.as_secs_f64()
    );
    println!(
        "API requests per object: audit {:.3}, lower bound {:.3} (metrics scrapes included in both)",
        per_object.0, per_object.1
    );
}
