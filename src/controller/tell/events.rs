//! Outcomes as Kubernetes Events (events.k8s.io/v1), and every copy reading them back. The
//! writes of one burst per template (up to [`WINDOW`]) become one Event, so the convergence of
//! 5,000 bindings costs a few dozen Events, not 5,000.
//!
//! Not kube-runtime's `Recorder`: it keys its series on reason and action but not on the note
//! and, on a repeat, patches the *first* note's count, so "2 writes" after "25 writes" would
//! read "25 writes (x2)". Here an Event repeats only with the same note; a new note is a new
//! Event. Every Event carries our managed-by label, which is how any copy (a TUI on a laptop)
//! watches them with a label selector.

use crate::controller::reconcile::keys::Key;
use crate::controller::view::state::{AccessError, ClusterEvent, EventReason, WriteError};
use crate::controller::view::status::clip;
use crate::core::{PlannedWrite, Verb};
use crate::model::{CONSTRAINT_API_VERSION, MANAGED_BY_LABEL, ObjectRef};
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The reporting controller, and the value of our managed-by label.
pub const REPORTER: &str = "kubectl-vap";
/// Where Events about cluster-scoped objects (the templates) go, as kube-runtime's and
/// client-go's recorders put them.
pub const EVENTS_NAMESPACE: &str = "default";
/// A burst of writes of one template is reported once this long after its first write.
pub const WINDOW: Duration = Duration::from_secs(1);
/// An Event repeats (series count) only within this long; later it is a new Event.
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);
/// The API server's limit on a note.
const NOTE_MAX: usize = 1024;

/// What happened, as the writer and the request handler tell it.
#[derive(Debug)]
enum Fact {
    /// [`Recorder::written`]: a write of `object` in the reconcile of a key of `template`,
    /// and its error if it failed.
    Write {
        template: String,
        verb: Verb,
        object: ObjectRef,
        error: Option<String>,
    },
    /// Reported at once, unaggregated.
    Event(Outgoing),
    /// Publish every burst now (this copy is about to release the Lease), then answer.
    Flush(tokio::sync::oneshot::Sender<()>),
    /// [`Recorder::decided`]: `regarding` is invalid for `why`, or valid (`None`); `logged`:
    /// the watch that read it logged why already.
    Invalid {
        regarding: Regarding,
        why: Option<String>,
        logged: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub regarding: Regarding,
    pub reason: EventReason,
    pub action: &'static str,
    pub note: String,
    pub warning: bool,
    /// The request whose outcome it reports (its id, in the [`REQUEST_ANNOTATION`]).
    pub request: Option<String>,
}

/// The annotation an Event about a request's outcome carries the request's id in: the
/// asker pairs the Event with its answer by it.
pub const REQUEST_ANNOTATION: &str = "kubectl-vap.io/request";

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Regarding {
    Template(String),
    /// The Lease (what "reconcile everything" is about).
    Lease {
        namespace: String,
        name: String,
    },
    /// A constraint (cluster-scoped, as every Gatekeeper constraint).
    Constraint {
        kind: String,
        name: String,
    },
}

impl Regarding {
    /// Where its Events live: the object's namespace, `default` for cluster-scoped ones.
    pub fn namespace(&self) -> &str {
        match self {
            Regarding::Template(_) | Regarding::Constraint { .. } => EVENTS_NAMESPACE,
            Regarding::Lease { namespace, .. } => namespace,
        }
    }
}

/// The resource name a view's unreadable Events are reported under (in its access errors;
/// informational: never part of readiness or of what the copy decides).
pub const EVENTS_RESOURCE: &str = "events.events.k8s.io";

/// The namespaces every view watches for Events: `default` (the templates') and the Lease's
/// (what "reconcile everything" regards), once each.
pub fn watched_namespaces(lease_namespace: &str) -> Vec<String> {
    let mut out = vec![EVENTS_NAMESPACE.to_string(), lease_namespace.to_string()];
    out.dedup();
    out
}

/// The key's template (Gatekeeper's rule: a template's name is its kind in lower case).
fn template_of(key: &Key) -> String {
    match key {
        Key::Template(t) => t.clone(),
        Key::Constraint { kind, .. } => kind.to_lowercase(),
    }
}

/// Where the writer and the request handler report; a no-op for copies that do not write.
#[derive(Clone, Default)]
pub struct Recorder {
    tx: Option<mpsc::UnboundedSender<Fact>>,
}

impl Recorder {
    /// A recorder whose facts go to [`run`].
    pub fn new() -> (Recorder, Facts) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Recorder { tx: Some(tx) }, Facts(rx))
    }

    fn send(&self, fact: Fact) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(fact);
        }
    }

    /// A write of `w` (in the reconcile of `key`) passed or failed.
    pub fn written(&self, w: &PlannedWrite, error: Option<&WriteError>, key: &Key) {
        self.send(Fact::Write {
            template: template_of(key),
            verb: w.verb,
            object: w.object.clone(),
            error: error.map(|e| e.to_string()),
        });
    }

    /// Another writer keeps undoing this copy's writes of an object in the reconcile of `key`:
    /// a Warning `WriterConflict` on the key's template, once per contest (`note` says it).
    pub fn contested(&self, key: &Key, note: String) {
        self.publish(Outgoing {
            regarding: Regarding::Template(template_of(key)),
            reason: EventReason::WriterConflict,
            action: "Write",
            note: clip(&note, NOTE_MAX),
            warning: true,
            request: None,
        });
    }

    /// Publishes what is gathered now, waiting (at most 2 s) until it is sent: called before
    /// the Lease is released, while this copy may still write, so the last burst — a write
    /// the server refused, say — is not lost with the task.
    pub async fn flush(&self) {
        let Some(tx) = &self.tx else { return };
        let (done, flushed) = tokio::sync::oneshot::channel();
        if tx.send(Fact::Flush(done)).is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(2), flushed).await;
        }
    }

    /// The leader decided `regarding` (a template or constraint) invalid for `why`, or
    /// valid (`None`: a later error is reported again). A Warning Event `Invalid` is published
    /// once per reason, not per reconcile, so `kubectl events --for` shows why it is not turned
    /// into a VAP or binding. `logged`: the watch that read it (an undecodable stub) logged why.
    pub fn decided(&self, regarding: Regarding, why: Option<String>, logged: bool) {
        self.send(Fact::Invalid {
            regarding,
            why,
            logged,
        });
    }

    pub fn publish(&self, event: Outgoing) {
        self.send(Fact::Event(event));
    }
}

pub struct Facts(mpsc::UnboundedReceiver<Fact>);

/// The writes of one template in one burst.
#[derive(Default)]
struct Burst {
    first: Option<Instant>,
    /// (verb, kind) → the count of writes and the objects written: one object written three
    /// times (a VAP widened as its constraints came) is one object, not three.
    done: BTreeMap<(String, String), (usize, BTreeSet<String>)>,
    failed: Vec<String>,
}

fn short_kind(kind: &str) -> &str {
    match kind {
        crate::model::VAP_KIND => "VAP",
        crate::model::VAPB_KIND => "binding",
        crate::core::crd::CRD_KIND => "CRD",
        k => k,
    }
}

/// "created VAP gatekeeper-x, created 25 bindings, updated binding b0".
fn written_note(done: &BTreeMap<(String, String), (usize, BTreeSet<String>)>) -> String {
    let parts = done.iter().map(|((verb, kind), (writes, objects))| {
        let (kind, writes, n) = (short_kind(kind), *writes, objects.len());
        match objects.first() {
            Some(name) if n == 1 && writes > 1 => format!("{verb} {kind} {name} {writes} times"),
            Some(name) if n == 1 => format!("{verb} {kind} {name}"),
            _ if writes > n => format!("{verb} {n} {kind}s ({writes} writes)"),
            _ => format!("{verb} {n} {kind}s"),
        }
    });
    parts.collect::<Vec<_>>().join(", ")
}

impl Burst {
    fn add(&mut self, verb: Verb, object: &ObjectRef, error: Option<String>) {
        self.first.get_or_insert_with(Instant::now);
        match error {
            None => {
                // created, updated, deleted
                let past = format!("{}d", verb.as_str());
                let (writes, names) = self.done.entry((past, object.kind.clone())).or_default();
                *writes += 1;
                names.insert(object.name.clone());
            }
            Some(e) => {
                let (verb, kind) = (verb.as_str(), short_kind(&object.kind));
                self.failed
                    .push(format!("{verb} {kind} {}: {e}", object.name));
            }
        }
    }

    fn events(self, template: &str) -> Vec<Outgoing> {
        let event = |reason, note: String, warning| Outgoing {
            regarding: Regarding::Template(template.to_string()),
            reason,
            action: "Write",
            note: clip(&note, NOTE_MAX),
            warning,
            request: None,
        };
        let mut out = Vec::new();
        if !self.done.is_empty() {
            out.push(event(EventReason::Written, written_note(&self.done), false));
        }
        if !self.failed.is_empty() {
            let n = self.failed.len();
            let s = if n == 1 { "" } else { "s" };
            let note = format!("{n} write{s} failed: {}", self.failed.join("; "));
            out.push(event(EventReason::WriteFailed, note, true));
        }
        out
    }
}

/// Publishes what the recorder receives, until its senders are gone. `uid_of` names a
/// template's uid (events regard a specific object); `left` is what is left of the write fence:
/// a copy that was paused or lost the Lease reports nothing more (what it would say is the new
/// holder's to say), and an Event's answer is awaited no longer than the fence allows.
pub async fn run(
    client: kube::Client,
    instance: String,
    Facts(mut rx): Facts,
    uid_of: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    left: impl Fn() -> Option<Duration> + Send + Sync + 'static,
) {
    let mut publisher = Publisher {
        client,
        instance,
        series: HashMap::new(),
        failing: false,
        left: Box::new(left),
    };
    let mut bursts: BTreeMap<String, Burst> = BTreeMap::new();
    // What each invalid template or constraint was last reported for.
    let mut said_invalid: HashMap<Regarding, String> = HashMap::new();
    loop {
        let due = bursts
            .values()
            .filter_map(|b| b.first)
            .min()
            .map(|t| t + WINDOW);
        // `None`: a window is over; `Some(None)`: the senders are gone.
        let next = match due {
            Some(due) => tokio::select! {
                f = rx.recv() => Some(f),
                _ = tokio::time::sleep_until(due.into()) => None,
            },
            None => Some(rx.recv().await),
        };
        let closed = matches!(next, Some(None));
        let mut flushed = None;
        match next.flatten() {
            Some(Fact::Write {
                template,
                verb,
                object,
                error,
            }) => {
                bursts
                    .entry(template)
                    .or_default()
                    .add(verb, &object, error);
            }
            Some(Fact::Event(e)) => publisher.publish(&e, &uid_of).await,
            Some(Fact::Flush(done)) => flushed = Some(done),
            Some(Fact::Invalid {
                regarding,
                why: None,
                ..
            }) => {
                if said_invalid.remove(&regarding).is_some() {
                    say_validity(&regarding, None);
                }
            }
            Some(Fact::Invalid {
                regarding,
                why: Some(why),
                logged,
            }) if said_invalid.get(&regarding) != Some(&why) && (publisher.left)().is_some() => {
                if !logged {
                    say_validity(&regarding, Some(&why));
                }
                let event = Outgoing {
                    regarding: regarding.clone(),
                    reason: EventReason::Invalid,
                    action: "Decide",
                    note: clip(&why, NOTE_MAX),
                    warning: true,
                    request: None,
                };
                publisher.publish(&event, &uid_of).await;
                said_invalid.insert(regarding, why);
            }
            Some(Fact::Invalid { .. }) | None => {}
        }
        let now = Instant::now();
        let ripe;
        (ripe, bursts) = std::mem::take(&mut bursts).into_iter().partition(|(_, b)| {
            closed || flushed.is_some() || b.first.is_some_and(|t| now >= t + WINDOW)
        });
        for (t, burst) in ripe {
            for e in burst.events(&t) {
                publisher.publish(&e, &uid_of).await;
            }
        }
        if let Some(done) = flushed {
            let _ = done.send(());
        }
        if closed {
            return;
        }
    }
}

/// The one log line of a template or constraint that turned invalid (`why`), or valid again:
/// what someone must act on, said once per change as its Warning Event is.
fn say_validity(regarding: &Regarding, why: Option<&str>) {
    let (what, cannot) = match regarding {
        Regarding::Template(t) => (format!("template {t}"), "be generated"),
        Regarding::Constraint { kind, name } => (format!("constraint {kind}/{name}"), "be bound"),
        Regarding::Lease { .. } => return,
    };
    match why {
        Some(why) => tracing::warn!("{what} cannot {cannot}: {why}"),
        None => tracing::info!("{what} is valid again"),
    }
}

struct Publisher {
    client: kube::Client,
    instance: String,
    /// (regarding, reason, note) → the Event last published, for a series on an exact repeat.
    series: HashMap<(Regarding, EventReason, String), (String, i32, Instant)>,
    /// Publishing fails (RBAC, server): logged once until it passes again.
    failing: bool,
    left: Box<dyn Fn() -> Option<Duration> + Send + Sync>,
}

impl Publisher {
    async fn publish(&mut self, e: &Outgoing, uid_of: &impl Fn(&str) -> Option<String>) {
        let Some(left) = (self.left)() else {
            tracing::debug!("not leading: dropping {e:?}");
            return;
        };
        self.series
            .retain(|_, (_, _, at)| at.elapsed() < SERIES_TTL);
        let key = (e.regarding.clone(), e.reason, e.note.clone());
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let namespace = e.regarding.namespace();
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let sent = async {
            match self.series.get(&key).cloned() {
                Some((name, count, _)) => {
                    let patch = serde_json::json!({
                        "series": EventSeries { count: count + 1, last_observed_time: now.clone() }
                    });
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map(|_| (name, count + 1))
                }
                None => {
                    let event = event(&self.instance, e, now, uid_of);
                    api.create(&PostParams::default(), &event)
                        .await
                        .map(|created| (created.metadata.name.unwrap_or_default(), 1))
                }
            }
        };
        let result = match tokio::time::timeout(left, sent).await {
            Ok(r) => r.map_err(|e| unpublished(namespace, &e)),
            Err(_) => Err(format!(
                "cannot publish Events in namespace {namespace}: no answer within {:.1}s, before the write fence closed (outcomes stay in this copy's log)",
                left.as_secs_f32()
            )),
        };
        match result {
            Ok((name, count)) => {
                if std::mem::take(&mut self.failing) {
                    tracing::info!("publishing Events works again");
                }
                self.series.insert(key, (name, count, Instant::now()));
            }
            Err(e) => {
                // A lost series (the Event expired): the next repeat creates a new one.
                self.series.remove(&key);
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!("{e}");
                }
            }
        }
    }
}

/// What a failure to publish an Event in `namespace` says: the RBAC hint only when RBAC is
/// what refused (not a 422, nor a server that did not answer).
fn unpublished(namespace: &str, e: &kube::Error) -> String {
    let hint = if matches!(crate::cluster::status_code(e), Some(401 | 403)) {
        "needs create/patch on events.events.k8s.io there; "
    } else {
        ""
    };
    format!(
        "cannot publish Events in namespace {namespace}: {} ({hint}outcomes stay in this copy's log)",
        crate::cluster::describe(e)
    )
}

/// The Event for `e`, in the namespace of what it regards.
fn event(
    instance: &str,
    e: &Outgoing,
    now: MicroTime,
    uid_of: &impl Fn(&str) -> Option<String>,
) -> Event {
    let (api_version, kind, name) = match &e.regarding {
        Regarding::Template(name) => ("templates.gatekeeper.sh/v1", "ConstraintTemplate", name),
        Regarding::Lease { name, .. } => ("coordination.k8s.io/v1", "Lease", name),
        Regarding::Constraint { kind, name } => (CONSTRAINT_API_VERSION, kind.as_str(), name),
    };
    let regarding = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: Some(name.clone()),
        namespace: matches!(e.regarding, Regarding::Lease { .. })
            .then(|| e.regarding.namespace().into()),
        uid: matches!(e.regarding, Regarding::Template(_))
            .then(|| uid_of(name))
            .flatten(),
        ..Default::default()
    };
    Event {
        metadata: ObjectMeta {
            // kube-runtime's naming: unique per publication (a generateName may not end
            // in a dot, and a dash would blur the object's own name).
            name: Some(format!("{name}.{:x}", now.0.as_nanosecond().unsigned_abs())),
            namespace: Some(e.regarding.namespace().into()),
            labels: Some([(MANAGED_BY_LABEL.to_string(), REPORTER.to_string())].into()),
            annotations: e
                .request
                .as_ref()
                .map(|id| [(REQUEST_ANNOTATION.to_string(), id.clone())].into()),
            ..Default::default()
        },
        event_time: Some(now),
        action: Some(e.action.into()),
        reason: Some(e.reason.as_str().into()),
        note: Some(e.note.clone()),
        regarding: Some(regarding),
        reporting_controller: Some(REPORTER.into()),
        reporting_instance: Some(instance.to_string()),
        type_: Some(if e.warning { "Warning" } else { "Normal" }.into()),
        ..Default::default()
    }
}

/// An Event as views show it.
pub fn cluster_event(e: &Event) -> Option<ClusterEvent> {
    let regarding = e.regarding.as_ref()?;
    let series = e.series.as_ref();
    let time = series
        .map(|s| s.last_observed_time.0)
        .or(e.event_time.as_ref().map(|t| t.0))
        .or(e.deprecated_last_timestamp.as_ref().map(|t| t.0))
        .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))?;
    let time = crate::controller::store::objects::chrono_of(time)?;
    Some(ClusterEvent {
        time,
        reporter: e.reporting_instance.clone().unwrap_or_default(),
        regarding: ObjectRef::new(
            regarding.api_version.clone().unwrap_or_default(),
            regarding.kind.clone().unwrap_or_default(),
            regarding.name.clone().unwrap_or_default(),
        ),
        reason: e.reason.clone().unwrap_or_default(),
        note: e.note.clone().unwrap_or_default(),
        warning: e.type_.as_deref() == Some("Warning"),
        count: series.map_or(1, |s| u32::try_from(s.count).unwrap_or(u32::MAX)),
        request: e
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REQUEST_ANNOTATION).cloned()),
        // Decided by whoever knows the Lease's holders (`follow`'s caller).
        from_a_holder: false,
    })
}

/// Follows the Events copies of kubectl-vap report (by our label) in `namespaces`, for views:
/// each Event of another copy (`me`'s own are its reconcile actions already) is `told` once
/// per change — a series counting up is one, a relist is not (`predicate_filter`). A refused
/// watch is an access error of the copy until every namespace is watched again (`refused`:
/// the first refusal, or `None`), so a view says why the leader's outcomes are missing.
pub async fn follow(
    client: kube::Client,
    namespaces: Vec<String>,
    me: String,
    told: impl Fn(ClusterEvent),
    refused: impl Fn(Option<AccessError>) + Send + Sync + 'static,
) {
    use futures::StreamExt;
    use kube::runtime::{PredicateConfig, WatchStreamExt, watcher};
    // Per namespace: the refusal of its watch, if refused.
    let refusals = std::sync::Arc::new(parking_lot::Mutex::new(vec![None; namespaces.len()]));
    let refused = std::sync::Arc::new(refused);
    let config = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={REPORTER}"));
    let streams = namespaces.iter().enumerate().map(|(i, ns)| {
        let api: Api<Event> = Api::namespaced(client.clone(), ns);
        let what = format!("kubectl-vap's Events in namespace {ns}");
        let (ns, refusals, refused) = (ns.clone(), refusals.clone(), refused.clone());
        crate::cluster::watch::changes(api, config.clone(), what)
            .inspect(move |r| {
                // Only if the server answered (no answer is an outage, reported as such).
                let now = r.as_ref().err().and_then(|e| {
                    let status = crate::cluster::watch::status(e)?;
                    let mut error =
                        AccessError::from_status(EVENTS_RESOURCE, Some(status), "watching", e);
                    error.message = format!(
                        "{} (in namespace {ns}: the leader's outcomes are not shown here)",
                        error.message
                    );
                    Some(error)
                });
                let mut all = refusals.lock();
                if all[i] == now {
                    return;
                }
                if let Some(e) = &now {
                    tracing::info!("cannot watch {}", e.message);
                }
                all[i] = now;
                refused(all.iter().flatten().next().cloned());
            })
            .applied_objects()
            .predicate_filter(said, PredicateConfig::default())
    });
    let mut events = futures::stream::select_all(streams);
    while let Some(item) = events.next().await {
        let Ok(ev) = item else { continue };
        if let Some(e) = cluster_event(&ev).filter(|e| e.reporter != me) {
            told(e);
        }
    }
}

/// What an Event says, as a hash: the same Event listed again is no news, a change is.
fn said(e: &Event) -> Option<u64> {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let e = cluster_event(e)?;
    let said = (e.time, e.count, e.note, e.reason, e.warning);
    Some(BuildHasherDefault::<DefaultHasher>::default().hash_one(said))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{VAP_KIND, VAPB_KIND};

    fn obj(kind: &str, name: &str) -> ObjectRef {
        ObjectRef::new("v1", kind, name)
    }

    #[test]
    fn the_rbac_hint_only_when_rbac_refused() {
        let status = |code: u16| {
            kube::Error::Api(Box::new(
                serde_json::from_value(serde_json::json!({ "code": code, "message": "m" }))
                    .expect("a Status"),
            ))
        };
        assert!(unpublished("default", &status(403)).contains("needs create/patch"));
        assert!(!unpublished("default", &status(422)).contains("needs create/patch"));
        let unanswered = kube::Error::Service("connection refused".into());
        let said = unpublished("default", &unanswered);
        assert!(!said.contains("needs create/patch"), "{said}");
        assert!(
            said.ends_with("(outcomes stay in this copy's log)"),
            "{said}"
        );
    }

    #[test]
    fn a_burst_is_one_event_per_template_counting_objects_not_writes() {
        let vap = |name| obj(VAP_KIND, name);
        let binding = |name: &str| obj(VAPB_KIND, name);
        let mut b = Burst::default();
        for _ in 0..3 {
            b.add(Verb::Update, &vap("gatekeeper-a"), None);
        }
        assert_eq!(written_note(&b.done), "updated VAP gatekeeper-a 3 times");
        b.add(Verb::Update, &vap("gatekeeper-b"), None);
        assert_eq!(written_note(&b.done), "updated 2 VAPs (4 writes)");
        let mut b = Burst::default();
        b.add(Verb::Create, &vap("gatekeeper-x"), None);
        for i in 0..25 {
            b.add(Verb::Create, &binding(&format!("b{i}")), None);
        }
        b.add(Verb::Update, &binding("b0"), None);
        b.add(Verb::Create, &binding("bad"), Some("forbidden: no".into()));
        let events = b.events("k8sx");
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[0].note,
            "created VAP gatekeeper-x, created 25 bindings, updated binding b0"
        );
        assert!(!events[0].warning);
        assert_eq!(events[1].reason, EventReason::WriteFailed);
        assert_eq!(
            events[1].note,
            "1 write failed: create binding bad: forbidden: no"
        );
        assert!(events[1].warning);
    }

    #[test]
    fn a_long_note_is_clipped_at_the_limit() {
        let s = clip(&"é".repeat(2000), NOTE_MAX);
        assert!(s.len() <= NOTE_MAX && s.ends_with('…'));
    }

    /// The Event `event` builds for an Outgoing about `regarding`, at the epoch.
    fn event_of(regarding: Regarding) -> Event {
        let outgoing = Outgoing {
            regarding,
            reason: EventReason::WriteFailed,
            action: "Write",
            note: "1 write failed".into(),
            warning: true,
            request: None,
        };
        let now = MicroTime(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        event("copy-1", &outgoing, now, &|_| Some("uid-1".into()))
    }

    #[test]
    fn an_event_listed_again_says_nothing_new_and_counted_up_does() {
        let first = event_of(Regarding::Template("k8sx".into()));
        assert!(said(&first).is_some());
        assert_eq!(said(&first.clone()), said(&first));
        let mut counted = first.clone();
        counted.series = Some(EventSeries {
            count: 2,
            last_observed_time: first.event_time.clone().expect("a time"),
        });
        assert_ne!(said(&counted), said(&first));
    }

    #[test]
    fn an_event_lives_in_the_namespace_of_what_it_regards() {
        let lease = event_of(Regarding::Lease {
            namespace: "gatekeeper-system".into(),
            name: "kubectl-vap".into(),
        });
        assert_eq!(
            lease.metadata.namespace.as_deref(),
            Some("gatekeeper-system")
        );
        assert_eq!(
            lease.regarding.and_then(|r| r.namespace).as_deref(),
            Some("gatekeeper-system")
        );
        let template = event_of(Regarding::Template("k8sx".into()));
        assert_eq!(template.metadata.namespace.as_deref(), Some("default"));
        // Views watch both, once each.
        assert_eq!(
            watched_namespaces("gatekeeper-system"),
            ["default", "gatekeeper-system"]
        );
        assert_eq!(watched_namespaces("default"), ["default"]);
    }
}
