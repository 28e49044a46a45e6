//! Gatekeeper's objects and what kubectl-vap generates for them, on a test API server.

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::api::{Api, DynamicObject, PostParams};
use kubectl_vap::model::ConstraintTemplate;
use serde_json::Value;
use testenv::gatekeeper;

pub fn templates(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &gatekeeper::template_api_resource())
}

pub fn constraints(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &gatekeeper::constraint_api_resource(kind))
}

pub fn policies(client: &kube::Client) -> Api<ValidatingAdmissionPolicy> {
    Api::all(client.clone())
}

pub fn bindings(client: &kube::Client) -> Api<ValidatingAdmissionPolicyBinding> {
    Api::all(client.clone())
}

/// Creates `obj` (JSON); returns it as the server has it.
pub async fn create(api: &Api<DynamicObject>, obj: &Value) -> DynamicObject {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    api.create(&PostParams::default(), &dynamic(obj))
        .await
        .unwrap_or_else(|e| panic!("creating {} {name}: {e}", obj["kind"]))
}

/// Creates `obj` (JSON), or replaces it when it exists; returns it as the server has it.
pub async fn put(api: &Api<DynamicObject>, obj: &Value) -> DynamicObject {
    let name = obj["metadata"]["name"].as_str().expect("a name");
    let mut o = dynamic(obj);
    match api.get_opt(name).await.expect("get") {
        Some(cur) => {
            o.metadata.resource_version = cur.metadata.resource_version;
            api.replace(name, &PostParams::default(), &o)
                .await
                .unwrap_or_else(|e| panic!("replacing {} {name}: {e}", obj["kind"]))
        }
        None => create(api, obj).await,
    }
}

fn dynamic(obj: &Value) -> DynamicObject {
    serde_json::from_value(obj.clone()).expect("an object with apiVersion, kind and metadata")
}

pub async fn create_template(client: &kube::Client, t: &Value) -> DynamicObject {
    create(&templates(client), t).await
}

/// Waits until constraints of `kind` are served: a CRD that exists, even Established, can answer
/// 404 for a moment while the server installs its handler.
pub async fn until_kind_served(client: &kube::Client, kind: &str, timeout: std::time::Duration) {
    let api = constraints(client, kind);
    super::poll::eventually(
        &format!("constraints of kind {kind} served"),
        timeout,
        || {
            let api = api.clone();
            async move { api.list(&Default::default()).await.is_ok() }
        },
    )
    .await;
}

/// Creates constraint `c` (JSON) of its kind.
pub async fn create_constraint(client: &kube::Client, c: &Value) -> DynamicObject {
    create(&constraints(client, c["kind"].as_str().expect("kind")), c).await
}

/// The constraint CRD exactly as kubectl-vap builds it for `t` (as the server has the template:
/// with its uid), applied and Established: what an earlier run would have left.
pub async fn apply_exact_crd(client: &kube::Client, t: &ConstraintTemplate) {
    let kind = t.kind.clone().expect("the template names its kind");
    let crd = kubectl_vap::core::crd::desired_crd(t, &kind).expect("crd");
    gatekeeper::apply_crd(client, &crd)
        .await
        .expect("constraint CRD");
}

/// Creates template `t` and its exact constraint CRD ([`apply_exact_crd`]); returns the template
/// as kubectl-vap reads it.
pub async fn create_template_and_crd(client: &kube::Client, t: &Value) -> ConstraintTemplate {
    let created = create_template(client, t).await;
    let t = super::objects::template_of(serde_json::to_value(&created).expect("json"));
    apply_exact_crd(client, &t).await;
    t
}

pub async fn policy(client: &kube::Client, name: &str) -> Option<ValidatingAdmissionPolicy> {
    policies(client).get_opt(name).await.expect("get VAP")
}

pub async fn binding(
    client: &kube::Client,
    name: &str,
) -> Option<ValidatingAdmissionPolicyBinding> {
    bindings(client).get_opt(name).await.expect("get VAPB")
}

pub async fn create_policy(client: &kube::Client, p: &ValidatingAdmissionPolicy) {
    policies(client)
        .create(&PostParams::default(), p)
        .await
        .unwrap_or_else(|e| panic!("the API server accepts the policy: {e}"));
}

pub async fn create_binding(client: &kube::Client, b: &ValidatingAdmissionPolicyBinding) {
    bindings(client)
        .create(&PostParams::default(), b)
        .await
        .unwrap_or_else(|e| panic!("the API server accepts the binding: {e}"));
}

/// A private API server with Gatekeeper's template CRD and `namespaces`, and its admin client:
/// for a test whose reconciler or commands read cluster-wide.
pub async fn private_env(namespaces: &[&str]) -> (testenv::TestEnv, kube::Client) {
    let env = tokio::task::spawn_blocking(testenv::TestEnv::start)
        .await
        .expect("env");
    let client = prepared(&env, namespaces).await;
    (env, client)
}

/// `env`'s admin client, once Gatekeeper's template CRD and `namespaces` exist.
pub async fn prepared(env: &testenv::TestEnv, namespaces: &[&str]) -> kube::Client {
    let client = env.client_admin().await;
    gatekeeper::install_gatekeeper_crds(&client)
        .await
        .expect("template CRD");
    for ns in namespaces {
        testenv::ensure_namespace(&client, ns).await.expect("ns");
    }
    client
}

/// A server-side dry-run create of `obj` (its resource from discovery, which may lag behind a
/// CRD just Established: retried for `settle`): `None` admitted, `Some(message)` refused.
pub async fn refusal(
    client: &kube::Client,
    obj: &Value,
    settle: std::time::Duration,
) -> Option<String> {
    use kubectl_vap::admission::dryrun;
    let api_version = obj["apiVersion"].as_str().expect("apiVersion");
    let kind = obj["kind"].as_str().expect("kind");
    let r = super::poll::eventually_some(&format!("{kind} is served"), settle, || async {
        dryrun::Resolver::default()
            .resolve(client, api_version, kind)
            .await
            .ok()
    })
    .await;
    let reply = dryrun::create(client, &r, obj["metadata"]["namespace"].as_str(), obj)
        .await
        .expect("a dry-run create is answered");
    (!reply.ok()).then(|| reply.status_message().unwrap_or_default().to_string())
}
