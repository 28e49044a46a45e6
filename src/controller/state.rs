//! What the reconciler shows the outside world (the TUI, `run`, the one-shot commands): a
//! [`LiveState`] published on a `tokio::sync::watch` channel, and [`Command`]s sent back.
//! These types are a contract with `src/tui/`: extend them, do not reshape them.

pub use super::log::{Entry, Log};
pub use super::world::WriteError;
use crate::model::ObjectRef;
use crate::snapshot::Snapshot;
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// How many reconcile events the log keeps (oldest dropped first).
pub const EVENT_LOG_CAPACITY: usize = super::log::DEFAULT_CAPACITY;

/// Everything a view needs about the live cluster and this copy of the reconciler.
#[derive(Debug, Clone, Default)]
pub struct LiveState {
    /// The objects in the local stores (templates, constraints, CRDs, VAPs, bindings), with
    /// `now` set to when the snapshot was taken. Analyse it with `core::analyze`. Shared: each
    /// published state is a new `Arc`, built once; a view keeps it without copying it.
    pub snapshot: Arc<Snapshot>,
    /// True once every watch has listed its resource once (before that the snapshot is partial).
    pub synced: bool,
    pub lease: LeaseInfo,
    /// The served VAP API, e.g. `admissionregistration.k8s.io/v1`; `None` if not discovered (yet).
    pub vap_api: Option<String>,
    /// The API server's `gitVersion`, e.g. `v1.36.3`.
    pub server_version: Option<String>,
    /// Resources this copy cannot read (403, missing CRD, disabled API): shown, never as an empty list.
    pub access_errors: Vec<AccessError>,
    /// If Gatekeeper's own generator looks active: what was seen (this copy then refuses to write
    /// unless `--take-over`).
    pub gatekeeper_generator: Option<String>,
    /// Whether this copy may write at all (`false`: read-only TUI, or refused because of Gatekeeper).
    pub writes_enabled: bool,
    /// Work items queued or being processed.
    pub queue_depth: usize,
    /// Reconcile actions of this copy, oldest first, at most [`EVENT_LOG_CAPACITY`]. The
    /// log itself, shared (cloning it copies no entry): a view asks it for the entries newer
    /// than the last sequence it saw ([`Log::since`]).
    pub events: Log<ReconcileEvent>,
    /// Kubernetes Events that any copy of kubectl-vap reported (the leader's outcomes, wherever
    /// it runs), as this copy read them: an Event again only when it changed (a series counting
    /// up). At most [`EVENT_LOG_CAPACITY`]; sequences are this copy's (see `events::follow`).
    pub cluster_events: Log<ClusterEvent>,
    /// Whether the API server answers this copy.
    pub connection: Connection,
}

/// Whether the API server answers this copy's requests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Connection {
    /// Answered (whatever the answer).
    #[default]
    Connected,
    /// No answer since `since` (connection refused, reset, timed out); everything retries.
    Unreachable {
        since: DateTime<Utc>,
        message: String,
    },
}

/// A Kubernetes Event (events.k8s.io) reported by a copy of kubectl-vap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterEvent {
    /// When it last happened (the series' last observation, or the event time).
    pub time: DateTime<Utc>,
    /// The reporting copy (its identity: pod name in a cluster).
    pub reporter: String,
    /// The template or constraint it regards.
    pub regarding: ObjectRef,
    /// `Written`, `WriteFailed`, `Replayed`, `Reconciled`, … (PascalCase, Kubernetes' style).
    pub reason: String,
    pub note: String,
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// How many times it happened (1 without a series).
    pub count: u32,
}

/// What the lease holder publishes with its renewals, for every copy to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderHealth {
    /// The holder's pod, when it runs in a cluster.
    pub pod: Option<String>,
    /// Work items it had queued at its last renewal.
    pub queue: usize,
    /// When its queue last drained (everything reconciled).
    pub last_sync: Option<DateTime<Utc>>,
    /// The generation options it acts on (`None` from a leader that publishes none): every
    /// view judges the cluster by them.
    pub settings: Option<crate::core::settings::Settings>,
    /// Writes the API server refuses now: (`Kind/name`, its message). A view elsewhere shows
    /// them on the object ("the last write failed").
    pub refused: Vec<(String, String)>,
}

/// What a request (replay, reconcile) did, as the copy that handled it reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestOutcome {
    /// The identity of the copy that handled it (the lease holder).
    pub handled_by: String,
    /// One line: "replayed 25 constraints of K8sRequiredLabels: 2 writes".
    pub summary: String,
    /// Writes the request caused.
    pub writes: u64,
    /// Writes that failed (not counting conflicts that were retried away).
    pub failures: u64,
    /// Of those, the objects whose write the API server refused (422: fix the template or
    /// constraint; not retried).
    pub refused: usize,
    /// The templates and constraints it concerned.
    pub keys: usize,
}

/// Leader election as this copy sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseInfo {
    /// `namespace/name` of the Lease.
    pub lease: String,
    /// This copy's identity (`holderIdentity` when it leads).
    pub identity: String,
    /// The current `holderIdentity` of the Lease, if anyone holds it.
    pub holder: Option<String>,
    /// True while this copy holds the lease (and so is the only writer).
    pub leading: bool,
    /// False when this copy does not take part in the election (read-only).
    pub participating: bool,
    /// When the current holder acquired the Lease (its `acquireTime`).
    pub since: Option<DateTime<Utc>>,
    /// What the holder last published with its renewals.
    pub health: Option<LeaderHealth>,
    /// Nobody holds the Lease, or its holder stopped renewing it (seen unchanged for a whole
    /// lease duration, and no standby took it within the grace after): no copy reconciles.
    pub vacant: bool,
    /// The Lease could not be read (e.g. `forbidden`): who leads is unknown — not "nobody".
    pub unreadable: Option<LeaseRefused>,
    /// Its holder missed its renewals: when its Lease expires (a standby takes over then).
    pub unresponsive_until: Option<DateTime<Utc>>,
}

pub use crate::cluster::access::{AccessError, AccessErrorKind};

/// The API server refused to show the Lease (an answer, not a silence): who leads is unknown.
/// Holds the refusal itself, in an `Arc` since every published view keeps a copy; shown in a
/// word or two (`forbidden`, `unauthorized`), else in the server's words. The refusal is not
/// its `source`: the error formatter would append the server's whole sentence to the word.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LeaseRefused {
    /// The election's get, create or update was refused.
    #[error("{}", refusal(crate::cluster::status_code(.0), || crate::cluster::describe(.0)))]
    Elector(Arc<kube::Error>),
    /// An observer's watch of the Lease was refused.
    #[error("{}", refusal(crate::cluster::watch::status(.0), || crate::cluster::watch::describe(.0)))]
    Watch(Arc<kube::runtime::watcher::Error>),
}

impl LeaseRefused {
    /// The HTTP status of the refusal (`None` only for an error that is no answer at all).
    pub fn status(&self) -> Option<u16> {
        match self {
            LeaseRefused::Elector(e) => crate::cluster::status_code(e),
            LeaseRefused::Watch(e) => crate::cluster::watch::status(e),
        }
    }
}

/// Equal when it reads the same: each retry brings a new error, and a view is published
/// again only when what it shows changed.
impl PartialEq for LeaseRefused {
    fn eq(&self, other: &LeaseRefused) -> bool {
        self.status() == other.status() && self.to_string() == other.to_string()
    }
}

impl Eq for LeaseRefused {}

fn refusal(status: Option<u16>, words: impl FnOnce() -> String) -> String {
    match status {
        Some(401) => "unauthorized".into(),
        Some(403) => "forbidden".into(),
        _ => words(),
    }
}

/// One line of the event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileEvent {
    pub time: DateTime<Utc>,
    pub verb: EventVerb,
    pub object: ObjectRef,
    pub result: EventResult,
    /// Why (the reason of the write, or the command's effect).
    pub message: String,
}

/// One line for people, as `run --once`, `reconcile` and the TUI's event log print it:
/// `update Kind/name — why`; ` skipped: …` or ` FAILED: …` after the object when it was not
/// done (a conflict, retried at once, says so without FAILED).
impl std::fmt::Display for ReconcileEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.verb.as_str(), self.object)?;
        match &self.result {
            EventResult::Ok => {}
            EventResult::Skipped(why) => write!(f, " skipped: {why}")?,
            EventResult::WriteFailed(e) if e.retried_away() => write!(f, " {e}")?,
            EventResult::Failed(why) => write!(f, " FAILED: {why}")?,
            EventResult::WriteFailed(e) => write!(f, " FAILED: {e}")?,
        }
        if !self.message.is_empty() {
            write!(f, " — {}", self.message)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventVerb {
    Create,
    Update,
    Delete,
    /// A command was handled (replay, reconcile).
    Replay,
    Reconcile,
    ReconcileAll,
    /// Leadership changed (object: the Lease).
    Lease,
    /// Gatekeeper's own generator was found switched on (writes stop) or off (writes resume).
    Gatekeeper,
}

impl EventVerb {
    pub fn as_str(self) -> &'static str {
        match self {
            EventVerb::Create => "create",
            EventVerb::Update => "update",
            EventVerb::Delete => "delete",
            EventVerb::Replay => "replay",
            EventVerb::Reconcile => "reconcile",
            EventVerb::ReconcileAll => "reconcile-all",
            EventVerb::Lease => "lease",
            EventVerb::Gatekeeper => "gatekeeper",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventResult {
    Ok,
    /// Not done, and why (not the leader, foreign object, Gatekeeper's generator active).
    Skipped(String),
    /// A command failed (e.g. its template does not exist).
    Failed(String),
    /// A write failed, and how.
    WriteFailed(WriteError),
}

impl EventResult {
    pub fn as_str(&self) -> &str {
        match self {
            EventResult::Ok => "ok",
            EventResult::Skipped(_) => "skipped",
            EventResult::Failed(_) | EventResult::WriteFailed(_) => "failed",
        }
    }

    /// Why it failed, if it did.
    pub fn failure(&self) -> Option<String> {
        match self {
            EventResult::Failed(why) => Some(why.clone()),
            EventResult::WriteFailed(e) => Some(e.to_string()),
            _ => None,
        }
    }

    /// A failure that counts: not a conflict, which is retried at once and passes.
    pub fn is_failure(&self) -> bool {
        match self {
            EventResult::Failed(_) => true,
            EventResult::WriteFailed(e) => !e.retried_away(),
            _ => false,
        }
    }
}

/// How a copy that leads tells its health, when asked (each renewal of the Lease, each
/// publish): one function, shared by both.
pub type Health = Arc<dyn Fn() -> LeaderHealth + Send + Sync>;

/// What a view (or a one-shot command) asks the reconciler to do. Results land in the event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Re-enqueue every constraint of this template's kind (the TUI's `p`).
    Replay(String),
    /// Reconcile this template: its VAP, then its constraints' bindings (the TUI's `r`).
    Reconcile(String),
    /// Reconcile everything, sweeping orphans (the TUI's `R`).
    ReconcileAll,
}

impl LiveState {
    /// Appends to the bounded event log.
    pub fn push_event(&mut self, event: ReconcileEvent) {
        self.events.push(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::apply::ApplyError;

    #[test]
    fn an_event_is_one_line_that_says_what_was_not_done() {
        let vap = ObjectRef::new("v1", "ValidatingAdmissionPolicy", "gatekeeper-k8sx");
        let event = |result, message: &str| ReconcileEvent {
            object: vap.clone(),
            result,
            message: message.into(),
            time: DateTime::UNIX_EPOCH,
            verb: EventVerb::Create,
        };
        let vap = "create ValidatingAdmissionPolicy/gatekeeper-k8sx";
        assert_eq!(
            event(EventResult::Ok, "policy-missing").to_string(),
            format!("{vap} — policy-missing")
        );
        assert_eq!(
            event(EventResult::Skipped("not the leader".into()), "").to_string(),
            format!("{vap} skipped: not the leader")
        );
        // The server's answer, as the writer keeps it.
        let answer = std::sync::Arc::new(ApplyError::Failed {
            what: vap.into(),
            source: Box::new(kube::Error::Api(Box::new(kube::core::Status {
                message: "spec.validations: Required value".into(),
                code: 422,
                ..Default::default()
            }))),
        });
        let failed = EventResult::WriteFailed(WriteError::Invalid(answer));
        assert_eq!(
            event(failed, "policy-missing").to_string(),
            format!("{vap} FAILED: {vap}: spec.validations: Required value (422) — policy-missing")
        );
        let conflict = EventResult::WriteFailed(WriteError::Conflict(std::sync::Arc::new(
            ApplyError::Conflict(vap.into()),
        )));
        assert_eq!(
            event(conflict, "").to_string(),
            format!("{vap} conflict (the object changed on the server); retried")
        );
    }

    #[test]
    fn a_refused_lease_reads_as_a_word_and_the_request_error_says_it_once() {
        let refusal = |code: u16| {
            LeaseRefused::Elector(Arc::new(kube::Error::Api(Box::new(kube::core::Status {
                message: "leases.coordination.k8s.io \"l\" is forbidden: User \"u\" cannot get"
                    .into(),
                reason: "Forbidden".into(),
                code,
                ..Default::default()
            }))))
        };
        assert_eq!(refusal(403).to_string(), "forbidden");
        assert_eq!(refusal(401).to_string(), "unauthorized");
        assert_eq!(
            refusal(500).to_string(),
            "leases.coordination.k8s.io \"l\" is forbidden: User \"u\" cannot get (Forbidden, 500)"
        );
        // Two refusals that read the same are the same view (no new publish per retry).
        assert_eq!(refusal(403), refusal(403));
        assert_ne!(refusal(403), refusal(401));
        let e = super::super::Error::LeaseUnreadable {
            lease: "ns/l".into(),
            why: refusal(403),
        };
        assert_eq!(
            crate::text::error_text(&e),
            "cannot tell which copy reconciles: Lease ns/l is unreadable (forbidden); the request was not sent"
        );
    }
}
