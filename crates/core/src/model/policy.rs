//! Observed admission objects (VAP, VAPB), constraint CRDs and Gatekeeper's per-pod status.

use super::meta::{Meta, Source};
use chrono::{DateTime, Utc};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use serde_json::Value;

/// A ValidatingAdmissionPolicy as observed. v1beta1 objects are read into the v1 type: the
/// fields differ only in version. The typed object holds every field, so no raw JSON is kept
/// beside it (at 10,000 bindings that copy was a third of the memory): `raw()` rebuilds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub meta: Meta,
    pub api_version: String,
    /// The object without its status: what is compared and rewritten.
    pub object: ValidatingAdmissionPolicy,
    pub source: Source,
    /// The type checker's warnings (`status.typeChecking.expressionWarnings`, the same in v1
    /// and v1beta1; kube-controller-manager writes them), when they are about the object's
    /// current generation. Read to
    /// be reported (`policy-type-warning`), never compared: no write follows from status.
    pub type_warnings: Vec<TypeWarning>,
}

/// One of the type checker's warnings on a VAP: the expression's field path
/// (`spec.validations[0].expression`) and what the checker says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeWarning {
    pub field_ref: String,
    pub warning: String,
}

/// The type-checking warnings of a VAP as read (either version). The checker writes them
/// asynchronously with `status.observedGeneration`: warnings about an older generation are
/// about a spec that is no longer there, and are left out.
fn type_warnings(raw: &Value) -> Vec<TypeWarning> {
    let status = &raw["status"];
    let observed = status["observedGeneration"].as_i64();
    let current = raw["metadata"]["generation"].as_i64();
    if let (Some(o), Some(c)) = (observed, current)
        && o != c
    {
        return Vec::new();
    }
    status["typeChecking"]["expressionWarnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| {
            let warning = w["warning"].as_str().filter(|s| !s.is_empty())?;
            Some(TypeWarning {
                field_ref: w["fieldRef"].as_str().unwrap_or_default().to_string(),
                warning: warning.to_string(),
            })
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    pub meta: Meta,
    pub api_version: String,
    pub object: ValidatingAdmissionPolicyBinding,
    pub source: Source,
}

/// The object as JSON, with the apiVersion it was read as.
fn raw_of<T: serde::Serialize>(object: &T, api_version: &str) -> Value {
    let mut v = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut()
        && !api_version.is_empty()
    {
        o.insert("apiVersion".into(), Value::String(api_version.to_string()));
    }
    v
}

/// Reads a VAP or VAPB of either served version into the v1 type.
fn read_as_v1<T: serde::de::DeserializeOwned>(raw: Value, kind: &str) -> Result<T, String> {
    let mut v1 = raw;
    if let Some(obj) = v1.as_object_mut() {
        obj.insert(
            "apiVersion".into(),
            Value::String("admissionregistration.k8s.io/v1".into()),
        );
        // Status is never compared, and v1beta1 status shapes may differ (a VAP's type-checking
        // warnings are read beside the object: `Policy::type_warnings`).
        obj.remove("status");
    }
    serde_json::from_value(v1).map_err(|e| format!("{kind} is not readable: {e}"))
}

impl Policy {
    pub fn from_value(raw: Value, source: Source) -> Result<Self, String> {
        Ok(Policy {
            meta: Meta::from_value(&raw),
            api_version: raw["apiVersion"].as_str().unwrap_or_default().to_string(),
            type_warnings: type_warnings(&raw),
            object: read_as_v1(raw, super::VAP_KIND)?,
            source,
        })
    }
    pub fn name(&self) -> &str {
        &self.meta.name
    }
    /// The object as read (JSON).
    pub fn raw(&self) -> Value {
        raw_of(&self.object, &self.api_version)
    }
}

impl Binding {
    pub fn from_value(raw: Value, source: Source) -> Result<Self, String> {
        Ok(Binding {
            meta: Meta::from_value(&raw),
            api_version: raw["apiVersion"].as_str().unwrap_or_default().to_string(),
            object: read_as_v1(raw, super::VAPB_KIND)?,
            source,
        })
    }
    pub fn name(&self) -> &str {
        &self.meta.name
    }
    /// The object as read (JSON).
    pub fn raw(&self) -> Value {
        raw_of(&self.object, &self.api_version)
    }
    pub fn policy_name(&self) -> &str {
        self.object
            .spec
            .as_ref()
            .and_then(|s| s.policy_name.as_deref())
            .unwrap_or_default()
    }
}

/// A constraint CRD as observed: whether its kind is served and since when, and (to compare it
/// with the CRD its template defines) its metadata and spec.
#[derive(Debug, Clone, PartialEq)]
pub struct CrdInfo {
    pub name: String,
    pub group: String,
    pub kind: String,
    pub established: bool,
    /// `lastTransitionTime` of the `Established` condition, when it is true.
    pub established_since: Option<DateTime<Utc>>,
    pub meta: Meta,
    /// `metadata` as read (an update keeps its annotations, labels and other owners).
    pub metadata: Value,
    /// `spec` as read.
    pub spec: Value,
    pub source: Source,
}

impl CrdInfo {
    pub fn from_value(raw: &Value, source: Source) -> Self {
        let established = raw["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Established"));
        let is_true = established.is_some_and(|c| c["status"] == "True");
        let since = established
            .filter(|_| is_true)
            .and_then(|c| c["lastTransitionTime"].as_str())
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc));
        CrdInfo {
            name: raw["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            group: raw["spec"]["group"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            kind: raw["spec"]["names"]["kind"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            established: is_true,
            established_since: since,
            meta: Meta::from_value(raw),
            metadata: raw["metadata"].clone(),
            spec: raw["spec"].clone(),
            source,
        }
    }

    /// The object as read, without its status (what a diff and an update start from).
    pub fn raw(&self) -> Value {
        serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": self.metadata,
            "spec": self.spec,
        })
    }
}

/// Gatekeeper's `ConstraintTemplatePodStatus` / `ConstraintPodStatus`: shown, never decided on.
#[derive(Debug, Clone, PartialEq)]
pub struct PodStatus {
    pub kind: String,
    pub name: String,
    /// The template name or constraint `Kind/name` the status is about (from Gatekeeper's labels).
    pub about: String,
    pub pod: String,
    pub status: Value,
}

impl PodStatus {
    pub fn from_value(raw: &Value) -> Self {
        let labels = &raw["metadata"]["labels"];
        let label = |k: &str| labels[k].as_str().unwrap_or_default().to_string();
        let kind = raw["kind"].as_str().unwrap_or_default().to_string();
        let about = if kind == "ConstraintTemplatePodStatus" {
            label("internal.gatekeeper.sh/constrainttemplate-name")
        } else {
            super::ObjectId::new(
                label("internal.gatekeeper.sh/constraint-kind"),
                label("internal.gatekeeper.sh/constraint-name"),
            )
            .to_string()
        };
        PodStatus {
            name: raw["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            pod: label("internal.gatekeeper.sh/pod"),
            about,
            kind,
            status: raw["status"].clone(),
        }
    }
}
