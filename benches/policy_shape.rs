//! What our generated policies cost every write (issue 19): median and p90 latency of creates
//! and updates that no constraint selects (Leases in a namespace of their own) and of ones
//! that constraints select (ConfigMaps), with no policies (the lower bound), with Gatekeeper's
//! shape and with the narrowed shape, on a real kube-apiserver + etcd (a private `testenv`).
//!
//! Per size (templates × constraints, each constraint `match.kinds: [ConfigMap]`, `warn`,
//! requiring a label every measured ConfigMap carries, so each is evaluated and admitted): the
//! objects are created, the bound measured, then the real binary converges the cluster with
//! `run --once --policy-shape gatekeeper`, then with `--policy-shape narrowed` (the takeover:
//! one update per binding), each measured once the admission plugin shows it has every
//! binding. Requests are sent one at a time.
//!
//! Run: `KUBEBUILDER_ASSETS=$(bash tests/kubeenv/build.sh) cargo bench --bench policy_shape`
//! (`BENCH_SIZES`, default `50x25,200x25`; `BENCH_SAMPLES`, requests per operation and
//! configuration, default 100). Under `cargo test --all-targets` (no `--bench` argument) it
//! returns at once.

#[path = "../tests/support/mod.rs"]
mod support;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use support::bench::{block_on, env_list, env_num, quantile};
use support::{cli, cluster};
use testenv::{TestEnv, gatekeeper};

const LEASE_NS: &str = "vap-system";
/// Where the Leases go: no constraint selects them.
const UNSELECTED_NS: &str = "bench-unselected";
/// Where the ConfigMaps go: every constraint selects them.
const SELECTED_NS: &str = "bench-selected";
const SETTLE: Duration = Duration::from_secs(600);

fn main() {
    if !support::bench::benchmarking() {
        return;
    }
    block_on(run());
}

/// One configuration's latencies, by operation.
#[derive(Default)]
struct Series {
    lease_create: Vec<Duration>,
    lease_update: Vec<Duration>,
    cm_create: Vec<Duration>,
    cm_update: Vec<Duration>,
}

async fn run() {
    let sizes: Vec<(usize, usize)> = env_list("BENCH_SIZES", "50x25,200x25")
        .iter()
        .map(|s| {
            let (t, c) = s.split_once('x').expect("a size is TEMPLATESxCONSTRAINTS");
            (
                t.parse().expect("templates"),
                c.parse().expect("constraints"),
            )
        })
        .collect();
    let samples = env_num("BENCH_SAMPLES", 100);
    let mut rows: Vec<Row> = Vec::new();
    for (templates, constraints) in sizes {
        let env = tokio::task::spawn_blocking(TestEnv::start)
            .await
            .expect("env");
        let client = env.client_admin().await;
        let started = Instant::now();
        build(&client, templates, constraints).await;
        eprintln!(
            "{templates}x{constraints}: templates, CRDs and constraints created in {:?}",
            started.elapsed()
        );

        let none = measure(&client, samples, "none", templates, constraints).await;
        rows.push((templates, constraints, "none", none));

        for shape in ["gatekeeper", "narrowed"] {
            let t0 = Instant::now();
            converge(&env, shape).await;
            eprintln!(
                "{templates}x{constraints}: run --once --policy-shape {shape}: {:?}",
                t0.elapsed()
            );
            let t0 = Instant::now();
            wait_bound(&client, templates, constraints, shape).await;
            eprintln!(
                "{templates}x{constraints}: the admission plugin has every binding ({shape}) after {:?}",
                t0.elapsed()
            );
            let s = measure(&client, samples, shape, templates, constraints).await;
            rows.push((templates, constraints, shape, s));
        }
        // Each size's table as soon as it is done: a long run stopped early keeps it.
        print_rows(samples, &rows[rows.len() - 3..]);
    }
    println!("all sizes:");
    print_rows(samples, &rows);
}

type Row = (usize, usize, &'static str, Series);

fn print_rows(samples: usize, rows: &[Row]) {
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1000.0);
    let cell = |v: &[Duration]| format!("{} / {}", ms(quantile(v, 0.5)), ms(quantile(v, 0.9)));
    println!("samples={samples} per operation and configuration; latency ms, median / p90");
    println!(
        "| templates × constraints | policies | Lease create (unselected) | Lease update (unselected) | ConfigMap create (selected) | ConfigMap update (selected) |"
    );
    println!("|---|---|---|---|---|---|");
    for (t, c, shape, s) in rows {
        println!(
            "| {t}×{c} | {shape} | {} | {} | {} | {} |",
            cell(&s.lease_create),
            cell(&s.lease_update),
            cell(&s.cm_create),
            cell(&s.cm_update)
        );
    }
    // The goals: unselected within 1.5× of the bound; selected no slower than Gatekeeper's.
    for chunk in rows.chunks(3) {
        let [(t, c, _, none), (_, _, _, gk), (_, _, _, narrow)] = chunk else {
            continue;
        };
        let ratio = |a: &[Duration], b: &[Duration]| {
            quantile(a, 0.5).as_secs_f64() / quantile(b, 0.5).as_secs_f64()
        };
        println!(
            "{t}×{c}: unselected narrowed/none: create {:.2}×, update {:.2}× (gatekeeper/none: {:.1}×, {:.1}×); selected narrowed/gatekeeper: create {:.2}×, update {:.2}×",
            ratio(&narrow.lease_create, &none.lease_create),
            ratio(&narrow.lease_update, &none.lease_update),
            ratio(&gk.lease_create, &none.lease_create),
            ratio(&gk.lease_update, &none.lease_update),
            ratio(&narrow.cm_create, &gk.cm_create),
            ratio(&narrow.cm_update, &gk.cm_update),
        );
    }
}

fn kind(i: usize) -> String {
    format!("BenchShape{i}")
}

/// The templates (each with its exact constraint CRD), `constraints` constraints of each
/// (constraint `j` of template `i` warns when label `t<i>` or `k<j>` is missing on a
/// ConfigMap), the namespaces.
async fn build(client: &kube::Client, templates: usize, constraints: usize) {
    gatekeeper::install_gatekeeper_crds(client)
        .await
        .expect("template CRD");
    for ns in [LEASE_NS, UNSELECTED_NS, SELECTED_NS] {
        testenv::ensure_namespace(client, ns).await.expect("ns");
    }
    futures::stream::iter(0..templates)
        .for_each_concurrent(8, |i| async move {
            let t = support::objects::labels_template(&kind(i), Some(true), Some("missing: "));
            cluster::create_template_and_crd(client, &t).await;
        })
        .await;
    let all: Vec<(usize, usize)> = (0..templates)
        .flat_map(|i| (0..constraints).map(move |j| (i, j)))
        .collect();
    futures::stream::iter(all)
        .for_each_concurrent(16, |(i, j)| async move {
            let c = gatekeeper::constraint(
                &kind(i),
                &format!("c{j}"),
                json!({ "enforcementAction": "warn",
                        "match": { "kinds": [{ "apiGroups": [""], "kinds": ["ConfigMap"] }] },
                        "parameters": { "labels": [format!("t{i}"), format!("k{j}")] } }),
            );
            cluster::create_constraint(client, &c).await;
        })
        .await;
}

/// `kubectl-vap run --once --policy-shape <shape>` (the real binary).
async fn converge(env: &TestEnv, shape: &str) {
    let out = tokio::process::Command::new(cli::BIN)
        .arg("--kubeconfig")
        .arg(env.kubeconfig_admin())
        .args([
            "run",
            "--once",
            "--binding-wait=0s",
            "--lease-namespace",
            LEASE_NS,
        ])
        .arg(format!("--policy-shape={shape}"))
        .output()
        .await
        .expect("run --once");
    assert!(
        out.status.success(),
        "run --once --policy-shape {shape}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every label a constraint requires (`t<i>`, `k<j>`), but `t<missing>`.
fn labels_but(templates: usize, constraints: usize, missing: Option<usize>) -> Value {
    let t = (0..templates)
        .filter(|i| Some(*i) != missing)
        .map(|i| format!("t{i}"));
    t.chain((0..constraints).map(|j| format!("k{j}")))
        .map(|l| (l, json!("x")))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Waits until every binding is in force with its parameters: for each template `i`, a
/// ConfigMap missing only `t<i>` draws one warning from each of its constraints (the API server
/// keeps 4 KiB of warnings per reply: one template's fit, all of them would not). The narrowed
/// shape also exempts the Lease namespace: a ConfigMap there draws none.
async fn wait_bound(client: &kube::Client, templates: usize, constraints: usize, shape: &str) {
    let resolved = kubectl_vap::admission::dryrun::Resolved {
        resource: kube::core::ApiResource::erase::<ConfigMap>(&()),
        namespaced: true,
    };
    let probe = |ns: &str, missing: usize| {
        json!({ "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "probe", "namespace": ns,
                              "labels": labels_but(templates, constraints, Some(missing)) } })
    };
    let warnings = |ns: &'static str, i: usize| {
        let body = probe(ns, i);
        let resolved = resolved.clone();
        async move {
            kubectl_vap::admission::dryrun::create(client, &resolved, Some(ns), &body)
                .await
                .map(|r| r.warnings.len())
                .map_err(|e| e.to_string())
        }
    };
    let mut confirmed = 0;
    let mut last = String::new();
    let deadline = Instant::now() + SETTLE;
    while Instant::now() < deadline {
        // Templates confirmed stay confirmed: nothing changes while we wait.
        while confirmed < templates {
            match warnings(SELECTED_NS, confirmed).await {
                Ok(n) if n == constraints => confirmed += 1,
                Ok(n) => {
                    last = format!("template {confirmed}: {n} warnings of {constraints}");
                    break;
                }
                Err(e) => {
                    last = e;
                    break;
                }
            }
        }
        let exempt = if shape == "narrowed" && confirmed == templates {
            match warnings(LEASE_NS, 0).await {
                Ok(0) => true,
                Ok(n) => {
                    last = format!("{n} warnings in the exempt Lease namespace");
                    false
                }
                Err(e) => {
                    last = e;
                    false
                }
            }
        } else {
            true
        };
        if confirmed == templates && exempt {
            return;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    panic!("{shape}: the bindings are not all in force after {SETTLE:?}: {last}");
}

/// `samples` of each operation, one request at a time, interleaved; after a warm-up.
async fn measure(
    client: &kube::Client,
    samples: usize,
    tag: &str,
    templates: usize,
    constraints: usize,
) -> Series {
    let leases: Api<Lease> = Api::namespaced(client.clone(), UNSELECTED_NS);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), SELECTED_NS);
    let pp = PostParams::default();
    let labels = labels_but(templates, constraints, None);
    let mut s = Series::default();
    let warmup = 10;
    for k in 0..warmup + samples {
        let name = format!("{tag}-{k}");
        let lease: Lease = serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "holderIdentity": "bench", "leaseDurationSeconds": 15 } }))
        .expect("lease");
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": labels }, "data": { "n": "0" } }))
        .expect("configmap");

        let t = Instant::now();
        let mut lease = leases.create(&pp, &lease).await.expect("lease create");
        let lease_create = t.elapsed();
        let t = Instant::now();
        let mut cm = cms.create(&pp, &cm).await.expect("configmap create");
        let cm_create = t.elapsed();

        if let Some(spec) = lease.spec.as_mut() {
            spec.lease_duration_seconds = Some(30);
        }
        let t = Instant::now();
        leases
            .replace(&name, &pp, &lease)
            .await
            .expect("lease update");
        let lease_update = t.elapsed();
        cm.data
            .get_or_insert_default()
            .insert("n".into(), "1".into());
        let t = Instant::now();
        cms.replace(&name, &pp, &cm)
            .await
            .expect("configmap update");
        let cm_update = t.elapsed();

        if k >= warmup {
            s.lease_create.push(lease_create);
            s.lease_update.push(lease_update);
            s.cm_create.push(cm_create);
            s.cm_update.push(cm_update);
        }
    }
    let q = |v: &[Duration]| format!("{:?} / {:?}", quantile(v, 0.5), quantile(v, 0.9));
    eprintln!(
        "{tag}: median / p90: Lease create {}, update {}; ConfigMap create {}, update {}",
        q(&s.lease_create),
        q(&s.lease_update),
        q(&s.cm_create),
        q(&s.cm_update)
    );
    s
}
