//! The names of units of work and of what is written, at the bottom of the controller.

use crate::cluster::discovery::VAP_KIND;

/// A unit of work: one template (its VAP and opinion) or one constraint (its binding).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    Template(String),
    Constraint { kind: String, name: String },
}

impl Key {
    pub fn constraint(kind: impl Into<String>, name: impl Into<String>) -> Self {
        Key::Constraint {
            kind: kind.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Template(n) => write!(f, "ConstraintTemplate/{n}"),
            Key::Constraint { kind, name } => write!(f, "{kind}/{name}"),
        }
    }
}

/// Which keys a copy works on: everything, or one template's (a one-shot `reconcile
/// TEMPLATE` that leads itself writes only that template's objects).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Scope {
    #[default]
    All,
    /// The template's key and its kind's constraints (Gatekeeper's rule: a template's name is
    /// its kind in lower case).
    Template(String),
}

impl Scope {
    pub fn contains(&self, key: &Key) -> bool {
        match (self, key) {
            (Scope::All, _) => true,
            (Scope::Template(t), Key::Template(n)) => t == n,
            (Scope::Template(t), Key::Constraint { kind, .. }) => kind.to_lowercase() == *t,
        }
    }
}

/// The kinds of object this copy writes (the overlay's key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Obj {
    Policy,
    Binding,
    Crd,
}

impl Obj {
    pub fn of(kind: &str) -> Obj {
        match kind {
            VAP_KIND => Obj::Policy,
            crate::core::crd::CRD_KIND => Obj::Crd,
            _ => Obj::Binding,
        }
    }

    /// The resource name in `/metrics`.
    pub fn resource(self) -> &'static str {
        match self {
            Obj::Policy => "validatingadmissionpolicies",
            Obj::Binding => "validatingadmissionpolicybindings",
            Obj::Crd => "customresourcedefinitions",
        }
    }
}
