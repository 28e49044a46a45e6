//! A snapshot of everything the analysis reads: loaded from files or copied from the live stores.

use crate::model::served::Served;
use crate::model::{Binding, Constraint, ConstraintTemplate, CrdInfo, PodStatus, Policy};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub templates: Vec<ConstraintTemplate>,
    pub constraints: Vec<Constraint>,
    /// Constraint CRDs only (group `constraints.gatekeeper.sh`).
    pub crds: Vec<CrdInfo>,
    /// Whether CRDs were read at all: always from a cluster, from files only when they hold a
    /// CustomResourceDefinition. Templates and constraints kept in Git without their
    /// generated CRDs are not missing CRDs.
    pub crds_listed: bool,
    pub policies: Vec<Policy>,
    pub bindings: Vec<Binding>,
    pub pod_statuses: Vec<PodStatus>,
    /// Objects of other kinds: counted, not used (`kind` → count).
    pub ignored: BTreeMap<String, usize>,
    /// When the snapshot was taken: the clock that `--binding-wait` is measured against. Set
    /// by every loader (files, lists, the live stores); `None` counts every wait as elapsed.
    pub now: Option<DateTime<Utc>>,
    /// Resources (`plural.group`) that could not be read (403, not served): their absence
    /// proves nothing, so the analysis reports nothing that rests on it.
    pub unreadable: std::collections::BTreeSet<String>,
    /// What the API server serves (kinds → resources): discovery live; offline the built-in
    /// resources plus every CustomResourceDefinition read (`Snapshot::offline`).
    pub served: Served,
}

impl Snapshot {
    /// An empty snapshot of files: what any API server serves is known without one.
    pub fn offline() -> Self {
        Snapshot {
            served: Served::builtin(),
            ..Default::default()
        }
    }

    pub fn object_count(&self) -> usize {
        self.templates.len()
            + self.constraints.len()
            + self.crds.len()
            + self.policies.len()
            + self.bindings.len()
            + self.pod_statuses.len()
    }
}

/// What kind of object a raw document is, by group and kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectClass {
    Template,
    Constraint,
    ConstraintCrd,
    Policy,
    Binding,
    PodStatus,
    /// A List (`kubectl get -o yaml`): its items are classified one by one.
    List,
    Other,
}

pub fn classify(raw: &serde_json::Value) -> ObjectClass {
    use crate::model::{
        ADMISSION_GROUP, CONSTRAINTS_GROUP, STATUS_GROUP, TEMPLATES_GROUP, VAP_KIND, VAPB_KIND,
        meta::group_of,
    };
    let (api_version, kind) = crate::model::meta::type_of(raw);
    let group = group_of(api_version);
    match (group, kind) {
        (_, "List") | (_, "ConstraintTemplateList") if raw.get("items").is_some() => {
            ObjectClass::List
        }
        (g, "ConstraintTemplate") if g == TEMPLATES_GROUP => ObjectClass::Template,
        (g, k) if g == CONSTRAINTS_GROUP && !k.ends_with("List") => ObjectClass::Constraint,
        ("apiextensions.k8s.io", "CustomResourceDefinition")
            if raw["spec"]["group"].as_str() == Some(CONSTRAINTS_GROUP) =>
        {
            ObjectClass::ConstraintCrd
        }
        (g, VAP_KIND) if g == ADMISSION_GROUP => ObjectClass::Policy,
        (g, VAPB_KIND) if g == ADMISSION_GROUP => ObjectClass::Binding,
        (g, "ConstraintTemplatePodStatus" | "ConstraintPodStatus") if g == STATUS_GROUP => {
            ObjectClass::PodStatus
        }
        (_, k) if k.ends_with("List") && raw.get("items").is_some_and(|i| i.is_array()) => {
            ObjectClass::List
        }
        _ => ObjectClass::Other,
    }
}

impl Snapshot {
    /// Adds one raw object (a List adds its items). Errors say what is wrong with the object;
    /// the caller adds where it was read from.
    pub fn insert(
        &mut self,
        mut raw: serde_json::Value,
        source: crate::model::Source,
    ) -> Result<(), String> {
        use crate::model::{Binding, Constraint, ConstraintTemplate, CrdInfo, PodStatus, Policy};
        // Server-side apply bookkeeping: large on live objects, never read, never shown.
        if let Some(meta) = raw
            .get_mut("metadata")
            .and_then(serde_json::Value::as_object_mut)
        {
            meta.remove("managedFields");
        }
        let (api_version, kind) = crate::model::meta::type_of(&raw);
        if api_version.is_empty() || kind.is_empty() {
            return Err("the object has no apiVersion or kind".into());
        }
        let class = classify(&raw);
        if kind == "CustomResourceDefinition" {
            self.crds_listed = true;
            self.served.add_crd(&raw);
        }
        if class != ObjectClass::List
            && class != ObjectClass::Other
            && raw["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .is_empty()
        {
            return Err(format!("{kind} has no metadata.name"));
        }
        match class {
            ObjectClass::List => {
                // Take the items rather than clone them: a List can be most of a large input.
                let mut raw = raw;
                let items = match raw.get_mut("items").map(serde_json::Value::take) {
                    Some(serde_json::Value::Array(items)) => items,
                    _ => return Err("a List without an items array".into()),
                };
                for (i, item) in items.into_iter().enumerate() {
                    self.insert(item, source.clone())
                        .map_err(|e| format!("items[{i}]: {e}"))?;
                }
            }
            ObjectClass::Template => self
                .templates
                .push(ConstraintTemplate::from_value(raw, source)),
            ObjectClass::Constraint => self.constraints.push(Constraint::from_value(raw, source)),
            ObjectClass::ConstraintCrd => self.crds.push(CrdInfo::from_value(&raw, source)),
            ObjectClass::Policy => self.policies.push(Policy::from_value(raw, source)?),
            ObjectClass::Binding => self.bindings.push(Binding::from_value(raw, source)?),
            ObjectClass::PodStatus => self.pod_statuses.push(PodStatus::from_value(&raw)),
            ObjectClass::Other => *self.ignored.entry(kind.to_string()).or_default() += 1,
        }
        Ok(())
    }
}

impl Snapshot {
    /// Appends everything of `other` (a List's items, read on their own).
    pub fn extend(&mut self, other: Snapshot) {
        self.templates.extend(other.templates);
        self.constraints.extend(other.constraints);
        self.crds.extend(other.crds);
        self.crds_listed |= other.crds_listed;
        self.policies.extend(other.policies);
        self.bindings.extend(other.bindings);
        self.pod_statuses.extend(other.pod_statuses);
        for (kind, n) in other.ignored {
            *self.ignored.entry(kind).or_default() += n;
        }
        self.unreadable.extend(other.unreadable);
        for r in other.served.rows() {
            self.served.add(r);
        }
        self.served.failed_groups.extend(other.served.failed_groups);
    }

    /// Keeps the last of objects that share an identity (the same file given twice, or an
    /// object in two files), as applying them in order would. Returns how many were dropped.
    pub fn dedupe(&mut self) -> usize {
        fn keep_last<T>(items: &mut Vec<T>, key: impl Fn(&T) -> String) -> usize {
            let mut seen = std::collections::HashSet::new();
            let before = items.len();
            let mut kept: Vec<T> = Vec::with_capacity(before);
            for item in std::mem::take(items).into_iter().rev() {
                if seen.insert(key(&item)) {
                    kept.push(item);
                }
            }
            kept.reverse();
            *items = kept;
            before - items.len()
        }
        keep_last(&mut self.templates, |t| t.meta.name.clone())
            + keep_last(&mut self.constraints, |c| {
                format!("{}/{}", c.kind, c.meta.name)
            })
            + keep_last(&mut self.crds, |c| c.name.clone())
            + keep_last(&mut self.policies, |p| p.meta.name.clone())
            + keep_last(&mut self.bindings, |b| b.meta.name.clone())
            + keep_last(&mut self.pod_statuses, |s| format!("{}/{}", s.kind, s.name))
    }
}
