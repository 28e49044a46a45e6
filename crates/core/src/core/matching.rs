//! Which bindings select an object, computed without a server: the binding's `matchResources`
//! (scope, namespace and object selectors) and, for Gatekeeper's bindings, the constraint's
//! `spec.match` (kinds, namespaces, excludedNamespaces, name, scope, selectors) exactly as the
//! generated CEL matchers evaluate it (core/cel.rs). What cannot be known offline (a namespace's
//! labels, whether an unknown kind is namespaced, a template's own CEL matchConditions) is
//! `Unknown` with the reason, never guessed.

use super::scope::NAME_LABEL;
use crate::model::constraint::KindMatch;
use crate::model::{Binding, Constraint, Match};
use crate::snapshot::Snapshot;
use k8s_openapi::api::admissionregistration::v1 as ar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Serialize;
use std::collections::BTreeMap;

/// The object a request is about, as the matchers see it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Subject {
    pub group: String,
    pub kind: String,
    pub name: String,
    pub generate_name: String,
    /// `None`: namespaced but which namespace is unknown (offline, none in the manifest).
    pub namespace: Option<String>,
    /// `None`: not known whether the kind is namespaced.
    pub namespaced: Option<bool>,
    pub labels: BTreeMap<String, String>,
    /// The labels of the object's namespace, when known.
    pub namespace_labels: Option<BTreeMap<String, String>>,
    /// The resource (plural) the object is served as, when known: a rule that names
    /// resources can be judged only with it. `selections` fills it from what is served.
    pub resource: Option<String>,
}

/// Kinds whose scope is known without discovery (the common built-ins).
const CLUSTER_KINDS: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "StorageClass",
    "PriorityClass",
    "IngressClass",
    "RuntimeClass",
    "CSIDriver",
    "APIService",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ConstraintTemplate",
];
const NAMESPACED_KINDS: &[&str] = &[
    "Pod",
    "ConfigMap",
    "Secret",
    "Service",
    "ServiceAccount",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "CronJob",
    "Ingress",
    "Role",
    "RoleBinding",
    "PersistentVolumeClaim",
    "NetworkPolicy",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
    "LimitRange",
    "ResourceQuota",
    "Lease",
];

impl Subject {
    /// The subject of a manifest. Scope comes from `metadata.namespace` or the built-in table;
    /// the namespace stays unknown when a namespaced manifest names none.
    pub fn from_manifest(raw: &serde_json::Value) -> Subject {
        let (api_version, kind) = crate::model::meta::type_of(raw);
        let m = &raw["metadata"];
        let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        let namespace = m["namespace"].as_str().filter(|n| !n.is_empty());
        let namespaced = if namespace.is_some() {
            Some(true)
        } else if CLUSTER_KINDS.contains(&kind) {
            Some(false)
        } else if NAMESPACED_KINDS.contains(&kind) {
            Some(true)
        } else {
            None
        };
        let labels = labels_of(&m["labels"]);
        let namespace_labels = (kind == "Namespace"
            && crate::model::meta::group_of(api_version).is_empty())
        .then(|| labels.clone());
        Subject {
            group: crate::model::meta::group_of(api_version).to_string(),
            kind: kind.to_string(),
            name: s(&m["name"]),
            generate_name: s(&m["generateName"]),
            namespace: namespace.map(str::to_string),
            namespaced,
            labels,
            namespace_labels,
            resource: None,
        }
    }

    /// Fills `resource` from what is served, when the kind is served by exactly one resource
    /// of its group.
    pub fn resolve_resource(&mut self, served: &crate::model::served::Served) {
        if self.resource.is_some() {
            return;
        }
        let mains: Vec<&String> = served
            .of_kind(&self.group, &self.kind)
            .into_iter()
            .flatten()
            .filter(|(g, r)| *g == self.group && !r.contains('/'))
            .map(|(_, r)| r)
            .collect();
        if let [one] = mains.as_slice() {
            self.resource = Some((*one).clone());
        }
    }

    fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.kind == "Namespace"
    }

    /// The namespace Gatekeeper's namespace matchers compare: the object's, a Namespace's own
    /// name, `""` for other cluster-scoped objects; `None` when unknown.
    fn match_namespace(&self) -> Option<String> {
        if self.is_namespace() {
            return Some(self.name.clone());
        }
        match (self.namespaced, &self.namespace) {
            (_, Some(ns)) => Some(ns.clone()),
            (Some(false), None) => Some(String::new()),
            _ => None,
        }
    }
}

/// String labels of a `metadata.labels` value.
pub fn labels_of(v: &serde_json::Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|l| {
            l.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Three-valued: selects, does not (and why), cannot tell (and why).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "selects", content = "reason", rename_all = "lowercase")]
pub enum Tri {
    Yes,
    No(String),
    Unknown(String),
}

impl Tri {
    /// Both must hold: the first `No` wins, then the first `Unknown`.
    fn and(self, other: impl FnOnce() -> Tri) -> Tri {
        match self {
            Tri::No(_) => self,
            Tri::Yes => other(),
            Tri::Unknown(why) => match other() {
                no @ Tri::No(_) => no,
                _ => Tri::Unknown(why),
            },
        }
    }
    pub fn is_yes(&self) -> bool {
        matches!(self, Tri::Yes)
    }
    pub fn is_no(&self) -> bool {
        matches!(self, Tri::No(_))
    }
    pub fn as_str(&self) -> &'static str {
        match self {
            Tri::Yes => "yes",
            Tri::No(_) => "no",
            Tri::Unknown(_) => "unknown",
        }
    }
    pub fn reason(&self) -> &str {
        match self {
            Tri::Yes => "",
            Tri::No(r) | Tri::Unknown(r) => r,
        }
    }
}

/// Gatekeeper's wildcard: exact, or one `*` at the end (prefix) or at the start (suffix).
pub fn glob(pattern: &str, subject: &str) -> bool {
    pattern == subject
        || pattern
            .strip_suffix('*')
            .is_some_and(|p| subject.starts_with(p))
        || pattern
            .strip_prefix('*')
            .is_some_and(|p| subject.ends_with(p))
}

/// A label selector against labels. `Err` for a selector the API server would reject.
pub fn selector_matches(
    sel: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    for (k, v) in sel.match_labels.iter().flatten() {
        if labels.get(k) != Some(v) {
            return Ok(false);
        }
    }
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.as_deref().unwrap_or_default();
        let have = labels.get(&e.key);
        let ok = match e.operator.as_str() {
            "In" => have.is_some_and(|h| values.contains(h)),
            "NotIn" => have.is_none_or(|h| !values.contains(h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            op => return Err(format!("unknown selector operator {op:?}")),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

fn is_empty(sel: &LabelSelector) -> bool {
    sel.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && sel.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

fn selector_tri(what: &str, sel: &LabelSelector, labels: &BTreeMap<String, String>) -> Tri {
    match selector_matches(sel, labels) {
        Ok(true) => Tri::Yes,
        Ok(false) => Tri::No(format!("its {what} does not match the labels")),
        Err(e) => Tri::Unknown(format!("its {what}: {e}")),
    }
}

/// A namespace selector: a Namespace is judged by its own labels, other cluster-scoped
/// objects always pass (Kubernetes' rule for `namespaceSelector`).
fn namespace_selector_tri(what: &str, sel: &LabelSelector, s: &Subject) -> Tri {
    if is_empty(sel) {
        return Tri::Yes;
    }
    if s.is_namespace() {
        return selector_tri(what, sel, &s.labels);
    }
    match (s.namespaced, &s.namespace_labels, &s.namespace) {
        (Some(false), _, _) => Tri::Yes,
        (_, Some(labels), _) => selector_tri(what, sel, labels),
        // Every namespace carries its own name as a label: a selector on that alone (what
        // narrowed bindings add for exact namespaces) is judged without the others.
        (_, None, Some(ns)) if only_name_label(sel) => {
            let labels = BTreeMap::from([(NAME_LABEL.to_string(), ns.clone())]);
            selector_tri(what, sel, &labels)
        }
        _ => Tri::Unknown(format!(
            "its {what} needs the namespace's labels, which are not known here"
        )),
    }
}

fn only_name_label(sel: &LabelSelector) -> bool {
    sel.match_labels
        .iter()
        .flatten()
        .all(|(k, _)| k == NAME_LABEL)
        && sel
            .match_expressions
            .iter()
            .flatten()
            .all(|e| e.key == NAME_LABEL)
}

/// The scope of a rule: `Cluster`, `Namespaced` or `*`.
fn scope_tri(scope: &str, s: &Subject) -> Tri {
    match (scope, s.namespaced.or(s.is_namespace().then_some(false))) {
        ("*" | "", _) => Tri::Yes,
        ("Cluster", Some(false)) | ("Namespaced", Some(true)) => Tri::Yes,
        (scope, Some(_)) => Tri::No(format!("scope {scope} excludes it")),
        (scope, None) => Tri::Unknown(format!(
            "scope {scope}: whether {} is namespaced is not known here",
            s.kind
        )),
    }
}

/// A binding's or policy's resource rules, for the rules we can judge without discovery
/// (any resource, `*`); rules naming resources need the kind's plural.
fn rules_tri(rules: &[ar::NamedRuleWithOperations], s: &Subject, exclude: bool) -> Tri {
    let mut unknown = None;
    for r in rules {
        let any = |v: &Option<Vec<String>>| {
            v.as_deref()
                .is_none_or(|v| v.iter().any(|x| x == "*" || x == "*/*"))
        };
        let group_ok = r
            .api_groups
            .as_deref()
            .is_none_or(|g| g.iter().any(|x| x == "*" || *x == s.group));
        if !group_ok {
            continue;
        }
        if r.resource_names.as_ref().is_some_and(|n| !n.is_empty()) {
            unknown = Some("a resource rule names objects".to_string());
            continue;
        }
        if !any(&r.resources) {
            let Some(resource) = &s.resource else {
                unknown = Some(format!("the resource that serves {} is not known", s.kind));
                continue;
            };
            // The object itself, not a subresource: `R`, `R/*` or `*/*` match it.
            let names = r.resources.as_deref().unwrap_or_default();
            let matched = names.iter().any(|n| {
                n == "*/*" || n == resource || n.strip_suffix("/*") == Some(resource.as_str())
            });
            if !matched {
                continue;
            }
        }
        match scope_tri(r.scope.as_deref().unwrap_or("*"), s) {
            Tri::Yes => {
                return if exclude {
                    Tri::No("an excludeResourceRule matches it".into())
                } else {
                    Tri::Yes
                };
            }
            Tri::Unknown(why) => unknown = Some(why),
            Tri::No(_) => {}
        }
    }
    match (unknown, exclude) {
        (Some(why), _) => Tri::Unknown(why),
        (None, true) => Tri::Yes,
        (None, false) => Tri::No("no resource rule matches it".into()),
    }
}

/// A binding's `matchResources`.
pub fn binding_selects(b: &ar::ValidatingAdmissionPolicyBinding, s: &Subject) -> Tri {
    let Some(m) = b.spec.as_ref().and_then(|sp| sp.match_resources.as_ref()) else {
        return Tri::Yes;
    };
    let rules = m.resource_rules.as_deref().unwrap_or_default();
    let excluded = m.exclude_resource_rules.as_deref().unwrap_or_default();
    let ns = m.namespace_selector.clone().unwrap_or_default();
    let obj = m.object_selector.clone().unwrap_or_default();
    namespace_selector_tri("binding's namespaceSelector", &ns, s)
        .and(|| selector_tri("binding's objectSelector", &obj, &s.labels))
        .and(|| {
            if rules.is_empty() {
                Tri::Yes
            } else {
                rules_tri(rules, s, false)
            }
        })
        .and(|| {
            if excluded.is_empty() {
                Tri::Yes
            } else {
                rules_tri(excluded, s, true)
            }
        })
}

fn kinds_tri(kinds: &[KindMatch], s: &Subject) -> Tri {
    if kinds.is_empty()
        || kinds.iter().any(|k| {
            (k.api_groups.is_empty() || k.api_groups.iter().any(|g| g == "*" || *g == s.group))
                && (k.kinds.is_empty() || k.kinds.iter().any(|x| x == "*" || *x == s.kind))
        })
    {
        Tri::Yes
    } else {
        Tri::No(format!("spec.match.kinds does not list {}", s.kind))
    }
}

/// A constraint's `spec.match`, as the generated CEL matchers and binding evaluate it.
pub fn constraint_selects(m: &Match, s: &Subject) -> Tri {
    let ns = s.match_namespace();
    let namespaces = || {
        if m.namespaces.is_empty() {
            return Tri::Yes;
        }
        match ns.as_deref() {
            Some("") => Tri::Yes,
            Some(ns) if m.namespaces.iter().any(|p| glob(p, ns)) => Tri::Yes,
            Some(ns) => Tri::No(format!("spec.match.namespaces does not list {ns}")),
            None => Tri::Unknown("spec.match.namespaces: the namespace is not known here".into()),
        }
    };
    let excluded = || {
        if m.excluded_namespaces.is_empty() {
            return Tri::Yes;
        }
        match ns.as_deref() {
            Some("") => Tri::Yes,
            Some(ns) if m.excluded_namespaces.iter().any(|p| glob(p, ns)) => {
                Tri::No(format!("spec.match.excludedNamespaces lists {ns}"))
            }
            Some(_) => Tri::Yes,
            None => Tri::Unknown(
                "spec.match.excludedNamespaces: the namespace is not known here".into(),
            ),
        }
    };
    let name = || match m.name.as_deref().filter(|n| !n.is_empty()) {
        None => Tri::Yes,
        Some(p) if !s.name.is_empty() => {
            if glob(p, &s.name) {
                Tri::Yes
            } else {
                Tri::No(format!("spec.match.name {p} does not match {}", s.name))
            }
        }
        Some(p) => match p.strip_suffix('*') {
            Some(prefix) if s.generate_name.starts_with(prefix) => Tri::Yes,
            _ => Tri::No(format!(
                "spec.match.name {p} does not match a generated name"
            )),
        },
    };
    let selector = |what: &str, v: &Option<serde_json::Value>, ns: bool| -> Tri {
        let sel: LabelSelector = match v {
            None | Some(serde_json::Value::Null) => return Tri::Yes,
            Some(v) => match serde_json::from_value(v.clone()) {
                Ok(sel) => sel,
                Err(e) => return Tri::Unknown(format!("{what} is not a label selector: {e}")),
            },
        };
        if ns {
            namespace_selector_tri(what, &sel, s)
        } else {
            selector_tri(what, &sel, &s.labels)
        }
    };
    kinds_tri(&m.kinds, s)
        .and(namespaces)
        .and(excluded)
        .and(name)
        .and(|| scope_tri(m.scope.as_deref().unwrap_or("*"), s))
        .and(|| selector("spec.match.labelSelector", &m.label_selector, false))
        .and(|| selector("spec.match.namespaceSelector", &m.namespace_selector, true))
}

/// One binding's verdict about a subject.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Selection {
    pub binding: String,
    pub policy: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraint: Option<super::verdict::ConstraintRef>,
    pub validation_actions: Vec<String>,
    /// The binding is not in the input: it is the one the constraint would get.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub planned: bool,
    #[serde(flatten)]
    pub selects: Tri,
    /// What only the server can evaluate (the template's own matchConditions, validations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

fn controlling_constraint<'a>(b: &Binding, snap: &'a Snapshot) -> Option<&'a Constraint> {
    let owner = b.meta.controller()?;
    (owner.group() == crate::model::CONSTRAINTS_GROUP)
        .then(|| {
            snap.constraints
                .iter()
                .find(|c| c.kind == owner.kind && c.name() == owner.name)
        })
        .flatten()
}

fn note_for(policy: &str, snap: &Snapshot) -> Option<String> {
    let own = snap
        .policies
        .iter()
        .find(|p| p.name() == policy)
        .and_then(|p| p.object.spec.as_ref())
        .and_then(|s| s.match_conditions.as_ref())
        .map(|mc| {
            mc.iter()
                .filter(|c| !c.name.starts_with("gatekeeper_internal_"))
                .count()
        })
        .unwrap_or(0);
    Some(if own > 0 {
        format!("the validations and {own} matchCondition(s) of the policy run on the server")
    } else {
        "the validations run on the server".to_string()
    })
}

/// Every binding of the snapshot about `s`, plus the bindings its constraints would get when
/// the snapshot holds a constraint without its binding (files kept in Git): ours are judged
/// on the binding and the constraint's `spec.match`, others on the binding alone.
pub fn selections(s: &Subject, snap: &Snapshot, opts: &super::Options) -> Vec<Selection> {
    let mut resolved = s.clone();
    resolved.resolve_resource(&snap.served);
    let s = &resolved;
    let mut out = Vec::new();
    let mut bound = std::collections::BTreeSet::new();
    for b in &snap.bindings {
        let constraint = controlling_constraint(b, snap);
        let mut selects = binding_selects(&b.object, s);
        if let Some(c) = constraint {
            bound.insert((c.kind.clone(), c.name().to_string()));
            selects = selects.and(|| constraint_selects(&c.matcher, s));
        }
        let spec = b.object.spec.as_ref();
        out.push(Selection {
            binding: b.name().to_string(),
            policy: b.policy_name().to_string(),
            constraint: constraint.map(|c| super::verdict::ConstraintRef {
                kind: c.kind.clone(),
                name: c.name().to_string(),
            }),
            validation_actions: spec
                .and_then(|s| s.validation_actions.clone())
                .unwrap_or_default(),
            planned: false,
            note: selects
                .is_yes()
                .then(|| note_for(b.policy_name(), snap))
                .flatten(),
            selects,
        });
    }
    for c in &snap.constraints {
        if bound.contains(&(c.kind.clone(), c.name().to_string())) {
            continue;
        }
        let super::decide::ConstraintIntent::Bind { actions, .. } =
            super::decide::decide_constraint(c, opts)
        else {
            continue;
        };
        // Judged on the narrowed binding: the inline one differs only by the exemptions it
        // carries (the narrowed shape keeps them on its VAP, which is not judged here either);
        // the policy named is the one of the template's shape.
        let Ok((b, _)) = super::generate::binding(
            c,
            &actions,
            super::options::PolicyShape::Narrowed,
            &opts.exemptions,
            &snap.served,
        ) else {
            continue;
        };
        let policy = match super::shape::of_kind(snap, opts, &c.kind) {
            super::options::PolicyShape::Inline => {
                super::names::inline_policy_name(&c.kind, c.name())
            }
            _ => super::names::policy_name_for_kind(&c.kind),
        };
        let selects = binding_selects(&b, s).and(|| constraint_selects(&c.matcher, s));
        out.push(Selection {
            binding: b.metadata.name.clone().unwrap_or_default(),
            policy: policy.clone(),
            constraint: Some(super::verdict::ConstraintRef {
                kind: c.kind.clone(),
                name: c.name().to_string(),
            }),
            validation_actions: actions.iter().map(|a| a.as_str().to_string()).collect(),
            planned: true,
            note: selects.is_yes().then(|| note_for(&policy, snap)).flatten(),
            selects,
        });
    }
    out.sort_by(|a, b| a.binding.cmp(&b.binding));
    out
}

/// A label selector as the API server's list takes it (`labelSelector=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListSelector {
    /// No filter: every object (no selector, or only requirements every object meets, such as
    /// `NotIn` with no values).
    All,
    /// The `labelSelector` string.
    Filter(String),
    /// No object: an `In` with no values matches none.
    Nothing,
}

/// `v` (a `spec.match.labelSelector`) as a list's label selector. Matched as Kubernetes matches
/// a selector (`In` with no values matches nothing, `NotIn` with none excludes nothing); `Err`
/// says why Kubernetes would reject it (an unknown operator, a malformed key or value, values
/// given to `Exists`), so the caller can refuse that one selector instead of sending it.
pub fn list_selector(v: Option<&serde_json::Value>) -> Result<ListSelector, String> {
    let sel: LabelSelector = match v {
        None | Some(serde_json::Value::Null) => return Ok(ListSelector::All),
        Some(v) => {
            serde_json::from_value(v.clone()).map_err(|e| format!("not a label selector: {e}"))?
        }
    };
    let mut parts = Vec::new();
    for (k, v) in sel.match_labels.unwrap_or_default() {
        label_key(&k)?;
        label_value(&k, &v)?;
        parts.push(format!("{k}={v}"));
    }
    for e in sel.match_expressions.unwrap_or_default() {
        label_key(&e.key)?;
        let values = e.values.unwrap_or_default();
        for v in &values {
            label_value(&e.key, v)?;
        }
        let key = &e.key;
        match (e.operator.as_str(), values.is_empty()) {
            ("In", true) => return Ok(ListSelector::Nothing),
            ("NotIn", true) => {}
            ("In", false) => parts.push(format!("{key} in ({})", values.join(","))),
            ("NotIn", false) => parts.push(format!("{key} notin ({})", values.join(","))),
            ("Exists", true) => parts.push(key.clone()),
            ("DoesNotExist", true) => parts.push(format!("!{key}")),
            (op @ ("Exists" | "DoesNotExist"), false) => {
                return Err(format!("{key}: values may not be given to {op}"));
            }
            (op, _) => {
                return Err(format!(
                    "{key}: operator {op:?} is not In, NotIn, Exists or DoesNotExist"
                ));
            }
        }
    }
    Ok(match parts.is_empty() {
        true => ListSelector::All,
        false => ListSelector::Filter(parts.join(",")),
    })
}

/// A label name (the part after an optional prefix) or value: at most 63 characters,
/// alphanumerics with `-`, `_` and `.` inside.
fn label_name_ok(s: &str) -> bool {
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    s.len() <= 63
        && s.chars().all(inner)
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A label key: `[prefix/]name`, the prefix a DNS subdomain.
fn label_key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let subdomain = |p: &str| {
        p.len() <= 253
            && p.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !part.starts_with('-')
                    && !part.ends_with('-')
            })
    };
    if label_name_ok(name) && prefix.is_none_or(subdomain) {
        Ok(())
    } else {
        Err(format!("{k:?} is not a valid label key"))
    }
}

fn label_value(k: &str, v: &str) -> Result<(), String> {
    if v.is_empty() || label_name_ok(v) {
        Ok(())
    } else {
        Err(format!("{k}: {v:?} is not a valid label value"))
    }
}

/// Whether judging an object needs its namespace's labels: the binding's or the constraint's
/// namespace selector says something.
pub fn needs_namespace_labels(b: &ar::ValidatingAdmissionPolicyBinding, m: &Match) -> bool {
    let binding = b
        .spec
        .as_ref()
        .and_then(|sp| sp.match_resources.as_ref())
        .and_then(|mr| mr.namespace_selector.as_ref())
        .is_some_and(|sel| !is_empty(sel));
    // One that cannot be read needs them too: the matcher then says why it cannot tell.
    let constraint = match &m.namespace_selector {
        None | Some(serde_json::Value::Null) => false,
        Some(v) => {
            serde_json::from_value::<LabelSelector>(v.clone()).map_or(true, |sel| !is_empty(&sel))
        }
    };
    binding || constraint
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn subject(v: serde_json::Value) -> Subject {
        Subject::from_manifest(&v)
    }

    #[test]
    fn selectors_become_list_selectors_as_kubernetes_matches_them() {
        let list = |v: serde_json::Value| list_selector(Some(&v));
        assert_eq!(
            list(
                json!({"matchLabels": {"a": "1", "example.com/b": ""}, "matchExpressions": [
                {"key": "b", "operator": "In", "values": ["x", "y"]},
                {"key": "c", "operator": "DoesNotExist"},
                {"key": "d", "operator": "Exists"},
                {"key": "e", "operator": "NotIn", "values": ["z"]}]})
            ),
            Ok(ListSelector::Filter(
                "a=1,example.com/b=,b in (x,y),!c,d,e notin (z)".into()
            ))
        );
        assert_eq!(list_selector(None), Ok(ListSelector::All));
        assert_eq!(list(json!({})), Ok(ListSelector::All));
        // In with no values matches nothing; NotIn with none excludes nothing.
        let no_values = |op: &str| json!({"matchExpressions": [{"key": "b", "operator": op}]});
        assert_eq!(list(no_values("In")), Ok(ListSelector::Nothing));
        assert_eq!(list(no_values("NotIn")), Ok(ListSelector::All));
        let mut with_one = no_values("NotIn");
        with_one["matchLabels"] = json!({"a": "1"});
        assert_eq!(list(with_one), Ok(ListSelector::Filter("a=1".into())));
        // What Kubernetes rejects is refused, said, and never sent.
        for (bad, why) in [
            (
                no_values("Odd"),
                "operator \"Odd\" is not In, NotIn, Exists or DoesNotExist",
            ),
            (
                json!({"matchExpressions": [{"key": "b", "operator": "Exists", "values": ["x"]}]}),
                "b: values may not be given to Exists",
            ),
            (
                json!({"matchLabels": {"a": "x y"}}),
                "a: \"x y\" is not a valid label value",
            ),
            (
                json!({"matchLabels": {"a": "x,y"}}),
                "a: \"x,y\" is not a valid label value",
            ),
            (
                json!({"matchLabels": {"-a": "x"}}),
                "\"-a\" is not a valid label key",
            ),
            (
                json!({"matchLabels": {"Ex_ample/a": "x"}}),
                "\"Ex_ample/a\" is not a valid label key",
            ),
            (json!({"matchLabels": "a=x"}), "not a label selector"),
        ] {
            let got = list(bad.clone());
            assert!(
                got.as_ref().is_err_and(|e| e.contains(why)),
                "{bad}: {got:?}"
            );
        }
        // A value of 64 characters is too long.
        assert!(list(json!({"matchLabels": {"a": "x".repeat(64)}})).is_err());
        assert!(list(json!({"matchLabels": {"a": "x".repeat(63)}})).is_ok());
    }

    #[test]
    fn namespace_labels_are_needed_only_for_a_namespace_selector() {
        let binding = |ns_selector: serde_json::Value| -> ar::ValidatingAdmissionPolicyBinding {
            serde_json::from_value(json!({"metadata": {"name": "b"},
                "spec": {"matchResources": {"namespaceSelector": ns_selector}}}))
            .expect("binding")
        };
        let matcher = |v: serde_json::Value| -> Match { serde_json::from_value(v).expect("match") };
        let empty = binding(json!({}));
        assert!(!needs_namespace_labels(&empty, &matcher(json!({}))));
        assert!(!needs_namespace_labels(
            &empty,
            &matcher(
                json!({"namespaceSelector": {}, "labelSelector": {"matchLabels": {"a": "1"}}})
            )
        ));
        let on_team = json!({"matchLabels": {"team": "a"}});
        assert!(needs_namespace_labels(
            &binding(on_team.clone()),
            &matcher(json!({}))
        ));
        assert!(needs_namespace_labels(
            &empty,
            &matcher(json!({"namespaceSelector": on_team}))
        ));
    }

    fn matcher(v: serde_json::Value) -> Match {
        serde_json::from_value(v).expect("match")
    }

    #[test]
    fn globs_are_gatekeepers() {
        assert!(glob("kube-*", "kube-system"));
        assert!(glob("*-system", "kube-system"));
        assert!(glob("a", "a"));
        assert!(!glob("kube-*", "default"));
        assert!(!glob("k*s", "kubes"), "a * in the middle is literal");
    }

    #[test]
    fn constraint_match_kinds_namespaces_name() {
        let cm = subject(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "deny-me-1", "namespace": "team-a", "labels": {"app": "x"}}}));
        let m = matcher(
            json!({"kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}],
            "namespaces": ["team-*"], "name": "deny-me-*"}),
        );
        assert_eq!(constraint_selects(&m, &cm), Tri::Yes);
        let m = matcher(json!({"kinds": [{"apiGroups": ["apps"], "kinds": ["Deployment"]}]}));
        assert!(constraint_selects(&m, &cm).is_no());
        let m = matcher(json!({"excludedNamespaces": ["*-a"]}));
        assert!(constraint_selects(&m, &cm).is_no());
        let m = matcher(
            json!({"labelSelector": {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]}}),
        );
        assert!(constraint_selects(&m, &cm).is_no());
        let m = matcher(json!({"scope": "Cluster"}));
        assert!(constraint_selects(&m, &cm).is_no());
    }

    #[test]
    fn what_is_not_known_offline_is_unknown() {
        // A ConfigMap without a namespace: which one is the context's business.
        let cm =
            subject(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
        let m = matcher(json!({"namespaces": ["prod"]}));
        assert!(matches!(constraint_selects(&m, &cm), Tri::Unknown(_)));
        let m = matcher(json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}}));
        assert!(matches!(constraint_selects(&m, &cm), Tri::Unknown(_)));
        // … but a No elsewhere still decides.
        let m = matcher(json!({"namespaces": ["prod"], "kinds": [{"kinds": ["Secret"]}]}));
        assert!(constraint_selects(&m, &cm).is_no());
        // An unknown kind without a namespace: scope cannot be judged.
        let x = subject(
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
        );
        assert!(matches!(
            constraint_selects(&matcher(json!({"scope": "Namespaced"})), &x),
            Tri::Unknown(_)
        ));
    }

    #[test]
    fn a_namespace_is_matched_by_its_own_name_and_labels() {
        let ns = subject(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "prod", "labels": {"env": "prod"}}}));
        assert_eq!(
            constraint_selects(
                &matcher(
                    json!({"namespaces": ["prod"], "namespaceSelector": {"matchLabels": {"env": "prod"}}})
                ),
                &ns
            ),
            Tri::Yes
        );
        assert!(
            constraint_selects(
                &matcher(json!({"namespaceSelector": {"matchLabels": {"env": "dev"}}})),
                &ns
            )
            .is_no()
        );
        // Other cluster-scoped objects pass namespace matchers.
        let node = subject(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}));
        assert_eq!(
            constraint_selects(
                &matcher(
                    json!({"namespaces": ["prod"], "namespaceSelector": {"matchLabels": {"env": "dev"}}})
                ),
                &node
            ),
            Tri::Yes
        );
    }

    #[test]
    fn snapshot_selections_use_observed_and_planned_bindings() {
        let mut snap = Snapshot::offline();
        for o in [
            json!({"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sA", "metadata": {"name": "cms", "uid": "1"},
                   "spec": {"match": {"kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}]}}}),
            json!({"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sA", "metadata": {"name": "secrets", "uid": "2"},
                   "spec": {"enforcementAction": "warn", "match": {"kinds": [{"apiGroups": [""], "kinds": ["Secret"]}]}}}),
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                   "metadata": {"name": "team-binding"}, "spec": {"policyName": "team", "validationActions": ["Deny"],
                   "matchResources": {"objectSelector": {"matchLabels": {"team": "a"}}}}}),
        ] {
            snap.insert(o, Default::default()).expect("insert");
        }
        let cm = subject(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n", "labels": {"team": "a"}}}),
        );
        let sel = selections(&cm, &snap, &crate::core::options::testing::options());
        let by: BTreeMap<_, _> = sel.iter().map(|s| (s.binding.as_str(), s)).collect();
        assert!(by["gatekeeper-k8sa-cms"].selects.is_yes());
        assert!(by["gatekeeper-k8sa-cms"].planned);
        assert_eq!(
            by["gatekeeper-k8sa-secrets"].validation_actions,
            vec!["Warn"]
        );
        assert!(by["gatekeeper-k8sa-secrets"].selects.is_no());
        assert!(by["team-binding"].selects.is_yes());
        assert!(by["team-binding"].constraint.is_none());
    }
}
