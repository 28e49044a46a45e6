//! What the reconciler shows the outside world (the TUI, `run`, the one-shot commands): a
//! [`LiveState`] published on a `tokio::sync::watch` channel (what is true now), [`Happened`]
//! on a `tokio::sync::broadcast` feed (what happened, each once), and [`Command`]s sent back.
//! These types are a contract with `src/tui/`: a view holds them as they are.

pub use crate::controller::reconcile::world::WriteError;
use crate::core::Options;
use crate::core::settings::{Judged, judge};
use crate::model::{ObjectId, ObjectRef};
use crate::snapshot::Snapshot;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::sync::Arc;

/// How many happenings the feed holds for a reader that is behind (then it is told how many
/// it missed), and how many reconcile actions a copy keeps for
/// [`crate::controller::Controller::events`].
pub const EVENT_LOG_CAPACITY: usize = 500;

/// Everything a view needs about the live cluster and this copy of the reconciler.
#[derive(Debug, Clone, Default)]
pub struct LiveState {
    /// The objects in the local stores, `now` when taken (analyse it with `core::analyze`).
    /// Each published state is a new `Arc`, built once: a view keeps it without copying it.
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
    pub connection: Connection,
    /// The objects whose last write failed, and how: this copy's own while it leads or nobody
    /// else does; the leader's refused writes (as it publishes them with its health) when
    /// another copy leads. Gone once a write of the object passes.
    pub failed_writes: Arc<BTreeMap<ObjectId, FailedWrite>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedWrite {
    /// The server's answer (or why there was none), in one line.
    pub why: String,
    /// The API server refused the body (422): no retry helps; the template or constraint
    /// must change.
    pub refused: bool,
    /// Not written for a while: another writer keeps undoing this copy's writes of it
    /// (`core::contest`); `why` names it.
    pub contested: bool,
}

/// What happened, as a copy tells it once on its feed ([`crate::controller::Controller::feed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Happened {
    /// A reconcile action of this copy (a write, a request handled, its own Lease won or lost).
    Reconcile(ReconcileEvent),
    /// A Kubernetes Event another copy of kubectl-vap reported (the leader's outcomes,
    /// wherever it runs): once per change (a series counting up is a change).
    Cluster(ClusterEvent),
    /// The Lease changed hands, fell vacant, or its holder stopped renewing ([`LeaseInfo::turn`]).
    Lease(LeaseChange),
}

/// A change of who leads (a view words it: `lease ns/name — HOLDER leads now (was OTHER)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseChange {
    pub time: DateTime<Utc>,
    /// `namespace/name` of the Lease.
    pub lease: String,
    pub what: LeaseTurn,
}

/// How the Lease turned. Names are the holders' identities, `this copy` for this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseTurn {
    /// `holder` leads now; `was` held it before (`None`: the Lease was vacant).
    Leads { holder: String, was: Option<String> },
    /// Nobody holds it: `was` let it go.
    Released { was: String },
    /// `holder` stopped renewing and nobody took it over.
    Expired { holder: String },
    /// `holder` missed its renewals; a standby takes over when it expires, if one runs.
    Unresponsive { holder: String },
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

/// The reason of an Event a copy publishes (`tell::events`), spelled once: the copy writes
/// [`EventReason::as_str`] into the Event, and the views read it back from the cluster's
/// Events with [`EventReason::of`] ([`ClusterEvent::known_reason`]), so what one side writes
/// is what the other recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventReason {
    /// The writes of a burst that passed.
    Written,
    /// The writes of a burst that failed (a Warning): an error in the views.
    WriteFailed,
    /// Another writer keeps undoing the leader's writes (a Warning): an error in the views.
    WriterConflict,
    /// A template or constraint that cannot be generated or bound as written (a Warning).
    Invalid,
    /// A request to replay a kind's constraints, handled.
    Replayed,
    /// A request to reconcile, handled.
    Reconciled,
}

impl EventReason {
    pub const ALL: [EventReason; 6] = [
        EventReason::Written,
        EventReason::WriteFailed,
        EventReason::WriterConflict,
        EventReason::Invalid,
        EventReason::Replayed,
        EventReason::Reconciled,
    ];

    /// The Event's `reason`, as written into the cluster (PascalCase, Kubernetes' style).
    pub fn as_str(self) -> &'static str {
        match self {
            EventReason::Written => "Written",
            EventReason::WriteFailed => "WriteFailed",
            EventReason::WriterConflict => "WriterConflict",
            EventReason::Invalid => "Invalid",
            EventReason::Replayed => "Replayed",
            EventReason::Reconciled => "Reconciled",
        }
    }

    /// The reason an Event's `reason` says, if it is one of ours.
    pub fn of(reason: &str) -> Option<EventReason> {
        EventReason::ALL.into_iter().find(|r| r.as_str() == reason)
    }

    /// Whether the views show it, from a holder of the Lease, as an error: a write the leader
    /// could not make, or stopped making because another writer undoes it.
    pub fn is_failed_write(self) -> bool {
        matches!(self, EventReason::WriteFailed | EventReason::WriterConflict)
    }
}

impl std::fmt::Display for EventReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Kubernetes Event (events.k8s.io) reported by a copy of kubectl-vap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterEvent {
    /// When it last happened (the series' last observation, or the event time).
    pub time: DateTime<Utc>,
    /// The reporting copy (its identity: pod name in a cluster).
    pub reporter: String,
    /// The template, constraint or Lease it regards.
    pub regarding: ObjectRef,
    /// As the Event says it: one of ours ([`EventReason`], [`ClusterEvent::known_reason`]),
    /// or anything else an Event with our label was created with.
    pub reason: String,
    pub note: String,
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// How many times it happened (1 without a series).
    pub count: u32,
    /// The request it reports the outcome of (its id), if any: its answer carries the same id.
    pub request: Option<String>,
    /// Its reporter holds or held the Lease as this copy has seen it. Otherwise anyone allowed
    /// to create Events could have written it: views mark it and never take it for a
    /// request's outcome or a failure of the leader's.
    pub from_a_holder: bool,
}

impl ClusterEvent {
    /// Its reason, if it is one a copy publishes.
    pub fn known_reason(&self) -> Option<EventReason> {
        EventReason::of(&self.reason)
    }
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
    /// Writes the API server refuses now: (the object, its message). A view elsewhere shows
    /// them on the object ("the last write failed").
    pub refused: Vec<(ObjectId, String)>,
    /// Objects it does not write for now because another writer keeps undoing its writes:
    /// (the object, what it says about it).
    pub contested: Vec<(ObjectId, String)>,
    /// What is wrong with the guard that confines it (`run --expect-guard`), if anything.
    pub guard: Option<String>,
}

/// What a request (replay, reconcile) did, as the copy that handled it reports it; but for
/// its id and handler, as the holder's answer in the Lease carries it (`channel::Published`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct RequestOutcome {
    /// The request's id: the handler's Event and event-log line about it carry it too.
    #[serde(skip)]
    pub id: String,
    /// The identity of the copy that handled it (the lease holder).
    #[serde(skip)]
    pub handled_by: String,
    /// One line: "replayed 25 constraints of K8sRequiredLabels: 2 writes".
    pub summary: String,
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

impl LeaseInfo {
    /// Who holds the Lease is not known (yet): not read, or refused. Not "nobody".
    pub fn unknown(&self) -> bool {
        self.holder.is_none() && !self.vacant
    }

    /// The one rule for whose generation settings a view judges the cluster by (the TUI and
    /// `check`/`plan`/`audit` alike): the leader's, as it publishes them with its renewals
    /// (this copy's own when it leads), otherwise `local`, and why.
    pub fn judge(&self, local: &Options) -> (Options, Judged) {
        if self.leading {
            return judge(local, Some(("this copy", &Default::default())), "");
        }
        let holder = self.holder.as_deref().filter(|_| !self.vacant);
        let settings = self.health.as_ref().and_then(|h| h.settings.as_ref());
        let why = match (holder, settings) {
            (Some(holder), Some(s)) => return judge(local, Some((holder, s)), ""),
            (Some(holder), None) => format!("the leader {holder} publishes none"),
            (None, _) if self.unreadable.is_some() => format!("Lease {} is unreadable", self.lease),
            (None, _) if self.unknown() => "the Lease is not read yet".into(),
            (None, _) => format!("no copy leads: Lease {} is vacant", self.lease),
        };
        judge(local, None, &why)
    }

    /// What changed in who leads from `self` to `next`, as a view tells it once: not the
    /// first reading (nothing changed yet), not this copy taking the Lease (its reconcile
    /// action says so), not a vacant Lease again.
    pub fn turn(&self, next: &LeaseInfo) -> Option<LeaseTurn> {
        if self.unknown() || next.unknown() || next.leading {
            return None;
        }
        let me = |h: &str| !next.identity.is_empty() && h == next.identity;
        if next.holder.as_deref().is_some_and(me) {
            return None;
        }
        let name = |h: &str| String::from(if me(h) { "this copy" } else { h });
        let was = self.holder.as_deref().filter(|_| !self.vacant).map(name);
        Some(match (self.vacant, next.vacant, next.holder.as_deref()) {
            (true, true, _) => return None,
            (false, true, None) => LeaseTurn::Released {
                was: was.unwrap_or_else(|| "nobody".into()),
            },
            (_, true, Some(h)) => LeaseTurn::Expired { holder: name(h) },
            (_, false, Some(h)) if self.vacant || self.holder.as_deref() != Some(h) => {
                LeaseTurn::Leads {
                    holder: name(h),
                    was,
                }
            }
            // Held, but not renewed: a standby takes over when it expires; not "nobody".
            (false, false, Some(h))
                if next.unresponsive_until.is_some() && self.unresponsive_until.is_none() =>
            {
                LeaseTurn::Unresponsive { holder: name(h) }
            }
            _ => return None,
        })
    }
}

pub use crate::cluster::access::{AccessError, AccessErrorKind};

/// The API server refused to show the Lease (an answer, not a silence): who leads is unknown.
/// In a word or two (`forbidden`, `unauthorized`), else the server's words; equal when it
/// reads the same, so a retry's new error does not publish the view again. Not a `source`:
/// the error formatter would append the server's whole sentence to the word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LeaseRefused(String);

impl LeaseRefused {
    /// A refusal with HTTP `status`, said by `words` unless it is RBAC's.
    pub fn new(status: Option<u16>, words: impl FnOnce() -> String) -> Self {
        LeaseRefused(match status {
            Some(401) => "unauthorized".into(),
            Some(403) => "forbidden".into(),
            _ => words(),
        })
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
    /// The request this line reports the outcome of (its id), if it does.
    pub request: Option<String>,
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
    /// The guard that confines this copy's account was found gone or changed, or whole again.
    Guard,
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
            EventVerb::Guard => "guard",
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
    WriteFailed(WriteError),
}

impl EventResult {
    pub fn failure(&self) -> Option<String> {
        match self {
            EventResult::Failed(why) => Some(why.clone()),
            EventResult::WriteFailed(e) => Some(e.to_string()),
            _ => None,
        }
    }

    /// A failure that counts: not a conflict, which is retried at once and passes.
    pub fn is_failure(&self) -> bool {
        matches!(self, EventResult::Failed(_))
            || matches!(self, EventResult::WriteFailed(e) if !e.retried_away())
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::apply::ApplyError;

    /// What a copy writes as an Event's reason is what the views recognise, and the words in
    /// the cluster stay what they were (dashboards and `kubectl events` filters read them).
    #[test]
    fn an_event_reason_reads_back_as_itself() {
        for r in EventReason::ALL {
            assert_eq!(EventReason::of(r.as_str()), Some(r));
            assert_eq!(r.to_string(), r.as_str());
        }
        let words: Vec<&str> = EventReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            words,
            [
                "Written",
                "WriteFailed",
                "WriterConflict",
                "Invalid",
                "Replayed",
                "Reconciled"
            ]
        );
        for other in ["", "writefailed", "WriteFailed ", "Forbidden"] {
            assert_eq!(EventReason::of(other), None, "{other:?}");
        }
        let failed: Vec<_> = EventReason::ALL
            .into_iter()
            .filter(|r| r.is_failed_write())
            .collect();
        assert_eq!(
            failed,
            [EventReason::WriteFailed, EventReason::WriterConflict]
        );
    }

    #[test]
    fn an_event_is_one_line_that_says_what_was_not_done() {
        let vap = ObjectRef::new("v1", "ValidatingAdmissionPolicy", "gatekeeper-k8sx");
        let event = |result, message: &str| ReconcileEvent {
            object: vap.clone(),
            result,
            message: message.into(),
            time: DateTime::UNIX_EPOCH,
            verb: EventVerb::Create,
            request: None,
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

    /// Each change once, however often the same reading arrives; this copy named as such.
    #[test]
    fn each_turn_of_the_lease_is_told_once() {
        let mut seen = LeaseInfo {
            lease: "gatekeeper-system/kubectl-vap".into(),
            identity: "laptop-1".into(),
            ..LeaseInfo::default()
        };
        let mut told = Vec::new();
        let mut step = |holder: Option<&str>, vacant: bool| {
            let next = LeaseInfo {
                holder: holder.map(String::from),
                vacant,
                leading: holder == Some("laptop-1"),
                ..seen.clone()
            };
            // Every reading arrives twice.
            for _ in 0..2 {
                told.extend(seen.turn(&next));
                seen = next.clone();
            }
        };
        step(Some("kubectl-vap-7c9d5-x2k4"), false);
        step(Some("laptop-2"), false);
        step(Some("laptop-2"), true);
        step(None, true);
        step(Some("kubectl-vap-7c9d5-x2k4"), false);
        step(None, true);
        step(Some("laptop-1"), false);
        step(Some("kubectl-vap-7c9d5-x2k4"), false);
        let leads = |holder: &str, was: Option<&str>| LeaseTurn::Leads {
            holder: holder.into(),
            was: was.map(String::from),
        };
        let other = "kubectl-vap-7c9d5-x2k4";
        assert_eq!(
            told,
            [
                leads("laptop-2", Some(other)),
                LeaseTurn::Expired {
                    holder: "laptop-2".into()
                },
                leads(other, None),
                LeaseTurn::Released { was: other.into() },
                leads(other, Some("this copy")),
            ]
        );
        // A holder that stops renewing: unresponsive once, before the Lease falls vacant.
        let held = LeaseInfo {
            holder: Some("a".into()),
            ..seen.clone()
        };
        let late = LeaseInfo {
            unresponsive_until: Some(DateTime::UNIX_EPOCH),
            ..held.clone()
        };
        assert_eq!(
            held.turn(&late),
            Some(LeaseTurn::Unresponsive { holder: "a".into() })
        );
        assert_eq!(late.turn(&late), None);
        // Unknown (not read, or refused) is no turn either way.
        let unknown = LeaseInfo {
            holder: None,
            vacant: false,
            ..held.clone()
        };
        assert_eq!(unknown.turn(&held), None);
        assert_eq!(held.turn(&unknown), None);
    }

    #[test]
    fn a_refused_lease_reads_as_a_word_and_the_request_error_says_it_once() {
        let refusal = |code: u16| {
            let e = kube::Error::Api(Box::new(kube::core::Status {
                message: "leases.coordination.k8s.io \"l\" is forbidden: User \"u\" cannot get"
                    .into(),
                reason: "Forbidden".into(),
                code,
                ..Default::default()
            }));
            LeaseRefused::new(Some(code), || crate::cluster::describe(&e))
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
        let e = crate::controller::error::Error::LeaseUnreadable {
            lease: "ns/l".into(),
            why: refusal(403),
        };
        assert_eq!(
            crate::text::error_text(&e),
            "cannot tell which copy reconciles: Lease ns/l is unreadable (forbidden); the request was not sent"
        );
    }
}
