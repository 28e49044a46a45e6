//! `render` against a real API server: what it renders from a cluster that `run --once`
//! converged is what `run` wrote (docs/generation.md, "Rendering"). The static manifests on a
//! real API server are in `e2e_versions.rs` (they run on every version of the matrix).

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1 as ar;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};
use kubectl_vap::core::{crd, normalize};
use serde_json::Value;
use support::library::{self, sample};
use support::{cli, cluster};
use testenv::TestEnv;

/// The part of an object `render` promises and the API server keeps as sent: name, labels,
/// controller ownerReferences (uids included), and the spec after the server's defaults
/// are normalized (`core::normalize`, `crd::normalize_spec`: the same comparison `check` makes).
fn comparable(o: &Value) -> Value {
    let kind = o["kind"].as_str().unwrap_or_default();
    let spec = match kind {
        "ValidatingAdmissionPolicy" => serde_json::to_value(normalize::policy_spec(
            serde_json::from_value(o["spec"].clone()).expect("a VAP spec"),
        ))
        .expect("json"),
        "ValidatingAdmissionPolicyBinding" => serde_json::to_value(normalize::binding_spec(
            serde_json::from_value(o["spec"].clone()).expect("a binding spec"),
        ))
        .expect("json"),
        _ => crd::normalize_spec(&o["spec"]),
    };
    serde_json::json!({
        "kind": kind,
        "name": o["metadata"]["name"],
        "labels": o["metadata"]["labels"],
        "ownerReferences": o["metadata"]["ownerReferences"],
        "spec": spec,
    })
}

fn with_kind<T: serde::Serialize>(o: &T, kind: &str) -> Value {
    let mut v = serde_json::to_value(o).expect("json");
    v["kind"] = Value::String(kind.into());
    v
}

/// Everything kubectl-vap wrote: objects with its managed-by label, by kind and name.
async fn written(client: &kube::Client) -> BTreeMap<(String, String), Value> {
    let ours = ListParams::default().labels("app.kubernetes.io/managed-by=kubectl-vap");
    let mut out = BTreeMap::new();
    let mut put = |v: Value| {
        let key = (
            v["kind"].as_str().unwrap_or_default().to_string(),
            v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        out.insert(key, comparable(&v));
    };
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for c in crds.list(&ours).await.expect("crds").items {
        put(with_kind(&c, "CustomResourceDefinition"));
    }
    let vaps: Api<ar::ValidatingAdmissionPolicy> = Api::all(client.clone());
    for p in vaps.list(&ours).await.expect("vaps").items {
        put(with_kind(&p, "ValidatingAdmissionPolicy"));
    }
    let vapbs: Api<ar::ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    for b in vapbs.list(&ours).await.expect("vapbs").items {
        put(with_kind(&b, "ValidatingAdmissionPolicyBinding"));
    }
    out
}

fn vap(env: &TestEnv, args: &[&str]) -> std::process::Output {
    cli::as_admin(cli::kubectl_vap_defaults(), env, args)
}

/// The library samples converged by `run --once` in a shape; then `render -o json` of that
/// cluster, in the same shape, equals what `run` wrote, object for object (the owners'
/// real uids in the ownerReferences); and a template selected by name renders its own
/// objects only.
async fn round_trip(shape: &str) {
    let (env, client) = cluster::private_env(&[library::NS, "gatekeeper-system"]).await;
    let shape_flag = format!("--policy-shape={shape}");
    let converge = |env: &TestEnv| {
        let out = vap(env, &["run", "--once", "--binding-wait=0s", &shape_flag]);
        assert!(out.status.success(), "run --once: {}", cli::stderr(&out));
    };
    for (name, _) in library::SAMPLES {
        cluster::create_template(&client, &sample(&library::dir(name), "template.yaml")).await;
    }
    converge(&env);
    for (name, _) in library::SAMPLES {
        let c = sample(&library::dir(name), "constraint.yaml");
        cluster::create_constraint(&client, &c).await;
    }
    converge(&env);
    let wrote = written(&client).await;
    // CRDs, VAPs (one per template, or per constraint inline) and a binding per constraint.
    assert!(wrote.len() >= 3 * library::SAMPLES.len(), "{wrote:#?}");

    let out = vap(&env, &["render", "-o", "json", &shape_flag]);
    assert_eq!(out.status.code(), Some(0), "{}", cli::stderr(&out));
    let list = cli::stdout_json(&out);
    assert_eq!(list["kind"], "List");
    let rendered: BTreeMap<(String, String), Value> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|o| {
            (
                (
                    o["kind"].as_str().unwrap_or_default().to_string(),
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ),
                comparable(o),
            )
        })
        .collect();
    assert_eq!(
        rendered.keys().collect::<Vec<_>>(),
        wrote.keys().collect::<Vec<_>>(),
        "the same objects"
    );
    for (key, live) in &wrote {
        assert_eq!(
            &rendered[key], live,
            "{key:?}: render equals what run wrote"
        );
        let owner_uid = &live["ownerReferences"][0]["uid"];
        assert!(
            owner_uid.as_str().is_some_and(|u| !u.is_empty()),
            "{key:?}: the owner's real uid: {owner_uid}"
        );
    }
    // Nothing left to write: the cluster is what render shows.
    let out = vap(&env, &["plan", "--exit-code", &shape_flag]);
    assert_eq!(out.status.code(), Some(0), "converged");

    // A template by name: its CRD, its VAP(s), its constraint's binding, nothing else.
    let (name, _) = library::SAMPLES[0];
    let out = vap(&env, &["render", "-o", "json", &shape_flag, name]);
    assert_eq!(out.status.code(), Some(0), "{}", cli::stderr(&out));
    let items = cli::stdout_json(&out)["items"].clone();
    let names: Vec<&str> = items
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    assert!(!names.is_empty());
    assert!(names.iter().all(|n| n.contains(name)), "{names:?}");

    // Static manifests of this cluster, then `check --static` on it: in line; once a
    // constraint is deleted, its two manifests dangle.
    let dir = tempfile::tempdir().expect("tmp");
    let statics = dir.path().join("static");
    let statics_arg = statics.display().to_string();
    let out = vap(&env, &["render", "--static", "--output-dir", &statics_arg]);
    assert_eq!(out.status.code(), Some(0), "{}", cli::stderr(&out));
    let static_findings = |env: &TestEnv| -> Vec<(String, String)> {
        let out = vap(
            env,
            &["check", "-o", "json", &shape_flag, "--static", &statics_arg],
        );
        cli::stdout_json(&out)["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .filter(|f| f["code"].as_str().is_some_and(|c| c.starts_with("static-")))
            .map(|f| {
                (
                    f["code"].as_str().unwrap_or_default().to_string(),
                    f["object"]["name"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(static_findings(&env), vec![], "just rendered");
    let gone = sample(&library::dir(name), "constraint.yaml");
    let kind = gone["kind"].as_str().expect("kind");
    let cname = gone["metadata"]["name"].as_str().expect("name");
    cluster::constraints(&client, kind)
        .delete(cname, &Default::default())
        .await
        .expect("delete the constraint");
    let found = static_findings(&env);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found
            .iter()
            .all(|(code, n)| code == "static-dangling" && n.contains(cname)),
        "{found:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_render_of_a_cluster_run_converged_is_what_run_wrote_inline() {
    // The command line's default (`auto`) is inline for these templates (one constraint
    // each); said explicitly so the test does not depend on the default.
    round_trip("inline").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_render_of_a_cluster_run_converged_is_what_run_wrote_narrowed() {
    round_trip("narrowed").await;
}
