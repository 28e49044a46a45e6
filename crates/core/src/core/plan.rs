//! Planned writes: what the reconciler would send now, each with a readable diff. The live
//! reconciler sends exactly these objects, so `plan` never promises what `run` would not do.

use super::crd::{CRD_API_VERSION, CRD_KIND, normalize_spec};
use super::findings::Code;
use super::normalize;
use crate::model::{Binding, CrdInfo, ObjectRef, Policy, VAP_KIND, VAPB_KIND};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use serde::Serialize;
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    Create,
    Update,
    Delete,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Delete => "delete",
        }
    }
}

/// One write. The JSON shape is a contract of `plan -o json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedWrite {
    pub verb: Verb,
    pub object: ObjectRef,
    /// The finding this write resolves.
    pub code: Code,
    pub reason: String,
    /// The object to send (create, update). Updates carry the observed resourceVersion.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// Delete preconditions: only this exact object is deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// A unified diff of the observed and desired metadata and spec, as YAML.
    pub diff: String,
}

fn to_value<T: Serialize>(obj: &T) -> Value {
    // Serializing k8s-openapi types to JSON cannot fail (no non-string map keys).
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

/// The part of an object a diff shows: identity, ownership, labels, spec.
fn view(name: &str, labels: &Value, owners: &Value, spec: Value) -> Value {
    let mut meta = serde_json::Map::new();
    meta.insert("name".into(), json!(name));
    if !labels.is_null() {
        meta.insert("labels".into(), labels.clone());
    }
    if !owners.is_null() {
        meta.insert("ownerReferences".into(), owners.clone());
    }
    json!({ "metadata": meta, "spec": spec })
}

fn yaml(v: &Value) -> String {
    if v.is_null() {
        return String::new();
    }
    serde_norway::to_string(v).unwrap_or_else(|e| format!("<unprintable: {e}>\n"))
}

/// A unified diff between two YAML texts, `---`/`+++` labelled.
pub fn unified_diff(old: &str, new: &str, old_label: &str, new_label: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(old_label, new_label)
        .to_string()
}

fn policy_view_desired(d: &ValidatingAdmissionPolicy) -> Value {
    view(
        d.metadata.name.as_deref().unwrap_or_default(),
        &to_value(&d.metadata.labels),
        &to_value(&d.metadata.owner_references),
        to_value(&normalize::policy_spec(d.spec.clone())),
    )
}

fn policy_view_observed(p: &Policy) -> Value {
    view(
        p.name(),
        &to_value(&p.object.metadata.labels),
        &to_value(&p.object.metadata.owner_references),
        to_value(&normalize::policy_spec(p.object.spec.clone())),
    )
}

fn binding_view_desired(d: &ValidatingAdmissionPolicyBinding) -> Value {
    view(
        d.metadata.name.as_deref().unwrap_or_default(),
        &to_value(&d.metadata.labels),
        &to_value(&d.metadata.owner_references),
        to_value(&normalize::binding_spec(d.spec.clone())),
    )
}

fn binding_view_observed(b: &Binding) -> Value {
    view(
        b.name(),
        &to_value(&b.object.metadata.labels),
        &to_value(&b.object.metadata.owner_references),
        to_value(&normalize::binding_spec(b.object.spec.clone())),
    )
}

/// The body of an update: the observed object's metadata kept (annotations, other labels,
/// non-controller ownerReferences), our label and controller reference set, the spec replaced.
pub fn update_body(observed_raw: &Value, desired: &Value) -> Value {
    let mut body = desired.clone();
    let observed_meta = &observed_raw["metadata"];
    let mut meta = serde_json::Map::new();
    for key in ["name", "resourceVersion", "annotations", "labels"] {
        if let Some(v) = observed_meta.get(key).filter(|v| !v.is_null()) {
            meta.insert(key.into(), v.clone());
        }
    }
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if let Some(l) = labels.as_object_mut() {
        for (k, v) in desired["metadata"]["labels"]
            .as_object()
            .into_iter()
            .flatten()
        {
            l.insert(k.clone(), v.clone());
        }
    }
    let mut owners: Vec<Value> = observed_meta["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["controller"] != json!(true))
        .cloned()
        .collect();
    owners.extend(
        desired["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .cloned(),
    );
    meta.insert("ownerReferences".into(), Value::Array(owners));
    body["metadata"] = Value::Object(meta);
    body
}

/// The apiVersion writes of `kind` are built and sent as (CRDs: v1; VAPs and bindings: v1,
/// sent as the served version).
fn api_version_of(kind: &str) -> &'static str {
    if kind == CRD_KIND {
        CRD_API_VERSION
    } else {
        "admissionregistration.k8s.io/v1"
    }
}

fn with_type(mut v: Value, kind: &str) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.insert("apiVersion".into(), json!(api_version_of(kind)));
        o.insert("kind".into(), json!(kind));
        o.remove("status");
    }
    v
}

/// Whether a write carries its readable diff. `plan` and the TUI show it; the reconciler sends
/// only the body, and rendering YAML for every write was a large part of its CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Diff {
    Render,
    Skip,
}

/// An observed object as a write needs it; its raw body and diff view are built on demand.
pub(crate) enum Observed<'a> {
    Policy(&'a Policy),
    Binding(&'a Binding),
    Crd(&'a CrdInfo),
}

impl Observed<'_> {
    fn kind(&self) -> &'static str {
        match self {
            Observed::Policy(_) => VAP_KIND,
            Observed::Binding(_) => VAPB_KIND,
            Observed::Crd(_) => CRD_KIND,
        }
    }
    fn name(&self) -> &str {
        match self {
            Observed::Policy(p) => p.name(),
            Observed::Binding(b) => b.name(),
            Observed::Crd(c) => &c.name,
        }
    }
    fn meta(&self) -> &crate::model::meta::Meta {
        match self {
            Observed::Policy(p) => &p.meta,
            Observed::Binding(b) => &b.meta,
            Observed::Crd(c) => &c.meta,
        }
    }
    fn raw(&self) -> Value {
        match self {
            Observed::Policy(p) => p.raw(),
            Observed::Binding(b) => b.raw(),
            Observed::Crd(c) => c.raw(),
        }
    }
    fn view(&self) -> Value {
        match self {
            Observed::Policy(p) => policy_view_observed(p),
            Observed::Binding(b) => binding_view_observed(b),
            Observed::Crd(c) => crd_view(&c.raw()),
        }
    }
}

impl<'a> From<&'a Policy> for Observed<'a> {
    fn from(p: &'a Policy) -> Self {
        Observed::Policy(p)
    }
}

impl<'a> From<&'a CrdInfo> for Observed<'a> {
    fn from(c: &'a CrdInfo) -> Self {
        Observed::Crd(c)
    }
}

/// A CRD's diff view: identity, ownership, labels and the spec as the server stores it.
fn crd_view(v: &Value) -> Value {
    view(
        v["metadata"]["name"].as_str().unwrap_or_default(),
        &v["metadata"]["labels"],
        &v["metadata"]["ownerReferences"],
        normalize_spec(&v["spec"]),
    )
}

impl<'a> From<&'a Binding> for Observed<'a> {
    fn from(b: &'a Binding) -> Self {
        Observed::Binding(b)
    }
}

impl PlannedWrite {
    fn new(verb: Verb, kind: &str, name: &str, code: Code, reason: &str, diff: String) -> Self {
        PlannedWrite {
            verb,
            object: ObjectRef::new(api_version_of(kind), kind, name),
            code,
            reason: reason.into(),
            body: None,
            uid: None,
            resource_version: None,
            diff,
        }
    }

    fn with_preconditions(mut self, meta: &crate::model::meta::Meta) -> Self {
        self.uid = Some(meta.uid.clone()).filter(|u| !u.is_empty());
        self.resource_version = Some(meta.resource_version.clone()).filter(|v| !v.is_empty());
        self
    }

    /// Creates `d`.
    pub(crate) fn create<D: Desired>(d: &D, code: Code, reason: &str, diff: Diff) -> Self {
        let (kind, name) = (D::KIND, d.name());
        let diff = match diff {
            Diff::Render => {
                unified_diff("", &yaml(&d.view()), "/dev/null", &format!("{kind}/{name}"))
            }
            Diff::Skip => String::new(),
        };
        let mut w = Self::new(Verb::Create, kind, name, code, reason, diff);
        w.body = Some(with_type(d.body(), kind));
        w
    }

    /// Updates `observed` to `d`, keeping what of its metadata is not ours ([`update_body`]).
    pub(crate) fn update<D: Desired>(
        d: &D,
        observed: &D::Observed,
        code: Code,
        reason: &str,
        diff: Diff,
    ) -> Self {
        let (kind, o) = (D::KIND, D::observed(observed));
        let diff = match diff {
            Diff::Render => {
                let label = format!("{kind}/{}", o.name());
                unified_diff(
                    &yaml(&o.view()),
                    &yaml(&d.view()),
                    &format!("{label} (live)"),
                    &format!("{label} (desired)"),
                )
            }
            Diff::Skip => String::new(),
        };
        let mut w = Self::new(Verb::Update, kind, o.name(), code, reason, diff)
            .with_preconditions(o.meta());
        w.body = Some(update_body(&o.raw(), &with_type(d.body(), kind)));
        w
    }

    /// Deletes `observed`: this exact object (uid and resourceVersion preconditions).
    pub(crate) fn delete<'a>(
        observed: impl Into<Observed<'a>>,
        code: Code,
        reason: &str,
        diff: Diff,
    ) -> Self {
        let o = observed.into();
        let kind = o.kind();
        let diff = match diff {
            Diff::Render => unified_diff(
                &yaml(&o.view()),
                "",
                &format!("{kind}/{}", o.name()),
                "/dev/null",
            ),
            Diff::Skip => String::new(),
        };
        Self::new(Verb::Delete, kind, o.name(), code, reason, diff).with_preconditions(o.meta())
    }
}

/// What a plan writes, as generation builds it: a VAP, a binding, a constraint CRD. One
/// create, update and delete serve all three.
pub(crate) trait Desired: Serialize + Sized {
    const KIND: &'static str;
    /// The findings a create, an update and a delete of one resolve (`None`: the steps never
    /// delete one).
    const CODES: (Code, Code, Option<Code>);
    /// What an update starts from.
    type Observed;
    fn name(&self) -> &str;
    /// The object to send (`apiVersion` and `kind` are set by the write).
    fn body(&self) -> Value {
        to_value(self)
    }
    /// The diff view: identity, ownership, labels, the normalized spec.
    fn view(&self) -> Value;
    fn observed(o: &Self::Observed) -> Observed<'_>;
}

/// The generated VAP and binding: typed, named in their metadata.
macro_rules! typed_desired {
    ($($type:ty: $kind:expr, $observed:ty, $view:expr, $codes:expr;)*) => {$(
        impl Desired for $type {
            const KIND: &'static str = $kind;
            const CODES: (Code, Code, Option<Code>) = $codes;
            type Observed = $observed;
            fn name(&self) -> &str {
                self.metadata.name.as_deref().unwrap_or_default()
            }
            fn view(&self) -> Value {
                $view(self)
            }
            fn observed(o: &$observed) -> Observed<'_> {
                o.into()
            }
        }
    )*};
}

typed_desired! {
    ValidatingAdmissionPolicy: VAP_KIND, Policy, policy_view_desired,
        (Code::PolicyMissing, Code::PolicyOutOfSync, Some(Code::PolicyDangling));
    ValidatingAdmissionPolicyBinding: VAPB_KIND, Binding, binding_view_desired,
        (Code::BindingMissing, Code::BindingOutOfSync, Some(Code::BindingDangling));
}

/// The steps box the large desired objects.
impl<D: Desired> Desired for Box<D> {
    const KIND: &'static str = D::KIND;
    const CODES: (Code, Code, Option<Code>) = D::CODES;
    type Observed = D::Observed;
    fn name(&self) -> &str {
        (**self).name()
    }
    fn body(&self) -> Value {
        (**self).body()
    }
    fn view(&self) -> Value {
        (**self).view()
    }
    fn observed(o: &Self::Observed) -> Observed<'_> {
        D::observed(o)
    }
}

/// A constraint CRD as [`super::crd::desired_crd`] builds it: JSON, there is no typed CRD here.
impl Desired for Value {
    const KIND: &'static str = CRD_KIND;
    // A CRD is deleted only once its template is seen gone (`step::crd`), never by its step.
    const CODES: (Code, Code, Option<Code>) = (Code::CrdMissing, Code::CrdOutOfSync, None);
    type Observed = CrdInfo;
    fn name(&self) -> &str {
        self["metadata"]["name"].as_str().unwrap_or_default()
    }
    fn body(&self) -> Value {
        self.clone()
    }
    fn view(&self) -> Value {
        crd_view(self)
    }
    fn observed(o: &CrdInfo) -> Observed<'_> {
        o.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Source;

    fn desired_binding(action: &str) -> ValidatingAdmissionPolicyBinding {
        serde_json::from_value(json!({
            "metadata": { "name": "gatekeeper-k8sx-c1", "labels": { "a": "b" } },
            "spec": { "policyName": "gatekeeper-k8sx", "validationActions": [action] }
        }))
        .expect("binding")
    }

    fn observed_binding() -> Binding {
        Binding::from_value(
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": { "name": "gatekeeper-k8sx-c1", "uid": "u1", "resourceVersion": "7" },
                "spec": { "policyName": "gatekeeper-k8sx", "validationActions": ["Warn"] }
            }),
            Source::default(),
        )
        .expect("observed")
    }

    /// The reconciler skips the diff; what it sends must be exactly what `plan` shows.
    #[test]
    fn skipping_the_diff_changes_nothing_that_is_sent() {
        let d = desired_binding("Deny");
        let o = observed_binding();
        let pairs = [
            (
                PlannedWrite::create(&d, Code::BindingMissing, "r", Diff::Render),
                PlannedWrite::create(&d, Code::BindingMissing, "r", Diff::Skip),
            ),
            (
                PlannedWrite::update(&d, &o, Code::BindingOutOfSync, "r", Diff::Render),
                PlannedWrite::update(&d, &o, Code::BindingOutOfSync, "r", Diff::Skip),
            ),
            (
                PlannedWrite::delete(&o, Code::BindingDangling, "r", Diff::Render),
                PlannedWrite::delete(&o, Code::BindingDangling, "r", Diff::Skip),
            ),
        ];
        for (rendered, skipped) in pairs {
            assert!(!rendered.diff.is_empty(), "{rendered:?}");
            assert!(skipped.diff.is_empty(), "{skipped:?}");
            assert_eq!(
                PlannedWrite {
                    diff: String::new(),
                    ..rendered
                },
                skipped
            );
        }
    }
}
