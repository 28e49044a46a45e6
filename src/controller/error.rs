//! The errors of the reconciler library: [`Error`], and [`RequestError`], why a request was
//! not handled.

use crate::controller::reconcile::world;
use crate::controller::tasks;
use crate::controller::view::state;

/// Errors of the reconciler library. Each variant names what failed; callers add context.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the reconciler has stopped")]
    Stopped,
    /// Starting failed at the API server's edge (discovery, connection).
    #[error("{0}")]
    Kube(#[from] crate::cluster::KubeError),
    /// `hint`: a close name (` (did you mean "x"?)`), or nothing.
    #[error("ConstraintTemplate {name} not found{hint}")]
    NotFound { name: String, hint: String },
    #[error("ConstraintTemplate {0} defines no constraint kind: nothing to replay")]
    NoKind(String),
    #[error(
        "no copy reconciles: nobody holds Lease {lease} (start `kubectl vap run`, or the TUI with --reconcile)"
    )]
    NoLeader { lease: String },
    /// Not [`Error::NoLeader`]: who would handle a request is unknown.
    #[error(
        "cannot tell which copy reconciles: Lease {lease} is unreadable ({why}); the request was not sent"
    )]
    LeaseUnreadable {
        lease: String,
        #[source]
        why: state::LeaseRefused,
    },
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error("the reconciler task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
    #[error("{0}")]
    TaskFailed(#[from] tasks::Failure),
    /// (The Lease expires on its own.)
    #[error("the Lease was not released within {secs}s")]
    NotReleased { secs: u64 },
    /// A bug, not the cluster.
    #[error("encoding the request: {0}")]
    Encode(#[source] serde_json::Error),
}

/// Why a request (replay, reconcile) was not handled: here, or through the requests
/// ConfigMap of the Lease (`configmap`: `namespace/name`).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("{0} is not listed yet: try again in a moment")]
    NotListed(world::Unreadable),
    #[error(
        "this copy holds the Lease but may not write (leadership not confirmed, or Gatekeeper's generator is active)"
    )]
    MayNotWrite,
    #[error(
        "no copy serves requests: ConfigMap {configmap} does not exist (a `kubectl vap run` that leads creates it; `install --print` includes it)"
    )]
    NoConfigMap { configmap: String },
    #[error(
        "{doing} ConfigMap {configmap}: {}{}",
        crate::cluster::describe(source),
        if *forbidden { " (grant the kubectl-vap-operator ClusterRole from `kubectl vap install --print`)" } else { "" }
    )]
    ConfigMap {
        doing: &'static str,
        configmap: String,
        /// Refused by RBAC (401, 403): the words say which role grants it.
        forbidden: bool,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("the watch of the Lease ended")]
    WatchEnded,
    #[error(
        "no answer from the lease holder within {secs}s ({}; `kubectl vap` shows who holds the Lease)",
        if *read { "it read the request and may still carry it out, or ignored it as too many, too old or too large" } else { "nobody read the request: is the holder running?" }
    )]
    NoAnswer {
        secs: u64,
        /// The request was removed from the ConfigMap: some holder read it.
        read: bool,
    },
    /// The holder's answer under our request's id is for another command: someone rewrote
    /// the request in the ConfigMap (anyone who may ask may).
    #[error(
        "the lease holder answered `{answered}` for this request, not `{asked}`: the request was rewritten in the ConfigMap by someone else; ask again"
    )]
    NotOurs { asked: String, answered: String },
    /// Read from the holder's Lease, escaped.
    #[error("{holder}: {error}")]
    Failed { holder: String, error: String },
}
