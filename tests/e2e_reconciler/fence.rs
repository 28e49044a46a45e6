//! Issue 31: the fence holds against retries, a hung renewal and a hung Event; the requests
//! channel survives a hostile operator; one undecodable constraint costs only itself. The real
//! binary, a real API server, and `testenv::proxy` between a copy and the server where a fault
//! is injected.

use crate::env::{Env, LEASE_NS, TIMEOUT, eventually, opts, requiring, run_as};
use crate::support::cli::{self, Served};
use crate::support::objects::{binding_name as bname, inline_policy_name as ipname};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use testenv::proxy::{Action, Outcome, Proxy, Rule};

fn log_file(e: &Env, name: &str) -> (PathBuf, std::fs::File) {
    let path = e.env.dir().join(name);
    let f = std::fs::File::create(&path).expect("log file");
    (path, f)
}

/// `kubectl-vap run` on Lease `lease` through `proxy` with `--lease-duration=<duration>`, its
/// log in `log` (a file of the test's directory).
fn run_via(e: &Env, proxy: &Proxy, lease: &str, duration: &str, log: &str) -> (PathBuf, Served) {
    let via_proxy = proxy
        .kubeconfig(&e.env.kubeconfig_admin())
        .expect("kubeconfig");
    let (log, file) = log_file(e, log);
    let mut cmd = run_as(&via_proxy, lease);
    cmd.arg(format!("--lease-duration={duration}")).stderr(file);
    (log, Served::spawn(cmd))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn leading(s: &Served) -> bool {
    s.metrics().contains("kubectl_vap_leader 1")
}

/// Issue 31, item 1: kube's client retried a throttled binding create by itself, after the
/// fence was checked once. L1's creates are answered 429 by the proxy; L1 is paused, the
/// constraint deleted, L2 takes the Lease; the proxy then forwards everything, and L1 resumes.
/// Before, L1's pending retry reached the server 2.5 ms after it logged that it had lost the
/// Lease, creating a binding for a constraint that no longer existed. Now no binding create
/// leaves L1 after it resumes, the throttling is said once in its log, and the audit log tells
/// L1's writes (`kubectl-vap/<version> (run)`) from kubectl's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_throttled_write_is_never_sent_after_the_lease_is_lost() {
    let e = Env::audited().await;
    let proxy = Proxy::start(e.env).await.expect("the proxy");
    let kind = e.new_kind("Split").await;
    let lease = e.env.unique_name("split");
    let bindings = "validatingadmissionpolicybindings";
    // The first binding create: its connection reset (no answer); then a 429 storm.
    proxy.rule(Rule {
        times: Some(1),
        ..Rule::new(Some("POST"), bindings, Action::Reset)
    });
    proxy.rule(Rule::new(
        Some("POST"),
        bindings,
        Action::Status {
            code: 429,
            retry_after: 1,
        },
    ));
    let (log, l1) = run_via(&e, &proxy, &lease, "3s", "l1.log");
    // The default shape writes the constraint's own VAP, then its binding.
    e.constrain(&kind, "c0").await;
    e.until_vap("L1 writes the policy", &ipname(&kind, "c0"), true)
        .await;
    let throttled = || {
        proxy
            .seen()
            .iter()
            .filter(|s| s.method == "POST" && s.path.contains(bindings))
            .filter(|s| s.outcome == Outcome::Answered(429))
            .count()
    };
    eventually("L1's binding create is throttled 3 times", || async {
        throttled() >= 3
    })
    .await;
    l1.signal(libc::SIGSTOP);
    e.constraints(&kind)
        .delete("c0", &DeleteParams::default())
        .await
        .expect("delete c0");
    let tuning = crate::support::reconciler::Tuning {
        lease_duration: Duration::from_secs(3),
        ..Default::default()
    };
    let l2 = e.reconciler_with(&lease, opts(0), tuning).await;
    l2.wait_leading(Duration::from_secs(30))
        .await
        .expect("L2 takes the expired Lease");
    l2.assert_idle(TIMEOUT).await;
    // From here on, whatever L1 sends reaches the server.
    proxy.clear_rules();
    let resumed = Instant::now();
    l1.signal(libc::SIGCONT);
    eventually("L1 answers again and knows it does not lead", || async {
        l1.metrics().contains("kubectl_vap_leader 0")
    })
    .await;
    // Let anything L1 might still send arrive.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let logs = read(&log);
    let sent: Vec<_> = proxy
        .seen()
        .into_iter()
        .filter(|s| s.at >= resumed && s.method == "POST" && s.path.contains(bindings))
        .collect();
    assert!(
        sent.is_empty(),
        "L1 sent binding creates after it lost the Lease: {sent:#?}\nits log:\n{logs}"
    );
    let created: Vec<Value> = e
        .env
        .audit_events()
        .into_iter()
        .filter(|ev| ev["verb"] == "create" && ev["objectRef"]["resource"] == bindings)
        .filter(|ev| ev["objectRef"]["name"] == bname(&kind, "c0"))
        .collect();
    assert!(created.is_empty(), "{created:#?}\n{logs}");
    assert!(logs.contains("lost Lease"), "{logs}");
    // The reset create was no answer, said as such, and tried again through the fence.
    assert!(
        proxy.seen().iter().any(|s| s.outcome == Outcome::Reset),
        "{:#?}",
        proxy.seen()
    );
    assert!(logs.contains("API server unreachable"), "{logs}");
    // Our backoff saw the 429s (the client hid them before), and said so once.
    let said = logs.lines().filter(|l| l.contains("429")).count();
    assert!(
        (1..=2).contains(&said) && throttled() >= 3,
        "{said} lines about {} throttled creates:\n{logs}",
        throttled()
    );

    // The User-Agent: L1's writes say who sent them; kubectl's say kubectl.
    let kubectl = cli::output(
        std::process::Command::new(&e.env.binaries().kubectl)
            .arg("--kubeconfig")
            .arg(e.env.kubeconfig_admin())
            .args(["create", "configmap", "ua-probe", "-n", LEASE_NS]),
    );
    assert!(kubectl.status.success(), "{}", cli::stderr(&kubectl));
    let ours = format!("kubectl-vap/{} (run)", env!("CARGO_PKG_VERSION"));
    eventually("the audit log has both writes", || async {
        let events = e.env.audit_events();
        let agent = |resource: &str, name: &str| {
            events
                .iter()
                .find(|ev| {
                    ev["verb"] == "create"
                        && ev["objectRef"]["resource"] == resource
                        && ev["objectRef"]["name"] == name
                })
                .and_then(|ev| ev["userAgent"].as_str().map(str::to_string))
        };
        let policy = agent("validatingadmissionpolicies", &ipname(&kind, "c0"));
        let probe = agent("configmaps", "ua-probe");
        policy.as_deref() == Some(ours.as_str())
            && probe.is_some_and(|ua| ua.starts_with("kubectl/"))
    })
    .await;
    let _ = l1.terminate();
    e.clean_up_with(l2, &[kind.as_str()]).await;
}

/// Issue 31, item 2: with one Lease update held unanswered by the proxy, the holder kept
/// `kubectl_vap_leader 1` and `/readyz` 200 for as long as it was watched, and once a second
/// copy took over both reported leading. Now the renewal is bounded by the fence: the holder
/// stops leading (gauge 0, `/readyz` failing, said once) before the Lease expires for the
/// other copy, which then takes over; at no moment do both report leading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_renewal_nobody_answers_stops_the_leader_before_another_takes_over() {
    let e = Env::new().await;
    let proxy = Proxy::start(e.env).await.expect("the proxy");
    let lease = e.env.unique_name("hung");
    let (log1, l1) = run_via(&e, &proxy, &lease, "6s", "hung-l1.log");
    eventually("L1 leads and is ready", || async {
        leading(&l1) && l1.answers("/readyz", 200)
    })
    .await;
    proxy.rule(Rule::new(
        Some("PUT"),
        &format!("/leases/{lease}"),
        Action::Hold,
    ));
    let (log2, file2) = log_file(&e, "hung-l2.log");
    let mut cmd = e.run(&lease);
    cmd.arg("--lease-duration=6s").stderr(file2);
    let l2 = Served::spawn(cmd);
    let (mut l1_stopped, mut l1_unready) = (false, false);
    let started = Instant::now();
    loop {
        let (a, b) = (leading(&l1), leading(&l2));
        assert!(
            !(a && b),
            "both copies report leading\nL1:\n{}\nL2:\n{}",
            read(&log1),
            read(&log2)
        );
        if !a {
            l1_stopped = true;
            l1_unready |= l1.answers("/readyz", 503);
        }
        if b {
            break;
        }
        assert!(
            started.elapsed() < TIMEOUT,
            "L2 never leads (L1 stopped: {l1_stopped})\nL1:\n{}\nL2:\n{}",
            read(&log1),
            read(&log2)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let logs = read(&log1);
    assert!(l1_stopped && l1_unready, "{logs}");
    assert_eq!(
        logs.matches("lost Lease").count(),
        1,
        "said once, not per attempt:\n{logs}"
    );
    assert!(logs.contains("no answer within"), "{logs}");
    // Writes go on, from L2 alone.
    let kind = e.generating_kind("Hung", "c").await;
    e.until_vapb("L2 binds a new constraint", &bname(&kind, "c"), true)
        .await;
    assert!(!leading(&l1) && leading(&l2));
    drop(l1);
    let _ = l2.terminate();
    e.sweep(&[kind.as_str()], "hung-sweep").await;
}

/// An Event is a write like any other: its answer is awaited no longer than the write fence
/// allows. With every Event create held unanswered by the proxy, the holder abandons each when
/// its fence closes and says so once, while it goes on leading; before, each waited out the
/// client's 60 s deadline, holding up every later Event, and could land after the Lease was
/// lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_an_event_nobody_answers_is_abandoned_when_the_fence_closes() {
    let e = Env::new().await;
    let proxy = Proxy::start(e.env).await.expect("the proxy");
    proxy.rule(Rule::new(Some("POST"), "/events", Action::Hold));
    let lease = e.env.unique_name("mute");
    let (log, l1) = run_via(&e, &proxy, &lease, "6s", "mute.log");
    eventually("L1 leads", || async { leading(&l1) }).await;
    // Writing the VAP is reported as an Event, which the proxy holds.
    let kind = e.generating_kind("Mute", "c0").await;
    e.until_vap("L1 writes the policy", &ipname(&kind, "c0"), true)
        .await;
    eventually("the held Event is abandoned at the fence", || async {
        read(&log).contains("before the write fence closed")
    })
    .await;
    assert!(
        leading(&l1),
        "only the Event was abandoned:\n{}",
        read(&log)
    );
    // Answered again: the next Event is published, and that is said once.
    proxy.clear_rules();
    e.constrain(&kind, "c").await;
    eventually("Events are published again", || async {
        read(&log).contains("publishing Events works again")
    })
    .await;
    let logs = read(&log);
    assert_eq!(
        logs.matches("cannot publish Events").count(),
        1,
        "said once, not per Event:\n{logs}"
    );
    let _ = l1.terminate();
    e.sweep(&[kind.as_str()], "mute-sweep").await;
}

/// `depth` objects nested: `{"a":{"a":…1…}}`.
fn nested(depth: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..depth {
        v = json!({ "a": v });
    }
    v
}

/// Issue 31, item 6: a constraint whose parameters nest 200 deep (the schema preserves unknown
/// fields) made listing its kind fail: `/readyz` 503, `check` exit 2, a good constraint of that
/// kind never bound, an "API server unreachable" line every ~15 s. Now it is a finding on
/// itself (`constraint-error`, "cannot be decoded"), and everything else is read and bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_constraint_nested_too_deep_is_a_finding_on_itself() {
    let e = Env::new().await;
    let kind = e.env.unique_kind("Deep");
    let mut t = crate::env::template(&kind, Some(true));
    t["spec"]["crd"]["spec"]["validation"]["openAPIV3Schema"]["properties"]["extra"] =
        json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true });
    e.put_template(&t).await;
    e.constrain(&kind, "good").await;
    // kubectl writes it: a Go client decodes any depth.
    let mut spec = requiring("x");
    spec["parameters"]["extra"] = nested(200);
    spec["match"] = json!({ "labelSelector": { "matchLabels": { "e2e-reconciler": "inert" } } });
    let deep = testenv::gatekeeper::constraint(&kind, "deep", spec);
    let file = e.env.dir().join("deep.json");
    std::fs::write(&file, deep.to_string()).expect("write deep.json");
    let out = cli::output(
        std::process::Command::new(&e.env.binaries().kubectl)
            .arg("--kubeconfig")
            .arg(e.env.kubeconfig_admin())
            .arg("create")
            .arg("-f")
            .arg(&file),
    );
    assert!(out.status.success(), "{}", cli::stderr(&out));

    let lease = e.env.unique_name("deep");
    let (log, f) = log_file(&e, "deep.log");
    let mut cmd = e.run(&lease);
    cmd.stderr(f);
    let run = Served::spawn(cmd);
    e.until_vapb("the good constraint is bound", &bname(&kind, "good"), true)
        .await;
    eventually("/readyz 200", || async { run.answers("/readyz", 200) }).await;
    assert!(e.vapb(&bname(&kind, "deep")).await.is_none());

    let out = e.cli(&[
        "check",
        "-o",
        "json",
        "--lease-namespace",
        LEASE_NS,
        "--lease-name",
        &lease,
    ]);
    let stderr = cli::stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "findings, not an error: {stderr}"
    );
    let report = cli::stdout_json(&out);
    let mine: Vec<&Value> = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["object"]["kind"] == kind.as_str())
        .collect();
    assert!(
        mine.iter().any(|f| f["code"] == "constraint-error"
            && f["object"]["name"] == "deep"
            && f["message"]
                .as_str()
                .is_some_and(|m| m.contains("cannot be decoded"))),
        "{mine:#?}\n{stderr}"
    );
    assert!(
        mine.iter().all(|f| f["object"]["name"] != "good"),
        "{mine:#?}"
    );
    let logs = read(&log);
    assert!(
        !logs.contains("unreachable"),
        "not an outage of the API server:\n{logs}"
    );
    assert_eq!(logs.matches("cannot be decoded").count(), 1, "{logs}");
    let _ = run.terminate();
    e.sweep(&[kind.as_str()], "deep-sweep").await;
}

/// The requests of `n` reconcile-all requests in one merge patch, by `by`.
fn flood(n: usize, by: &str) -> Value {
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let data: serde_json::Map<String, Value> = (0..n)
        .map(|i| {
            let asked = json!({ "command": "reconcile-all", "by": by, "requestedAt": at });
            (
                format!("request.flood{i:04}"),
                Value::from(asked.to_string()),
            )
        })
        .collect();
    json!({ "data": data })
}

/// `apiserver_request_total` by resource and verb (`configmaps PATCH`), and in all.
async fn requests(e: &Env) -> std::collections::BTreeMap<String, f64> {
    use crate::support::metrics::{label, requests_by};
    let text = e.env.apiserver_metrics().await.expect("/metrics");
    requests_by(&text, |l| {
        vec![
            format!("{} {}", label(l, "resource"), label(l, "verb")),
            "all".to_string(),
        ]
    })
}

/// Issue 31, items 3–5, as a user with only the operator role (`kubectl-vap-operator`): 500
/// reconcile-all requests in one patch, junk entries, escapes and forged log lines in `by`,
/// forged answers beside an honest `replay`. Before: one task and one ConfigMap PATCH per
/// request (conflicts growing with the square: 33,263 etcd updates for 500), the `by` field
/// logged raw, the first `result.<id>` an asker saw believed. Now: one coalesced run of at most
/// 64 requests, a couple of ConfigMap writes, the Lease renewed throughout, nothing raw in the
/// leader's log, and `replay` prints the holder's own answer from the Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_hostile_operator_cannot_turn_the_requests_channel_against_the_cluster() {
    let e = Env::new().await;
    let kind = e.generating_kind("Hostile", "c").await;
    let lease = e.env.unique_name("hostile");
    let (log, f) = log_file(&e, "hostile-leader.log");
    let mut cmd = e.run(&lease);
    cmd.stderr(f);
    let leader = Served::spawn(cmd);
    e.until_vapb("the leader converges", &bname(&kind, "c"), true)
        .await;
    let cms: Api<ConfigMap> = Api::namespaced(e.client.clone(), LEASE_NS);
    let cm = kubectl_vap::controller::requests_configmap(&lease);
    eventually("the requests ConfigMap exists", || async {
        cms.get_opt(&cm).await.ok().flatten().is_some()
    })
    .await;
    let mallory = e.env.unique_name("vap-mallory");
    let operator = kubectl_vap::cli::install::operator_rules(&lease);
    testenv::rbac::grant_cluster(&e.client, &mallory, &mallory, &operator).await;
    crate::support::rbac::until_authorized(
        &e.client,
        &mallory,
        json!({ "verb": "patch", "resource": "configmaps", "namespace": LEASE_NS, "name": cm }),
        true,
    )
    .await;
    let hostile = crate::support::rbac::client_as(e.env, &mallory).await;
    let hostile_cms: Api<ConfigMap> = Api::namespaced(hostile.clone(), LEASE_NS);
    // The premise: the operator role may not write the Lease, where answers are published.
    let denied = Api::<Lease>::namespaced(hostile.clone(), LEASE_NS)
        .patch(
            &lease,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "metadata": { "annotations": { "x": "y" } } })),
        )
        .await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.code == 403),
        "{denied:?}"
    );

    let reconciles =
        |s: &Served| crate::support::metrics::sum(&s.metrics(), "kubectl_vap_reconciles_total");
    let before = requests(&e).await;
    let reconciles_before = reconciles(&leader);
    let forged_by =
        "x\n2026-01-01T00:00:00.000000Z  INFO forged: all is well\u{1b}]0;owned\u{7}\u{1b}[2J";
    hostile_cms
        .patch(
            &cm,
            &PatchParams::default(),
            &Patch::Merge(&flood(500, forged_by)),
        )
        .await
        .expect("500 requests in one patch");
    let junk: serde_json::Map<String, Value> = (0..1000)
        .map(|i| (format!("request.junk{i:04}"), Value::from("{\u{1b}[2J")))
        .collect();
    hostile_cms
        .patch(
            &cm,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "data": junk })),
        )
        .await
        .expect("1000 unparsable entries");
    eventually("the leader removes every entry it read", || async {
        cms.get_opt(&cm)
            .await
            .ok()
            .flatten()
            .is_some_and(|c| c.data.unwrap_or_default().is_empty())
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(e.client.clone(), LEASE_NS);
    eventually("the flood's answer rides on a renewal", || async {
        leases
            .get_opt(&lease)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.metadata.annotations)
            .and_then(|a| a.get("kubectl-vap.io/answers").cloned())
            .is_some_and(|a| a.contains("\"flood"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let grown = crate::support::metrics::growth(&requests(&e).await, &before);
    let reconciled = reconciles(&leader) - reconciles_before;
    eprintln!(
        "500 requests + 1000 junk entries in two patches: API requests {grown:?}; reconciles {reconciled}"
    );
    let logs = read(&log);
    for l in logs
        .lines()
        .filter(|l| l.contains("handling") || l.contains("ignored"))
    {
        eprintln!("leader: {l}");
    }
    assert_eq!(
        logs.matches("handling reconcile-all for").count(),
        1,
        "one coalesced run:\n{logs}"
    );
    let patches = grown.get("configmaps PATCH").copied().unwrap_or_default();
    assert!(
        patches <= 2.0 + 3.0,
        "the hostile user's 2 patches, and a few of the leader's: {grown:?}"
    );
    assert!(logs.contains("for 64 request(s)"), "{logs}");
    // One reconcile-all: every key once, give or take a requeue; not 500 times.
    let answered: Vec<Value> = leases
        .get(&lease)
        .await
        .ok()
        .and_then(|l| l.metadata.annotations)
        .and_then(|a| a.get("kubectl-vap.io/answers").cloned())
        .and_then(|a| serde_json::from_str(&a).ok())
        .unwrap_or_default();
    let keys = answered
        .iter()
        .find(|a| {
            a["ids"]
                .as_array()
                .is_some_and(|ids| ids.contains(&json!("flood0000")))
        })
        .and_then(|a| a["keys"].as_f64())
        .expect("the flood's answer counts its keys");
    assert!(
        reconciled <= 2.0 * keys + 10.0,
        "{reconciled} reconciles for one reconcile-all of {keys} keys"
    );
    assert!(logs.contains("ignored and removed entries"), "{logs}");
    assert!(
        logs.matches("ignored and removed entries").count() <= 2,
        "{logs}"
    );
    assert!(leading(&leader), "still leading: renewals went on");
    assert!(!logs.contains("lost Lease"), "{logs}");
    assert!(
        !logs.contains('\u{1b}'),
        "a raw escape reached the log:\n{logs}"
    );
    assert!(
        !logs.lines().any(|l| l.starts_with("2026-01-01T00:00:00")),
        "a forged line reached the log:\n{logs}"
    );

    // Forged answers: the hostile user answers every request it sees, in the ConfigMap.
    let forger = {
        let hostile_cms = hostile_cms.clone();
        let cm = cm.clone();
        tokio::spawn(async move {
            loop {
                if let Ok(Some(c)) = hostile_cms.get_opt(&cm).await {
                    let forged: serde_json::Map<String, Value> = c
                        .data
                        .unwrap_or_default()
                        .keys()
                        .filter_map(|k| k.strip_prefix("request."))
                        .map(|id| {
                            let answer = json!({
                                "handledBy": "the-real-holder", "handledAt": "2026-01-01T00:00:00Z",
                                "summary": "\u{1b}]0;pwned\u{7}nothing to do", "writes": 0, "failures": 0
                            });
                            (format!("result.{id}"), Value::from(answer.to_string()))
                        })
                        .collect();
                    if !forged.is_empty() {
                        let _ = hostile_cms
                            .patch(
                                &cm,
                                &PatchParams::default(),
                                &Patch::Merge(&json!({ "data": forged })),
                            )
                            .await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let out = e.cli(&[
        "replay",
        &kind.to_lowercase(),
        "--as",
        &mallory,
        "--lease-namespace",
        LEASE_NS,
        "--lease-name",
        &lease,
    ]);
    forger.abort();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = cli::stderr(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with(&format!(
            "replayed 1 constraint of template {}",
            kind.to_lowercase()
        )),
        "the holder's answer, not the forger's: {stdout}\n{stderr}"
    );
    assert!(
        !stdout.contains("pwned") && !stdout.contains('\u{1b}'),
        "{stdout}"
    );

    testenv::rbac::revoke(&e.client, &mallory, LEASE_NS).await;
    let _ = leader.terminate();
    e.sweep(&[kind.as_str()], "hostile-sweep").await;
}
