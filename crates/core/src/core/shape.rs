//! `--policy-shape auto` resolved for one template. Inline (a VAP per constraint, its
//! parameters written in) has nothing the API server must sync before it judges a request, so
//! it is chosen wherever it serves every constraint of the template; where it cannot, the
//! template keeps one VAP with its constraints as params (narrowed), which serves them all.
//! A template is never left unenforced for want of a shape (docs/generation.md, "The default").

use super::decide::{ConstraintIntent, TemplateVerdict, decide_constraint};
use super::desired;
use super::generate::{self, PolicyBody};
use super::options::{INLINE_AT_MOST, Options, PolicyShape};
use super::scope::Coverage;
use crate::model::{Constraint, ConstraintTemplate};
use crate::snapshot::Snapshot;

/// The shape a template's objects get, and why `auto` did not make them inline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub shape: PolicyShape,
    /// Set when `auto` chose the narrowed shape: what keeps the template from the inline one.
    pub narrowed_because: Option<String>,
}

impl Resolved {
    fn as_asked(shape: PolicyShape) -> Self {
        Resolved {
            shape,
            narrowed_because: None,
        }
    }

    fn narrowed(because: String) -> Self {
        Resolved {
            shape: PolicyShape::Narrowed,
            narrowed_because: Some(because),
        }
    }
}

/// The shape of `template`'s objects, given its `verdict` and the `constraints` of its kind.
/// Any shape but `auto` is taken as it is. Under `auto`, inline unless one of these holds:
/// - more than [`INLINE_AT_MOST`] constraints (each inline VAP is a compiled policy of its
///   own in the API server: docs/benchmarks.md);
/// - the template's CEL reads `params` itself, which only a VAP with a `paramKind` has;
/// - a constraint that wants a binding cannot be written into a VAP of its own (parameters
///   too long, too deep, or a VAP too large to store).
pub fn resolve(
    opts: &Options,
    template: &ConstraintTemplate,
    verdict: &TemplateVerdict,
    constraints: &[&Constraint],
) -> Resolved {
    if opts.policy_shape != PolicyShape::Auto {
        return Resolved::as_asked(opts.policy_shape);
    }
    let TemplateVerdict::Generate {
        source,
        failure_policy,
        ..
    } = verdict
    else {
        // Nothing is generated: the shape only names what goes.
        return Resolved::as_asked(PolicyShape::Auto.for_template(constraints.len()));
    };
    if constraints.len() > INLINE_AT_MOST {
        return Resolved::narrowed(format!(
            "it has {} constraints, more than the {INLINE_AT_MOST} that get a VAP each",
            constraints.len()
        ));
    }
    if let Some(field) = opts.cel.reads_params(source) {
        return Resolved::narrowed(format!(
            "its {field} reads `params`, which only a VAP with a paramKind has"
        ));
    }
    let body = PolicyBody {
        source: source.clone(),
        failure_policy: *failure_policy,
        operations: generate::operations(template),
    };
    let inline_opts = opts.with_shape(PolicyShape::Inline);
    for c in constraints {
        let wants_binding = matches!(
            decide_constraint(c, &inline_opts),
            ConstraintIntent::Bind { .. }
        );
        if !wants_binding || c.spec_error.is_some() {
            continue;
        }
        if let Err(why) = desired::inline_policy(c, &body, &Coverage::default(), &inline_opts) {
            return Resolved::narrowed(why);
        }
    }
    Resolved::as_asked(PolicyShape::Inline)
}

/// The shape of the objects of constraint kind `kind` in `snap`: its template's, resolved as
/// [`resolve`] does; a kind without a template resolves by its count alone.
pub fn of_kind(snap: &Snapshot, opts: &Options, kind: &str) -> PolicyShape {
    let constraints: Vec<&Constraint> =
        snap.constraints.iter().filter(|c| c.kind == kind).collect();
    let template = snap
        .templates
        .iter()
        .find(|t| t.kind.as_deref() == Some(kind));
    match template {
        Some(t) => {
            resolve(
                opts,
                t,
                &super::decide::decide_template(t, opts),
                &constraints,
            )
            .shape
        }
        None => opts.policy_shape.for_template(constraints.len()),
    }
}

/// The field of the first expression of `t`'s CEL source that reads `params` itself (which
/// only a VAP with a `paramKind` has); `None` when none does, or it has no readable source.
pub fn template_reads_params(t: &ConstraintTemplate, opts: &Options) -> Option<String> {
    let source: crate::model::NativeSource =
        serde_json::from_value(t.native_code()?.clone()).ok()?;
    opts.cel.reads_params(&source)
}
