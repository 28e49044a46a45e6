//! ConstraintTemplate (`templates.gatekeeper.sh/v1` and `v1beta1`: the fields we read are the same).

use super::meta::{Meta, Source};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub struct ConstraintTemplate {
    pub meta: Meta,
    pub api_version: String,
    /// `spec.crd.spec.names.kind`: the constraint kind this template defines.
    pub kind: Option<String>,
    pub targets: Vec<Target>,
    /// Why `spec.targets` could not be read as written (wrong types), if it could not.
    pub targets_error: Option<String>,
    pub source: Source,
    pub raw: Value,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    #[serde(default)]
    pub target: String,
    #[serde(default)]
    pub code: Vec<Code>,
    /// `targets[].operations` (Gatekeeper v3.21+): restricts the operations the policy matches.
    #[serde(default)]
    pub operations: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
pub struct Code {
    #[serde(default)]
    pub engine: String,
    #[serde(default)]
    pub source: Value,
}

/// The `source` of the `K8sNativeValidation` engine (Gatekeeper's `pkg/drivers/k8scel/schema`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct NativeSource {
    #[serde(default)]
    pub validations: Vec<Validation>,
    #[serde(default)]
    pub failure_policy: Option<String>,
    /// Singular on purpose: that is Gatekeeper's JSON key, though it maps to `matchConditions`.
    #[serde(default, rename = "matchCondition")]
    pub match_conditions: Vec<NamedExpression>,
    #[serde(default)]
    pub variables: Vec<NamedExpression>,
    #[serde(default, rename = "generateVAP")]
    pub generate_vap: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Validation {
    #[serde(default)]
    pub expression: String,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub message_expression: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, Default)]
pub struct NamedExpression {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub expression: String,
}

impl ConstraintTemplate {
    pub fn from_value(raw: Value, source: Source) -> Self {
        let meta = Meta::from_value(&raw);
        let kind = raw["spec"]["crd"]["spec"]["names"]["kind"]
            .as_str()
            .filter(|k| !k.is_empty())
            .map(str::to_string);
        let (targets, targets_error) = match raw["spec"].get("targets") {
            _ if super::undecodable(&raw).is_some() => (
                Vec::new(),
                super::undecodable(&raw).map(|why| format!("cannot be decoded: {why}")),
            ),
            None | Some(Value::Null) => (Vec::new(), None),
            Some(t) => match serde_json::from_value::<Vec<Target>>(t.clone()) {
                Ok(targets) => (targets, None),
                Err(e) => (Vec::new(), Some(format!("spec.targets: {e}"))),
            },
        };
        ConstraintTemplate {
            meta,
            api_version: raw["apiVersion"].as_str().unwrap_or_default().to_string(),
            kind,
            targets,
            targets_error,
            source,
            raw,
        }
    }

    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// The `K8sNativeValidation` code entries of the first target, raw.
    pub fn native_code(&self) -> Option<&Value> {
        self.targets
            .first()?
            .code
            .iter()
            .find(|c| c.engine == super::CEL_ENGINE)
            .map(|c| &c.source)
    }
}
