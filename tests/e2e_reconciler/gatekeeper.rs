//! Beside Gatekeeper: `run` refuses next to its generator (unless `--take-over`), stops
//! writing while the generator is on, and takes over Gatekeeper's own objects without a write.

use crate::env::{Env, TIMEOUT, eventually, leads, opts};
use crate::support::cli;
use crate::support::cluster;
use crate::support::objects::{
    binding_name as bname, constraint_of, inline_policy_name as ipname, policy_for,
    policy_name as pname, template_of,
};
use crate::support::reconciler::Tuning;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, PostParams};
use kubectl_vap::core::decide::Action;
use kubectl_vap::core::generate;
use kubectl_vap::core::{Options, PolicyShape};
use kubectl_vap::model::served::Served;
use serde_json::json;
use std::time::Duration;

/// A Deployment that looks like Gatekeeper's, running with `args`, in namespace `ns`.
async fn gatekeeper_deployment(e: &Env, ns: &str, name: &str, args: &[&str]) -> Api<Deployment> {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "gk" } },
                  "template": { "metadata": { "labels": { "app": "gk" } },
                                "spec": { "containers": [{ "name": "manager", "image": "openpolicyagent/gatekeeper:v3.23.0",
                                                           "args": args }] } } }
    }))
    .expect("deployment");
    let dapi = Api::<Deployment>::namespaced(e.client.clone(), ns);
    dapi.create(&PostParams::default(), &d)
        .await
        .expect("deployment");
    dapi
}

/// A Deployment that looks like Gatekeeper's generator makes `run` refuse (with how to turn
/// it off), unless `--take-over`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_refuses_next_to_gatekeepers_generator() {
    let e = Env::new().await;
    let ns = e.env.create_namespace("gk").await;
    let dapi = gatekeeper_deployment(
        &e,
        &ns,
        "gatekeeper-audit",
        &["--operation=audit", "--operation=generate"],
    )
    .await;
    let lease = e.env.unique_name("gk");
    // Gatekeeper's namespace is where its generator is looked for (and only there).
    let run = |extra: &[&str]| {
        let mut args = vec!["--gatekeeper-namespace", ns.as_str()];
        args.extend_from_slice(extra);
        e.run_once(&e.env.kubeconfig_admin(), &lease, &args)
    };
    let out = run(&[]);
    let stderr = cli::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("audit.disableGenerateOperation=true") && stderr.contains("--take-over"),
        "{stderr}"
    );
    let out = run(&["--take-over"]);
    assert!(out.status.success(), "{}", cli::stderr(&out));
    dapi.delete("gatekeeper-audit", &DeleteParams::default())
        .await
        .expect("cleanup");
}

/// Gatekeeper's generator switched on while `run` writes: writing stops, and says why, until
/// it is off again; then everything is reconciled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_stops_writing_while_gatekeepers_generator_is_on() {
    let e = Env::new().await;
    let tuning = Tuning {
        gatekeeper_recheck: Duration::from_millis(300),
        ..Tuning::default()
    };
    // Gatekeeper's namespace is where its generator is looked for (and only there).
    let ns = e.env.create_namespace("gk-later").await;
    let o = Options {
        gatekeeper_namespace: ns.clone(),
        ..opts(0)
    };
    let r = e
        .reconciler_with(&e.env.unique_name("gk-later"), o, tuning)
        .await;
    leads(&r).await;
    let dapi =
        gatekeeper_deployment(&e, &ns, "gatekeeper-controller-manager", &["--port=8443"]).await;
    eventually("writes stop", || async {
        !r.writes_enabled() && r.gatekeeper_generator().is_some()
    })
    .await;
    let writes = r.writes_total();
    let kind = e.generating_kind("GkLater", "c").await;
    r.assert_idle(TIMEOUT).await;
    assert!(e.vaps_of(&kind).await.is_empty(), "nothing written");
    assert_eq!(r.writes_total(), writes);

    dapi.delete("gatekeeper-controller-manager", &DeleteParams::default())
        .await
        .expect("delete deployment");
    let bn = bname(&kind, "c");
    eventually("written once the generator is off", || async {
        e.vap(&ipname(&kind, "c")).await.is_some() && e.vapb(&bn).await.is_some()
    })
    .await;
    assert!(r.writes_enabled());
    e.clean_up_with(r, &[&kind]).await;
}

/// Taking over from Gatekeeper: objects Gatekeeper wrote (no managed-by label, its own CEL
/// text for the four matchers) that carry the same intent are left as they are — zero writes
/// under `--policy-shape gatekeeper`; the narrowed shape rewrites the VAP and the binding once
/// each (what they match), and then nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_takes_over_gatekeeper_objects_without_rewriting() {
    takes_over_gatekeeper_objects(PolicyShape::Gatekeeper, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_narrowing_gatekeeper_objects_costs_one_write_each() {
    takes_over_gatekeeper_objects(PolicyShape::Narrowed, 2).await;
}

async fn takes_over_gatekeeper_objects(shape: PolicyShape, takeover_writes: u64) {
    let e = Env::new().await;
    let kind = e.generating_kind("Gk", "c").await;
    let t = e
        .templates()
        .get(&kind.to_lowercase())
        .await
        .expect("template");
    let t = template_of(serde_json::to_value(&t).expect("json"));
    // What Gatekeeper writes: no labels, its own matcher CEL.
    let mut vap = policy_for(&t, &kind).expect("generates");
    vap.metadata.labels = None;
    for m in vap
        .spec
        .as_mut()
        .and_then(|s| s.match_conditions.as_mut())
        .into_iter()
        .flatten()
    {
        if m.name.starts_with("gatekeeper_internal_") {
            m.expression = "true".into();
        }
    }
    let c = e.constraints(&kind).get("c").await.expect("constraint");
    let c = constraint_of(&kind, serde_json::to_value(&c).expect("json"));
    let mut vapb = generate::binding(
        &c,
        &[Action::Deny],
        PolicyShape::Gatekeeper,
        &opts(0).exemptions,
        &Served::builtin(),
    )
    .expect("binding")
    .0;
    vapb.metadata.labels = None;
    let pp = PostParams::default();
    let vap = cluster::policies(&e.client)
        .create(&pp, &vap)
        .await
        .expect("Gatekeeper-style VAP");
    let vapb = e
        .vapbs()
        .create(&pp, &vapb)
        .await
        .expect("Gatekeeper-style VAPB");

    let options = Options {
        policy_shape: shape,
        ..opts(0)
    };
    let r = e.leader(&e.env.unique_name("gk"), options).await;
    r.assert_idle(TIMEOUT).await;
    // Only this test's objects: a leader of another shape rewrites the other tests' objects
    // on this shared API server too.
    let own = |r: &crate::support::reconciler::Reconciler| -> Vec<String> {
        let names = [pname(&kind), bname(&kind, "c")];
        r.write_events()
            .iter()
            .filter(|w| names.contains(&w.object.name))
            .map(|w| format!("{} {}", w.verb.as_str(), w.object))
            .collect()
    };
    assert_eq!(
        own(&r).len() as u64,
        takeover_writes,
        "Gatekeeper's equivalent objects are rewritten only to narrow them: {:?}",
        own(&r)
    );
    let now_vap = e.vap(&pname(&kind)).await.expect("vap");
    let now_vapb = e.vapb(&bname(&kind, "c")).await.expect("vapb");
    let unchanged = takeover_writes == 0;
    assert_eq!(
        now_vap.metadata.resource_version == vap.metadata.resource_version,
        unchanged
    );
    assert_eq!(
        now_vapb.metadata.resource_version == vapb.metadata.resource_version,
        unchanged
    );
    // An intent change is still applied (one write), and then the object is ours.
    e.put_constraint(
        &kind,
        "c",
        json!({ "enforcementAction": "warn", "parameters": { "labels": ["x"] } }),
    )
    .await;
    e.until_actions("intent change applied", &bname(&kind, "c"), &["Warn"])
        .await;
    r.assert_idle(TIMEOUT).await;
    assert_eq!(own(&r).len() as u64, takeover_writes + 1, "{:?}", own(&r));
    e.clean_up_with(r, &[&kind]).await;
}
