//! The constraint CRD a template defines: first, as everything else of the kind rests on it.

use super::{Action, crd_ref, differs, template_ref, write};
use crate::core::compare::compare_crd;
use crate::core::crd;
use crate::core::decide::TemplateVerdict;
use crate::core::findings::{Code, Finding};
use crate::core::ownership::{Control, OwnerId, control, gatekeeper_controller};
use crate::core::plan::{Diff, PlannedWrite};
use crate::core::tree::State;
use crate::model::{ConstraintTemplate, CrdInfo};
use serde_json::Value;

/// What the constraint CRD of one template's kind should be.
#[derive(Debug, Clone)]
pub struct CrdStep<'a> {
    template: &'a ConstraintTemplate,
    kind: &'a str,
    observed: Option<&'a CrdInfo>,
    pub action: Action<Value>,
}

/// The CRD step of `template`, whose kind is `kind`. An invalid template freezes its CRD like
/// its VAP: nothing created, updated or deleted. A CRD another controller holds is used as it is.
pub fn crd_step<'a>(
    template: &'a ConstraintTemplate,
    kind: &'a str,
    verdict: &TemplateVerdict,
    observed: Option<&'a CrdInfo>,
) -> CrdStep<'a> {
    let action = if let TemplateVerdict::Invalid { .. } = verdict {
        match observed {
            Some(_) => Action::Keep,
            None => Action::Nothing,
        }
    } else {
        match crd::desired_crd(template, kind) {
            Ok(desired) => {
                let owner = OwnerId::template(template.name(), &template.meta.uid);
                Action::against(desired, observed, |d, o| compare_crd(d, o, &owner))
            }
            // decide_template validated what the CRD is built from: not reached, not a panic.
            Err(reason) => Action::Unbuildable(reason),
        }
    };
    CrdStep {
        template,
        kind,
        observed,
        action,
    }
}

impl CrdStep<'_> {
    pub fn name(&self) -> String {
        crd::crd_name(self.kind)
    }

    /// Whether the kind is served now: the CRD exists and is Established (an update keeps it
    /// so). The VAP, whose `paramKind` is the kind, waits for this.
    pub fn served(&self) -> bool {
        matches!(
            self.action,
            Action::InSync | Action::Update { .. } | Action::Foreign(_)
        ) && self.observed.is_some_and(|o| o.established)
    }

    fn not_established(&self) -> &'static str {
        match self.observed {
            Some(o) if !o.established => "; not Established yet",
            _ => "",
        }
    }

    fn update_reason(&self, fields: &[&str]) -> String {
        format!("{}{}", differs(fields), self.not_established())
    }

    pub fn write(&self, diff: Diff) -> Option<PlannedWrite> {
        let because = "the template defines the kind";
        write(
            &self.action,
            self.observed,
            because,
            |f| self.update_reason(f),
            diff,
        )
    }

    pub fn state(&self) -> (State, String) {
        match &self.action {
            Action::Keep => (State::Error, "kept while the template is invalid".into()),
            Action::Nothing => (
                State::NotBound,
                "not created while the template is invalid".into(),
            ),
            Action::Unbuildable(reason) => (State::Error, reason.clone()),
            Action::Create(_) => (State::Missing, "not created yet".into()),
            Action::InSync => (
                State::InSync,
                self.not_established().trim_start_matches("; ").into(),
            ),
            Action::Update { fields, .. } => (State::OutOfSync, self.update_reason(fields)),
            Action::Foreign(why) => (State::Foreign, why.clone()),
            // Not produced for a CRD.
            Action::Wait | Action::Delete(_) => (State::InSync, String::new()),
        }
    }

    pub fn finding(&self) -> Option<Finding> {
        let (t, kind, name) = (self.template.name(), self.kind, self.name());
        let (code, message) = match &self.action {
            Action::Create(_) => (
                Code::CrdMissing,
                format!(
                    "template {t} defines kind {kind} but {name} does not exist, so no {kind} constraint can be created; reconcile creates it"
                ),
            ),
            Action::Update { fields, .. } => (
                Code::CrdOutOfSync,
                format!(
                    "{name} differs from what template {t} defines in {}; reconcile rewrites it",
                    fields.join(", ")
                ),
            ),
            Action::Foreign(why) => (
                Code::CrdForeign,
                format!(
                    "{name} is the CRD of template {t}'s kind, but {why}; it is used as it is and never modified or deleted"
                ),
            ),
            _ => return None,
        };
        let f = Finding::new(code, crd_ref(&name), message).related(template_ref(self.template));
        Some(match self.observed {
            Some(o) => f.at(&o.source),
            None => f,
        })
    }
}

/// Why a constraint CRD that no template defines is reported: deleting it would delete every
/// constraint of its kind, so it is left alone (only a template deletion this copy saw
/// justifies a delete: [`delete_of_gone_template`]).
pub fn orphan_reason(observed: &CrdInfo) -> String {
    match gatekeeper_controller(&observed.meta) {
        Some(ctl) => format!("its controller, template {}, does not exist", ctl.name),
        None => format!("no template defines kind {}", observed.kind),
    }
}

pub fn orphan_finding(observed: &CrdInfo) -> Finding {
    let (name, kind) = (&observed.name, &observed.kind);
    Finding::new(
        Code::CrdOrphan,
        crd_ref(name),
        format!(
            "{name}: {}; it is left alone (deleting it would delete every {kind} constraint): delete it by hand if its constraints are no longer wanted",
            orphan_reason(observed)
        ),
    )
    .at(&observed.source)
}

/// The delete of the CRD of `template`, which this copy saw with `uid` and which is gone:
/// only when the CRD's controller is that template, same uid (a recreated template, another
/// controller or none means it is not ours to delete).
pub fn delete_of_gone_template(
    template: &str,
    uid: &str,
    observed: &CrdInfo,
    diff: Diff,
) -> Option<PlannedWrite> {
    let controlled = !uid.is_empty()
        && observed.meta.controller().is_some_and(|c| c.uid == uid)
        && control(&observed.meta, &OwnerId::template(template, uid)) == Control::Owner;
    controlled.then(|| {
        PlannedWrite::delete(
            observed,
            Code::CrdOrphan,
            &format!("its template {template} was deleted"),
            diff,
        )
    })
}
