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
    /// Copies of an object the input held more than once, dropped by [`Snapshot::dedupe`]:
    /// the analysis names each one (`input-duplicate`).
    pub duplicates: Vec<Duplicate>,
    /// Gatekeeper's `Config` objects read (`model::gatekeeper_config`): the one Gatekeeper
    /// reconciles adds its webhook exclusions to the exempt namespaces
    /// (`Options::with_gatekeeper_config`).
    pub gatekeeper_configs: Vec<crate::model::GatekeeperConfig>,
    /// Gatekeeper's validating webhooks read (`model::gatekeeper_webhook`): the one of the
    /// configuration `--validating-webhook-configuration-name` names is what `--policy-shape
    /// gatekeeper` copies into its VAPs (`Options::with_gatekeeper_webhook`).
    pub gatekeeper_webhooks: Vec<crate::model::GatekeeperWebhook>,
}

/// One copy of an object that the input held again later: ignored, the last copy is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    /// The object (its apiVersion as that copy gave it).
    pub object: crate::model::ObjectRef,
    /// Where the ignored copy was read.
    pub dropped: crate::model::Source,
    /// Where the copy used was read: the last one in the input.
    pub kept: crate::model::Source,
}

const STATUS_API_VERSION: &str = "status.gatekeeper.sh/v1beta1";

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
    /// Gatekeeper's `Config` (`config.gatekeeper.sh`).
    GatekeeperConfig,
    /// A ValidatingWebhookConfiguration (Gatekeeper's is read for `--policy-shape gatekeeper`).
    WebhookConfiguration,
    /// A List (`kubectl get -o yaml`): its items are classified one by one.
    List,
    Other,
}

pub fn classify(raw: &serde_json::Value) -> ObjectClass {
    use crate::model::{
        ADMISSION_GROUP, CONSTRAINTS_GROUP, STATUS_GROUP, TEMPLATES_GROUP, VAP_KIND, VAPB_KIND,
        gatekeeper_config, meta::group_of,
    };
    let (api_version, kind) = crate::model::meta::type_of(raw);
    let group = group_of(api_version);
    match (group, kind) {
        (_, "List") | (_, "ConstraintTemplateList") if raw.get("items").is_some() => {
            ObjectClass::List
        }
        (g, "ConstraintTemplate") if g == TEMPLATES_GROUP => ObjectClass::Template,
        // A kind may end in `List` and still be a constraint kind (`K8sAllowList`): only an
        // `items` array makes an object of this group a list.
        (g, _) if g == CONSTRAINTS_GROUP && !raw.get("items").is_some_and(|i| i.is_array()) => {
            ObjectClass::Constraint
        }
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
        (g, k) if g == gatekeeper_config::CONFIG_GROUP && k == gatekeeper_config::CONFIG_KIND => {
            ObjectClass::GatekeeperConfig
        }
        (g, crate::model::gatekeeper_webhook::VWC_KIND) if g == ADMISSION_GROUP => {
            ObjectClass::WebhookConfiguration
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
            ObjectClass::GatekeeperConfig => self
                .gatekeeper_configs
                .push(crate::model::GatekeeperConfig::from_value(&raw)?),
            ObjectClass::WebhookConfiguration => {
                match crate::model::GatekeeperWebhook::from_value(&raw)? {
                    Some(w) => self.gatekeeper_webhooks.push(w),
                    None => *self.ignored.entry(kind.to_string()).or_default() += 1,
                }
            }
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
        self.duplicates.extend(other.duplicates);
        self.gatekeeper_configs.extend(other.gatekeeper_configs);
        self.gatekeeper_webhooks.extend(other.gatekeeper_webhooks);
    }

    /// Keeps the last of objects that share an identity (the same file given twice, or an
    /// object in two files), as `kubectl apply -f` of the same input would leave it, and
    /// records each dropped copy in [`Snapshot::duplicates`]. Returns how many were dropped.
    pub fn dedupe(&mut self) -> usize {
        use crate::model::{ADMISSION_GROUP, ObjectRef, Source, VAP_KIND, VAPB_KIND};
        /// Drops all but the last of each identity; the dropped ones, with the copy kept.
        fn keep_last<T>(
            items: &mut Vec<T>,
            key: impl Fn(&T) -> ObjectRef,
            source: impl Fn(&T) -> Source,
            out: &mut Vec<Duplicate>,
        ) -> usize {
            // By kind and name: an object given as v1beta1 and again as v1 is one object to
            // the server.
            let mut kept_at: std::collections::HashMap<(String, String), Source> =
                std::collections::HashMap::new();
            let before = items.len();
            let mut kept: Vec<T> = Vec::with_capacity(before);
            let mut dropped = Vec::new();
            for item in std::mem::take(items).into_iter().rev() {
                let object = key(&item);
                let id = (object.kind.clone(), object.name.clone());
                match kept_at.get(&id) {
                    Some(used) => dropped.push(Duplicate {
                        object,
                        dropped: source(&item),
                        kept: used.clone(),
                    }),
                    None => {
                        kept_at.insert(id, source(&item));
                        kept.push(item);
                    }
                }
            }
            kept.reverse();
            *items = kept;
            // In input order, as a person reads the files.
            dropped.reverse();
            out.extend(dropped);
            before - items.len()
        }
        let admission =
            |kind: &str, name: &str| ObjectRef::new(format!("{ADMISSION_GROUP}/v1"), kind, name);
        let mut out = Vec::new();
        let n = keep_last(
            &mut self.templates,
            |t| ObjectRef::new(t.api_version.clone(), "ConstraintTemplate", t.name()),
            |t| t.source.clone(),
            &mut out,
        ) + keep_last(
            &mut self.constraints,
            |c| ObjectRef::new(c.api_version.clone(), c.kind.clone(), c.name()),
            |c| c.source.clone(),
            &mut out,
        ) + keep_last(
            &mut self.crds,
            |c| {
                ObjectRef::new(
                    "apiextensions.k8s.io/v1",
                    "CustomResourceDefinition",
                    &c.name,
                )
            },
            |c| c.source.clone(),
            &mut out,
        ) + keep_last(
            &mut self.policies,
            |p| admission(VAP_KIND, p.name()),
            |p| p.source.clone(),
            &mut out,
        ) + keep_last(
            &mut self.bindings,
            |b| admission(VAPB_KIND, b.name()),
            |b| b.source.clone(),
            &mut out,
        ) + keep_last(
            &mut self.pod_statuses,
            |s| ObjectRef::new(STATUS_API_VERSION, s.kind.clone(), s.name.clone()),
            // Gatekeeper's pod statuses keep no source; they are read, never analysed.
            |_| Source::default(),
            &mut Vec::new(),
        );
        self.duplicates.extend(out);
        n
    }
}
