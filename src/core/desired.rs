//! Per-object decisions shared by the offline analysis and the live reconciler: what binding a
//! constraint should have, given only the opinion of its kind (never the template itself).

use super::decide::{ConstraintIntent, TemplateVerdict, decide_constraint};
use super::generate;
use super::options::Options;
use crate::model::Constraint;
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
}

impl Opinion {
    /// What `template`'s verdict publishes for its kind. `policy_ready`: its VAP is written
    /// (live), or will be first (plan); never for a template that does not generate.
    pub fn of(template: &str, verdict: &TemplateVerdict, policy_ready: bool) -> Opinion {
        Opinion {
            template: template.to_string(),
            generate: verdict.generates(),
            policy_ready: policy_ready && verdict.generates(),
            frozen: matches!(verdict, TemplateVerdict::Invalid { .. }),
            reason: verdict.reason().to_string(),
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

pub fn binding_decision(
    c: &Constraint,
    opinion: Option<&Opinion>,
    crd: CrdState,
    opts: &Options,
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
    match generate::binding(c, &actions) {
        Ok(b) => BindingDecision::Want(Box::new(b)),
        Err(reason) => BindingDecision::Frozen {
            reason,
            constraint_error: true,
        },
    }
}
