//! End-to-end proof that the mechanism kubectl-vap generates works on a real kube-apiserver:
//! a hand-written ValidatingAdmissionPolicy whose `paramKind` is a Gatekeeper constraint CRD,
//! a constraint object as the param, and a binding with `paramRef` really deny a request.
//! Independent of the generator on purpose: if this fails, the cluster setup is wrong, not
//! our code.
//!
//! Run: `scripts/test`, or
//! `KUBEBUILDER_ASSETS=$(tests/kubeenv/build.sh) cargo test --test e2e_admission -- --include-ignored`.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use support::cluster;
use support::objects::labels_template;
use support::poll;
use testenv::{TestEnv, gatekeeper};

/// The admission plugin learns about policies, bindings and params through informers.
const DENIAL_TIMEOUT: Duration = Duration::from_secs(20);
const REQUIRED_LABEL: &str = "owner";

/// Everything one test creates, with names unique on the shared apiserver.
struct Setup {
    client: kube::Client,
    namespace: String,
    policy: String,
    constraint: String,
}

/// CRD, constraint (the param) and policy; no binding yet.
async fn setup_without_binding(env: &TestEnv) -> Setup {
    let client = env.client_admin().await;
    let namespace = env.create_namespace("e2e-admission").await;
    let kind = env.unique_kind("E2eRequiredLabels");
    // Only the template's `crd` part matters here: the CRD the policy takes as `paramKind`.
    gatekeeper::create_constraint_crd(&client, &labels_template(&kind, None, None))
        .await
        .unwrap_or_else(|e| panic!("constraint CRD: {e:#}\n{}", env.logs_tail()));

    let constraint = env.unique_name("must-have-owner");
    let param = gatekeeper::constraint(
        &kind,
        &constraint,
        json!({ "parameters": { "labels": [REQUIRED_LABEL] } }),
    );
    cluster::create_constraint(&client, &param).await;

    let policy = env.unique_name("e2e-required-labels");
    let vap: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kubectl_vap::model::VAP_KIND,
        "metadata": { "name": policy },
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": { "apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": kind },
            "matchConstraints": { "resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"],
                "operations": ["CREATE", "UPDATE"]
            }] },
            "validations": [{
                "expression": "params.spec.parameters.labels.all(l, has(object.metadata.labels) && l in object.metadata.labels)",
                "messageExpression": "'missing required labels: ' + params.spec.parameters.labels.filter(l, !has(object.metadata.labels) || !(l in object.metadata.labels)).join(', ')"
            }]
        }
    }))
    .expect("policy literal");
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .create(&PostParams::default(), &vap)
        .await
        .expect("the API server accepts the policy");

    Setup {
        client,
        namespace,
        policy,
        constraint,
    }
}

/// Binds the policy to the test's namespace only, so parallel tests are unaffected.
async fn bind(env: &TestEnv, s: &Setup) {
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kubectl_vap::model::VAPB_KIND,
        "metadata": { "name": env.unique_name("e2e-binding") },
        "spec": {
            "policyName": s.policy,
            "validationActions": ["Deny"],
            "paramRef": { "name": s.constraint, "parameterNotFoundAction": "Deny" },
            "matchResources": { "namespaceSelector": { "matchLabels": {
                "kubernetes.io/metadata.name": s.namespace
            } } }
        }
    }))
    .expect("binding literal");
    Api::<ValidatingAdmissionPolicyBinding>::all(s.client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("the API server accepts the binding");
}

fn config_map(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": name, "labels": labels },
        "data": { "k": "v" }
    }))
    .expect("config map literal")
}

/// Creates a ConfigMap without the required label: `Ok` if admitted, the API status if not.
async fn try_violating(env: &TestEnv, s: &Setup) -> Result<(), kube::core::Status> {
    let cms = Api::<ConfigMap>::namespaced(s.client.clone(), &s.namespace);
    let name = env.unique_name("violating");
    match cms
        .create(&PostParams::default(), &config_map(&name, json!({})))
        .await
    {
        Ok(_) => {
            // Keep the namespace clean so later probes mean the same thing.
            let _ = cms.delete(&name, &DeleteParams::default()).await;
            Ok(())
        }
        Err(kube::Error::Api(status)) => Err(*status),
        Err(e) => panic!("request failed below the API level: {e}"),
    }
}

/// Polls until the violating object is denied *by our validation* (not by, say, a param
/// the plugin cannot resolve yet); returns the time it took and the denial.
async fn wait_for_denial(env: &TestEnv, s: &Setup) -> (Duration, kube::core::Status) {
    let start = Instant::now();
    let expected = format!("missing required labels: {REQUIRED_LABEL}");
    let denial = poll::within(DENIAL_TIMEOUT, Duration::from_millis(100), || async {
        match try_violating(env, s).await {
            Err(status) if status.message.contains(&expected) => Ok(status),
            Err(other) => Err(format!("other error: {other:?}")),
            Ok(()) => Err("admitted".to_string()),
        }
    })
    .await
    .unwrap_or_else(|last| {
        panic!(
            "no denial within {DENIAL_TIMEOUT:?}; last attempt: {last}\n{}",
            env.logs_tail()
        )
    });
    (start.elapsed(), denial)
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn constraint_param_policy_denies_violations_and_admits_compliant_objects() {
    let env = TestEnv::shared();
    let s = setup_without_binding(env).await;
    bind(env, &s).await;

    let (took, denial) = wait_for_denial(env, &s).await;
    eprintln!(
        "first denial {took:?} after the binding was created: HTTP {} {}: {}",
        denial.code, denial.reason, denial.message
    );
    assert!(
        denial.message.contains(&s.policy),
        "the denial names the policy: {}",
        denial.message
    );

    let compliant = config_map(
        &env.unique_name("compliant"),
        json!({ REQUIRED_LABEL: "team-a" }),
    );
    Api::<ConfigMap>::namespaced(s.client.clone(), &s.namespace)
        .create(&PostParams::default(), &compliant)
        .await
        .unwrap_or_else(|e| panic!("a compliant object is admitted: {e}"));

    // Still denied afterwards: the denial was not a transient state of the plugin.
    let again = try_violating(env, &s)
        .await
        .expect_err("violations stay denied");
    assert_eq!(again.code, denial.code);
}

/// The user-visible negative: the same policy and param without a binding enforce nothing.
/// Adding the binding afterwards makes the same request fail, so the only difference between
/// admitted and denied is the binding, and the denial test above can fail.
#[tokio::test]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn without_a_binding_violations_are_admitted() {
    let env = TestEnv::shared();
    let s = setup_without_binding(env).await;
    // Longer than a denial takes to arrive once bound, so "admitted" is not just "too early".
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(3) {
        if let Err(status) = try_violating(env, &s).await {
            panic!("denied without a binding: {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    bind(env, &s).await;
    wait_for_denial(env, &s).await;
}
