//! What the API server serves: every resource and subresource with the kind of the object a
//! request to it carries (`request.kind`, which Gatekeeper's kinds matcher reads). The
//! narrowed bindings' `resourceRules` are computed from it (`core::scope`).
//!
//! Live it comes from discovery; offline from the built-in resources of the Kubernetes version
//! we test against (`builtin_resources.json`, read from kube-apiserver 1.36.3's discovery) plus
//! the CustomResourceDefinitions in the input.

use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

/// One served resource: `group`/`resource` as in a request's path (`resource` may name a
/// subresource: `pods/status`), and the group and kind of the object it carries.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
pub struct ServedResource {
    pub group: String,
    pub resource: String,
    pub kind_group: String,
    pub kind: String,
}

/// A resource in a request's path: (group, `resource` or `resource/subresource`).
pub type GroupResource = (String, String);

/// Kinds to the resources that carry them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Served {
    by_kind: BTreeMap<(String, String), BTreeSet<GroupResource>>,
    /// Groups whose discovery failed: their kinds are unknown, not absent.
    pub failed_groups: BTreeSet<String>,
}

static BUILTIN: LazyLock<Served> = LazyLock::new(|| {
    let rows: Vec<ServedResource> =
        serde_json::from_str(include_str!("builtin_resources.json")).unwrap_or_default();
    Served::from_resources(rows)
});

impl Served {
    pub fn from_resources(rows: impl IntoIterator<Item = ServedResource>) -> Self {
        let mut s = Served::default();
        for r in rows {
            s.add(r);
        }
        s
    }

    /// The resources every Kubernetes 1.36 API server serves without extensions.
    pub fn builtin() -> Served {
        BUILTIN.clone()
    }

    pub fn add(&mut self, r: ServedResource) {
        self.by_kind
            .entry((r.kind_group, r.kind))
            .or_default()
            .insert((r.group, r.resource));
    }

    /// Adds what a CustomResourceDefinition serves: its resource, `status` (same kind) and
    /// `scale` (`autoscaling/Scale`) where a version enables them. Malformed CRDs add nothing.
    pub fn add_crd(&mut self, crd: &Value) {
        let spec = &crd["spec"];
        let (Some(group), Some(plural), Some(kind)) = (
            spec["group"].as_str(),
            spec["names"]["plural"].as_str(),
            spec["names"]["kind"].as_str(),
        ) else {
            return;
        };
        let row = |resource: String, kind_group: &str, kind: &str| ServedResource {
            group: group.to_string(),
            resource,
            kind_group: kind_group.to_string(),
            kind: kind.to_string(),
        };
        self.add(row(plural.to_string(), group, kind));
        let versions = spec["versions"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if versions
            .iter()
            .any(|v| v["subresources"]["status"].is_object())
        {
            self.add(row(format!("{plural}/status"), group, kind));
        }
        if versions
            .iter()
            .any(|v| v["subresources"]["scale"].is_object())
        {
            self.add(row(format!("{plural}/scale"), "autoscaling", "Scale"));
        }
    }

    /// Resources carrying `kind` of `kind_group`.
    pub fn of_kind(&self, kind_group: &str, kind: &str) -> Option<&BTreeSet<GroupResource>> {
        self.by_kind
            .get(&(kind_group.to_string(), kind.to_string()))
            .filter(|s| !s.is_empty())
    }

    /// Resources carrying `kind`, in any group.
    pub fn of_kind_in_any_group(&self, kind: &str) -> BTreeSet<GroupResource> {
        self.carrying(|_, k| k == kind)
    }

    /// Resources carrying any kind of `kind_group` (in other groups too: `apps`' `*/scale`
    /// carries `autoscaling/Scale`).
    pub fn of_kind_group(&self, kind_group: &str) -> BTreeSet<GroupResource> {
        self.carrying(|g, _| g == kind_group)
    }

    /// Resources carrying the kinds (group, kind) that `keep` accepts.
    fn carrying(&self, keep: impl Fn(&str, &str) -> bool) -> BTreeSet<GroupResource> {
        self.by_kind
            .iter()
            .filter(|((g, k), _)| keep(g, k))
            .flat_map(|(_, r)| r.iter().cloned())
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.by_kind.is_empty()
    }

    /// Every served resource, in order (to compare two discoveries, and to write the table).
    pub fn rows(&self) -> Vec<ServedResource> {
        self.by_kind
            .iter()
            .flat_map(|((kg, k), rs)| {
                rs.iter().map(move |(g, r)| ServedResource {
                    group: g.clone(),
                    resource: r.clone(),
                    kind_group: kg.clone(),
                    kind: k.clone(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_table_knows_pods_and_their_subresources() {
        let s = Served::builtin();
        let pods = s.of_kind("", "Pod").expect("Pod is built in");
        for r in ["pods", "pods/status", "pods/ephemeralcontainers"] {
            assert!(pods.contains(&(String::new(), r.to_string())), "{r}");
        }
        // The eviction subresource carries another kind.
        assert!(!pods.contains(&(String::new(), "pods/eviction".to_string())));
        let scale = s
            .of_kind("autoscaling", "Scale")
            .expect("Scale is built in");
        assert!(scale.contains(&("apps".to_string(), "deployments/scale".to_string())));
    }

    #[test]
    fn a_crd_serves_its_resource_status_and_scale() {
        let crd = serde_json::json!({"spec": {"group": "example.com",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "subresources": {"status": {}, "scale": {}}}]}});
        let mut s = Served::default();
        s.add_crd(&crd);
        let w = s.of_kind("example.com", "Widget").expect("added");
        assert_eq!(w.len(), 2);
        assert!(s.of_kind("autoscaling", "Scale").is_some());
        s.add_crd(&serde_json::json!({"spec": {"group": 3}}));
        assert_eq!(s.rows().len(), 3);
    }
}
