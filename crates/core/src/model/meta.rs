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

impl ObjectRef {
    /// The object's identity, as the reconciler keeps failures, refusals and contests under it
    /// and the views read them.
    pub fn id(&self) -> ObjectId {
        ObjectId::new(&self.kind, &self.name)
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_id(f, &self.kind, &self.name)
    }
}

/// An object's identity where its apiVersion is not said: `Kind/name`. The reconciler keeps
/// the last failed write, the refusals and the contests of an object under it, publishes them
/// to views in this process as it is, and to views elsewhere as its text in the Lease (the
/// health annotation's keys): [`ObjectId`]'s `Display` writes that text and its `FromStr`
/// reads it back, so both sides change together or not at all.
///
/// A kind never holds a `/` (it is an identifier); a name may (the text splits at the first).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId {
    pub kind: String,
    pub name: String,
}

impl ObjectId {
    pub fn new(kind: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            name: name.into(),
        }
    }
}

/// The one spelling of an identity (`ObjectRef`'s display is its id's).
fn write_id(f: &mut fmt::Formatter<'_>, kind: &str, name: &str) -> fmt::Result {
    write!(f, "{kind}/{name}")
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_id(f, &self.kind, &self.name)
    }
}

/// A text that is not `Kind/name`: it has no `/`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not Kind/name (no '/'): {0:?}")]
pub struct NotAnObjectId(pub String);

impl std::str::FromStr for ObjectId {
    type Err = NotAnObjectId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('/') {
            Some((kind, name)) => Ok(ObjectId::new(kind, name)),
            None => Err(NotAnObjectId(s.to_string())),
        }
    }
}

impl From<&ObjectRef> for ObjectId {
    fn from(o: &ObjectRef) -> Self {
        o.id()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_id_reads_back_what_it_writes() {
        let names = [
            "gatekeeper-k8srequiredlabels",
            "a.b-c.d",
            "with spaces and \"quotes\"",
            "ünïcödé-名前",
            "a/b/c",
            "",
            "trailing/",
        ];
        for kind in ["ValidatingAdmissionPolicy", "K8sRequiredLabels", "X", ""] {
            for name in names {
                let id = ObjectId::new(kind, name);
                let text = id.to_string();
                assert_eq!(text, format!("{kind}/{name}"), "the text format is fixed");
                assert_eq!(text.parse::<ObjectId>(), Ok(id), "{text:?}");
            }
        }
    }

    #[test]
    fn a_text_without_a_slash_is_no_object_id() {
        for text in ["", "ValidatingAdmissionPolicy", "gatekeeper-x"] {
            assert_eq!(
                text.parse::<ObjectId>(),
                Err(NotAnObjectId(text.to_string()))
            );
        }
        // The first slash splits: a kind has none.
        let id: ObjectId = "K8sX/a/b".parse().expect("an id");
        assert_eq!((id.kind.as_str(), id.name.as_str()), ("K8sX", "a/b"));
    }

    #[test]
    fn an_object_ref_displays_as_its_id() {
        let o = ObjectRef::new(
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy",
            "p",
        );
        assert_eq!(o.to_string(), o.id().to_string());
        assert_eq!(o.to_string(), "ValidatingAdmissionPolicy/p");
        assert_eq!(
            ObjectId::from(&o),
            ObjectId::new("ValidatingAdmissionPolicy", "p")
        );
    }
}
