//! Builders for small snapshots in the pure-core tests. No IO.
#![allow(dead_code)]

use kubectl_vap::model::Source;
use kubectl_vap::snapshot::Snapshot;
use serde_json::{Value, json};

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
