//! Object metadata shared by every typed view.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// Where an object was read from: a file and the line its document starts on, or the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Source {
    pub file: Option<String>,
    pub line: Option<usize>,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{file}:{line}"),
            (Some(file), None) => write!(f, "{file}"),
            _ => write!(f, "cluster"),
        }
    }
}

/// A reference to an object in findings and plans: the JSON contract of `check` and `plan`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

impl ObjectRef {
    pub fn new(
        api_version: impl Into<String>,
        kind: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// An ownerReference, reduced to what ownership decisions need.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct OwnerRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub controller: Option<bool>,
}

impl OwnerRef {
    /// The API group of the owner (`templates.gatekeeper.sh` for `templates.gatekeeper.sh/v1beta1`).
    pub fn group(&self) -> &str {
        match self.api_version.split_once('/') {
            Some((group, _)) => group,
            None => "",
        }
    }
}

/// Metadata fields every view needs, read leniently from raw JSON.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Meta {
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub generation: i64,
    pub labels: std::collections::BTreeMap<String, String>,
    pub owner_references: Vec<OwnerRef>,
    pub deletion_timestamp: Option<String>,
}

impl Meta {
    pub fn from_value(obj: &Value) -> Self {
        let m = &obj["metadata"];
        let str_of = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let labels = m["labels"]
            .as_object()
            .map(|l| {
                l.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let owner_references = m["ownerReferences"]
            .as_array()
            .map(|refs| {
                refs.iter()
                    .filter_map(|r| serde_json::from_value::<OwnerRef>(r.clone()).ok())
                    .collect()
            })
            .unwrap_or_default();
        Meta {
            name: str_of(&m["name"]),
            uid: str_of(&m["uid"]),
            resource_version: str_of(&m["resourceVersion"]),
            generation: m["generation"].as_i64().unwrap_or_default(),
            labels,
            owner_references,
            deletion_timestamp: m["deletionTimestamp"].as_str().map(str::to_string),
        }
    }

    /// The one ownerReference with `controller: true`, if any.
    pub fn controller(&self) -> Option<&OwnerRef> {
        self.owner_references
            .iter()
            .find(|r| r.controller == Some(true))
    }

    pub fn managed_by_us(&self) -> bool {
        self.labels.get(super::MANAGED_BY_LABEL).map(String::as_str)
            == Some(super::MANAGED_BY_VALUE)
    }
}

/// The `kind` and `apiVersion` of a raw object.
pub fn type_of(obj: &Value) -> (&str, &str) {
    (
        obj["apiVersion"].as_str().unwrap_or_default(),
        obj["kind"].as_str().unwrap_or_default(),
    )
}

/// The group part of an apiVersion (`""` for the core group).
pub fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map(|(g, _)| g).unwrap_or("")
}
