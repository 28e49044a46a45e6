//! Constraints: objects of any kind in `constraints.gatekeeper.sh`, one CRD per template.

use super::meta::{Meta, Source};
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    pub meta: Meta,
    pub api_version: String,
    pub kind: String,
    /// `spec.enforcementAction` as written (empty means `deny`).
    pub enforcement_action: Option<String>,
    pub scoped_actions: Vec<ScopedAction>,
    pub matcher: Match,
    /// Why part of the spec could not be read as written, if so: the constraint cannot be bound.
    pub spec_error: Option<String>,
    pub source: Source,
    pub raw: Value,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ScopedAction {
    #[serde(default)]
    pub action: String,
    #[serde(default)]
    pub enforcement_points: Vec<EnforcementPoint>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
pub struct EnforcementPoint {
    #[serde(default)]
    pub name: String,
}

/// `spec.match`. Kinds, namespaces, excluded namespaces and name are evaluated by the VAP's
/// match conditions from the params; selectors and scope go into the binding.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Match {
    #[serde(default)]
    pub kinds: Vec<KindMatch>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default)]
    pub excluded_namespaces: Vec<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub label_selector: Option<Value>,
    #[serde(default)]
    pub namespace_selector: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct KindMatch {
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub kinds: Vec<String>,
}

impl Constraint {
    pub fn from_value(raw: Value, source: Source) -> Self {
        let meta = Meta::from_value(&raw);
        let spec = &raw["spec"];
        let mut errors = Vec::new();
        if let Some(why) = super::undecodable(&raw) {
            errors.push(format!("cannot be decoded: {why}"));
        }
        let enforcement_action = match &spec["enforcementAction"] {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => {
                errors.push(format!(
                    "spec.enforcementAction must be a string, not {other}"
                ));
                None
            }
        };
        let scoped_actions = match spec.get("scopedEnforcementActions") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => serde_json::from_value(v.clone()).unwrap_or_else(|e| {
                errors.push(format!("spec.scopedEnforcementActions: {e}"));
                Vec::new()
            }),
        };
        let matcher = match spec.get("match") {
            None | Some(Value::Null) => Match::default(),
            Some(v) => serde_json::from_value(v.clone()).unwrap_or_else(|e| {
                errors.push(format!("spec.match: {e}"));
                Match::default()
            }),
        };
        Constraint {
            meta,
            api_version: raw["apiVersion"].as_str().unwrap_or_default().to_string(),
            kind: raw["kind"].as_str().unwrap_or_default().to_string(),
            enforcement_action,
            scoped_actions,
            matcher,
            spec_error: (!errors.is_empty()).then(|| errors.join("; ")),
            source,
            raw,
        }
    }

    pub fn name(&self) -> &str {
        &self.meta.name
    }
}
