//! The generation flags shared by every command (design: "the generation flags").

use super::cel_syntax::CelChecker;
use std::time::Duration;

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

/// What a decision needs besides the snapshot. `Options::default()` (the flags' defaults,
/// [`Options::with_cel`], and the edge's CEL checker) is implemented by `load::cel`, where that
/// checker is.
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
            cel,
        }
    }
}
