//! A template's CEL as the API server compiles it, before anything of the template is written.
//!
//! Under `--policy-shape auto` (and `inline`) a template without constraints gets no VAP, so an
//! expression the server's compiler refuses would go unseen until the first constraint, and then
//! be said on that constraint's VAP. The VAP the narrowed shape would write for the template,
//! sent as a server-side dry-run, lets the template's author hear it on the template, now. The
//! IO (the dry-run) is the edge's; this module says what to send and how to tell a refusal.

use crate::core::decide::decide_template;
use crate::core::findings::{Code, Finding};
use crate::core::names;
use crate::core::options::{Options, PolicyShape};
use crate::core::plan::{Diff, PlannedWrite, Verb};
use crate::core::scope::Coverage;
use crate::core::step::{policy_step, template_ref};
use crate::model::{ConstraintTemplate, ObjectRef, VAP_KIND};
use crate::snapshot::Snapshot;

/// One template's VAP to compile: `write` is the narrowed VAP's create, never to be sent but as
/// a dry-run.
#[derive(Debug, Clone)]
pub struct Probe {
    pub template: ObjectRef,
    pub write: PlannedWrite,
}

/// The templates that generate but have nothing of their own on the server or in `plan` for
/// the server to compile: no VAP of the template or of any of its constraints exists, and none
/// is planned. Those that have one are compiled by its write (or were, when it was written).
pub fn template_probes(snap: &Snapshot, opts: &Options, plan: &[PlannedWrite]) -> Vec<Probe> {
    let mut probes = Vec::new();
    for t in &snap.templates {
        let own = names::policy_name(t.name());
        let of_template = |name: &str| {
            name == own
                || name
                    .strip_prefix(own.as_str())
                    .is_some_and(|rest| rest.starts_with('.'))
        };
        let existing = snap.policies.iter().any(|p| of_template(&p.meta.name));
        let planned = plan
            .iter()
            .any(|w| w.object.kind == VAP_KIND && of_template(&w.object.name));
        if existing || planned {
            continue;
        }
        if let Some(write) = probe_of(t, opts) {
            probes.push(Probe {
                template: template_ref(t),
                write,
            });
        }
    }
    probes
}

/// The create of the VAP the narrowed shape would write for `t`, matching everything (no
/// constraint narrows it): what the server's compiler is asked about. `None` when `t`
/// generates no VAP.
pub fn probe_of(t: &ConstraintTemplate, opts: &Options) -> Option<PlannedWrite> {
    let narrowed = opts.with_shape(PolicyShape::Narrowed);
    let verdict = decide_template(t, &narrowed);
    if !verdict.generates() || t.kind.is_none() {
        return None;
    }
    let step = policy_step(t, &verdict, true, None, &Coverage::default(), &narrowed);
    step.write(Diff::Skip).filter(|w| w.verb == Verb::Create)
}

/// What a template's author hears when the server refuses its probe: a `template-error` on the
/// template, with the server's message (its caret diagram as the server wrote it, in lines).
pub fn refused(probe: &Probe, message: &str) -> Finding {
    Finding::new(
        Code::TemplateError,
        probe.template.clone(),
        format!(
            "the API server refuses the VAP template {} generates (a server-side dry-run, before any constraint needs it): {message}; fix the template",
            probe.template.name
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::options::testing::options as default_options;
    use serde_json::json;

    fn template(name: &str, kind: &str) -> ConstraintTemplate {
        let t = json!({
            "apiVersion": "templates.gatekeeper.sh/v1",
            "kind": "ConstraintTemplate",
            "metadata": { "name": name, "uid": format!("{name}-uid") },
            "spec": {
                "crd": { "spec": { "names": { "kind": kind } } },
                "targets": [{ "target": "admission.k8s.gatekeeper.sh", "code": [{
                    "engine": "K8sNativeValidation",
                    "source": { "generateVAP": true, "validations": [
                        { "expression": "true", "message": "never" }] } }] }]
            }
        });
        ConstraintTemplate::from_value(t, Default::default())
    }

    #[test]
    fn a_template_with_nothing_written_is_probed_and_one_with_a_vap_is_not() {
        let mut snap = Snapshot {
            templates: vec![template("k8sa", "K8sA"), template("k8sb", "K8sB")],
            ..Snapshot::default()
        };
        let probes = template_probes(&snap, &default_options(), &[]);
        let names: Vec<_> = probes.iter().map(|p| p.template.name.as_str()).collect();
        assert_eq!(names, ["k8sa", "k8sb"]);
        assert_eq!(probes[0].write.object.name, "gatekeeper-k8sa");
        assert_eq!(probes[0].write.verb, Verb::Create);
        assert!(probes[0].write.body.is_some());

        // A planned VAP of the template, or an inline VAP of one of its constraints: no probe.
        let planned = PlannedWrite {
            object: ObjectRef::new(
                "admissionregistration.k8s.io/v1",
                VAP_KIND,
                "gatekeeper-k8sa.c1",
            ),
            ..probes[1].write.clone()
        };
        let probes = template_probes(&snap, &default_options(), &[planned]);
        let names: Vec<_> = probes.iter().map(|p| p.template.name.as_str()).collect();
        assert_eq!(names, ["k8sb"]);

        // A name that only starts like the template's (another template's VAP): still probed.
        snap.templates.push(template("k8sab", "K8sAb"));
        let other = PlannedWrite {
            object: ObjectRef::new(
                "admissionregistration.k8s.io/v1",
                VAP_KIND,
                "gatekeeper-k8sab",
            ),
            ..probes[0].write.clone()
        };
        let probes = template_probes(&snap, &default_options(), &[other]);
        let names: Vec<_> = probes.iter().map(|p| p.template.name.as_str()).collect();
        assert_eq!(names, ["k8sa", "k8sb"]);
    }

    #[test]
    fn a_refusal_is_a_template_error_on_the_template() {
        let snap = Snapshot {
            templates: vec![template("k8sa", "K8sA")],
            ..Snapshot::default()
        };
        let probe = &template_probes(&snap, &default_options(), &[])[0];
        let f = refused(probe, "spec.validations[0].expression: Invalid value");
        assert_eq!(f.code, Code::TemplateError);
        assert_eq!(f.object.kind, "ConstraintTemplate");
        assert_eq!(f.object.name, "k8sa");
        assert!(f.message.contains("Invalid value"), "{}", f.message);
    }
}
