//! `kubectl vap render`: the objects the reconciler would hold, as manifests, and their static
//! form for the API server's manifest-based admission (KEP-5793, `staticManifestsDir`).
//!
//! No generation of its own: the snapshot's observed VAPs, bindings and CRDs are set aside
//! and [`analyze`] plans the cluster from nothing, so every object it would hold is a create
//! whose body is exactly what `run` would send (labels, controller ownerReferences with the
//! owners' uids when the input has them). What is observed can change what the reconciler
//! *does* (a foreign object, a frozen binding of an invalid constraint), never what it
//! *wants*; render shows what it wants.

use super::analysis::analyze;
use super::findings::{Code, Finding, Severity};
use super::names;
use super::normalize;
use super::options::{Options, PolicyShape};
use crate::model::{CONSTRAINTS_GROUP, ObjectRef, Policy, VAP_KIND, VAPB_KIND};
use crate::snapshot::Snapshot;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The suffix the API server reserves for objects loaded from `staticManifestsDir` (and refuses
/// through its REST API): `k8s.io/apiserver/pkg/admission/plugin/manifest`, `StaticConfigSuffix`.
pub const STATIC_SUFFIX: &str = ".static.k8s.io";
/// On a static object: the constraint it was rendered from, `Kind/name` (`check --static`
/// reads it back; a static object has no ownerReference, nothing owns it in the cluster).
pub const CONSTRAINT_ANNOTATION: &str = "kubectl-vap.io/constraint";
/// On a static object: the template of that constraint.
pub const TEMPLATE_ANNOTATION: &str = "kubectl-vap.io/template";

/// One name on `render`'s command line: `Kind/name` is a constraint, anything else a template.
/// (A template name is a lowercase DNS label and a constraint kind a CamelCase identifier, so
/// the slash is never ambiguous.)
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Selected {
    Template(String),
    Constraint { kind: String, name: String },
}

impl Selected {
    pub fn parse(s: &str) -> Selected {
        match s.split_once('/') {
            Some((kind, name)) => Selected::Constraint {
                kind: kind.to_string(),
                name: name.to_string(),
            },
            None => Selected::Template(s.to_string()),
        }
    }
}

impl std::fmt::Display for Selected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Selected::Template(t) => write!(f, "{t}"),
            Selected::Constraint { kind, name } => write!(f, "{kind}/{name}"),
        }
    }
}

/// What `render` produces.
#[derive(Debug, Clone, Default)]
pub struct Rendered {
    /// The objects, sorted (CRDs, VAPs, bindings; by name within a kind): same input, same
    /// order, whatever order the input had.
    pub objects: Vec<Value>,
    /// What `check` says about the selected templates and constraints (warnings and errors):
    /// what could not be rendered, and why. `--static` adds `static-refused`.
    pub findings: Vec<Finding>,
    /// Names on the command line that select nothing in the input.
    pub unknown: Vec<Selected>,
    /// The shape each selected template was rendered in (`auto` resolved per template).
    pub shapes: BTreeMap<String, PolicyShape>,
}

/// Which templates and constraints a selection holds, resolved against the snapshot.
struct Resolved {
    all: bool,
    templates: BTreeSet<String>,
    /// Constraint kinds selected whole (through their template).
    kinds: BTreeSet<String>,
    constraints: BTreeSet<(String, String)>,
}

impl Resolved {
    fn of(snap: &Snapshot, selection: &[Selected]) -> (Resolved, Vec<Selected>) {
        let mut r = Resolved {
            all: selection.is_empty(),
            templates: BTreeSet::new(),
            kinds: BTreeSet::new(),
            constraints: BTreeSet::new(),
        };
        let mut unknown = Vec::new();
        for s in selection {
            match s {
                Selected::Template(name) => {
                    match snap.templates.iter().find(|t| t.name() == name) {
                        Some(t) => {
                            r.templates.insert(name.clone());
                            r.kinds.extend(t.kind.clone());
                        }
                        None => unknown.push(s.clone()),
                    }
                }
                // Kinds are matched without case, as kubectl matches `kind/name`.
                Selected::Constraint { kind, name } => match snap
                    .constraints
                    .iter()
                    .find(|c| c.kind.eq_ignore_ascii_case(kind) && c.name() == name)
                {
                    Some(c) => {
                        r.constraints.insert((c.kind.clone(), name.clone()));
                    }
                    None => unknown.push(s.clone()),
                },
            }
        }
        (r, unknown)
    }

    fn template(&self, name: &str) -> bool {
        self.all || self.templates.contains(name)
    }

    fn constraint(&self, kind: &str, name: &str) -> bool {
        self.all
            || self.kinds.contains(kind)
            || self
                .constraints
                .contains(&(kind.to_string(), name.to_string()))
    }

    /// Whether a finding is about something selected (its object, or one it relates to).
    fn finding(&self, f: &Finding, template_kinds: &BTreeMap<&str, &str>) -> bool {
        std::iter::once(&f.object)
            .chain(&f.related)
            .any(|o| self.object(o, template_kinds))
    }

    fn object(&self, o: &ObjectRef, template_kinds: &BTreeMap<&str, &str>) -> bool {
        if o.kind == "ConstraintTemplate" {
            return self.template(&o.name)
                || template_kinds
                    .get(o.name.as_str())
                    .is_some_and(|k| self.kinds.contains(*k));
        }
        o.api_version.starts_with(CONSTRAINTS_GROUP) && self.constraint(&o.kind, &o.name)
    }
}

/// Whether a finding is about the input itself (what `check` says of a template or a
/// constraint), not about observed objects: those were set aside, so "missing" is what every
/// object is here, and means nothing.
fn about_input(code: Code) -> bool {
    matches!(
        code,
        Code::TemplateError
            | Code::ConstraintError
            | Code::ConstraintMatchesEverything
            | Code::InputDuplicate
    )
}

/// A reference without a uid (the owner came from a file that has none) is written without
/// the field, rather than with an empty one the API server would refuse.
fn drop_empty_uids(obj: &mut Value) {
    for r in obj["metadata"]["ownerReferences"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        if r["uid"].as_str().is_some_and(str::is_empty)
            && let Some(r) = r.as_object_mut()
        {
            r.remove("uid");
        }
    }
}

/// The controller ownerReference of a rendered object: (apiVersion, kind, name).
fn controller(obj: &Value) -> Option<(&str, &str, &str)> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == Value::Bool(true))
        .map(|r| {
            (
                r["apiVersion"].as_str().unwrap_or_default(),
                r["kind"].as_str().unwrap_or_default(),
                r["name"].as_str().unwrap_or_default(),
            )
        })
}

/// The snapshot with what the reconciler writes set aside, so the analysis plans every object
/// it would hold as a create. CRDs count as listed (so theirs are planned too) and, being
/// absent, as established (no binding waits).
fn desired_only(snap: &Snapshot) -> Snapshot {
    let mut s = snap.clone();
    s.policies.clear();
    s.bindings.clear();
    s.crds.clear();
    s.crds_listed = true;
    // What we set aside cannot be unreadable; templates or constraints that were are an
    // error of the loader before this runs (a render must not be partial).
    for r in [
        "validatingadmissionpolicies.admissionregistration.k8s.io",
        "validatingadmissionpolicybindings.admissionregistration.k8s.io",
        "customresourcedefinitions.apiextensions.k8s.io",
    ] {
        s.unreadable.remove(r);
    }
    s
}

fn kind_rank(kind: &str) -> u8 {
    match kind {
        "CustomResourceDefinition" => 0,
        VAP_KIND => 1,
        VAPB_KIND => 2,
        _ => 3,
    }
}

/// Sorted by kind (CRDs, VAPs, bindings, as they are written), then name.
fn sort(objects: &mut [Value]) {
    objects.sort_by(|a, b| {
        let key = |o: &Value| {
            (
                kind_rank(o["kind"].as_str().unwrap_or_default()),
                o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        };
        key(a).cmp(&key(b))
    });
}

/// The objects the reconciler would hold for the selected templates and constraints (all when
/// `selection` is empty), in the shape `opts` says (`auto` resolved per template as the
/// reconciler resolves it). A template selects its CRD, its VAP and every constraint of its
/// kind; `Kind/name` selects that constraint's binding (and its VAP in the inline shape).
pub fn render(snap: &Snapshot, opts: &Options, selection: &[Selected]) -> Rendered {
    let (sel, unknown) = Resolved::of(snap, selection);
    let desired = desired_only(snap);
    let analysis = analyze(&desired, opts);
    let template_kinds: BTreeMap<&str, &str> = snap
        .templates
        .iter()
        .filter_map(|t| Some((t.name(), t.kind.as_deref()?)))
        .collect();
    let mut objects: Vec<Value> = analysis
        .plan
        .into_iter()
        .filter(|w| w.verb == super::plan::Verb::Create)
        .filter_map(|w| w.body)
        .map(|mut o| {
            drop_empty_uids(&mut o);
            o
        })
        .filter(|o| match controller(o) {
            Some((_, "ConstraintTemplate", name)) => sel.template(name),
            Some((api, kind, name)) if api.starts_with(CONSTRAINTS_GROUP) => {
                sel.constraint(kind, name)
            }
            _ => sel.all,
        })
        .collect();
    sort(&mut objects);
    let findings: Vec<Finding> = analysis
        .findings
        .into_iter()
        .filter(|f| f.severity >= Severity::Warning && about_input(f.code))
        .filter(|f| sel.finding(f, &template_kinds))
        .collect();
    // The shape each template got, for the header: resolved as `analyze` resolves it for the
    // objects (`shape::of_kind`), so the label cannot drift from them.
    let shapes = snap
        .templates
        .iter()
        .filter(|t| {
            sel.template(t.name())
                || t.kind.as_deref().is_some_and(|k| {
                    sel.kinds.contains(k) || sel.constraints.iter().any(|(ck, _)| ck == k)
                })
        })
        .map(|t| {
            let shape = match t.kind.as_deref() {
                Some(kind) => super::shape::of_kind(snap, opts, kind),
                None => opts.policy_shape.for_template(0),
            };
            (t.name().to_string(), shape)
        })
        .collect();
    Rendered {
        objects,
        findings,
        unknown,
        shapes,
    }
}

/// `name` with [`STATIC_SUFFIX`], within the 253 characters a name may have (shortened with a
/// hash, as every generated name is).
pub fn static_name(name: &str) -> String {
    let room = names::MAX_NAME - STATIC_SUFFIX.len();
    format!(
        "{}{STATIC_SUFFIX}",
        names::shortened_to(name.to_string(), room)
    )
}

/// A rendered inline object as a static manifest: named with [`STATIC_SUFFIX`] (a binding
/// pointing at its policy's static name), no ownerReferences (nothing in the cluster owns a
/// file; the loader validates them as the API would, and a file from `-f` may have no uid),
/// the constraint and template it came from in annotations.
fn to_static(obj: &Value, constraint: &str, template: &str) -> Value {
    let mut o = obj.clone();
    let name = o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(meta) = o["metadata"].as_object_mut() {
        meta.insert("name".into(), Value::String(static_name(&name)));
        meta.remove("ownerReferences");
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(CONSTRAINT_ANNOTATION.into(), constraint.into());
            a.insert(TEMPLATE_ANNOTATION.into(), template.into());
        }
    }
    if let Some(policy) = o["spec"]["policyName"].as_str().map(static_name) {
        o["spec"]["policyName"] = Value::String(policy);
    }
    o
}

/// `render --static`: the selected constraints as static manifests — their inline VAPs and
/// bindings (the inline shape whatever `opts` says: the only one without `paramKind`, which
/// the loader refuses), renamed and annotated by [`to_static`]. A constraint that cannot be
/// static gets a `static-refused` finding (error) and no object: its template reads `params`
/// directly, or it cannot be rendered inline at all (the `constraint-error` or
/// `template-error` beside it says why, e.g. parameters over the CEL size limit).
pub fn render_static(snap: &Snapshot, opts: &Options, selection: &[Selected]) -> Rendered {
    let inline = Options {
        policy_shape: PolicyShape::Inline,
        ..opts.clone()
    };
    let mut r = render(snap, &inline, selection);
    let template_of_kind: BTreeMap<&str, &str> = snap
        .templates
        .iter()
        .filter_map(|t| Some((t.kind.as_deref()?, t.name())))
        .collect();
    let template_of = |kind: &str| {
        snap.templates
            .iter()
            .find(|t| t.kind.as_deref() == Some(kind))
    };
    // Per constraint (`Kind/name`): its VAP and binding.
    let mut by_constraint: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for o in &r.objects {
        if let Some((api, kind, name)) = controller(o)
            && api.starts_with(CONSTRAINTS_GROUP)
        {
            by_constraint
                .entry(format!("{kind}/{name}"))
                .or_default()
                .push(o.clone());
        }
    }
    let mut objects = Vec::new();
    let mut refused = Vec::new();
    let (sel, _) = Resolved::of(snap, selection);
    for c in &snap.constraints {
        if !sel.constraint(&c.kind, c.name()) {
            continue;
        }
        let id = format!("{}/{}", c.kind, c.name());
        let cref = super::step::constraint_ref(c);
        let template = template_of_kind.get(c.kind.as_str()).copied();
        let objs = by_constraint.remove(&id).unwrap_or_default();
        let has_policy = objs.iter().any(|o| o["kind"] == VAP_KIND);
        let has_binding = objs.iter().any(|o| o["kind"] == VAPB_KIND);
        // Parsed, as `auto` and `--policy-shape inline` judge it (`shape::template_reads_params`):
        // such a template gets no inline VAP at all, so it is told here, before what is missing.
        if let Some(e) =
            template_of(&c.kind).and_then(|t| super::shape::template_reads_params(t, opts))
        {
            refused.push(
                Finding::new(
                    Code::StaticRefused,
                    cref,
                    format!(
                        "cannot be static: its template {} reads `params` directly ({e}), and a static policy has no paramKind, so there is no params there; read `variables.params` instead",
                        template.unwrap_or("?"),
                    ),
                )
                .at(&c.source),
            );
            continue;
        }
        if has_policy && has_binding {
            let t = template.unwrap_or_default();
            objects.extend(objs.iter().map(|o| to_static(o, &id, t)));
            continue;
        }
        // Not bound: an error says why (then it cannot be static), or it simply does not
        // target the VAP (enforcementAction, template not generating): nothing to render.
        let why = r
            .findings
            .iter()
            .find(|f| {
                f.severity == Severity::Error
                    && (f.object == cref
                        || template.is_some_and(|t| {
                            f.object.kind == "ConstraintTemplate" && f.object.name == t
                        }))
            })
            .map(|f| f.message.clone());
        if let Some(why) = why {
            refused.push(
                Finding::new(
                    Code::StaticRefused,
                    cref,
                    format!("cannot be static: it cannot be rendered inline: {why}"),
                )
                .at(&c.source),
            );
        }
    }
    sort(&mut objects);
    r.objects = objects;
    r.findings.extend(refused);
    r.shapes.values_mut().for_each(|s| *s = PolicyShape::Inline);
    r
}

/// `check --static`: the static manifests read from a directory against what `render --static`
/// gives now (same options). Only objects that carry [`CONSTRAINT_ANNOTATION`] are judged
/// (others are not ours). `static-dangling`: the constraint is gone, or no longer renders
/// (its template or enforcement action changed); `static-out-of-sync`: it renders to another
/// spec (the constraint or its template changed since the file was written).
pub fn check_static(
    snap: &Snapshot,
    opts: &Options,
    policies: &[Policy],
    bindings: &[crate::model::Binding],
) -> Vec<Finding> {
    let now = render_static(snap, opts, &[]);
    let by_name: BTreeMap<(&str, &str), &Value> = now
        .objects
        .iter()
        .map(|o| {
            (
                (
                    o["kind"].as_str().unwrap_or_default(),
                    o["metadata"]["name"].as_str().unwrap_or_default(),
                ),
                o,
            )
        })
        .collect();
    let mut out = Vec::new();
    let mut judge = |kind: &str,
                     name: &str,
                     annotations: Option<&BTreeMap<String, String>>,
                     spec: Value,
                     source: &crate::model::Source| {
        let Some(constraint) = annotations.and_then(|a| a.get(CONSTRAINT_ANNOTATION)) else {
            return;
        };
        let object = ObjectRef::new("admissionregistration.k8s.io/v1", kind, name);
        let exists = constraint.split_once('/').is_some_and(|(k, n)| {
            snap.constraints
                .iter()
                .any(|c| c.kind == k && c.name() == n)
        });
        let finding = match by_name.get(&(kind, name)) {
            None if !exists => Some(Finding::new(
                Code::StaticDangling,
                object,
                format!(
                    "static manifest of constraint {constraint}, which is gone: it still enforces on every API server that loads it; delete the file (or render it again)"
                ),
            )),
            None => Some(Finding::new(
                Code::StaticDangling,
                object,
                format!(
                    "static manifest of constraint {constraint}, which no longer renders as a static policy (see its other findings): it still enforces the old one; render again"
                ),
            )),
            Some(desired) => {
                let same = match kind {
                    VAP_KIND => {
                        let d = serde_json::from_value(desired["spec"].clone()).ok();
                        let o = serde_json::from_value(spec).ok();
                        d.map(normalize::policy_spec) == o.map(normalize::policy_spec)
                    }
                    _ => {
                        let d = serde_json::from_value(desired["spec"].clone()).ok();
                        let o = serde_json::from_value(spec).ok();
                        d.map(normalize::binding_spec) == o.map(normalize::binding_spec)
                    }
                };
                (!same).then(|| {
                    Finding::new(
                        Code::StaticOutOfSync,
                        object,
                        format!(
                            "static manifest of constraint {constraint} differs from what it renders to now (the constraint or its template changed since): render it again"
                        ),
                    )
                })
            }
        };
        out.extend(finding.map(|f| f.at(source)));
    };
    for p in policies {
        judge(
            VAP_KIND,
            p.name(),
            p.object.metadata.annotations.as_ref(),
            serde_json::to_value(&p.object.spec).unwrap_or(Value::Null),
            &p.source,
        );
    }
    for b in bindings {
        judge(
            VAPB_KIND,
            b.name(),
            b.object.metadata.annotations.as_ref(),
            serde_json::to_value(&b.object.spec).unwrap_or(Value::Null),
            &b.source,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_names_end_in_the_suffix_and_fit() {
        assert_eq!(
            static_name("gatekeeper-k.c"),
            "gatekeeper-k.c.static.k8s.io"
        );
        let long = format!("gatekeeper-k.{}", "a".repeat(250));
        let s = static_name(&long);
        assert!(s.ends_with(STATIC_SUFFIX), "{s}");
        assert!(s.len() <= names::MAX_NAME, "{}", s.len());
        assert_ne!(
            static_name(&format!("{long}b")),
            s,
            "a hash keeps them apart"
        );
    }

    #[test]
    fn a_selection_parses_kind_slash_name_as_a_constraint() {
        assert_eq!(
            Selected::parse("K8sRequiredLabels/must-have-owner"),
            Selected::Constraint {
                kind: "K8sRequiredLabels".into(),
                name: "must-have-owner".into()
            }
        );
        assert_eq!(
            Selected::parse("k8srequiredlabels"),
            Selected::Template("k8srequiredlabels".into())
        );
    }
}
