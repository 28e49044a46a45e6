//! The generator's output, judged by a real kube-apiserver: the VAP and bindings that
//! `core::generate` builds (our own CEL for Gatekeeper's matchers) are accepted, and they admit
//! and deny exactly as `spec.match` says — namespaces, excludedNamespaces (globs), kinds, name
//! (and generateName), scope and labelSelector. No reconciler involved: this is the pure core
//! against the real server. The retries in `until_denied` measure the admission plugin's lag.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use kubectl_vap::load::cel::default_options;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, PostParams};
use kubectl_vap::core::decide::decide_template;
use kubectl_vap::model::{ConstraintTemplate, Source};
use serde_json::{Value, json};
use support::cluster;
use support::objects::{
    binding_for, constraint_of, policy_with_our_matchers as policy_for, required_labels_template,
};
use support::poll;
use testenv::{TestEnv, gatekeeper};

const TIMEOUT: Duration = Duration::from_secs(30);

/// One test's world: a template kind of its own, its generated policy, and a label that every
/// object of the test carries and every binding selects, so parallel tests never interfere.
struct World {
    env: &'static TestEnv,
    client: kube::Client,
    kind: String,
    id: String,
}

fn template_json(kind: &str) -> Value {
    let mut t = required_labels_template(kind, "missing required labels: ");
    t["metadata"]["uid"] = json!("3b1d6a4e-0000-4000-8000-000000000001");
    t
}

impl World {
    async fn new() -> World {
        let env = TestEnv::shared();
        let client = env.client_admin().await;
        let kind = env.unique_kind("GenLabels");
        let template = template_json(&kind);
        gatekeeper::create_constraint_crd(&client, &template)
            .await
            .unwrap_or_else(|e| panic!("constraint CRD: {e:#}\n{}", env.logs_tail()));
        let t = ConstraintTemplate::from_value(template, Source::default());
        let policy = policy_for(&t, &kind).expect("the template generates");
        cluster::create_policy(&client, &policy).await;
        let id = env.unique_name("gen");
        World {
            env,
            client,
            kind,
            id,
        }
    }

    /// Creates a constraint with `spec` (its labelSelector narrowed to this test) and its
    /// generated binding.
    async fn constrain(&self, name: &str, mut spec: Value) {
        spec["match"]["labelSelector"] = json!({"matchLabels": {"e2e-id": self.id}});
        spec["parameters"] = json!({"labels": ["owner"]});
        let raw = gatekeeper::constraint(&self.kind, name, spec);
        let created = cluster::create_constraint(&self.client, &raw).await;
        let c = constraint_of(&self.kind, serde_json::to_value(created).expect("json"));
        cluster::create_binding(&self.client, &binding_for(&c)).await;
    }

    /// A namespace named `<id>-<suffix>`; an empty suffix gets a fresh one (for retries).
    async fn namespace(&self, suffix: &str, owner: bool) -> Result<String, String> {
        let name = if suffix.is_empty() {
            self.env.unique_name("fresh")
        } else {
            format!("{}-{suffix}", self.id)
        };
        let mut labels = json!({"e2e-id": self.id});
        if owner {
            labels["owner"] = json!("team");
        }
        let ns: Namespace = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}))
            .expect("namespace literal");
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .map(|_| name)
            .map_err(|e| e.to_string())
    }

    /// Creates a ConfigMap (or, with `generate_name`, a generated-name one) lacking the label.
    async fn config_map(&self, ns: &str, name: &str, generate_name: bool) -> Result<(), String> {
        let meta = if generate_name {
            json!({"generateName": name, "labels": {"e2e-id": self.id}})
        } else {
            json!({"name": format!("{name}{}", self.env.unique_name("")), "labels": {"e2e-id": self.id}})
        };
        let cm: ConfigMap = serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}),
        )
        .expect("cm literal");
        Api::<ConfigMap>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &cm)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn secret(&self, ns: &str) -> Result<(), String> {
        let s: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": self.env.unique_name("s"), "labels": {"e2e-id": self.id}}}))
        .expect("secret literal");
        Api::<Secret>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &s)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

fn denied(r: &Result<impl std::fmt::Debug, String>) -> bool {
    matches!(r, Err(e) if e.contains("missing required labels: owner"))
}

/// Retries `probe` until it is denied by the policy (the admission plugin learns policies,
/// bindings and params through informers), then returns; panics after the timeout.
async fn until_denied<F, Fut, T>(what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
    T: std::fmt::Debug,
{
    let start = std::time::Instant::now();
    poll::within(TIMEOUT, poll::EVERY, || {
        let r = probe();
        async move {
            let r = r.await;
            if denied(&r) { Ok(()) } else { Err(r) }
        }
    })
    .await
    .unwrap_or_else(|r| panic!("{what}: not denied within {TIMEOUT:?}: {r:?}"));
    eprintln!("{what}: denied after {:?}", start.elapsed());
}

fn admitted<T: std::fmt::Debug>(what: &str, r: Result<T, String>) {
    assert!(r.is_ok(), "{what}: expected to be admitted, got {r:?}");
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn namespace_globs_select_and_exclude() {
    let w = World::new().await;
    let inside = w.namespace("in-a", true).await.expect("namespace");
    let outside = w.namespace("out-b", true).await.expect("namespace");
    w.constrain("only-in", json!({"match": {"namespaces": [format!("{}-in*", w.id)], "kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}]}})).await;
    until_denied("a ConfigMap in a listed (prefix-glob) namespace", || {
        w.config_map(&inside, "cm", false)
    })
    .await;
    admitted(
        "a ConfigMap in an unlisted namespace",
        w.config_map(&outside, "cm", false).await,
    );

    let w = World::new().await;
    let inside = w.namespace("in-a", true).await.expect("namespace");
    let excluded = w.namespace("skip-b", true).await.expect("namespace");
    w.constrain("not-skipped", json!({"match": {"excludedNamespaces": ["*-skip-b"], "kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}]}})).await;
    until_denied("a ConfigMap in a namespace not excluded", || {
        w.config_map(&inside, "cm", false)
    })
    .await;
    admitted(
        "a ConfigMap in an excluded (suffix-glob) namespace",
        w.config_map(&excluded, "cm", false).await,
    );
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn kinds_and_names_select() {
    let w = World::new().await;
    let ns = w.namespace("kinds", true).await.expect("namespace");
    w.constrain("configmaps-named", json!({"match": {"kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}], "name": "deny-me-*"}})).await;
    until_denied("a ConfigMap whose name matches the glob", || {
        w.config_map(&ns, "deny-me-", false)
    })
    .await;
    until_denied("a ConfigMap whose generateName matches the glob", || {
        w.config_map(&ns, "deny-me-", true)
    })
    .await;
    admitted(
        "a ConfigMap with another name",
        w.config_map(&ns, "keep-", false).await,
    );
    admitted("a Secret (kind not listed)", w.secret(&ns).await);
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn scope_and_the_namespace_object_itself() {
    // Cluster scope: Namespaces (cluster-scoped) are checked, ConfigMaps are not.
    let w = World::new().await;
    let ns = w.namespace("scoped", true).await.expect("namespace");
    w.constrain("cluster-only", json!({"match": {"scope": "Cluster"}}))
        .await;
    until_denied("a Namespace without the label under scope Cluster", || {
        w.namespace("", false)
    })
    .await;
    admitted(
        "a namespaced ConfigMap under scope Cluster",
        w.config_map(&ns, "cm", false).await,
    );

    // Namespaced scope: the other way round.
    let w = World::new().await;
    let ns = w.namespace("scoped", true).await.expect("namespace");
    w.constrain("namespaced-only", json!({"match": {"scope": "Namespaced"}}))
        .await;
    until_denied("a ConfigMap under scope Namespaced", || {
        w.config_map(&ns, "cm", false)
    })
    .await;
    admitted(
        "a Namespace under scope Namespaced",
        w.namespace("n2", false).await,
    );

    // `namespaces` matches a Namespace object by its own name.
    let w = World::new().await;
    w.constrain("own-name", json!({"match": {"kinds": [{"apiGroups": [""], "kinds": ["Namespace"]}], "namespaces": [format!("{}-listed", w.id)]}})).await;
    until_denied("a Namespace whose own name is listed", || {
        w.namespace("listed", false)
    })
    .await;
    admitted(
        "a Namespace whose name is not listed",
        w.namespace("unlisted", false).await,
    );
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn every_demo_template_generates_a_policy_the_server_accepts() {
    let env = TestEnv::shared();
    let client = env.client_admin().await;
    let demo = format!("{}/assets/demo", env!("CARGO_MANIFEST_DIR"));
    let snap =
        kubectl_vap::load::files::load_paths(&[demo], &mut std::io::empty()).expect("demo loads");
    let api = cluster::policies(&client);
    let mut accepted = 0;
    for t in &snap.templates {
        if !decide_template(t, &default_options()).generates() {
            continue;
        }
        let kind = env.unique_kind(t.kind.as_deref().unwrap_or("Demo"));
        gatekeeper::create_constraint_crd(&client, &t.raw)
            .await
            .ok();
        let mut raw = t.raw.clone();
        raw["metadata"]["name"] = json!(kind.to_lowercase());
        raw["spec"]["crd"]["spec"]["names"]["kind"] = json!(kind);
        gatekeeper::create_constraint_crd(&client, &raw)
            .await
            .unwrap_or_else(|e| panic!("CRD for {kind}: {e:#}"));
        let unique = ConstraintTemplate::from_value(raw, Source::default());
        let policy = policy_for(&unique, &kind).expect("generates");
        api.create(&PostParams::default(), &policy)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "the server rejects the policy generated from demo template {}: {e}",
                    t.name()
                )
            });
        accepted += 1;
    }
    assert!(accepted >= 4, "the demo has generating templates");
}
