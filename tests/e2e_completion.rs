//! Names completed from a real cluster (issue 43): `kubectl vap replay <TAB>` offers the
//! cluster's ConstraintTemplates, `kubectl vap audit <TAB>` its templates and constraints
//! (`Kind/name`), asked as kubectl asks: the real `kubectl __complete`, the krew archive's
//! `kubectl_complete-vap` helper and the real binary, against a real kube-apiserver.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use serde_json::json;
use std::path::Path;
use std::process::Command;
use support::cluster;
use testenv::gatekeeper;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_template_and_constraint_names_complete_from_the_cluster() {
    let (env, client) = cluster::private_env(&["gatekeeper-system"]).await;
    let template = gatekeeper::template(
        "K8sCompleted",
        "v1",
        json!({}),
        gatekeeper::cel_targets(json!({
            "validations": [{ "expression": "true", "message": "never" }] })),
    );
    cluster::create_template_and_crd(&client, &template).await;
    let constraint = gatekeeper::constraint("K8sCompleted", "finished", json!({}));
    support::poll::eventually(
        "the constraint kind is served",
        std::time::Duration::from_secs(60),
        || {
            let client = client.clone();
            let constraint = constraint.clone();
            async move {
                let api = cluster::constraints(&client, "K8sCompleted");
                api.create(
                    &Default::default(),
                    &serde_json::from_value(constraint).expect("a constraint"),
                )
                .await
                .is_ok()
            }
        },
    )
    .await;

    // kubectl finds the helper and the plugin on PATH, as krew installs them.
    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink(support::cli::BIN, dir.path().join("kubectl-vap")).expect("link");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/completion/kubectl_complete-vap"),
        dir.path().join("kubectl_complete-vap"),
    )
    .expect("copy the helper");
    let path = format!("{}:/usr/bin:/bin", dir.path().display());
    let kubectl = Path::new(&std::env::var("KUBEBUILDER_ASSETS").expect("KUBEBUILDER_ASSETS"))
        .join("kubectl");
    let complete = |words: &[&str]| {
        let out = Command::new(&kubectl)
            .args(["__complete", "vap"])
            .args(words)
            .env("PATH", &path)
            .env("KUBECONFIG", env.kubeconfig_admin())
            .output()
            .expect("kubectl runs");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let templates = complete(&["replay", ""]);
    assert!(
        templates.lines().any(|l| l == "k8scompleted"),
        "replay <TAB>: {templates}"
    );
    let targets = complete(&["audit", "K8s"]);
    assert!(
        targets.lines().any(|l| l == "K8sCompleted/finished"),
        "audit K8s<TAB>: {targets}"
    );
    assert!(
        targets.ends_with(":4\n"),
        "cobra's directive last: {targets}"
    );
}
