//! Typed views of the objects kubectl-vap reads. Each keeps the raw JSON it was read from,
//! so the TUI can show YAML and the plan can show diffs of exactly what the server holds.

pub mod constraint;
pub mod gatekeeper_config;
pub mod gatekeeper_webhook;
pub mod meta;
pub mod policy;
pub mod served;
pub mod template;

pub use constraint::{Constraint, EnforcementPoint, KindMatch, Match, ScopedAction};
pub use gatekeeper_config::GatekeeperConfig;
pub use gatekeeper_webhook::GatekeeperWebhook;
pub use meta::{NotAnObjectId, ObjectId, ObjectRef, OwnerRef, Source};
pub use policy::{Binding, CrdInfo, PodStatus, Policy, TypeWarning};
pub use template::{ConstraintTemplate, NamedExpression, NativeSource, Target, Validation};

/// Group of ConstraintTemplates.
pub const TEMPLATES_GROUP: &str = "templates.gatekeeper.sh";
/// Group of constraints (one CRD per template kind).
pub const CONSTRAINTS_GROUP: &str = "constraints.gatekeeper.sh";
/// The apiVersion Gatekeeper uses in ownerReferences and paramKind.
pub const TEMPLATE_OWNER_API_VERSION: &str = "templates.gatekeeper.sh/v1beta1";
pub const CONSTRAINT_API_VERSION: &str = "constraints.gatekeeper.sh/v1beta1";
pub const ADMISSION_GROUP: &str = "admissionregistration.k8s.io";
/// The kinds we generate, spelled once.
pub const VAP_KIND: &str = "ValidatingAdmissionPolicy";
pub const VAPB_KIND: &str = "ValidatingAdmissionPolicyBinding";
pub const STATUS_GROUP: &str = "status.gatekeeper.sh";
/// The label we put on everything we write.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "kubectl-vap";
/// The engine name of Gatekeeper's CEL driver.
pub const CEL_ENGINE: &str = "K8sNativeValidation";
/// The field a stub of an object that could not be decoded carries at its top level: why (the
/// cluster layer keeps only its type and metadata). The views read it as an error of that
/// object (a constraint that cannot be bound, a template whose generation cannot be decided),
/// so one such object is a finding on itself, never an unreadable kind. The name cannot be a
/// field of any object a server sends (no API field has a `/`).
pub const UNDECODABLE: &str = "kubectl-vap.io/undecodable";

/// Why `raw` is a stub of an object that could not be decoded, if it is one.
pub fn undecodable(raw: &serde_json::Value) -> Option<&str> {
    raw.get(UNDECODABLE).and_then(serde_json::Value::as_str)
}

/// The enforcement point of VAP in scopedEnforcementActions.
pub const VAP_ENFORCEMENT_POINT: &str = "vap.k8s.io";
