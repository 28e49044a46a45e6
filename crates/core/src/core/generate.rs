//! Desired objects: template → VAP, constraint → binding. Pure: the same inputs give the same
//! bytes (sorted, de-duplicated), so steady state compares equal and sends no writes.

use super::cel;
use super::cel_literal::{self, LiteralError};
use super::decide::Action;
use super::gatekeeper_cel;
use super::names;
use super::options::{Exemptions, FailurePolicy, PolicyShape};
use super::scope::{self, Coverage};
use crate::model::served::Served;
use crate::model::{
    CONSTRAINT_API_VERSION, Constraint, ConstraintTemplate, GatekeeperWebhook, MANAGED_BY_LABEL,
    MANAGED_BY_VALUE, NativeSource, TEMPLATE_OWNER_API_VERSION,
};
use k8s_openapi::api::admissionregistration::v1 as ar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use std::collections::BTreeMap;

/// Operations a policy matches when the template does not restrict them.
const DEFAULT_OPERATIONS: [&str; 2] = ["CREATE", "UPDATE"];
const ALL_OPERATIONS: [&str; 4] = ["CREATE", "UPDATE", "DELETE", "CONNECT"];

pub(crate) fn labels() -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([(
        MANAGED_BY_LABEL.to_string(),
        MANAGED_BY_VALUE.to_string(),
    )]))
}

pub(crate) fn controller_ref(
    api_version: &str,
    kind: &str,
    name: &str,
    uid: &str,
) -> OwnerReference {
    OwnerReference {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
        uid: uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The operations of the template's target, `*` expanded, in canonical order.
pub fn operations(t: &ConstraintTemplate) -> Vec<String> {
    let wanted = t
        .targets
        .first()
        .map(|t| t.operations.as_slice())
        .unwrap_or_default();
    if wanted.is_empty() {
        return DEFAULT_OPERATIONS.iter().map(|s| s.to_string()).collect();
    }
    ALL_OPERATIONS
        .iter()
        .filter(|op| {
            wanted
                .iter()
                .any(|w| w == "*" || w.eq_ignore_ascii_case(op))
        })
        .map(|s| s.to_string())
        .collect()
}

/// What a VAP matches before its CEL runs (`core::scope`).
#[derive(Debug, Clone, Copy)]
pub enum PolicyMatch<'a> {
    /// Gatekeeper's: every create and update, or with `synced` (its default
    /// `--sync-vap-enforcement-scope=true`) what its validating `webhook` matches when that is
    /// known, and its global exclusions and exemptions as conditions.
    Gatekeeper {
        synced: bool,
        webhook: Option<&'a GatekeeperWebhook>,
        exemptions: &'a Exemptions,
    },
    /// The union of what the kind's constraints match, without the exempt namespaces.
    Narrowed {
        coverage: &'a Coverage,
        exemptions: &'a Exemptions,
    },
}

/// Gatekeeper's rules from its webhook's: each rule's operations (`*` expanded) intersected
/// with the template's, in canonical order; the template's `None` keeps the webhook's as they
/// are (`convertWebhookRulesToResourceRules`). No overlap at all: no VAP.
fn webhook_rules(
    t: &ConstraintTemplate,
    webhook: &GatekeeperWebhook,
) -> Result<Vec<ar::NamedRuleWithOperations>, String> {
    let template_ops = t
        .targets
        .first()
        .map(|t| t.operations.clone())
        .filter(|o| !o.is_empty());
    let expand = |ops: &[String]| -> Vec<String> {
        if ops.iter().any(|o| o == "*") {
            ALL_OPERATIONS.iter().map(|s| s.to_string()).collect()
        } else {
            ops.to_vec()
        }
    };
    let mut rules = Vec::new();
    for rule in &webhook.rules {
        let rule_ops = rule.operations.clone().unwrap_or_default();
        let operations = match &template_ops {
            None => rule_ops,
            Some(wanted) => {
                let (wanted, have) = (expand(wanted), expand(&rule_ops));
                let both: Vec<String> = ALL_OPERATIONS
                    .iter()
                    .filter(|op| wanted.iter().any(|w| w == *op) && have.iter().any(|h| h == *op))
                    .map(|s| s.to_string())
                    .collect();
                if both.is_empty() {
                    return Err(format!(
                        "none of the template's operations ({}) is among those of Gatekeeper's webhook {} ({}), so Gatekeeper generates no VAP",
                        wanted.join(", "),
                        webhook.configuration,
                        have.join(", ")
                    ));
                }
                both
            }
        };
        rules.push(ar::NamedRuleWithOperations {
            api_groups: rule.api_groups.clone(),
            api_versions: rule.api_versions.clone(),
            resources: rule.resources.clone(),
            operations: Some(operations),
            scope: rule.scope.clone(),
            resource_names: None,
        });
    }
    Ok(rules)
}

/// The VAP's `matchConstraints`, and the conditions that exempt namespaces no selector can
/// name (by prefix or suffix; in Gatekeeper's shapes, its own global conditions and its
/// webhook's match conditions).
fn policy_match(
    t: &ConstraintTemplate,
    m: PolicyMatch<'_>,
) -> Result<(ar::MatchResources, Vec<ar::MatchCondition>), String> {
    let ops = operations(t);
    Ok(match m {
        PolicyMatch::Gatekeeper {
            synced,
            webhook,
            exemptions,
        } => {
            let mut conditions = Vec::new();
            if synced {
                let excluded: Vec<String> = exemptions.config_excluded.iter().cloned().collect();
                conditions.extend(
                    gatekeeper_cel::global_excluded(&excluded)
                        .map(|e| (cel::GLOBAL_EXCLUDED_NAMESPACES, e)),
                );
                conditions.extend(
                    gatekeeper_cel::global_exempted(&exemptions.gatekeeper_exempted())
                        .map(|e| (cel::GLOBAL_EXEMPTED_NAMESPACES, e)),
                );
            }
            let mut conditions = self::conditions(conditions);
            let matched = match webhook.filter(|_| synced) {
                Some(w) => {
                    conditions.extend(w.match_conditions.iter().cloned());
                    ar::MatchResources {
                        resource_rules: Some(webhook_rules(t, w)?),
                        match_policy: Some(w.match_policy.clone().unwrap_or("Equivalent".into())),
                        namespace_selector: Some(w.namespace_selector.clone().unwrap_or_default()),
                        object_selector: Some(w.object_selector.clone().unwrap_or_default()),
                        exclude_resource_rules: None,
                    }
                }
                // Gatekeeper's default ignores the template's operations.
                None => ar::MatchResources {
                    resource_rules: Some(vec![ar::NamedRuleWithOperations {
                        api_groups: Some(vec!["*".into()]),
                        api_versions: Some(vec!["*".into()]),
                        resources: Some(vec!["*".into()]),
                        operations: Some(
                            DEFAULT_OPERATIONS.iter().map(|s| s.to_string()).collect(),
                        ),
                        scope: Some("*".into()),
                        resource_names: None,
                    }]),
                    match_policy: Some("Equivalent".into()),
                    namespace_selector: Some(LabelSelector::default()),
                    object_selector: Some(LabelSelector::default()),
                    exclude_resource_rules: None,
                },
            };
            (matched, conditions)
        }
        PolicyMatch::Narrowed {
            coverage,
            exemptions,
        } => {
            // A VAP needs a rule; with no constraint to bind it matches no request anyway
            // (the API server evaluates only policies that have bindings).
            let whole = Coverage::everything();
            let coverage = if coverage.is_empty() {
                &whole
            } else {
                coverage
            };
            let rules = coverage.rules(&ops, "*");
            let exempted = exemption_conditions(exemptions);
            (
                ar::MatchResources {
                    resource_rules: Some(rules),
                    match_policy: Some("Equivalent".into()),
                    namespace_selector: Some(scope::policy_namespace_selector(
                        exemptions, coverage,
                    )),
                    object_selector: Some(LabelSelector::default()),
                    exclude_resource_rules: None,
                },
                exempted,
            )
        }
    })
}

/// The conditions that exempt namespaces no selector can name: Gatekeeper's Config's globs,
/// then the flags' prefixes and suffixes (Gatekeeper's order).
pub(crate) fn exemption_conditions(exemptions: &Exemptions) -> Vec<ar::MatchCondition> {
    let excluded = cel::global_excluded(&exemptions.excluded_globs)
        .map(|e| (cel::GLOBAL_EXCLUDED_NAMESPACES, e));
    let exempted = cel::global_exempted(&exemptions.prefixes, &exemptions.suffixes)
        .map(|e| (cel::GLOBAL_EXEMPTED_NAMESPACES, e));
    excluded
        .into_iter()
        .chain(exempted)
        .map(|(name, expression)| ar::MatchCondition {
            name: name.into(),
            expression,
        })
        .collect()
}

fn conditions<'a>(named: impl IntoIterator<Item = (&'a str, String)>) -> Vec<ar::MatchCondition> {
    named
        .into_iter()
        .map(|(name, expression)| ar::MatchCondition {
            name: name.to_string(),
            expression,
        })
        .collect()
}

/// The template's own parts of a VAP: its match conditions, validations and variables, after
/// `anyObject` and `params` (`params_expression`).
pub(crate) struct TemplateParts {
    pub(crate) match_conditions: Vec<ar::MatchCondition>,
    pub(crate) validations: Vec<ar::Validation>,
    pub(crate) variables: Vec<ar::Variable>,
}

impl TemplateParts {
    pub(crate) fn of(source: &NativeSource, params_expression: String) -> Self {
        let mut variables = vec![
            ar::Variable {
                name: "anyObject".into(),
                expression: cel::ANY_OBJECT.into(),
            },
            ar::Variable {
                name: "params".into(),
                expression: params_expression,
            },
        ];
        variables.extend(source.variables.iter().map(|v| ar::Variable {
            name: v.name.clone(),
            expression: v.expression.clone(),
        }));
        TemplateParts {
            match_conditions: conditions(
                source
                    .match_conditions
                    .iter()
                    .map(|m| (m.name.as_str(), m.expression.clone())),
            ),
            validations: source
                .validations
                .iter()
                .map(|v| ar::Validation {
                    expression: v.expression.clone(),
                    message: v.message.clone().filter(|m| !m.is_empty()),
                    message_expression: v.message_expression.clone().filter(|m| !m.is_empty()),
                    reason: None,
                })
                .collect(),
            variables,
        }
    }
}

/// What a template gives the VAP of each of its constraints in the inline shape. The kind's
/// opinion carries it, so the constraint side writes that VAP without reading the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyBody {
    pub source: NativeSource,
    pub failure_policy: FailurePolicy,
    /// The template's operations (`operations`).
    pub operations: Vec<String>,
}

/// Why a constraint's VAP cannot be written in the inline shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InlineError {
    #[error("its spec.parameters cannot be written into the policy's CEL: {0}")]
    Parameters(LiteralError),
    #[error("its spec.match cannot be written into the policy's CEL: {0}")]
    Match(LiteralError),
}

/// The VAP of constraint `c` in the inline shape: the template's CEL unchanged,
/// `variables.params` the constraint's `spec.parameters` as a literal, its `spec.match` in
/// the matchers, no `paramKind` (so no binding needs a param, and nothing must be synced
/// before it judges a request). `coverage`: what its binding matches; the namespaces
/// (the constraint's and the exemptions) are on the binding, so the VAP's selectors stay
/// empty and an unrelated request costs the API server no selector per VAP.
pub fn inline_policy(
    c: &Constraint,
    body: &PolicyBody,
    coverage: &Coverage,
    exemptions: &Exemptions,
    emit_audit_annotations: bool,
) -> Result<ar::ValidatingAdmissionPolicy, InlineError> {
    // `dyn`: the template's CEL was written for `params.spec.parameters`, whose type the API
    // server's checker does not know; a literal's type it knows (`null`, `map(string, bool)`),
    // and it refuses `variables.params.x` on the one and a list macro on the other's `bool`.
    // At run time the value is what the narrowed shape's `variables.params` holds.
    let literal = match c.raw.get("spec").and_then(|s| s.get("parameters")) {
        None => "null".to_string(),
        Some(v) => cel_literal::literal(v).map_err(InlineError::Parameters)?,
    };
    let params =
        cel_literal::within_limit(format!("dyn({literal})")).map_err(InlineError::Parameters)?;
    let mut parts = TemplateParts::of(&body.source, params);
    let matchers = cel::inline_matchers(&c.matcher);
    for (_, e) in &matchers {
        cel_literal::within_limit(e.clone()).map_err(InlineError::Match)?;
    }
    parts.match_conditions.extend(conditions(matchers));
    parts
        .match_conditions
        .extend(exemption_conditions(exemptions));
    let whole = Coverage::everything();
    let coverage = if coverage.is_empty() {
        &whole
    } else {
        coverage
    };
    Ok(ar::ValidatingAdmissionPolicy {
        metadata: owned_by_constraint(names::inline_policy_name(&c.kind, c.name()), c),
        spec: Some(ar::ValidatingAdmissionPolicySpec {
            param_kind: None,
            match_constraints: Some(ar::MatchResources {
                resource_rules: Some(coverage.rules(&body.operations, "*")),
                match_policy: Some("Equivalent".into()),
                namespace_selector: Some(LabelSelector::default()),
                object_selector: Some(LabelSelector::default()),
                exclude_resource_rules: None,
            }),
            match_conditions: Some(parts.match_conditions),
            validations: Some(parts.validations),
            failure_policy: Some(body.failure_policy.as_str().into()),
            variables: Some(parts.variables),
            audit_annotations: audit_annotations(
                emit_audit_annotations,
                cel_literal::string(&format!("{}/{}", c.kind, c.name())),
            ),
        }),
        status: None,
    })
}

/// The most bytes of JSON a generated VAP may have. etcd refuses a request over its
/// `--max-request-bytes` (1.5 MiB by default) with `etcdserver: request is too large`, which
/// no retry can change; the stored object also carries managedFields and its status, so the
/// limit leaves a third of that for them.
pub const MAX_OBJECT_BYTES: usize = 1024 * 1024;

/// `Ok` if `policy` is within [`MAX_OBJECT_BYTES`]; else why not, to be said before a write
/// that could never succeed.
pub fn fits_in_one_object(policy: &ar::ValidatingAdmissionPolicy) -> Result<(), String> {
    let bytes = serde_json::to_vec(policy).map_or(usize::MAX, |json| json.len());
    if bytes > MAX_OBJECT_BYTES {
        return Err(format!(
            "the VAP would be {bytes} bytes of JSON, over the {MAX_OBJECT_BYTES} one object may hold (etcd refuses larger requests)"
        ));
    }
    Ok(())
}

/// The audit annotation `--emit-admission-audit-annotations` adds: which constraints evaluated
/// the request (the API server joins the values of every binding that did). `constraint`: the
/// CEL of `Kind/name`.
fn audit_annotations(emit: bool, constraint: String) -> Option<Vec<ar::AuditAnnotation>> {
    emit.then(|| {
        vec![ar::AuditAnnotation {
            key: AUDIT_ANNOTATION_KEY.into(),
            value_expression: constraint,
        }]
    })
}

/// The key of the audit annotation every VAP publishes under `--emit-admission-audit-annotations`
/// (`<VAP name>/constraint` in the audit event).
pub const AUDIT_ANNOTATION_KEY: &str = "constraint";

/// The constraint a paramKind VAP is evaluated for, as `Kind/name`; empty (no annotation: the
/// API server omits an empty value) when a binding has no param, so the expression never
/// fails. (Not `null`: both branches must have one type to compile.)
const PARAM_CONSTRAINT: &str = "params != null && has(params.metadata) ? string(params.kind) + '/' + string(params.metadata.name) : ''";

/// The VAP for a template whose verdict is Generate. `kind` is the template's constraint kind.
/// `Err`: Gatekeeper's shape cannot be built (its webhook shares no operation with the
/// template).
pub fn policy(
    t: &ConstraintTemplate,
    kind: &str,
    source: &NativeSource,
    failure_policy: FailurePolicy,
    matching: PolicyMatch<'_>,
    emit_audit_annotations: bool,
) -> Result<ar::ValidatingAdmissionPolicy, String> {
    let gatekeepers = matches!(matching, PolicyMatch::Gatekeeper { .. });
    let (match_constraints, exempted) = policy_match(t, matching)?;
    let (params, matchers) = if gatekeepers {
        (gatekeeper_cel::params(), gatekeeper_cel::matchers())
    } else {
        (cel::PARAMS, cel::matchers())
    };
    let mut parts = TemplateParts::of(source, params.into());
    parts.match_conditions.extend(conditions(matchers));
    parts.match_conditions.extend(exempted);
    Ok(ar::ValidatingAdmissionPolicy {
        metadata: ObjectMeta {
            name: Some(names::policy_name(t.name())),
            labels: labels(),
            owner_references: Some(vec![controller_ref(
                TEMPLATE_OWNER_API_VERSION,
                "ConstraintTemplate",
                t.name(),
                &t.meta.uid,
            )]),
            ..Default::default()
        },
        spec: Some(ar::ValidatingAdmissionPolicySpec {
            param_kind: Some(ar::ParamKind {
                api_version: Some(CONSTRAINT_API_VERSION.into()),
                kind: Some(kind.to_string()),
            }),
            match_constraints: Some(match_constraints),
            match_conditions: Some(parts.match_conditions),
            validations: Some(parts.validations),
            failure_policy: Some(failure_policy.as_str().into()),
            variables: Some(parts.variables),
            audit_annotations: audit_annotations(emit_audit_annotations, PARAM_CONSTRAINT.into()),
        }),
        status: None,
    })
}

pub(crate) fn selector(v: &Option<serde_json::Value>) -> Result<LabelSelector, String> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(LabelSelector::default()),
        Some(v) => {
            serde_json::from_value(v.clone()).map_err(|e| format!("not a label selector: {e}"))
        }
    }
}

/// The binding for a constraint whose kind's opinion is generate, and what it matches (the
/// VAP must match at least that before the binding is written: see `desired`).
pub fn binding(
    c: &Constraint,
    actions: &[Action],
    shape: PolicyShape,
    exemptions: &Exemptions,
    served: &Served,
) -> Result<(ar::ValidatingAdmissionPolicyBinding, Coverage), String> {
    let object_selector = selector(&c.matcher.label_selector)
        .map_err(|e| format!("spec.match.labelSelector: {e}"))?;
    let mut namespace_selector = selector(&c.matcher.namespace_selector)
        .map_err(|e| format!("spec.match.namespaceSelector: {e}"))?;
    // Gatekeeper ignores spec.match.scope; we honour it with a binding rule on the scope.
    let scope = c
        .matcher
        .scope
        .as_deref()
        .filter(|s| matches!(*s, "Cluster" | "Namespaced"))
        .unwrap_or("*");
    // The operations are the policy's (a request must match both): `*` here keeps the
    // constraint side from needing the template.
    let any_operation = ["*".to_string()];
    let (resource_rules, coverage) = match shape {
        PolicyShape::Gatekeeper | PolicyShape::GatekeeperUnsynced => {
            let rules = (scope != "*").then(|| Coverage::everything().rules(&any_operation, scope));
            // Gatekeeper's own rule for a scope matched no subresources.
            let rules = rules.map(|mut r| {
                r.iter_mut()
                    .for_each(|r| r.resources = Some(vec!["*".into()]));
                r
            });
            (rules, Coverage::everything())
        }
        // Auto is resolved per template before a binding is built (`core::shape::resolve`);
        // unresolved, it is narrowed.
        PolicyShape::Narrowed | PolicyShape::Auto => {
            let (coverage, _) = scope::coverage_of(&c.matcher, served);
            namespace_selector = scope::binding_namespace_selector(&c.matcher, namespace_selector);
            (Some(coverage.rules(&any_operation, scope)), coverage)
        }
        // The exemptions are here, not on the VAP: with no paramKind the VAP has no
        // configuration error a selector must keep away from them.
        PolicyShape::Inline => {
            let (coverage, _) = scope::coverage_of(&c.matcher, served);
            namespace_selector = scope::exempt(
                scope::binding_namespace_selector(&c.matcher, namespace_selector),
                exemptions,
            );
            (Some(coverage.rules(&any_operation, scope)), coverage)
        }
    };
    let (policy_name, param_ref) = match shape {
        PolicyShape::Inline => (names::inline_policy_name(&c.kind, c.name()), None),
        _ => (
            names::policy_name_for_kind(&c.kind),
            Some(ar::ParamRef {
                name: Some(c.name().to_string()),
                namespace: None,
                parameter_not_found_action: Some("Allow".into()),
                selector: None,
            }),
        ),
    };
    let mut actions: Vec<Action> = actions.to_vec();
    actions.sort();
    actions.dedup();
    let binding = ar::ValidatingAdmissionPolicyBinding {
        metadata: owned_by_constraint(names::binding_name(&c.kind, c.name()), c),
        spec: Some(ar::ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(policy_name),
            param_ref,
            validation_actions: Some(actions.iter().map(|a| a.as_str().to_string()).collect()),
            match_resources: Some(ar::MatchResources {
                object_selector: Some(object_selector),
                namespace_selector: Some(namespace_selector),
                match_policy: Some("Equivalent".into()),
                resource_rules,
                exclude_resource_rules: None,
            }),
        }),
    };
    Ok((binding, coverage))
}

/// The metadata of an object a constraint owns (its binding; its VAP in the inline shape):
/// `name`, our labels, the constraint as controller.
fn owned_by_constraint(name: String, c: &Constraint) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        labels: labels(),
        owner_references: Some(vec![controller_ref(
            CONSTRAINT_API_VERSION,
            &c.kind,
            c.name(),
            &c.meta.uid,
        )]),
        ..Default::default()
    }
}
