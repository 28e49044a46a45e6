//! Least privilege: `install --print`'s grants are enough to converge (as a user, and in a
//! pod's shoes), a missing write right is reported and retried, and a missing read right means
//! no write at all.

use crate::env::{Env, LEASE_NS, TIMEOUT, eventually, leads, opts};
use crate::support::cli::{self, Served};
use crate::support::objects::{binding_name as bname, crd_name, inline_policy_name as ipname};
use crate::support::rbac::{self, Grant, install_rules_without};
use crate::support::reconciler::{self, Start, observe};
use k8s_openapi::api::rbac::v1::ClusterRole;
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
    // The reconciler's ClusterRole as `install --print` prints it, bound to the test user
    // instead of the SA (the Lease Role's rules for this test's own Lease).
    let printed = rbac::printed(LEASE_NS);
    let lease = e.env.unique_name("rbac");
    rbac::grant(
        &e.client,
        &Grant {
            name: &role_name,
            user: testenv::USER_NAME,
            cluster_rules: printed.cluster.rules.clone(),
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
    // Gatekeeper's generator is looked for where the printed Role lets it look (the Deployments
    // of gatekeeper-system), not cluster-wide (issue 42, item 11).
    assert!(
        !stderr.contains("cannot tell whether Gatekeeper's generator is active"),
        "{stderr}"
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
    // Any forbidden write counts first (another binding's update may come before c2's
    // create), so wait for c2's own failed create.
    eventually("the forbidden write is reported", || async {
        r.metrics_text()
            .lines()
            .any(|l| l.starts_with("kubectl_vap_write_errors_total{reason=\"forbidden\"}"))
    })
    .await;
    eventually("the failed create of c2 is in the event log", || async {
        r.write_events().iter().any(|w| {
            w.object.name == bname(&kind, "c2")
                && matches!(
                    &w.result,
                    kubectl_vap::controller::EventResult::WriteFailed(
                        kubectl_vap::controller::WriteError::Forbidden(_)
                    )
                )
        })
    })
    .await;
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
    // The grant is to the env's shared user: later tests must not inherit it.
    testenv::rbac::revoke(&e.client, &role_name, LEASE_NS).await;
    e.sweep(&[&kind], "rbac-clean").await;
}

/// The operator's ClusterRole of `install --print` (`kubectl-vap-operator`: read, and ask the
/// holder) is what a person at a TUI without `--reconcile` needs, wherever the reconciler runs.
/// A user bound to it alone, as printed: an observing copy (what the TUI runs) reads
/// everything with no access error, sees the holder and its Events, and asks it to replay; the
/// one-shot `replay` binary does too. The holder runs as another user with the reconciler's
/// roles as printed (on the printed Lease name). Without `patch` on the requests ConfigMap the
/// request fails naming the role; without `watch` on bindings the view says it cannot read
/// them; without its Events rule the view says it cannot watch Events (still synced), until
/// the rule is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_the_operator_role_observes_and_asks_the_holder() {
    use kubectl_vap::controller::{Command, DEFAULT_LEASE_NAME};
    let e = Env::new().await;
    let kind = e.generating_kind("Operator", "c").await;
    let template = kind.to_lowercase();
    let printed = rbac::printed(LEASE_NS);
    let (holder_user, operator) = (
        e.env.unique_name("vap-holder"),
        e.env.unique_name("vap-operator"),
    );
    let (holder_grant, operator_grant) = (
        e.env.unique_name("vap-grant"),
        e.env.unique_name("vap-grant"),
    );
    printed
        .grant_reconciler(
            &e.client,
            &holder_grant,
            &holder_user,
            &printed.cluster.rules,
        )
        .await;
    testenv::rbac::grant_cluster(
        &e.client,
        &operator_grant,
        &operator,
        &printed.operator.rules,
    )
    .await;
    let requests = kubectl_vap::controller::requests_configmap(DEFAULT_LEASE_NAME);
    let patch_requests = json!({ "verb": "patch", "resource": "configmaps",
        "namespace": LEASE_NS, "name": requests });
    rbac::until_authorized(&e.client, &operator, patch_requests.clone(), true).await;
    let bindings = json!({ "verb": "watch", "group": "admissionregistration.k8s.io",
        "resource": "validatingadmissionpolicybindings" });
    rbac::until_authorized(&e.client, &holder_user, bindings.clone(), true).await;

    let holder = reconciler::start(
        rbac::client_as(e.env, &holder_user).await,
        Start::on(LEASE_NS, DEFAULT_LEASE_NAME, opts(0)).workers(4),
    )
    .await;
    leads(&holder).await;
    e.until_vapb("the holder writes", &bname(&kind, "c"), true)
        .await;
    holder.assert_idle(TIMEOUT).await;

    // (a) The view, as the operator: synced, nothing it cannot read, the holder known.
    let view_as_operator = || async {
        let client = rbac::client_as(e.env, &operator).await;
        observe(client, LEASE_NS, DEFAULT_LEASE_NAME, opts(0)).await
    };
    let view = view_as_operator().await;
    eventually(
        "the operator's view has synced and sees the holder",
        || async {
            let st = view.state();
            st.synced && st.lease.holder.as_deref() == Some(holder.identity())
        },
    )
    .await;
    assert_eq!(
        view.access_errors(),
        [] as [String; 0],
        "the operator's view"
    );
    assert!(
        view.state()
            .snapshot
            .bindings
            .iter()
            .any(|b| b.meta.name == bname(&kind, "c")),
        "the view shows the binding"
    );

    // (b) It asks the holder, which answers; the outcome's Event reaches the view.
    let outcome = view
        .request(Command::Replay(template.clone()))
        .await
        .expect("the holder answers the operator");
    assert_eq!(outcome.handled_by, holder.identity());
    assert_eq!(
        outcome.summary,
        format!("replayed 1 constraint of template {template}: 0 writes")
    );
    eventually("the view shows the holder's Event", || async {
        view.cluster_events().iter().any(|ev| {
            ev.reason == "Replayed"
                && ev.regarding.name == template
                && ev.note == outcome.summary
                && ev.from_a_holder
        })
    })
    .await;
    // Only the leader's words (issue 42, item 9): an Event with our label and reporter
    // fields written by anyone else (here as admin; creating Events in `default` is enough)
    // reaches the view marked as from no holder of the Lease.
    let forged: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({
        "metadata": { "generateName": "forged-",
                      "labels": { "app.kubernetes.io/managed-by": "kubectl-vap" } },
        "eventTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "reportingController": "kubectl-vap", "reportingInstance": "vm-9999-forged",
        "action": "Write", "reason": "WriteFailed", "type": "Warning",
        "note": "deleted binding everything — by the leader",
        "regarding": { "apiVersion": "templates.gatekeeper.sh/v1", "kind": "ConstraintTemplate",
                       "name": template }
    }))
    .expect("an Event");
    Api::<k8s_openapi::api::events::v1::Event>::namespaced(e.client.clone(), "default")
        .create(&PostParams::default(), &forged)
        .await
        .expect("the forged Event");
    eventually("the view marks the forged Event", || async {
        view.cluster_events()
            .iter()
            .any(|ev| ev.reporter == "vm-9999-forged" && !ev.from_a_holder)
    })
    .await;

    // (c) The one-shot binary as the operator asks the holder too.
    let replay = || {
        e.cli(&[
            "replay",
            &template,
            "--as",
            &operator,
            "--lease-namespace",
            LEASE_NS,
        ])
    };
    let out = replay();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", cli::stderr(&out));
    assert_eq!(
        stdout,
        format!(
            "replayed 1 constraint of template {template}: 0 writes (by {})\n",
            holder.identity()
        )
    );

    // One verb fewer, and it fails saying what to grant.
    let without = |resource, verb| rbac::rules_without(&printed.operator.rules, resource, &[verb]);
    rbac::set_cluster_rules(&e.client, &operator_grant, &without("configmaps", "patch")).await;
    rbac::until_authorized(&e.client, &operator, patch_requests, false).await;
    let out = replay();
    let stderr = cli::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("forbidden") && stderr.contains("kubectl-vap-operator"),
        "{stderr}"
    );
    let resource = "validatingadmissionpolicybindings";
    rbac::set_cluster_rules(&e.client, &operator_grant, &without(resource, "watch")).await;
    rbac::until_authorized(&e.client, &operator, bindings, false).await;
    let blind = view_as_operator().await;
    eventually("the view says it cannot read bindings", || async {
        blind.access_errors().iter().any(|m| m.contains(resource))
    })
    .await;
    // Without the Events rule the view says why the holder's outcomes are missing (not an
    // empty list), yet is synced and sees everything else; the error goes once it is granted.
    let events = json!({ "verb": "watch", "group": "events.k8s.io", "resource": "events",
        "namespace": LEASE_NS });
    let no_events = rbac::rules_without(&printed.operator.rules, "events", &["list", "watch"]);
    rbac::set_cluster_rules(&e.client, &operator_grant, &no_events).await;
    rbac::until_authorized(&e.client, &operator, events.clone(), false).await;
    let deaf = view_as_operator().await;
    let says_events = |r: &reconciler::Reconciler| {
        r.access_errors()
            .iter()
            .any(|m| m.contains("events.events.k8s.io") && m.contains("forbidden"))
    };
    eventually(
        "the view without Events has synced, shows the binding and says why",
        || async {
            let st = deaf.state();
            st.synced
                && st
                    .snapshot
                    .bindings
                    .iter()
                    .any(|b| b.meta.name == bname(&kind, "c"))
                && says_events(&deaf)
        },
    )
    .await;
    rbac::set_cluster_rules(&e.client, &operator_grant, &printed.operator.rules).await;
    rbac::until_authorized(&e.client, &operator, events, true).await;
    eventually("the Events error goes once they are granted", || async {
        !says_events(&deaf)
    })
    .await;

    for r in [deaf, blind, view, holder] {
        r.stop().await;
    }
    printed.revoke_reconciler(&e.client, &holder_grant).await;
    testenv::rbac::revoke(&e.client, &operator_grant, LEASE_NS).await;
    e.sweep(&[&kind], "operator-clean").await;
}

/// name → resourceVersion of the kind's VAPs, bindings and CRD: any write changes one.
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
    for name in e.vaps_of(kind).await {
        if let Some(p) = e.vap(&name).await {
            out.insert(name, p.metadata.resource_version.unwrap_or_default());
        }
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
    assert_eq!(
        converged.len(),
        7,
        "a VAP and a binding per constraint (the default shape), CRD: {converged:?}"
    );

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

    // A continuous run without `list` on CRDs, told to wait for the grant (without, it exits
    // 2 as `--once` does): not ready, and says why; writes nothing.
    let lease = e.env.unique_name("unread");
    let (user, grant_name) = grant_user(&e, install_rules_without(crds, &["list"]), &lease).await;
    let mut cmd = e.run(&lease);
    cmd.args(["--as", &user, "--wait-for-access"])
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

/// What the guard denied, or `Ok` (`what` names the request for the messages).
fn guarded(what: &str, r: Result<(), kube::Error>) -> Result<(), String> {
    match r {
        Ok(()) => Ok(()),
        Err(e) => Err(format!("{what}: {e}")),
    }
}

/// Least privilege for real (issue 28, item 13): RBAC cannot name the constraint CRDs, the
/// Lease or the requests ConfigMap before they exist, so `install --print` ships a guard
/// ValidatingAdmissionPolicy confining its service account. On the real API server, as a user
/// with exactly the printed roles and the printed guard (naming that user instead of the
/// ServiceAccount): before the guard, RBAC alone lets it delete the ConstraintTemplate CRD
/// (a server-side dry run, so nothing is lost); with it, it cannot delete or update a CRD of
/// another group, create a Lease or ConfigMap other than its own, or delete a ConfigMap it does
/// not own — and `run --once` still converges under those rules (it creates the constraint
/// CRD, the VAP, the binding, its Lease and its ConfigMap). The limit stated in `help rbac`
/// holds too: Kubernetes evaluates no admission policy on VAPs, so a foreign VAP is confined
/// by RBAC alone (if that ever changes, this fails and the guard should cover them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_the_guard_confines_the_service_account() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::DeleteParams;
    use kubectl_vap::controller::DEFAULT_LEASE_NAME;
    let e = Env::new().await;
    let kind = e.env.unique_kind("Guard");
    // The template alone: its constraint CRD is the reconciler's to create, under the guard.
    crate::support::cluster::put(&e.templates(), &crate::env::template(&kind, Some(true))).await;
    let printed = rbac::printed(LEASE_NS);
    let user = e.env.unique_name("vap-guarded");
    let grant = e.env.unique_name("vap-grant");
    printed
        .grant_reconciler(&e.client, &grant, &user, &printed.cluster.rules)
        .await;
    let crd_delete = json!({ "verb": "delete", "group": "apiextensions.k8s.io",
        "resource": "customresourcedefinitions" });
    rbac::until_authorized(&e.client, &user, crd_delete, true).await;
    let as_user = rbac::client_as(e.env, &user).await;
    let dry_delete = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    let dry_create = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let crds = Api::<CustomResourceDefinition>::all(as_user.clone());
    let template_crd = "constrainttemplates.templates.gatekeeper.sh";
    let delete_template_crd = || async {
        guarded(
            "delete the ConstraintTemplate CRD",
            crds.delete(template_crd, &dry_delete).await.map(|_| ()),
        )
    };
    // RBAC alone: allowed (what the guard is for).
    delete_template_crd()
        .await
        .expect("without the guard, RBAC lets the service account delete any CRD");

    // The guard as printed, for this user.
    let guard = printed.guard_for(LEASE_NS, &user);
    assert_eq!(guard.len(), 2, "{guard:?}");
    let policy: ValidatingAdmissionPolicy =
        serde_json::from_value(guard[0].clone()).expect("the guard policy");
    let binding: ValidatingAdmissionPolicyBinding =
        serde_json::from_value(guard[1].clone()).expect("its binding");
    let policies = Api::<ValidatingAdmissionPolicy>::all(e.client.clone());
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(e.client.clone());
    let pp = PostParams::default();
    policies.create(&pp, &policy).await.expect("the guard");
    bindings.create(&pp, &binding).await.expect("its binding");
    let configmaps = Api::<ConfigMap>::namespaced(as_user.clone(), LEASE_NS);
    let cm = |name: &str| -> ConfigMap {
        serde_json::from_value(json!({ "metadata": { "name": name } })).expect("cm")
    };
    let denied_by_guard = |r: Result<(), String>| {
        r.is_err_and(|m| m.contains("kubectl-vap-guard") && m.contains("kubectl-vap writes only"))
    };
    eventually("the guard denies a ConfigMap not its own", || async {
        denied_by_guard(guarded(
            "create ConfigMap other",
            configmaps
                .create(&dry_create, &cm("other"))
                .await
                .map(|_| ()),
        ))
    })
    .await;

    // What it may no longer do.
    let r = delete_template_crd().await;
    assert!(denied_by_guard(r.clone()), "the guard denies it: {r:?}");
    let mut foreign_crd = Api::<CustomResourceDefinition>::all(e.client.clone())
        .get(template_crd)
        .await
        .expect("the ConstraintTemplate CRD");
    foreign_crd.metadata.managed_fields = None;
    let r = guarded(
        "update the ConstraintTemplate CRD",
        crds.replace(template_crd, &dry_create, &foreign_crd)
            .await
            .map(|_| ()),
    );
    assert!(denied_by_guard(r.clone()), "the guard denies it: {r:?}");
    // A constraint CRD with a conversion webhook (issue 42, item 11): every read of the kind's
    // constraints would go to a URL of the writer's choosing.
    let webhooked: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": { "name": format!("webhooked.{}", kubectl_vap::model::CONSTRAINTS_GROUP) },
        "spec": {
            "group": kubectl_vap::model::CONSTRAINTS_GROUP,
            "scope": "Cluster",
            "names": { "kind": "Webhooked", "plural": "webhooked", "listKind": "WebhookedList" },
            "versions": [{ "name": "v1beta1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true } } }],
            "conversion": { "strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": { "url": "https://convert.example.invalid/convert" } } }
        }
    }))
    .expect("a CRD");
    let r = guarded(
        "create a constraint CRD with a conversion webhook",
        crds.create(&dry_create, &webhooked).await.map(|_| ()),
    );
    assert!(
        r.as_ref()
            .is_err_and(|m| m.contains("kubectl-vap-guard") && m.contains("conversion webhook")),
        "the guard denies it: {r:?}"
    );
    let mut plain = webhooked.clone();
    plain.spec.conversion = None;
    guarded(
        "create a constraint CRD without one",
        crds.create(&dry_create, &plain).await.map(|_| ()),
    )
    .expect("a constraint CRD without a conversion webhook passes the guard");
    let leases = Api::<Lease>::namespaced(as_user.clone(), LEASE_NS);
    let lease: Lease =
        serde_json::from_value(json!({ "metadata": { "name": "not-the-reconcilers" } }))
            .expect("lease");
    let r = guarded(
        "create another Lease",
        leases.create(&dry_create, &lease).await.map(|_| ()),
    );
    assert!(denied_by_guard(r.clone()), "the guard denies it: {r:?}");
    // A ConfigMap it does not own: RBAC grants no delete on ConfigMaps at all.
    let theirs = e.env.unique_name("not-mine");
    Api::<ConfigMap>::namespaced(e.client.clone(), LEASE_NS)
        .create(&pp, &cm(&theirs))
        .await
        .expect("someone's ConfigMap");
    let r = guarded(
        "delete someone's ConfigMap",
        configmaps.delete(&theirs, &dry_delete).await.map(|_| ()),
    );
    assert!(r.as_ref().is_err_and(|m| m.contains("forbidden")), "{r:?}");
    // The stated limit: no admission policy sees a VAP's own writes.
    let r = guarded(
        "delete the guard policy itself (dry run)",
        Api::<ValidatingAdmissionPolicy>::all(as_user.clone())
            .delete(kubectl_vap::cli::install::GUARD_NAME, &dry_delete)
            .await
            .map(|_| ()),
    );
    assert!(
        r.is_ok(),
        "Kubernetes now evaluates policies on VAP writes: extend the guard to them: {r:?}"
    );

    // What the reconciler writes, it still may: `run --once` as the user on the printed
    // Lease, twice (the constraint CRD first, then a constraint's binding). Its Lease and
    // requests ConfigMap are gone first (an earlier test may have left them), so it creates
    // both under the guard too.
    let requests = kubectl_vap::controller::requests_configmap(DEFAULT_LEASE_NAME);
    let _ = Api::<Lease>::namespaced(e.client.clone(), LEASE_NS)
        .delete(DEFAULT_LEASE_NAME, &DeleteParams::default())
        .await;
    let _ = Api::<ConfigMap>::namespaced(e.client.clone(), LEASE_NS)
        .delete(&requests, &DeleteParams::default())
        .await;
    let run = || {
        e.cli(&[
            "run",
            "--once",
            "--binding-wait=0s",
            "--lease-namespace",
            LEASE_NS,
            "--lease-name",
            DEFAULT_LEASE_NAME,
            "--as",
            &user,
        ])
    };
    let out = run();
    assert!(out.status.success(), "{}", cli::stderr(&out));
    assert!(
        Api::<CustomResourceDefinition>::all(e.client.clone())
            .get_opt(&crd_name(&kind))
            .await
            .expect("get CRD")
            .is_some(),
        "the constraint CRD is created under the guard: {}",
        cli::stderr(&out)
    );
    for (what, there) in [
        (
            "its Lease",
            Api::<Lease>::namespaced(e.client.clone(), LEASE_NS)
                .get_opt(DEFAULT_LEASE_NAME)
                .await
                .map(|l| l.is_some()),
        ),
        (
            "its ConfigMap",
            Api::<ConfigMap>::namespaced(e.client.clone(), LEASE_NS)
                .get_opt(&requests)
                .await
                .map(|c| c.is_some()),
        ),
    ] {
        assert!(
            there.is_ok_and(|t| t),
            "{what} is created under the guard: {}",
            cli::stderr(&out)
        );
    }
    e.constrain(&kind, "c").await;
    let out = run();
    assert!(out.status.success(), "{}", cli::stderr(&out));
    assert!(
        e.vap(&ipname(&kind, "c")).await.is_some(),
        "{}",
        cli::stderr(&out)
    );
    assert!(
        e.vapb(&bname(&kind, "c")).await.is_some(),
        "{}",
        cli::stderr(&out)
    );

    let dp = DeleteParams::default();
    let _ = bindings
        .delete(kubectl_vap::cli::install::GUARD_NAME, &dp)
        .await;
    let _ = policies
        .delete(kubectl_vap::cli::install::GUARD_NAME, &dp)
        .await;
    let _ = Api::<ConfigMap>::namespaced(e.client.clone(), LEASE_NS)
        .delete(&theirs, &dp)
        .await;
    printed.revoke_reconciler(&e.client, &grant).await;
    e.sweep(&[&kind], "guard-clean").await;
}

/// Issue 42, item 2: the account the guard confines can delete the guard's binding (no
/// admission policy judges VAPs and bindings), and then the guard judges nothing. A copy told
/// that the guard confines it (`run --expect-guard`, as the printed Deployment runs) says so:
/// ready while the guard holds; its binding deleted, `/readyz` 503 and `check`'s guard-missing
/// error from the Lease; restored, both clear. On an API server of its own: the copy leads and
/// writes, and must not meet the shared server's other copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_guard_removed_is_said() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use kube::api::DeleteParams;
    let (env, client) = crate::support::cluster::private_env(&[LEASE_NS]).await;
    let lease = kubectl_vap::controller::DEFAULT_LEASE_NAME;
    let guard = rbac::printed(LEASE_NS).guard_for(LEASE_NS, "system:serviceaccount:x:nobody");
    let policy: ValidatingAdmissionPolicy =
        serde_json::from_value(guard[0].clone()).expect("the guard policy");
    let binding: ValidatingAdmissionPolicyBinding =
        serde_json::from_value(guard[1].clone()).expect("its binding");
    let pp = PostParams::default();
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&pp, &policy)
        .await
        .expect("the guard");
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone());
    bindings.create(&pp, &binding).await.expect("its binding");
    let mut cmd = crate::env::run_as(&env.kubeconfig_admin(), lease);
    cmd.arg("--expect-guard");
    let run = Served::spawn(cmd);
    run.wait_ready(TIMEOUT, Duration::from_millis(200)).await;
    let check = || {
        let out = cli::output(
            cli::kubectl_vap()
                .args(["check", "-o", "json", "--lease-namespace", LEASE_NS])
                .arg("--kubeconfig")
                .arg(env.kubeconfig_admin()),
        );
        let report = cli::stdout_json(&out);
        report["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["code"] == "guard-missing")
            .cloned()
            .collect::<Vec<Value>>()
    };
    assert_eq!(check(), Vec::<Value>::new(), "the guard holds");

    let name = kubectl_vap::cli::install::GUARD_NAME;
    bindings
        .delete(name, &DeleteParams::default())
        .await
        .expect("the guard's binding deleted");
    let said = "the guard binding kubectl-vap-guard does not exist";
    eventually("/readyz says the guard is unbound", || async {
        let readyz = run.get("/readyz");
        readyz.starts_with("HTTP/1.1 503") && readyz.contains(said)
    })
    .await;
    // The Lease carries it from the next renewal on.
    eventually("check says the guard is missing", || async {
        !check().is_empty()
    })
    .await;
    let found = check();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0]["severity"], "error");
    assert_eq!(found[0]["object"]["name"], name);
    assert!(
        found[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains(said)),
        "{found:#?}"
    );

    bindings
        .create(&pp, &binding)
        .await
        .expect("the guard's binding restored");
    run.wait_ready(TIMEOUT, Duration::from_millis(200)).await;
    eventually("check says nothing of the guard", || async {
        check().is_empty()
    })
    .await;
    drop(run);
}

/// Issue 42, item 3: a copy whose user may read everything but not lead (the operator's
/// ClusterRole of `install --print`, and `get` on the Lease) beside a leader. Before: `run`
/// stood by, `/readyz` 200, for as long as the holder led, and learned it could not lead only
/// when the holder left (one 403). Now it asks the API server first (SelfSubjectAccessReview):
/// in the foreground it exits 2 saying it can never lead and what to grant; told to wait, it
/// stays up with `/readyz` 503 saying the same, and becomes ready once the grant comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_copy_that_can_never_lead_says_so() {
    let e = Env::new().await;
    let lease = e.env.unique_name("rights");
    let holder = reconciler::start(
        e.client.clone(),
        Start::on(LEASE_NS, &lease, opts(0)).workers(2),
    )
    .await;
    leads(&holder).await;
    let printed = rbac::printed(LEASE_NS);
    let user = e.env.unique_name("vap-readonly");
    let name = e.env.unique_name("vap-grant");
    let read_lease = json!([{ "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                             "verbs": ["get", "list", "watch"] }]);
    rbac::grant(
        &e.client,
        &Grant {
            name: &name,
            user: &user,
            cluster_rules: printed.operator.rules.clone(),
            namespace: LEASE_NS,
            namespace_rules: read_lease,
        },
    )
    .await;
    let get_lease = json!({ "verb": "get", "group": "coordination.k8s.io", "resource": "leases",
                            "namespace": LEASE_NS, "name": lease });
    rbac::until_authorized(&e.client, &user, get_lease, true).await;

    let log = e.env.dir().join(format!("{lease}.log"));
    let mut cmd = crate::env::run_as(&e.env.kubeconfig_admin(), &lease);
    cmd.args(["--as", &user])
        .stderr(std::fs::File::create(&log).expect("log file"));
    let mut foreground = Served::spawn(cmd);
    let status = foreground
        .exited_within(Duration::from_secs(60))
        .await
        .expect("a copy that can never lead does not stand by for ever");
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("can never lead")
            && stderr.contains("update leases.coordination.k8s.io")
            && stderr.contains("install --print"),
        "{stderr}"
    );

    // Told to wait: up, unready with the reason, ready once granted.
    let mut cmd = crate::env::run_as(&e.env.kubeconfig_admin(), &lease);
    cmd.args(["--as", &user, "--wait-for-access"])
        .stderr(std::process::Stdio::null());
    let waiting = Served::spawn(cmd);
    eventually("/readyz says it can never lead", || async {
        let readyz = waiting.get("/readyz");
        readyz.starts_with("HTTP/1.1 503") && readyz.contains("can never lead")
    })
    .await;
    let granted = e.env.unique_name("vap-grant");
    rbac::grant(
        &e.client,
        &Grant {
            cluster_rules: printed.cluster.rules.clone(),
            ..Grant::install(&granted, &user, LEASE_NS, &lease)
        },
    )
    .await;
    eventually("/readyz 200 once granted", || async {
        waiting.answers("/readyz", 200)
    })
    .await;
    drop(waiting);
    holder.stop().await;
    for grant in [&name, &granted] {
        testenv::rbac::revoke(&e.client, grant, LEASE_NS).await;
    }
}
