//! Per-object decisions shared by the offline analysis and the live reconciler: what binding a
//! constraint should have, given only the opinion of its kind (never the template itself).

use super::decide::{ConstraintIntent, TemplateVerdict, decide_constraint};
use super::generate::{self, PolicyBody};
use super::options::{Options, PolicyShape};
use super::scope::Coverage;
use crate::model::served::Served;
use crate::model::{Binding, Constraint, ConstraintTemplate};
use chrono::{DateTime, Utc};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use std::sync::Arc;

/// The template side's published opinion for one constraint kind (the shared cache's value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opinion {
    /// The template that holds the kind.
    pub template: String,
    /// Generate a VAP and bindings for this kind.
    pub generate: bool,
    /// The VAP has been written (live), or will be written first (plan). I1: no binding before.
    pub policy_ready: bool,
    /// The template is invalid: keep what exists, write nothing new for the kind.
    pub frozen: bool,
    pub reason: String,
    /// What the VAP as written matches (`matchConstraints`): a binding is written only when it
    /// matches no more than this (I1 for coverage; the template side widens first).
    pub coverage: Coverage,
    /// The VAP's failurePolicy is Fail: a request it cannot evaluate is refused.
    pub fail_closed: bool,
    /// The shape of the kind's objects.
    pub shape: PolicyShape,
    /// In the inline shape, what the template gives each constraint's VAP (the constraint
    /// side writes those VAPs); `None` in the shapes whose one VAP the template side writes.
    pub body: Option<Arc<PolicyBody>>,
}

impl Opinion {
    /// What `template`'s verdict publishes for its kind. `policy_ready`: its VAP is written
    /// (live), or will be first (plan); never for a template that does not generate.
    /// `coverage`: what its VAP matches once written.
    /// `shape`: the shape of the kind's objects; in the inline shape the opinion carries the
    /// template's [`PolicyBody`].
    pub fn of(
        template: &ConstraintTemplate,
        verdict: &TemplateVerdict,
        policy_ready: bool,
        coverage: Coverage,
        shape: PolicyShape,
    ) -> Opinion {
        let body = match verdict {
            TemplateVerdict::Generate {
                source,
                failure_policy,
                ..
            } if shape == PolicyShape::Inline => Some(Arc::new(PolicyBody {
                source: source.clone(),
                failure_policy: *failure_policy,
                operations: generate::operations(template),
            })),
            _ => None,
        };
        let fail_closed = matches!(
            verdict,
            TemplateVerdict::Generate {
                failure_policy: super::options::FailurePolicy::Fail,
                ..
            }
        );
        Opinion {
            template: template.name().to_string(),
            generate: verdict.generates(),
            policy_ready: policy_ready && verdict.generates(),
            frozen: matches!(verdict, TemplateVerdict::Invalid { .. }),
            reason: verdict.reason().to_string(),
            coverage,
            fail_closed,
            shape,
            body,
        }
    }
}

/// Readiness of a constraint kind's CRD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrdState {
    /// Established since the given time (if known).
    Established(Option<DateTime<Utc>>),
    NotEstablished,
    /// Not seen (files without CRDs): counts as established.
    Unknown,
}

/// What the constraint side concludes for one constraint.
#[derive(Debug, Clone, PartialEq)]
pub enum BindingDecision {
    /// This binding; and in the inline shape the constraint's own VAP, written before it.
    Want {
        binding: Box<ValidatingAdmissionPolicyBinding>,
        policy: Option<Box<ValidatingAdmissionPolicy>>,
    },
    /// Wanted, but the CRD is not ready long enough: write nothing yet (delete nothing either).
    Waiting {
        reason: String,
        until: Option<DateTime<Utc>>,
    },
    /// No binding should exist.
    NotWanted { reason: String },
    /// The kind has no template: no binding should exist.
    Orphan,
    /// Cannot decide: keep what exists, write nothing (constraint or template invalid).
    Frozen {
        reason: String,
        constraint_error: bool,
    },
}

/// What a kind's VAP must match: the union of what the bindings of its constraints match (a
/// binding that an invalid constraint keeps, as it is written). Gatekeeper's shape: everything.
///
/// Only what is wanted now counts: a constraint that narrowed its kinds no longer needs the
/// VAP to match the rest, even while its old binding still says so (the VAP bounds what any
/// binding of it matches, and the narrower match is what the constraint asks for).
pub fn policy_coverage<'a>(
    constraints: impl IntoIterator<Item = &'a Constraint>,
    kept: impl Fn(&Constraint) -> Option<&'a Binding>,
    opts: &Options,
    served: &Served,
) -> Coverage {
    if opts.policy_shape.is_gatekeepers() {
        return Coverage::everything();
    }
    // In the inline shape each constraint's VAP matches what its binding does; the template's
    // coverage is published for the views only.
    let mut out = Coverage::default();
    for c in constraints {
        match decide_constraint(c, opts) {
            ConstraintIntent::Bind { .. } if c.spec_error.is_none() => {
                out.union(&super::scope::coverage_of(&c.matcher, served).0)
            }
            ConstraintIntent::Invalid { .. } | ConstraintIntent::Bind { .. } => {
                if let Some(b) = kept(c) {
                    let rules = b
                        .object
                        .spec
                        .as_ref()
                        .and_then(|s| s.match_resources.as_ref());
                    let rules = rules.and_then(|m| m.resource_rules.as_deref());
                    out.union(&Coverage::from_rules(rules));
                }
            }
            ConstraintIntent::NoBinding { .. } => {}
        }
        if out.everything && out.namespaces.is_none() {
            break;
        }
    }
    out
}

pub fn binding_decision(
    c: &Constraint,
    opinion: Option<&Opinion>,
    crd: CrdState,
    opts: &Options,
    served: &Served,
    now: DateTime<Utc>,
) -> BindingDecision {
    let intent = decide_constraint(c, opts);
    if let ConstraintIntent::Invalid { reason } = intent {
        return BindingDecision::Frozen {
            reason,
            constraint_error: true,
        };
    }
    let Some(opinion) = opinion else {
        return BindingDecision::Orphan;
    };
    if opinion.frozen {
        return BindingDecision::Frozen {
            reason: format!(
                "template {} is invalid: {}",
                opinion.template, opinion.reason
            ),
            constraint_error: false,
        };
    }
    if !opinion.generate {
        return BindingDecision::NotWanted {
            reason: format!(
                "template {} does not generate a VAP ({})",
                opinion.template, opinion.reason
            ),
        };
    }
    let actions = match intent {
        ConstraintIntent::Bind { actions, .. } => actions,
        // Invalid returned Frozen above.
        ConstraintIntent::NoBinding { reason } | ConstraintIntent::Invalid { reason } => {
            return BindingDecision::NotWanted { reason };
        }
    };
    if !opinion.policy_ready {
        return BindingDecision::Waiting {
            reason: format!(
                "policy for template {} is not written yet",
                opinion.template
            ),
            until: None,
        };
    }
    let shape = opinion.shape;
    match crd {
        CrdState::NotEstablished => {
            return BindingDecision::Waiting {
                reason: format!("the {} CRD is not Established", c.kind),
                until: None,
            };
        }
        // The wait is for the API server to discover the kind a `paramKind` names; an inline
        // VAP names none.
        CrdState::Established(Some(since)) if shape != PolicyShape::Inline => {
            let wait = chrono::Duration::from_std(opts.binding_wait).unwrap_or_default();
            let until = since + wait;
            if now < until {
                return BindingDecision::Waiting {
                    reason: format!(
                        "the {} CRD became Established at {}; --binding-wait {}s",
                        c.kind,
                        since.to_rfc3339(),
                        opts.binding_wait.as_secs()
                    ),
                    until: Some(until),
                };
            }
        }
        CrdState::Established(_) | CrdState::Unknown => {}
    }
    let frozen = |reason| BindingDecision::Frozen {
        reason,
        constraint_error: true,
    };
    let (binding, coverage) = match generate::binding(c, &actions, shape, &opts.exemptions, served)
    {
        Ok(b) => b,
        Err(reason) => return frozen(reason),
    };
    match (shape, &opinion.body) {
        // The VAP does not match all the binding would yet (the constraint's kinds grew, or a
        // kind became served): its template widens the VAP first, and the fan-out comes back.
        (PolicyShape::Narrowed, _) if !opinion.coverage.covers(&coverage) => {
            BindingDecision::Waiting {
                reason: format!(
                    "the VAP of template {} does not match all of the constraint's kinds yet",
                    opinion.template
                ),
                until: None,
            }
        }
        (PolicyShape::Inline, Some(body)) => match inline_policy(c, body, &coverage, opts) {
            Ok(policy) => BindingDecision::Want {
                binding: Box::new(binding),
                policy: Some(Box::new(policy)),
            },
            Err(reason) => frozen(reason),
        },
        _ => BindingDecision::Want {
            binding: Box::new(binding),
            policy: None,
        },
    }
}

/// The inline VAP of `c`, its parameters' literal checked by the edge's CEL parser and its
/// size against what one object may hold: a constraint that cannot be inlined is a constraint
/// error that says why (`core::shape` keeps such a template narrowed under `auto`).
pub fn inline_policy(
    c: &Constraint,
    body: &PolicyBody,
    coverage: &Coverage,
    opts: &Options,
) -> Result<ValidatingAdmissionPolicy, String> {
    let cannot = |why: String| {
        format!(
            "constraint {} {} cannot be inlined into its own VAP: {why}",
            c.kind,
            c.name()
        )
    };
    let policy = generate::inline_policy(
        c,
        body,
        coverage,
        &opts.exemptions,
        opts.emit_admission_audit_annotations,
    )
    .map_err(|e| cannot(e.to_string()))?;
    let spec = policy.spec.as_ref();
    let generated: Vec<(String, &str)> = spec
        .and_then(|s| s.variables.as_ref())
        .into_iter()
        .flatten()
        .filter(|v| v.name == "params")
        .map(|v| ("variables.params".to_string(), v.expression.as_str()))
        .chain(
            spec.and_then(|s| s.match_conditions.as_ref())
                .into_iter()
                .flatten()
                .filter(|m| m.name.starts_with("gatekeeper_internal_"))
                .map(|m| (format!("matchConditions {}", m.name), m.expression.as_str())),
        )
        .collect();
    opts.cel.check(&generated).map_err(cannot)?;
    generate::fits_in_one_object(&policy).map_err(cannot)?;
    Ok(policy)
}
