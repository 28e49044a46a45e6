//! The generation flags shared by every command (design: "the generation flags").

use super::cel_syntax::CelChecker;
use std::collections::BTreeSet;
use std::time::Duration;

/// `--policy-shape`: what the generated objects match before their CEL runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolicyShape {
    /// Bindings narrowed to their constraint's kinds and exact namespaces, each VAP to the
    /// union of its constraints, exempt namespaces left out (`core::scope`).
    #[default]
    Narrowed,
    /// Gatekeeper v3.23's objects byte for byte (every create and update, filtered in CEL).
    Gatekeeper,
}

impl PolicyShape {
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyShape::Narrowed => "narrowed",
            PolicyShape::Gatekeeper => "gatekeeper",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "narrowed" => Some(PolicyShape::Narrowed),
            "gatekeeper" => Some(PolicyShape::Gatekeeper),
            _ => None,
        }
    }
}

/// The namespaces no narrowed VAP applies to, as Gatekeeper exempts them from its webhook:
/// by name (`--exempt-namespace`, and always the Lease's namespace), by prefix and by suffix.
/// Namespaces labelled `admission.gatekeeper.sh/ignore` are always exempt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exemptions {
    pub namespaces: BTreeSet<String>,
    pub prefixes: BTreeSet<String>,
    pub suffixes: BTreeSet<String>,
}

/// The Lease's namespace when no flag says otherwise (`--lease-namespace`).
pub const DEFAULT_LEASE_NAMESPACE: &str = "gatekeeper-system";

impl Exemptions {
    /// Only the default Lease namespace.
    pub fn lease_namespace(ns: &str) -> Self {
        Exemptions {
            namespaces: BTreeSet::from([ns.to_string()]),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    Fail,
    Ignore,
}

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Fail" => Some(FailurePolicy::Fail),
            "Ignore" => Some(FailurePolicy::Ignore),
            _ => None,
        }
    }
}

/// What a decision needs besides the snapshot. No `Default`: the flags' defaults are
/// [`Options::with_cel`] with the edge's CEL checker, `load::cel::default_options()` in the main
/// crate, where that checker is.
#[derive(Debug, Clone)]
pub struct Options {
    /// `--default-create-vap-for-templates`: decides when a template leaves `generateVAP` unset.
    pub default_create_vap_for_templates: bool,
    /// `--default-create-vap-binding-for-constraints`: decides for deny/warn/dryrun constraints.
    pub default_create_vap_binding_for_constraints: bool,
    /// `--default-failure-policy`: when the template's source sets none.
    pub default_failure_policy: FailurePolicy,
    /// `--binding-wait`: how long after the constraint CRD is Established before the first binding.
    pub binding_wait: Duration,
    /// `--policy-shape`.
    pub policy_shape: PolicyShape,
    /// `--exempt-namespace[-prefix|-suffix]` and the Lease's namespace.
    pub exemptions: Exemptions,
    /// What parses a template's CEL (syntax only): the edge's, which has the stack and the
    /// memory for it.
    pub cel: CelChecker,
}

impl Options {
    /// Gatekeeper v3.20+ defaults, templates' CEL checked by `cel`.
    pub fn with_cel(cel: CelChecker) -> Self {
        Options {
            default_create_vap_for_templates: true,
            default_create_vap_binding_for_constraints: true,
            default_failure_policy: FailurePolicy::Fail,
            binding_wait: Duration::from_secs(30),
            policy_shape: PolicyShape::Narrowed,
            exemptions: Exemptions::lease_namespace(DEFAULT_LEASE_NAMESPACE),
            cel,
        }
    }
}

/// Options for the core's own unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::Options;
    use crate::core::cel_syntax::{CelChecker, CelSyntax};

    /// Accepts every expression: the unit tests here never ask about CEL (the parser is the
    /// main crate's, `load::cel_syntax`; its tests and tests/core_*.rs use the real checker).
    struct AcceptsAll;

    impl CelSyntax for AcceptsAll {
        fn check(&self, _: &[(String, &str)]) -> Result<(), String> {
            Ok(())
        }
    }

    /// The flags' defaults with [`AcceptsAll`].
    pub(crate) fn options() -> Options {
        Options::with_cel(CelChecker::new(AcceptsAll))
    }
}
