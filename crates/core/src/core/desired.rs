//! Per-object decisions shared by the offline analysis and the live reconciler: what binding a
//! constraint should have, given only the opinion of its kind (never the template itself).

use super::decide::{ConstraintIntent, TemplateVerdict, decide_constraint};
use super::generate;
use super::options::{Options, PolicyShape};
use super::scope::Coverage;
use crate::model::served::Served;
use crate::model::{Binding, Constraint};
use chrono::{DateTime, Utc};
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;

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
}

impl Opinion {
    /// What `template`'s verdict publishes for its kind. `policy_ready`: its VAP is written
    /// (live), or will be first (plan); never for a template that does not generate.
    /// `coverage`: what its VAP matches once written.
    pub fn of(
        template: &str,
        verdict: &TemplateVerdict,
        policy_ready: bool,
        coverage: Coverage,
    ) -> Opinion {
        let fail_closed = matches!(
            verdict,
            TemplateVerdict::Generate {
                failure_policy: super::options::FailurePolicy::Fail,
                ..
            }
        );
        Opinion {
            template: template.to_string(),
            generate: verdict.generates(),
            policy_ready: policy_ready && verdict.generates(),
            frozen: matches!(verdict, TemplateVerdict::Invalid { .. }),
            reason: verdict.reason().to_string(),
            coverage,
            fail_closed,
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
    Want(Box<ValidatingAdmissionPolicyBinding>),
    /// Wanted, but the CRD is not ready long enough: write nothing yet (delete nothing either).
    Waiting {
        reason: String,
        until: Option<DateTime<Utc>>,
    },
    /// No binding should exist.
    NotWanted {
        reason: String,
    },
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
    if opts.policy_shape == PolicyShape::Gatekeeper {
        return Coverage::everything();
    }
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
    match crd {
        CrdState::NotEstablished => {
            return BindingDecision::Waiting {
                reason: format!("the {} CRD is not Established", c.kind),
                until: None,
            };
        }
        CrdState::Established(Some(since)) => {
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
        CrdState::Established(None) | CrdState::Unknown => {}
    }
    match generate::binding(c, &actions, opts.policy_shape, served) {
        // The VAP does not match all the binding would yet (the constraint's kinds grew, or a
        // kind became served): its template widens the VAP first, and the fan-out comes back.
        Ok((_, coverage))
            if opts.policy_shape == PolicyShape::Narrowed
                && !opinion.coverage.covers(&coverage) =>
        {
            BindingDecision::Waiting {
                reason: format!(
                    "the VAP of template {} does not match all of the constraint's kinds yet",
                    opinion.template
                ),
                until: None,
            }
        }
        Ok((b, _)) => BindingDecision::Want(Box::new(b)),
        Err(reason) => BindingDecision::Frozen {
            reason,
            constraint_error: true,
        },
    }
}
