//! The shared-cache reconciler (design.md, "The shared-cache reconciler"; gatekeeper#3287),
//! behind one door: [`Controller`], which [`launch`] returns. Nothing outside this module
//! reaches its stores, queue or locks.
//!
//! Public for the tier-2 tests, which run the same logic on an in-memory world:
//! - [`world`]: what the reconcilers read and write, as traits; [`logic`]: the two reconcilers;
//!   [`cache`]: the opinion cache `kind → Opinion`, written only by the template side;
//!   [`queue`]: the de-duplicating work queue; [`worker`]: one worker step, shared with the
//!   live workers.
//! - [`state`]: what a running copy publishes ([`LiveState`]) and the types it answers with.
//!
//! Private: `start` (start-up in phases), `shared` (what the tasks share; the world on the
//! cluster: `stores` for reads, `writer` for writes), `status`, `watches`, `lease`, `requests`
//! and `commands` (requests reach the leader wherever it runs), `events` (outcomes as Kubernetes
//! Events), `publish`, `outage`, `metrics`. [`gatekeeper`] (detecting Gatekeeper's own generator)
//! is public for the message that says how to switch it off.

pub mod cache;
mod commands;
mod events;
pub mod gatekeeper;
pub mod handle;
mod lease;
pub mod logic;
mod metrics;
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
pub use lease::{HolderView, default_identity, read_lease};
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

/// Asks the holder of Lease `namespace/lease` to handle `command` (through the requests
/// ConfigMap) and waits for its answer, as a copy that does not lead does.
pub async fn ask_holder(
    client: &kube::Client,
    namespace: &str,
    lease: &str,
    command: &Command,
    by: &str,
) -> Result<RequestOutcome, Error> {
    requests::ask(
        client,
        namespace,
        lease,
        command,
        by,
        requests::REQUEST_DEADLINE + std::time::Duration::from_secs(15),
    )
    .await
}
