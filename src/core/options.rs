//! The generation flags shared by every command (design: "the generation flags").

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

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// `--default-create-vap-for-templates`: decides when a template leaves `generateVAP` unset.
    pub default_create_vap_for_templates: bool,
    /// `--default-create-vap-binding-for-constraints`: decides for deny/warn/dryrun constraints.
    pub default_create_vap_binding_for_constraints: bool,
    /// `--default-failure-policy`: when the template's source sets none.
    pub default_failure_policy: FailurePolicy,
    /// `--binding-wait`: how long after the constraint CRD is Established before the first binding.
    pub binding_wait: Duration,
}

impl Default for Options {
    /// Gatekeeper v3.20+ defaults.
    fn default() -> Self {
        Options {
            default_create_vap_for_templates: true,
            default_create_vap_binding_for_constraints: true,
            default_failure_policy: FailurePolicy::Fail,
            binding_wait: Duration::from_secs(30),
        }
    }
}
