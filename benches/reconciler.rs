//! Reconciler benchmark on a real kube-apiserver + etcd (a private `testenv`):
//! T templates × C constraints (default 200 × 25 = 5,000 bindings).
//!
//! 1. Lower bound, same run, same server: the exact objects the reconciler would write (the
//!    plan of the pure analysis), created by a plain concurrent client (VAPs, then bindings),
//!    then deleted again.
//! 2. Cold convergence of the real binary (`kubectl-vap run --binding-wait=0s`): from spawn to
//!    the analysis of the live cluster planning nothing.
//! 3. API requests by verb during convergence and during 60 s of steady state, from the API
//!    server's own `apiserver_request_total`; the reconciler's own write counter.
//! 4. Peak RSS (VmHWM) of the reconciler process.
//!
//! Run: `KUBEBUILDER_ASSETS=$(bash tests/kubeenv/build.sh) cargo bench --bench reconciler`
//! (`BENCH_TEMPLATES`, `BENCH_CONSTRAINTS`, `BENCH_STEADY_SECS` override the sizes). Under
//! `cargo test --all-targets` (no `--bench` argument) it returns at once.

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kubectl_vap::core::{Options, Verb, analyze};
use kubectl_vap::kube::{AdmissionApi, list_snapshot};
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

fn template(kind: &str) -> Value {
    json!({
        "apiVersion": "templates.gatekeeper.sh/v1",
        "kind": "ConstraintTemplate",
        "metadata": { "name": kind.to_lowercase() },
        "spec": {
            "crd": { "spec": { "names": { "kind": kind }, "validation": { "openAPIV3Schema": {
                "type": "object", "properties": { "labels": { "type": "array", "items": { "type": "string" } } } } } } },
            "targets": [{ "target": "admission.k8s.gatekeeper.sh", "code": [{ "engine": "K8sNativeValidation", "source": {
                "generateVAP": true,
                "failurePolicy": "Ignore",
                "validations": [{ "expression": "variables.params.labels.all(l, has(variables.anyObject.metadata.labels) && l in variables.anyObject.metadata.labels)" }]
            } }] }]
        }
    })
}

/// `apiserver_request_total` summed by verb (and by verb+resource for admissionregistration).
fn requests(metrics: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |k: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let v: f64 = value.trim().parse().unwrap_or(0.0);
        *out.entry(label("verb")).or_default() += v;
        if label("group") == "admissionregistration.k8s.io" {
            *out.entry(format!("{} {}", label("verb"), label("resource")))
                .or_default() += v;
        }
    }
    out
}

fn diff(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
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
    if !std::env::args().any(|a| a == "--bench") {
        // `cargo test --all-targets` builds and runs benches without `--bench`: nothing to do.
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
    let templates = env_num("BENCH_TEMPLATES", 200);
    let per = env_num("BENCH_CONSTRAINTS", 25);
    let steady = env_num("BENCH_STEADY_SECS", 60);
    println!(
        "kubectl-vap reconciler benchmark: {templates} templates × {per} constraints = {} bindings",
        templates * per
    );
    let env: &'static TestEnv = Box::leak(Box::new(TestEnv::start()));
    let client = env.client_admin().await;
    gatekeeper::install_gatekeeper_crds(&client)
        .await
        .expect("template CRD");
    let opts = Options {
        binding_wait: Duration::from_secs(0),
        ..Options::default()
    };

    // Setup (not measured): templates, their CRDs, constraints.
    let t0 = Instant::now();
    let kinds: Vec<String> = (0..templates).map(|i| format!("K8sBench{i:04}")).collect();
    let tapi: Api<DynamicObject> =
        Api::all_with(client.clone(), &gatekeeper::template_api_resource());
    futures::stream::iter(kinds.iter().cloned())
        .map(|kind| {
            let (client, tapi) = (client.clone(), tapi.clone());
            async move {
                let t = template(&kind);
                let obj: DynamicObject = serde_json::from_value(t.clone()).expect("template");
                tapi.create(&PostParams::default(), &obj)
                    .await
                    .expect("create template");
                gatekeeper::create_constraint_crd(&client, &t)
                    .await
                    .expect("constraint CRD");
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    let items: Vec<(String, usize)> = kinds
        .iter()
        .flat_map(|k| (0..per).map(move |c| (k.clone(), c)))
        .collect();
    futures::stream::iter(items)
        .map(|(kind, c)| {
            let client = client.clone();
            async move {
                let api: Api<DynamicObject> =
                    Api::all_with(client, &gatekeeper::constraint_api_resource(&kind));
                let obj: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": kind,
                    "metadata": { "name": format!("c{c:03}") },
                    "spec": { "enforcementAction": if c % 3 == 0 { "warn" } else { "deny" },
                              "match": { "labelSelector": { "matchLabels": { "bench": "inert" } } },
                              "parameters": { "labels": ["owner"] } }
                }))
                .expect("constraint");
                api.create(&PostParams::default(), &obj)
                    .await
                    .expect("create constraint");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    println!("setup (templates, CRDs, constraints): {:?}", t0.elapsed());

    // 1. Lower bound: the plan's objects, written by a plain concurrent client.
    let (snap, _) = list_snapshot(&client, &AdmissionApi::v1())
        .await
        .expect("list");
    let plan = analyze(&snap, &opts).plan;
    assert!(plan.iter().all(|w| w.verb == Verb::Create));
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
    let lower = t.elapsed();
    let lower_reqs = diff(
        &requests(&env.apiserver_metrics().await.expect("metrics")),
        &before,
    );
    println!(
        "lower bound: {} creates by a plain client (16 in flight): {lower:?}",
        plan.len()
    );
    // Back to cold.
    for (w, ar) in plan.iter().map(|w| {
        (
            w,
            if w.object.kind == "ValidatingAdmissionPolicy" {
                admission.policy()
            } else {
                admission.binding()
            },
        )
    }) {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let _ = api.delete(&w.object.name, &DeleteParams::default()).await;
    }
    let (left, p, b) = plan_len(&client, &opts).await;
    assert_eq!((p, b), (0, 0), "cold again");
    println!("cold state restored ({left} writes planned)");

    // 2. Cold convergence of the real binary.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port");
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({ "metadata": { "name": "gatekeeper-system" } })).expect("ns");
    let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await;
    let before = requests(&env.apiserver_metrics().await.expect("metrics"));
    let t = Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-vap"))
        .args(["run", "--binding-wait=0s", "--log=warn"])
        .arg(format!("--metrics-addr=127.0.0.1:{port}"))
        .arg("--kubeconfig")
        .arg(env.kubeconfig_admin())
        .spawn()
        .expect("spawn kubectl-vap run");
    let pid = child.id();
    let expected = plan.len() as f64;
    let mut converged = None;
    // Startup (lists, watches, lease) vs the write phase: where the time goes.
    let mut first_write = None;
    while t.elapsed() < Duration::from_secs(900) {
        let m = http_get(port, "/metrics");
        if first_write.is_none() && metric(&m, "kubectl_vap_writes_total") > 0.0 {
            first_write = Some(t.elapsed());
        }
        if metric(&m, "kubectl_vap_writes_total") >= expected
            && metric(&m, "kubectl_vap_queue_depth") == 0.0
        {
            converged = Some(t.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let converged = converged.expect("converged within 15 minutes");
    let conv_reqs = diff(
        &requests(&env.apiserver_metrics().await.expect("metrics")),
        &before,
    );
    let (left, p, b) = plan_len(&client, &opts).await;
    println!(
        "cold convergence: {converged:?} ({p} VAPs, {b} bindings; analysis plans {left} writes)"
    );
    if let Some(fw) = first_write {
        println!(
            "  of which startup (spawn → first write: lists, watches, lease): {fw:?}; writes: {:?}",
            converged.saturating_sub(fw)
        );
    }
    let writes_conv = metric(&http_get(port, "/metrics"), "kubectl_vap_writes_total");

    // 3. Steady state.
    let before = requests(&env.apiserver_metrics().await.expect("metrics"));
    tokio::time::sleep(Duration::from_secs(steady as u64)).await;
    let m = http_get(port, "/metrics");
    let writes_steady = metric(&m, "kubectl_vap_writes_total") - writes_conv;
    let steady_reqs = diff(
        &requests(&env.apiserver_metrics().await.expect("metrics")),
        &before,
    );
    let rss = peak_rss_kib(pid);
    // SIGTERM: release the lease.
    let _ = std::process::Command::new("kill")
        .arg(pid.to_string())
        .status();
    let _ = child.wait();

    println!("\n## Results\n");
    println!("| measurement | value |");
    println!("|---|---|");
    println!(
        "| objects | {} VAPs + {} bindings |",
        policies.len(),
        bindings.len()
    );
    println!("| lower bound (plain client, 16 in flight, creates only) | {lower:.2?} |");
    println!("| kubectl-vap cold convergence (spawn → converged) | {converged:.2?} |");
    println!(
        "| ratio | {:.2}× |",
        converged.as_secs_f64() / lower.as_secs_f64()
    );
    println!("| writes by kubectl-vap during convergence | {writes_conv:.0} |");
    println!("| writes by kubectl-vap during {steady} s steady state | {writes_steady:.0} |");
    println!(
        "| peak RSS of kubectl-vap (VmHWM) | {} MiB |",
        rss.map(|k| k / 1024).unwrap_or_default()
    );
    print_requests("API requests, lower bound (by verb):", &lower_reqs);
    print_requests(
        "API requests during kubectl-vap's convergence (by verb):",
        &conv_reqs,
    );
    print_requests(
        &format!("API requests during {steady} s of steady state (by verb):"),
        &steady_reqs,
    );
}
