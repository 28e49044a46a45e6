//! A policy whose CEL runs over the API server's cost budget (issue 39), on a real
//! kube-apiserver, with the default shape: the API server accepts the policy when it is
//! written, then gives up on every request the policy selects. Under `failurePolicy: Fail` it
//! refuses them with the error where a verdict's message would be: `test` must call that a
//! policy error (not a denial), `audit` must not count it as a violation, and `check --audit`
//! must report `policy-cost-exceeded`. Under `Ignore` it admits them and says nothing, which
//! is what docs/admission.md tells users (asserted here, so the doc stays true).

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;
use std::time::Duration;
use support::{cli, cluster, poll};
use testenv::{TestEnv, gatekeeper};

const NS: &str = "cost-budget";
const KIND: &str = "K8sCostlyPairs";
/// How long the admission plugin may take to see what `run` wrote.
const SETTLE: Duration = Duration::from_secs(120);

/// A template whose one validation compares every pair of its parameter's entries: with
/// 3,000 entries, 9 million comparisons, far over the API server's per-expression limit.
fn template() -> Value {
    let mut source = json!({
        "validations": [{ "expression":
            "variables.params.names.all(a, variables.params.names.all(b, a == b || a != b))",
            "message": "never said: the expression is always true" }]
    });
    source["generateVAP"] = json!(true);
    gatekeeper::template(
        KIND,
        "v1",
        json!({ "validation": { "openAPIV3Schema": { "type": "object", "properties": {
            "names": { "type": "array", "items": { "type": "string" } } } } } }),
        gatekeeper::cel_targets(source),
    )
}

fn constraint() -> Value {
    let names: Vec<String> = (0..3000).map(|i| format!("name-{i}")).collect();
    gatekeeper::constraint(
        KIND,
        "all-pairs",
        json!({ "match": {
            "kinds": [{ "apiGroups": [""], "kinds": ["ConfigMap"] }], "namespaces": [NS] },
            "parameters": { "names": names } }),
    )
}

fn configmap() -> Value {
    json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "settings", "namespace": NS }, "data": { "k": "v" } })
}

/// The real binary as the admin of `env`, every default of its command line.
fn vap(env: &TestEnv, args: &[&str]) -> Output {
    cli::as_admin(cli::kubectl_vap_defaults(), env, args)
}

/// `test -f` of the ConfigMap until its first line says `outcome` (the admission plugin sees
/// a new policy late); its whole output then.
async fn tested_until(env: &TestEnv, file: &Path, outcome: &str) -> Output {
    let file = file.to_str().expect("a UTF-8 path");
    poll::within(SETTLE, poll::EVERY, || async {
        let out = vap(env, &["test", "-f", file]);
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        match stdout.lines().next() {
            Some(first) if first.contains(outcome) => Ok(out),
            _ => Err(format!("{stdout}{}", cli::stderr(&out))),
        }
    })
    .await
    .unwrap_or_else(|last| panic!("test -f never said {outcome}; last: {last}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_policy_over_the_cost_budget_is_a_policy_error_not_a_verdict() {
    let (env, client) = cluster::private_env(&[NS, "gatekeeper-system"]).await;
    // The ConfigMap exists before any policy refuses it: audit has something to look at.
    let configmaps = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        NS,
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    );
    cluster::create(&configmaps, &configmap()).await;
    cluster::create_template(&client, &template()).await;
    cli::converge(&env, &[]);
    cluster::create_constraint(&client, &constraint()).await;
    // The API server takes the policy: no write refused, nothing for `run` to report.
    cli::converge(&env, &[]);

    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("configmap.json");
    std::fs::write(&file, configmap().to_string()).expect("write the ConfigMap");

    // test: the refusal is the policy's failure, and says what would fix it.
    let out = tested_until(&env, &file, "POLICY-ERROR").await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("without a verdict") && stdout.contains("resulted in error"),
        "{stdout}"
    );
    assert!(
        stdout.contains("ran over the API server's CEL cost budget"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("denied by"),
        "not told as a denial: {stdout}"
    );

    // audit: no violation, an object that could not be judged (exit 2), over the budget.
    let out = vap(&env, &["audit", "-o", "json"]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("audit's JSON ({e}): {}", cli::stderr(&out)));
    assert_eq!(out.status.code(), Some(2), "{report:#}");
    let audited = report["constraints"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["constraint"]["name"] == "all-pairs"))
        .unwrap_or_else(|| panic!("the constraint audited: {report:#}"));
    assert_eq!(audited["violations"], json!([]), "{audited:#}");
    let errors = audited["errors"].as_array().expect("errors");
    assert!(
        errors.iter().any(|e| e["object"]["name"] == "settings"
            && e["outcome"] == "policy-error"
            && e["overCostBudget"] == true),
        "{audited:#}"
    );

    // check --audit: the error finding, naming the constraint.
    let out = vap(&env, &["check", "--audit", "-o", "json"]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check's JSON ({e}): {}", cli::stderr(&out)));
    assert_eq!(out.status.code(), Some(1), "{report:#}");
    let finding = report["findings"]
        .as_array()
        .and_then(|all| all.iter().find(|f| f["code"] == "policy-cost-exceeded"))
        .unwrap_or_else(|| panic!("a policy-cost-exceeded finding: {report:#}"));
    assert_eq!(finding["severity"], "error", "{finding:#}");
    assert_eq!(
        (&finding["object"]["kind"], &finding["object"]["name"]),
        (&json!(KIND), &json!("all-pairs")),
        "{finding:#}"
    );

    // Under Ignore the server admits what it gave up on and says nothing: no warning.
    cli::converge(&env, &["--default-failure-policy", "Ignore"]);
    let out = tested_until(&env, &file, "ADMITTED").await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("warn"),
        "no word from the server: {stdout}"
    );
}
