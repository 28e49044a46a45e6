//! Least privilege: `install --print`'s grants are enough to converge (as a user, and in a
//! pod's shoes), a missing write right is reported and retried, and a missing read right means
//! no write at all.

use crate::env::{Env, LEASE_NS, TIMEOUT, eventually, leads, opts};
use crate::support::cli::{self, Served};
use crate::support::objects::{binding_name as bname, crd_name, policy_name as pname};
use crate::support::rbac::{self, Grant, install_rules_without};
use crate::support::reconciler::{self, Start};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// The ClusterRole and lease Role of `install --print`, bound to the non-admin user, are
/// enough to converge; without the binding-write verbs the run fails with a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_rbac_least_privilege() {
    let e = Env::new().await;
    let kind = e.generating_kind("Rbac", "c").await;
    let role_name = e.env.unique_name("vap-rbac");
    // The manifests `install --print` prints, bound to the test user instead of the SA.
    let out = cli::output(cli::kubectl_vap().args(["install", "--print", "--namespace", LEASE_NS]));
    assert!(out.status.success());
    let manifests = String::from_utf8(out.stdout).expect("utf-8");
    let mut cluster_role: Option<ClusterRole> = None;
    let mut role: Option<Role> = None;
    for doc in manifests.split("\n---\n") {
        let v: Value = match serde_norway::from_str(doc) {
            Ok(v) => v,
            Err(_) => continue,
        };
        // The reconciler's own roles (not the operator's ClusterRole or the events Role).
        match (v["kind"].as_str(), v["metadata"]["name"].as_str()) {
            (Some("ClusterRole"), Some("kubectl-vap")) => {
                cluster_role = serde_json::from_value(v).ok()
            }
            (Some("Role"), Some("kubectl-vap-lease")) => role = serde_json::from_value(v).ok(),
            _ => {}
        }
    }
    let cluster_role = cluster_role.expect("ClusterRole in install --print");
    role.expect("Role in install --print");
    let lease = e.env.unique_name("rbac");
    // install --print names the default Lease; this test uses its own.
    rbac::grant(
        &e.client,
        &Grant {
            name: &role_name,
            user: testenv::USER_NAME,
            cluster_rules: serde_json::to_value(&cluster_role.rules).expect("rules"),
            namespace: LEASE_NS,
            namespace_rules: kubectl_vap::cli::install::lease_role_rules(&lease),
        },
    )
    .await;
    let pp = PostParams::default();
    let crapi = Api::<ClusterRole>::all(e.client.clone());
    let run = || e.run_once(&e.env.kubeconfig_user(), &lease, &[]);
    // RBAC caches: give the authorizer a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let out = run();
    let stderr = cli::stderr(&out);
    assert!(
        out.status.success(),
        "the install --print role is enough: {stderr}"
    );
    assert!(e.vapb(&bname(&kind, "c")).await.is_some());

    // The same grants in a pod's shoes: `run --in-cluster` reads the service-account token,
    // CA and namespace from their files and logs JSON.
    e.constrain(&kind, "pod").await;
    let out = e
        .env
        .in_pod_command(std::path::Path::new(cli::BIN), LEASE_NS)
        .expect("in-pod command")
        .args(["run", "--in-cluster", "--once", "--binding-wait=0s"])
        .args(["--lease-namespace", LEASE_NS, "--lease-name", &lease])
        .output()
        .expect("run --in-cluster");
    let logs = cli::stderr(&out) + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "run --in-cluster --once: {logs}");
    assert!(e.vapb(&bname(&kind, "pod")).await.is_some(), "{logs}");
    // Logs (stderr) are JSON; stdout is the report of what `--once` did.
    let stderr = cli::stderr(&out);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "in-cluster mode logs: {logs}");
    for line in lines {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|err| panic!("not a JSON log line ({err}): {line}"));
        assert!(v["level"].is_string(), "no level: {line}");
    }

    // Narrower: no create/update/delete on bindings.
    let full = crapi.get(&role_name).await.expect("role");
    let mut narrow = full.clone();
    for rule in narrow.rules.iter_mut().flatten() {
        if rule
            .resources
            .iter()
            .flatten()
            .any(|r| r == "validatingadmissionpolicybindings")
        {
            rule.resources = Some(vec!["validatingadmissionpolicies".into()]);
        }
    }
    narrow.rules.get_or_insert_with(Vec::new).push(
        serde_json::from_value(json!({ "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingadmissionpolicybindings"], "verbs": ["list", "watch"] }))
        .expect("rule"),
    );
    crapi
        .replace(&role_name, &pp, &narrow)
        .await
        .expect("narrow role");
    e.constrain(&kind, "c2").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let out = run();
    let stderr = cli::stderr(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("forbidden") && stderr.contains("install --print"),
        "{stderr}"
    );

    // A copy that keeps running keeps retrying (with backoff): the refusal is counted and
    // logged, and once the grant is back the binding is written without a restart.
    let r = reconciler::start(
        e.env.client_user().await,
        Start::on(LEASE_NS, &lease, opts(0)).workers(4),
    )
    .await;
    leads(&r).await;
    eventually("the forbidden write is reported", || async {
        r.metrics_text()
            .lines()
            .any(|l| l.starts_with("kubectl_vap_write_errors_total{reason=\"forbidden\"}"))
    })
    .await;
    assert!(
        r.write_events().iter().any(|w| {
            w.object.name == bname(&kind, "c2")
                && matches!(
                    &w.result,
                    kubectl_vap::controller::EventResult::WriteFailed(
                        kubectl_vap::controller::WriteError::Forbidden(_)
                    )
                )
        }),
        "the failed create is in the event log: {:#?}",
        r.writes()
    );
    assert!(e.vapb(&bname(&kind, "c2")).await.is_none());
    let mut full = full;
    full.metadata.resource_version = None;
    crapi
        .replace(&role_name, &pp, &full)
        .await
        .expect("role granted again");
    e.until_vapb("written once the grant is back", &bname(&kind, "c2"), true)
        .await;
    r.assert_idle(TIMEOUT).await;
    r.stop().await;
    e.sweep(&[&kind], "rbac-clean").await;
}

/// name → resourceVersion of the kind's VAP, bindings and CRD: any write changes one.
async fn versions_of(e: &Env, kind: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let prefix = bname(kind, "");
    for b in e
        .vapbs()
        .list(&Default::default())
        .await
        .expect("list bindings")
    {
        let n = b.metadata.name.clone().unwrap_or_default();
        if n.starts_with(&prefix) {
            out.insert(n, b.metadata.resource_version.unwrap_or_default());
        }
    }
    if let Some(p) = e.vap(&pname(kind)).await {
        out.insert(pname(kind), p.metadata.resource_version.unwrap_or_default());
    }
    let crd = crd_name(kind);
    if let Some(c) = Api::<CustomResourceDefinition>::all(e.client.clone())
        .get_opt(&crd)
        .await
        .expect("get crd")
    {
        out.insert(crd, c.metadata.resource_version.unwrap_or_default());
    }
    out
}

/// Grants `rules` and the Lease rules of `lease` to a user of its own (impersonated with
/// `--as`, so no grant another test left applies); returns the user and the grant's name.
async fn grant_user(e: &Env, rules: Value, lease: &str) -> (String, String) {
    let user = e.env.unique_name("vap-unread");
    let name = e.env.unique_name("vap-grant");
    rbac::grant(
        &e.client,
        &Grant {
            cluster_rules: rules,
            ..Grant::install(&name, &user, LEASE_NS, lease)
        },
    )
    .await;
    // RBAC caches: give the authorizer a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    (user, name)
}

/// Knowledge before action, on the real API server: from a converged kind (VAP, 3 bindings),
/// `run --once` as a user whose ClusterRole is `install --print`'s minus one right. Each time:
/// no write at all (every resourceVersion unchanged, no write in the report), exit 2, and the
/// message names what could not be read. Before: without `list` on CRDs every binding was
/// deleted ("constraint … is gone") with exit 0; without `watch` on CRDs or list/watch on
/// constraints, exit 0 "converged"; without list/watch on bindings, blind creates (409).
/// A continuous `run` without `list` on CRDs answers `/readyz` 503 naming them, and writes
/// nothing either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_unreadable_stores_mean_no_writes() {
    let e = Env::new().await;
    let kind = e.generating_kind("Unread", "c0").await;
    for c in ["c1", "c2"] {
        e.constrain(&kind, c).await;
    }
    let r = e.leader(&e.env.unique_name("unread-setup"), opts(0)).await;
    r.assert_idle(TIMEOUT).await;
    r.stop().await;
    let converged = versions_of(&e, &kind).await;
    assert_eq!(converged.len(), 5, "VAP, 3 bindings, CRD: {converged:?}");

    let crds = "customresourcedefinitions";
    let bindings = "validatingadmissionpolicybindings";
    let cases: [(&str, &[&str], &str); 7] = [
        (crds, &["list"], crds),
        (crds, &["list", "watch"], crds),
        (crds, &["watch"], crds),
        ("*", &["list", "watch"], ".constraints.gatekeeper.sh"),
        (
            "constrainttemplates",
            &["list", "watch"],
            "constrainttemplates",
        ),
        (bindings, &["list", "watch"], bindings),
        (
            "validatingadmissionpolicies",
            &["list", "watch"],
            "validatingadmissionpolicies.",
        ),
    ];
    for (resource, verbs, named) in cases {
        let lease = e.env.unique_name("unread");
        let (user, grant_name) =
            grant_user(&e, install_rules_without(resource, verbs), &lease).await;
        let out = e.run_once(&e.env.kubeconfig_admin(), &lease, &["--as", &user]);
        let stderr = cli::stderr(&out);
        let case = format!("without {verbs:?} on {resource}");
        assert_eq!(out.status.code(), Some(2), "{case}: exit code: {stderr}");
        assert!(
            stderr.contains("cannot read everything") && stderr.contains(named),
            "{case}: the message names what could not be read: {stderr}"
        );
        assert!(
            !stderr.lines().any(|l| ["create ", "update ", "delete "]
                .iter()
                .any(|v| l.starts_with(v))),
            "{case}: no write was even attempted: {stderr}"
        );
        assert_eq!(versions_of(&e, &kind).await, converged, "{case}: {stderr}");
        testenv::rbac::revoke(&e.client, &grant_name, LEASE_NS).await;
    }

    // A continuous run without `list` on CRDs: not ready, and says why; writes nothing.
    let lease = e.env.unique_name("unread");
    let (user, grant_name) = grant_user(&e, install_rules_without(crds, &["list"]), &lease).await;
    let mut cmd = e.run(&lease);
    cmd.args(["--as", &user])
        .stderr(std::process::Stdio::null());
    let run = Served::spawn(cmd);
    eventually("the copy leads", || async {
        run.metrics().contains("kubectl_vap_leader 1")
    })
    .await;
    eventually("/readyz is 503 and names the CRDs", || async {
        let r = run.get("/readyz");
        r.starts_with("HTTP/1.1 503") && r.contains(crds)
    })
    .await;
    // Leading for a while, with everything queued reconciled: still nothing written.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let metrics = run.metrics();
    assert!(!metrics.contains("kubectl_vap_writes_total{"), "{metrics}");
    assert!(run.answers("/readyz", 503));
    let _ = run.terminate();
    testenv::rbac::revoke(&e.client, &grant_name, LEASE_NS).await;
    assert_eq!(versions_of(&e, &kind).await, converged, "continuous run");
    e.sweep(&[&kind], "unread-clean").await;
}
