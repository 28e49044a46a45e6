//! The folded shape (designed in docs/generation.md, "Closing the window above 10
//! constraints"): **one VAP per template and set of enforcement actions, with one binding and
//! no `paramKind`**, holding every constraint's validations with its parameters and its match
//! written in. No param informer (so no restart window, as inline), and one activation per
//! request for all of a template's constraints (where inline and narrowed build one per
//! constraint).
//!
//! What the inline shape puts on each constraint's own binding (its kinds as rules, its
//! namespaces and label selectors) cannot be on a binding shared by every constraint, so it
//! moves into the CEL: each template validation becomes, per constraint `i`,
//! `!(<match of i>) || (<validation reading i's variables>)`. A VAP's variables are shared
//! by its validations, so the template's variables are declared once per constraint
//! (`c<i>_<name>`, `c<i>_params`), and the template's CEL is rewritten to read them on its
//! parsed form ([`CelChecker::rename_variables`]). Each message names its constraint
//! (`[<name>] …`): the API server names only the VAP and the binding.
//!
//! Pure: built here, written by nobody yet (the reconciler's wiring is not built).

use super::cel;
use super::cel_literal::{self, LiteralError};
use super::cel_syntax::CelChecker;
use super::decide::Action;
use super::generate::{self, PolicyBody, TemplateParts};
use super::names;
use super::options::Exemptions;
use super::scope::{self, Coverage};
use crate::model::{Constraint, ConstraintTemplate, TEMPLATE_OWNER_API_VERSION};
use k8s_openapi::api::admissionregistration::v1 as ar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use std::collections::BTreeMap;

/// What one folded VAP is built from: the template (its name and uid make the name and the
/// controller), the part of a VAP the template gives, and the constraints that share one set
/// of enforcement actions, with what they match together and the exemptions.
pub struct FoldInput<'a> {
    pub template: &'a ConstraintTemplate,
    pub body: &'a PolicyBody,
    /// The binding's `validationActions` every one of `constraints` asks for.
    pub actions: &'a [Action],
    pub constraints: &'a [&'a Constraint],
    /// The union of what the constraints' inline bindings would match (`scope::coverage_of`).
    pub coverage: &'a Coverage,
    pub exemptions: &'a Exemptions,
}

/// Why no folded VAP can be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FoldError {
    #[error("there is no constraint to fold")]
    NoConstraints,
    /// The template's own CEL cannot be folded (whatever its constraints).
    #[error("the template's {field} cannot be folded: {reason}")]
    Template { field: String, reason: String },
    /// One constraint cannot be folded; the others could.
    #[error("constraint {constraint} cannot be folded: {reason}")]
    Constraint { constraint: String, reason: String },
    /// The VAP as a whole is over what one object may hold.
    #[error("{0}")]
    TooLarge(String),
}

/// The folded VAP's name: `gatekeeper-<template>.folded-<actions>` (`deny`, `warn`, `audit`,
/// `deny-audit`, `warn-audit`), shortened like a binding's name. Its binding has the same name.
pub fn folded_name(template: &str, actions: &[Action]) -> String {
    names::folded_policy_name(template, &actions_label(actions))
}

fn actions_label(actions: &[Action]) -> String {
    let mut sorted = actions.to_vec();
    sorted.sort();
    sorted.dedup();
    let words: Vec<String> = sorted.iter().map(|a| a.as_str().to_lowercase()).collect();
    words.join("-")
}

/// The folded VAP of `input`'s constraints (in name order). `Err` names the constraint that
/// cannot be folded, or the template expression, or says how large the VAP would be.
pub fn folded_policy(
    input: &FoldInput<'_>,
    cel: &CelChecker,
) -> Result<ar::ValidatingAdmissionPolicy, FoldError> {
    if input.constraints.is_empty() {
        return Err(FoldError::NoConstraints);
    }
    let source = &input.body.source;
    // No paramKind: a template that reads `params` itself has nothing to read.
    if let Some(field) = cel.reads_params(source) {
        return Err(FoldError::Template {
            field,
            reason: "it reads `params`, which only a VAP with a paramKind has (write `variables.params.<name>`)".into(),
        });
    }
    let template = TemplateParts::of(source, String::new());
    let mut constraints: Vec<&Constraint> = input.constraints.to_vec();
    constraints.sort_by(|a, b| a.name().cmp(b.name()));

    let mut variables = vec![ar::Variable {
        name: "anyObject".into(),
        expression: cel::ANY_OBJECT.into(),
    }];
    let mut validations = Vec::new();
    for (i, c) in constraints.iter().enumerate() {
        let folded = fold_constraint(i, c, source, &template.validations, cel)?;
        variables.extend(folded.variables);
        validations.extend(folded.validations);
    }

    let mut match_conditions = template.match_conditions;
    match_conditions.extend(generate::exemption_conditions(input.exemptions));
    let whole = Coverage::everything();
    let coverage = if input.coverage.is_empty() {
        &whole
    } else {
        input.coverage
    };
    let policy = ar::ValidatingAdmissionPolicy {
        metadata: owned_by_template(
            folded_name(input.template.name(), input.actions),
            input.template,
        ),
        spec: Some(ar::ValidatingAdmissionPolicySpec {
            param_kind: None,
            match_constraints: Some(ar::MatchResources {
                resource_rules: Some(coverage.rules(&input.body.operations, "*")),
                match_policy: Some("Equivalent".into()),
                namespace_selector: Some(LabelSelector::default()),
                object_selector: Some(LabelSelector::default()),
                exclude_resource_rules: None,
            }),
            match_conditions: Some(match_conditions),
            validations: Some(validations),
            failure_policy: Some(input.body.failure_policy.as_str().into()),
            variables: Some(variables),
            audit_annotations: None,
        }),
        status: None,
    };
    generate::fits_in_one_object(&policy).map_err(FoldError::TooLarge)?;
    Ok(policy)
}

/// The one binding of a folded VAP: the template's (its controller), the actions', matching
/// what the constraints match together and leaving out the exempt namespaces (as an inline
/// binding does); each constraint's own match is in the VAP's CEL.
pub fn folded_binding(input: &FoldInput<'_>) -> ar::ValidatingAdmissionPolicyBinding {
    let name = folded_name(input.template.name(), input.actions);
    let whole = Coverage::everything();
    let coverage = if input.coverage.is_empty() {
        &whole
    } else {
        input.coverage
    };
    let mut actions = input.actions.to_vec();
    actions.sort();
    actions.dedup();
    ar::ValidatingAdmissionPolicyBinding {
        metadata: owned_by_template(name.clone(), input.template),
        spec: Some(ar::ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(name),
            param_ref: None,
            validation_actions: Some(actions.iter().map(|a| a.as_str().to_string()).collect()),
            match_resources: Some(ar::MatchResources {
                object_selector: Some(LabelSelector::default()),
                namespace_selector: Some(scope::exempt(LabelSelector::default(), input.exemptions)),
                match_policy: Some("Equivalent".into()),
                resource_rules: Some(coverage.rules(&["*".to_string()], "*")),
                exclude_resource_rules: None,
            }),
        }),
    }
}

fn owned_by_template(name: String, t: &ConstraintTemplate) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        labels: generate::labels(),
        owner_references: Some(vec![generate::controller_ref(
            TEMPLATE_OWNER_API_VERSION,
            "ConstraintTemplate",
            t.name(),
            &t.meta.uid,
        )]),
        ..Default::default()
    }
}

/// One constraint's part of the folded VAP.
struct FoldedConstraint {
    variables: Vec<ar::Variable>,
    validations: Vec<ar::Validation>,
}

/// Constraint `c`, the `i`th: its variables (`c<i>_params`, then each of the template's as
/// `c<i>_<name>`) and, per template validation, the validation guarded by its match.
fn fold_constraint(
    i: usize,
    c: &Constraint,
    source: &crate::model::NativeSource,
    template_validations: &[ar::Validation],
    cel: &CelChecker,
) -> Result<FoldedConstraint, FoldError> {
    let name = c.name();
    let refused = |reason: String| FoldError::Constraint {
        constraint: name.to_string(),
        reason,
    };
    if let Some(e) = &c.spec_error {
        return Err(refused(e.clone()));
    }
    let prefix = format!("c{i}_");
    let renames: BTreeMap<String, String> = std::iter::once("params")
        .chain(source.variables.iter().map(|v| v.name.as_str()))
        .map(|n| (n.to_string(), format!("{prefix}{n}")))
        .collect();
    let rename = |field: String, e: &str| {
        cel.rename_variables(e, &renames)
            .map_err(|reason| FoldError::Template { field, reason })
    };

    let mut variables = vec![ar::Variable {
        name: format!("{prefix}params"),
        expression: params_literal(c).map_err(|e| refused(format!("its spec.parameters: {e}")))?,
    }];
    for v in &source.variables {
        variables.push(ar::Variable {
            name: format!("{prefix}{}", v.name),
            expression: rename(format!("variable {:?}", v.name), &v.expression)?,
        });
    }

    let guard = match_guard(c).map_err(&refused)?;
    let mut validations = Vec::new();
    for (j, v) in template_validations.iter().enumerate() {
        let expression = rename(format!("validations[{j}].expression"), &v.expression)?;
        let expression = match &guard {
            // `\n` before `)`: the template's expression may end in a `//` comment.
            Some(m) => format!("!({m}) || (\n{expression}\n)"),
            None => expression,
        };
        let message_expression = match &v.message_expression {
            Some(e) => {
                let e = rename(format!("validations[{j}].messageExpression"), e)?;
                Some(format!(
                    "{} + (\n{e}\n)",
                    cel_literal::string(&format!("[{name}] "))
                ))
            }
            None => None,
        };
        // The API server's own message when none is given, with the constraint's name.
        let message = match &v.message {
            Some(m) => format!("[{name}] {m}"),
            None => format!("[{name}] failed expression: {}", v.expression.trim()),
        };
        let within = |e: String| {
            cel_literal::within_limit(e).map_err(|e| refused(format!("validation {j}: {e}")))
        };
        validations.push(ar::Validation {
            expression: within(expression)?,
            message: Some(message),
            message_expression: message_expression.map(within).transpose()?,
            reason: v.reason.clone(),
        });
    }
    Ok(FoldedConstraint {
        variables,
        validations,
    })
}

/// `variables.params` as the inline shape writes it: the constraint's `spec.parameters` as a
/// literal inside `dyn()` (`generate::inline_policy` says why), `dyn(null)` without.
fn params_literal(c: &Constraint) -> Result<String, LiteralError> {
    let literal = match c.raw.get("spec").and_then(|s| s.get("parameters")) {
        None => "null".to_string(),
        Some(v) => cel_literal::literal(v)?,
    };
    cel_literal::within_limit(format!("dyn({literal})"))
}

/// Everything constraint `c` matches, as one CEL condition (`None`: every request the VAP
/// sees): the inline matchers (kinds, namespaces, excluded namespaces, name), and what its
/// inline binding would match — its scope, its label selector on the object or old object,
/// its namespace selector on the namespace (a Namespace by its own labels).
fn match_guard(c: &Constraint) -> Result<Option<String>, String> {
    let mut terms: Vec<String> = Vec::new();
    for (_, e) in cel::inline_matchers(&c.matcher) {
        terms.push(cel_literal::within_limit(e).map_err(|e| format!("its spec.match: {e}"))?);
    }
    match c.matcher.scope.as_deref() {
        Some("Namespaced") => terms.push(format!("!({CLUSTER_SCOPED})")),
        Some("Cluster") => terms.push(CLUSTER_SCOPED.to_string()),
        _ => {}
    }
    let object = generate::selector(&c.matcher.label_selector)
        .map_err(|e| format!("spec.match.labelSelector: {e}"))?;
    if let Some(e) =
        object_selector_cel(&object).map_err(|e| format!("spec.match.labelSelector: {e}"))?
    {
        terms.push(e);
    }
    let namespace = generate::selector(&c.matcher.namespace_selector)
        .map_err(|e| format!("spec.match.namespaceSelector: {e}"))?;
    if let Some(e) = namespace_selector_cel(&namespace)
        .map_err(|e| format!("spec.match.namespaceSelector: {e}"))?
    {
        terms.push(e);
    }
    if terms.is_empty() {
        return Ok(None);
    }
    let all: Vec<String> = terms.iter().map(|t| format!("({t})")).collect();
    cel_literal::within_limit(all.join(" && "))
        .map(Some)
        .map_err(|e| format!("its spec.match: {e}"))
}

/// A request about a cluster-scoped object, as a rule's `scope` judges it: no namespace, or
/// a Namespace itself (its requests carry its own name as their namespace).
const CLUSTER_SCOPED: &str = r#"!has(request.namespace) || request.namespace == "" || (request.resource.group == "" && request.resource.resource == "namespaces")"#;

/// The labels of the object `x` names (`object`, `oldObject`, `namespaceObject`), `{}` when it
/// has none.
fn labels_of(x: &str) -> String {
    format!("(has({x}.metadata) && has({x}.metadata.labels) ? {x}.metadata.labels : {{}})")
}

/// A binding's `objectSelector` as the API server applies it: it matches when the object or
/// the old object has matching labels (a missing one never matches). `None`: empty.
pub fn object_selector_cel(sel: &LabelSelector) -> Result<Option<String>, String> {
    let Some(test) = label_selector_cel(sel, "l")? else {
        return Ok(None);
    };
    let one = |x: &str| format!("({x} != null && [{}].all(l, {test}))", labels_of(x));
    Ok(Some(format!("{} || {}", one("object"), one("oldObject"))))
}

/// A binding's `namespaceSelector` as the API server applies it: on the labels of the
/// request's namespace; a Namespace by its own labels (as it is written by a create or an
/// update); any other cluster-scoped object always matches. `None`: empty.
pub fn namespace_selector_cel(sel: &LabelSelector) -> Result<Option<String>, String> {
    let Some(test) = label_selector_cel(sel, "l")? else {
        return Ok(None);
    };
    let namespace_itself =
        r#"request.resource.group == "" && request.resource.resource == "namespaces""#;
    let has_namespace = r#"has(request.namespace) && request.namespace != """#;
    Ok(Some(format!(
        "({namespace_itself}) ? [{own}].all(l, {test}) : (({has_namespace}) && namespaceObject != null ? [{ns}].all(l, {test}) : true)",
        own = labels_of("(object != null ? object : oldObject)"),
        ns = labels_of("namespaceObject"),
    )))
}

/// A label selector as a CEL condition on the map `labels` (a CEL expression of
/// `map(string, string)`): every `matchLabels` entry and every `matchExpressions` requirement
/// (`In`, `NotIn`, `Exists`, `DoesNotExist`) must hold, as Kubernetes' selector says
/// (`matching::selector_matches`, which the tests hold it to). `None`: the empty selector,
/// which matches everything. `Err`: an operator Kubernetes does not know.
pub fn label_selector_cel(sel: &LabelSelector, labels: &str) -> Result<Option<String>, String> {
    let mut terms = Vec::new();
    for (k, v) in sel.match_labels.iter().flatten() {
        let k = cel_literal::string(k);
        terms.push(format!(
            "({k} in {labels} && {labels}[{k}] == {})",
            cel_literal::string(v)
        ));
    }
    for e in sel.match_expressions.iter().flatten() {
        let k = cel_literal::string(&e.key);
        let values = cel_literal::string_list(e.values.iter().flatten());
        terms.push(match e.operator.as_str() {
            "In" => format!("({k} in {labels} && {labels}[{k}] in {values})"),
            "NotIn" => format!("(!({k} in {labels}) || !({labels}[{k}] in {values}))"),
            "Exists" => format!("({k} in {labels})"),
            "DoesNotExist" => format!("!({k} in {labels})"),
            op => return Err(format!("unknown selector operator {op:?}")),
        });
    }
    Ok((!terms.is_empty()).then(|| terms.join(" && ")))
}
