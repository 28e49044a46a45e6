//! Whole-snapshot analysis: desired vs observed, giving findings, the plan (the minimal writes)
//! and the tree. A fold over the per-object steps of [`super::step`] (the live reconcilers
//! take the same steps): per template its CRD and VAP, per constraint its binding, then what
//! no template or constraint accounts for. Pure: the same snapshot and options give the same
//! result.

use super::crd;
use super::decide::{TemplateVerdict, decide_template};
use super::desired::{self, CrdState, Opinion};
use super::findings::{Code, Finding};
use super::names;
use super::options::Options;
use super::ownership::gatekeeper_controller;
use super::plan::{Diff, PlannedWrite, Verb};
use super::step::{self, BindingInput, PolicyStep, binding_ref, constraint_ref, crd_ref};
use super::step::{policy_ref, template_ref};
use super::tree::{Node, NodeKind, State};
use crate::model::{
    Binding, CONSTRAINTS_GROUP, Constraint, ConstraintTemplate, CrdInfo, ObjectId, ObjectRef,
    Policy, VAP_KIND, VAPB_KIND,
};
use crate::snapshot::Snapshot;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Default)]
pub struct Analysis {
    pub findings: Vec<Finding>,
    pub plan: Vec<PlannedWrite>,
    pub tree: Vec<Node>,
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

pub fn analyze(snap: &Snapshot, opts: &Options) -> Analysis {
    // Gatekeeper's Config, when read, exempts more namespaces; its webhook, when read, is what
    // its own shape copies.
    let merged = opts
        .with_gatekeeper_config(&snap.gatekeeper_configs)
        .with_gatekeeper_webhook(&snap.gatekeeper_webhooks);
    let opts = &merged;
    let index = Index::of(snap);
    let verdicts: Vec<TemplateVerdict> = snap
        .templates
        .iter()
        .map(|t| decide_template(t, opts))
        .collect();
    let by_kind = index.constraints_by_kind();
    // A plan writes the CRD before the VAP, so every VAP step counts its kind as served.
    let steps: Vec<PolicyStep<'_>> = snap
        .templates
        .iter()
        .zip(&verdicts)
        .map(|(t, v)| {
            let constraints = t.kind.as_deref().and_then(|k| by_kind.get(k));
            // `--policy-shape auto` decided per template (`core::shape`).
            let of_kind = constraints.map_or(&[][..], Vec::as_slice);
            let opts = &opts.with_shape(super::shape::resolve(opts, t, v, of_kind).shape);
            let coverage = desired::policy_coverage(
                constraints.into_iter().flatten().copied(),
                |c| index.binding_of(c),
                opts,
                &snap.served,
            );
            step::policy_step(t, v, true, index.policy_of(t.name()), &coverage, opts)
        })
        .collect();
    let opinions = opinions(&steps);
    let mut rest = index.constraints_by_kind();
    let mut fold = Fold::new(snap, opts, index);
    let mut sorted: Vec<&PolicyStep<'_>> = steps.iter().collect();
    sorted.sort_by(|a, b| a.template().name().cmp(b.template().name()));
    for policy in sorted {
        let kind = policy.template().kind.as_deref();
        let opinion = kind.and_then(|k| opinions.get(k));
        let constraints = kind.and_then(|k| rest.remove(k)).unwrap_or_default();
        let node = fold.template(policy, opinion, constraints);
        fold.tree.push(node);
    }
    fold.orphans(rest);
    let mut analysis = fold.finish();
    analysis.findings.extend(duplicates(snap));
    analysis
}

/// A finding for each copy of an object that the input held again later: which copy is used,
/// and where the ignored one is, so no input is lost without a word.
fn duplicates(snap: &Snapshot) -> impl Iterator<Item = Finding> + '_ {
    snap.duplicates.iter().map(|d| {
        Finding::new(
            Code::InputDuplicate,
            d.object.clone(),
            format!(
                "{} is in the input again at {}: this copy ({}) is ignored and the last one is used, as `kubectl apply -f` would leave it",
                d.object, d.kept, d.dropped
            ),
        )
        .at(&d.dropped)
    })
}

/// The opinion each kind gets from its template (the last one listed, if several hold it), as
/// the template side would publish it, assuming (for a plan) that the VAP is written before any
/// binding (I1). A foreign VAP holding the name means it is never written: the kind's bindings
/// wait, as they do live.
fn opinions<'a>(steps: &[PolicyStep<'a>]) -> BTreeMap<&'a str, Opinion> {
    let mut out = BTreeMap::new();
    for s in steps {
        if let Some(kind) = &s.template().kind {
            out.insert(
                kind.as_str(),
                Opinion::of(
                    s.template(),
                    s.verdict(),
                    s.ready_once_written(),
                    s.coverage(true),
                    s.shape(),
                ),
            );
        }
    }
    out
}

/// The snapshot's objects by name, as the steps look them up.
struct Index<'a> {
    snap: &'a Snapshot,
    policies: BTreeMap<&'a str, &'a Policy>,
    bindings: BTreeMap<&'a str, &'a Binding>,
    crds: BTreeMap<&'a str, &'a CrdInfo>,
    constraints: BTreeMap<(&'a str, &'a str), &'a Constraint>,
}

impl<'a> Index<'a> {
    fn of(snap: &'a Snapshot) -> Self {
        Index {
            snap,
            policies: snap.policies.iter().map(|p| (p.name(), p)).collect(),
            bindings: snap.bindings.iter().map(|x| (x.name(), x)).collect(),
            crds: snap.crds.iter().map(|c| (c.name.as_str(), c)).collect(),
            constraints: snap
                .constraints
                .iter()
                .map(|c| ((c.kind.as_str(), c.name()), c))
                .collect(),
        }
    }

    fn policy_of(&self, template: &str) -> Option<&'a Policy> {
        self.policies
            .get(names::policy_name(template).as_str())
            .copied()
    }

    /// The VAP under the constraint's inline name.
    fn inline_policy_of(&self, c: &Constraint) -> Option<&'a Policy> {
        let name = names::inline_policy_name(&c.kind, c.name());
        self.policies.get(name.as_str()).copied()
    }

    fn binding_of(&self, c: &Constraint) -> Option<&'a Binding> {
        let name = names::binding_name(&c.kind, c.name());
        self.bindings.get(name.as_str()).copied()
    }

    fn constraints_by_kind(&self) -> BTreeMap<&'a str, Vec<&'a Constraint>> {
        let mut out: BTreeMap<&str, Vec<&Constraint>> = BTreeMap::new();
        for c in &self.snap.constraints {
            out.entry(c.kind.as_str()).or_default().push(c);
        }
        out
    }
}

/// The planned writes, kept apart until they are put in order.
#[derive(Default)]
struct Writes {
    crds: Vec<PlannedWrite>,
    policies: Vec<PlannedWrite>,
    /// Deletes of bindings no constraint's decision accounts for (legacy names, gone owners).
    binding_sweeps: Vec<PlannedWrite>,
    bindings: Vec<PlannedWrite>,
    policy_deletes: Vec<PlannedWrite>,
}

impl Writes {
    /// CRDs first, then I1 (policy before binding) and I2 (bindings deleted before their
    /// policy).
    fn in_order(self) -> Vec<PlannedWrite> {
        let (deletes, writes): (Vec<_>, Vec<_>) = self
            .bindings
            .into_iter()
            .partition(|w| w.verb == Verb::Delete);
        let mut plan = self.crds;
        plan.extend(self.policies);
        plan.extend(self.binding_sweeps);
        plan.extend(deletes);
        plan.extend(writes);
        plan.extend(self.policy_deletes);
        plan
    }
}

/// A tree node for one object.
fn leaf(
    id: String,
    kind: NodeKind,
    label: impl Into<String>,
    (state, reason): (State, String),
    object: ObjectRef,
) -> Node {
    let mut node = Node::new(id, kind, label, state, reason);
    node.object = Some(object);
    node
}

/// What the steps have added so far.
struct Fold<'a> {
    snap: &'a Snapshot,
    opts: &'a Options,
    /// The core never reads the clock: every loader stamps the time it read the objects. A
    /// snapshot without one (built by hand) counts every binding wait as elapsed.
    now: DateTime<Utc>,
    index: Index<'a>,
    findings: Vec<Finding>,
    writes: Writes,
    tree: Vec<Node>,
    /// Observed objects a step accounted for (kept, updated, deleted or foreign); the rest
    /// is what no template or constraint accounts for.
    seen_policies: BTreeSet<&'a str>,
    seen_bindings: BTreeSet<&'a str>,
    seen_crds: BTreeSet<&'a str>,
}

impl<'a> Fold<'a> {
    fn new(snap: &'a Snapshot, opts: &'a Options, index: Index<'a>) -> Self {
        Fold {
            snap,
            opts,
            now: snap.now.unwrap_or(DateTime::<Utc>::MAX_UTC),
            index,
            findings: Vec::new(),
            writes: Writes::default(),
            tree: Vec::new(),
            seen_policies: BTreeSet::new(),
            seen_bindings: BTreeSet::new(),
            seen_crds: BTreeSet::new(),
        }
    }

    fn find(&mut self, node: &mut Node, f: Option<Finding>) {
        if let Some(f) = f {
            node.findings.push(self.findings.len());
            self.findings.push(f);
        }
    }

    /// A template with its CRD, its VAP and the constraints of its kind.
    fn template(
        &mut self,
        policy: &PolicyStep<'a>,
        opinion: Option<&Opinion>,
        constraints: Vec<&'a Constraint>,
    ) -> Node {
        let t = policy.template();
        let id = super::tree::template_node_id(t.name());
        let mut node = leaf(
            id,
            NodeKind::Template,
            t.name(),
            policy.template_state(),
            template_ref(t),
        );
        self.find(&mut node, policy.template_finding());
        // The constraint CRD first, as everything else of the kind rests on it.
        if let Some(kind) = t.kind.as_deref().filter(|_| self.snap.crds_listed) {
            node.children.push(self.crd(t, kind, policy.verdict()));
        }
        node.children.push(self.policy(policy));
        for c in constraints {
            node.children.push(self.constraint(c, opinion));
        }
        node
    }

    fn crd(&mut self, t: &'a ConstraintTemplate, kind: &'a str, v: &TemplateVerdict) -> Node {
        let observed = self.index.crds.get(crd::crd_name(kind).as_str()).copied();
        if let Some(o) = observed {
            self.seen_crds.insert(&o.name);
        }
        let step = step::crd_step(t, kind, v, observed);
        let name = step.name();
        let id = format!("crd/{name}");
        let mut node = leaf(id, NodeKind::Crd, &name, step.state(), crd_ref(&name));
        self.find(&mut node, step.finding());
        self.writes.crds.extend(step.write(Diff::Render));
        node
    }

    fn policy(&mut self, step: &PolicyStep<'a>) -> Node {
        if let Some(o) = step.observed() {
            self.seen_policies.insert(o.name());
        }
        let name = step.name();
        let id = format!("policy/{name}");
        let mut node = leaf(id, NodeKind::Policy, &name, step.state(), policy_ref(&name));
        self.find(&mut node, step.finding());
        for f in step.type_findings() {
            self.find(&mut node, Some(f));
        }
        match step.write(Diff::Render) {
            Some(w) if w.verb == Verb::Delete => self.writes.policy_deletes.push(w),
            Some(w) => self.writes.policies.push(w),
            None => {}
        }
        node
    }

    /// A constraint and, when it has or wants one, its binding.
    fn constraint(&mut self, c: &'a Constraint, opinion: Option<&Opinion>) -> Node {
        let bname = names::binding_name(&c.kind, c.name());
        let observed = self.index.bindings.get(bname.as_str()).copied();
        if let Some(o) = observed {
            self.seen_bindings.insert(o.name());
        }
        let observed_policy = self.index.inline_policy_of(c);
        let step = step::binding_step(BindingInput {
            constraint: c,
            opinion,
            crd: crd_state(self.snap, &c.kind),
            observed,
            observed_policy,
            opts: self.opts,
            served: &self.snap.served,
            now: self.now,
        });
        // A VAP under the inline name that is not ours stays in the orphans, unless we want
        // its name (foreign).
        if step.has_policy()
            && let Some(o) = observed_policy
        {
            self.seen_policies.insert(o.name());
        }
        let object = ObjectId::new(&c.kind, c.name());
        let (id, label) = (super::tree::constraint_node_id(&object), object.to_string());
        let state = step.constraint_state();
        let mut node = leaf(id, NodeKind::Constraint, label, state, constraint_ref(c));
        self.find(&mut node, step.constraint_finding());
        self.find(&mut node, step.scope_finding());
        let id = format!("binding/{bname}");
        let state = step.binding_state();
        let mut bnode = leaf(id, NodeKind::Binding, &bname, state, binding_ref(&bname));
        self.find(&mut bnode, step.binding_finding());
        if step.has_policy() {
            let pname = step.policy_name();
            let id = format!("policy/{pname}");
            let state = step.policy_state();
            let mut pnode = leaf(id, NodeKind::Policy, &pname, state, policy_ref(&pname));
            self.find(&mut pnode, step.policy_finding());
            let template = opinion.map(|o| o.template.as_str());
            for f in step.policy_type_findings(template) {
                self.find(&mut pnode, Some(f));
            }
            match step.policy_write(Diff::Render) {
                Some(w) if step.policy_goes_first() => self.writes.policies.push(w),
                Some(w) => self.writes.policy_deletes.push(w),
                None => {}
            }
            node.children.push(pnode);
        }
        self.writes.bindings.extend(step.write(Diff::Render));
        if observed.is_some() || bnode.state != State::NotBound {
            node.children.push(bnode);
        }
        node
    }

    /// Constraints without a template, and observed objects no step accounted for.
    fn orphans(&mut self, constraints: BTreeMap<&'a str, Vec<&'a Constraint>>) {
        let mut group = Node::new(
            "group/orphans".into(),
            NodeKind::Group,
            "orphans",
            State::Group,
            "objects without a generating template",
        );
        for c in constraints.into_values().flatten() {
            group.children.push(self.constraint(c, None));
        }
        let snap = self.snap;
        for p in &snap.policies {
            if !self.seen_policies.contains(p.name()) {
                group.children.extend(self.gone_policy(p));
            }
        }
        for x in &snap.bindings {
            if !self.seen_bindings.contains(x.name()) {
                group.children.extend(self.leftover_binding(x));
            }
        }
        for c in &snap.crds {
            if !self.seen_crds.contains(c.name.as_str()) {
                group.children.push(self.orphan_crd(c));
            }
        }
        if !group.children.is_empty() {
            self.tree.push(group);
        }
    }

    /// A VAP controlled by a template that is not in the snapshot (the template is gone), or
    /// by a constraint that is not (its inline VAP).
    fn gone_policy(&mut self, p: &'a Policy) -> Option<Node> {
        let ctl = gatekeeper_controller(&p.meta)?;
        let sweep = if ctl.group() == CONSTRAINTS_GROUP {
            let key = (ctl.kind.as_str(), ctl.name.as_str());
            let constraint = self.index.constraints.get(&key).copied();
            step::sweep_inline_policy(&ctl.kind, &ctl.name, p, constraint)?
        } else {
            step::sweep_policy(&ctl.name, p)?
        };
        let (finding, write) = (sweep.finding(), sweep.write(Diff::Render));
        let reason = sweep.reason;
        let id = format!("policy/{}", p.name());
        let state = (State::Dangling, reason);
        let mut node = leaf(id, NodeKind::Policy, p.name(), state, policy_ref(p.name()));
        self.find(&mut node, Some(finding));
        self.writes.policy_deletes.push(write);
        Some(node)
    }

    /// A binding under a constraint's legacy name, or one whose constraint is gone.
    fn leftover_binding(&mut self, x: &'a Binding) -> Option<Node> {
        let ctl = gatekeeper_controller(&x.meta)?;
        let key = (ctl.kind.as_str(), ctl.name.as_str());
        let constraint = self.index.constraints.get(&key).copied();
        let sweep = step::sweep_binding(&ctl.kind, &ctl.name, x, constraint)?;
        let id = format!("binding/{}", x.name());
        let state = (State::Dangling, sweep.reason.clone());
        let mut node = leaf(
            id,
            NodeKind::Binding,
            x.name(),
            state,
            binding_ref(x.name()),
        );
        self.find(&mut node, Some(sweep.finding()));
        self.writes.binding_sweeps.push(sweep.write(Diff::Render));
        Some(node)
    }

    /// A CRD without a template: reported, never deleted (deleting a CRD deletes every
    /// constraint of its kind; only a template deletion this copy observed justifies that).
    fn orphan_crd(&mut self, c: &'a CrdInfo) -> Node {
        let id = format!("crd/{}", c.name);
        let state = (State::Orphan, step::crd::orphan_reason(c));
        let mut node = leaf(id, NodeKind::Crd, &c.name, state, crd_ref(&c.name));
        self.find(&mut node, Some(step::crd::orphan_finding(c)));
        node
    }

    fn finish(self) -> Analysis {
        let mut analysis = Analysis {
            findings: self.findings,
            plan: self.writes.in_order(),
            tree: self.tree,
        };
        if !self.snap.unreadable.is_empty() {
            drop_unobservable(&mut analysis, self.snap);
        }
        analysis
    }
}

/// Without the right to read a resource, its absence proves nothing: drop the findings and
/// writes that rest on observing it (a 403 on bindings must not plan 5,000 creates, and a 403
/// on a constraint kind must not make its bindings, or its constraints' inline VAPs, look
/// dangling).
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
    // An inline VAP's controller is its constraint, as its binding's is.
    let policies_by_name: BTreeMap<&str, &Policy> =
        snap.policies.iter().map(|x| (x.name(), x)).collect();
    let blind = |f: &Finding| -> bool {
        let is_policy = f.object.kind == VAP_KIND;
        let is_binding = f.object.kind == VAPB_KIND;
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
            // A constraint's own VAP (the inline shape) is written only with its binding
            // known: `reconcile_constraint` reads both before it writes either.
            || (is_policy
                && unreadable(BINDINGS)
                && matches!(
                    f.code,
                    Code::PolicyMissing | Code::PolicyOutOfSync | Code::PolicyDangling
                )
                && f.related.iter().any(|r| {
                    r.api_version.split('/').next() == Some(CONSTRAINTS_GROUP)
                }))
            || (f.code == Code::PolicyDangling
                && policies_by_name
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
    }
    for n in &mut a.tree {
        fix(n, &remap, &dropped_objects);
    }
}
