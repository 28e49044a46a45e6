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

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kubectl_vap::core::decide::{
    ConstraintIntent, TemplateVerdict, decide_constraint, decide_template,
};
use kubectl_vap::core::{Options, generate};
use kubectl_vap::model::{Constraint, ConstraintTemplate, Source};
#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use testenv::{TestEnv, gatekeeper};

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const KIND: &str = "BenchPodLabels";

fn diff(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
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
    let created =
        Api::<DynamicObject>::all_with(client.clone(), &gatekeeper::template_api_resource())
            .create(
                &PostParams::default(),
                &serde_json::from_value(support::required_labels_template(KIND, "missing: "))
                    .expect("template"),
            )
            .await
            .expect("template");
    let mut raw = serde_json::to_value(&created).expect("json");
    raw["apiVersion"] = json!("templates.gatekeeper.sh/v1");
    raw["kind"] = json!("ConstraintTemplate");
    let t = ConstraintTemplate::from_value(raw, Source::default());
    let crd = kubectl_vap::core::crd::desired_crd(&t, KIND).expect("crd");
    gatekeeper::apply_crd(&client, &crd).await.expect("crd");
    let TemplateVerdict::Generate {
        source,
        failure_policy,
        ..
    } = decide_template(&t, &Options::default())
    else {
        panic!("generates")
    };
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(
            &PostParams::default(),
            &generate::policy(&t, KIND, &source, failure_policy),
        )
        .await
        .expect("policy");
    let ns = env.create_namespace("bench").await;
    for i in 0..constraints {
        let raw = json!({"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": KIND,
            "metadata": {"name": format!("c{i}")},
            "spec": {"enforcementAction": "warn",
                     "match": {"kinds": [{"apiGroups": [""], "kinds": ["Pod"]}], "namespaces": [ns]},
                     "parameters": {"labels": [format!("l{i}")]}}});
        let c = Api::<DynamicObject>::all_with(
            client.clone(),
            &gatekeeper::constraint_api_resource(KIND),
        )
        .create(
            &PostParams::default(),
            &serde_json::from_value(raw).expect("constraint"),
        )
        .await
        .expect("constraint");
        let c = Constraint::from_value(serde_json::to_value(c).expect("json"), Source::default());
        let ConstraintIntent::Bind { actions, .. } = decide_constraint(&c, &Options::default())
        else {
            panic!("binds")
        };
        Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
            .create(
                &PostParams::default(),
                &generate::binding(&c, &actions).expect("binding"),
            )
            .await
            .expect("binding");
    }

    // Pods: pod k carries the labels l0..l(k mod (C+1)) minus one, so violations vary.
    let started = Instant::now();
    let api = Api::<Pod>::namespaced(client.clone(), &ns);
    futures::stream::iter(0..pods)
        .map(|k| {
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
        .buffer_unordered(32)
        .collect::<Vec<_>>()
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
    let wait = Instant::now();
    loop {
        let r = kubectl_vap::admission::dryrun::create(&client, &resolved, Some(&ns), &probe)
            .await
            .expect("probe");
        if r.warnings.len() >= constraints || wait.elapsed() > Duration::from_secs(60) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let kubeconfig = env.kubeconfig_admin();
    let (mut ours, mut plain) = (Vec::new(), Vec::new());
    let mut per_object = (0.0, 0.0);
    for round in 0..rounds {
        // Ours: the real binary, unlimited rate, the same concurrency.
        let before = support::requests_by_verb(&env.apiserver_metrics().await.expect("metrics"));
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
        let after = support::requests_by_verb(&env.apiserver_metrics().await.expect("metrics"));
        let report: Value = serde_json::from_slice(&out.stdout).expect("audit JSON");
        let found: usize = report["constraints"]
            .as_array()
            .expect("constraints")
            .iter()
            .map(|c| c["violations"].as_array().map_or(0, Vec::len))
            .sum();
        assert_eq!(found, expected, "the audit finds every violation");
        let d = diff(&after, &before);
        let total: f64 = d.values().sum();
        per_object.0 = total / pods as f64;
        eprintln!("round {round}: audit {took:?}, requests {d:?}");
        ours.push(took);

        // Lower bound: list (paged, 500) and dry-run update each Pod, reading only the count
        // of warnings.
        let before = support::requests_by_verb(&env.apiserver_metrics().await.expect("metrics"));
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
        let after = support::requests_by_verb(&env.apiserver_metrics().await.expect("metrics"));
        let d = diff(&after, &before);
        per_object.1 = d.values().sum::<f64>() / pods as f64;
        assert_eq!(
            warnings, expected,
            "the lower bound sees the same violations"
        );
        eprintln!("round {round}: plain {took:?}, requests {d:?}");
        plain.push(took);
    }
    let (o, p) = (median(ours), median(plain));
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
