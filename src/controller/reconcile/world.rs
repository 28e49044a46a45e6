//! What the reconcilers read and write, as traits the tests' in-memory world and the live
//! cluster both implement, so the same reconcile code runs against both. The design's rule made
//! structural: the constraint reconciler is generic over [`ConstraintStore`], which has no way
//! to read a ConstraintTemplate.

use super::keys::Key;
use crate::cluster::apply::ApplyError;
use crate::core::PlannedWrite;
use crate::core::desired::CrdState;
use crate::core::pod_status::{BindingGeneration, TemplateGeneration};
use crate::model::served::Served;
use crate::model::{Binding, Constraint, ConstraintTemplate, CrdInfo, ObjectId, Policy};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// What a store says about an object. `Known` only when the store holds a complete list and
/// its watch is running: then `Known(None)` means the object does not exist. Anything else
/// (never listed, forbidden, failed, relisting after a broken watch) is `Unknown`, so "absent"
/// cannot be confused with "unreadable": a create or delete can only be decided on `Known`.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read<T> {
    Known(T),
    Unknown(Unreadable),
}

/// The resource whose store could not be trusted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, thiserror::Error)]
#[error("{0}")]
pub struct Unreadable(pub String);

impl<T> Read<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Read<U> {
        match self {
            Read::Known(t) => Read::Known(f(t)),
            Read::Unknown(u) => Read::Unknown(u),
        }
    }
    /// The value, or what could not be read (for `?`-like early returns).
    pub fn known(self) -> Result<T, Unreadable> {
        match self {
            Read::Known(t) => Ok(t),
            Read::Unknown(u) => Err(u),
        }
    }
}

/// What the constraint side may read: constraints, their CRD's readiness, observed bindings.
pub trait ConstraintStore {
    fn constraint(&self, kind: &str, name: &str) -> Read<Option<Constraint>>;
    /// The fan-out's source (the local store, no list call): enqueues keys, never decides a write.
    fn constraint_names(&self, kind: &str) -> Vec<String>;
    fn crd_state(&self, kind: &str) -> Read<CrdState>;
    fn binding(&self, name: &str) -> Read<Option<Binding>>;
    /// The VAP `name`. The constraint side reads only its constraint's own VAP (the inline
    /// shape's `gatekeeper-<lower kind>.<name>`), never a template's.
    fn policy(&self, name: &str) -> Read<Option<Policy>>;
    /// Whether the stores opinions are concluded from (templates, VAPs) are known now: one
    /// broken since may have outdated them. (Their state only: no template is read.)
    fn opinions_known(&self) -> Read<()>;
    /// What the API server serves: both sides compute a binding's rules from it.
    fn served(&self) -> Read<Arc<Served>>;
    /// The wall clock, for what is compared with the server's own timestamps (a CRD's
    /// `Established` time, from which `--binding-wait` counts). Due times and backoff are on
    /// tokio's clock, in the queue.
    fn now(&self) -> DateTime<Utc>;
}

pub trait TemplateStore: ConstraintStore {
    fn template(&self, name: &str) -> Read<Option<ConstraintTemplate>>;
    fn template_names(&self) -> Vec<String>;
    /// The opinion cache primes on it.
    fn templates_listed(&self) -> bool;
    /// The constraint CRD `name` (`<plural>.constraints.gatekeeper.sh`), as last observed or
    /// written.
    fn crd(&self, name: &str) -> Read<Option<CrdInfo>>;
    /// Bindings controlled by a constraint of `kind` (I2: the VAP is deleted only after these).
    fn bindings_of_kind(&self, kind: &str) -> Read<Vec<Binding>>;
    /// Every constraint of `kind` (what its VAP must match).
    fn constraints_of_kind(&self, kind: &str) -> Read<Vec<Constraint>>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Sent and accepted (a delete of an object already gone counts as done).
    Done,
    /// Not sent: this copy may not write now.
    Skipped(NotSent),
    /// Not accepted, and how: the class says what the reconcilers do about it (retry, retry
    /// slowly, report once). A body the server refused before is not sent again and comes
    /// back as the same `Invalid`.
    Failed(WriteError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotSent {
    /// Read-only, or refusing to write beside Gatekeeper's own generator.
    WritesDisabled,
    /// The Lease renewal that allows writes is not confirmed (the fence).
    NotConfirmed,
    /// Another writer keeps undoing this copy's writes of the object (`core::contest`): not
    /// written for this long.
    Contested(std::time::Duration),
}

/// Sends writes. Implementations record every attempt in their event log.
pub trait Writer {
    fn write(&self, w: &PlannedWrite) -> impl std::future::Future<Output = WriteOutcome> + Send;
    /// No write of `object` is needed now: how an earlier one failed is history, not a reason
    /// views still give (nor an entry kept for the life of the copy).
    fn not_needed(&self, _object: &ObjectId) {}
    /// What the reconcile concluded about its template or constraint, for the status
    /// Gatekeeper's users read (`tell::pod_status`). The in-memory world ignores it.
    fn concluded(&self, _concluded: Concluded) {}
    /// `w` (template `template`'s VAP, `core::probe`) sent as a server-side dry-run: the
    /// server's refusal, if it refuses it. Nothing is written. The in-memory world compiles
    /// nothing.
    fn compile(
        &self,
        _template: &str,
        _w: &PlannedWrite,
    ) -> impl std::future::Future<Output = Option<String>> + Send {
        std::future::ready(None)
    }
}

/// What a reconcile concluded about its template or constraint, in Gatekeeper's words
/// (`core::pod_status`). `entry: None`: it gets no entry (gone, generates nothing, wants no
/// binding), so one that exists goes.
#[derive(Debug, Clone)]
pub enum Concluded {
    Template {
        name: String,
        entry: Option<Entry<ConstraintTemplate, TemplateGeneration>>,
    },
    Constraint {
        kind: String,
        name: String,
        entry: Option<Entry<Constraint, BindingGeneration>>,
    },
}

/// An object and what its entry says of it.
#[derive(Debug, Clone)]
pub struct Entry<T, G> {
    pub object: Box<T>,
    pub generation: G,
}

/// Where fan-out and requeues go.
pub trait Enqueue {
    fn enqueue(&self, key: Key);
    /// On tokio's clock.
    fn enqueue_after(&self, key: Key, delay: std::time::Duration);
}

/// How a write failed; the reconcilers act on its class (`reconcilers::Outcome::from`). The
/// answer is in an `Arc` (the event log, refusal memo and outcome each keep one); equal means a
/// copy of the same failure, not one that reads alike: the event log finds its place by it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    /// The object changed meanwhile (409, failed precondition): read again and retry.
    #[error("conflict (the object changed on the server); retried")]
    Conflict(#[source] Arc<ApplyError>),
    /// 401/403, or a 422 whose cause is an authorization check (a VAP's paramKind needs `get`
    /// on that kind): may pass once the RBAC allows it.
    #[error("forbidden: {0} (grant the ClusterRole from `kubectl vap install --print`)")]
    Forbidden(#[source] Arc<ApplyError>),
    /// 422: the server refuses this body, however often it is sent.
    #[error("{0}")]
    Invalid(#[source] Arc<ApplyError>),
    /// No answer at all (connection refused or reset, timeout).
    #[error("{0}")]
    Unreachable(#[source] Arc<ApplyError>),
    /// Any other answer (5xx, 429, …): may pass later.
    #[error("{0}")]
    Failed(#[source] Arc<ApplyError>),
}

impl PartialEq for WriteError {
    fn eq(&self, other: &WriteError) -> bool {
        Unwritten::from(self) == Unwritten::from(other) && Arc::ptr_eq(self.cause(), other.cause())
    }
}

impl Eq for WriteError {}

impl WriteError {
    /// A conflict is retried at once and passes: not a failure anyone must look at.
    pub fn retried_away(&self) -> bool {
        matches!(self, WriteError::Conflict(_))
    }

    /// How long the server asked to wait before the next attempt (zero: it did not say).
    pub fn retry_after(&self) -> std::time::Duration {
        self.cause().retry_after().unwrap_or_default()
    }

    /// What the server answered (or why nothing was), whatever the class.
    pub fn cause(&self) -> &Arc<ApplyError> {
        match self {
            WriteError::Conflict(e)
            | WriteError::Forbidden(e)
            | WriteError::Invalid(e)
            | WriteError::Unreachable(e)
            | WriteError::Failed(e) => e,
        }
    }
}

/// Why a write changed nothing: the `reason` label of `kubectl_vap_write_errors_total`
/// (controller-rs's metric-labelled errors: the label comes from the type, never a literal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unwritten {
    /// A delete found the object gone already.
    AlreadyGone,
    Conflict,
    Failed,
    Forbidden,
    Invalid,
    Unreachable,
}

impl Unwritten {
    pub fn label(self) -> &'static str {
        match self {
            Unwritten::AlreadyGone => "already_gone",
            Unwritten::Conflict => "conflict",
            Unwritten::Failed => "failed",
            Unwritten::Forbidden => "forbidden",
            Unwritten::Invalid => "invalid",
            Unwritten::Unreachable => "unreachable",
        }
    }
}

impl From<&WriteError> for Unwritten {
    fn from(e: &WriteError) -> Unwritten {
        match e {
            WriteError::Conflict(_) => Unwritten::Conflict,
            WriteError::Forbidden(_) => Unwritten::Forbidden,
            WriteError::Invalid(_) => Unwritten::Invalid,
            WriteError::Unreachable(_) => Unwritten::Unreachable,
            WriteError::Failed(_) => Unwritten::Failed,
        }
    }
}
