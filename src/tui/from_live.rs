//! A published `LiveState` as the UI's data, and the data of a live view that is not running
//! (yet): pure, so every header and event-log state is tested without a cluster.

use super::action::Level;
use super::data::{
    ClusterInfo, Data, EventLine, Link, Origin, OutcomeKey, Says, WriteFailure, clock,
};
use crate::controller::LeaderHealth;
use crate::controller::log::Entry;
use crate::controller::{
    AccessError, AccessErrorKind, ClusterEvent, EventResult, EventVerb, LiveState, Log,
    ReconcileEvent,
};
use crate::core::Options;
use crate::core::settings::{Judged, judge};
use crate::snapshot::Snapshot;
use crate::text::printable;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Arc;

/// Where a reader is in one of the controller's logs: which log, and the last sequence it
/// saw there (another log — a new session, a restarted reconciler — is read from its start).
#[derive(Default, Clone, Copy)]
struct Seen {
    log: u64,
    seq: u64,
}

impl Seen {
    /// The entries of `log` not seen yet, and from now on none of them.
    fn newer<'a, T>(&mut self, log: &'a Log<T>) -> impl Iterator<Item = &'a Entry<T>> + 'a {
        let from = if self.log == log.id() { self.seq } else { 0 };
        *self = Seen {
            log: log.id(),
            seq: log.last_seq(),
        };
        // Entries dropped before they were read are not said: the log says what it keeps.
        let (entries, _dropped) = log.since(from);
        entries
    }
}

/// Numbers the lines of the reconciler's event log and of the cluster's Events it reads
/// back, so one sequence orders both: it asks each log for what is newer than the last
/// sequence it saw there.
#[derive(Default)]
pub struct EventCursor {
    events: Seen,
    cluster_events: Seen,
    /// The context whose Events are read now ([`EventCursor::enter`]).
    context: String,
    /// By context: the time of the newest cluster Event shown. A reconciler started again
    /// (or a context visited again) reads every Event anew into a new log; of those, only
    /// the ones newer than this are new to the user (a series counted up is newer too).
    shown_until: HashMap<String, DateTime<Utc>>,
    /// Who held the Lease when it was last looked at, and whether it was vacant: `None`
    /// until the Lease has been read once.
    lease: Option<(Option<String>, bool)>,
    /// Whether the holder was unresponsive (missed renewals) when last looked at.
    unresponsive: bool,
    /// A new holder said from its Events (and the holder the Lease named then), until the
    /// Lease names it too.
    inferred: Option<(String, Option<String>)>,
    seq: u64,
}

impl EventCursor {
    /// The live view reads `context` now (a session starts).
    pub fn enter(&mut self, context: &str) {
        context.clone_into(&mut self.context);
    }

    /// The lines not returned before: this copy's reconcile actions, then the cluster's
    /// Events that other copies reported (this copy's own are its reconcile actions already).
    pub fn new_events(&mut self, state: &LiveState) -> Vec<EventLine> {
        let mut out = Vec::new();
        let me = state.lease.identity.as_str();
        for e in self.events.newer(&state.events) {
            self.seq += 1;
            out.push(reconcile_line(self.seq, e, me));
        }
        if let Some(line) = self.lease_change(state) {
            self.seq += 1;
            out.push(EventLine {
                seq: self.seq,
                ..line
            });
        }
        let anew = self.cluster_events.log != state.cluster_events.id();
        let until = self.shown_until.get(&self.context).copied();
        let until = until.filter(|_| anew);
        // Oldest first: the namespaces' watches add to the log each as it reads.
        let mut cluster: Vec<&Entry<ClusterEvent>> = self
            .cluster_events
            .newer(&state.cluster_events)
            .filter(|e| until.is_none_or(|t| e.time > t))
            .collect();
        cluster.sort_by_key(|e| e.time);
        if let Some(newest) = cluster.last() {
            let mark = self
                .shown_until
                .entry(self.context.clone())
                .or_insert(newest.time);
            *mark = newest.time.max(*mark);
        }
        for e in cluster {
            if !me.is_empty() && e.reporter == me {
                continue;
            }
            if let Some(line) = self.inferred_leader(state, e) {
                self.seq += 1;
                out.push(EventLine {
                    seq: self.seq,
                    ..line
                });
            }
            self.seq += 1;
            out.push(cluster_line(self.seq, e));
        }
        out
    }

    /// A line when the Lease changed hands or fell vacant since it was last looked at: what
    /// the header shows now, said once in the log, wherever the leader runs. Its first reading
    /// is the header's alone (nothing changed yet), and this copy taking the Lease is its own
    /// reconciler's line already.
    fn lease_change(&mut self, state: &LiveState) -> Option<EventLine> {
        let lease = &state.lease;
        // Not read yet: an unheld Lease is vacant, so no holder and not vacant means unknown.
        if lease.holder.is_none() && !lease.vacant {
            return None;
        }
        let now = (lease.holder.clone(), lease.vacant);
        // A holder inferred from its Events: the Lease read before it still names the old one.
        if let Some((inferred, old)) = self.inferred.take() {
            if now.0.as_deref() == Some(inferred.as_str()) && !now.1 {
                return None;
            }
            if now.0 == old && !now.1 {
                self.inferred = Some((inferred, old));
                return None;
            }
        }
        let unresponsive = lease.unresponsive_until.is_some();
        let was_unresponsive = std::mem::replace(&mut self.unresponsive, unresponsive);
        let was = self.lease.replace(now.clone())?;
        let me = lease.identity.as_str();
        let name = |h: &Option<String>| match h.as_deref() {
            Some(h) if h == me => "this copy".to_string(),
            Some(h) => h.to_string(),
            None => "nobody".to_string(),
        };
        let (level, text) = match (&was, &now) {
            // Vacant before and now (its last holder let go, say): nothing new to say.
            ((_, true), (_, true)) => return None,
            ((before, false), (None, true)) => (
                Level::Warn,
                format!("nobody leads (was {}): no copy reconciles", name(before)),
            ),
            (_, (holder, true)) => (
                Level::Warn,
                format!(
                    "nobody leads: {} stopped renewing it; no copy reconciles",
                    name(holder)
                ),
            ),
            ((_, true), (holder, false)) => (
                Level::Info,
                format!("{} leads now (the Lease was vacant)", name(holder)),
            ),
            ((before, false), (holder, false)) if before != holder => (
                Level::Info,
                format!("{} leads now (was {})", name(holder), name(before)),
            ),
            // Held, but not renewed: a standby takes over when it expires; not "nobody".
            (_, (holder, false)) if unresponsive && !was_unresponsive => (
                Level::Warn,
                format!(
                    "{} unresponsive: it stopped renewing; a standby, if one runs, takes over when the Lease expires",
                    name(holder)
                ),
            ),
            _ => return None,
        };
        if lease.leading || (!me.is_empty() && lease.holder.as_deref() == Some(me)) {
            return None;
        }
        Some(EventLine::own(
            0,
            state.snapshot.now.map(clock).unwrap_or_default(),
            level,
            printable(&format!("lease {} — {text}", lease.lease)).into_owned(),
        ))
    }

    /// Only the holder publishes Events (they are fenced like writes), so an Event newer than
    /// the current holder's `acquireTime` from another copy means that copy leads now: said
    /// before its Events, not after them at the next reading of the Lease (every 3 s).
    fn inferred_leader(&mut self, state: &LiveState, e: &ClusterEvent) -> Option<EventLine> {
        let lease = &state.lease;
        let (holder, _) = self.lease.clone()?;
        let known = holder.as_deref()?;
        let newer = lease.since.is_some_and(|since| e.time > since);
        if e.reporter.is_empty() || e.reporter == known || !newer || lease.leading {
            return None;
        }
        self.lease = Some((Some(e.reporter.clone()), false));
        self.inferred = Some((e.reporter.clone(), holder.clone()));
        self.unresponsive = false;
        Some(EventLine::own(
            0,
            clock(e.time),
            Level::Info,
            printable(&format!(
                "lease {} — {} leads now (was {known})",
                lease.lease, e.reporter
            ))
            .into_owned(),
        ))
    }
}

/// A reconcile action's line. A replay or reconcile this copy handled (`me`) carries its
/// outcome: the request's answer says the same.
fn reconcile_line(seq: u64, e: &Entry<ReconcileEvent>, me: &str) -> EventLine {
    let request = matches!(
        e.verb,
        EventVerb::Replay | EventVerb::Reconcile | EventVerb::ReconcileAll
    );
    let outcome = (request && matches!(e.result, EventResult::Ok)).then(|| OutcomeKey {
        by: me.to_string(),
        summary: e.message.clone(),
    });
    EventLine {
        seq,
        says: Says::Reconcile(e.clone()),
        outcome,
    }
}

/// An Event's line.
fn cluster_line(seq: u64, e: &Entry<ClusterEvent>) -> EventLine {
    // The leader's Event about a request it handled (`handle_here` names them so).
    let outcome = matches!(e.reason.as_str(), "Replayed" | "Reconciled").then(|| OutcomeKey {
        by: e.reporter.clone(),
        summary: e.note.clone(),
    });
    EventLine {
        seq,
        says: Says::Cluster(e.clone()),
        outcome,
    }
}

/// One published state as the UI's data. Pure (analysis included): tested without a cluster.
pub fn data_from_live(
    state: &LiveState,
    context: &str,
    reconcile: bool,
    opts: &Options,
    events: Vec<EventLine>,
) -> Data {
    let lease = &state.lease;
    let link = Link::Running(state.connection.clone());
    let (opts, judged) = judged_by(state, opts);
    let info = ClusterInfo {
        context: context.to_string(),
        settings: Some(judged),
        server_version: state.server_version.clone(),
        vap_api: state.vap_api.clone(),
        leader: lease.clone(),
        queue_depth: state.queue_depth,
        link,
        gatekeeper_generator: state
            .gatekeeper_generator
            .clone()
            .filter(|_| reconcile && !state.writes_enabled),
        access_errors: state.access_errors.clone(),
        syncing: !state.synced,
        ..ClusterInfo::default()
    };
    // Replay and reconcile go to whichever copy holds the Lease, wherever it runs: nothing
    // to refuse here (an answer that no copy leads arrives in the event log).
    let mut data = Data::prepare(
        Origin::Live {
            reconciling: reconcile,
            refusal: None,
        },
        info,
        state.snapshot.clone(),
        &opts,
        events,
    );
    let mut failures = failed_writes(&state.events);
    // The leader's refused writes, wherever it runs: an observer has no event log of its own.
    if !lease.leading
        && !lease.vacant
        && let Some(h) = &lease.health
    {
        for (object, why) in &h.refused {
            if let Some((kind, name)) = object.split_once('/') {
                failures
                    .entry((kind.to_string(), name.to_string()))
                    .or_insert_with(|| WriteFailure {
                        why: why.clone(),
                        refused: true,
                    });
            }
        }
    }
    data.note_write_failures(failures);
    data
}

/// The options the tree is judged by: the leader's, as it publishes them with its renewals
/// (this copy's own when it leads), otherwise `local`, and why.
fn judged_by(state: &LiveState, local: &Options) -> (Options, Judged) {
    let lease = &state.lease;
    if lease.leading {
        return (
            local.clone(),
            Judged::Leader {
                holder: "this copy".into(),
                differences: Vec::new(),
            },
        );
    }
    match (
        lease.holder.as_deref().filter(|_| !lease.vacant),
        &lease.health,
    ) {
        (
            Some(holder),
            Some(LeaderHealth {
                settings: Some(s), ..
            }),
        ) => judge(local, Some((holder, s)), ""),
        (Some(holder), _) => judge(local, None, &format!("the leader {holder} publishes none")),
        (None, _) if lease.holder.is_none() && !lease.vacant => {
            judge(local, None, "the Lease is not read yet")
        }
        (None, _) => judge(local, None, "no copy leads"),
    }
}

/// The live view while it starts: an empty tree, and which attempt this is (after a failure:
/// why, and when the next one starts). `now` is the clock the header's countdown reads.
pub fn connecting(
    context: &str,
    reconcile: bool,
    attempt: u32,
    retry_at: Option<DateTime<Utc>>,
    message: Option<String>,
    now: DateTime<Utc>,
) -> Data {
    let info = ClusterInfo {
        context: context.to_string(),
        link: Link::Connecting {
            attempt,
            retry_at,
            message,
        },
        syncing: true,
        ..ClusterInfo::default()
    };
    let snapshot = Snapshot {
        now: Some(now),
        ..Snapshot::default()
    };
    let refusal = format!("not connected to {context} yet: nothing to send the request to");
    not_running(info, reconcile, refusal, snapshot)
}

/// Data that says the cluster cannot be shown, and why (the kubeconfig: retrying would read
/// the same file; a server without VAP v1, `NotServed`).
pub fn unavailable(
    context: &str,
    reconcile: bool,
    resource: &str,
    kind: AccessErrorKind,
    message: String,
) -> Data {
    let info = ClusterInfo {
        context: context.to_string(),
        access_errors: vec![AccessError {
            resource: resource.to_string(),
            kind,
            message,
        }],
        ..ClusterInfo::default()
    };
    let refusal = "not connected".to_string();
    not_running(info, reconcile, refusal, Snapshot::default())
}

/// The data of a live view with no reconciler to show: `info` says why, `refusal` why no
/// request can be sent.
fn not_running(info: ClusterInfo, reconcile: bool, refusal: String, snapshot: Snapshot) -> Data {
    let origin = Origin::Live {
        reconciling: reconcile,
        refusal: Some(refusal),
    };
    let opts = crate::load::cel::default_options();
    Data::prepare(origin, info, Arc::new(snapshot), &opts, Vec::new())
}

/// Why the last write of each object failed, for the objects whose last write did fail.
fn failed_writes(events: &Log<ReconcileEvent>) -> HashMap<(String, String), WriteFailure> {
    let mut failed = HashMap::new();
    for e in events {
        if !matches!(
            e.verb,
            EventVerb::Create | EventVerb::Update | EventVerb::Delete
        ) {
            continue;
        }
        let key = (e.object.kind.clone(), e.object.name.clone());
        match (&e.result, e.result.failure()) {
            (EventResult::Ok, _) => {
                failed.remove(&key);
            }
            (result, Some(why)) => {
                let refused = matches!(
                    result,
                    EventResult::WriteFailed(crate::controller::WriteError::Invalid(_))
                );
                failed.insert(key, WriteFailure { why, refused });
            }
            _ => {}
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::{Connection, LeaseInfo};
    use crate::model::ObjectRef;
    use crate::tui::data::access_label;

    /// What the TUI shows of `state`, judged by the default flags.
    fn data_of(state: &LiveState) -> Data {
        data_from_live(
            state,
            "ctx",
            false,
            &crate::load::cel::default_options(),
            Vec::new(),
        )
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    fn event(i: u32) -> ReconcileEvent {
        ReconcileEvent {
            time: at(i64::from(i)),
            verb: EventVerb::Update,
            object: ObjectRef::new("v1", "K", format!("o{i}")),
            result: if i.is_multiple_of(2) {
                EventResult::Ok
            } else {
                EventResult::Failed("boom".into())
            },
            message: String::new(),
        }
    }

    fn cluster_event(reporter: &str, count: u32) -> ClusterEvent {
        ClusterEvent {
            time: at(60),
            reporter: reporter.into(),
            regarding: ObjectRef::new(
                "templates.gatekeeper.sh/v1",
                "ConstraintTemplate",
                "k8srequiredlabels",
            ),
            reason: "Replayed".into(),
            note: "replayed 2 constraints of K8sRequiredLabels: 1 write".into(),
            warning: false,
            count,
        }
    }

    #[test]
    fn each_event_is_shown_once_even_when_the_log_wraps() {
        let mut state = LiveState::default();
        let mut cursor = EventCursor::default();
        state.push_event(event(0));
        state.push_event(event(1));
        let first = cursor.new_events(&state);
        assert_eq!(first.len(), 2);
        assert!(first[1].level() == Level::Error && first[1].text().contains("FAILED: boom"));
        assert!(cursor.new_events(&state).is_empty());
        // The bounded log drops its oldest entries: only the new ones come out, in order.
        for i in 2..(2 + crate::controller::state::EVENT_LOG_CAPACITY as u32) {
            state.push_event(event(i));
        }
        let more = cursor.new_events(&state);
        assert_eq!(more.len(), crate::controller::state::EVENT_LOG_CAPACITY);
        assert!(more.windows(2).all(|w| w[0].seq < w[1].seq));
        assert!(more[0].seq > first[1].seq);
    }

    #[test]
    fn cluster_events_are_shown_once_with_reporter_and_count_warnings_as_warnings() {
        let mut state = LiveState::default();
        state.lease.identity = "laptop-1".into();
        let mut cursor = EventCursor::default();
        state.push_event(event(0));
        state
            .cluster_events
            .push(cluster_event("gatekeeper-vap-7c9d", 1));
        // This copy's own Events are its reconcile actions already.
        state.cluster_events.push(cluster_event("laptop-1", 1));
        let mut failed = cluster_event("gatekeeper-vap-7c9d", 3);
        failed.reason = "WriteFailed".into();
        failed.note = "create ValidatingAdmissionPolicy/x: forbidden\x1b[2J".into();
        failed.warning = true;
        state.cluster_events.push(failed);
        let lines = cursor.new_events(&state);
        let text: Vec<(String, Level)> = lines.iter().map(|l| (l.text(), l.level())).collect();
        let text: Vec<(&str, Level)> = text.iter().map(|(t, l)| (t.as_str(), *l)).collect();
        assert_eq!(
            text,
            [
                ("update K/o0", Level::Info),
                (
                    "Replayed ConstraintTemplate/k8srequiredlabels: replayed 2 constraints of K8sRequiredLabels: 1 write — by gatekeeper-vap-7c9d",
                    Level::Info
                ),
                (
                    "WriteFailed ConstraintTemplate/k8srequiredlabels: create ValidatingAdmissionPolicy/x: forbidden\\x1b[2J — by gatekeeper-vap-7c9d (×3)",
                    // A failed write is red: a failure, not a warning.
                    Level::Error
                ),
            ]
        );
        assert!(lines.windows(2).all(|w| w[0].seq < w[1].seq));
        // The same state again: nothing new. The series counting up (the follower logs the
        // Event again): one new line.
        assert!(cursor.new_events(&state).is_empty());
        if let Some(e) = state.cluster_events.back() {
            let counted = ClusterEvent {
                count: 4,
                ..ClusterEvent::clone(e)
            };
            state.cluster_events.push(counted);
        }
        let again = cursor.new_events(&state);
        assert_eq!(again.len(), 1);
        assert!(again[0].text().ends_with("(×4)"), "{}", again[0].text());
        assert!(again[0].seq > lines[2].seq);
    }

    #[test]
    fn the_tree_is_judged_by_the_leaders_settings_and_says_so() {
        use crate::core::FailurePolicy;
        use crate::core::settings::Settings;
        let local = crate::load::cel::default_options();
        let leaders = Options {
            default_failure_policy: FailurePolicy::Ignore,
            ..crate::load::cel::default_options()
        };
        let mut state = LiveState {
            lease: LeaseInfo {
                lease: "gatekeeper-system/kubectl-vap".into(),
                identity: "laptop-1".into(),
                holder: Some("leader-1".into()),
                health: Some(LeaderHealth {
                    settings: Some(Settings::of(&leaders)),
                    ..LeaderHealth::default()
                }),
                ..LeaseInfo::default()
            },
            ..LiveState::default()
        };
        let data = data_from_live(&state, "ctx", false, &local, vec![]);
        assert_eq!(data.opts.default_failure_policy, FailurePolicy::Ignore);
        let Some(Judged::Leader {
            holder,
            differences,
        }) = &data.info.settings
        else {
            panic!("the leader's: {:?}", data.info.settings)
        };
        assert_eq!(holder, "leader-1");
        assert_eq!(
            differences
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["--default-failure-policy Fail (leader: Ignore) — judged by the leader's"]
        );
        // The holder stopped renewing: local flags, labelled, never the stale leader's.
        state.lease.vacant = true;
        let data = data_from_live(&state, "ctx", false, &local, vec![]);
        assert_eq!(data.opts.default_failure_policy, FailurePolicy::Fail);
        assert!(matches!(
            &data.info.settings,
            Some(Judged::Local { why }) if why == "no copy leads"
        ));
    }

    #[test]
    fn the_leader_and_its_health_come_from_the_lease() {
        let opts = crate::load::cel::default_options();
        let mut state = LiveState {
            queue_depth: 7,
            lease: LeaseInfo {
                lease: "gatekeeper-system/kubectl-vap".into(),
                identity: "laptop-1".into(),
                holder: Some("kubectl-vap-7c9d-abc".into()),
                since: Some(at(0)),
                health: Some(LeaderHealth {
                    pod: Some("kubectl-vap-7c9d".into()),
                    queue: 2,
                    last_sync: Some(at(30)),
                    ..LeaderHealth::default()
                }),
                ..LeaseInfo::default()
            },
            ..LiveState::default()
        };
        let info = |state: &LiveState| data_from_live(state, "ctx", false, &opts, vec![]).info;
        let i = info(&state);
        assert_eq!(
            i.leader_name().as_deref(),
            Some("kubectl-vap-7c9d"),
            "the pod first"
        );
        assert_eq!(
            (i.leader_queue(), i.leader_last_sync(), i.leader.since),
            (Some(2), Some(at(30)), Some(at(0)))
        );
        assert!(!i.leader.vacant && !i.leader.leading);
        // No pod: the identity. This copy leading: its own queue, now.
        state.lease.health = None;
        assert_eq!(
            info(&state).leader_name().as_deref(),
            Some("kubectl-vap-7c9d-abc")
        );
        assert_eq!(info(&state).leader_queue(), None);
        state.lease.leading = true;
        let i = info(&state);
        assert_eq!(
            (i.leader_name().as_deref(), i.leader_queue()),
            (Some("this copy"), Some(7))
        );
        state.lease.vacant = true;
        assert!(info(&state).leader.vacant);
        state.connection = Connection::Unreachable {
            since: at(5),
            message: "connection refused".into(),
        };
        assert_eq!(
            info(&state).link,
            Link::Running(Connection::Unreachable {
                since: at(5),
                message: "connection refused".into()
            })
        );
    }

    #[test]
    fn a_failed_write_shows_on_its_objects_finding_until_a_write_succeeds() {
        use crate::core::findings::Code;
        // A template that generates, no VAP yet: the analysis finds the VAP missing.
        let mut snapshot = crate::snapshot::Snapshot::default();
        snapshot
            .insert(
                serde_json::json!({
                    "apiVersion": "templates.gatekeeper.sh/v1", "kind": "ConstraintTemplate",
                    "metadata": { "name": "k8sx", "uid": "u1" },
                    "spec": { "crd": { "spec": { "names": { "kind": "K8sX" } } },
                              "targets": [{ "target": "admission.k8s.gatekeeper.sh",
                                            "code": [{ "engine": "K8sNativeValidation",
                                                       "source": { "generateVAP": true,
                                                                   "validations": [{ "expression": "true" }] } }] }] }
                }),
                crate::model::Source::default(),
            )
            .unwrap();
        let mut state = LiveState {
            snapshot: Arc::new(snapshot),
            ..LiveState::default()
        };
        let write = |result| ReconcileEvent {
            time: at(0),
            verb: EventVerb::Create,
            object: ObjectRef::new(
                "admissionregistration.k8s.io/v1",
                "ValidatingAdmissionPolicy",
                "gatekeeper-k8sx",
            ),
            result,
            message: "the template generates a VAP".into(),
        };
        let message = |state: &LiveState| {
            let data = data_from_live(
                state,
                "ctx",
                true,
                &crate::load::cel::default_options(),
                Vec::new(),
            );
            data.analysis
                .findings
                .iter()
                .find(|f| f.code == Code::PolicyMissing)
                .map(|f| f.message.clone())
                .unwrap()
        };
        assert!(!message(&state).contains("last write failed"));
        state.push_event(write(EventResult::Failed("forbidden: no create".into())));
        assert!(
            message(&state).ends_with("the last write failed: forbidden: no create"),
            "{}",
            message(&state)
        );
        state.push_event(write(EventResult::Ok));
        assert!(!message(&state).contains("last write failed"));

        // An observer: the leader elsewhere publishes the write the server refused; the
        // object's finding says so, and a write-refused error finding carries its message.
        state.lease = LeaseInfo {
            holder: Some("leader-1".into()),
            health: Some(LeaderHealth {
                refused: vec![(
                    "ValidatingAdmissionPolicy/gatekeeper-k8sx".into(),
                    "compilation failed: undefined field 'typo' (Invalid, 422)".into(),
                )],
                ..LeaderHealth::default()
            }),
            ..LeaseInfo::default()
        };
        state.events = Log::default();
        assert!(
            message(&state).ends_with(
                "the last write failed: compilation failed: undefined field 'typo' (Invalid, 422)"
            ),
            "{}",
            message(&state)
        );
        let data = data_of(&state);
        let refused: Vec<_> = data
            .analysis
            .findings
            .iter()
            .filter(|f| f.code == Code::WriteRefused)
            .collect();
        assert_eq!(refused.len(), 1, "{:?}", data.analysis.findings);
        assert_eq!(refused[0].object.name, "gatekeeper-k8sx");
        assert!(refused[0].message.contains("undefined field 'typo'"));
        assert!(
            data.summary.errors >= 2,
            "counted as an error: {:?}",
            data.summary
        );
    }

    /// A new leader's Events arrive before the next reading of the Lease: "leads now" is said
    /// before them, once, and not undone by the Lease read before the change.
    #[test]
    fn a_new_leader_is_said_before_its_events() {
        let mut cursor = EventCursor::default();
        let mut state = LiveState {
            lease: LeaseInfo {
                lease: "ns/l".into(),
                identity: "laptop-1".into(),
                holder: Some("old".into()),
                since: Some(at(0)),
                ..LeaseInfo::default()
            },
            ..LiveState::default()
        };
        assert!(cursor.new_events(&state).is_empty(), "the first reading");
        state.cluster_events.push(cluster_event("new", 1));
        let texts = |lines: Vec<EventLine>| lines.into_iter().map(|l| l.text()).collect::<Vec<_>>();
        let lines = texts(cursor.new_events(&state));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0], "lease ns/l — new leads now (was old)");
        assert!(lines[1].starts_with("Replayed"), "{lines:?}");
        // The Lease still read as before: nothing flips back.
        assert!(cursor.new_events(&state).is_empty());
        // The Lease read again names the new holder: said already.
        state.lease.holder = Some("new".into());
        state.lease.since = Some(at(50));
        assert!(cursor.new_events(&state).is_empty());
    }

    /// A reconciler started again reads every Event anew into a new log: what was shown is
    /// not shown again, what changed meanwhile is; another context's Events are all new.
    #[test]
    fn a_restarted_reconciler_does_not_repeat_the_events_shown() {
        let mut cursor = EventCursor::default();
        cursor.enter("a");
        let mut state = LiveState::default();
        state.cluster_events.push(cluster_event("leader-1", 1));
        assert_eq!(cursor.new_events(&state).len(), 1);
        let mut restarted = LiveState::default();
        restarted.cluster_events.push(cluster_event("leader-1", 1));
        let counted = ClusterEvent {
            time: at(61),
            ..cluster_event("leader-1", 2)
        };
        restarted.cluster_events.push(counted);
        let lines = cursor.new_events(&restarted);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].text().ends_with("(×2)"), "{}", lines[0].text());
        cursor.enter("b");
        let mut other = LiveState::default();
        other.cluster_events.push(cluster_event("leader-2", 1));
        assert_eq!(cursor.new_events(&other).len(), 1);
        // Back to the first: nothing it showed is said again.
        cursor.enter("a");
        let mut back = LiveState::default();
        back.cluster_events.push(cluster_event("leader-1", 1));
        assert!(cursor.new_events(&back).is_empty());
    }

    #[test]
    fn a_write_the_leader_could_not_make_is_red_in_the_log() {
        let mut state = LiveState::default();
        let mut e = cluster_event("leader-1", 1);
        e.reason = "WriteFailed".into();
        e.warning = true;
        state.cluster_events.push(e);
        let lines = EventCursor::default().new_events(&state);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].level(), Level::Error);
    }

    #[test]
    fn requests_are_not_refused_once_connected() {
        let opts = crate::load::cel::default_options();
        let refusal = |state: &LiveState, reconcile: bool| {
            data_from_live(state, "ctx", reconcile, &opts, Vec::new()).write_refusal()
        };
        let mut state = LiveState {
            writes_enabled: true,
            lease: LeaseInfo {
                holder: Some("other".into()),
                ..LeaseInfo::default()
            },
            ..LiveState::default()
        };
        // Observing, standby, leading: the request goes to the holder, wherever it runs.
        assert_eq!(refusal(&state, false), None);
        assert_eq!(refusal(&state, true), None);
        state.lease.leading = true;
        assert_eq!(refusal(&state, true), None);
        // Gatekeeper's generator is said, not a reason to refuse (the leader decides).
        state.writes_enabled = false;
        state.gatekeeper_generator = Some("gatekeeper-controller --default-create-vap".into());
        let data = data_from_live(&state, "ctx", true, &opts, Vec::new());
        assert_eq!(data.write_refusal(), None);
        assert!(data.info.gatekeeper_generator.is_some());
        // Before the live view runs there is nothing to send to.
        let waiting = connecting("ctx", false, 1, None, None, at(0));
        assert!(
            waiting
                .write_refusal()
                .is_some_and(|r| r.contains("not connected to ctx"))
        );
    }

    #[test]
    fn access_errors_keep_their_meaning() {
        let state = LiveState {
            access_errors: vec![
                crate::controller::AccessError {
                    resource: "validatingadmissionpolicies.admissionregistration.k8s.io".into(),
                    kind: AccessErrorKind::NotServed,
                    message: "not served".into(),
                },
                crate::controller::AccessError {
                    resource: "constrainttemplates.templates.gatekeeper.sh".into(),
                    kind: AccessErrorKind::NotServed,
                    message: "CRD missing".into(),
                },
                crate::controller::AccessError {
                    resource: "validatingadmissionpolicybindings.admissionregistration.k8s.io"
                        .into(),
                    kind: AccessErrorKind::Forbidden,
                    message: "403".into(),
                },
            ],
            synced: false,
            ..LiveState::default()
        };
        let data = data_of(&state);
        let kinds: Vec<_> = data.info.access_errors.iter().map(access_label).collect();
        assert_eq!(
            kinds,
            vec!["API disabled", "not installed", "restricted (403)"]
        );
        assert!(data.info.syncing);
    }
}
