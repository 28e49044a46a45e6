//! Whole-snapshot analysis: desired vs observed, giving findings, the plan (the minimal writes)
//! and the tree. Pure: the same snapshot and options give the same result.

use super::crd;
use super::decide::{TemplateVerdict, decide_template};
use super::desired::{BindingDecision, CrdState, Opinion, binding_decision};
use super::findings::{Code, Finding};
use super::generate;
use super::names;
use super::normalize;
use super::options::Options;
use super::ownership::{Control, OwnerId, control, gatekeeper_controller};
use super::plan::{Diff, PlannedWrite, Verb};
use super::tree::{Node, NodeKind, State};
use crate::model::{
    Binding, CONSTRAINTS_GROUP, Constraint, ConstraintTemplate, CrdInfo, ObjectRef, Policy,
    TEMPLATES_GROUP,
};
use crate::snapshot::Snapshot;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use std::collections::{BTreeMap, BTreeSet};

const AR_V1: &str = "admissionregistration.k8s.io/v1";

#[derive(Debug, Clone, Default)]
pub struct Analysis {
    pub findings: Vec<Finding>,
    pub plan: Vec<PlannedWrite>,
    pub tree: Vec<Node>,
}

pub fn policy_ref(name: &str) -> ObjectRef {
    ObjectRef::new(AR_V1, "ValidatingAdmissionPolicy", name)
}
pub fn binding_ref(name: &str) -> ObjectRef {
    ObjectRef::new(AR_V1, "ValidatingAdmissionPolicyBinding", name)
}
pub fn template_ref(t: &ConstraintTemplate) -> ObjectRef {
    let v = if t.api_version.is_empty() {
        "templates.gatekeeper.sh/v1"
    } else {
        &t.api_version
    };
    ObjectRef::new(v, "ConstraintTemplate", t.name())
}
pub fn constraint_ref(c: &Constraint) -> ObjectRef {
    let v = if c.api_version.is_empty() {
        "constraints.gatekeeper.sh/v1beta1"
    } else {
        &c.api_version
    };
    ObjectRef::new(v, &c.kind, c.name())
}

/// The opinion each kind gets from its template, as the template side would publish it,
/// assuming (for a plan) that the VAP is written before any binding.
pub fn opinions(
    templates: &[ConstraintTemplate],
    opts: &Options,
) -> BTreeMap<String, (Opinion, TemplateVerdict)> {
    let mut out = BTreeMap::new();
    for t in templates {
        let verdict = decide_template(t, opts);
        let Some(kind) = &t.kind else { continue };
        let opinion = Opinion {
            template: t.name().to_string(),
            generate: verdict.generates(),
            policy_ready: verdict.generates(),
            frozen: matches!(verdict, TemplateVerdict::Invalid { .. }),
            reason: verdict.reason().to_string(),
        };
        out.insert(kind.clone(), (opinion, verdict));
    }
    out
}

pub fn crd_state(snapshot: &Snapshot, kind: &str) -> CrdState {
    match snapshot
        .crds
        .iter()
        .find(|c| c.group == CONSTRAINTS_GROUP && c.kind == kind)
    {
        None => CrdState::Unknown,
        Some(c) if c.established => CrdState::Established(c.established_since),
        Some(_) => CrdState::NotEstablished,
    }
}

/// How an observed object compares with the desired one.
#[derive(Debug, Clone, PartialEq)]
pub enum Comparison {
    InSync,
    /// Differs in these fields (or its ownerReference / label): one update fixes it.
    OutOfSync(Vec<&'static str>),
    Foreign(String),
}

/// The comparison both kinds share: ownership first, then the spec difference (`spec_diff`
/// gets whether the object carries our label), plus a stale owner reference.
fn compare(
    meta: &crate::model::meta::Meta,
    owner: &OwnerId<'_>,
    spec_diff: impl FnOnce(bool) -> Vec<&'static str>,
) -> Comparison {
    let ctl = control(meta, owner);
    if let Control::Other(why) = ctl {
        return Comparison::Foreign(why);
    }
    let mut diff = spec_diff(meta.managed_by_us());
    if ctl == Control::StaleOwner {
        diff.push("metadata.ownerReferences");
    }
    if diff.is_empty() {
        Comparison::InSync
    } else {
        Comparison::OutOfSync(diff)
    }
}

pub fn compare_policy(
    desired: &ValidatingAdmissionPolicy,
    observed: &Policy,
    owner: &OwnerId<'_>,
) -> Comparison {
    compare(&observed.meta, owner, |ours| {
        let d = normalize::policy_spec(desired.spec.clone());
        let o = normalize::policy_spec(observed.object.spec.clone());
        if ours {
            normalize::policy_diff(&d, &o)
        } else {
            normalize::policy_diff_semantic(&d, &o)
        }
    })
}

/// A constraint CRD against the one its template defines. A CRD without a controller is
/// adopted as Gatekeeper adopts it: without a write when it is already what the template
/// defines, with one update (spec and controller reference) when it is not.
pub fn compare_crd(
    desired: &serde_json::Value,
    observed: &CrdInfo,
    owner: &OwnerId<'_>,
) -> Comparison {
    if observed.meta.controller().is_none() {
        let mut diff = crd::spec_diff(&desired["spec"], &observed.spec, true);
        if !diff.is_empty() {
            diff.push("metadata.ownerReferences");
            return Comparison::OutOfSync(diff);
        }
        return Comparison::InSync;
    }
    compare(&observed.meta, owner, |ours| {
        crd::spec_diff(&desired["spec"], &observed.spec, !ours)
    })
}

pub fn crd_ref(name: &str) -> ObjectRef {
    ObjectRef::new(crd::CRD_API_VERSION, crd::CRD_KIND, name)
}

pub fn compare_binding(
    desired: &ValidatingAdmissionPolicyBinding,
    observed: &Binding,
    owner: &OwnerId<'_>,
) -> Comparison {
    compare(&observed.meta, owner, |ours| {
        let d = normalize::binding_spec(desired.spec.clone());
        let o = normalize::binding_spec(observed.object.spec.clone());
        normalize::binding_diff(&d, &o, !ours)
    })
}

struct Builder<'a> {
    snap: &'a Snapshot,
    findings: Vec<Finding>,
    policy_deletes: Vec<PlannedWrite>,
}

impl Builder<'_> {
    fn find(&mut self, node: &mut Node, f: Finding) {
        node.findings.push(self.findings.len());
        self.findings.push(f);
    }
}

pub fn analyze(snap: &Snapshot, opts: &Options) -> Analysis {
    // The core never reads the clock: every loader stamps the time it read the objects. A
    // snapshot without one (built by hand) counts every binding wait as elapsed.
    let now = snap.now.unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
    let mut b = Builder {
        snap,
        findings: Vec::new(),
        policy_deletes: Vec::new(),
    };
    let mut opinions = opinions(&snap.templates, opts);
    // I1: a binding needs its VAP written. A foreign object holding the VAP's name means we never
    // write it, so the kind's bindings wait (as the live reconciler does).
    for (opinion, _) in opinions.values_mut() {
        let name = names::policy_name(&opinion.template);
        let foreign = snap
            .policies
            .iter()
            .find(|p| p.name() == name)
            .is_some_and(|p| {
                let owner = OwnerId::template(&opinion.template, "");
                matches!(control(&p.meta, &owner), Control::Other(_))
            });
        if foreign {
            opinion.policy_ready = false;
        }
    }

    let policies_by_name: BTreeMap<&str, &Policy> =
        snap.policies.iter().map(|p| (p.name(), p)).collect();
    let bindings_by_name: BTreeMap<&str, &Binding> =
        snap.bindings.iter().map(|x| (x.name(), x)).collect();
    let mut constraints_by_kind: BTreeMap<&str, Vec<&Constraint>> = BTreeMap::new();
    for c in &snap.constraints {
        constraints_by_kind
            .entry(c.kind.as_str())
            .or_default()
            .push(c);
    }
    // Observed objects that the desired state accounts for (kept, updated or foreign).
    let mut seen_policies: BTreeSet<&str> = BTreeSet::new();
    let mut seen_bindings: BTreeSet<&str> = BTreeSet::new();
    // Constraints whose bindings must not be touched (invalid constraint or template).
    let mut frozen_constraints: BTreeSet<(&str, &str)> = BTreeSet::new();
    let crds_by_name: BTreeMap<&str, &CrdInfo> =
        snap.crds.iter().map(|c| (c.name.as_str(), c)).collect();
    let mut seen_crds: BTreeSet<&str> = BTreeSet::new();
    let mut crd_writes = Vec::new();
    let mut policy_writes = Vec::new();
    let mut binding_writes = Vec::new();
    let mut tree = Vec::new();

    let mut templates: Vec<&ConstraintTemplate> = snap.templates.iter().collect();
    templates.sort_by(|a, b| a.name().cmp(b.name()));
    for t in templates {
        let verdict = decide_template(t, opts);
        let tref = template_ref(t);
        let (state, reason) = match &verdict {
            TemplateVerdict::Generate { reason, .. } => (State::Generate, reason.clone()),
            TemplateVerdict::Skip { reason } => (State::NoVap, reason.clone()),
            TemplateVerdict::Invalid { reason } => (State::Error, reason.clone()),
        };
        let mut tnode = Node::new(
            format!("template/{}", t.name()),
            NodeKind::Template,
            t.name(),
            state,
            reason,
        );
        tnode.object = Some(tref.clone());
        if let TemplateVerdict::Invalid { reason } = &verdict {
            let f = Finding::new(
                Code::TemplateError,
                tref.clone(),
                format!("{reason}; fix the template (its VAP and bindings are left as they are)"),
            )
            .at(&t.source);
            b.find(&mut tnode, f);
        }

        // The constraint CRD: first, as everything else of the kind rests on it.
        if let Some(kind) = t.kind.as_deref().filter(|_| snap.crds_listed) {
            let name = crd::crd_name(kind);
            let observed = crds_by_name.get(name.as_str()).copied();
            if let Some(o) = observed {
                seen_crds.insert(&o.name);
            }
            let node = crd_node(&mut b, t, kind, &verdict, observed, &tref, &mut crd_writes);
            tnode.children.push(node);
        }

        // The policy.
        let pname = names::policy_name(t.name());
        let observed = policies_by_name.get(pname.as_str()).copied();
        let owner = OwnerId::template(t.name(), &t.meta.uid);
        let mut pnode = Node::new(
            format!("policy/{pname}"),
            NodeKind::Policy,
            &pname,
            State::NotBound,
            "",
        );
        pnode.object = Some(policy_ref(&pname));
        match (&verdict, observed) {
            (
                TemplateVerdict::Generate {
                    source,
                    failure_policy,
                    ..
                },
                obs,
            ) => {
                let kind = t.kind.as_deref().unwrap_or_default();
                let desired = generate::policy(t, kind, source, *failure_policy);
                match obs {
                    None => {
                        pnode.state = State::Missing;
                        pnode.reason = "not written yet".into();
                        let f = Finding::new(
                            Code::PolicyMissing,
                            policy_ref(&pname),
                            format!("template {} generates a VAP but {pname} does not exist; run `kubectl vap reconcile {}`", t.name(), t.name()),
                        )
                        .related(tref.clone());
                        b.find(&mut pnode, f);
                        policy_writes.push(PlannedWrite::create_policy(
                            &desired,
                            Code::PolicyMissing,
                            "the template generates a VAP",
                            Diff::Render,
                        ));
                    }
                    Some(o) => {
                        seen_policies.insert(o.name());
                        match compare_policy(&desired, o, &owner) {
                            Comparison::InSync => {
                                pnode.state = State::InSync;
                            }
                            Comparison::OutOfSync(fields) => {
                                pnode.state = State::OutOfSync;
                                pnode.reason = format!("differs in {}", fields.join(", "));
                                let f = Finding::new(
                                    Code::PolicyOutOfSync,
                                    policy_ref(&pname),
                                    format!("{pname} differs from template {} in {}; reconcile to rewrite it", t.name(), fields.join(", ")),
                                )
                                .related(tref.clone())
                                .at(&o.source);
                                b.find(&mut pnode, f);
                                policy_writes.push(PlannedWrite::update_policy(
                                    &desired,
                                    o,
                                    Code::PolicyOutOfSync,
                                    &pnode.reason,
                                    Diff::Render,
                                ));
                            }
                            Comparison::Foreign(why) => {
                                pnode.state = State::Foreign;
                                pnode.reason = why.clone();
                                let f = Finding::new(
                                    Code::PolicyForeign,
                                    policy_ref(&pname),
                                    format!("{pname} has the name template {} needs, but {why}; it is left alone: rename or delete it", t.name()),
                                )
                                .related(tref.clone())
                                .at(&o.source);
                                b.find(&mut pnode, f);
                            }
                        }
                    }
                }
            }
            (_, Some(o)) => {
                // Not generating (or invalid): an owned VAP is dangling unless the template is invalid.
                seen_policies.insert(o.name());
                match control(&o.meta, &owner) {
                    Control::Other(why) => {
                        pnode.state = State::Foreign;
                        pnode.reason = why;
                    }
                    _ if matches!(verdict, TemplateVerdict::Invalid { .. }) => {
                        pnode.state = State::Error;
                        pnode.reason = "kept while the template is invalid".into();
                    }
                    _ => {
                        pnode.state = State::Dangling;
                        pnode.reason = format!("template does not generate ({})", verdict.reason());
                        let f = Finding::new(
                            Code::PolicyDangling,
                            policy_ref(&pname),
                            format!("{pname} exists but template {} does not generate a VAP ({}); reconcile deletes it", t.name(), verdict.reason()),
                        )
                        .related(tref.clone())
                        .at(&o.source);
                        b.find(&mut pnode, f);
                        b.policy_deletes.push(PlannedWrite::delete_policy(
                            o,
                            Code::PolicyDangling,
                            &pnode.reason,
                            Diff::Render,
                        ));
                    }
                }
            }
            (_, None) => {
                pnode.state = State::NotBound;
                pnode.reason = "no VAP wanted".into();
            }
        }
        tnode.children.push(pnode);

        // The constraints of this template's kind.
        let opinion = t
            .kind
            .as_ref()
            .and_then(|k| opinions.get(k))
            .map(|(o, _)| o);
        let kind_constraints = t
            .kind
            .as_deref()
            .and_then(|k| constraints_by_kind.remove(k))
            .unwrap_or_default();
        for c in kind_constraints {
            let node = constraint_node(
                &mut b,
                c,
                opinion,
                opts,
                now,
                &bindings_by_name,
                &mut seen_bindings,
                &mut frozen_constraints,
                &mut binding_writes,
            );
            tnode.children.push(node);
        }
        tree.push(tnode);
    }

    // Orphans: constraints without a template, dangling and foreign leftovers.
    let mut orphans = Node::new(
        "group/orphans".into(),
        NodeKind::Group,
        "orphans",
        State::Group,
        "objects without a generating template",
    );
    for (_, cs) in constraints_by_kind {
        for c in cs {
            let node = constraint_node(
                &mut b,
                c,
                None,
                opts,
                now,
                &bindings_by_name,
                &mut seen_bindings,
                &mut frozen_constraints,
                &mut binding_writes,
            );
            orphans.children.push(node);
        }
    }
    for p in &snap.policies {
        if seen_policies.contains(p.name()) {
            continue;
        }
        let Some(ctl) = gatekeeper_controller(&p.meta) else {
            continue;
        };
        if ctl.group() != TEMPLATES_GROUP
            || ctl.kind != "ConstraintTemplate"
            || p.name() != names::policy_name(&ctl.name)
        {
            continue;
        }
        // Controlled by a template that is not in the snapshot: the template is gone.
        let mut node = Node::new(
            format!("policy/{}", p.name()),
            NodeKind::Policy,
            p.name(),
            State::Dangling,
            format!("template {} is gone", ctl.name),
        );
        node.object = Some(policy_ref(p.name()));
        let f = Finding::new(
            Code::PolicyDangling,
            policy_ref(p.name()),
            format!(
                "{} is controlled by template {}, which does not exist; reconcile deletes it",
                p.name(),
                ctl.name
            ),
        )
        .at(&p.source);
        b.find(&mut node, f);
        b.policy_deletes.push(PlannedWrite::delete_policy(
            p,
            Code::PolicyDangling,
            &node.reason,
            Diff::Render,
        ));
        orphans.children.push(node);
    }
    let constraints: BTreeMap<(&str, &str), &Constraint> = snap
        .constraints
        .iter()
        .map(|c| ((c.kind.as_str(), c.name()), c))
        .collect();
    let mut binding_deletes = Vec::new();
    for x in &snap.bindings {
        if seen_bindings.contains(x.name()) {
            continue;
        }
        let Some(ctl) = gatekeeper_controller(&x.meta) else {
            continue;
        };
        if ctl.group() != CONSTRAINTS_GROUP {
            continue;
        }
        let legacy = x.name() == names::legacy_binding_name(&ctl.name)
            && x.name() != names::binding_name(&ctl.kind, &ctl.name);
        if !legacy && x.name() != names::binding_name(&ctl.kind, &ctl.name) {
            continue;
        }
        let constraint = constraints.get(&(ctl.kind.as_str(), ctl.name.as_str()));
        if constraint.is_some_and(|c| frozen_constraints.contains(&(c.kind.as_str(), c.name())))
            && !legacy
        {
            continue;
        }
        let reason = match constraint {
            None => format!("constraint {} {} is gone", ctl.kind, ctl.name),
            Some(_) if legacy => "legacy name from Gatekeeper v3.16–v3.22".to_string(),
            Some(_) => "its constraint wants no binding".to_string(),
        };
        let mut node = Node::new(
            format!("binding/{}", x.name()),
            NodeKind::Binding,
            x.name(),
            State::Dangling,
            reason.clone(),
        );
        node.object = Some(binding_ref(x.name()));
        let mut f = Finding::new(
            Code::BindingDangling,
            binding_ref(x.name()),
            format!("{}: {reason}; reconcile deletes it", x.name()),
        )
        .at(&x.source);
        if let Some(c) = constraint {
            f = f.related(constraint_ref(c));
        }
        b.find(&mut node, f);
        binding_deletes.push(PlannedWrite::delete_binding(
            x,
            Code::BindingDangling,
            &reason,
            Diff::Render,
        ));
        orphans.children.push(node);
    }

    // CRDs without a template: reported, never deleted (deleting a CRD deletes every
    // constraint of its kind; only a template deletion this copy observed justifies that).
    for c in &snap.crds {
        if seen_crds.contains(c.name.as_str()) {
            continue;
        }
        let held_by = match gatekeeper_controller(&c.meta) {
            Some(ctl) => format!("its controller, template {}, does not exist", ctl.name),
            None => format!("no template defines kind {}", c.kind),
        };
        let mut node = Node::new(
            format!("crd/{}", c.name),
            NodeKind::Crd,
            &c.name,
            State::Orphan,
            held_by.clone(),
        );
        node.object = Some(crd_ref(&c.name));
        let f = Finding::new(
            Code::CrdOrphan,
            crd_ref(&c.name),
            format!(
                "{}: {held_by}; it is left alone (deleting it would delete every {} constraint): delete it by hand if its constraints are no longer wanted",
                c.name, c.kind
            ),
        )
        .at(&c.source);
        b.find(&mut node, f);
        orphans.children.push(node);
    }

    if !orphans.children.is_empty() {
        tree.push(orphans);
    }

    // Order of writes: CRDs first, then I1 (policy before binding) and I2 (bindings deleted
    // before their policy).
    let policy_deletes = std::mem::take(&mut b.policy_deletes);
    let mut plan = crd_writes;
    plan.extend(policy_writes);
    plan.extend(
        binding_deletes.into_iter().chain(
            binding_writes
                .iter()
                .filter(|w| w.verb == Verb::Delete)
                .cloned(),
        ),
    );
    plan.extend(
        binding_writes
            .into_iter()
            .filter(|w| w.verb != Verb::Delete),
    );
    plan.extend(policy_deletes);
    let mut analysis = Analysis {
        findings: b.findings,
        plan,
        tree,
    };
    if !snap.unreadable.is_empty() {
        drop_unobservable(&mut analysis, snap);
    }
    analysis
}

/// Without the right to read a resource, its absence proves nothing: drop the findings and
/// writes that rest on observing it (a 403 on bindings must not plan 5,000 creates, and a 403
/// on a constraint kind must not make its bindings look dangling).
fn drop_unobservable(a: &mut Analysis, snap: &Snapshot) {
    const POLICIES: &str = "validatingadmissionpolicies.admissionregistration.k8s.io";
    const BINDINGS: &str = "validatingadmissionpolicybindings.admissionregistration.k8s.io";
    const TEMPLATES: &str = "constrainttemplates.templates.gatekeeper.sh";
    const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";
    let unreadable = |r: &str| snap.unreadable.contains(r);
    let kind_unreadable =
        |kind: &str| unreadable(&format!("{}.{CONSTRAINTS_GROUP}", kind.to_lowercase()));
    let bindings_by_name: BTreeMap<&str, &Binding> =
        snap.bindings.iter().map(|x| (x.name(), x)).collect();
    let blind = |f: &Finding| -> bool {
        let is_policy = f.object.kind == "ValidatingAdmissionPolicy";
        let is_binding = f.object.kind == "ValidatingAdmissionPolicyBinding";
        let is_crd = f.object.kind == crd::CRD_KIND;
        (is_crd && unreadable(CRDS))
            || (f.code == Code::CrdOrphan && unreadable(TEMPLATES))
            || (is_policy && unreadable(POLICIES))
            || (is_binding && unreadable(BINDINGS))
            || (f.code == Code::PolicyDangling && unreadable(TEMPLATES))
            || (f.code == Code::BindingMissing && unreadable(POLICIES))
            || (matches!(f.code, Code::BindingDangling | Code::ConstraintOrphan)
                && unreadable(TEMPLATES))
            || (f.code == Code::BindingDangling
                && bindings_by_name
                    .get(f.object.name.as_str())
                    .and_then(|x| gatekeeper_controller(&x.meta))
                    .is_some_and(|c| kind_unreadable(&c.kind)))
    };
    let mut remap = Vec::with_capacity(a.findings.len());
    let mut kept = Vec::new();
    let mut dropped_objects = BTreeSet::new();
    for f in std::mem::take(&mut a.findings) {
        if blind(&f) {
            dropped_objects.insert(f.object.clone());
            remap.push(None);
        } else {
            remap.push(Some(kept.len()));
            kept.push(f);
        }
    }
    a.findings = kept;
    a.plan.retain(|w| !dropped_objects.contains(&w.object));
    fn fix(node: &mut Node, remap: &[Option<usize>], dropped: &BTreeSet<ObjectRef>) {
        node.findings = node.findings.iter().filter_map(|i| remap[*i]).collect();
        if node.object.as_ref().is_some_and(|o| dropped.contains(o)) {
            node.state = State::Unknown;
            node.reason = "its resource cannot be read".into();
        }
        for c in &mut node.children {
            fix(c, remap, dropped);
        }
        // A constraint shows its binding's state; an unknown binding makes it unknown too.
        if node.kind == NodeKind::Constraint
            && matches!(
                node.state,
                State::Missing | State::OutOfSync | State::Dangling
            )
            && node.children.iter().any(|c| c.state == State::Unknown)
        {
            node.state = State::Unknown;
        }
    }
    for n in &mut a.tree {
        fix(n, &remap, &dropped_objects);
    }
}

/// The CRD node of a template with `kind`: its state, finding and write.
fn crd_node(
    b: &mut Builder<'_>,
    t: &ConstraintTemplate,
    kind: &str,
    verdict: &TemplateVerdict,
    observed: Option<&CrdInfo>,
    tref: &ObjectRef,
    writes: &mut Vec<PlannedWrite>,
) -> Node {
    let name = crd::crd_name(kind);
    let mut node = Node::new(
        format!("crd/{name}"),
        NodeKind::Crd,
        &name,
        State::InSync,
        "",
    );
    node.object = Some(crd_ref(&name));
    let established = |o: &CrdInfo| {
        if o.established {
            String::new()
        } else {
            "; not Established yet".into()
        }
    };
    if let TemplateVerdict::Invalid { .. } = verdict {
        (node.state, node.reason) = match observed {
            Some(_) => (State::Error, "kept while the template is invalid".into()),
            None => (
                State::NotBound,
                "not created while the template is invalid".into(),
            ),
        };
        return node;
    }
    let desired = match crd::desired_crd(t, kind) {
        Ok(d) => d,
        // decide_template validated the template: unreachable but not worth a panic.
        Err(reason) => {
            node.state = State::Error;
            node.reason = reason;
            return node;
        }
    };
    let owner = OwnerId::template(t.name(), &t.meta.uid);
    let Some(o) = observed else {
        node.state = State::Missing;
        node.reason = "not created yet".into();
        let f = Finding::new(
            Code::CrdMissing,
            crd_ref(&name),
            format!("template {} defines kind {kind} but {name} does not exist, so no {kind} constraint can be created; reconcile creates it", t.name()),
        )
        .related(tref.clone());
        b.find(&mut node, f);
        writes.push(PlannedWrite::create_crd(
            &desired,
            Code::CrdMissing,
            "the template defines the kind",
            Diff::Render,
        ));
        return node;
    };
    match compare_crd(&desired, o, &owner) {
        Comparison::InSync => node.reason = established(o).trim_start_matches("; ").into(),
        Comparison::OutOfSync(fields) => {
            node.state = State::OutOfSync;
            node.reason = format!("differs in {}{}", fields.join(", "), established(o));
            let f = Finding::new(
                Code::CrdOutOfSync,
                crd_ref(&name),
                format!(
                    "{name} differs from what template {} defines in {}; reconcile rewrites it",
                    t.name(),
                    fields.join(", ")
                ),
            )
            .related(tref.clone())
            .at(&o.source);
            b.find(&mut node, f);
            writes.push(PlannedWrite::update_crd(
                &desired,
                o,
                Code::CrdOutOfSync,
                &node.reason,
                Diff::Render,
            ));
        }
        Comparison::Foreign(why) => {
            node.state = State::Foreign;
            node.reason = why.clone();
            let f = Finding::new(
                Code::CrdForeign,
                crd_ref(&name),
                format!("{name} is the CRD of template {}'s kind, but {why}; it is used as it is and never modified or deleted", t.name()),
            )
            .related(tref.clone())
            .at(&o.source);
            b.find(&mut node, f);
        }
    }
    node
}

/// An observed binding of a constraint that should not exist: state, finding, delete.
fn dangling_binding(
    b: &mut Builder<'_>,
    bnode: &mut Node,
    o: &Binding,
    cref: &ObjectRef,
    reason: &str,
    writes: &mut Vec<PlannedWrite>,
) {
    bnode.state = State::Dangling;
    bnode.reason = reason.to_string();
    let f = Finding::new(
        Code::BindingDangling,
        binding_ref(o.name()),
        format!(
            "{} should not exist: {reason}; reconcile deletes it",
            o.name()
        ),
    )
    .related(cref.clone())
    .at(&o.source);
    b.find(bnode, f);
    writes.push(PlannedWrite::delete_binding(
        o,
        Code::BindingDangling,
        reason,
        Diff::Render,
    ));
}

#[allow(clippy::too_many_arguments)]
fn constraint_node<'a>(
    b: &mut Builder<'a>,
    c: &'a Constraint,
    opinion: Option<&Opinion>,
    opts: &Options,
    now: chrono::DateTime<chrono::Utc>,
    bindings_by_name: &BTreeMap<&str, &'a Binding>,
    seen: &mut BTreeSet<&'a str>,
    frozen: &mut BTreeSet<(&'a str, &'a str)>,
    writes: &mut Vec<PlannedWrite>,
) -> Node {
    let cref = constraint_ref(c);
    let crd = crd_state(b.snap, &c.kind);
    let decision = binding_decision(c, opinion, crd, opts, now);
    let bname = names::binding_name(&c.kind, c.name());
    let observed = bindings_by_name.get(bname.as_str()).copied();
    let owner = OwnerId::constraint(&c.kind, c.name(), &c.meta.uid);
    let mut node = Node::new(
        format!("constraint/{}/{}", c.kind, c.name()),
        NodeKind::Constraint,
        format!("{}/{}", c.kind, c.name()),
        State::InSync,
        "",
    );
    node.object = Some(cref.clone());
    let mut bnode = Node::new(
        format!("binding/{bname}"),
        NodeKind::Binding,
        &bname,
        State::NotBound,
        "",
    );
    bnode.object = Some(binding_ref(&bname));

    // A binding with our name that another controller holds is foreign whatever we decide.
    if let Some(o) = observed
        && let Control::Other(why) = control(&o.meta, &owner)
    {
        seen.insert(o.name());
        bnode.state = State::Foreign;
        bnode.reason = why.clone();
        let f = Finding::new(
            Code::BindingForeign,
            binding_ref(&bname),
            format!("{bname} has the name constraint {} {} needs, but {why}; it is left alone: rename or delete it", c.kind, c.name()),
        )
        .related(cref.clone())
        .at(&o.source);
        b.find(&mut bnode, f);
        node.state = State::Error;
        node.reason = "its binding name is taken".into();
        node.children.push(bnode);
        return node;
    }

    match decision {
        BindingDecision::Want(desired) => {
            let actions = desired
                .spec
                .as_ref()
                .and_then(|s| s.validation_actions.as_ref())
                .map(|a| a.join(", "))
                .unwrap_or_default();
            node.reason = format!("binds with {actions}");
            match observed {
                None => {
                    bnode.state = State::Missing;
                    bnode.reason = "not written yet".into();
                    let f = Finding::new(
                        Code::BindingMissing,
                        binding_ref(&bname),
                        format!("constraint {} {} should be bound to VAP but {bname} does not exist; reconcile creates it", c.kind, c.name()),
                    )
                    .related(cref.clone())
                    .at(&c.source);
                    b.find(&mut bnode, f);
                    writes.push(PlannedWrite::create_binding(
                        &desired,
                        Code::BindingMissing,
                        "the constraint targets vap.k8s.io",
                        Diff::Render,
                    ));
                }
                Some(o) => {
                    seen.insert(o.name());
                    match compare_binding(&desired, o, &owner) {
                        Comparison::InSync => bnode.state = State::InSync,
                        Comparison::OutOfSync(fields) => {
                            bnode.state = State::OutOfSync;
                            bnode.reason = format!("differs in {}", fields.join(", "));
                            let f = Finding::new(
                                Code::BindingOutOfSync,
                                binding_ref(&bname),
                                format!("{bname} differs from constraint {} {} in {}; reconcile rewrites it", c.kind, c.name(), fields.join(", ")),
                            )
                            .related(cref.clone())
                            .at(&o.source);
                            b.find(&mut bnode, f);
                            writes.push(PlannedWrite::update_binding(
                                &desired,
                                o,
                                Code::BindingOutOfSync,
                                &bnode.reason,
                                Diff::Render,
                            ));
                        }
                        Comparison::Foreign(_) => {} // handled above
                    }
                }
            }
        }
        BindingDecision::Waiting { reason, .. } => {
            node.state = State::Waiting;
            node.reason = reason.clone();
            match observed {
                // Already written: waiting is only about the first binding; keep it.
                Some(o) => {
                    seen.insert(o.name());
                    bnode.state = State::InSync;
                    bnode.reason = "kept while the CRD settles".into();
                }
                None => {
                    bnode.state = State::Waiting;
                    bnode.reason = reason.clone();
                    let f = Finding::new(
                        Code::BindingWaiting,
                        binding_ref(&bname),
                        format!("{bname} is not written yet: {reason}"),
                    )
                    .related(cref.clone());
                    b.find(&mut bnode, f);
                }
            }
        }
        BindingDecision::NotWanted { reason } => {
            node.state = State::NotBound;
            node.reason = reason.clone();
            if let Some(o) = observed {
                seen.insert(o.name());
                dangling_binding(b, &mut bnode, o, &cref, &reason, writes);
            }
        }
        BindingDecision::Orphan => {
            node.state = State::Orphan;
            node.reason = format!("no template defines kind {}", c.kind);
            let f = Finding::new(
                Code::ConstraintOrphan,
                cref.clone(),
                format!("no ConstraintTemplate defines kind {}; apply its template or delete the constraint", c.kind),
            )
            .at(&c.source);
            b.find(&mut node, f);
            if let Some(o) = observed {
                seen.insert(o.name());
                let reason = "its kind has no template";
                dangling_binding(b, &mut bnode, o, &cref, reason, writes);
            }
        }
        BindingDecision::Frozen {
            reason,
            constraint_error,
        } => {
            frozen.insert((c.kind.as_str(), c.name()));
            node.state = State::Error;
            node.reason = reason.clone();
            if constraint_error {
                let f = Finding::new(
                    Code::ConstraintError,
                    cref.clone(),
                    format!("{reason}; its binding is left as it is until fixed"),
                )
                .at(&c.source);
                b.find(&mut node, f);
            }
            if let Some(o) = observed {
                seen.insert(o.name());
                bnode.state = State::Error;
                bnode.reason = "kept while the constraint or template is invalid".into();
            }
        }
    }
    // A wanted binding's state is the constraint's: "missing" shows on both lines.
    if matches!(node.state, State::InSync) {
        node.state = bnode.state;
    }
    if observed.is_some() || bnode.state != State::NotBound {
        node.children.push(bnode);
    }
    node
}
