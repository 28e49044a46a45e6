//! Findings: the one vocabulary of the TUI, `check` and `plan`. One table holds every code's
//! severity and title, so no view keeps its own copy.

use crate::model::{ObjectRef, Source};
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

macro_rules! codes {
    ($($variant:ident = $code:literal, $sev:ident, $title:literal;)*) => {
        /// A finding's stable code (the design's table).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum Code { $(#[serde(rename = $code)] $variant,)* }

        impl Code {
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];
            pub fn as_str(self) -> &'static str { match self { $(Code::$variant => $code,)* } }
            pub fn severity(self) -> Severity { match self { $(Code::$variant => Severity::$sev,)* } }
            /// What the code means, for help screens and docs.
            pub fn title(self) -> &'static str { match self { $(Code::$variant => $title,)* } }
        }
    };
}

codes! {
    CrdMissing = "crd-missing", Error, "the template defines a constraint kind, but its CRD does not exist";
    CrdOutOfSync = "crd-out-of-sync", Warning, "the constraint CRD differs from the one its template defines";
    CrdOrphan = "crd-orphan", Warning, "a constraint CRD whose template is gone (reported, never deleted)";
    CrdForeign = "crd-foreign", Warning, "a constraint CRD with our name whose controller is not the template";
    PolicyMissing = "policy-missing", Error, "the template generates, but its VAP does not exist";
    PolicyOutOfSync = "policy-out-of-sync", Warning, "the VAP differs from the desired one";
    PolicyDangling = "policy-dangling", Warning, "a VAP whose template is gone or no longer generates";
    PolicyForeign = "policy-foreign", Warning, "a VAP with our name whose controller is not the template";
    PolicyTypeWarning = "policy-type-warning", Warning, "the type checker warns about an expression of our VAP in its status (a field its kinds do not have, a type mismatch): it errors at admission, and its failurePolicy decides";
    BindingMissing = "binding-missing", Error, "the constraint should have a binding and has none";
    BindingOutOfSync = "binding-out-of-sync", Warning, "the binding differs from the desired one";
    BindingDangling = "binding-dangling", Error, "a binding that should not exist, or whose policy does not";
    BindingForeign = "binding-foreign", Warning, "a binding with our name whose controller is not the constraint";
    BindingWaiting = "binding-waiting", Info, "the binding waits for its constraint CRD to be established";
    TemplateError = "template-error", Error, "the template cannot be turned into a VAP as written";
    ConstraintError = "constraint-error", Error, "the constraint cannot be bound as written";
    ConstraintOrphan = "constraint-orphan", Info, "a constraint whose kind has no template";
    ConstraintMatchesEverything = "constraint-matches-everything", Warning, "the constraint matches every kind under a fail-closed policy: every write in the cluster waits on it, and is refused while its params are not synced (gatekeeper#4530)";
    ConstraintKindsUnserved = "constraint-kinds-unserved", Info, "the constraint names kinds the API server does not serve (yet): its binding matches their whole group until it does";
    ConstraintViolations = "constraint-violations", Info, "existing objects the constraint's binding denies or warns about, or that could not be checked (check --audit)";
    PolicyCostExceeded = "policy-cost-exceeded", Error, "the constraint's policy ran over the API server's CEL cost budget on existing objects (check --audit): under failurePolicy Fail their requests are refused, under Ignore admitted unjudged";
    InputDuplicate = "input-duplicate", Warning, "the input holds the object more than once: the last copy is used, the others are ignored";
    StaticRefused = "static-refused", Error, "the constraint cannot be a static manifest (render --static): its template reads params directly, or it cannot be rendered inline";
    StaticOutOfSync = "static-out-of-sync", Warning, "a static manifest differs from what its constraint renders to now (check --static)";
    StaticDangling = "static-dangling", Warning, "a static manifest whose constraint is gone or no longer renders as static (check --static)";
    WriteRefused = "write-refused", Error, "the API server refuses the write that would bring the object in line (its message says why)";
    GuardMissing = "guard-missing", Error, "the guard that confines the reconciler's service account (install --print) is gone, unbound or changed: its CRD, Lease and ConfigMap writes are confined by RBAC alone";
    WriterConflict = "writer-conflict", Error, "another writer keeps undoing the leader's writes of the object: the leader has stopped writing it for a while (its message names the other field manager)";
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem, about one object. The JSON shape is a contract of `check -o json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub code: Code,
    pub severity: Severity,
    pub object: ObjectRef,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<ObjectRef>,
    pub message: String,
    /// Where the object was read from (file and line), when it came from files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl Finding {
    pub fn new(code: Code, object: ObjectRef, message: impl Into<String>) -> Self {
        Finding {
            code,
            severity: code.severity(),
            object,
            related: Vec::new(),
            message: message.into(),
            source: None,
        }
    }
    pub fn related(mut self, r: ObjectRef) -> Self {
        self.related.push(r);
        self
    }
    pub fn at(mut self, source: &Source) -> Self {
        if source.file.is_some() {
            self.source = Some(source.to_string());
        }
        self
    }
}

/// Counts by severity and by code: the `summary` of `check -o json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub errors: usize,
    pub warnings: usize,
    pub infos: usize,
    pub by_code: std::collections::BTreeMap<String, usize>,
}

impl Summary {
    pub fn of(findings: &[Finding]) -> Self {
        let mut s = Summary::default();
        for f in findings {
            match f.severity {
                Severity::Error => s.errors += 1,
                Severity::Warning => s.warnings += 1,
                Severity::Info => s.infos += 1,
            }
            *s.by_code.entry(f.code.as_str().to_string()).or_default() += 1;
        }
        s
    }
    /// `check` exits 1 when this holds.
    pub fn has_problems(&self) -> bool {
        self.errors + self.warnings > 0
    }
}

/// Adds the findings of writes the API server refuses (`write-refused`, in its words) and
/// corrects what they make untrue: a missing binding whose VAP does not exist yet, and whose
/// create is refused, is not written by a reconcile (it waits for its VAP, I1), so its finding
/// says that instead of "reconcile creates it". (A VAP that exists but whose update is refused
/// does not hold a binding back that stays within what it matches: those findings stand.)
pub fn add_refusals(
    findings: &mut Vec<Finding>,
    plan: &[crate::core::PlannedWrite],
    refused: Vec<Finding>,
) {
    use crate::core::Verb;
    use crate::model::{VAP_KIND, VAPB_KIND};
    let creates_refused: std::collections::BTreeSet<&str> = plan
        .iter()
        .filter(|w| w.verb == Verb::Create && w.object.kind == VAP_KIND)
        .filter(|w| refused.iter().any(|f| f.object == w.object))
        .map(|w| w.object.name.as_str())
        .collect();
    for w in plan.iter().filter(|w| w.object.kind == VAPB_KIND) {
        let Some(policy) = w
            .body
            .as_ref()
            .and_then(|b| b["spec"]["policyName"].as_str())
        else {
            continue;
        };
        if !creates_refused.contains(policy) {
            continue;
        }
        for f in findings
            .iter_mut()
            .filter(|f| f.object == w.object && f.code == Code::BindingMissing)
        {
            let stem = f.message.strip_suffix(REMEDY_CREATE).unwrap_or(&f.message);
            f.message = format!(
                "{stem}; not before VAP {policy}, whose create the API server refuses (write-refused)"
            );
        }
    }
    findings.extend(refused);
}

/// How a `binding-missing` finding ends (`step::binding`): what a reconcile does about it.
pub const REMEDY_CREATE: &str = "; reconcile creates it";

#[cfg(test)]
mod refusal_tests {
    use super::*;
    use crate::core::{PlannedWrite, Verb};

    #[test]
    fn a_binding_on_a_refused_vap_is_not_said_to_be_created_by_a_reconcile() {
        let vap = ObjectRef::new(
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy",
            "gatekeeper-t",
        );
        let binding = ObjectRef::new(
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicyBinding",
            "gatekeeper-t-c",
        );
        let write = PlannedWrite {
            verb: Verb::Create,
            object: binding.clone(),
            code: Code::BindingMissing,
            reason: String::new(),
            body: Some(serde_json::json!({"spec": {"policyName": "gatekeeper-t"}})),
            uid: None,
            resource_version: None,
            diff: String::new(),
        };
        let vap_create = PlannedWrite {
            verb: Verb::Create,
            object: vap.clone(),
            code: Code::PolicyMissing,
            body: None,
            ..write.clone()
        };
        let missing = |o: &ObjectRef| {
            Finding::new(
                Code::BindingMissing,
                o.clone(),
                "x does not exist; reconcile creates it",
            )
        };
        let other = ObjectRef {
            name: "gatekeeper-u-c".into(),
            ..binding.clone()
        };
        let mut findings = vec![missing(&binding), missing(&other)];
        let refused = || vec![Finding::new(Code::WriteRefused, vap.clone(), "refused")];
        // The VAP exists and only its update is refused: the binding's create stands.
        let update = PlannedWrite {
            verb: Verb::Update,
            ..vap_create.clone()
        };
        let mut kept = vec![missing(&binding)];
        add_refusals(&mut kept, &[update, write.clone()], refused());
        assert_eq!(kept[0].message, "x does not exist; reconcile creates it");
        add_refusals(&mut findings, &[vap_create, write], refused());
        assert_eq!(
            findings[0].message,
            "x does not exist; not before VAP gatekeeper-t, whose create the API server refuses (write-refused)"
        );
        // A binding planned on another VAP keeps its words.
        assert_eq!(
            findings[1].message,
            "x does not exist; reconcile creates it"
        );
        assert_eq!(findings.len(), 3);
    }
}
