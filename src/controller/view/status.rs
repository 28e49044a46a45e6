//! What this copy knows about itself, behind one lock: what it cannot read, whether it may
//! write (and why not), whether every watch has listed, the last failed write of each object;
//! and what happened, told once to every reader of its feed (a `tokio::sync::broadcast`).
//! Every change wakes the publisher ([`Status::touch`]).

use super::state::{
    AccessError, AccessErrorKind, EVENT_LOG_CAPACITY, EventResult, EventVerb, FailedWrite,
    Happened, ReconcileEvent, WriteError,
};
use crate::core::contest::{Contest, Contests, Undo};
use crate::model::{ObjectId, ObjectRef};
use chrono::Utc;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{broadcast, watch};

/// Fields named as `LiveState`'s mean what they mean there.
#[derive(Default)]
struct Inner {
    /// This copy's reconcile actions, the newest [`EVENT_LOG_CAPACITY`] (for
    /// `Controller::events`: what a one-shot command prints).
    events: VecDeque<ReconcileEvent>,
    /// By resource name.
    access: BTreeMap<String, AccessError>,
    gatekeeper_generator: Option<String>,
    writes_enabled: bool,
    synced: bool,
    /// When the queue last drained with everything listed.
    last_sync: Option<chrono::DateTime<Utc>>,
    /// The last failed write of each object, until a write of it passes.
    failed: HashMap<ObjectId, Failed>,
    /// Objects another writer keeps changing back (`core::contest`).
    contests: Contests,
    /// What this copy may not do that leading needs (`lead::rights`), said as it is said.
    lacking_rights: Option<String>,
    /// The identities seen holding the Lease, newest last (at most [`HOLDERS_KEPT`]): whose
    /// Events are the leader's words.
    holders: VecDeque<String>,
    /// Per template: the digest of the VAP its probe sent and the server's refusal, if any
    /// (`core::probe`): one dry-run per body, not one per reconcile.
    probes: HashMap<String, (u64, Option<String>)>,
    /// The guard this copy expects (`run --expect-guard`: the policy `core::guard` builds), and
    /// what is wrong with the one the API server holds.
    guard_expected: Option<Arc<serde_json::Value>>,
    guard_problem: Option<String>,
}

/// How many holders of the Lease a copy remembers (hand-overs, restarts).
const HOLDERS_KEPT: usize = 32;

/// A failed write: how, the digest of the body sent, when.
struct Failed {
    error: WriteError,
    body: u64,
    at: Instant,
}

/// How long a refused body is not sent again (then a resync may try it once more).
pub const REFUSED_FOR: std::time::Duration = std::time::Duration::from_secs(600);

/// `s` cut to at most `max` bytes, on a character boundary, with `…` where it was cut.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut cut = max.saturating_sub(3);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &s[..cut])
}

/// How many refused writes the leader publishes on its Lease (the annotation stays small).
pub const PUBLISHED_REFUSALS: usize = 20;

pub struct Status {
    inner: Mutex<Inner>,
    /// Bumped on every change views show.
    version: watch::Sender<u64>,
    feed: broadcast::Sender<Happened>,
    /// The feed from the copy's start, for its first reader (nothing said while it started
    /// is lost); later readers hear from when they ask.
    first: Mutex<Option<broadcast::Receiver<Happened>>>,
}

impl Default for Status {
    fn default() -> Self {
        let (feed, first) = broadcast::channel(EVENT_LOG_CAPACITY);
        Status {
            inner: Mutex::default(),
            version: watch::Sender::new(0),
            feed,
            first: Mutex::new(Some(first)),
        }
    }
}

impl Status {
    /// Changes what views show, and wakes the publisher.
    fn change<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let out = f(&mut self.inner.lock());
        self.touch();
        out
    }

    /// Something views show changed (a store, the queue, the status): the publisher looks.
    pub fn touch(&self) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A receiver that sees every [`Status::touch`].
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// A reader of what happens: the first since the copy started, the others from now on.
    pub fn feed(&self) -> broadcast::Receiver<Happened> {
        let first = self.first.lock().take();
        first.unwrap_or_else(|| self.feed.subscribe())
    }

    /// Tells `what` to every reader of the feed (nobody reading is no error).
    pub fn happened(&self, what: Happened) {
        let _ = self.feed.send(what);
    }

    /// A reconcile action of this copy, kept and told.
    pub fn log(&self, verb: EventVerb, object: ObjectRef, result: EventResult, message: String) {
        self.record(ReconcileEvent {
            time: Utc::now(),
            verb,
            object,
            result,
            message,
            request: None,
        });
    }

    /// Keeps `event` (the newest [`EVENT_LOG_CAPACITY`]) and tells it on the feed.
    pub fn record(&self, event: ReconcileEvent) {
        self.change(|s| {
            if s.events.len() == EVENT_LOG_CAPACITY {
                s.events.pop_front();
            }
            s.events.push_back(event.clone());
        });
        self.happened(Happened::Reconcile(event));
    }

    /// The reconcile actions kept, oldest first.
    pub fn events(&self) -> Vec<ReconcileEvent> {
        self.inner.lock().events.iter().cloned().collect()
    }

    /// Records (or clears, with `None`) a read problem of `resource`.
    pub fn set_access(&self, resource: &str, error: Option<AccessError>) {
        let mut s = self.inner.lock();
        let changed = match error {
            Some(e) => s.access.insert(resource.to_string(), e.clone()).as_ref() != Some(&e),
            None => s.access.remove(resource).is_some(),
        };
        drop(s);
        if changed {
            self.touch();
        }
    }

    pub fn access_error(&self, resource: &str) -> Option<AccessError> {
        self.inner.lock().access.get(resource).cloned()
    }

    pub fn access_errors(&self) -> Vec<AccessError> {
        self.inner.lock().access.values().cloned().collect()
    }

    /// Whether every resource of `unknown` is unreadable for a reason retrying does not fix
    /// (forbidden, not served).
    pub fn definitely_unreadable(&self, unknown: &[(String, String)]) -> bool {
        let s = self.inner.lock();
        let lasting = |e: &AccessError| e.kind != AccessErrorKind::Other;
        unknown
            .iter()
            .all(|(r, _)| s.access.get(r).is_some_and(lasting))
    }

    /// What is known of `resources` that are not known now: (resource, why).
    pub fn why_unknown(&self, resources: Vec<String>) -> Vec<(String, String)> {
        let s = self.inner.lock();
        let why = |r: &String| match s.access.get(r) {
            Some(e) => e.message.clone(),
            None => format!("{r}: not listed and watched yet"),
        };
        let whys: Vec<String> = resources.iter().map(why).collect();
        resources.into_iter().zip(whys).collect()
    }

    pub fn writes_enabled(&self) -> bool {
        self.inner.lock().writes_enabled
    }

    pub fn set_writes_enabled(&self, on: bool) {
        self.change(|s| s.writes_enabled = on);
    }

    pub fn gatekeeper_generator(&self) -> Option<String> {
        self.inner.lock().gatekeeper_generator.clone()
    }

    pub fn set_gatekeeper_generator(&self, found: Option<String>) {
        self.change(|s| s.gatekeeper_generator = found);
    }

    pub fn synced(&self) -> bool {
        self.inner.lock().synced
    }

    pub fn set_synced(&self) {
        self.change(|s| s.synced = true);
    }

    pub fn last_sync(&self) -> Option<chrono::DateTime<Utc>> {
        self.inner.lock().last_sync
    }

    /// Not a change views wait for (it is read with the next one).
    pub fn set_last_sync(&self, at: chrono::DateTime<Utc>) {
        self.inner.lock().last_sync = Some(at);
    }

    /// A write of `object` (its body's digest `body`) failed with `error`; true when it is
    /// the first failure of its class in a row (a forbidden write is logged once, until one
    /// passes).
    pub fn write_failed(&self, object: &ObjectId, body: u64, error: &WriteError) -> bool {
        self.change(|s| {
            let failed = Failed {
                error: error.clone(),
                body,
                at: Instant::now(),
            };
            let before = s.failed.insert(object.clone(), failed);
            before.is_none_or(|b| std::mem::discriminant(&b.error) != std::mem::discriminant(error))
        })
    }

    /// A write of `object` passed, or none is needed any more: how its last write had failed,
    /// if it had.
    pub fn clear_failure(&self, object: &ObjectId) -> Option<WriteError> {
        let before = self.inner.lock().failed.remove(object)?;
        self.touch();
        Some(before.error)
    }

    /// This copy is confined by the guard whose policy is `expected` (`core::guard`).
    pub fn expect_guard(&self, expected: serde_json::Value) {
        self.inner.lock().guard_expected = Some(Arc::new(expected));
    }

    /// The guard policy this copy expects, if it expects one.
    pub fn guard_expected(&self) -> Option<Arc<serde_json::Value>> {
        self.inner.lock().guard_expected.clone()
    }

    /// What is wrong with the guard the API server holds (`None`: it holds); whether that
    /// changed.
    pub fn set_guard_problem(&self, problem: Option<String>) -> bool {
        let mut s = self.inner.lock();
        let changed = s.guard_problem != problem;
        s.guard_problem = problem;
        drop(s);
        if changed {
            self.touch();
        }
        changed
    }

    pub fn guard_problem(&self) -> Option<String> {
        self.inner.lock().guard_problem.clone()
    }

    /// What the server said of `template`'s probe with this `body`, if it was sent: `Some(None)`
    /// compiled, `Some(Some(why))` refused.
    pub fn probed(&self, template: &str, body: u64) -> Option<Option<String>> {
        let s = self.inner.lock();
        let (sent, said) = s.probes.get(template)?;
        (*sent == body).then(|| said.clone())
    }

    /// Remembers what the server said of `template`'s probe with `body`; `None` forgets the
    /// template (gone, or it has a VAP of its own now).
    pub fn probe_said(&self, template: &str, said: Option<(u64, Option<String>)>) {
        let mut s = self.inner.lock();
        match said {
            Some(said) => s.probes.insert(template.to_string(), said),
            None => s.probes.remove(template),
        };
    }

    /// How `body` of `object` was refused, if this very body was refused as invalid (422)
    /// recently: not sent again.
    pub fn refusal(&self, object: &ObjectId, body: u64) -> Option<WriteError> {
        let s = self.inner.lock();
        let f = s.failed.get(object)?;
        let refused = matches!(f.error, WriteError::Invalid(_)) && f.at.elapsed() < REFUSED_FOR;
        (f.body == body && refused).then(|| f.error.clone())
    }

    /// The writes whose last attempt the server refused as invalid (object, its message), at
    /// most [`PUBLISHED_REFUSALS`], each message at most 512 bytes: what the leader publishes
    /// with its health, for views elsewhere to show on the object.
    pub fn refusals(&self) -> Vec<(ObjectId, String)> {
        let failed = self.failed_writes().into_iter().filter(|(_, f)| f.refused);
        let clipped = failed.map(|(o, f)| (o, clip(&f.why, 512)));
        clipped.take(PUBLISHED_REFUSALS).collect()
    }

    /// The last failed write of each object that has not passed since, as views show it.
    pub fn failed_writes(&self) -> BTreeMap<ObjectId, FailedWrite> {
        let s = self.inner.lock();
        let write = |f: &Failed| FailedWrite {
            why: f.error.to_string(),
            refused: matches!(f.error, WriteError::Invalid(_)),
            contested: false,
        };
        let mut writes: BTreeMap<ObjectId, FailedWrite> = s
            .failed
            .iter()
            .map(|(o, f)| (o.clone(), write(f)))
            .collect();
        // Not written at all now, whatever the last write met.
        for c in s.contests.current() {
            let why = contest_text(&c);
            let contested = FailedWrite {
                why,
                refused: false,
                contested: true,
            };
            writes.insert(c.object, contested);
        }
        writes
    }

    /// `identity` holds the Lease now, as this copy sees it.
    pub fn saw_holder(&self, identity: &str) {
        let mut s = self.inner.lock();
        if s.holders.iter().any(|h| h == identity) {
            return;
        }
        if s.holders.len() == HOLDERS_KEPT {
            s.holders.pop_front();
        }
        s.holders.push_back(identity.to_string());
    }

    /// Whether `identity` holds or held the Lease, as this copy has seen it.
    pub fn was_holder(&self, identity: &str) -> bool {
        self.inner.lock().holders.iter().any(|h| h == identity)
    }

    /// Why this copy can never lead as its rights stand, if it cannot.
    pub fn lacking_rights(&self) -> Option<String> {
        self.inner.lock().lacking_rights.clone()
    }

    pub fn set_lacking_rights(&self, why: Option<String>) {
        self.change(|s| s.lacking_rights = why);
    }

    /// The thresholds of [`Contests`] (before any write: what was counted is forgotten).
    pub fn set_contest_tuning(&self, tuning: crate::core::contest::Tuning) {
        self.inner.lock().contests = Contests::new(tuning);
    }

    /// How long `object` is not written from now, if another writer contests it.
    pub fn contest_held(&self, object: &ObjectId) -> Option<std::time::Duration> {
        self.inner.lock().contests.held(object, contest_now())
    }

    /// A write of `object` by this copy undid a change field manager `other` made.
    pub fn undid(&self, object: &ObjectId, other: &str) -> Undo {
        let undo = self
            .inner
            .lock()
            .contests
            .undid(object, other, contest_now());
        if !matches!(undo, Undo::Counted) {
            self.touch();
        }
        undo
    }

    /// The contests that are over now (each said once, then forgotten).
    pub fn settle_contests(&self) -> Vec<Contest> {
        let ended = self.inner.lock().contests.settle(contest_now());
        if !ended.is_empty() {
            self.touch();
        }
        ended
    }

    /// The objects another writer contests now, by name.
    pub fn contests(&self) -> Vec<Contest> {
        self.inner.lock().contests.current()
    }

    /// What the leader publishes of its contests: (the object, [`contest_text`]).
    pub fn published_contests(&self) -> Vec<(ObjectId, String)> {
        let contests = self.contests().into_iter().take(PUBLISHED_REFUSALS);
        contests
            .map(|c| (c.object.clone(), contest_text(&c)))
            .collect()
    }

    /// Whether the last write of some object was forbidden.
    pub fn any_forbidden(&self) -> bool {
        let forbidden = |f: &Failed| matches!(f.error, WriteError::Forbidden(_));
        self.inner.lock().failed.values().any(forbidden)
    }
}

/// What a contest says, wherever it is shown (log, Event, `check`, the TUI): who, how often,
/// until when, and what ends it.
pub fn contest_text(c: &Contest) -> String {
    let now = contest_now();
    let held_for = c.held_until.saturating_sub(now).as_secs();
    let since = now.saturating_sub(c.since).as_secs();
    let next = if held_for == 0 {
        "one write tried again, to see whether the other writer undoes it".to_string()
    } else {
        format!("one write tried again in {held_for}s")
    };
    format!(
        "another writer (field manager {:?}) undid this copy's writes of {} {} times within a minute: not written since {since}s ago, {next} (the wait doubles while the other writer stays; stop one of the two writers — Gatekeeper's generator: kubectl vap help gatekeeper)",
        c.other, c.object, c.undos
    )
}

/// The contests' clock (`core::contest` is told the time): monotonic, from the first time a
/// copy of this process asked.
pub fn contest_now() -> std::time::Duration {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed()
}
