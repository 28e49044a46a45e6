//! The fixtures tests and benches share (benches include this file with
//! `#[path = "../tests/support/mod.rs"] mod support;`): object builders, snapshots, and reading
//! the API server's metrics text. No IO: what starts or talks to processes is in
//! `crates/testenv`.
#![allow(dead_code)]

use kubectl_vap::model::Source;
use kubectl_vap::snapshot::Snapshot;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub fn template(name: &str, kind: &str, source: Value) -> Value {
    json!({
        "apiVersion": "templates.gatekeeper.sh/v1",
        "kind": "ConstraintTemplate",
        "metadata": {"name": name, "uid": format!("uid-t-{name}")},
        "spec": {
            "crd": {"spec": {"names": {"kind": kind}}},
            "targets": [{"target": "admission.k8s.gatekeeper.sh", "code": [{"engine": "K8sNativeValidation", "source": source}]}]
        }
    })
}

pub fn cel_source(generate: Option<bool>) -> Value {
    let mut s = json!({"validations": [{"expression": "variables.params.labels.all(l, l in variables.anyObject.metadata.labels)", "message": "missing labels"}]});
    if let Some(g) = generate {
        s["generateVAP"] = json!(g);
    }
    s
}

/// A template whose policy requires every label its constraint lists in `parameters.labels`;
/// the message is `message` followed by the missing labels. `failurePolicy: Ignore`: a policy
/// whose paramKind the admission plugin has not discovered yet fails to configure, and under
/// Fail that denies every request of every parallel test (Gatekeeper #4530).
pub fn required_labels_template(kind: &str, message: &str) -> Value {
    let has = "has(variables.anyObject.metadata.labels)";
    let labels = "variables.anyObject.metadata.labels";
    json!({
        "apiVersion": "templates.gatekeeper.sh/v1",
        "kind": "ConstraintTemplate",
        "metadata": {"name": kind.to_lowercase()},
        "spec": {
            "crd": {"spec": {"names": {"kind": kind}, "validation": {"openAPIV3Schema": {
                "type": "object", "properties": {"labels": {"type": "array", "items": {"type": "string"}}}}}}},
            "targets": [{"target": "admission.k8s.gatekeeper.sh", "code": [{"engine": "K8sNativeValidation", "source": {
                "generateVAP": true,
                "failurePolicy": "Ignore",
                "validations": [{
                    "expression": format!("variables.params.labels.all(l, {has} && l in {labels})"),
                    "messageExpression": format!("'{message}' + variables.params.labels.filter(l, !{has} || !(l in {labels})).join(', ')")
                }]
            }}]}]
        }
    })
}

/// The samples of `apiserver_request_total` in the API server's `/metrics` text: each one's
/// labels and value, for a caller to sum by whichever labels it counts.
pub fn request_samples(metrics: &str) -> Vec<(BTreeMap<&str, &str>, f64)> {
    let mut out = Vec::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let labels = labels
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k, v.trim_matches('"')))
            .collect();
        out.push((labels, value.trim().parse::<f64>().unwrap_or(0.0)));
    }
    out
}

/// `apiserver_request_total` summed by verb.
pub fn requests_by_verb(metrics: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (labels, value) in request_samples(metrics) {
        let verb = labels.get("verb").copied().unwrap_or_default();
        *out.entry(verb.to_string()).or_default() += value;
    }
    out
}

/// Waits until `probe` holds, polling every 200 ms; fails the test after `timeout`, naming
/// `what`.
pub async fn eventually<F, Fut>(what: &str, timeout: Duration, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !probe().await {
        assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn constraint(kind: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "constraints.gatekeeper.sh/v1beta1",
        "kind": kind,
        "metadata": {"name": name, "uid": format!("uid-c-{name}")},
        "spec": spec
    })
}

pub fn snapshot(objects: Vec<Value>) -> Snapshot {
    let mut s = Snapshot {
        now: Some(chrono::Utc::now()),
        ..Default::default()
    };
    for o in objects {
        s.insert(o, Source::default())
            .expect("fixture objects are valid");
    }
    s
}
