//! The template side's step: the template's own verdict and its VAP.

use super::{Action, differs, policy_ref, template_ref, write};
use crate::core::compare::compare_policy;
use crate::core::decide::TemplateVerdict;
use crate::core::findings::{Code, Finding};
use crate::core::generate::{self, PolicyMatch};
use crate::core::names;
use crate::core::options::{Options, PolicyShape};
use crate::core::ownership::{Control, OwnerId, control};
use crate::core::plan::{Diff, PlannedWrite};
use crate::core::scope::Coverage;
use crate::core::tree::State;
use crate::model::{ConstraintTemplate, Policy};
use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicy;

/// What the VAP of one template should be, given the template's verdict and the observed VAP.
#[derive(Debug, Clone)]
pub struct PolicyStep<'a> {
    template: &'a ConstraintTemplate,
    verdict: &'a TemplateVerdict,
    observed: Option<&'a Policy>,
    /// What the desired VAP matches.
    coverage: Coverage,
    shape: PolicyShape,
    kind_served: bool,
    pub action: Action<Box<ValidatingAdmissionPolicy>>,
}

/// The VAP step of `template`. `kind_served`: its constraint CRD is Established (a plan assumes
/// so, as it writes the CRD first). CRD → Established → VAP: a policy whose `paramKind` is not
/// served yet denies everything under `failurePolicy: Fail`, so until then it waits.
/// `coverage`: what the kind's constraints match (`desired::policy_coverage`).
pub fn policy_step<'a>(
    template: &'a ConstraintTemplate,
    verdict: &'a TemplateVerdict,
    kind_served: bool,
    observed: Option<&'a Policy>,
    coverage: &Coverage,
    opts: &Options,
) -> PolicyStep<'a> {
    let owner = OwnerId::template(template.name(), &template.meta.uid);
    let coverage = &effective_coverage(coverage, observed, opts.policy_shape);
    let action = match verdict {
        // One VAP per constraint, which the constraint side writes: the template's own goes,
        // once no binding points at it any more. Another controller's VAP of that name is not
        // in the way of anything here: not ours, and no finding.
        TemplateVerdict::Generate { .. } if opts.policy_shape == PolicyShape::Inline => {
            match observed.map(|o| control(&o.meta, &owner)) {
                None | Some(Control::Other(_)) => Action::Nothing,
                Some(_) => Action::Delete(
                    "the template's constraints have a VAP each (the inline shape)".into(),
                ),
            }
        }
        TemplateVerdict::Generate {
            source,
            failure_policy,
            ..
        } if kind_served => {
            let kind = template.kind.as_deref().unwrap_or_default();
            let matching = match opts.policy_shape {
                shape @ (PolicyShape::Gatekeeper | PolicyShape::GatekeeperUnsynced) => {
                    PolicyMatch::Gatekeeper {
                        synced: shape == PolicyShape::Gatekeeper,
                        webhook: opts.gatekeeper_webhook.as_ref(),
                        exemptions: &opts.exemptions,
                    }
                }
                PolicyShape::Narrowed | PolicyShape::Inline | PolicyShape::Auto => {
                    PolicyMatch::Narrowed {
                        coverage,
                        exemptions: &opts.exemptions,
                    }
                }
            };
            match generate::policy(
                template,
                kind,
                source,
                *failure_policy,
                matching,
                opts.emit_admission_audit_annotations,
            )
            .and_then(|desired| generate::fits_in_one_object(&desired).map(|()| desired))
            {
                Ok(desired) => Action::against(Box::new(desired), observed, |d, o| {
                    compare_policy(d, o, &owner)
                }),
                Err(reason) => Action::Unbuildable(reason),
            }
        }
        TemplateVerdict::Generate { .. } => Action::Wait,
        // Not generating: ours goes (after its bindings, I2), unless the template is invalid:
        // then what exists is kept until it is fixed.
        _ => match observed.map(|o| control(&o.meta, &owner)) {
            None => Action::Nothing,
            Some(Control::Other(why)) => Action::Foreign(why),
            Some(_) if matches!(verdict, TemplateVerdict::Invalid { .. }) => Action::Keep,
            Some(_) => Action::Delete(format!("template does not generate ({})", verdict.reason())),
        },
    };
    let coverage = effective_coverage(coverage, observed, opts.policy_shape);
    PolicyStep {
        template,
        verdict,
        observed,
        coverage,
        shape: opts.policy_shape,
        kind_served,
        action,
    }
}

/// What the VAP is to match. No constraint wants a binding (the last one went, or none is
/// readable): the VAP matches no request without bindings, so what it matches now is kept —
/// no write, and no widening while a leftover binding is being swept. A new VAP needs a rule:
/// everything.
fn effective_coverage(
    wanted: &Coverage,
    observed: Option<&Policy>,
    shape: PolicyShape,
) -> Coverage {
    match shape {
        PolicyShape::Gatekeeper | PolicyShape::GatekeeperUnsynced => Coverage::everything(),
        PolicyShape::Narrowed | PolicyShape::Inline | PolicyShape::Auto if !wanted.is_empty() => {
            wanted.clone()
        }
        PolicyShape::Narrowed | PolicyShape::Inline | PolicyShape::Auto => observed
            .map(observed_coverage)
            .filter(|c| !c.is_empty())
            .unwrap_or_else(Coverage::everything),
    }
}

fn observed_coverage(o: &Policy) -> Coverage {
    let m = o
        .object
        .spec
        .as_ref()
        .and_then(|s| s.match_constraints.as_ref());
    Coverage::from_match(m)
}

impl<'a> PolicyStep<'a> {
    pub fn name(&self) -> String {
        names::policy_name(self.template.name())
    }

    pub fn template(&self) -> &'a ConstraintTemplate {
        self.template
    }

    pub fn verdict(&self) -> &'a TemplateVerdict {
        self.verdict
    }

    pub fn observed(&self) -> Option<&'a Policy> {
        self.observed
    }

    /// I1: whether bindings may rest on the VAP once this step's write (if any) is done. In the
    /// inline shape each binding rests on its constraint's own VAP: ready whenever the
    /// template generates and its kind is served.
    pub fn ready_once_written(&self) -> bool {
        match &self.action {
            Action::Create(_) | Action::InSync | Action::Update { .. } => true,
            _ if self.shape == PolicyShape::Inline => self.kind_served && self.verdict.generates(),
            _ => false,
        }
    }

    /// The shape of the kind's objects.
    pub fn shape(&self) -> PolicyShape {
        self.shape
    }

    /// What the VAP matches once this step's write is done (`written`), else as observed:
    /// what the opinion publishes, so no binding matches more than its VAP (I1).
    pub fn coverage(&self, written: bool) -> Coverage {
        match &self.action {
            Action::InSync => self.coverage.clone(),
            Action::Create(_) | Action::Update { .. } if written => self.coverage.clone(),
            _ => self.observed.map(observed_coverage).unwrap_or_default(),
        }
    }

    /// The write this step needs, if any.
    pub fn write(&self, diff: Diff) -> Option<PlannedWrite> {
        let because = "the template generates a VAP";
        write(&self.action, self.observed, because, differs, diff)
    }

    /// The VAP's state and reason in the tree.
    pub fn state(&self) -> (State, String) {
        if let Some(state) = self.action.common_state() {
            return state;
        }
        match &self.action {
            Action::Wait => (
                State::Waiting,
                "its constraint CRD is not Established".into(),
            ),
            Action::Keep => (State::Error, "kept while the template is invalid".into()),
            // An invalid template wants one, perhaps: none is written until it is fixed.
            Action::Nothing if matches!(self.verdict, TemplateVerdict::Invalid { .. }) => (
                State::NotBound,
                "none written while the template is invalid".into(),
            ),
            Action::Nothing if self.shape == PolicyShape::Inline && self.verdict.generates() => (
                State::NotBound,
                "one VAP per constraint (the inline shape)".into(),
            ),
            Action::Unbuildable(reason) => (State::Error, reason.clone()),
            // Nothing wanted (the common actions returned above).
            _ => (State::NotBound, "no VAP wanted".into()),
        }
    }

    /// The finding about the VAP, if there is one. A foreign VAP is one only while the
    /// template wants its name.
    pub fn finding(&self) -> Option<Finding> {
        let (t, pname) = (self.template.name(), self.name());
        let (code, message) = match &self.action {
            Action::Create(_) => (
                Code::PolicyMissing,
                format!(
                    "template {t} generates a VAP but {pname} does not exist; run `kubectl vap reconcile {t}`"
                ),
            ),
            Action::Update { fields, .. } => (
                Code::PolicyOutOfSync,
                format!(
                    "{pname} differs from template {t} in {}; reconcile to rewrite it",
                    fields.join(", ")
                ),
            ),
            Action::Foreign(why) if self.verdict.generates() => (
                Code::PolicyForeign,
                format!(
                    "{pname} has the name template {t} needs, but {why}; it is left alone: rename or delete it"
                ),
            ),
            Action::Unbuildable(reason) => (
                Code::TemplateError,
                format!("{pname} for template {t} cannot be built: {reason}"),
            ),
            Action::Delete(reason) if self.verdict.generates() => (
                Code::PolicyDangling,
                format!(
                    "{pname} exists but {reason}; reconcile deletes it once no binding points at it"
                ),
            ),
            Action::Delete(_) => (
                Code::PolicyDangling,
                format!(
                    "{pname} exists but template {t} does not generate a VAP ({}); reconcile deletes it",
                    self.verdict.reason()
                ),
            ),
            _ => return None,
        };
        let f =
            Finding::new(code, policy_ref(&pname), message).related(template_ref(self.template));
        Some(match self.observed {
            Some(o) => f.at(&o.source),
            None => f,
        })
    }

    /// The type checker's warnings on the template's VAP (`policy-type-warning`).
    pub fn type_findings(&self) -> Vec<Finding> {
        let whose = format!("template {}", self.template.name());
        super::type_findings(
            &self.action,
            self.observed,
            &whose,
            template_ref(self.template),
        )
    }

    /// The template's own state and reason in the tree.
    pub fn template_state(&self) -> (State, String) {
        let state = match self.verdict {
            TemplateVerdict::Generate { .. } => State::Generate,
            TemplateVerdict::Skip { .. } => State::NoVap,
            TemplateVerdict::Invalid { .. } => State::Error,
        };
        (state, self.verdict.reason().to_string())
    }

    /// The template's own finding: an invalid template freezes its kind.
    pub fn template_finding(&self) -> Option<Finding> {
        let TemplateVerdict::Invalid { reason } = self.verdict else {
            return None;
        };
        let f = Finding::new(
            Code::TemplateError,
            template_ref(self.template),
            format!("{reason}; fix the template (its VAP and bindings are left as they are)"),
        );
        Some(f.at(&self.template.source))
    }
}

/// A VAP of ours whose controller is gone: a template's (its kind's bindings go first, I2), or
/// a constraint's inline VAP (after its binding).
#[derive(Debug, Clone)]
pub struct PolicySweep<'a> {
    pub(super) observed: &'a Policy,
    pub reason: String,
}

/// The VAP named for `template`, which is not there (deleted, or not in the snapshot): ours
/// (the template is its controller) goes.
pub fn sweep_policy<'a>(template: &str, observed: &'a Policy) -> Option<PolicySweep<'a>> {
    let owner = OwnerId::template(template, "");
    let ours = observed.name() == names::policy_name(template)
        && !matches!(control(&observed.meta, &owner), Control::Other(_));
    ours.then(|| PolicySweep {
        observed,
        reason: format!("template {template} is gone"),
    })
}

impl PolicySweep<'_> {
    /// The kind whose bindings must be gone first: the VAP's `paramKind`.
    pub fn param_kind(&self) -> Option<&str> {
        let spec = self.observed.object.spec.as_ref()?;
        spec.param_kind.as_ref()?.kind.as_deref()
    }

    pub fn write(&self, diff: Diff) -> PlannedWrite {
        PlannedWrite::delete(self.observed, Code::PolicyDangling, &self.reason, diff)
    }

    pub fn finding(&self) -> Finding {
        let name = self.observed.name();
        Finding::new(
            Code::PolicyDangling,
            policy_ref(name),
            format!("{name}: {}; reconcile deletes it", self.reason),
        )
        .at(&self.observed.source)
    }
}
