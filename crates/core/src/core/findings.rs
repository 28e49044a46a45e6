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
    InputDuplicate = "input-duplicate", Warning, "the input holds the object more than once: the last copy is used, the others are ignored";
    WriteRefused = "write-refused", Error, "the API server refuses the write that would bring the object in line (its message says why)";
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
