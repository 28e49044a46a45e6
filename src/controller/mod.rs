//! The shared-cache reconciler (design.md, "The shared-cache reconciler"; gatekeeper#3287).
//!
//! - [`cache`]: the opinion cache `kind → Opinion`, written only by the template side through
//!   [`cache::OpinionCache::should_generate_vap`], which fans out to the kind's constraints.
//! - [`logic`]: the template and constraint reconcilers, written against the [`world`] traits
//!   (store reads + writes), so the same code runs on an in-memory world in tests and on the
//!   live cluster.
//! - [`queue`]: a de-duplicating work queue with delayed items.
//! - [`runtime`]: the live world: reflectors, dynamic per-kind constraint watches, workers,
//!   leader election, metrics; publishes [`state::LiveState`] for the TUI.

pub mod cache;
pub mod gatekeeper;
pub mod handle;
pub mod lease;
pub mod live;
pub mod logic;
pub mod metrics;
pub mod outage;
pub mod queue;
pub mod runtime;
pub mod state;
pub mod watches;
pub mod world;

pub use handle::{Controller, Convergence, NotLeading};
pub use runtime::{Config, Mode, Tuning, start};
pub use state::{
    AccessError, AccessErrorKind, ClusterEvent, Command, Connection, EventResult, EventVerb,
    LeaderHealth, LeaseInfo, LiveState, ReconcileEvent, RequestOutcome,
};

/// Errors of the reconciler library. Each variant names what failed; callers add context.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the reconciler has stopped")]
    Stopped,
    #[error("this copy is not the lease holder; the holder ({holder}) writes")]
    NotLeader { holder: String },
    #[error("writes are disabled: {0}")]
    WritesDisabled(String),
    #[error("{verb} {object}: conflict (the object changed on the server); retried")]
    Conflict { verb: &'static str, object: String },
    #[error("{verb} {object}: {source}")]
    Write {
        verb: &'static str,
        object: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("{0}")]
    Kube(#[from] crate::cluster::KubeError),
    #[error("leader election on Lease {lease}: {message}")]
    Lease { lease: String, message: String },
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// The label of this error in `/metrics`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Stopped => "stopped",
            Error::NotLeader { .. } => "not_leader",
            Error::WritesDisabled(_) => "writes_disabled",
            Error::Conflict { .. } => "conflict",
            Error::Write { .. } => "write",
            Error::Kube(_) => "kube",
            Error::Lease { .. } => "lease",
            Error::Other(_) => "other",
        }
    }
}
