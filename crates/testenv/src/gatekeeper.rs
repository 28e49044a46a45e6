//! Gatekeeper in the test environment, two ways.
//!
//! - Without running it: CRDs written for these tests from Gatekeeper's documented API (not
//!   copied from its charts): the ConstraintTemplate CRD ([`install_gatekeeper_crds`]), and
//!   constraint CRDs shaped the way Gatekeeper generates them from a template
//!   ([`create_constraint_crd`]), so VAPs can use them as `paramKind`. Cheap, fine on the shared
//!   env.
//! - The real manager ([`Gatekeeper::start`]), built with its own chart CRDs by
//!   `tests/gatekeeper/build.sh` and found through `GATEKEEPER_ASSETS`. It replaces the
//!   hand-written ConstraintTemplate CRD with the real one and generates constraint CRDs (and
//!   VAPs) itself: run it on a private env ([`crate::TestEnv::start`]).

mod manager;

pub use manager::{
    GATEKEEPER_NAMESPACE, Gatekeeper, GatekeeperAssets, GatekeeperOptions, install_chart,
    install_chart_crds,
};

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

pub const TEMPLATES_GROUP: &str = "templates.gatekeeper.sh";
pub const CONSTRAINTS_GROUP: &str = "constraints.gatekeeper.sh";
/// The version Gatekeeper stores constraints in and names in generated `paramKind`s.
pub const CONSTRAINTS_VERSION: &str = "v1beta1";

const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);
const FIELD_MANAGER: &str = "testenv";

/// The schema of `metadata` in these CRDs: Gatekeeper requires a template's name to be
/// lower(kind), and a constraint kind's plural is lower(kind): at most a DNS label.
fn metadata_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "name": { "type": "string", "maxLength": 63 } }
    })
}

/// A cluster-scoped CRD of `group` named after its plural, labelled `label: yes`.
fn cluster_crd(group: &str, label: &str, names: Value, versions: &[Value]) -> Value {
    let plural = names["plural"].as_str().unwrap_or_default();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("{plural}.{group}"), "labels": { label: "yes" } },
        "spec": { "group": group, "scope": "Cluster", "names": names, "versions": versions }
    })
}

/// A served version `name` of a CRD with `schema` and a status subresource.
fn crd_version(name: &str, storage: bool, schema: &Value) -> Value {
    json!({
        "name": name,
        "served": true,
        "storage": storage,
        "schema": { "openAPIV3Schema": schema },
        "subresources": { "status": {} }
    })
}

/// The `constrainttemplates.templates.gatekeeper.sh` CRD: v1 (storage), v1beta1 and v1alpha1
/// served, cluster-scoped, status subresource.
pub fn constraint_template_crd() -> CustomResourceDefinition {
    let schema = json!({
        "type": "object",
        "properties": {
            "apiVersion": { "type": "string" },
            "kind": { "type": "string" },
            "metadata": metadata_schema(),
            "spec": {
                "type": "object",
                "properties": {
                    "crd": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "names": {
                                        "type": "object",
                                        "properties": {
                                            "kind": { "type": "string" },
                                            "shortNames": {
                                                "type": "array",
                                                "items": { "type": "string" }
                                            }
                                        }
                                    },
                                    "validation": {
                                        "type": "object",
                                        "default": { "legacySchema": false },
                                        "properties": {
                                            "legacySchema": { "type": "boolean", "default": false },
                                            // A user-written schema: any shape.
                                            "openAPIV3Schema": {
                                                "type": "object",
                                                "x-kubernetes-preserve-unknown-fields": true
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    },
                    "targets": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "target": { "type": "string" },
                                "rego": { "type": "string" },
                                "libs": { "type": "array", "items": { "type": "string" } },
                                "operations": { "type": "array", "items": { "type": "string" } },
                                "code": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["engine", "source"],
                                        "properties": {
                                            "engine": { "type": "string" },
                                            // Engine-specific (Rego, K8sNativeValidation): no schema.
                                            "source": { "x-kubernetes-preserve-unknown-fields": true }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            },
            "status": {
                "type": "object",
                "properties": {
                    "created": { "type": "boolean" },
                    "byPod": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            // Gatekeeper keeps growing per-pod fields (vapGenerationStatus, ...).
                            "x-kubernetes-preserve-unknown-fields": true
                        }
                    }
                }
            }
        }
    });
    let names = json!({
        "kind": "ConstraintTemplate",
        "listKind": "ConstraintTemplateList",
        "plural": "constrainttemplates",
        "singular": "constrainttemplate",
        "categories": ["all-constraint-templates"]
    });
    let versions = [("v1", true), ("v1beta1", false), ("v1alpha1", false)]
        .map(|(name, storage)| crd_version(name, storage, &schema));
    serde_json::from_value(cluster_crd(
        TEMPLATES_GROUP,
        "gatekeeper.sh/system",
        names,
        &versions,
    ))
    .expect("the ConstraintTemplate CRD literal matches the CRD type")
}

/// The constraint CRD Gatekeeper generates for `template` (a ConstraintTemplate as JSON):
/// `<lower(kind)>.constraints.gatekeeper.sh`, v1beta1 (storage) and v1alpha1 served,
/// cluster-scoped, categories `constraint`/`constraints`, `spec.parameters` typed by the
/// template's schema, everything else in `spec` kept as unknown fields.
pub fn constraint_crd(template: &Value) -> anyhow::Result<CustomResourceDefinition> {
    let names = &template["spec"]["crd"]["spec"]["names"];
    let kind = names["kind"]
        .as_str()
        .filter(|k| !k.is_empty())
        .context("template has no spec.crd.spec.names.kind")?;
    let plural = kind.to_ascii_lowercase();
    let validation = &template["spec"]["crd"]["spec"]["validation"];
    let parameters = match validation.get("openAPIV3Schema") {
        Some(Value::Object(schema)) if !schema.is_empty() => {
            let mut schema = schema.clone();
            // A structural schema needs a type at the root; Gatekeeper's templates imply object.
            schema.entry("type").or_insert_with(|| json!("object"));
            if validation["legacySchema"].as_bool() == Some(true) {
                schema.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
            }
            Value::Object(schema)
        }
        _ => json!({ "x-kubernetes-preserve-unknown-fields": true }),
    };
    let schema = json!({
        "type": "object",
        "properties": {
            "metadata": metadata_schema(),
            "spec": {
                "type": "object",
                "properties": {
                    "parameters": parameters,
                    // Match and enforcement fields are interpreted by Gatekeeper, not validated
                    // here; kubectl-vap must cope with whatever users put in them.
                    "match": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                    "enforcementAction": { "type": "string" },
                    "scopedEnforcementActions": {
                        "type": "array",
                        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
                    }
                },
                "x-kubernetes-preserve-unknown-fields": true
            },
            "status": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
        }
    });
    let short_names = names.get("shortNames").cloned().unwrap_or(json!([]));
    let names = json!({
        "kind": kind,
        "listKind": format!("{kind}List"),
        "plural": plural,
        "singular": plural,
        "shortNames": short_names,
        "categories": ["constraint", "constraints"]
    });
    let versions = [(CONSTRAINTS_VERSION, true), ("v1alpha1", false)]
        .map(|(name, storage)| crd_version(name, storage, &schema));
    serde_json::from_value(cluster_crd(
        CONSTRAINTS_GROUP,
        "gatekeeper.sh/constraint",
        names,
        &versions,
    ))
    .context("building the constraint CRD")
}

/// How to address constraints of `kind` with a `DynamicObject` API.
pub fn constraint_api_resource(kind: &str) -> ApiResource {
    ApiResource {
        group: CONSTRAINTS_GROUP.into(),
        version: CONSTRAINTS_VERSION.into(),
        api_version: format!("{CONSTRAINTS_GROUP}/{CONSTRAINTS_VERSION}"),
        kind: kind.into(),
        plural: kind.to_ascii_lowercase(),
    }
}

/// How to address ConstraintTemplates (v1) with a `DynamicObject` API.
pub fn template_api_resource() -> ApiResource {
    ApiResource {
        group: TEMPLATES_GROUP.into(),
        version: "v1".into(),
        api_version: format!("{TEMPLATES_GROUP}/v1"),
        kind: "ConstraintTemplate".into(),
        plural: "constrainttemplates".into(),
    }
}

/// A ConstraintTemplate of `kind` at `templates.gatekeeper.sh/<version>`, named `lower(kind)`
/// as Gatekeeper requires: `crd_spec` (its `names.kind` set to `kind`) and `targets`.
pub fn template(kind: &str, version: &str, crd_spec: Value, targets: Value) -> Value {
    let mut crd_spec = crd_spec;
    crd_spec["names"]["kind"] = json!(kind);
    json!({
        "apiVersion": format!("{TEMPLATES_GROUP}/{version}"),
        "kind": "ConstraintTemplate",
        "metadata": { "name": kind.to_ascii_lowercase() },
        "spec": { "crd": { "spec": crd_spec }, "targets": targets }
    })
}

/// A template's `targets` with one `K8sNativeValidation` (CEL) `source`.
pub fn cel_targets(source: Value) -> Value {
    json!([{ "target": "admission.k8s.gatekeeper.sh",
             "code": [{ "engine": "K8sNativeValidation", "source": source }] }])
}

/// A constraint of `kind` (`constraints.gatekeeper.sh/v1beta1`) named `name`, with `spec`.
pub fn constraint(kind: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": format!("{CONSTRAINTS_GROUP}/{CONSTRAINTS_VERSION}"),
        "kind": kind,
        "metadata": { "name": name },
        "spec": spec
    })
}

/// The CRD's `Established` condition is `True`.
pub fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// Installs (server-side applies) the ConstraintTemplate CRD and waits until it is Established.
/// The `configs.config.gatekeeper.sh` CRD, from Gatekeeper's documented API: namespaced,
/// v1alpha1, `spec` kept as given (kubectl-vap reads `spec.match[]`).
pub fn config_crd() -> CustomResourceDefinition {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "configs.config.gatekeeper.sh" },
        "spec": {
            "group": "config.gatekeeper.sh",
            "scope": "Namespaced",
            "names": { "kind": "Config", "listKind": "ConfigList", "plural": "configs", "singular": "config" },
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": { "type": "string" },
                        "kind": { "type": "string" },
                        "metadata": { "type": "object" },
                        "spec": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
                    }
                } }
            }]
        }
    });
    serde_json::from_value(crd).expect("the Config CRD is a CustomResourceDefinition")
}

/// Installs [`config_crd`] and waits until it is Established.
pub async fn install_config_crd(client: &kube::Client) -> anyhow::Result<()> {
    apply_and_establish(client, &config_crd()).await?;
    Ok(())
}

/// Idempotent, so every test may call it on the shared apiserver.
pub async fn install_gatekeeper_crds(client: &kube::Client) -> anyhow::Result<()> {
    apply_and_establish(client, &constraint_template_crd()).await?;
    Ok(())
}

/// Creates (server-side applies) the constraint CRD for `template` and waits until it is
/// Established; returns the CRD as the server has it.
pub async fn create_constraint_crd(
    client: &kube::Client,
    template: &Value,
) -> anyhow::Result<CustomResourceDefinition> {
    apply_and_establish(client, &constraint_crd(template)?).await
}

/// Creates (server-side applies) the CRD `crd` (JSON) and waits until it is Established:
/// for tests that want exactly the CRD kubectl-vap builds for a template.
pub async fn apply_crd(
    client: &kube::Client,
    crd: &Value,
) -> anyhow::Result<CustomResourceDefinition> {
    let crd: CustomResourceDefinition =
        serde_json::from_value(crd.clone()).context("the CRD does not parse")?;
    apply_and_establish(client, &crd).await
}

async fn apply_and_establish(
    client: &kube::Client,
    crd: &CustomResourceDefinition,
) -> anyhow::Result<CustomResourceDefinition> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().context("CRD without a name")?;
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(crd),
    )
    .await
    .with_context(|| format!("applying CRD {name}"))?;
    wait_established(&api, &name).await
}

async fn wait_established(
    api: &Api<CustomResourceDefinition>,
    name: &str,
) -> anyhow::Result<CustomResourceDefinition> {
    let deadline = Instant::now() + ESTABLISH_TIMEOUT;
    loop {
        let crd = api
            .get(name)
            .await
            .with_context(|| format!("reading CRD {name}"))?;
        if established(&crd) && served(api, &crd).await {
            return Ok(crd);
        }
        if Instant::now() > deadline {
            bail!(
                "CRD {name} not Established after {ESTABLISH_TIMEOUT:?}: {:?}",
                crd.status
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Objects of the CRD's storage version can be listed: an Established CRD can answer 404 for a
/// moment while the server installs its handler (seen in CI: a constraint created at once met
/// `404 page not found`).
async fn served(api: &Api<CustomResourceDefinition>, crd: &CustomResourceDefinition) -> bool {
    let Some(version) = crd.spec.versions.iter().find(|v| v.storage) else {
        return true;
    };
    let resource = ApiResource {
        group: crd.spec.group.clone(),
        version: version.name.clone(),
        api_version: format!("{}/{}", crd.spec.group, version.name),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    };
    let objects: Api<kube::api::DynamicObject> =
        Api::all_with(api.clone().into_client(), &resource);
    objects
        .list(&kube::api::ListParams::default().limit(1))
        .await
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn required_labels() -> Value {
        template(
            "K8sRequiredLabels",
            "v1",
            json!({ "validation": { "openAPIV3Schema": {
                "properties": { "labels": { "type": "array", "items": { "type": "string" } } }
            } } }),
            json!([{ "target": "admission.k8s.gatekeeper.sh", "rego": "package x" }]),
        )
    }

    #[test]
    fn template_is_named_after_its_kind() {
        let t = required_labels();
        assert_eq!(t["apiVersion"], "templates.gatekeeper.sh/v1");
        assert_eq!(t["metadata"]["name"], "k8srequiredlabels");
        assert_eq!(
            t["spec"]["crd"]["spec"]["names"]["kind"],
            "K8sRequiredLabels"
        );
        assert_eq!(
            constraint("K8sRequiredLabels", "c", json!({}))["apiVersion"],
            "constraints.gatekeeper.sh/v1beta1"
        );
    }

    #[test]
    fn constraint_crd_follows_gatekeeper_conventions() {
        let crd = constraint_crd(&required_labels()).expect("valid template");
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("k8srequiredlabels.constraints.gatekeeper.sh")
        );
        let spec = &crd.spec;
        assert_eq!(spec.scope, "Cluster");
        assert_eq!(spec.names.plural, "k8srequiredlabels");
        assert_eq!(
            spec.names.categories.as_deref(),
            Some(&["constraint".to_string(), "constraints".to_string()][..])
        );
        let storage: Vec<_> = spec
            .versions
            .iter()
            .filter(|v| v.storage)
            .map(|v| &v.name)
            .collect();
        assert_eq!(storage, ["v1beta1"]);
        let v = serde_json::to_value(&spec.versions[0]).expect("serializable");
        let params =
            &v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["parameters"];
        assert_eq!(params["type"], "object", "root type added");
        assert_eq!(params["properties"]["labels"]["type"], "array");
    }

    #[test]
    fn crds_carry_gatekeepers_labels() {
        let label = |crd: &CustomResourceDefinition, key: &str| {
            crd.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(key))
                .cloned()
        };
        let template_crd = constraint_template_crd();
        assert_eq!(
            label(&template_crd, "gatekeeper.sh/system").as_deref(),
            Some("yes")
        );
        let crd = constraint_crd(&required_labels()).expect("valid template");
        assert_eq!(
            label(&crd, "gatekeeper.sh/constraint").as_deref(),
            Some("yes")
        );
    }

    #[test]
    fn template_without_kind_is_an_error() {
        assert!(constraint_crd(&json!({ "spec": {} })).is_err());
    }

    #[test]
    fn template_crd_serves_three_versions_stores_v1() {
        let crd = constraint_template_crd();
        let served: Vec<_> = crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.storage))
            .collect();
        assert_eq!(
            served,
            [("v1", true), ("v1beta1", false), ("v1alpha1", false)]
        );
    }
}
