//! What the UI shows, as the data source hands it over: a snapshot, its analysis (computed off
//! the UI thread, once per change), and what is known about the cluster and the reconciler.

use crate::controller::log::Entry;
use crate::controller::{
    AccessError, AccessErrorKind, ClusterEvent, Connection, LeaseInfo, ReconcileEvent,
};
use crate::core::{Analysis, Options, Summary, analyze};
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

/// One line of the event log (reconcile actions, the cluster's Events, command outcomes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLine {
    /// Increasing: lines already shown are not shown twice.
    pub seq: u64,
    pub says: Says,
    /// The outcome of a replay or reconcile this line reports, when it reports one.
    pub outcome: Option<OutcomeKey>,
}

/// What a line of the event log says: the controller's entry as it published it (shared with
/// its log, worded when drawn), or the TUI's own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Says {
    /// A reconcile action of this copy.
    Reconcile(Entry<ReconcileEvent>),
    /// A Kubernetes Event a copy of kubectl-vap reported.
    Cluster(Entry<ClusterEvent>),
    /// The TUI's own line (a lease change, an error, "loaded …"), at `time` (`HH:MM:SS`).
    Own {
        time: String,
        level: Level,
        text: String,
    },
}

impl EventLine {
    /// A line of the TUI's own.
    pub fn own(seq: u64, time: String, level: Level, text: String) -> Self {
        EventLine {
            seq,
            says: Says::Own { time, level, text },
            outcome: None,
        }
    }

    /// `HH:MM:SS`, local time.
    pub fn time(&self) -> String {
        match &self.says {
            Says::Reconcile(e) => clock(e.time),
            Says::Cluster(e) => clock(e.time),
            Says::Own { time, .. } => time.clone(),
        }
    }

    /// Error lines are red, warnings yellow.
    pub fn level(&self) -> Level {
        match &self.says {
            // A conflict is retried at once and passes: not an error to look at.
            Says::Reconcile(e) if e.result.is_failure() => Level::Error,
            Says::Reconcile(_) => Level::Info,
            // A write the leader could not make is a failure here too: red, not a warning.
            Says::Cluster(e) => match (e.warning, e.reason.as_str()) {
                (true, "WriteFailed") => Level::Error,
                (true, _) => Level::Warn,
                _ => Level::Info,
            },
            Says::Own { level, .. } => *level,
        }
    }

    /// The line: a reconcile action as `run` prints it (`update Kind/name skipped: why —
    /// message`); an Event as `Replayed ConstraintTemplate/x: note — by reporter (×3)`, what a
    /// terminal would obey escaped (anyone allowed to create Events writes these).
    pub fn text(&self) -> String {
        match &self.says {
            Says::Reconcile(e) => e.to_string(),
            Says::Cluster(e) => {
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
                crate::text::printable(&format!(
                    "{} {}{note} — by {}{count}",
                    e.reason, e.regarding, e.reporter
                ))
                .into_owned()
            }
            Says::Own { text, .. } => text.clone(),
        }
    }
}

/// `HH:MM:SS` of `t` in local time, as the log shows it.
pub fn clock(t: DateTime<Utc>) -> String {
    t.with_timezone(&chrono::Local)
        .format("%H:%M:%S")
        .to_string()
}

/// The outcome of one replay or reconcile as its handler words it: who handled it and the
/// summary. The answer to a request and the handler's Event about it (this copy's own log
/// line when it leads) carry the same key, so the event log says the outcome once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OutcomeKey {
    pub by: String,
    pub summary: String,
}

/// What the header shows about the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterInfo {
    pub context: String,
    /// The kubeconfig's contexts (live), for `:ctx`; empty offline or when it cannot be read.
    pub contexts: Vec<String>,
    /// Which live session of the source this is: a new one (another context, a restart)
    /// starts from an empty tree and forgets what the old cluster said.
    pub session: u64,
    pub server_version: Option<String>,
    /// The served VAP API version (`v1`, `v1beta1`), `None` when unknown.
    pub vap_api: Option<String>,
    /// Who reconciles, as the Lease says: the controller's view as it publishes it (offline:
    /// empty).
    pub leader: LeaseInfo,
    /// This copy's own queue: known without waiting for its next renewal when it leads.
    pub queue_depth: usize,
    /// Whether the API server answers.
    pub link: Link,
    /// Live, with `--reconcile`: Gatekeeper's own VAP generator looks active (what was seen),
    /// so this copy does not write.
    pub gatekeeper_generator: Option<String>,
    pub access_errors: Vec<AccessError>,
    /// Live: not every watch has listed yet, so the tree may be partial.
    pub syncing: bool,
    /// Live: whose generation settings the tree is judged by (the leader's, or local flags
    /// and why), and which local flags differ from the leader's.
    pub settings: Option<crate::core::settings::Judged>,
}

impl ClusterInfo {
    /// How the header names the leader: this copy, else its pod, else its identity.
    pub fn leader_name(&self) -> Option<String> {
        if self.leader.leading {
            return Some("this copy".to_string());
        }
        self.leader
            .health
            .as_ref()
            .and_then(|h| h.pod.clone())
            .or_else(|| self.leader.holder.clone())
    }

    /// Work items the leader has queued: this copy's own when it leads, else as of the
    /// leader's last renewal.
    pub fn leader_queue(&self) -> Option<usize> {
        if self.leader.leading {
            return Some(self.queue_depth);
        }
        self.leader.health.as_ref().map(|h| h.queue)
    }

    /// When the leader's queue last drained.
    pub fn leader_last_sync(&self) -> Option<DateTime<Utc>> {
        self.leader.health.as_ref().and_then(|h| h.last_sync)
    }
}

/// Why the last write of an object failed, and whether the API server refused its body (a
/// 422: no retry helps; the template or constraint must change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailure {
    pub why: String,
    pub refused: bool,
}

/// Whether the live source runs, and then whether the API server answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Link {
    /// The live view is starting: attempt `attempt`; after a failure, `message` says why and
    /// `retry_at` when the next attempt starts.
    Connecting {
        attempt: u32,
        retry_at: Option<DateTime<Utc>>,
        message: Option<String>,
    },
    /// Running, the connection as the controller publishes it (no answer: the watches retry
    /// by themselves). Offline: connected, nothing to answer.
    Running(Connection),
}

impl Default for Link {
    fn default() -> Self {
        Link::Running(Connection::Connected)
    }
}

/// One consistent state to draw: analysis and snapshot always belong together.
#[derive(Debug, Clone)]
pub struct Data {
    pub origin: Origin,
    pub info: ClusterInfo,
    pub snapshot: Arc<Snapshot>,
    pub analysis: Arc<Analysis>,
    pub summary: Summary,
    /// Gatekeeper's pod statuses by what they are about (template name, `Kind/name`).
    pub pod_status_index: HashMap<String, Vec<usize>>,
    pub events: Vec<EventLine>,
    /// Observed objects by `(kind, name)`.
    pub objects: HashMap<(String, String), Observed>,
    /// Planned writes (indices into `analysis.plan`) by `(kind, name)`.
    pub plan_index: HashMap<(String, String), Vec<usize>>,
    /// The options the analysis ran with (to run it again when a deadline passes).
    pub opts: Options,
    /// When a time-based state changes without any object changing: the earliest end of a
    /// binding's `--binding-wait` still ahead of the snapshot's clock.
    pub next_deadline: Option<DateTime<Utc>>,
    /// Live: why the last write of an object failed, by `(kind, name)`, for objects whose
    /// last write did fail; noted on their findings (kept when the analysis runs again).
    pub write_failures: HashMap<(String, String), WriteFailure>,
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
        Some(
            match self.objects.get(&(kind.to_string(), name.to_string()))? {
                Observed::Template(i) => s.templates.get(*i)?.raw.clone(),
                Observed::Constraint(i) => s.constraints.get(*i)?.raw.clone(),
                Observed::Policy(i) => s.policies.get(*i)?.raw(),
                Observed::Binding(i) => s.bindings.get(*i)?.raw(),
            },
        )
    }

    /// Where the object was read from (`file:line` or `cluster`).
    pub fn source_of(&self, kind: &str, name: &str) -> Option<String> {
        let s = &self.snapshot;
        Some(
            match self.objects.get(&(kind.to_string(), name.to_string()))? {
                Observed::Template(i) => s.templates.get(*i)?.source.to_string(),
                Observed::Constraint(i) => s.constraints.get(*i)?.source.to_string(),
                Observed::Policy(i) => s.policies.get(*i)?.source.to_string(),
                Observed::Binding(i) => s.bindings.get(*i)?.source.to_string(),
            },
        )
    }

    /// The planned writes about an object.
    pub fn plan_for(
        &self,
        kind: &str,
        name: &str,
    ) -> impl Iterator<Item = &crate::core::PlannedWrite> {
        self.plan_index
            .get(&(kind.to_string(), name.to_string()))
            .into_iter()
            .flatten()
            .filter_map(|i| self.analysis.plan.get(*i))
    }

    /// Analyses the snapshot. Call it off the UI thread for big snapshots.
    pub fn prepare(
        origin: Origin,
        info: ClusterInfo,
        snapshot: Arc<Snapshot>,
        opts: &Options,
        events: Vec<EventLine>,
    ) -> Data {
        let analysis = analyze(&snapshot, opts);
        let summary = Summary::of(&analysis.findings);
        let mut pod_status_index: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, p) in snapshot.pod_statuses.iter().enumerate() {
            pod_status_index.entry(p.about.clone()).or_default().push(i);
        }
        let mut objects = HashMap::new();
        for (i, t) in snapshot.templates.iter().enumerate() {
            objects.insert(
                ("ConstraintTemplate".to_string(), t.name().to_string()),
                Observed::Template(i),
            );
        }
        for (i, c) in snapshot.constraints.iter().enumerate() {
            objects.insert(
                (c.kind.clone(), c.name().to_string()),
                Observed::Constraint(i),
            );
        }
        for (i, p) in snapshot.policies.iter().enumerate() {
            objects.insert(
                (crate::model::VAP_KIND.to_string(), p.name().to_string()),
                Observed::Policy(i),
            );
        }
        for (i, b) in snapshot.bindings.iter().enumerate() {
            objects.insert(
                (crate::model::VAPB_KIND.to_string(), b.name().to_string()),
                Observed::Binding(i),
            );
        }
        let mut plan_index: HashMap<(String, String), Vec<usize>> = HashMap::new();
        for (i, w) in analysis.plan.iter().enumerate() {
            plan_index
                .entry((w.object.kind.clone(), w.object.name.clone()))
                .or_default()
                .push(i);
        }
        let next_deadline = next_deadline(&snapshot, opts);
        Data {
            opts: opts.clone(),
            next_deadline,
            objects,
            plan_index,
            origin,
            info,
            snapshot,
            analysis: Arc::new(analysis),
            summary,
            pod_status_index,
            events,
            write_failures: HashMap::new(),
        }
    }

    /// Adds to each finding the failure of the last write of its object, if that write
    /// failed: a node that stays missing or out of sync says why after the event log has
    /// moved on. A write the API server refused (`refused`) is also an error finding of its
    /// own on the object (`write-refused`, with the server's message), wherever the leader
    /// runs. Kept with the data, so an analysis run again says it too.
    pub fn note_write_failures(&mut self, failures: HashMap<(String, String), WriteFailure>) {
        if !failures.is_empty() {
            let analysis = Arc::make_mut(&mut self.analysis);
            for f in &mut analysis.findings {
                let key = (f.object.kind.clone(), f.object.name.clone());
                if let Some(failure) = failures.get(&key) {
                    f.message = format!("{} — the last write failed: {}", f.message, failure.why);
                }
            }
            let mut refused: Vec<_> = failures
                .iter()
                .filter(|(_, failure)| failure.refused)
                .filter_map(|(key, failure)| {
                    // The object as the plan names it (its apiVersion), if a write is planned.
                    let write = self.plan_index.get(key)?.first()?;
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
            self.summary = Summary::of(&analysis.findings);
        }
        self.write_failures = failures;
    }

    /// The same objects analysed again at `now` (a deadline passed), with the same notes of
    /// failed writes. Events were already delivered with the data this one replaces.
    pub fn reanalysed(&self, now: DateTime<Utc>) -> Data {
        let mut snapshot = (*self.snapshot).clone();
        snapshot.now = Some(now);
        let mut data = Data::prepare(
            self.origin.clone(),
            self.info.clone(),
            Arc::new(snapshot),
            &self.opts,
            Vec::new(),
        );
        data.note_write_failures(self.write_failures.clone());
        data
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
