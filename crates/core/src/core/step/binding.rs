//! The constraint side's step: a constraint's binding, decided from the opinion of its kind
//! (never the template), its CRD's readiness and the observed binding.

use super::policy::PolicySweep;
use super::{Action, binding_ref, constraint_ref, differs, policy_ref, write};
use crate::core::compare::{compare_binding, compare_policy};
use crate::core::desired::{BindingDecision, CrdState, Opinion, binding_decision};
use crate::core::findings::{Code, Finding};
use crate::core::names;
use crate::core::options::{Options, PolicyShape};
use crate::core::ownership::{Control, OwnerId, control};
use crate::core::plan::{Diff, PlannedWrite};
use crate::core::scope::{Unresolved, coverage_of};
use crate::core::tree::State;
use crate::model::served::Served;
use crate::model::{Binding, Constraint, Policy};
use chrono::{DateTime, Utc};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};

/// What the binding step of one constraint rests on.
#[derive(Debug, Clone, Copy)]
pub struct BindingInput<'a> {
    pub constraint: &'a Constraint,
    /// The opinion of the constraint's kind; `None`: no template holds the kind.
    pub opinion: Option<&'a Opinion>,
    pub crd: CrdState,
    /// The binding under the constraint's name.
    pub observed: Option<&'a Binding>,
    /// The VAP under the constraint's inline name (`names::inline_policy_name`).
    pub observed_policy: Option<&'a Policy>,
    pub opts: &'a Options,
    /// What the API server serves: the binding's rules come from it.
    pub served: &'a Served,
    pub now: DateTime<Utc>,
}

/// What the binding of one constraint should be.
#[derive(Debug, Clone)]
pub struct BindingStep<'a> {
    constraint: &'a Constraint,
    observed: Option<&'a Binding>,
    observed_policy: Option<&'a Policy>,
    pub decision: BindingDecision,
    pub action: Action<Box<ValidatingAdmissionPolicyBinding>>,
    /// The constraint's own VAP (the inline shape): written before the binding, deleted after
    /// it (I1, I2). `Nothing` in the other shapes when none is left.
    pub policy: Action<Box<ValidatingAdmissionPolicy>>,
    /// What a narrowed binding matches wider than its kinds say, and why (`scope_finding`).
    scope: Option<ScopeNote>,
}

/// A narrowed binding that still matches more than its constraint's kinds.
#[derive(Debug, Clone)]
struct ScopeNote {
    everything: bool,
    fail_closed: bool,
    template: String,
    unresolved: Vec<Unresolved>,
}

pub fn binding_step(input: BindingInput<'_>) -> BindingStep<'_> {
    let BindingInput {
        constraint: c,
        observed,
        observed_policy,
        ..
    } = input;
    let decision = binding_decision(
        c,
        input.opinion,
        input.crd,
        input.opts,
        input.served,
        input.now,
    );
    let owner = OwnerId::constraint(&c.kind, c.name(), &c.meta.uid);
    // A binding with our name that another controller holds is foreign whatever we decide.
    let foreign = observed.and_then(|o| match control(&o.meta, &owner) {
        Control::Other(why) => Some(why),
        _ => None,
    });
    let policy = policy_action(&decision, observed_policy, &owner);
    let action = match (foreign, &decision) {
        (Some(why), _) => Action::Foreign(why),
        // I1: no binding before its VAP is written; another controller holds the VAP's name.
        (None, BindingDecision::Want { .. }) if matches!(policy, Action::Foreign(_)) => {
            match observed {
                Some(_) => Action::Keep,
                None => Action::Wait,
            }
        }
        (None, BindingDecision::Want { binding, .. }) => {
            Action::against(binding.clone(), observed, |d, o| {
                compare_binding(d, o, &owner)
            })
        }
        // Waiting is only about the first binding: one already written is kept.
        (None, BindingDecision::Waiting { .. }) => match observed {
            Some(_) => Action::Keep,
            None => Action::Wait,
        },
        (None, BindingDecision::Frozen { .. }) => match observed {
            Some(_) => Action::Keep,
            None => Action::Nothing,
        },
        (None, BindingDecision::NotWanted { reason }) => match observed {
            Some(_) => Action::Delete(reason.clone()),
            None => Action::Nothing,
        },
        (None, BindingDecision::Orphan) => match observed {
            Some(_) => Action::Delete("its kind has no template".into()),
            None => Action::Nothing,
        },
    };
    // A binding another controller holds leaves the constraint unbound: the live reconciler
    // then writes nothing of the constraint's (`reconcile_constraint`), so neither does the
    // plan; a VAP of its own would never be bound (I3: the plan at quiescence is empty). A
    // foreign VAP under its name is still said.
    let policy = match (&action, policy) {
        (Action::Foreign(_), p @ Action::Foreign(_)) => p,
        (Action::Foreign(_), _) if observed_policy.is_some() => Action::Keep,
        (Action::Foreign(_), _) => Action::Nothing,
        (_, p) => p,
    };
    let scope = match (&decision, input.opinion) {
        (BindingDecision::Want { .. } | BindingDecision::Waiting { .. }, Some(o))
            if matches!(o.shape, PolicyShape::Narrowed | PolicyShape::Inline) && o.generate =>
        {
            let (coverage, unresolved) = coverage_of(&c.matcher, input.served);
            let everything = coverage.everything;
            (everything || !unresolved.is_empty()).then(|| ScopeNote {
                everything,
                fail_closed: o.fail_closed,
                template: o.template.clone(),
                unresolved,
            })
        }
        _ => None,
    };
    BindingStep {
        constraint: c,
        observed,
        observed_policy,
        decision,
        action,
        policy,
        scope,
    }
}

/// What to do about the constraint's own VAP: the decision's, against the observed one. One
/// another controller holds is foreign while we want its name, else none of our business.
fn policy_action(
    decision: &BindingDecision,
    observed: Option<&Policy>,
    owner: &OwnerId<'_>,
) -> Action<Box<ValidatingAdmissionPolicy>> {
    let foreign = observed.and_then(|o| match control(&o.meta, owner) {
        Control::Other(why) => Some(why),
        _ => None,
    });
    match (decision, observed, foreign) {
        (
            BindingDecision::Want {
                policy: Some(_), ..
            },
            _,
            Some(why),
        ) => Action::Foreign(why),
        (
            BindingDecision::Want {
                policy: Some(p), ..
            },
            _,
            None,
        ) => Action::against(p.clone(), observed, |d, o| compare_policy(d, o, owner)),
        (_, None, _) | (_, _, Some(_)) => Action::Nothing,
        (BindingDecision::Waiting { .. } | BindingDecision::Frozen { .. }, Some(_), None) => {
            Action::Keep
        }
        (BindingDecision::Want { policy: None, .. }, Some(_), None) => {
            Action::Delete("the kind's policies are no longer one per constraint".into())
        }
        (BindingDecision::NotWanted { reason }, Some(_), None) => Action::Delete(reason.clone()),
        (BindingDecision::Orphan, Some(_), None) => {
            Action::Delete("its kind has no template".into())
        }
    }
}

impl<'a> BindingStep<'a> {
    pub fn name(&self) -> String {
        names::binding_name(&self.constraint.kind, self.constraint.name())
    }

    pub fn observed(&self) -> Option<&'a Binding> {
        self.observed
    }

    /// When a binding that waits for `--binding-wait` may be written.
    pub fn wait_until(&self) -> Option<DateTime<Utc>> {
        match &self.decision {
            BindingDecision::Waiting { until, .. } => *until,
            _ => None,
        }
    }

    pub fn write(&self, diff: Diff) -> Option<PlannedWrite> {
        let because = "the constraint targets vap.k8s.io";
        write(&self.action, self.observed, because, differs, diff)
    }

    /// Why a wanted binding waits on its constraint's own VAP.
    fn waits_for_foreign_policy(&self) -> String {
        format!(
            "its VAP {} is held by another controller",
            self.policy_name()
        )
    }

    pub fn policy_name(&self) -> String {
        names::inline_policy_name(&self.constraint.kind, self.constraint.name())
    }

    pub fn observed_policy(&self) -> Option<&'a Policy> {
        self.observed_policy
    }

    /// The write the constraint's own VAP needs, if any: a create or update goes before the
    /// binding's write, a delete after it ([`Self::policy_goes_first`]).
    pub fn policy_write(&self, diff: Diff) -> Option<PlannedWrite> {
        let because = "the template's policies are one per constraint (inline)";
        write(&self.policy, self.observed_policy, because, differs, diff)
    }

    /// Whether the VAP's write goes before the binding's (I1) or after it (I2).
    pub fn policy_goes_first(&self) -> bool {
        !matches!(self.policy, Action::Delete(_))
    }

    /// Whether this step involves a VAP of the constraint's own (wanted, or left to delete).
    pub fn has_policy(&self) -> bool {
        !matches!(self.policy, Action::Nothing)
    }

    /// The state and reason of the constraint's own VAP in the tree.
    pub fn policy_state(&self) -> (State, String) {
        if let Some(state) = self.policy.common_state() {
            return state;
        }
        match &self.policy {
            Action::Keep => (
                State::InSync,
                "kept while the constraint or template is invalid or waits".into(),
            ),
            _ => (State::NotBound, String::new()),
        }
    }

    /// The finding about the constraint's own VAP, if there is one.
    pub fn policy_finding(&self) -> Option<Finding> {
        let c = self.constraint;
        let (kind, name, pname) = (&c.kind, c.name(), self.policy_name());
        let (code, message) = match &self.policy {
            Action::Create(_) => (
                Code::PolicyMissing,
                format!(
                    "constraint {kind} {name} has its own VAP in the inline shape, but {pname} does not exist{}",
                    crate::core::findings::REMEDY_CREATE
                ),
            ),
            Action::Update { fields, .. } => (
                Code::PolicyOutOfSync,
                format!(
                    "{pname} differs from constraint {kind} {name} and its template in {}; reconcile rewrites it",
                    fields.join(", ")
                ),
            ),
            Action::Foreign(why) => (
                Code::PolicyForeign,
                format!(
                    "{pname} has the name constraint {kind} {name} needs for its own VAP, but {why}; it is left alone and the constraint is not bound: rename or delete it"
                ),
            ),
            Action::Delete(reason) => (
                Code::PolicyDangling,
                format!("{pname} should not exist: {reason}; reconcile deletes it"),
            ),
            _ => return None,
        };
        let f = Finding::new(code, policy_ref(&pname), message).related(constraint_ref(c));
        Some(match (&self.policy, self.observed_policy) {
            (Action::Create(_), _) => f.at(&c.source),
            (_, Some(o)) => f.at(&o.source),
            (_, None) => f,
        })
    }

    /// The type checker's warnings on the constraint's own VAP
    /// (`policy-type-warning`): its constraint is its owner, its template wrote the CEL.
    pub fn policy_type_findings(&self, template: Option<&str>) -> Vec<Finding> {
        let c = self.constraint;
        let whose = match template {
            Some(t) => format!("constraint {} {} (template {t})", c.kind, c.name()),
            None => format!("constraint {} {}", c.kind, c.name()),
        };
        let mut found = super::type_findings(
            &self.policy,
            self.observed_policy,
            &whose,
            constraint_ref(c),
        );
        if let Some(t) = template {
            let t =
                crate::model::ObjectRef::new("templates.gatekeeper.sh/v1", "ConstraintTemplate", t);
            found.iter_mut().for_each(|f| f.related.push(t.clone()));
        }
        found
    }

    /// The binding's state and reason in the tree.
    pub fn binding_state(&self) -> (State, String) {
        match (&self.action, &self.decision) {
            (Action::Foreign(why), _) => (State::Foreign, why.clone()),
            (Action::Create(_), _) => (State::Missing, "not written yet".into()),
            (Action::InSync, _) => (State::InSync, String::new()),
            (Action::Update { fields, .. }, _) => (State::OutOfSync, differs(fields)),
            (Action::Keep, BindingDecision::Waiting { .. }) => {
                (State::InSync, "kept while the CRD settles".into())
            }
            (Action::Wait | Action::Keep, BindingDecision::Want { .. }) => {
                (State::Waiting, self.waits_for_foreign_policy())
            }
            (Action::Keep, _) => (
                State::Error,
                "kept while the constraint or template is invalid".into(),
            ),
            (Action::Wait, BindingDecision::Waiting { reason, .. }) => {
                (State::Waiting, reason.clone())
            }
            (Action::Delete(reason), _) => (State::Dangling, reason.clone()),
            _ => (State::NotBound, String::new()),
        }
    }

    /// The constraint's state and reason in the tree: a constraint that wants a binding is as
    /// written (in sync) and says how it binds; its binding's own row says whether that
    /// binding is there (a missing binding drawn as a missing constraint said the constraint
    /// was gone).
    pub fn constraint_state(&self) -> (State, String) {
        if let Action::Foreign(_) = self.action {
            return (State::Error, "its binding name is taken".into());
        }
        match &self.decision {
            BindingDecision::Want { binding, .. } => {
                let actions = binding
                    .spec
                    .as_ref()
                    .and_then(|s| s.validation_actions.as_ref())
                    .map(|a| a.join(", "))
                    .unwrap_or_default();
                (State::InSync, format!("binds with {actions}"))
            }
            BindingDecision::Waiting { reason, .. } => (State::Waiting, reason.clone()),
            BindingDecision::NotWanted { reason } => (State::NotBound, reason.clone()),
            BindingDecision::Orphan => (
                State::Orphan,
                format!("no template defines kind {}", self.constraint.kind),
            ),
            BindingDecision::Frozen { reason, .. } => (State::Error, reason.clone()),
        }
    }

    /// The finding about the constraint itself: no template, or cannot be bound as written.
    pub fn constraint_finding(&self) -> Option<Finding> {
        let c = self.constraint;
        let (code, message) = match (&self.action, &self.decision) {
            (Action::Foreign(_), _) => return None,
            (_, BindingDecision::Orphan) => (
                Code::ConstraintOrphan,
                format!(
                    "no ConstraintTemplate defines kind {}; apply its template or delete the constraint",
                    c.kind
                ),
            ),
            (
                _,
                BindingDecision::Frozen {
                    reason,
                    constraint_error: true,
                },
            ) => (
                Code::ConstraintError,
                format!("{reason}; its binding is left as it is until fixed"),
            ),
            _ => return None,
        };
        Some(Finding::new(code, constraint_ref(c), message).at(&c.source))
    }

    /// What the constraint's binding matches beyond its kinds: every kind under a fail-closed
    /// policy (a warning: gatekeeper#4530's hazard), or kinds not served yet (info).
    pub fn scope_finding(&self) -> Option<Finding> {
        let note = self.scope.as_ref()?;
        let c = self.constraint;
        let (kind, name, t) = (&c.kind, c.name(), &note.template);
        let unserved = note
            .unresolved
            .iter()
            .map(|u| u.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let (code, message) = if note.everything && note.fail_closed {
            let why = if unserved.is_empty() {
                "it names no kinds (or `*`)".to_string()
            } else {
                format!("it names kinds no group serves yet ({unserved})")
            };
            (
                Code::ConstraintMatchesEverything,
                format!(
                    "constraint {kind} {name} matches every kind: {why}, and template {t}'s policy fails closed; every create and update in the cluster is evaluated against it and, after an API server restart, refused until its params are synced (gatekeeper#4530): name the kinds in spec.match.kinds, or set failurePolicy: Ignore in template {t}"
                ),
            )
        } else if !unserved.is_empty() {
            (
                Code::ConstraintKindsUnserved,
                format!(
                    "constraint {kind} {name} names kinds the API server does not serve: {unserved}; its binding matches {} until they are served, then only their resources",
                    if note.everything {
                        "every kind"
                    } else {
                        "their whole group"
                    }
                ),
            )
        } else {
            return None;
        };
        Some(Finding::new(code, constraint_ref(c), message).at(&c.source))
    }

    /// The finding about the binding, if there is one.
    pub fn binding_finding(&self) -> Option<Finding> {
        let (c, bname) = (self.constraint, self.name());
        let (kind, name) = (&c.kind, c.name());
        let (code, message) = match (&self.action, &self.decision) {
            (Action::Foreign(why), _) => (
                Code::BindingForeign,
                format!(
                    "{bname} has the name constraint {kind} {name} needs, but {why}; it is left alone: rename or delete it"
                ),
            ),
            (Action::Create(_), _) => (
                Code::BindingMissing,
                format!(
                    "constraint {kind} {name} should be bound to VAP but {bname} does not exist{}",
                    crate::core::findings::REMEDY_CREATE
                ),
            ),
            (Action::Update { fields, .. }, _) => (
                Code::BindingOutOfSync,
                format!(
                    "{bname} differs from constraint {kind} {name} in {}; reconcile rewrites it",
                    fields.join(", ")
                ),
            ),
            (Action::Wait, BindingDecision::Waiting { reason, .. }) => (
                Code::BindingWaiting,
                format!("{bname} is not written yet: {reason}"),
            ),
            (Action::Wait, BindingDecision::Want { .. }) => (
                Code::BindingWaiting,
                format!(
                    "{bname} is not written yet: {}",
                    self.waits_for_foreign_policy()
                ),
            ),
            (Action::Delete(reason), _) => (
                Code::BindingDangling,
                format!("{bname} should not exist: {reason}; reconcile deletes it"),
            ),
            _ => return None,
        };
        let f = Finding::new(code, binding_ref(&bname), message).related(constraint_ref(c));
        Some(match (&self.action, self.observed) {
            // A missing binding is the constraint's to fix: point at the constraint.
            (Action::Create(_), _) => f.at(&c.source),
            (Action::Wait, _) | (_, None) => f,
            (_, Some(o)) => f.at(&o.source),
        })
    }
}

/// A binding left under one of the names of constraint `kind/name` that no decision of the
/// constraint accounts for: the legacy name of Gatekeeper v3.16–v3.22, or any of its names
/// once the constraint is gone. Deleted when that constraint controls it (no reliance on
/// garbage collection); a legacy name is cleaned up even while the constraint is frozen.
#[derive(Debug, Clone)]
pub struct BindingSweep<'a> {
    observed: &'a Binding,
    constraint: Option<&'a Constraint>,
    pub reason: String,
}

/// `constraint`: the constraint `kind/name`, if it exists.
pub fn sweep_binding<'a>(
    kind: &str,
    name: &str,
    observed: &'a Binding,
    constraint: Option<&'a Constraint>,
) -> Option<BindingSweep<'a>> {
    let owner = OwnerId::constraint(kind, name, "");
    if let Control::Other(_) = control(&observed.meta, &owner) {
        return None;
    }
    let current = observed.name() == names::binding_name(kind, name);
    let legacy = !current && observed.name() == names::legacy_binding_name(name);
    let reason = match constraint {
        None if current || legacy => format!("constraint {kind} {name} is gone"),
        Some(_) if legacy => "legacy name from Gatekeeper v3.16–v3.22".to_string(),
        // The binding under its name is the constraint's decision (binding_step).
        _ => return None,
    };
    Some(BindingSweep {
        observed,
        constraint,
        reason,
    })
}

/// The VAP left under the inline name of constraint `kind/name`, which is gone: deleted
/// (after its binding, I2) when that constraint controls it.
pub fn sweep_inline_policy<'a>(
    kind: &str,
    name: &str,
    observed: &'a Policy,
    constraint: Option<&Constraint>,
) -> Option<PolicySweep<'a>> {
    let owner = OwnerId::constraint(kind, name, "");
    let ours = constraint.is_none()
        && observed.name() == names::inline_policy_name(kind, name)
        && !matches!(control(&observed.meta, &owner), Control::Other(_));
    ours.then(|| PolicySweep {
        observed,
        reason: format!("constraint {kind} {name} is gone"),
    })
}

impl BindingSweep<'_> {
    pub fn write(&self, diff: Diff) -> PlannedWrite {
        PlannedWrite::delete(self.observed, Code::BindingDangling, &self.reason, diff)
    }

    pub fn finding(&self) -> Finding {
        let name = self.observed.name();
        let f = Finding::new(
            Code::BindingDangling,
            binding_ref(name),
            format!("{name}: {}; reconcile deletes it", self.reason),
        )
        .at(&self.observed.source);
        match self.constraint {
            Some(c) => f.related(constraint_ref(c)),
            None => f,
        }
    }
}
