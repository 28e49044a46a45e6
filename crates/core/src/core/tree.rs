//! The view model the TUI draws: template → policy and constraints → bindings, plus an
//! orphans branch. Ids are stable across refreshes, so
//! selection and expansion survive live updates.

use super::Finding;
use crate::model::{ObjectId, ObjectRef};
use serde::Serialize;

/// A node's state: one table gives its label and glyph everywhere it is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Template: generates a VAP.
    Generate,
    /// Template: does not generate (generateVAP false, Rego only, flags).
    NoVap,
    /// Template or constraint cannot be handled as written.
    Error,
    /// Object exists and equals the desired one.
    InSync,
    Missing,
    OutOfSync,
    Dangling,
    Foreign,
    Waiting,
    /// Constraint: no binding is wanted (e.g. not scoped to vap.k8s.io).
    NotBound,
    /// Constraint whose kind has no template.
    Orphan,
    /// A grouping node (the orphans branch).
    Group,
    /// Its resource cannot be read (403, not served): whether it exists is not known.
    Unknown,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Generate => "generate",
            State::NoVap => "no-vap",
            State::Error => "error",
            State::InSync => "in-sync",
            State::Missing => "missing",
            State::OutOfSync => "out-of-sync",
            State::Dangling => "dangling",
            State::Foreign => "foreign",
            State::Waiting => "waiting",
            State::NotBound => "not-bound",
            State::Orphan => "orphan",
            State::Group => "group",
            State::Unknown => "unknown",
        }
    }
    pub fn glyph(self) -> &'static str {
        match self {
            State::Generate | State::InSync => "✔",
            State::NoVap | State::NotBound => "·",
            State::Error => "✖",
            State::Missing => "∅",
            State::OutOfSync => "≠",
            State::Dangling => "⚠",
            State::Foreign => "⊘",
            State::Waiting => "…",
            State::Orphan => "?",
            State::Group => "▸",
            State::Unknown => "◌",
        }
    }
    /// A fault is what `f` (faults only) keeps.
    pub fn is_fault(self) -> bool {
        matches!(
            self,
            State::Error | State::Missing | State::OutOfSync | State::Dangling | State::Foreign
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    Template,
    /// The constraint CRD a template defines.
    Crd,
    Policy,
    Constraint,
    Binding,
    Group,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Node {
    /// Stable: `<kind>/<name>` (constraints: `constraint/<Kind>/<name>`).
    pub id: String,
    pub kind: NodeKind,
    pub label: String,
    pub state: State,
    pub reason: String,
    /// The object the node stands for, if any (groups and missing objects have the wanted ref).
    pub object: Option<ObjectRef>,
    /// Indices into `Analysis::findings` about this node's object.
    pub findings: Vec<usize>,
    pub children: Vec<Node>,
}

/// The id of a template's node: `template/NAME`.
pub fn template_node_id(name: &str) -> String {
    format!("template/{name}")
}

/// The id of a constraint's node: `constraint/` and the constraint's [`ObjectId`]
/// (`constraint/Kind/name`); [`constraint_of_node`] reads it back.
pub fn constraint_node_id(constraint: &ObjectId) -> String {
    format!("constraint/{constraint}")
}

/// The template whose node `id` is, if it is a template's.
pub fn template_of_node(id: &str) -> Option<&str> {
    id.strip_prefix("template/")
}

/// The constraint whose node `id` is, if it is a constraint's.
pub fn constraint_of_node(id: &str) -> Option<ObjectId> {
    id.strip_prefix("constraint/")?.parse().ok()
}

/// Findings added after the tree was built (from `first` on: the live views' `write-refused`
/// and `writer-conflict`), each attached to the node of its object, so the nodes' counts add
/// up to the findings' (the TUI's header said 5 errors where its badges added up to 4).
pub fn attach_findings(tree: &mut [Node], findings: &[Finding], first: usize) {
    for (i, f) in findings.iter().enumerate().skip(first) {
        if let Some(node) = node_of(tree, &f.object) {
            node.findings.push(i);
        }
    }
}

/// The first node, depth first, that stands for `object` (by kind and name).
fn node_of<'a>(nodes: &'a mut [Node], object: &ObjectRef) -> Option<&'a mut Node> {
    for n in nodes {
        let mine = n
            .object
            .as_ref()
            .is_some_and(|o| o.kind == object.kind && o.name == object.name);
        if mine {
            return Some(n);
        }
        if let Some(found) = node_of(&mut n.children, object) {
            return Some(found);
        }
    }
    None
}

impl Node {
    pub fn new(
        id: String,
        kind: NodeKind,
        label: impl Into<String>,
        state: State,
        reason: impl Into<String>,
    ) -> Self {
        Node {
            id,
            kind,
            label: label.into(),
            state,
            reason: reason.into(),
            object: None,
            findings: Vec::new(),
            children: Vec::new(),
        }
    }

    /// This node and every descendant, depth first.
    pub fn walk(&self) -> Vec<&Node> {
        let mut out = vec![self];
        for c in &self.children {
            out.extend(c.walk());
        }
        out
    }

    /// Whether this node or any descendant is a fault.
    pub fn has_fault(&self) -> bool {
        self.state.is_fault() || self.children.iter().any(Node::has_fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_id_reads_back_as_the_object_it_was_built_of() {
        for (kind, name) in [("K8sReq", "one"), ("K8sX", "a.b-c"), ("K8sX", "odd/ü name")] {
            let c = ObjectId::new(kind, name);
            let id = constraint_node_id(&c);
            assert_eq!(id, format!("constraint/{kind}/{name}"));
            assert_eq!(constraint_of_node(&id), Some(c));
            assert_eq!(template_of_node(&id), None);
        }
        let t = template_node_id("k8sreq");
        assert_eq!(t, "template/k8sreq");
        assert_eq!(template_of_node(&t), Some("k8sreq"));
        assert_eq!(constraint_of_node(&t), None);
        // Not a constraint's: no prefix, or no `Kind/name` after it.
        assert_eq!(constraint_of_node("constraint/K8sX"), None);
        assert_eq!(constraint_of_node("binding/K8sX/c"), None);
    }
}
