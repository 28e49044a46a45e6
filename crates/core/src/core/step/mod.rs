//! One object's step: from what is wanted and what is observed, the one thing to do about the
//! object, why, and the finding that says so. The offline analysis folds these steps over a
//! snapshot (`analysis::analyze`); the live reconcilers call the same steps and send what they
//! say (`controller::reconcilers`). Each rule is therefore written once, and `plan` and `run` cannot
//! disagree on it. Pure.
//!
//! - [`policy`]: a template's VAP (and the template's own finding), and a VAP whose template
//!   is gone;
//! - [`crd`]: a template's constraint CRD, one no template defines, and one whose template this
//!   copy saw deleted;
//! - [`binding`]: a constraint's binding, and what is left under a constraint's names (the
//!   legacy name, the binding of a constraint that is gone).

pub mod binding;
pub mod crd;
pub mod policy;

pub use binding::{
    BindingInput, BindingStep, BindingSweep, binding_step, sweep_binding, sweep_inline_policy,
};
pub use crd::{CrdStep, crd_step};
pub use policy::{PolicyStep, PolicySweep, policy_step, sweep_policy};

use super::compare::Comparison;
use super::plan::{Desired, Diff, PlannedWrite};
use super::tree::State;
use crate::model::{Constraint, ConstraintTemplate, ObjectRef, VAP_KIND, VAPB_KIND};

/// What to do about one object whose desired form is `D`.
#[derive(Debug, Clone, PartialEq)]
pub enum Action<D> {
    /// Wanted and missing: create it.
    Create(D),
    /// Wanted and as desired: nothing to send.
    InSync,
    /// Wanted, ours, and different in these fields: one update.
    Update {
        desired: D,
        fields: Vec<&'static str>,
    },
    /// Our name, but another controller (or none) holds it: never modified or deleted.
    Foreign(String),
    /// Wanted, but not to be written yet (what it rests on is not ready): nothing is sent.
    Wait,
    /// Observed and left as it is (an invalid template or constraint freezes it; an existing
    /// binding is kept while its CRD settles).
    Keep,
    /// Observed, ours and not wanted: deleted, for this reason.
    Delete(String),
    /// Not wanted and not there.
    Nothing,
    /// Wanted, but its desired form cannot be built (the reason): nothing is sent.
    Unbuildable(String),
}

impl<D> Action<D> {
    /// The tree's state of a wanted object as its action says it, the same for every kind
    /// (missing, in sync, out of sync, foreign, going); `None` for the actions each step
    /// explains in its own words.
    fn common_state(&self) -> Option<(State, String)> {
        Some(match self {
            Action::Create(_) => (State::Missing, "not written yet".into()),
            Action::InSync => (State::InSync, String::new()),
            Action::Update { fields, .. } => (State::OutOfSync, differs(fields)),
            Action::Foreign(why) => (State::Foreign, why.clone()),
            Action::Delete(reason) => (State::Dangling, reason.clone()),
            _ => return None,
        })
    }

    /// The wanted object against the observed one: create, nothing, update or hands off.
    fn against<O>(
        desired: D,
        observed: Option<&O>,
        compare: impl FnOnce(&D, &O) -> Comparison,
    ) -> Self {
        let Some(o) = observed else {
            return Action::Create(desired);
        };
        match compare(&desired, o) {
            Comparison::InSync => Action::InSync,
            Comparison::OutOfSync(fields) => Action::Update { desired, fields },
            Comparison::Foreign(why) => Action::Foreign(why),
        }
    }
}

/// The write `action` needs, if any: a create (`because`), an update (its reason from the
/// fields it fixes) or a delete; each resolves the finding `D::CODES` names.
fn write<D: Desired>(
    action: &Action<D>,
    observed: Option<&D::Observed>,
    because: &str,
    update_reason: impl FnOnce(&[&str]) -> String,
    diff: Diff,
) -> Option<PlannedWrite> {
    let (missing, out_of_sync, dangling) = D::CODES;
    match (action, observed) {
        (Action::Create(d), _) => Some(PlannedWrite::create(d, missing, because, diff)),
        (Action::Update { desired, fields }, Some(o)) => Some(PlannedWrite::update(
            desired,
            o,
            out_of_sync,
            &update_reason(fields),
            diff,
        )),
        (Action::Delete(reason), Some(o)) => Some(PlannedWrite::delete(
            D::observed(o),
            dangling?,
            reason,
            diff,
        )),
        _ => None,
    }
}

/// The type checker's warnings on an observed VAP that `action` keeps — in sync,
/// updated or kept as it is, each of which only ours can be (a foreign one is `Foreign`, one
/// that goes is `Delete`) — one `policy-type-warning` per expression, about the VAP and
/// related to `owner`, whom `whose` names. From status only: never a write.
fn type_findings<D>(
    action: &Action<D>,
    observed: Option<&crate::model::Policy>,
    whose: &str,
    owner: ObjectRef,
) -> Vec<super::findings::Finding> {
    use super::findings::{Code, Finding};
    let Some(o) = observed.filter(|_| {
        matches!(
            action,
            Action::InSync | Action::Update { .. } | Action::Keep
        )
    }) else {
        return Vec::new();
    };
    o.type_warnings
        .iter()
        .map(|w| {
            Finding::new(
                Code::PolicyTypeWarning,
                policy_ref(o.name()),
                format!(
                    "{} of {whose}: the type checker warns about {}: {}; fix the template's CEL (every request the VAP matches makes it error, and its failurePolicy decides)",
                    o.name(),
                    w.field_ref,
                    one_line(&w.warning)
                ),
            )
            .related(owner.clone())
            .at(&o.source)
        })
        .collect()
}

/// The checker's words on one line: its `ERROR: …` lines (one per kind it checked), without
/// the excerpt of the expression and the caret under it (`| …` lines).
fn one_line(warning: &str) -> String {
    let lines: Vec<&str> = warning
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('|'))
        .collect();
    if lines.is_empty() {
        return warning.split_whitespace().collect::<Vec<_>>().join(" ");
    }
    lines.join("; ")
}

/// The reason of an update: the fields it fixes.
fn differs(fields: &[&str]) -> String {
    format!("differs in {}", fields.join(", "))
}

const AR_V1: &str = "admissionregistration.k8s.io/v1";

pub fn policy_ref(name: &str) -> ObjectRef {
    ObjectRef::new(AR_V1, VAP_KIND, name)
}
pub fn binding_ref(name: &str) -> ObjectRef {
    ObjectRef::new(AR_V1, VAPB_KIND, name)
}
pub fn crd_ref(name: &str) -> ObjectRef {
    ObjectRef::new(super::crd::CRD_API_VERSION, super::crd::CRD_KIND, name)
}
pub fn template_ref(t: &ConstraintTemplate) -> ObjectRef {
    let v = if t.api_version.is_empty() {
        "templates.gatekeeper.sh/v1"
    } else {
        &t.api_version
    };
    ObjectRef::new(v, "ConstraintTemplate", t.name())
}
pub fn constraint_ref(c: &Constraint) -> ObjectRef {
    let v = if c.api_version.is_empty() {
        "constraints.gatekeeper.sh/v1beta1"
    } else {
        &c.api_version
    };
    ObjectRef::new(v, &c.kind, c.name())
}
