//! The constraint CRD a template defines, built as Gatekeeper v3.23 builds it (its constraint
//! framework's `CreateCRD`/`CreateSchema`, its `spec.match` schema, the template's
//! `legacySchema`), so that either controller can take over from the other without a write.
//!
//! Gatekeeper compares its proposed CRD spec with the live one by Go struct equality, and we
//! compare ours with the live one as JSON; both only agree when the two builders agree to the
//! byte, descriptions included. `crd_match_schema.json` therefore holds Gatekeeper's match schema
//! as data (see its note in [`match_schema`]); the e2e tests compare with a real Gatekeeper.

use crate::model::{
    CONSTRAINTS_GROUP, ConstraintTemplate, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
    TEMPLATE_OWNER_API_VERSION,
};
use serde_json::{Map, Value, json};
use std::sync::OnceLock;

pub const CRD_API_VERSION: &str = "apiextensions.k8s.io/v1";
pub const CRD_KIND: &str = "CustomResourceDefinition";
/// Gatekeeper's mark on the CRDs it generates (kept on ours, so its tools recognise them).
pub const CONSTRAINT_LABEL: &str = "gatekeeper.sh/constraint";
/// The versions Gatekeeper serves constraints at; the first is stored.
const VERSIONS: [&str; 2] = ["v1beta1", "v1alpha1"];

/// `<lowercase kind>.constraints.gatekeeper.sh`: the plural is the lowercase kind.
pub fn crd_name(kind: &str) -> String {
    format!("{}.{CONSTRAINTS_GROUP}", kind.to_lowercase())
}

/// The schema of `spec.match`: Gatekeeper v3.23's, generated there from its `Match` type
/// (Apache-2.0, like this project). Interface data, not ours to word: see the module docs.
fn match_schema() -> Result<&'static Value, String> {
    static SCHEMA: OnceLock<Result<Value, String>> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            serde_json::from_str(include_str!("crd_match_schema.json"))
                .map_err(|e| format!("the built-in match schema does not parse: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The desired CRD of template `t` (whose kind is `kind`), as JSON ready to send; or why it
/// cannot be built as written.
pub fn desired_crd(t: &ConstraintTemplate, kind: &str) -> Result<Value, String> {
    let plural = kind.to_lowercase();
    let mut names = json!({
        "kind": kind,
        "listKind": format!("{kind}List"),
        "plural": plural,
        "singular": plural,
        "categories": ["constraint", "constraints"],
    });
    if let Some(short) = short_names(t)? {
        names["shortNames"] = short;
    }
    let mut spec_props = Map::new();
    spec_props.insert("match".into(), match_schema()?.clone());
    spec_props.insert(
        "enforcementAction".into(),
        json!({ "type": "string", "default": "deny" }),
    );
    spec_props.insert(
        "scopedEnforcementActions".into(),
        json!({
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "action": { "type": "string" },
                    "enforcementPoints": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": { "name": { "type": "string" } }
                        }
                    }
                }
            }
        }),
    );
    if let Some(parameters) = parameters_schema(t)? {
        spec_props.insert("parameters".into(), parameters);
    }
    let schema = json!({
        "type": "object",
        "properties": {
            "metadata": {
                "type": "object",
                "properties": { "name": { "type": "string", "maxLength": 63 } }
            },
            "spec": { "type": "object", "properties": spec_props },
            "status": { "x-kubernetes-preserve-unknown-fields": true }
        }
    });
    let versions: Vec<Value> = VERSIONS
        .iter()
        .enumerate()
        .map(|(i, v)| {
            json!({
                "name": v,
                "served": true,
                "storage": i == 0,
                "schema": { "openAPIV3Schema": schema },
                "subresources": { "status": {} },
                "additionalPrinterColumns": [
                    {
                        "name": "enforcement-action",
                        "type": "string",
                        "description": "Type of enforcement action",
                        "jsonPath": ".spec.enforcementAction"
                    },
                    {
                        "name": "total-violations",
                        "type": "integer",
                        "description": "Total number of violations",
                        "jsonPath": ".status.totalViolations"
                    }
                ]
            })
        })
        .collect();
    // Gatekeeper copies the template's labels onto the CRD it creates.
    let mut labels: Map<String, Value> = t
        .meta
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    labels.insert(CONSTRAINT_LABEL.into(), json!("yes"));
    labels.insert(MANAGED_BY_LABEL.into(), json!(MANAGED_BY_VALUE));
    Ok(json!({
        "apiVersion": CRD_API_VERSION,
        "kind": CRD_KIND,
        "metadata": {
            "name": crd_name(kind),
            "labels": labels,
            "ownerReferences": [{
                "apiVersion": TEMPLATE_OWNER_API_VERSION,
                "kind": "ConstraintTemplate",
                "name": t.name(),
                "uid": t.meta.uid,
                "controller": true,
                "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "group": CONSTRAINTS_GROUP,
            "names": names,
            "scope": "Cluster",
            "versions": versions,
            "conversion": { "strategy": "None" }
        }
    }))
}

/// Whether the CRD of `t` can be built as written (the parts of it the template controls).
pub fn validate(t: &ConstraintTemplate) -> Result<(), String> {
    short_names(t)?;
    parameters_schema(t).map(|_| ())
}

fn short_names(t: &ConstraintTemplate) -> Result<Option<Value>, String> {
    match &t.raw["spec"]["crd"]["spec"]["names"]["shortNames"] {
        Value::Null => Ok(None),
        Value::Array(a) if a.is_empty() => Ok(None),
        Value::Array(a) if a.iter().all(Value::is_string) => Ok(Some(Value::Array(a.clone()))),
        _ => Err("spec.crd.spec.names.shortNames must be a list of strings".into()),
    }
}

/// `legacySchema` when the template says; otherwise the default of its apiVersion (v1: false,
/// v1beta1 and v1alpha1: true), as Gatekeeper's template CRD defaults it.
fn legacy_schema(t: &ConstraintTemplate) -> Result<bool, String> {
    match &t.raw["spec"]["crd"]["spec"]["validation"]["legacySchema"] {
        Value::Bool(b) => Ok(*b),
        Value::Null => Ok(!t.api_version.ends_with("/v1")),
        other => Err(format!(
            "spec.crd.spec.validation.legacySchema must be true or false, not {other}"
        )),
    }
}

/// `spec.parameters` of the constraint: the template's `openAPIV3Schema` as the server would
/// store it, with `x-kubernetes-preserve-unknown-fields` added everywhere under `legacySchema`.
fn parameters_schema(t: &ConstraintTemplate) -> Result<Option<Value>, String> {
    let legacy = legacy_schema(t)?;
    let schema = match &t.raw["spec"]["crd"]["spec"]["validation"]["openAPIV3Schema"] {
        Value::Null if legacy => json!({}),
        Value::Null => return Ok(None),
        v @ Value::Object(_) => normalize_schema(v),
        _ => return Err("spec.crd.spec.validation.openAPIV3Schema must be an object".into()),
    };
    let mut schema = schema;
    if legacy {
        add_preserve_unknown_fields(&mut schema)?;
    }
    Ok(Some(schema))
}

/// Under `legacySchema`, parameters of any shape are kept: every object (or untyped) level
/// preserves unknown fields, and an array without an item schema gets one that does.
fn add_preserve_unknown_fields(s: &mut Value) -> Result<(), String> {
    let Some(o) = s.as_object_mut() else {
        return Ok(());
    };
    match o.get("type").and_then(Value::as_str).unwrap_or("") {
        "" | "object" => {
            o.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
        }
        "array"
            if !o
                .get("items")
                .is_some_and(|i| i.is_object() || i.is_array()) =>
        {
            o.insert(
                "items".into(),
                json!({ "x-kubernetes-preserve-unknown-fields": true }),
            );
        }
        _ => {}
    }
    if let Some(Value::Object(props)) = o.get_mut("properties") {
        for v in props.values_mut() {
            add_preserve_unknown_fields(v)?;
        }
    }
    match o.get_mut("items") {
        Some(i @ Value::Object(_)) => add_preserve_unknown_fields(i)?,
        Some(Value::Array(_)) => {
            return Err(
                "openAPIV3Schema: a list of item schemas is not supported under legacySchema"
                    .into(),
            );
        }
        _ => {}
    }
    if let Some(a @ Value::Object(_)) = o.get_mut("additionalProperties") {
        add_preserve_unknown_fields(a)?;
    }
    Ok(())
}

/// Schema keywords whose zero value (false, "", [] or {}) the server does not keep (Go's
/// `omitempty` on non-pointer fields); the others are kept as written.
const OMITTED_WHEN_ZERO: [&str; 21] = [
    "id",
    "$schema",
    "description",
    "type",
    "format",
    "title",
    "pattern",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "uniqueItems",
    "nullable",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "enum",
    "required",
    "allOf",
    "oneOf",
    "anyOf",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-validations",
    "properties",
];
const KEPT: [&str; 20] = [
    "$ref",
    "default",
    "maximum",
    "minimum",
    "maxLength",
    "minLength",
    "maxItems",
    "minItems",
    "multipleOf",
    "maxProperties",
    "minProperties",
    "items",
    "not",
    "additionalProperties",
    "additionalItems",
    "externalDocs",
    "example",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
];
/// Keywords holding a map of schemas (omitted when empty).
const SCHEMA_MAPS: [&str; 3] = ["patternProperties", "dependencies", "definitions"];

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) => false,
    }
}

/// A JSON schema as the API server stores it inside a CRD: unknown keywords dropped, zero
/// values of `omitempty` keywords dropped, recursively. Both sides of a comparison and every
/// body we send go through it, so a template written with `nullable: false` or a keyword the
/// server does not know is not a difference that never goes away.
pub fn normalize_schema(v: &Value) -> Value {
    let Value::Object(o) = v else {
        return v.clone();
    };
    let mut out = Map::new();
    for (k, val) in o {
        let key = k.as_str();
        let kept = if OMITTED_WHEN_ZERO.contains(&key) || SCHEMA_MAPS.contains(&key) {
            !is_zero(val)
        } else {
            KEPT.contains(&key) && !val.is_null()
        };
        if !kept {
            continue;
        }
        let val = match key {
            "properties" | "patternProperties" | "definitions" => map_values(val, normalize_schema),
            // A dependency is a schema or a list of property names.
            "dependencies" => map_values(val, |d| match d {
                Value::Object(_) => normalize_schema(d),
                other => other.clone(),
            }),
            "items" => match val {
                Value::Array(a) => Value::Array(a.iter().map(normalize_schema).collect()),
                other => normalize_schema(other),
            },
            "allOf" | "oneOf" | "anyOf" => match val {
                Value::Array(a) => Value::Array(a.iter().map(normalize_schema).collect()),
                other => other.clone(),
            },
            "not" | "additionalProperties" | "additionalItems" => normalize_schema(val),
            _ => val.clone(),
        };
        out.insert(k.clone(), val);
    }
    Value::Object(out)
}

fn map_values(v: &Value, f: impl Fn(&Value) -> Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), f(v))).collect()),
        other => other.clone(),
    }
}

/// A CRD spec with the server's defaults filled in and the stored form of every schema, so a
/// desired and an observed spec compare equal exactly when the server would store the same.
pub fn normalize_spec(spec: &Value) -> Value {
    let mut s = spec.clone();
    let Some(o) = s.as_object_mut() else {
        return s;
    };
    if o.get("preserveUnknownFields") == Some(&json!(false)) {
        o.remove("preserveUnknownFields");
    }
    o.entry("conversion")
        .or_insert_with(|| json!({ "strategy": "None" }));
    if let Some(names) = o.get_mut("names").and_then(Value::as_object_mut) {
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        names
            .entry("singular")
            .or_insert_with(|| json!(kind.to_lowercase()));
        if !kind.is_empty() {
            names
                .entry("listKind")
                .or_insert_with(|| json!(format!("{kind}List")));
        }
        names.retain(|_, v| !is_zero(v));
    }
    if let Some(Value::Array(versions)) = o.get_mut("versions") {
        for v in versions.iter_mut().filter_map(Value::as_object_mut) {
            v.retain(|k, val| !(is_zero(val) && k != "served" && k != "storage"));
            if let Some(schema) = v
                .get_mut("schema")
                .and_then(|s| s.get_mut("openAPIV3Schema"))
            {
                *schema = normalize_schema(schema);
            }
        }
    }
    s
}

/// Descriptions removed everywhere: how a CRD written by another Gatekeeper version is
/// compared (the wording of a description is no reason to rewrite a CRD).
fn without_descriptions(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if o.get("description").is_some_and(Value::is_string) {
                o.remove("description");
            }
            o.values_mut().for_each(without_descriptions);
        }
        Value::Array(a) => a.iter_mut().for_each(without_descriptions),
        _ => {}
    }
}

/// The top-level spec fields in which `observed` differs from `desired`, after normalizing
/// both. `semantic` (a CRD another writer made) ignores description texts.
pub fn spec_diff(desired: &Value, observed: &Value, semantic: bool) -> Vec<&'static str> {
    const FIELDS: [&str; 6] = [
        "group",
        "names",
        "scope",
        "versions",
        "conversion",
        "preserveUnknownFields",
    ];
    let (mut d, mut o) = (normalize_spec(desired), normalize_spec(observed));
    if semantic {
        without_descriptions(&mut d);
        without_descriptions(&mut o);
    }
    let mut diff: Vec<&'static str> = FIELDS
        .iter()
        .filter(|f| d.get(**f) != o.get(**f))
        .map(|f| match *f {
            "group" => "spec.group",
            "names" => "spec.names",
            "scope" => "spec.scope",
            "versions" => "spec.versions",
            "conversion" => "spec.conversion",
            _ => "spec.preserveUnknownFields",
        })
        .collect();
    let known = |k: &str| FIELDS.contains(&k);
    let extra = |a: &Value, b: &Value| {
        a.as_object()
            .into_iter()
            .flatten()
            .any(|(k, v)| !known(k) && b.get(k) != Some(v))
    };
    if extra(&d, &o) || extra(&o, &d) {
        diff.push("spec");
    }
    diff
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Source;

    fn template(api_version: &str, validation: Value) -> ConstraintTemplate {
        ConstraintTemplate::from_value(
            json!({
                "apiVersion": api_version,
                "kind": "ConstraintTemplate",
                "metadata": { "name": "k8sdemo", "uid": "u-1", "labels": { "team": "a" } },
                "spec": {
                    "crd": { "spec": { "names": { "kind": "K8sDemo", "shortNames": ["kd"] }, "validation": validation } },
                    "targets": [{ "target": "admission.k8s.gatekeeper.sh", "rego": "package x" }]
                }
            }),
            Source::default(),
        )
    }

    fn parameters(t: &ConstraintTemplate) -> Value {
        let crd = desired_crd(t, "K8sDemo").expect("crd");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["parameters"]
            .clone()
    }

    #[test]
    fn the_crd_has_gatekeepers_identity_and_shape() {
        let t = template("templates.gatekeeper.sh/v1", json!({}));
        let crd = desired_crd(&t, "K8sDemo").expect("crd");
        assert_eq!(crd["metadata"]["name"], "k8sdemo.constraints.gatekeeper.sh");
        assert_eq!(crd["metadata"]["labels"]["gatekeeper.sh/constraint"], "yes");
        assert_eq!(
            crd["metadata"]["labels"]["team"], "a",
            "template labels are copied"
        );
        let owner = &crd["metadata"]["ownerReferences"][0];
        assert_eq!(owner["apiVersion"], "templates.gatekeeper.sh/v1beta1");
        assert_eq!(owner["uid"], "u-1");
        assert_eq!(owner["controller"], true);
        let spec = &crd["spec"];
        assert_eq!(spec["scope"], "Cluster");
        assert_eq!(spec["names"]["plural"], "k8sdemo");
        assert_eq!(spec["names"]["listKind"], "K8sDemoList");
        assert_eq!(spec["names"]["shortNames"], json!(["kd"]));
        assert_eq!(
            spec["names"]["categories"],
            json!(["constraint", "constraints"])
        );
        let versions: Vec<(&str, bool)> = spec["versions"]
            .as_array()
            .expect("versions")
            .iter()
            .map(|v| (v["name"].as_str().unwrap_or(""), v["storage"] == true))
            .collect();
        assert_eq!(versions, [("v1beta1", true), ("v1alpha1", false)]);
        let schema = &spec["versions"][1]["schema"]["openAPIV3Schema"];
        assert_eq!(
            schema["properties"]["status"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        let sp = &schema["properties"]["spec"]["properties"];
        assert_eq!(sp["enforcementAction"]["default"], "deny");
        assert!(sp["match"]["properties"]["kinds"].is_object());
        assert!(
            sp.get("parameters").is_none(),
            "v1 without a schema has no parameters"
        );
    }

    #[test]
    fn legacy_schema_defaults_by_api_version() {
        let nested = json!({ "openAPIV3Schema": {
            "type": "object",
            "properties": {
                "labels": { "type": "array", "items": { "type": "object", "properties": { "key": { "type": "string" } } } },
                "any": { "type": "array" }
            }
        }});
        let v1 = parameters(&template("templates.gatekeeper.sh/v1", nested.clone()));
        assert!(v1.get("x-kubernetes-preserve-unknown-fields").is_none());
        assert!(v1["properties"]["any"].get("items").is_none());
        let beta = parameters(&template("templates.gatekeeper.sh/v1beta1", nested.clone()));
        assert_eq!(beta["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(
            beta["properties"]["labels"]["items"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert!(
            beta["properties"]["labels"]
                .get("x-kubernetes-preserve-unknown-fields")
                .is_none()
        );
        assert_eq!(
            beta["properties"]["any"]["items"],
            json!({ "x-kubernetes-preserve-unknown-fields": true })
        );
        let mut explicit = nested;
        explicit["legacySchema"] = json!(false);
        let off = parameters(&template("templates.gatekeeper.sh/v1beta1", explicit));
        assert_eq!(off, v1);
    }

    #[test]
    fn legacy_schema_without_a_schema_takes_any_parameters() {
        let t = template(
            "templates.gatekeeper.sh/v1",
            json!({ "legacySchema": true }),
        );
        assert_eq!(
            parameters(&t),
            json!({ "x-kubernetes-preserve-unknown-fields": true })
        );
    }

    #[test]
    fn schemas_are_stored_as_the_server_keeps_them() {
        let s = json!({
            "type": "object", "nullable": false, "unknownKeyword": 1, "required": [],
            "properties": { "a": { "type": "string", "description": "", "x-kubernetes-preserve-unknown-fields": false } }
        });
        assert_eq!(
            normalize_schema(&s),
            json!({ "type": "object", "properties": { "a": { "type": "string", "x-kubernetes-preserve-unknown-fields": false } } })
        );
    }

    #[test]
    fn bad_shapes_are_errors_not_panics() {
        let t = template(
            "templates.gatekeeper.sh/v1",
            json!({ "openAPIV3Schema": "x" }),
        );
        assert!(desired_crd(&t, "K8sDemo").is_err());
        let t = template(
            "templates.gatekeeper.sh/v1",
            json!({ "legacySchema": "yes" }),
        );
        assert!(desired_crd(&t, "K8sDemo").is_err());
    }

    #[test]
    fn server_defaults_and_descriptions_compare_as_intended() {
        let t = template("templates.gatekeeper.sh/v1", json!({}));
        let desired = desired_crd(&t, "K8sDemo").expect("crd");
        let mut stored = desired["spec"].clone();
        stored.as_object_mut().expect("spec").remove("conversion");
        assert!(spec_diff(&desired["spec"], &stored, false).is_empty());
        let mut reworded = desired["spec"].clone();
        reworded["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["match"]["description"] = json!("other words");
        assert_eq!(
            spec_diff(&desired["spec"], &reworded, false),
            ["spec.versions"]
        );
        assert!(spec_diff(&desired["spec"], &reworded, true).is_empty());
        let mut scoped = desired["spec"].clone();
        scoped["scope"] = json!("Namespaced");
        assert_eq!(spec_diff(&desired["spec"], &scoped, true), ["spec.scope"]);
    }
}
