//! What our generated policies cost every write, and what an API server restart does to the
//! requests they select (issues 19 and 29): median and p90 latency of creates and updates
//! that no constraint selects (Leases in a namespace of their own) and of ones that every
//! constraint selects (ConfigMaps), with no policies (the lower bound) and with each shape
//! (Gatekeeper's, narrowed, inline), on a real kube-apiserver + etcd (a private `testenv`).
//!
//! Per size (templates × constraints, each constraint `match.kinds: [ConfigMap]`, `warn`,
//! requiring a label every measured ConfigMap carries, so each is evaluated and admitted): the
//! objects are created, the bound measured, then the real binary converges the cluster with
//! `run --once --policy-shape S` for each shape in turn (each one a takeover of the previous:
//! its time is reported), each measured once every binding warns on a probe without the label
//! (counted in the API server's metrics; the time from the binary's exit to then is the API
//! server's compile time), with the API server's resident memory then. Then, unless
//! `BENCH_RESTARTS=0`, the restart probe: the API server stopped (SIGTERM) and started again,
//! then killed (SIGKILL) and started again, half the restarts each; from its first answer, a
//! compliant and a violating ConfigMap (dry runs) every ~100 ms for `BENCH_PROBE_SECS`: a
//! compliant one refused by a policy, or a violating one admitted without a warning, is the
//! window. After narrowed, unless `BENCH_VARIANT=0`, the narrowed VAPs' `namespaceSelector` is
//! removed by hand and unselected requests measured again (what the API server's namespace
//! check costs them), and narrowed converged again. Requests are sent one at a time.
//!
//! `folded` (issue 39; not in the default list) is the generator's shape that nothing writes
//! yet (`core::fold`): the reconciler cannot, so its converge step is the bench's own — every
//! VAP and binding the previous shape's `run --once` wrote deleted, then one folded VAP and one
//! binding per template, built by `fold::folded_policy` and `fold::folded_binding` from the
//! cluster's templates and constraints, written by the bench (not by `run`). Its measurement
//! is the others': once its `templates` bindings are in force, the same requests, heap and
//! profiles.
//!
//! With `BENCH_PPROF=<dir>` (off by default; nothing else changes): kube-apiserver's heap
//! profile (after a garbage collection) once the objects are created (`<size>-none-heap`) and
//! once each shape has every binding in force (`<size>-<shape>-heap`); and after each shape's
//! measurement, a selected phase of its own: ConfigMap creates and updates, one at a time, for
//! `BENCH_PPROF_SECS` (default 30) while a CPU profile of that length is taken
//! (`<size>-<shape>-cpu`), how many reported. Files `<dir>/<name>.pb.gz`, for `go tool pprof`.
//!
//! Run: `KUBEBUILDER_ASSETS=$(bash tests/kubeenv/build.sh) cargo bench --bench policy_shape`
//! (`BENCH_SIZES`, default `10x10,50x25,200x25`; `BENCH_SHAPES`, default
//! `gatekeeper,narrowed,inline`, or any of these and `folded`; `BENCH_SAMPLES`, unselected requests per operation and
//! configuration, default 100; `BENCH_SELECTED_SAMPLES`, selected ones, default 30;
//! `BENCH_RESTARTS`, default 10; `BENCH_PROBE_SECS`, default 10; `BENCH_PPROF`,
//! `BENCH_PPROF_SECS`). Under `cargo test --all-targets` (no `--bench` argument) it returns
//! at once.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

#[path = "../tests/support/mod.rs"]
mod support;

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kubectl_vap::core::decide::{Action, TemplateVerdict, decide_template};
use kubectl_vap::core::fold::{self, FoldInput};
use kubectl_vap::core::generate::{self, PolicyBody};
use kubectl_vap::core::options::Exemptions;
use kubectl_vap::core::scope::{self, Coverage};
use kubectl_vap::load::cel::default_options;
use kubectl_vap::model::served::Served;
use kubectl_vap::model::{Constraint, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::bench::{apiserver_heap, apiserver_profile, block_on, env_list, env_num, quantile};
use support::metrics::growth;
use support::{cli, cluster};
use testenv::{TestEnv, gatekeeper};

const LEASE_NS: &str = "vap-system";
/// Where the Leases go: no constraint selects them.
const UNSELECTED_NS: &str = "bench-unselected";
/// Where the ConfigMaps go: every constraint selects them.
const SELECTED_NS: &str = "bench-selected";
const SETTLE: Duration = Duration::from_secs(600);
/// The label every constraint requires: every measured ConfigMap carries it, the readiness
/// probes do not.
const LABEL: &str = "bench";

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
    let sizes: Vec<(usize, usize)> = env_list("BENCH_SIZES", "10x10,50x25,200x25")
        .iter()
        .map(|s| {
            let (t, c) = s.split_once('x').expect("a size is TEMPLATESxCONSTRAINTS");
            (
                t.parse().expect("templates"),
                c.parse().expect("constraints"),
            )
        })
        .collect();
    let shapes: Vec<&'static str> = env_list("BENCH_SHAPES", "gatekeeper,narrowed,inline")
        .iter()
        .map(|s| match s.as_str() {
            "gatekeeper" => "gatekeeper",
            "narrowed" => "narrowed",
            "inline" => "inline",
            "folded" => "folded",
            other => panic!("BENCH_SHAPES: unknown shape {other}"),
        })
        .collect();
    let n = Samples {
        unselected: env_num("BENCH_SAMPLES", 100),
        selected: env_num("BENCH_SELECTED_SAMPLES", 30),
    };
    let restarts = env_num("BENCH_RESTARTS", 10);
    let probe = Duration::from_secs(env_num("BENCH_PROBE_SECS", 10) as u64);
    let variant = env_num("BENCH_VARIANT", 1) == 1;
    let pprof_secs = env_num("BENCH_PPROF_SECS", 30) as u64;
    let mut rows: Vec<Row> = Vec::new();
    let mut facts: Vec<String> = Vec::new();
    for (templates, constraints) in sizes {
        let env = tokio::task::spawn_blocking(TestEnv::start)
            .await
            .expect("env");
        let client = env.client_admin().await;
        let bindings = templates * constraints;
        let size = format!("{templates}x{constraints}");
        let started = Instant::now();
        build(&client, templates, constraints).await;
        eprintln!(
            "{size}: templates, CRDs and constraints created in {:?}",
            started.elapsed()
        );
        let first = (rows.len(), facts.len());
        facts.push(format!("{size}: {}", rss(&env).await));
        heap(&client, &format!("{size}-none-heap")).await;

        let none = measure(&client, n, "none").await;
        rows.push((size.clone(), "none", none));

        for &shape in &shapes {
            let in_force = if shape == "folded" {
                templates
            } else {
                bindings
            };
            let (took, settled) =
                converge_and_settle(&env, &client, shape, templates, in_force).await;
            heap(&client, &format!("{size}-{shape}-heap")).await;
            let s = measure(&client, n, shape).await;
            let how = if shape == "folded" {
                "the generator's objects written by the bench (not by run), after deleting what was there,"
            } else {
                "run --once (a takeover of what was there)"
            };
            facts.push(format!(
                "{size} {shape}: {how} {took:.1} s, every binding in force {settled:.1} s later; {}",
                rss(&env).await
            ));
            rows.push((size.clone(), shape, s));
            if let Some(p) = apiserver_profile(&client, &format!("{size}-{shape}-cpu"), pprof_secs)
            {
                let line = selected_while(&client, shape, p).await;
                facts.push(format!("{size} {shape}: CPU profile: {line}"));
                eprintln!("{}", facts.last().expect("a line"));
            }
            if variant && shape == "narrowed" {
                let tag = "narrowed, no VAP namespaceSelector";
                drop_policy_namespace_selectors(&client, templates).await;
                // The Lease namespace no longer exempt: every binding warns there once in force.
                wait_bound(&env, &client, LEASE_NS, bindings, tag).await;
                let unselected = Samples { selected: 0, ..n };
                let s = measure(&client, unselected, "variant").await;
                rows.push((size.clone(), tag, s));
                converge_and_settle(&env, &client, shape, templates, bindings).await;
            }
            if restarts > 0 {
                let line = restart_probe(&env, &client, restarts, probe).await;
                facts.push(format!("{size} {shape}: restarts: {line}"));
                eprintln!("{}", facts.last().expect("a line"));
                wait_bound(&env, &client, SELECTED_NS, in_force, shape).await;
            }
        }
        // Each size's table as soon as it is done: a long run stopped early keeps it.
        print_rows(n, &rows[first.0..]);
        facts[first.1..].iter().for_each(|f| println!("{f}"));
    }
    println!("all sizes:");
    print_rows(n, &rows);
    facts.iter().for_each(|f| println!("{f}"));
}

/// The API server's resident memory now, its peak, and its Go heap in use (the live part of
/// it, from its own `/metrics`: RSS keeps what the garbage collector has not returned).
async fn rss(env: &TestEnv) -> String {
    let pid = env.apiserver_pid().expect("kube-apiserver runs");
    let mib = |k: Option<u64>| k.map_or("?".into(), |k| format!("{:.0} MiB", k as f64 / 1024.0));
    let heap = env
        .apiserver_metrics()
        .await
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("go_memstats_heap_inuse_bytes "))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .map_or("?".into(), |b| format!("{:.0} MiB", b / 1024.0 / 1024.0));
    format!(
        "kube-apiserver RSS {} (peak {}), Go heap in use {heap}",
        mib(testenv::rss_kib(pid)),
        mib(testenv::peak_rss_kib(pid))
    )
}

/// `run --once --policy-shape <shape>` (for `folded`, which the reconciler cannot write yet:
/// [`write_folded`]), then until the admission plugin has every binding in force (`bindings`
/// of them): both times, in seconds.
async fn converge_and_settle(
    env: &TestEnv,
    client: &kube::Client,
    shape: &'static str,
    templates: usize,
    bindings: usize,
) -> (f64, f64) {
    let t0 = Instant::now();
    if shape == "folded" {
        write_folded(client, templates).await;
    } else {
        converge(env, shape).await;
    }
    let took = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    wait_bound(env, client, SELECTED_NS, bindings, shape).await;
    if shape != "gatekeeper" {
        wait_bound(env, client, LEASE_NS, 0, shape).await;
    }
    let settled = t0.elapsed().as_secs_f64();
    eprintln!("{shape}: converged in {took:.1} s, every binding in force {settled:.1} s later");
    (took, settled)
}

/// A dry-run create: `None` no answer; else admitted (with its warnings) or the refusal.
async fn dry_configmap(
    client: &kube::Client,
    name: &str,
    labelled: bool,
) -> Option<Result<usize, String>> {
    let labels = if labelled {
        json!({ LABEL: "x" })
    } else {
        json!({})
    };
    let body = json!({ "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": SELECTED_NS, "labels": labels } });
    let req = http::Request::builder()
        .method("POST")
        .uri(format!(
            "/api/v1/namespaces/{SELECTED_NS}/configmaps?dryRun=All"
        ))
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&body).expect("json"))
        .expect("request");
    let reply = tokio::time::timeout(
        Duration::from_secs(5),
        kubectl_vap::admission::dryrun::send(client, req),
    )
    .await
    .ok()?
    .ok()?;
    Some(if reply.ok() {
        Ok(reply.warnings.len())
    } else {
        Err(format!(
            "{} {}",
            reply.code,
            reply.status_message().unwrap_or_default()
        ))
    })
}

/// `restarts` restarts of the API server, the first half SIGTERM, the rest SIGKILL; from each
/// first answer, for `probe`: compliant ConfigMaps refused by a policy and violating ones
/// admitted without a warning (every constraint warns), and how long after the first answer
/// the last such answer came. One line per restart kind.
async fn restart_probe(
    env: &TestEnv,
    client: &kube::Client,
    restarts: usize,
    probe: Duration,
) -> String {
    let mut out = Vec::new();
    for (how, count) in [
        ("SIGTERM", restarts / 2),
        ("SIGKILL", restarts - restarts / 2),
    ] {
        let (mut hit, mut refused, mut unjudged, mut answers) = (0, 0, 0, 0);
        let mut windows = Vec::new();
        for _ in 0..count {
            if how == "SIGTERM" {
                env.stop_apiserver().await;
            } else {
                env.kill_apiserver().await;
            }
            env.spawn_apiserver_again().expect("spawn kube-apiserver");
            let spawned = Instant::now();
            let mut first: Option<Instant> = None;
            let mut window: Option<Duration> = None;
            let mut k = 0;
            while first.is_none_or(|t| t.elapsed() < probe) {
                assert!(
                    env.apiserver_exited().is_none() && spawned.elapsed() < SETTLE,
                    "kube-apiserver did not come back:\n{}",
                    env.logs_tail()
                );
                k += 1;
                for labelled in [true, false] {
                    let Some(answer) = dry_configmap(client, &format!("probe-{k}"), labelled).await
                    else {
                        continue;
                    };
                    let at = *first.get_or_insert_with(Instant::now);
                    answers += 1;
                    let wrong = match (labelled, answer) {
                        (true, Err(m)) if m.contains("ValidatingAdmissionPolicy") => {
                            refused += 1;
                            true
                        }
                        (false, Ok(0)) => {
                            unjudged += 1;
                            true
                        }
                        _ => false,
                    };
                    if wrong {
                        window = Some(at.elapsed());
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if let Some(w) = window {
                hit += 1;
                windows.push(w);
            }
        }
        let longest = windows
            .iter()
            .max()
            .map_or("—".to_string(), |w| format!("{:.1} s", w.as_secs_f64()));
        out.push(format!(
            "{how}: {hit} of {count} restarts with a window (longest: until {longest} after the first answer); {refused} compliant refused, {unjudged} violating admitted unwarned, of {answers} answers"
        ));
    }
    out.join("; ")
}

/// Requests per operation and configuration: Leases (unselected) and ConfigMaps (selected;
/// fewer, as every binding evaluates each one).
#[derive(Clone, Copy)]
struct Samples {
    unselected: usize,
    selected: usize,
}

type Row = (String, &'static str, Series);

fn print_rows(n: Samples, rows: &[Row]) {
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1000.0);
    let cell = |v: &[Duration]| {
        if v.is_empty() {
            return "—".to_string();
        }
        format!("{} / {}", ms(quantile(v, 0.5)), ms(quantile(v, 0.9)))
    };
    println!(
        "samples: {} unselected, {} selected per operation and configuration; latency ms, median / p90",
        n.unselected, n.selected
    );
    println!(
        "| templates × constraints | policies | Lease create (unselected) | Lease update (unselected) | ConfigMap create (selected) | ConfigMap update (selected) |"
    );
    println!("|---|---|---|---|---|---|");
    for (size, shape, s) in rows {
        println!(
            "| {size} | {shape} | {} | {} | {} | {} |",
            cell(&s.lease_create),
            cell(&s.lease_update),
            cell(&s.cm_create),
            cell(&s.cm_update)
        );
    }
    // The goals: unselected within 1.5× of the bound; selected no slower than Gatekeeper's.
    let ratio = |a: &[Duration], b: &[Duration]| {
        quantile(a, 0.5).as_secs_f64() / quantile(b, 0.5).as_secs_f64()
    };
    let find = |size: &str, shape: &str| {
        rows.iter()
            .find(|(z, s, _)| z == size && *s == shape)
            .map(|(_, _, s)| s)
    };
    let mut sizes: Vec<&String> = rows.iter().map(|(z, _, _)| z).collect();
    sizes.dedup();
    for size in sizes {
        let Some(none) = find(size, "none") else {
            continue;
        };
        // Selected requests beside Gatekeeper's shape, or narrowed's when it was not measured.
        let base = ["gatekeeper", "narrowed"]
            .into_iter()
            .find_map(|b| find(size, b).map(|s| (b, s)));
        for (_, shape, s) in rows.iter().filter(|(z, sh, _)| z == size && *sh != "none") {
            let selected = match (base, s.cm_create.is_empty()) {
                (Some((b, base)), false) if b != *shape => format!(
                    "; selected /{b}: create {:.2}×, update {:.2}×",
                    ratio(&s.cm_create, &base.cm_create),
                    ratio(&s.cm_update, &base.cm_update)
                ),
                _ => String::new(),
            };
            println!(
                "{size} {shape}: unselected /none: create {:.2}×, update {:.2}×{selected}",
                ratio(&s.lease_create, &none.lease_create),
                ratio(&s.lease_update, &none.lease_update),
            );
        }
    }
}

fn kind(i: usize) -> String {
    format!("BenchShape{i}")
}

/// The templates (each with its exact constraint CRD), `constraints` constraints of each (each
/// warns when label [`LABEL`] is missing on a ConfigMap), the namespaces.
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
                        "parameters": { "labels": [LABEL] } }),
            );
            cluster::create_constraint(client, &c).await;
        })
        .await;
}

/// `kubectl-vap run --once --policy-shape <shape>` (the real binary), again while it exits
/// with writes left: on a loaded machine `run --once` may take a takeover of thousands of
/// objects for converged early ("did not converge; N write(s) still needed", a known issue of
/// the reconciler's idle detection, docs/benchmarks.md); each run continues where the last one
/// stopped, and the time reported is all of them.
async fn converge(env: &TestEnv, shape: &str) {
    for attempt in 1..=5 {
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
        if out.status.success() {
            return;
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let left = stderr
            .lines()
            .find(|l| l.contains("did not converge"))
            .map(str::to_string);
        match left {
            Some(line) if attempt < 5 => {
                eprintln!("run --once --policy-shape {shape}: {line}; again")
            }
            _ => panic!("run --once --policy-shape {shape}: {stderr}"),
        }
    }
}

/// The folded shape (`core::fold`, issue 39), which the reconciler cannot write yet: every VAP
/// and binding there is (what the previous shape's `run --once` wrote) deleted, then, for each
/// template, the generator's folded VAP and binding (`fold::folded_policy`,
/// `fold::folded_binding`: one of each per template, its constraints all `warn`) written by
/// the bench, from the templates and constraints as the API server has them and the options
/// `run --lease-namespace LEASE_NS` would use (the Lease's namespace exempt). Not `run`'s
/// objects: what the generator makes, as tests/e2e_fold.rs writes them.
async fn write_folded(client: &kube::Client, templates: usize) {
    let managed = ListParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
    let (vaps, vapbs) = (cluster::policies(client), cluster::bindings(client));
    vapbs
        .delete_collection(&DeleteParams::default(), &managed)
        .await
        .expect("bindings deleted");
    vaps.delete_collection(&DeleteParams::default(), &managed)
        .await
        .expect("VAPs deleted");
    // The templates and constraints with the API server's uids (the VAPs' owner references).
    let mut objects = Vec::new();
    for i in 0..templates {
        let t = cluster::templates(client)
            .get(&kind(i).to_lowercase())
            .await
            .expect("template");
        let mut v = serde_json::to_value(&t).expect("json");
        v["apiVersion"] = json!("templates.gatekeeper.sh/v1");
        v["kind"] = json!("ConstraintTemplate");
        objects.push(v);
        for c in cluster::constraints(client, &kind(i))
            .list(&ListParams::default())
            .await
            .expect("constraints")
        {
            let mut v = serde_json::to_value(&c).expect("json");
            v["apiVersion"] = json!("constraints.gatekeeper.sh/v1beta1");
            v["kind"] = json!(kind(i));
            objects.push(v);
        }
    }
    let snap = support::objects::snapshot(objects);
    let mut opts = default_options();
    opts.exemptions = Exemptions::lease_namespace(LEASE_NS);
    let served = Served::builtin();
    let mut written = Vec::new();
    for t in &snap.templates {
        let TemplateVerdict::Generate {
            source,
            failure_policy,
            ..
        } = decide_template(t, &opts)
        else {
            panic!("{} generates", t.name())
        };
        let body = PolicyBody {
            source,
            failure_policy,
            operations: generate::operations(t),
        };
        let constraints: Vec<&Constraint> = snap
            .constraints
            .iter()
            .filter(|c| Some(&c.kind) == t.kind.as_ref())
            .collect();
        let mut coverage = Coverage::default();
        for c in &constraints {
            coverage.union(&scope::coverage_of(&c.matcher, &served).0);
        }
        let input = FoldInput {
            template: t,
            body: &body,
            actions: &[Action::Warn],
            constraints: &constraints,
            coverage: &coverage,
            exemptions: &opts.exemptions,
        };
        let policy = fold::folded_policy(&input, &opts.cel)
            .unwrap_or_else(|e| panic!("{} folds: {e}", t.name()));
        written.push((policy, fold::folded_binding(&input)));
    }
    assert_eq!(written.len(), templates, "one folded VAP per template");
    futures::stream::iter(written)
        .for_each_concurrent(8, |(policy, binding)| async move {
            cluster::create_policy(client, &policy).await;
            cluster::create_binding(client, &binding).await;
        })
        .await;
}

/// How many bindings a VAP check warned for, by binding name: the API server's
/// `apiserver_validating_admission_policy_check_total{enforcement_action="warn"}`.
fn warned(metrics: &str) -> BTreeMap<String, f64> {
    let prefix = "apiserver_validating_admission_policy_check_total{";
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .filter_map(|rest| rest.rsplit_once("} "))
        .filter(|(labels, _)| labels.contains("enforcement_action=\"warn\""))
        .filter_map(|(labels, value)| {
            let binding = labels
                .split("policy_binding=\"")
                .nth(1)?
                .split('"')
                .next()?;
            Some((binding.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Waits until a dry-run ConfigMap without [`LABEL`] in `ns` draws a warning from `expected`
/// bindings (all of them: each is in force with its parameters; 0: the namespace is exempt),
/// counted in the API server's metrics (its reply keeps only 4 KiB of warnings).
async fn wait_bound(env: &TestEnv, client: &kube::Client, ns: &str, expected: usize, tag: &str) {
    let resolved = kubectl_vap::admission::dryrun::Resolved {
        resource: kube::core::ApiResource::erase::<ConfigMap>(&()),
        namespaced: true,
    };
    let probe = json!({ "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": { "name": "probe", "namespace": ns } });
    let mut last = String::new();
    let deadline = Instant::now() + SETTLE;
    while Instant::now() < deadline {
        let before = warned(&env.apiserver_metrics().await.expect("metrics"));
        match kubectl_vap::admission::dryrun::create(client, &resolved, Some(ns), &probe).await {
            Ok(_) => {
                let after = warned(&env.apiserver_metrics().await.expect("metrics"));
                let n = growth(&after, &before).len();
                if n == expected {
                    return;
                }
                last = format!("{n} bindings warned in {ns}, {expected} expected");
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    panic!("{tag}: the bindings are not all in force after {SETTLE:?}: {last}");
}

/// The hypothesis variant: every VAP's `namespaceSelector` (the exemptions) removed, bindings
/// unchanged, to see what the API server's namespace check costs a request no VAP selects.
async fn drop_policy_namespace_selectors(client: &kube::Client, templates: usize) {
    let vaps: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let patch = json!({ "spec": { "matchConstraints": { "namespaceSelector": null } } });
    futures::stream::iter(0..templates)
        .for_each_concurrent(8, |i| {
            let vaps = vaps.clone();
            let patch = patch.clone();
            async move {
                let name = format!("gatekeeper-{}", kind(i).to_lowercase());
                vaps.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .expect("VAP patch");
            }
        })
        .await;
}

/// With `BENCH_PPROF`, kube-apiserver's heap profile `name`, once written.
async fn heap(client: &kube::Client, name: &str) {
    if let Some(h) = apiserver_heap(client, name) {
        let _ = h.await;
    }
}

/// Selected requests only (a ConfigMap create, then its update, one at a time, as
/// [`measure`] sends them) until `profile` (a CPU profile being taken) is written: what the
/// profile saw, as a line.
async fn selected_while(
    client: &kube::Client,
    tag: &str,
    profile: tokio::task::JoinHandle<()>,
) -> String {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), SELECTED_NS);
    let pp = PostParams::default();
    let started = Instant::now();
    let mut took = Vec::new();
    while !profile.is_finished() {
        let name = format!("{tag}-prof-{}", took.len());
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": { LABEL: "x" } }, "data": { "n": "0" } }))
        .expect("configmap");
        let t = Instant::now();
        let mut cm = cms.create(&pp, &cm).await.expect("configmap create");
        cm.data
            .get_or_insert_default()
            .insert("n".into(), "1".into());
        cms.replace(&name, &pp, &cm)
            .await
            .expect("configmap update");
        took.push(t.elapsed());
    }
    let _ = profile.await;
    format!(
        "{} selected ConfigMap creates and as many updates in {:.1} s (create + update median {:?})",
        took.len(),
        started.elapsed().as_secs_f64(),
        quantile(&took, 0.5)
    )
}

/// `n` of each operation, one request at a time, interleaved while both kinds remain; after
/// a warm-up.
async fn measure(client: &kube::Client, n: Samples, tag: &str) -> Series {
    let leases: Api<Lease> = Api::namespaced(client.clone(), UNSELECTED_NS);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), SELECTED_NS);
    let pp = PostParams::default();
    let mut s = Series::default();
    let warmup = 5;
    for k in 0..warmup + n.unselected.max(n.selected) {
        let name = format!("{tag}-{k}");
        let kept = k >= warmup;
        if k < warmup + n.unselected {
            let lease: Lease = serde_json::from_value(json!({
                "metadata": { "name": name },
                "spec": { "holderIdentity": "bench", "leaseDurationSeconds": 15 } }))
            .expect("lease");
            let t = Instant::now();
            let mut lease = leases.create(&pp, &lease).await.expect("lease create");
            let create = t.elapsed();
            if let Some(spec) = lease.spec.as_mut() {
                spec.lease_duration_seconds = Some(30);
            }
            let t = Instant::now();
            leases
                .replace(&name, &pp, &lease)
                .await
                .expect("lease update");
            let update = t.elapsed();
            if kept {
                s.lease_create.push(create);
                s.lease_update.push(update);
            }
        }
        if k < warmup + n.selected {
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": { "name": name, "labels": { LABEL: "x" } }, "data": { "n": "0" } }))
            .expect("configmap");
            let t = Instant::now();
            let mut cm = cms.create(&pp, &cm).await.expect("configmap create");
            let create = t.elapsed();
            cm.data
                .get_or_insert_default()
                .insert("n".into(), "1".into());
            let t = Instant::now();
            cms.replace(&name, &pp, &cm)
                .await
                .expect("configmap update");
            let update = t.elapsed();
            if kept {
                s.cm_create.push(create);
                s.cm_update.push(update);
            }
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
