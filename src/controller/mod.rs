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
mod commands;
mod events;
pub mod gatekeeper;
pub mod handle;
mod lease;
pub mod logic;
pub mod metrics;
mod outage;
mod publish;
pub mod queue;
mod requests;
mod shared;
mod start;
pub mod state;
mod status;
mod stores;
mod watches;
pub mod worker;
pub mod world;
mod writer;

pub use handle::{Controller, Convergence, NotLeading};
pub use lease::{HolderView, read_lease};
pub use queue::Scope;
pub use requests::configmap_name as requests_configmap;
pub use start::{
    Config, DEFAULT_LEASE_NAME, DEFAULT_LEASE_NAMESPACE, DEFAULT_WORKERS, Mode, Tuning, launch,
    start,
};
pub use state::{
    AccessError, AccessErrorKind, ClusterEvent, Command, Connection, EventResult, EventVerb,
    LeaderHealth, LeaseInfo, LiveState, ReconcileEvent, RequestOutcome, WriteError,
};

/// Errors of the reconciler library. Each variant names what failed; callers add context.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the reconciler has stopped")]
    Stopped,
    /// Starting failed at the API server's edge (discovery, connection).
    #[error("{0}")]
    Kube(#[from] crate::cluster::KubeError),
    /// A request names something that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// Nobody holds the Lease: no copy would handle a request.
    #[error(
        "no copy reconciles: nobody holds Lease {lease} (start `kubectl vap run`, or the TUI with --reconcile)"
    )]
    NoLeader { lease: String },
    /// The request channel to the lease holder failed.
    #[error("{0}")]
    Request(String),
    #[error("{0}")]
    Other(String),
}
