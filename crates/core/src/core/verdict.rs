//! What the API server answered to a dry-run, read back into verdicts: which policy and binding
//! denied or warned, and which constraint and template that binding stands for. Pure: the
//! reply (status code, body, `Warning` headers) and a snapshot in, attributed verdicts out.
//!
//! The server's words are the contract here (kube-apiserver's validating admission policy
//! plugin): a `Deny` binding answers `ValidatingAdmissionPolicy 'P' with binding 'B' denied
//! request: M`, a `Warn` binding adds the warning `Validation failed for
//! ValidatingAdmissionPolicy 'P' with binding 'B': M`. Only the first denial is in the reply
//! (measured, see docs/admission.md), every warning is.

use crate::model::{CONSTRAINTS_GROUP, TEMPLATES_GROUP};
use crate::snapshot::Snapshot;
use serde::Serialize;

/// A policy's words about one request, as the server wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyMessage {
    pub policy: String,
    pub binding: Option<String>,
    pub message: String,
}

const VAP: &str = "ValidatingAdmissionPolicy '";

/// `P' with binding 'B` or `P'` → (P, Some(B)) / (P, None), and the rest after the closing quote.
fn policy_and_binding(s: &str) -> Option<(String, Option<String>, &str)> {
    let (policy, rest) = s.split_once('\'')?;
    if let Some(rest) = rest.strip_prefix(" with binding '") {
        let (binding, rest) = rest.split_once('\'')?;
        return Some((policy.to_string(), Some(binding.to_string()), rest));
    }
    Some((policy.to_string(), None, rest))
}

/// A denial in a status message (which the server prefixes with `<resource> "<name>" is
/// forbidden: `).
pub fn parse_denial(status_message: &str) -> Option<PolicyMessage> {
    let at = status_message.find(VAP)?;
    let (policy, binding, rest) = policy_and_binding(&status_message[at + VAP.len()..])?;
    let message = rest.strip_prefix(" denied request: ")?;
    Some(PolicyMessage {
        policy,
        binding,
        message: message.to_string(),
    })
}

/// A `Warn` binding's warning text (already taken out of its `Warning` header).
pub fn parse_warning(text: &str) -> Option<PolicyMessage> {
    let rest = text.strip_prefix("Validation failed for ValidatingAdmissionPolicy '")?;
    let (policy, binding, rest) = policy_and_binding(rest)?;
    let message = rest.strip_prefix(": ")?;
    Some(PolicyMessage {
        policy,
        binding,
        message: message.to_string(),
    })
}

/// The texts of one `Warning` header value (RFC 7234: `299 - "text"`, several may be joined
/// with commas; `\"` and `\\` are escapes inside the quotes). Malformed values are kept whole
/// rather than lost.
pub fn warning_texts(header: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = header.trim();
    while !rest.is_empty() {
        let Some(open) = rest.find('"') else {
            out.push(rest.to_string());
            break;
        };
        let mut text = String::new();
        let mut closed = None;
        let mut chars = rest[open + 1..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        text.push(n);
                    }
                }
                '"' => {
                    closed = Some(open + 1 + i + 1);
                    break;
                }
                c => text.push(c),
            }
        }
        out.push(text);
        let Some(end) = closed else { break };
        // Skip an optional warn-date, then the comma to the next warning.
        rest = match rest[end..].find(',') {
            Some(comma) => rest[end + comma + 1..].trim_start(),
            None => "",
        };
    }
    out
}

/// `admission webhook "W" denied the request: M` → (W, M); also a webhook that could not be
/// called under `failurePolicy: Fail` (`failed calling webhook "W": …`): the request is
/// rejected because of that webhook all the same.
pub fn parse_webhook_denial(status_message: &str) -> Option<(String, String)> {
    for hook_prefix in ["admission webhook \"", "failed calling webhook \""] {
        let Some(at) = status_message.find(hook_prefix) else {
            continue;
        };
        let (hook, rest) = status_message[at + hook_prefix.len()..].split_once('"')?;
        let message = rest
            .strip_prefix(" denied the request: ")
            .or_else(|| rest.strip_prefix(": "))
            .unwrap_or(rest.trim_start());
        return Some((hook.to_string(), message.to_string()));
    }
    None
}

/// A policy's CEL that failed on a request instead of judging it, in the server's words
/// (kube-apiserver's CEL validator): `expression 'E' resulted in error: W` for one
/// expression, or `validation failed due to running out of cost budget, …` when the policy's
/// evaluations together spent the request's budget. Under `failurePolicy: Fail` the server
/// refuses the request with these words where a verdict's message would be; under `Ignore` it
/// admits the request and says nothing (measured: tests/e2e_cost_budget.rs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvaluationError {
    /// The expression that failed, when the server names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
    pub error: String,
    /// The error is the API server's CEL cost limit (per expression or per request): the
    /// expression fails on every object like this one, and only cheaper CEL changes that.
    pub over_cost_budget: bool,
}

/// The server's words for CEL that ran over its cost limits: cel-go's per-call limit
/// (`operation cancelled: actual cost limit exceeded`) and the validator's budget for a whole
/// request (`validation failed due to running out of cost budget`).
const COST_WORDS: [&str; 2] = ["cost limit exceeded", "running out of cost budget"];

/// An [`EvaluationError`] in a policy message (the part after `denied request: `).
pub fn parse_evaluation_error(message: &str) -> Option<EvaluationError> {
    let over_cost_budget = COST_WORDS.iter().any(|w| message.contains(w));
    // The error is the server's text, the expression the template's: split at the last
    // marker, so an expression that quotes the marker's words stays whole.
    if let Some(rest) = message.strip_prefix("expression '")
        && let Some((expression, error)) = rest.rsplit_once("' resulted in error: ")
    {
        return Some(EvaluationError {
            expression: Some(expression.to_string()),
            error: error.to_string(),
            over_cost_budget,
        });
    }
    over_cost_budget.then(|| EvaluationError {
        expression: None,
        error: message.to_string(),
        over_cost_budget,
    })
}

/// RBAC's words for a request the user may not make (`User "u" cannot create resource …`).
pub fn is_authorization_error(code: u16, status_message: &str) -> bool {
    code == 403
        && status_message.contains(" cannot ")
        && status_message.contains(" resource ")
        && !status_message.contains(VAP)
}

/// A constraint, by kind and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ConstraintRef {
    pub kind: String,
    pub name: String,
}

impl std::fmt::Display for ConstraintRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)
    }
}

/// One policy verdict, attributed binding → constraint → template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Attribution {
    pub policy: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binding: Option<String>,
    /// The constraint the binding stands for; `None` for bindings that are not Gatekeeper's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraint: Option<ConstraintRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// How the constraint was found: `binding` (its controller and paramRef, read), `name`
    /// (parsed from our naming scheme because the binding could not be read), or absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attributed_by: Option<&'static str>,
    pub message: String,
    /// Set when the message is no verdict but the policy's CEL failing on the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evaluation_error: Option<EvaluationError>,
}

impl Attribution {
    /// `binding B → Kind/name → template T` for tables.
    pub fn chain(&self) -> String {
        let mut s = match &self.binding {
            Some(b) => format!("binding {b}"),
            None => format!("policy {}", self.policy),
        };
        if let Some(c) = &self.constraint {
            s.push_str(&format!(" → {c}"));
        }
        if let Some(t) = &self.template {
            s.push_str(&format!(" → template {t}"));
        }
        s
    }
}

/// `gatekeeper-<lower kind>-<name>` → (lower kind, name). Kinds have no `-`, so the first one
/// after the prefix separates them. Hash-truncated names parse to a wrong name: that is why a
/// binding that can be read is always preferred.
fn parse_binding_name(binding: &str) -> Option<(String, String)> {
    let rest = binding.strip_prefix("gatekeeper-")?;
    let (kind, name) = rest.split_once('-')?;
    (!kind.is_empty() && !name.is_empty()).then(|| (kind.to_string(), name.to_string()))
}

/// Attributes a policy message with what the snapshot knows about its binding and policy.
pub fn attribute(pm: &PolicyMessage, snap: &Snapshot) -> Attribution {
    let mut a = Attribution {
        policy: pm.policy.clone(),
        binding: pm.binding.clone(),
        constraint: None,
        template: None,
        attributed_by: None,
        message: pm.message.clone(),
        evaluation_error: parse_evaluation_error(&pm.message),
    };
    let policy = snap.policies.iter().find(|p| p.name() == pm.policy);
    // The template is the policy's controller; without the policy, our naming scheme.
    a.template = match policy.and_then(|p| p.meta.controller()) {
        Some(owner) if owner.kind == "ConstraintTemplate" && owner.group() == TEMPLATES_GROUP => {
            Some(owner.name.clone())
        }
        // A constraint's own VAP (the inline shape): the template is the one of its kind.
        Some(owner) if owner.group() == CONSTRAINTS_GROUP => Some(
            snap.templates
                .iter()
                .find(|t| t.kind.as_deref() == Some(owner.kind.as_str()))
                .map(|t| t.name().to_string())
                .unwrap_or_else(|| owner.kind.to_lowercase()),
        ),
        Some(_) => None,
        // `gatekeeper-<template>`, or an inline `gatekeeper-<lower kind>.<constraint>`.
        None if policy.is_none() => pm
            .policy
            .strip_prefix("gatekeeper-")
            .map(|t| t.split_once('.').map_or(t, |(kind, _)| kind).to_string()),
        None => None,
    };
    let Some(binding_name) = &pm.binding else {
        return a;
    };
    match snap.bindings.iter().find(|b| b.name() == binding_name) {
        Some(b) => {
            // The binding's controller is the constraint (Gatekeeper's contract); its paramRef
            // names the same constraint. A binding without that controller is not ours.
            if let Some(owner) = b.meta.controller()
                && owner.group() == CONSTRAINTS_GROUP
            {
                a.constraint = Some(ConstraintRef {
                    kind: owner.kind.clone(),
                    name: owner.name.clone(),
                });
                a.attributed_by = Some("binding");
            } else {
                a.template = a.template.filter(|_| policy.is_some());
            }
        }
        None => {
            if let Some((kind_lower, name)) = parse_binding_name(binding_name)
                && (pm.policy == format!("gatekeeper-{kind_lower}")
                    || pm.policy == format!("gatekeeper-{kind_lower}.{name}"))
            {
                // The kind's case is only known from the constraint itself, if it was read.
                let kind = snap
                    .constraints
                    .iter()
                    .find(|c| c.kind.to_lowercase() == kind_lower && c.name() == name)
                    .map(|c| c.kind.clone())
                    .unwrap_or(kind_lower);
                a.constraint = Some(ConstraintRef { kind, name });
                a.attributed_by = Some("name");
            }
        }
    }
    a
}

/// What happened to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Admitted with no warning.
    Admitted,
    /// Admitted with warnings.
    Warned,
    /// Denied by a ValidatingAdmissionPolicy.
    Denied,
    /// Refused because a policy's CEL failed on the request (an evaluation error under
    /// `failurePolicy: Fail`, such as its cost budget): no verdict was reached.
    PolicyError,
    /// Rejected by a validating webhook.
    RejectedByWebhook,
    /// The user may not make the request (RBAC): no policy was asked.
    Forbidden,
    /// Refused for another reason (invalid object, conflict, another admission plugin).
    Rejected,
    /// Could not be sent (unknown kind, connection): no answer from admission at all.
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Admitted => "admitted",
            Outcome::Warned => "warned",
            Outcome::Denied => "denied",
            Outcome::PolicyError => "policy-error",
            Outcome::RejectedByWebhook => "rejected-by-webhook",
            Outcome::Forbidden => "forbidden",
            Outcome::Rejected => "rejected",
            Outcome::Error => "error",
        }
    }
}

/// A reply, read: the outcome, the attributed denial (at most one: the server's first) and
/// warnings, other warnings as they were, and the server's message when it refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reading {
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denial: Option<Attribution>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Attribution>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other_warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Reads a reply: `code` is the HTTP status, `status_message` the Status body's message when
/// the request failed, `warnings` the texts of the `Warning` headers.
pub fn read_reply(
    code: u16,
    status_message: Option<&str>,
    warnings: &[String],
    snap: &Snapshot,
) -> Reading {
    let mut policy_warnings = Vec::new();
    let mut other_warnings = Vec::new();
    for w in warnings {
        match parse_warning(w) {
            Some(pm) => policy_warnings.push(attribute(&pm, snap)),
            None => other_warnings.push(w.clone()),
        }
    }
    let mut r = Reading {
        outcome: Outcome::Admitted,
        denial: None,
        warnings: policy_warnings,
        other_warnings,
        webhook: None,
        message: None,
    };
    if (200..300).contains(&code) {
        if !r.warnings.is_empty() || !r.other_warnings.is_empty() {
            r.outcome = Outcome::Warned;
        }
        return r;
    }
    let msg = status_message.unwrap_or_default();
    r.message = Some(msg.to_string());
    if let Some(pm) = parse_denial(msg) {
        let denial = attribute(&pm, snap);
        r.outcome = match denial.evaluation_error {
            Some(_) => Outcome::PolicyError,
            None => Outcome::Denied,
        };
        r.denial = Some(denial);
    } else if let Some((hook, _)) = parse_webhook_denial(msg) {
        r.outcome = Outcome::RejectedByWebhook;
        r.webhook = Some(hook);
    } else if is_authorization_error(code, msg) {
        r.outcome = Outcome::Forbidden;
    } else {
        r.outcome = Outcome::Rejected;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn denials_and_warnings_are_read_as_the_server_writes_them() {
        let d = parse_denial("configmaps \"x\" is forbidden: ValidatingAdmissionPolicy 'gatekeeper-k8sa' with binding 'gatekeeper-k8sa-must' denied request: missing: owner, it's 'bad'").expect("denial");
        assert_eq!(d.policy, "gatekeeper-k8sa");
        assert_eq!(d.binding.as_deref(), Some("gatekeeper-k8sa-must"));
        // Quotes in the message stay: only the names are delimited by them.
        assert_eq!(d.message, "missing: owner, it's 'bad'");
        let w = parse_warning(
            "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': say: it",
        )
        .expect("warning");
        assert_eq!((w.policy.as_str(), w.binding.as_deref()), ("p", Some("b")));
        assert_eq!(w.message, "say: it");
        assert!(parse_denial("configmaps \"x\" is forbidden: User \"u\" cannot create").is_none());
        assert!(parse_warning("some other warning").is_none());
    }

    #[test]
    fn warning_headers_with_escapes_and_several_values() {
        assert_eq!(
            warning_texts(r#"299 - "a \"quoted\" text", 299 - "second""#),
            vec!["a \"quoted\" text".to_string(), "second".to_string()]
        );
        assert_eq!(warning_texts("garbage"), vec!["garbage".to_string()]);
        assert_eq!(
            warning_texts(r#"299 - "unterminated"#),
            vec!["unterminated".to_string()]
        );
    }

    fn snap(objects: Vec<serde_json::Value>) -> Snapshot {
        let mut s = Snapshot::default();
        for o in objects {
            s.insert(o, Default::default()).expect("insert");
        }
        s
    }

    fn binding(name: &str, owner_kind: &str, owner: &str) -> serde_json::Value {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
               "metadata": {"name": name, "ownerReferences": [{"apiVersion": "constraints.gatekeeper.sh/v1beta1",
                 "kind": owner_kind, "name": owner, "uid": "u", "controller": true}]},
               "spec": {"policyName": "gatekeeper-k8sa", "paramRef": {"name": owner}, "validationActions": ["Deny"]}})
    }

    #[test]
    fn attribution_reads_the_binding_and_falls_back_to_the_name() {
        // A hash-truncated name cannot be parsed back: the binding's controller says who it is.
        let s = snap(vec![binding(
            "gatekeeper-k8sa-trunc-1234abcd",
            "K8sA",
            "a-very-long-name",
        )]);
        let pm = PolicyMessage {
            policy: "gatekeeper-k8sa".into(),
            binding: Some("gatekeeper-k8sa-trunc-1234abcd".into()),
            message: "m".into(),
        };
        let a = attribute(&pm, &s);
        assert_eq!(
            a.constraint,
            Some(ConstraintRef {
                kind: "K8sA".into(),
                name: "a-very-long-name".into()
            })
        );
        assert_eq!(a.attributed_by, Some("binding"));
        assert_eq!(a.template.as_deref(), Some("k8sa"));
        assert_eq!(
            a.chain(),
            "binding gatekeeper-k8sa-trunc-1234abcd → K8sA/a-very-long-name → template k8sa"
        );

        // Unreadable binding: our naming scheme, said to be an inference.
        let a = attribute(&pm, &Snapshot::default());
        assert_eq!(a.attributed_by, Some("name"));
        assert_eq!(a.constraint.map(|c| c.name), Some("trunc-1234abcd".into()));

        // Someone else's policy and binding: shown as they are.
        let other = PolicyMessage {
            policy: "team-policy".into(),
            binding: Some("team-binding".into()),
            message: "m".into(),
        };
        let a = attribute(&other, &Snapshot::default());
        assert_eq!((a.constraint, a.template), (None, None));
    }

    #[test]
    fn replies_are_classified() {
        let s = Snapshot::default();
        assert_eq!(read_reply(201, None, &[], &s).outcome, Outcome::Admitted);
        let w = read_reply(
            201,
            None,
            &["Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': m".into()],
            &s,
        );
        assert_eq!(w.outcome, Outcome::Warned);
        assert_eq!(w.warnings.len(), 1);
        let d = read_reply(
            403,
            Some(
                "configmaps \"x\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: m",
            ),
            &[],
            &s,
        );
        assert_eq!(d.outcome, Outcome::Denied);
        let f = read_reply(
            403,
            Some(
                "configmaps \"x\" is forbidden: User \"bob\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"n\"",
            ),
            &[],
            &s,
        );
        assert_eq!(f.outcome, Outcome::Forbidden);
        let h = read_reply(
            400,
            Some("admission webhook \"validation.gatekeeper.sh\" denied the request: [x] no"),
            &[],
            &s,
        );
        assert_eq!(
            (h.outcome, h.webhook.as_deref()),
            (Outcome::RejectedByWebhook, Some("validation.gatekeeper.sh"))
        );
        let down = read_reply(
            500,
            Some(
                "Internal error occurred: failed calling webhook \"deny.example.com\": failed to call webhook: connection refused",
            ),
            &[],
            &s,
        );
        assert_eq!(
            (down.outcome, down.webhook.as_deref()),
            (Outcome::RejectedByWebhook, Some("deny.example.com"))
        );
        let q = read_reply(
            403,
            Some("pods \"p\" is forbidden: exceeded quota: q"),
            &[],
            &s,
        );
        assert_eq!(q.outcome, Outcome::Rejected);
    }

    /// The server's words for CEL that failed rather than judged (recorded from a real
    /// kube-apiserver 1.36 in tests/e2e_cost_budget.rs): a policy error, not a denial, and the
    /// cost budget told from other errors.
    #[test]
    fn evaluation_errors_are_no_verdicts() {
        let s = Snapshot::default();
        let refused = |message: &str| {
            read_reply(
                403,
                Some(&format!(
                    "configmaps \"x\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request: {message}"
                )),
                &[],
                &s,
            )
        };
        // A policy error, and what the server said of it.
        let error_of = |message: &str| {
            let r = refused(message);
            assert_eq!(r.outcome, Outcome::PolicyError, "{message}");
            r.denial
                .and_then(|d| d.evaluation_error)
                .expect("an evaluation error")
        };
        let e = error_of(
            "expression 'xs.all(a, xs.all(b, a != b))' resulted in error: operation cancelled: actual cost limit exceeded",
        );
        assert_eq!(
            e.expression.as_deref(),
            Some("xs.all(a, xs.all(b, a != b))")
        );
        assert_eq!(e.error, "operation cancelled: actual cost limit exceeded");
        assert!(e.over_cost_budget);
        let e = error_of(
            "validation failed due to running out of cost budget, no further validation rules will be run",
        );
        assert!(e.over_cost_budget && e.expression.is_none());
        // Another error: still no verdict, but not the budget.
        let e = error_of("expression 'object.spec.x' resulted in error: no such key: x");
        assert!(!e.over_cost_budget);
        // A message that only quotes the words is a verdict like any other.
        let verdict = refused("the label 'expression' is required");
        assert_eq!(verdict.outcome, Outcome::Denied);
        assert_eq!(verdict.denial.and_then(|d| d.evaluation_error), None);
    }
}
