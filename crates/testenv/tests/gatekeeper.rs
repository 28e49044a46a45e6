//! The real Gatekeeper manager (v3.23.1, `tests/gatekeeper`) against private envs: what it
//! generates from ConstraintTemplates and constraints, as the server stores it.
//!
//! The objects it creates are compared with `tests/fixtures/gatekeeper-observed/` (volatile
//! metadata removed): kubectl-vap's own CRD generation is held to them. After a Gatekeeper
//! upgrade, rewrite them with `UPDATE_GATEKEEPER_OBSERVED=1` and review the diff.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use testenv::TestEnv;
use testenv::gatekeeper::{self, Gatekeeper, GatekeeperOptions};

/// Template applied → its constraint CRD Established (Gatekeeper measured well under this).
const CRD_TIMEOUT: Duration = Duration::from_secs(60);
/// Gatekeeper waits `--default-wait-for-vapb-generation` (30 s) after a template's CRD exists
/// before it binds constraints.
const VAPB_TIMEOUT: Duration = Duration::from_secs(120);

const UNKNOWN_FIELDS_KINDS: [&str; 3] = [
    "K8sObservedRegoLegacy",
    "K8sObservedRegoStructural",
    "K8sObservedNoSchema",
];

fn observed_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gatekeeper-observed")
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn crds() -> ApiResource {
    resource(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    )
}

fn vaps() -> ApiResource {
    resource(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
    )
}

fn vapbs() -> ApiResource {
    resource(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    )
}

async fn apply(client: &kube::Client, ar: &ApiResource, obj: &Value) {
    let name = obj["metadata"]["name"].as_str().expect("a name");
    Api::<DynamicObject>::all_with(client.clone(), ar)
        .patch(
            name,
            &PatchParams::apply("gatekeeper-test").force(),
            &Patch::Apply(obj),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {} {name}: {e}", ar.kind));
}

async fn get(client: &kube::Client, ar: &ApiResource, name: &str) -> Option<Value> {
    Api::<DynamicObject>::all_with(client.clone(), ar)
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("reading {} {name}: {e}", ar.kind))
        .map(|o| serde_json::to_value(o).expect("serializable"))
}

async fn list(client: &kube::Client, ar: &ApiResource) -> Vec<Value> {
    Api::<DynamicObject>::all_with(client.clone(), ar)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing {}: {e}", ar.kind))
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).expect("serializable"))
        .collect()
}

/// The first object of a kind, read by name: items of a list of built-in types carry no
/// apiVersion/kind.
async fn first(client: &kube::Client, ar: &ApiResource) -> Option<Value> {
    let item = list(client, ar).await.into_iter().next()?;
    get(client, ar, item["metadata"]["name"].as_str()?).await
}

fn established(crd: &Value) -> bool {
    crd["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    })
}

/// Polls until `f` gives `Some`, failing after `timeout` with Gatekeeper's log.
async fn wait_for<T, F, Fut>(gk: &Gatekeeper, timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    testenv::poll::within(timeout, Duration::from_millis(200), || {
        let probe = f();
        async move { probe.await.ok_or(()) }
    })
    .await
    .unwrap_or_else(|()| panic!("{what}: nothing after {timeout:?}\n{}", gk.logs_tail(80)))
}

/// Drops what differs between runs: uids, resource versions, timestamps, managed fields.
fn normalize(mut v: Value) -> Value {
    let meta = &mut v["metadata"];
    if let Some(m) = meta.as_object_mut() {
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
        ] {
            m.remove(k);
        }
    }
    if let Some(owners) = meta
        .get_mut("ownerReferences")
        .and_then(Value::as_array_mut)
    {
        for o in owners {
            o["uid"] = json!("<uid>");
        }
    }
    scrub_times(&mut v);
    v
}

fn scrub_times(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if matches!(
                    k.as_str(),
                    "lastTransitionTime" | "observedGeneration" | "lastCacheUpdateTime"
                ) || k.ends_with("Timestamp")
                    || k.ends_with("UID")
                    || k == "blockVAPBGenerationUntil"
                    || k == "gatekeeper.sh/block-vapb-generation-until"
                {
                    *x = json!("<scrubbed>");
                } else {
                    scrub_times(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(scrub_times),
        _ => {}
    }
}

/// Compares `value` (normalized) with `<observed>/<file>`, or writes it when
/// `UPDATE_GATEKEEPER_OBSERVED` is set. Returns the YAML.
fn check_observed(file: &str, value: Value) -> String {
    let yaml = serde_norway::to_string(&normalize(value)).expect("yaml");
    let path = observed_dir().join(file);
    if std::env::var_os("UPDATE_GATEKEEPER_OBSERVED").is_some_and(|v| !v.is_empty()) {
        std::fs::create_dir_all(observed_dir()).expect("fixtures folder");
        std::fs::write(&path, &yaml).expect("writing fixture");
        return yaml;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with UPDATE_GATEKEEPER_OBSERVED=1 to record what Gatekeeper made:\n{yaml}",
            path.display()
        )
    });
    assert_eq!(
        yaml,
        want,
        "Gatekeeper's {file} differs from {} (UPDATE_GATEKEEPER_OBSERVED=1 rewrites it)",
        path.display()
    );
    yaml
}

fn template(kind: &str, validation: Option<Value>, targets: Value) -> Value {
    let mut crd_spec = json!({ "names": { "kind": kind } });
    if let Some(v) = validation {
        crd_spec["validation"] = v;
    }
    json!({
        "apiVersion": "templates.gatekeeper.sh/v1",
        "kind": "ConstraintTemplate",
        "metadata": { "name": kind.to_ascii_lowercase() },
        "spec": { "crd": { "spec": crd_spec }, "targets": targets },
    })
}

/// A parameters schema with a nested object and arrays of objects and strings.
fn nested_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "message": { "type": "string" },
            "labels": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "key": { "type": "string" },
                        "allowedRegex": { "type": "string" }
                    }
                }
            },
            "options": {
                "type": "object",
                "properties": {
                    "strict": { "type": "boolean" },
                    "exemptImages": { "type": "array", "items": { "type": "string" } }
                }
            }
        }
    })
}

fn cel_template() -> Value {
    template(
        "K8sObservedCel",
        Some(json!({ "openAPIV3Schema": nested_schema() })),
        json!([{
            "target": "admission.k8s.gatekeeper.sh",
            "code": [{
                "engine": "K8sNativeValidation",
                "source": {
                    "generateVAP": true,
                    "variables": [{
                        "name": "required",
                        "expression": "has(variables.params.labels) ? variables.params.labels.map(l, l.key) : []"
                    }],
                    "validations": [{
                        "expression": "variables.required.all(k, has(object.metadata.labels) && k in object.metadata.labels)",
                        "messageExpression": "'missing one of the labels ' + variables.required.join(', ')"
                    }]
                }
            }]
        }]),
    )
}

fn rego_targets(package: &str) -> Value {
    json!([{
        "target": "admission.k8s.gatekeeper.sh",
        "rego": format!(
            "package {package}\n\nviolation[{{\"msg\": msg}}] {{\n  not input.review.object.metadata.labels.owner\n  msg := \"an owner label is required\"\n}}\n"
        )
    }])
}

fn rego_template(kind: &str, legacy_schema: bool) -> Value {
    template(
        kind,
        Some(json!({ "legacySchema": legacy_schema, "openAPIV3Schema": nested_schema() })),
        rego_targets(&kind.to_ascii_lowercase()),
    )
}

/// Gatekeeper's JSON log, condensed: each distinct (level, msg, error) once with its count, in
/// order of first appearance; lines about VAPs or webhooks in full (without ts, stacktrace).
fn log_summary(log: &str) -> String {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for line in log.lines() {
        let key = match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(mut m)) => {
                m.remove("ts");
                m.remove("stacktrace");
                let text = Value::Object(m.clone()).to_string();
                let lower = text.to_ascii_lowercase();
                if lower.contains("vap") || lower.contains("webhook") {
                    text
                } else {
                    let field =
                        |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    let error: String = field("error").chars().take(200).collect();
                    format!("{} {:?} {error}", field("level"), field("msg"))
                }
            }
            _ => line.chars().take(200).collect(),
        };
        match seen.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => seen.push((key, 1)),
        }
    }
    seen.iter()
        .map(|(k, n)| format!("{n:>3} × {k}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn generate_makes_constraint_crds_a_vap_and_a_binding() {
    let env = TestEnv::start();
    let gk = Gatekeeper::start(&env, GatekeeperOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!(
        "gatekeeper ready after {:?}, RSS {:?} KiB",
        gk.startup_time(),
        testenv::rss_kib(gk.pid())
    );
    let client = env.client_admin().await;
    let templates_ar = gatekeeper::template_api_resource();

    let cases = [
        cel_template(),
        rego_template("K8sObservedRegoLegacy", true),
        rego_template("K8sObservedRegoStructural", false),
        template(
            "K8sObservedNoSchema",
            None,
            rego_targets("k8sobservednoschema"),
        ),
    ];
    for t in &cases {
        let name = t["metadata"]["name"].as_str().expect("name").to_string();
        let applied = Instant::now();
        apply(&client, &templates_ar, t).await;
        let crd_name = format!("{name}.constraints.gatekeeper.sh");
        let crd = wait_for(&gk, CRD_TIMEOUT, &format!("CRD {crd_name}"), || async {
            get(&client, &crds(), &crd_name).await.filter(established)
        })
        .await;
        eprintln!(
            "template {name} applied → CRD {crd_name} Established after {:?}",
            applied.elapsed()
        );
        check_observed(&format!("crd-{name}.yaml"), crd);
    }

    // The CEL template: a VAP, then (after the template's VAPB block expires) a binding per
    // constraint.
    let cel = "k8sobservedcel";
    let vap = wait_for(&gk, CRD_TIMEOUT, "a ValidatingAdmissionPolicy", || async {
        first(&client, &vaps()).await
    })
    .await;
    let vap_yaml = check_observed(&format!("vap-{cel}.yaml"), vap);
    eprintln!("---- VAP\n{vap_yaml}");
    let constraint = json!({
        "apiVersion": "constraints.gatekeeper.sh/v1beta1",
        "kind": "K8sObservedCel",
        "metadata": { "name": "observed-labels" },
        "spec": {
            "enforcementAction": "deny",
            "match": {
                "kinds": [{ "apiGroups": [""], "kinds": ["ConfigMap"] }],
                "namespaces": ["observed-*"],
            },
            "parameters": {
                "message": "label them",
                "labels": [{ "key": "owner", "allowedRegex": "^[a-z]+$" }],
                "options": { "strict": true, "exemptImages": ["registry.example/*"] }
            }
        }
    });
    let constraint_ar = gatekeeper::constraint_api_resource("K8sObservedCel");
    let created = Instant::now();
    apply(&client, &constraint_ar, &constraint).await;
    let vapb = wait_for(
        &gk,
        VAPB_TIMEOUT,
        "a ValidatingAdmissionPolicyBinding",
        || async { first(&client, &vapbs()).await },
    )
    .await;
    eprintln!("constraint created → binding after {:?}", created.elapsed());
    let vapb_yaml = check_observed(&format!("vapb-{cel}-observed-labels.yaml"), vapb);
    eprintln!("---- VAPB\n{vapb_yaml}");

    // What the server keeps of parameters outside the schema: a constraint per Rego kind with
    // an undeclared field at the root and in a nested object.
    for kind in UNKNOWN_FIELDS_KINDS {
        let c = json!({
            "apiVersion": "constraints.gatekeeper.sh/v1beta1",
            "kind": kind,
            "metadata": { "name": "unknown-fields" },
            "spec": {
                "parameters": {
                    "message": "declared",
                    "undeclared": "kept?",
                    "options": { "strict": true, "undeclaredNested": 1 }
                }
            }
        });
        // Server-side apply refuses undeclared fields outright; a plain create prunes them
        // (with a warning) unless the schema preserves unknown fields.
        let api = Api::<DynamicObject>::all_with(
            client.clone(),
            &gatekeeper::constraint_api_resource(kind),
        );
        let obj: DynamicObject = serde_json::from_value(c).expect("valid constraint");
        let ssa = api
            .patch(
                "unknown-fields",
                &PatchParams::apply("gatekeeper-test").force(),
                &Patch::Apply(&obj),
            )
            .await;
        eprintln!(
            "server-side apply of undeclared parameters to {kind}: {}",
            match &ssa {
                Ok(_) => "accepted".to_string(),
                Err(e) => format!("refused: {e}"),
            }
        );
        if ssa.is_err() {
            api.create(&PostParams::default(), &obj)
                .await
                .unwrap_or_else(|e| panic!("creating a {kind}: {e}"));
        }
    }

    // What Gatekeeper wrote back: template and constraint status (byPod, VAP status).
    tokio::time::sleep(Duration::from_secs(2)).await;
    for t in &cases {
        let name = t["metadata"]["name"].as_str().expect("name");
        let observed = get(&client, &templates_ar, name).await.expect("template");
        check_observed(&format!("template-{name}.yaml"), observed);
    }
    let observed = get(&client, &constraint_ar, "observed-labels")
        .await
        .expect("constraint");
    check_observed("constraint-k8sobservedcel-observed-labels.yaml", observed);
    for kind in UNKNOWN_FIELDS_KINDS {
        let ar = gatekeeper::constraint_api_resource(kind);
        let observed = get(&client, &ar, "unknown-fields")
            .await
            .expect("constraint");
        let file = format!("constraint-{}-unknown-fields.yaml", ar.plural);
        let yaml = check_observed(&file, observed);
        eprintln!("---- {file}\n{yaml}");
    }

    eprintln!("---- gatekeeper log\n{}", log_summary(&gk.log_text()));
    let status = gk.stop();
    eprintln!("gatekeeper stopped: {status:?}");
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn without_generate_no_constraint_crd_appears() {
    let env = TestEnv::start();
    let mut gk = Gatekeeper::start(
        &env,
        GatekeeperOptions::with_operations(&["audit", "status"]),
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
    let client = env.client_admin().await;
    let t = rego_template("K8sNotGenerated", false);
    apply(&client, &gatekeeper::template_api_resource(), &t).await;
    // Long enough for the generating configuration to be done several times over (≈ 1 s).
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        get(
            &client,
            &crds(),
            "k8snotgenerated.constraints.gatekeeper.sh"
        )
        .await
        .is_none(),
        "a constraint CRD appeared without --operation=generate\n{}",
        gk.logs_tail(60)
    );
    let template = get(
        &client,
        &gatekeeper::template_api_resource(),
        "k8snotgenerated",
    )
    .await
    .expect("template");
    eprintln!(
        "template status without generate: {}",
        serde_json::to_string(&template["status"]).expect("json")
    );
    eprintln!("---- gatekeeper log\n{}", log_summary(&gk.log_text()));
    assert!(gk.exit_status().is_none(), "gatekeeper exited");
}
