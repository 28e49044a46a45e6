//! What the UI shows, as the data source hands it over: a snapshot, its analysis (computed off
//! the UI thread, once per change), the controller's published state as it is (live), and
//! what is the UI's own (which context, the live view starting).

use crate::controller::{
    AccessError, AccessErrorKind, Connection, EventReason, EventResult, EventVerb, Happened,
    LeaseChange, LeaseInfo, LeaseTurn, LiveState,
};
use crate::core::settings::Judged;
use crate::core::{Analysis, Options, Summary, analyze};
use crate::model::ObjectId;
use crate::snapshot::Snapshot;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Arc;

/// How urgent a message is (a flash, an event line): its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
    Error,
}

/// Where the data comes from, which decides whether write actions can run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `-f`: files or stdin. Nothing to reconcile.
    Offline { paths: Vec<String> },
    /// A cluster. `reconciling`: this copy runs the embedded reconciler (`--reconcile`);
    /// `refusal`: why replay and reconcile cannot be sent now (not connected yet), if they
    /// cannot; connected, they go to the lease holder wherever it runs.
    Live {
        reconciling: bool,
        refusal: Option<String>,
    },
}

/// How the UI names why a resource could not be read: the controller's kind, with a VAP
/// API resource that is not served told apart (the API is disabled, not a CRD missing).
pub fn access_label(e: &AccessError) -> &'static str {
    match e.kind {
        AccessErrorKind::Forbidden => "restricted (403)",
        AccessErrorKind::NotServed if e.resource.contains("admissionregistration") => {
            "API disabled"
        }
        AccessErrorKind::NotServed => "not installed",
        AccessErrorKind::Other => "unreadable",
    }
}

/// Whether the tree is made of this resource. The Lease and the cluster's Events are not:
/// a copy refused them still shows every template, so an empty tree is not their doing.
pub fn is_tree_resource(e: &AccessError) -> bool {
    ![
        crate::controller::EVENTS_RESOURCE,
        crate::controller::LEASES,
    ]
    .contains(&e.resource.as_str())
}

/// One line of the event log: what the controller told (shared with every reader of its
/// feed, worded when drawn), or the TUI's own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventLine {
    Happened(Arc<Happened>),
    /// The TUI's own line (an error, a command's outcome, "loaded …"), at `time` (`HH:MM:SS`).
    Own {
        time: String,
        level: Level,
        text: String,
    },
}

impl EventLine {
    /// A line of the TUI's own, now.
    pub fn own(level: Level, text: String) -> Self {
        EventLine::Own {
            time: clock(Utc::now()),
            level,
            text,
        }
    }

    /// `HH:MM:SS`, local time.
    pub fn time(&self) -> String {
        match self {
            EventLine::Happened(h) => clock(match &**h {
                Happened::Reconcile(e) => e.time,
                Happened::Cluster(e) => e.time,
                Happened::Lease(c) => c.time,
            }),
            EventLine::Own { time, .. } => time.clone(),
        }
    }

    /// Error lines are red, warnings yellow.
    pub fn level(&self) -> Level {
        match self {
            EventLine::Happened(h) => match &**h {
                // A conflict is retried at once and passes: not an error to look at.
                Happened::Reconcile(e) if e.result.is_failure() => Level::Error,
                Happened::Reconcile(_) => Level::Info,
                // A write the leader could not make, or stopped making because another writer
                // undoes it, is a failure here too: red, not a warning.
                Happened::Cluster(e)
                    if e.warning
                        && e.from_a_holder
                        && e.known_reason().is_some_and(EventReason::is_failed_write) =>
                {
                    Level::Error
                }
                Happened::Cluster(e) if e.warning => Level::Warn,
                Happened::Cluster(_) => Level::Info,
                // Somebody leads now: news; nobody (or soon nobody): a warning.
                Happened::Lease(c) => match c.what {
                    LeaseTurn::Leads { .. } => Level::Info,
                    _ => Level::Warn,
                },
            },
            EventLine::Own { level, .. } => *level,
        }
    }

    /// The line: a reconcile action as `run` prints it (`update Kind/name skipped: why —
    /// message`); an Event as `Replayed ConstraintTemplate/x: note — by reporter (×3)`, what a
    /// terminal would obey escaped (anyone allowed to create Events writes these).
    pub fn text(&self) -> String {
        match self {
            EventLine::Happened(h) => match &**h {
                Happened::Reconcile(e) => e.to_string(),
                Happened::Cluster(e) => {
                    let count = if e.count > 1 {
                        format!(" (×{})", e.count)
                    } else {
                        String::new()
                    };
                    let note = if e.note.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", e.note)
                    };
                    // Not the leader's word unless its reporter holds or held the Lease.
                    let unverified = if e.from_a_holder {
                        ""
                    } else {
                        " (unverified: not a holder of the Lease)"
                    };
                    // Line by line: the log draws each line of a note under the first.
                    crate::text::printable_lines(&format!(
                        "{} {}{note} — by {}{count}{unverified}",
                        e.reason, e.regarding, e.reporter
                    ))
                    .into_owned()
                }
                Happened::Lease(c) => crate::text::printable(&lease_words(c)).into_owned(),
            },
            EventLine::Own { text, .. } => text.clone(),
        }
    }

    /// The request whose outcome this line reports, if it does: the answer to that request
    /// says the same, and the log says it once.
    pub fn request(&self) -> Option<&str> {
        let EventLine::Happened(h) = self else {
            return None;
        };
        match &**h {
            Happened::Reconcile(e)
                if matches!(
                    e.verb,
                    EventVerb::Replay | EventVerb::Reconcile | EventVerb::ReconcileAll
                ) && e.result == EventResult::Ok =>
            {
                e.request.as_deref()
            }
            // Anyone could have written an Event with a request's id: only a holder's counts.
            Happened::Cluster(e) if e.from_a_holder => e.request.as_deref(),
            _ => None,
        }
    }
}

/// A change of who leads, in the log's words: `lease ns/name — HOLDER leads now (was OTHER)`.
pub fn lease_words(c: &LeaseChange) -> String {
    let what = match &c.what {
        LeaseTurn::Leads {
            holder,
            was: Some(was),
        } => format!("{holder} leads now (was {was})"),
        LeaseTurn::Leads { holder, was: None } => {
            format!("{holder} leads now (the Lease was vacant)")
        }
        LeaseTurn::Released { was } => format!("nobody leads (was {was}): no copy reconciles"),
        LeaseTurn::Expired { holder } => {
            format!("nobody leads: {holder} stopped renewing it; no copy reconciles")
        }
        LeaseTurn::Unresponsive { holder } => format!(
            "{holder} unresponsive: it stopped renewing; a standby, if one runs, takes over when the Lease expires"
        ),
    };
    format!("lease {} — {what}", c.lease)
}

/// The holder of `lease`, as the header names it: this copy, else its pod, else its identity.
pub fn leader_name(lease: &LeaseInfo) -> Option<String> {
    if lease.leading {
        return Some("this copy".to_string());
    }
    lease
        .health
        .as_ref()
        .and_then(|h| h.pod.clone())
        .or_else(|| lease.holder.clone())
}

/// `HH:MM:SS` of `t` in local time, as the log shows it.
pub fn clock(t: DateTime<Utc>) -> String {
    t.with_timezone(&chrono::Local)
        .format("%H:%M:%S")
        .to_string()
}

/// The live view while it starts: which attempt this is; after a failure, why and when the
/// next attempt starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connecting {
    pub attempt: u32,
    pub retry_at: Option<DateTime<Utc>>,
    pub message: Option<String>,
}

/// One consistent state to draw: analysis and snapshot always belong together.
#[derive(Debug, Clone)]
pub struct Data {
    pub origin: Origin,
    /// The kubeconfig context (`files: …` offline).
    pub context: String,
    /// The kubeconfig's contexts (live), for `:ctx`; empty offline or when it cannot be read.
    pub contexts: Vec<String>,
    /// Which live session of the source this is: a new one (another context, a restart)
    /// starts from an empty tree and forgets what the old cluster said.
    pub session: u64,
    /// The live view is starting (not running yet): which attempt, and why the last failed.
    pub connecting: Option<Connecting>,
    /// What the controller published, as it is (offline, or not running yet: a default
    /// state, with what could not be started in its access errors).
    pub live: Arc<LiveState>,
    /// Live: whose generation settings the tree is judged by (the leader's, or local flags
    /// and why), and which local flags differ from the leader's.
    pub settings: Option<Judged>,
    pub snapshot: Arc<Snapshot>,
    pub analysis: Arc<Analysis>,
    pub summary: Summary,
    /// Gatekeeper's pod statuses by what they are about (template name, `Kind/name`).
    pub pod_status_index: HashMap<String, Vec<usize>>,
    /// Observed objects by their ids.
    pub objects: HashMap<ObjectId, Observed>,
    /// Planned writes (indices into `analysis.plan`) by their objects' ids.
    pub plan_index: HashMap<ObjectId, Vec<usize>>,
    /// The options the analysis ran with (to run it again when a deadline passes).
    pub opts: Options,
    /// When a time-based state changes without any object changing: the earliest end of a
    /// binding's `--binding-wait` still ahead of the snapshot's clock.
    pub next_deadline: Option<DateTime<Utc>>,
}

impl Data {
    /// The API server stopped answering the live view: since when, and why. The tree is
    /// then the last state seen while it answered, and says so.
    pub fn unreachable(&self) -> Option<(DateTime<Utc>, &str)> {
        match &self.live.connection {
            Connection::Unreachable { since, message } => Some((*since, message.as_str())),
            Connection::Connected => None,
        }
    }

    /// Whether the live view runs (connected or not): the controller's state is real.
    pub fn running(&self) -> bool {
        matches!(self.origin, Origin::Live { .. }) && self.connecting.is_none()
    }

    /// Work items the leader has queued: this copy's own when it leads, else as of the
    /// leader's last renewal.
    pub fn leader_queue(&self) -> Option<usize> {
        let l = &self.live.lease;
        if l.leading {
            return Some(self.live.queue_depth);
        }
        l.health.as_ref().map(|h| h.queue)
    }

    /// When the leader's queue last drained.
    pub fn leader_last_sync(&self) -> Option<DateTime<Utc>> {
        self.live.lease.health.as_ref().and_then(|h| h.last_sync)
    }
}

/// Where an observed object sits in the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    Template(usize),
    Constraint(usize),
    Policy(usize),
    Binding(usize),
}

impl Data {
    /// The raw object (as read) for a `(kind, name)`.
    pub fn raw(&self, kind: &str, name: &str) -> Option<serde_json::Value> {
        let s = &self.snapshot;
        // A constraint CRD is kept as what the analysis reads of it (metadata, spec; a live
        // view drops the versions' schemas), not as an object of the tree's own.
        if kind == crate::core::crd::CRD_KIND {
            return s.crds.iter().find(|c| c.name == name).map(|c| {
                serde_json::json!({
                    "apiVersion": "apiextensions.k8s.io/v1",
                    "kind": kind,
                    "metadata": c.metadata,
                    "spec": c.spec,
                })
            });
        }
        Some(match self.objects.get(&ObjectId::new(kind, name))? {
            Observed::Template(i) => s.templates.get(*i)?.raw.clone(),
            Observed::Constraint(i) => s.constraints.get(*i)?.raw.clone(),
            Observed::Policy(i) => s.policies.get(*i)?.raw(),
            Observed::Binding(i) => s.bindings.get(*i)?.raw(),
        })
    }

    /// Where the object was read from (`file:line` or `cluster`).
    pub fn source_of(&self, kind: &str, name: &str) -> Option<String> {
        let s = &self.snapshot;
        Some(match self.objects.get(&ObjectId::new(kind, name))? {
            Observed::Template(i) => s.templates.get(*i)?.source.to_string(),
            Observed::Constraint(i) => s.constraints.get(*i)?.source.to_string(),
            Observed::Policy(i) => s.policies.get(*i)?.source.to_string(),
            Observed::Binding(i) => s.bindings.get(*i)?.source.to_string(),
        })
    }

    /// The planned writes about an object.
    pub fn plan_for(
        &self,
        kind: &str,
        name: &str,
    ) -> impl Iterator<Item = &crate::core::PlannedWrite> {
        self.plan_index
            .get(&ObjectId::new(kind, name))
            .into_iter()
            .flatten()
            .filter_map(|i| self.analysis.plan.get(*i))
    }

    /// Analyses `snapshot` by `opts` — off the UI thread: the sources call it — with the
    /// failed writes `live` reports noted on their objects' findings. The UI's own fields
    /// (context, session, …) are left empty for the caller.
    pub fn prepare(
        origin: Origin,
        live: Arc<LiveState>,
        snapshot: Arc<Snapshot>,
        opts: &Options,
    ) -> Data {
        let analysis = analyze(&snapshot, opts);
        let mut pod_status_index: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, p) in snapshot.pod_statuses.iter().enumerate() {
            pod_status_index.entry(p.about.clone()).or_default().push(i);
        }
        let mut objects = HashMap::new();
        let key = |kind: &str, name: &str| ObjectId::new(kind, name);
        for (i, t) in snapshot.templates.iter().enumerate() {
            objects.insert(key("ConstraintTemplate", t.name()), Observed::Template(i));
        }
        for (i, c) in snapshot.constraints.iter().enumerate() {
            objects.insert(key(&c.kind, c.name()), Observed::Constraint(i));
        }
        for (i, p) in snapshot.policies.iter().enumerate() {
            objects.insert(key(crate::model::VAP_KIND, p.name()), Observed::Policy(i));
        }
        for (i, b) in snapshot.bindings.iter().enumerate() {
            objects.insert(key(crate::model::VAPB_KIND, b.name()), Observed::Binding(i));
        }
        let mut plan_index: HashMap<ObjectId, Vec<usize>> = HashMap::new();
        for (i, w) in analysis.plan.iter().enumerate() {
            plan_index.entry(w.object.id()).or_default().push(i);
        }
        let mut data = Data {
            opts: opts.clone(),
            next_deadline: next_deadline(&snapshot, opts),
            objects,
            plan_index,
            origin,
            context: String::new(),
            contexts: Vec::new(),
            session: 0,
            connecting: None,
            live,
            settings: None,
            snapshot,
            summary: Summary::of(&analysis.findings),
            analysis: Arc::new(analysis),
            pod_status_index,
        };
        data.note_write_failures();
        data
    }

    /// Adds to each finding the failure of the last write of its object, if that write
    /// failed (as the controller publishes it): a node that stays missing or out of sync says
    /// why after the event log has moved on. A write the API server refused is also an error
    /// finding of its own on the object (`write-refused`, with the server's message),
    /// wherever the leader runs.
    fn note_write_failures(&mut self) {
        let failures = &self.live.failed_writes;
        if failures.is_empty() {
            return;
        }
        let analysis = Arc::make_mut(&mut self.analysis);
        let built_with = analysis.findings.len();
        for f in &mut analysis.findings {
            match failures.get(&f.object.id()) {
                Some(failure) if failure.contested => {
                    f.message = format!("{} — not written now: {}", f.message, failure.why);
                }
                Some(failure) => {
                    f.message = format!("{} — the last write failed: {}", f.message, failure.why);
                }
                None => {}
            }
        }
        // Another writer contests the object: an error of its own, whatever else is said.
        let contested = failures.iter().filter(|(_, f)| f.contested);
        let contested: Vec<_> = contested
            .filter_map(|(object, failure)| {
                let write = self.plan_index.get(object)?.first()?;
                let object = analysis.plan.get(*write)?.object.clone();
                let code = crate::core::Code::WriterConflict;
                Some(crate::core::Finding::new(code, object, failure.why.clone()))
            })
            .collect();
        analysis.findings.extend(contested);
        let mut refused: Vec<_> = failures
            .iter()
            .filter(|(_, failure)| failure.refused)
            .filter_map(|(object, failure)| {
                // The object as the plan names it (its apiVersion), if a write is planned.
                let write = self.plan_index.get(object)?.first()?;
                let object = analysis.plan.get(*write)?.object.clone();
                Some(crate::core::Finding::new(
                    crate::core::Code::WriteRefused,
                    object,
                    format!(
                        "the API server refuses the write that would bring it in line: {}",
                        failure.why
                    ),
                ))
            })
            .collect();
        refused.sort_by(|a, b| a.object.cmp(&b.object));
        let plan = analysis.plan.clone();
        crate::core::findings::add_refusals(&mut analysis.findings, &plan, refused);
        // On their objects' nodes too: the badges add up to the header's counts.
        let crate::core::Analysis { tree, findings, .. } = analysis;
        crate::core::tree::attach_findings(tree, findings, built_with);
        self.summary = Summary::of(&analysis.findings);
    }

    /// The same objects analysed again at `now` (a deadline passed): off the UI thread.
    pub fn reanalysed(&self, now: DateTime<Utc>) -> Data {
        let mut snapshot = (*self.snapshot).clone();
        snapshot.now = Some(now);
        let fresh = Data::prepare(
            self.origin.clone(),
            self.live.clone(),
            Arc::new(snapshot),
            &self.opts,
        );
        self.with_analysis_of(fresh)
    }

    /// This data's context, session and controller state, with `other`'s snapshot and
    /// analysis.
    pub fn with_analysis_of(&self, other: Data) -> Data {
        Data {
            context: self.context.clone(),
            contexts: self.contexts.clone(),
            session: self.session,
            connecting: self.connecting.clone(),
            live: self.live.clone(),
            settings: self.settings.clone(),
            ..other
        }
    }

    /// Why write actions cannot run on this data, if they cannot.
    pub fn write_refusal(&self) -> Option<String> {
        match &self.origin {
            Origin::Offline { paths } => Some(format!(
                "offline snapshot: nothing to reconcile; run `kubectl vap plan -f {}` to see the writes",
                if paths.is_empty() {
                    "…".to_string()
                } else {
                    paths.join(" -f ")
                }
            )),
            Origin::Live { refusal, .. } => refusal.clone(),
        }
    }
}

/// The earliest moment after the snapshot's clock at which a binding's wait for its
/// constraint CRD ends (`established since + --binding-wait`), as the analysis measures it.
/// Without a clock every wait counts as elapsed, so there is no deadline.
pub fn next_deadline(snapshot: &Snapshot, opts: &Options) -> Option<DateTime<Utc>> {
    let now = snapshot.now?;
    let wait = chrono::Duration::from_std(opts.binding_wait).ok()?;
    snapshot
        .crds
        .iter()
        .filter(|c| c.established)
        .filter_map(|c| c.established_since)
        .map(|since| since + wait)
        .filter(|until| *until > now)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::ClusterEvent;

    /// Issue 42, item 9: an Event with kubectl-vap's label whose reporter never held the Lease
    /// (anyone allowed to create Events in `default` can write one) is marked, is never red as
    /// the leader's failure, and never answers a request.
    #[test]
    fn an_event_from_no_holder_of_the_lease_is_marked_and_answers_nothing() {
        let event = |from_a_holder| {
            EventLine::Happened(Arc::new(Happened::Cluster(ClusterEvent {
                time: chrono::Utc::now(),
                reporter: "vm-9999-forged".into(),
                regarding: crate::model::ObjectRef::new(
                    "templates.gatekeeper.sh/v1",
                    "ConstraintTemplate",
                    "t",
                ),
                reason: EventReason::WriteFailed.as_str().into(),
                note: "deleted binding b".into(),
                warning: true,
                count: 1,
                request: Some("r-1".into()),
                from_a_holder,
            })))
        };
        let (holder, forged) = (event(true), event(false));
        assert_eq!(holder.level(), Level::Error);
        assert_eq!(holder.request(), Some("r-1"));
        assert!(!holder.text().contains("unverified"));
        assert_eq!(forged.level(), Level::Warn);
        assert_eq!(forged.request(), None);
        assert!(
            forged
                .text()
                .ends_with("— by vm-9999-forged (unverified: not a holder of the Lease)"),
            "{}",
            forged.text()
        );
    }
}
