//! The decision rules: does a template generate a VAP, and does a constraint want a binding,
//! with which actions. Gatekeeper's rules (spec §1–§2), plus the checks Gatekeeper lacks.

use super::cel_syntax::CelChecker;
use super::options::{FailurePolicy, Options, PolicyShape};
use crate::model::{
    CEL_ENGINE, Constraint, ConstraintTemplate, NativeSource, VAP_ENFORCEMENT_POINT,
};

/// The one target Gatekeeper's validation handles.
pub const ADMISSION_TARGET: &str = "admission.k8s.gatekeeper.sh";
const RESERVED_PREFIX: &str = "gatekeeper_internal_";
const RESERVED_VARIABLES: [&str; 2] = ["params", "anyObject"];

/// The template side's conclusion for one template: its part of the opinion cache.
#[derive(Debug, Clone, PartialEq)]
pub enum TemplateVerdict {
    /// Generate a VAP from this source.
    Generate {
        source: NativeSource,
        failure_policy: FailurePolicy,
        reason: String,
    },
    /// No VAP, and why (e.g. `generateVAP: false`, no CEL engine).
    Skip { reason: String },
    /// The template cannot be turned into a VAP as written.
    Invalid { reason: String },
}

impl TemplateVerdict {
    pub fn generates(&self) -> bool {
        matches!(self, TemplateVerdict::Generate { .. })
    }
    pub fn reason(&self) -> &str {
        match self {
            TemplateVerdict::Generate { reason, .. }
            | TemplateVerdict::Skip { reason }
            | TemplateVerdict::Invalid { reason } => reason,
        }
    }
}

/// Gatekeeper's `ShouldGenerateVAP`, plus validation of everything generation would need.
pub fn decide_template(t: &ConstraintTemplate, opts: &Options) -> TemplateVerdict {
    let invalid = |reason: String| TemplateVerdict::Invalid { reason };
    if let Some(e) = &t.targets_error {
        return invalid(e.clone());
    }
    let Some(kind) = &t.kind else {
        return invalid("spec.crd.spec.names.kind is not set".into());
    };
    if t.name() != kind.to_lowercase() {
        return invalid(format!(
            "the template name must be the lowercase kind: {:?}, not {:?}",
            kind.to_lowercase(),
            t.name()
        ));
    }
    let policy = super::names::policy_name(t.name());
    if policy.len() > super::names::MAX_NAME {
        return invalid(format!(
            "the policy name {}… would be {} characters, over the limit of {}",
            &policy[..40],
            policy.len(),
            super::names::MAX_NAME
        ));
    }
    match t.targets.len() {
        0 => return invalid("spec.targets is empty".into()),
        1 => {}
        n => return invalid(format!("{n} targets: exactly one target is allowed")),
    }
    if t.targets[0].target != ADMISSION_TARGET {
        return invalid(format!(
            "target {:?}: Gatekeeper knows only {ADMISSION_TARGET:?}",
            t.targets[0].target
        ));
    }
    // The constraint CRD comes first (CRD → VAP → bindings): a template whose CRD cannot be
    // built as written is invalid as a whole.
    if let Err(reason) = super::crd::validate(t) {
        return invalid(reason);
    }
    let Some(raw_source) = t.native_code() else {
        return TemplateVerdict::Skip {
            reason: format!("no {CEL_ENGINE} engine (Rego only)"),
        };
    };
    let source: NativeSource = match serde_json::from_value(raw_source.clone()) {
        Ok(s) => s,
        Err(e) => return invalid(format!("{CEL_ENGINE} source: {e}")),
    };
    if let Err(reason) = validate_source(&source, &opts.cel) {
        return invalid(reason);
    }
    // `--policy-shape inline` gives no VAP a `paramKind`, so there is no `params` to read
    // (`auto` keeps such a template narrowed instead: `core::shape`).
    if opts.policy_shape == PolicyShape::Inline
        && let Some(field) = opts.cel.reads_params(&source)
    {
        return invalid(format!(
            "{field} reads `params`, which --policy-shape inline does not have (no VAP gets a paramKind): write `variables.params.<name>` for `params.spec.parameters.<name>`, or use --policy-shape auto or narrowed"
        ));
    }
    let failure_policy = match &source.failure_policy {
        None => opts.default_failure_policy,
        Some(p) => match FailurePolicy::parse(p) {
            Some(p) => p,
            None => return invalid(format!("failurePolicy {p:?}: must be Fail or Ignore")),
        },
    };
    let (generate, why) = match source.generate_vap {
        Some(true) => (true, "generateVAP: true".to_string()),
        Some(false) => (false, "generateVAP: false".to_string()),
        None => (
            opts.default_create_vap_for_templates,
            format!(
                "{GENERATE_VAP_UNSET}; --default-create-vap-for-templates={}",
                opts.default_create_vap_for_templates
            ),
        ),
    };
    if generate {
        TemplateVerdict::Generate {
            source,
            failure_policy,
            reason: why,
        }
    } else {
        TemplateVerdict::Skip { reason: why }
    }
}

/// How a template's reason starts when it leaves `generateVAP` unset (the flag decides).
pub const GENERATE_VAP_UNSET: &str = "generateVAP unset";

fn validate_source(s: &NativeSource, cel: &CelChecker) -> Result<(), String> {
    if s.validations.is_empty() {
        return Err("the CEL source has no validations".into());
    }
    for (i, v) in s.validations.iter().enumerate() {
        if v.expression.trim().is_empty() {
            return Err(format!("validations[{i}].expression is empty"));
        }
    }
    for m in &s.match_conditions {
        if m.name.starts_with(RESERVED_PREFIX) {
            return Err(format!(
                "matchCondition {:?} uses the reserved prefix {RESERVED_PREFIX}",
                m.name
            ));
        }
        if m.name.is_empty() || m.expression.trim().is_empty() {
            return Err("a matchCondition needs a name and an expression".into());
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for v in &s.variables {
        if v.name.starts_with(RESERVED_PREFIX) {
            return Err(format!(
                "variable {:?} uses the reserved prefix {RESERVED_PREFIX}",
                v.name
            ));
        }
        if RESERVED_VARIABLES.contains(&v.name.as_str()) {
            return Err(format!(
                "variable name {:?} is reserved (params, anyObject)",
                v.name
            ));
        }
        if v.name.is_empty() || v.expression.trim().is_empty() {
            return Err("a variable needs a name and an expression".into());
        }
        if !seen.insert(v.name.as_str()) {
            return Err(format!("variable {:?} is defined twice", v.name));
        }
    }
    // Last: the structural errors above are cheaper to find and to read.
    cel.check_source(s)
}

/// `validationActions` of a binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    Deny,
    Warn,
    Audit,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Deny => "Deny",
            Action::Warn => "Warn",
            Action::Audit => "Audit",
        }
    }
    /// Gatekeeper's enforcement action → VAP action (`transform.ConstraintToBinding`).
    fn from_enforcement(action: &str) -> Option<Action> {
        match action {
            "deny" => Some(Action::Deny),
            "warn" => Some(Action::Warn),
            "dryrun" => Some(Action::Audit),
            _ => None,
        }
    }
}

/// What a constraint asks of VAP, before the template's opinion is consulted.
#[derive(Debug, Clone, PartialEq)]
pub enum ConstraintIntent {
    /// Wants a binding with these actions (de-duplicated, in Deny, Warn, Audit order).
    Bind {
        actions: Vec<Action>,
        reason: String,
    },
    /// Does not target VAP, and why.
    NoBinding { reason: String },
    /// Cannot be bound as written.
    Invalid { reason: String },
}

/// Gatekeeper's `shouldGenerateVAPB` intent (spec §2.1), with Deny+Warn and unknown actions
/// rejected instead of sent to the API server.
pub fn decide_constraint(c: &Constraint, opts: &Options) -> ConstraintIntent {
    let invalid = |reason: String| ConstraintIntent::Invalid { reason };
    if let Some(e) = &c.spec_error {
        return invalid(e.clone());
    }
    let action = c
        .enforcement_action
        .as_deref()
        .filter(|a| !a.is_empty())
        .unwrap_or("deny");
    let mut actions = Vec::new();
    let reason = if action == "scoped" {
        for (i, scoped) in c.scoped_actions.iter().enumerate() {
            let targets_vap = scoped
                .enforcement_points
                .iter()
                .any(|p| p.name == VAP_ENFORCEMENT_POINT || p.name == "*");
            if !targets_vap {
                continue;
            }
            match Action::from_enforcement(&scoped.action) {
                Some(a) => actions.push(a),
                None => {
                    return invalid(format!(
                        "scopedEnforcementActions[{i}].action {:?}: must be deny, warn or dryrun",
                        scoped.action
                    ));
                }
            }
        }
        if actions.is_empty() {
            return ConstraintIntent::NoBinding {
                reason: format!("scoped, and no action lists {VAP_ENFORCEMENT_POINT} or *"),
            };
        }
        format!("scoped to {VAP_ENFORCEMENT_POINT}")
    } else {
        let Some(a) = Action::from_enforcement(action) else {
            return invalid(format!(
                "enforcementAction {action:?}: must be deny, warn, dryrun or scoped"
            ));
        };
        if !opts.default_create_vap_binding_for_constraints {
            return ConstraintIntent::NoBinding {
                reason: "--default-create-vap-binding-for-constraints=false".into(),
            };
        }
        actions.push(a);
        format!("{action}; --default-create-vap-binding-for-constraints=true")
    };
    // Gatekeeper's --emit-admission-audit-annotations: `Audit` beside Deny or Warn, so the API
    // server's audit log records every failed validation.
    if opts.emit_admission_audit_annotations {
        actions.push(Action::Audit);
    }
    actions.sort();
    actions.dedup();
    if actions.contains(&Action::Deny) && actions.contains(&Action::Warn) {
        return invalid(
            "Deny and Warn together: the API server rejects that pair; keep one of deny or warn for vap.k8s.io"
                .into(),
        );
    }
    if let Some(scope) = c.matcher.scope.as_deref()
        && !matches!(scope, "*" | "Cluster" | "Namespaced")
    {
        return invalid(format!(
            "spec.match.scope {scope:?}: must be *, Cluster or Namespaced"
        ));
    }
    ConstraintIntent::Bind { actions, reason }
}
