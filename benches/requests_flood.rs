//! Requests-channel flood benchmark (issue 31): what N requests written into the requests
//! ConfigMap in one merge patch cost the API server, with a `kubectl-vap run` leading.
//!
//! Per binary and N, on a fresh private kube-apiserver + etcd: a template with
//! `BENCH_CONSTRAINTS` constraints, the binary `run` leading and converged; then N
//! reconcile-all requests in one merge patch (as the admin), and `BENCH_FLOOD_SECS` watched.
//! Reported: the API server's own counts (`apiserver_request_total` by verb and resource,
//! `etcd_requests_total` updates and all; the bench's own probes are in them: a GET of the
//! Lease every 100 ms and of the ConfigMap every second), the requests answered within the
//! window (an answer in the ConfigMap, `result.<id>`, or in the Lease's
//! `kubectl-vap.io/answers`, the most seen at once: answers stay there 2 minutes), the
//! largest gap between two Lease renewals seen (polled every 100 ms: a bound to ±0.1 s), the
//! slowest of one plain GET per second, and the leader's WARN lines.
//!
//! Run: `KUBEBUILDER_ASSETS=$(bash tests/kubeenv/build.sh) cargo bench --bench
//! requests_flood` (`BENCH_REQUESTS` `100,500`, `BENCH_CONSTRAINTS` 5, `BENCH_FLOOD_SECS` 240,
//! `BENCH_BINARIES`: paths of `kubectl-vap` binaries to compare, default the one cargo built;
//! an older one measures "before"). Under `cargo test --all-targets` it returns at once.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

#[path = "../tests/support/mod.rs"]
mod support;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::bench::{block_on, env_list, env_num};
use support::cli::{self, Served};
use support::metrics::{growth, label, requests_by, sum};
use testenv::TestEnv;

const NS: &str = "flood";

fn main() {
    if !support::bench::benchmarking() {
        return;
    }
    block_on(run());
}

/// `apiserver_request_total` by verb and resource, and the total; etcd's updates and all.
fn counts(text: &str) -> BTreeMap<String, f64> {
    let mut out = requests_by(text, |l| {
        vec![
            format!("api {} {}", label(l, "verb"), label(l, "resource")),
            "api (all)".into(),
        ]
    });
    out.insert(
        "etcd update configmaps".into(),
        sum(
            text,
            "etcd_requests_total{group=\"\",operation=\"update\",resource=\"configmaps\"}",
        ),
    );
    out.insert("etcd (all)".into(), sum(text, "etcd_requests_total{"));
    out
}

/// The flood's request ids the Lease's answers carry.
fn answered_in_lease(l: &Lease) -> usize {
    l.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubectl-vap.io/answers"))
        .and_then(|a| serde_json::from_str::<Vec<Value>>(a).ok())
        .map(|list| {
            list.iter()
                .flat_map(|p| p["ids"].as_array().cloned().unwrap_or_default())
                .filter(|id| id.as_str().is_some_and(|i| i.starts_with('b')))
                .count()
        })
        .unwrap_or_default()
}

async fn run() {
    let binaries = env_list("BENCH_BINARIES", cli::BIN);
    let sizes: Vec<usize> = env_list("BENCH_REQUESTS", "100,500")
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect();
    for bin in &binaries {
        for &n in &sizes {
            one(bin, n).await;
        }
    }
}

async fn one(bin: &str, n: usize) {
    let constraints = env_num("BENCH_CONSTRAINTS", 5);
    let window = Duration::from_secs(env_num("BENCH_FLOOD_SECS", 240) as u64);
    let env = TestEnv::start();
    let client = env.client_admin().await;
    testenv::gatekeeper::install_gatekeeper_crds(&client)
        .await
        .expect("the template CRD");
    testenv::ensure_namespace(&client, NS).await.expect("ns");
    let kind = "K8sFlood";
    let t = support::objects::required_labels_template(kind, "missing: ");
    support::cluster::put(&support::cluster::templates(&client), &t).await;
    let log = env.dir().join("leader.log");
    let mut cmd = std::process::Command::new(bin);
    cmd.args(["run", "--binding-wait=0s", "--lease-namespace", NS])
        .args(["--lease-name", "flood", "--kubeconfig"])
        .arg(env.kubeconfig_admin())
        .stderr(std::fs::File::create(&log).expect("log"));
    let leader = Served::spawn(cmd);
    support::poll::eventually("the leader leads", Duration::from_secs(60), || async {
        leader.metrics().contains("kubectl_vap_leader 1")
    })
    .await;
    // Constraints once the CRD is there (the leader created it).
    let api = support::cluster::constraints(&client, kind);
    support::poll::eventually("the constraint CRD", Duration::from_secs(60), || async {
        api.list(&Default::default()).await.is_ok()
    })
    .await;
    for i in 0..constraints {
        let c = testenv::gatekeeper::constraint(
            kind,
            &format!("c{i}"),
            json!({ "parameters": { "labels": ["x"] },
                    "match": { "labelSelector": { "matchLabels": { "flood": "inert" } } } }),
        );
        support::cluster::put(&api, &c).await;
    }
    let bindings = support::cluster::bindings(&client);
    support::poll::eventually("converged", Duration::from_secs(120), || async {
        bindings
            .list(&Default::default())
            .await
            .is_ok_and(|l| l.items.len() >= constraints)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = counts(&env.apiserver_metrics().await.expect("/metrics"));

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let data: serde_json::Map<String, Value> = (0..n)
        .map(|i| {
            let asked = json!({ "command": "reconcile-all", "by": "bench", "requestedAt": at });
            (format!("request.b{i:04}"), Value::from(asked.to_string()))
        })
        .collect();
    let started = Instant::now();
    cms.patch(
        "flood-requests",
        &PatchParams::default(),
        &Patch::Merge(&json!({ "data": data })),
    )
    .await
    .expect("the flood");

    // Watch the window: Lease renewals (largest gap), a plain GET per second (slowest).
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let (mut last_rv, mut last_change) = (String::new(), Instant::now());
    let (mut max_gap, mut slowest_get) = (Duration::ZERO, Duration::ZERO);
    let mut next_get = Instant::now();
    // Answers in the Lease stay 2 minutes: the most seen at once during the window.
    let mut published = 0;
    while started.elapsed() < window {
        if let Ok(Some(l)) = leases.get_opt("flood").await {
            published = published.max(answered_in_lease(&l));
            let rv = l.metadata.resource_version.unwrap_or_default();
            if rv != last_rv {
                if !last_rv.is_empty() {
                    max_gap = max_gap.max(last_change.elapsed());
                }
                last_rv = rv;
                last_change = Instant::now();
            }
        }
        if Instant::now() >= next_get {
            let t = Instant::now();
            let _ = cms.get_opt("flood-requests").await;
            slowest_get = slowest_get.max(t.elapsed());
            next_get += Duration::from_secs(1);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = counts(&env.apiserver_metrics().await.expect("/metrics"));
    // Answered: in the ConfigMap (`result.<id>`, before issue 31) or in the Lease.
    let in_cm = cms
        .get_opt("flood-requests")
        .await
        .ok()
        .flatten()
        .and_then(|c| c.data)
        .map(|d| d.keys().filter(|k| k.starts_with("result.b")).count())
        .unwrap_or_default();
    let in_lease = published;
    let logs = std::fs::read_to_string(&log).unwrap_or_default();
    let warns = logs.lines().filter(|l| l.contains(" WARN ")).count();
    println!(
        "\n{bin}: {n} reconcile-all requests in one patch, {}s watched",
        window.as_secs()
    );
    for (k, v) in growth(&after, &before) {
        println!("  {k:<45} {v:>8.0}");
    }
    println!(
        "  answered in the ConfigMap / in the Lease    {in_cm} / {in_lease} (the most at once)"
    );
    println!(
        "  largest gap between Lease renewals          {:.1}s",
        max_gap.as_secs_f64()
    );
    println!(
        "  slowest GET of the ConfigMap (1/s)          {:.3}s",
        slowest_get.as_secs_f64()
    );
    println!("  leader WARN lines                           {warns}");
    for l in logs.lines().filter(|l| l.contains(" WARN ")).take(5) {
        println!("    {}", kubectl_vap::text::printable(l));
    }
    let _ = leader.terminate();
}
