//! What the reconcilers read and write, as traits: the in-memory world of the tests and the
//! live cluster implement the same ones, so the same reconcile code runs against both.
//!
//! The split is the design's rule made structural: the constraint reconciler is generic over
//! [`ConstraintStore`], which has no way to read a ConstraintTemplate or a VAP.

use super::queue::Key;
use crate::core::PlannedWrite;
use crate::core::desired::CrdState;
use crate::model::{Binding, Constraint, ConstraintTemplate, CrdInfo, Policy};
use chrono::{DateTime, Utc};

/// What the constraint side may read: constraints, their CRD's readiness, observed bindings.
pub trait ConstraintStore {
    fn constraint(&self, kind: &str, name: &str) -> Option<Constraint>;
    /// Names of the constraints of `kind` in the local store (the fan-out's source: no list call).
    fn constraint_names(&self, kind: &str) -> Vec<String>;
    fn crd_state(&self, kind: &str) -> CrdState;
    fn binding(&self, name: &str) -> Option<Binding>;
    fn now(&self) -> DateTime<Utc>;
}

/// What the template side reads in addition.
pub trait TemplateStore: ConstraintStore {
    fn template(&self, name: &str) -> Option<ConstraintTemplate>;
    /// Names of the templates in the local store.
    fn template_names(&self) -> Vec<String>;
    /// Whether the template store holds a complete list (the opinion cache primes on it).
    fn templates_listed(&self) -> bool;
    fn policy(&self, name: &str) -> Option<Policy>;
    /// The constraint CRD `name` (`<plural>.constraints.gatekeeper.sh`), as last observed or
    /// written.
    fn crd(&self, name: &str) -> Option<CrdInfo>;
    /// Bindings controlled by a constraint of `kind` (I2: the VAP is deleted only after these).
    fn bindings_of_kind(&self, kind: &str) -> Vec<Binding>;
}

/// How a write went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Sent and accepted (a delete of an object already gone counts as done).
    Done,
    /// Not sent: this copy may not write now (not the leader, writes disabled).
    Skipped(String),
    /// The object changed meanwhile (conflict, failed precondition): read again and retry.
    Retry(String),
    /// Failed for another reason (forbidden, invalid): retried with backoff.
    Failed(String),
}

/// Sends writes. Implementations record every attempt in their event log.
pub trait Writer {
    fn write(&self, w: &PlannedWrite) -> impl std::future::Future<Output = WriteOutcome> + Send;
}

/// Where fan-out and requeues go.
pub trait Enqueue {
    fn enqueue(&self, key: Key);
    fn enqueue_at(&self, key: Key, at: DateTime<Utc>);
}
