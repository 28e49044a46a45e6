//! Watches feeding the stores, and the keys each event concerns (a VAP or binding: its
//! controller owner, so an edited or deleted object is repaired at once).
//!
//! A (re)list is acted on once it is complete ([`Change::Listed`]): the store is swapped only
//! then, so a reconcile started from an item of an unfinished list would read the old store.
//! After a list, everything the store concerns is enqueued again, which also covers objects
//! deleted while the watch was down (a relist drops them without an event).

use crate::cluster::decode::{Objects, Undecodable};
use crate::cluster::discovery::constraint_resource;
use crate::controller::reconcile::keys::{Key, Obj};
use crate::controller::reconcile::queue::SharedQueue;
use crate::controller::reconcile::world::{ConstraintStore, Enqueue, TemplateStore};
use crate::controller::store::objects::{
    binding_keys, controllers_in, established, is_constraint_crd, keep_last_writer, policy_keys,
};
use crate::controller::store::stores::{KindWatch, Stores, TypedStore};
use crate::controller::tasks::Lifetime;
use crate::controller::tasks::{Tasks, changed};
use crate::controller::tell::outage::{Outage, SUMMARY_EVERY};
use crate::controller::view::state::{AccessError, AccessErrorKind};
use crate::controller::view::status::Status;
use crate::model::{CONSTRAINTS_GROUP, TEMPLATES_GROUP};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Resource;
use kube::api::{Api, DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a store keeps of an object: what the reconciler and the views read, nothing more.
pub trait Trim: Resource {
    /// managedFields are most of a small object's bytes: all but who last changed the object
    /// (its newest entry's manager, without the fields) is dropped, so they cost neither memory
    /// nor the serialization of every read.
    fn trim(&mut self) {
        keep_last_writer(self.meta_mut());
    }
}

impl Trim for DynamicObject {}

impl Trim for CustomResourceDefinition {
    /// Every CRD in the cluster is watched (there is no server-side filter by group), and some
    /// carry megabytes of schema. Of other groups' CRDs only the group, the names and the
    /// `Established` condition are read, so schemas, printer columns, conversion and
    /// annotations (a `kubectl apply`-ed CRD keeps a second copy of itself there) are dropped.
    /// Constraint CRDs are ours to compare and update: they are kept whole.
    fn trim(&mut self) {
        keep_last_writer(&mut self.metadata);
        if self.spec.group == CONSTRAINTS_GROUP {
            return;
        }
        self.metadata.annotations = None;
        self.spec.conversion = None;
        for v in &mut self.spec.versions {
            v.schema = None;
            v.additional_printer_columns = None;
            v.selectable_fields = None;
        }
    }
}

/// May touch what the watches and their handlers use: the client, the stores they fill, the
/// queue their events feed, the status and the outage log they report to, and the supervisor a
/// watch (a constraint kind's too, as its CRD comes) starts through.
#[derive(Clone)]
pub struct WatchContext {
    pub client: kube::Client,
    pub stores: Arc<Stores>,
    pub queue: Arc<SharedQueue>,
    pub status: Arc<Status>,
    pub outage: Arc<Outage>,
    pub tasks: Arc<Tasks>,
}

/// What a watch reports to its handler.
pub enum Change<'a, K> {
    Applied(&'a K),
    Deleted(&'a K),
    /// A full list finished and is in the store (start-up, or a relist after a gap).
    Listed,
}

/// A (re)list is in the store: complete, then the handler, then listed (`stores::Listing`
/// says why in this order).
fn list_done<K, F>(world: &WatchContext, resource: &str, on_change: &F)
where
    F: Fn(&WatchContext, Change<'_, K>),
{
    world.stores.set_complete(resource);
    world.status.set_access(resource, None);
    on_change(world, Change::Listed);
    // Keys that found some store unknown come back: this one may have been it.
    world.queue.unpark();
    world.stores.set_listed(resource);
}

/// Runs a reflector of our own for `api` into `writer` (a task of the copy), calling
/// `on_change` for every change. Not kube-runtime's, whose watcher reports a list as done
/// before it starts the watch (one that cannot start leaves a store that looks complete and
/// never changes): here the store is swapped in once the watch has *started*, and any error
/// makes it unknown until a fresh list and watch succeed. A watch the server ends (its
/// timeout) is resumed without a relist; an undecodable object is a stub, reported once.
pub fn spawn_watch<K, F>(
    api: Api<K>,
    mut writer: Writer<K>,
    resource: String,
    world: WatchContext,
    on_change: F,
) -> tokio::task::AbortHandle
where
    K: Trim + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
    F: Fn(&WatchContext, Change<'_, K>) + Send + Sync + 'static,
{
    let objects: Objects<K> = Objects::new(api.clone().into_client(), api.resource_url());
    let name = format!("watch {resource}");
    let tasks = world.tasks.clone();
    tasks.spawn(name, Lifetime::Copy, async move {
        // Lists from the API server's watch cache (resourceVersion=0), as client-go's do: a
        // quorum read of etcd buys nothing the watch that follows does not correct.
        let lp = ListParams::default().match_any();
        let wp = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
        let mut relist = world.stores.relists();
        let mut health = Health::default();
        let mut undecodable = Reported::default();
        let mut backoff = RETRY_MIN;
        let mut last_expiry: Option<tokio::time::Instant> = None;
        loop {
            relist.borrow_and_update();
            let failure = 'attempt: {
                let list = match objects.list(&lp).await {
                    Ok(list) => list,
                    Err(e) => break 'attempt Some(failure_of(&resource, "listing", &e)),
                };
                let mut rv = list.resource_version.clone();
                list.undecodable
                    .iter()
                    .for_each(|u| undecodable.report(&resource, u));
                let mut stream = match objects.watch(&wp, &rv).await {
                    Ok(stream) => stream,
                    Err(e) => break 'attempt Some(failure_of(&resource, "watching", &e)),
                };
                // A relist was asked for while listing: this list may predate it.
                if relist.has_changed().unwrap_or(false) {
                    break 'attempt None;
                }
                writer.apply_watcher_event(&watcher::Event::Init);
                for mut o in list.items {
                    o.trim();
                    writer.apply_watcher_event(&watcher::Event::InitApply(o));
                }
                writer.apply_watcher_event(&watcher::Event::InitDone);
                world.stores.saw(&resource, &rv, true);
                world.status.touch();
                health.recovered(&world, &resource);
                backoff = RETRY_MIN;
                list_done(&world, &resource, &on_change);
                // The watch's events into the store until it breaks (the failure), or a relist is
                // asked for (`None`); a watch the server ends is resumed from `rv`.
                let ended = loop {
                    let event = tokio::select! {
                        e = tokio::time::timeout(WATCH_SILENT_MAX, stream.next()) => match e {
                            Ok(e) => e,
                            Err(_) => break Some(Failure::silent(&resource)),
                        },
                        () = changed(&mut relist) => break None,
                    };
                    if let Some(Ok((_, Some(bad)))) = &event {
                        undecodable.report(&resource, bad);
                    }
                    let (mut o, deleted) = match event {
                        Some(Ok((WatchEvent::Added(o) | WatchEvent::Modified(o), _))) => (o, false),
                        Some(Ok((WatchEvent::Deleted(o), _))) => (o, true),
                        Some(Ok((WatchEvent::Bookmark(b), _))) => {
                            rv = b.metadata.resource_version;
                            world.stores.saw(&resource, &rv, false);
                            continue;
                        }
                        // 410 Gone (our resourceVersion is too old) and the like: relist.
                        Some(Ok((WatchEvent::Error(e), _))) => {
                            let code = Some(e.code);
                            break Some(Failure::new(
                                &resource, code, "watching", &e.message, false,
                            ));
                        }
                        Some(Err(e)) => break Some(failure_of(&resource, "watching", &e)),
                        None => match objects.watch(&wp, &rv).await {
                            Ok(s) => {
                                stream = s;
                                continue;
                            }
                            Err(e) => break Some(failure_of(&resource, "watching", &e)),
                        },
                    };
                    o.trim();
                    rv = o.meta().resource_version.clone().unwrap_or(rv);
                    let (event, change) = if deleted {
                        (watcher::Event::Delete(o.clone()), Change::Deleted(&o))
                    } else {
                        (watcher::Event::Apply(o.clone()), Change::Applied(&o))
                    };
                    writer.apply_watcher_event(&event);
                    world.stores.saw(&resource, &rv, false);
                    world.status.touch();
                    on_change(&world, change);
                };
                // Not watched any more: unknown until the next list and watch.
                world.stores.unlist(&resource);
                world.status.touch();
                ended
            };
            let Some(failure) = failure else {
                // A relist (fence lost): at once, no backoff.
                continue;
            };
            // An expired resourceVersion is relisted at once and said at info; only one in a
            // row: a server that answers 410 again at once waits like any other failure.
            if failure.expired && last_expiry.is_none_or(|t| t.elapsed() > RETRY_MAX) {
                last_expiry = Some(tokio::time::Instant::now());
                tracing::info!(
                    "{resource}: the resourceVersion we watched from has expired (410 Gone, routine after an API server restart); listing again"
                );
                continue;
            }
            health.failed(&world, &resource, &failure);
            let (wait, next) = retry_after(backoff, &failure);
            backoff = next;
            world.status.set_access(&resource, Some(failure.error));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = changed(&mut relist) => {}
            }
        }
    })
}

/// How long a watch waits after `failure`, and its backoff after that. A server that answers
/// "not now" with a time (429 "storage is (re)initializing" after a restart says 1 s) is asked
/// again then, and the backoff grown while nothing answered starts over: measured before, a
/// constraint watch that met those 429s after a SIGKILL restart waited out a 16 s backoff and
/// came back 25 s after the server served its kind (`benches/recovery.rs`). Anything else
/// waits the backoff, which doubles up to [`RETRY_MAX`].
fn retry_after(backoff: Duration, failure: &Failure) -> (Duration, Duration) {
    if !failure.unreachable && failure.retry_after > Duration::ZERO {
        return (failure.retry_after.min(RETRY_MAX), RETRY_MIN);
    }
    (backoff, (backoff * 2).min(RETRY_MAX))
}

/// Server-side timeout of one watch request (kube-runtime's default): the watch is then
/// resumed from the last resourceVersion.
const WATCH_TIMEOUT_SECS: u32 = 290;
/// A watch that sends nothing, not even its end, this long after the server should have ended
/// it is a connection nobody answers on: given up, as a failure without an answer.
const WATCH_SILENT_MAX: Duration = Duration::from_secs(WATCH_TIMEOUT_SECS as u64 + 30);
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How many undecodable objects a watch remembers having reported (beyond that, a relist may
/// report one again).
const REPORTED_MAX: usize = 1024;

/// Undecodable objects already reported, by object and resourceVersion: each version of one
/// is logged once, not on every relist.
#[derive(Default)]
struct Reported(std::collections::HashSet<(String, String)>);

impl Reported {
    fn report(&mut self, resource: &str, u: &Undecodable) {
        if self.0.len() >= REPORTED_MAX {
            self.0.clear();
        }
        let version = (u.object.clone(), u.resource_version.clone());
        if self.0.insert(version) {
            tracing::warn!(
                "{resource}: {} cannot be decoded: {}; it is reported as an error of its own, everything else of {resource} is read as usual",
                crate::text::printable(&u.object),
                crate::text::printable(&u.reason)
            );
        }
    }
}

/// Why a list or watch failed, and whether the server answered at all.
struct Failure {
    error: AccessError,
    /// No answer at all (connection refused or reset, no answer in time): logged as an API
    /// server outage ([`crate::controller::tell::outage`]), once for every watch, not per resource.
    unreachable: bool,
    /// Throttled or unavailable (429, 503, 504): expected to pass; said only if it lasts.
    transient: bool,
    /// 410 Gone: the resourceVersion we watch from is older than the server keeps (after
    /// the API server restarts, or a long gap). Routine: a fresh list and watch, at once.
    expired: bool,
    /// How long the server asked to wait (its `retryAfterSeconds`), zero if it did not.
    retry_after: Duration,
}

impl Failure {
    fn new(
        resource: &str,
        status: Option<u16>,
        verb: &str,
        message: &str,
        unreachable: bool,
    ) -> Self {
        Failure {
            error: AccessError::from_status(resource, status, verb, &message),
            unreachable,
            // 410 too: one that keeps coming back is said only if it lasts.
            transient: matches!(status, Some(410 | 429 | 503 | 504)),
            expired: status == Some(410),
            retry_after: Duration::ZERO,
        }
    }

    /// Nothing for [`WATCH_SILENT_MAX`]: nobody answers on the connection.
    fn silent(resource: &str) -> Self {
        let secs = WATCH_SILENT_MAX.as_secs();
        let message = format!(
            "nothing for {secs}s, not even the end the server owed after {WATCH_TIMEOUT_SECS}s"
        );
        Failure::new(resource, None, "watching", &message, true)
    }
}

/// Rate-limited logging of one watch's failures: a transient one (429, 503, 504) is said once
/// it has lasted [`SUMMARY_EVERY`], a refusal that needs a person (forbidden, not served) once,
/// again only if it changes; a recovery only if the failure was said. Failures without an
/// answer go to the copy's one outage log instead.
#[derive(Default)]
struct Health {
    since: Option<Instant>,
    /// When this resource last logged a line of its own (`None`: not yet in this failure).
    last_summary: Option<Instant>,
    /// What it last said of a refusal.
    said: Option<String>,
    retries: u64,
}

impl Health {
    fn failed(&mut self, world: &WatchContext, resource: &str, failure: &Failure) {
        let now = Instant::now();
        let message = &failure.error.message;
        self.retries += 1;
        let since = *self.since.get_or_insert(now);
        if failure.unreachable {
            world.outage.failed(resource, message);
            return;
        }
        let refused = failure.error.kind != AccessErrorKind::Other;
        let quiet = match self.last_summary {
            // Forbidden or not served: retrying changes nothing until someone acts, so once.
            _ if refused => self.said.replace(message.clone()).as_ref() == Some(message),
            // Throttled or unavailable for now (a new CRD's storage initializing answers 429):
            // said only if it lasts.
            None => failure.transient && now - since < SUMMARY_EVERY,
            Some(t) => now - t < SUMMARY_EVERY,
        };
        if quiet {
            tracing::debug!("{message}");
        } else if !refused && self.last_summary.is_some() {
            tracing::warn!(
                "{resource} unreadable for {}s, {} retries: {message}",
                (now - since).as_secs(),
                self.retries
            );
        } else {
            tracing::warn!(
                "{message}; decisions that rest on {resource} wait until it is read again"
            );
        }
        if refused || !quiet {
            self.last_summary = Some(now);
        }
    }

    fn recovered(&mut self, world: &WatchContext, resource: &str) {
        world.outage.reachable();
        // Only a resource that logged its failure logs its recovery (an outage has its own).
        if let (Some(since), Some(_)) = (self.since, self.last_summary) {
            tracing::info!(
                "{resource} listed and watched again after {}s, {} retries",
                since.elapsed().as_secs(),
                self.retries
            );
        }
        *self = Health::default();
    }
}

/// A failed request: an outage only when nothing answered (an answer that could not be
/// decoded is this resource's problem, and is logged as such).
fn failure_of(resource: &str, verb: &str, e: &kube::Error) -> Failure {
    use crate::cluster::{describe, status_code, unanswered};
    let mut failure = Failure::new(resource, status_code(e), verb, &describe(e), unanswered(e));
    if let kube::Error::Api(s) = e
        && let Some(d) = &s.details
    {
        failure.retry_after = Duration::from_secs(u64::from(d.retry_after_seconds));
    }
    failure
}

pub fn on_template(world: &WatchContext, change: Change<'_, DynamicObject>) {
    match change {
        Change::Applied(t) | Change::Deleted(t) => {
            if let Some(name) = &t.metadata.name {
                world.queue.enqueue(Key::Template(name.clone()));
            }
        }
        Change::Listed => {
            let names = world.stores.template_names().into_iter();
            enqueue_all(world, names.map(Key::Template));
            // Templates deleted while the watch was down: their VAPs name them.
            let policies = world.stores.policies();
            enqueue_all(world, policies.iter().flat_map(|p| policy_keys(p)));
        }
    }
}

pub fn on_policy(world: &WatchContext, change: Change<'_, DynamicObject>) {
    match change {
        Change::Applied(p) if world.stores.take_own_write(Obj::Policy, &p.metadata) => {}
        Change::Applied(p) | Change::Deleted(p) => enqueue_all(world, policy_keys(p)),
        // VAPs deleted while the watch was down: every template looks again.
        Change::Listed => on_template(world, Change::Listed),
    }
}

pub fn on_binding(world: &WatchContext, change: Change<'_, DynamicObject>) {
    match change {
        Change::Applied(b) if world.stores.take_own_write(Obj::Binding, &b.metadata) => {}
        Change::Applied(b) | Change::Deleted(b) => enqueue_all(world, binding_keys(b)),
        // Bindings deleted while the watch was down: every constraint looks again.
        Change::Listed => {
            let keys = world.stores.all_keys().into_iter();
            enqueue_all(world, keys.filter(|k| matches!(k, Key::Constraint { .. })));
        }
    }
}

/// A constraint CRD changed: start (or stop) the kind's watch; its constraints' readiness changed.
pub fn on_crd(world: &WatchContext, change: Change<'_, CustomResourceDefinition>) {
    match change {
        Change::Applied(crd) => crd_changed(world, crd, false),
        Change::Deleted(crd) => crd_changed(world, crd, true),
        Change::Listed => {
            let crds = world.stores.crds();
            for crd in &crds {
                crd_changed(world, crd, false);
            }
            // Kinds whose CRD went away while the watch was down.
            for kind in world.stores.watched_kinds() {
                if !crds.iter().any(|c| is_constraint_crd(c, &kind)) {
                    stop_kind(world, &kind);
                }
            }
        }
    }
}

fn crd_changed(world: &WatchContext, crd: &CustomResourceDefinition, deleted: bool) {
    // Any group: a constraint's kinds may be served by any CRD.
    world.stores.crds_changed();
    if crd.spec.group != CONSTRAINTS_GROUP {
        return;
    }
    let kind = crd.spec.names.kind.clone();
    // The template side waits for its CRD (created, Established, deleted by someone): the
    // template that controls it, and the one its kind belongs to, look again.
    if deleted || !world.stores.take_own_write(Obj::Crd, &crd.metadata) {
        let controllers = controllers_in(&crd.metadata, TEMPLATES_GROUP).map(|r| r.name.clone());
        // The same key twice is queued once.
        let templates = controllers.chain([kind.to_lowercase()]);
        enqueue_all(world, templates.map(Key::Template));
    }
    if deleted {
        stop_kind(world, &kind);
        return;
    }
    if established(crd) {
        start_kind(world, &kind, &crd.spec.names.plural);
    }
    let names = world.stores.constraint_names(&kind).into_iter();
    enqueue_all(world, names.map(|n| Key::constraint(&kind, n)));
}

/// Starts the constraint watch of `kind` if it is not running.
pub fn start_kind(world: &WatchContext, kind: &str, plural: &str) {
    world.stores.add_kind(kind, || {
        let ar = constraint_resource(kind, plural);
        let writer: Writer<DynamicObject> = Writer::new(ar.clone());
        let store = TypedStore {
            ar: ar.clone(),
            store: writer.as_reader(),
        };
        let kind_store = store.clone();
        let api: Api<DynamicObject> = Api::all_with(world.client.clone(), &ar);
        let resource = crate::cluster::discovery::resource_name(&ar);
        let kind_owned = kind.to_string();
        let on_change = move |w: &WatchContext, change: Change<'_, DynamicObject>| {
            // The kind's template too: its VAP matches what the kind's constraints match
            // (Gatekeeper names a template after its kind, lowercased).
            let template = Key::Template(kind_owned.to_lowercase());
            match change {
                Change::Applied(c) | Change::Deleted(c) => {
                    if let Some(name) = &c.metadata.name {
                        w.queue.enqueue(Key::constraint(&kind_owned, name));
                        w.queue.enqueue(template);
                    }
                }
                // The kind's constraints, and the owners of its bindings (constraints
                // deleted while the watch was down, or before this copy started).
                Change::Listed => {
                    enqueue_kind(w, &kind_owned, &kind_store);
                    w.queue.enqueue(template);
                }
            }
        };
        let task = spawn_watch(api, writer, resource.clone(), world.clone(), on_change);
        tracing::info!(kind, "watching constraints of kind {kind}");
        KindWatch {
            resource,
            store,
            task,
        }
    });
}

/// Stops the constraint watch of `kind` (its CRD is gone) and re-enqueues what depended on it.
pub fn stop_kind(world: &WatchContext, kind: &str) {
    let Some(w) = world.stores.remove_kind(kind) else {
        return;
    };
    w.task.abort();
    world.stores.unlist(&w.resource);
    // The watch may have failed on the vanishing resource first: moot once it is stopped.
    world.status.set_access(&w.resource, None);
    tracing::info!(
        kind,
        "stopped watching constraints of kind {kind} (CRD deleted)"
    );
    enqueue_kind(world, kind, &w.store);
}

/// Enqueues the constraints of `kind` in `store` and the owners of the kind's bindings.
fn enqueue_kind(world: &WatchContext, kind: &str, store: &TypedStore) {
    let names = store.names().into_iter();
    enqueue_all(world, names.map(|n| Key::constraint(kind, n)));
    let of_kind = |k: &Key| matches!(k, Key::Constraint { kind: bk, .. } if bk == kind);
    for b in world.stores.bindings() {
        enqueue_all(world, binding_keys(&b).into_iter().filter(of_kind));
    }
}

fn enqueue_all(world: &WatchContext, keys: impl IntoIterator<Item = Key>) {
    keys.into_iter().for_each(|k| world.queue.enqueue(k));
}

#[cfg(test)]
impl WatchContext {
    /// Watches' parts with empty stores on `client` (which need never answer), for unit tests.
    fn offline(client: kube::Client, admission: crate::cluster::AdmissionApi) -> Self {
        let scope = crate::controller::reconcile::keys::Scope::All;
        let (stores, _) = Stores::new(admission, scope);
        WatchContext {
            client,
            stores: Arc::new(stores),
            queue: Arc::default(),
            status: Arc::default(),
            outage: Arc::default(),
            tasks: Arc::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::store::objects::{crd_state, last_writer};
    use crate::core::desired::CrdState;
    use crate::model::{CrdInfo, Source};

    /// 410 Gone is routine (relisted at once, said at info); repeated, it waits and is said
    /// only if it lasts, as 429, 503 and 504 are; anything else is a failure said at once.
    #[test]
    fn an_expired_watch_is_routine() {
        let failure = |code| Failure::new("r", Some(code), "watching", "m", false);
        let gone = failure(410);
        assert!(gone.expired && gone.transient);
        for code in [429, 503, 504] {
            let busy = failure(code);
            assert!(busy.transient && !busy.expired, "{code}");
        }
        for code in [403, 404, 500] {
            let other = failure(code);
            assert!(!other.transient && !other.expired, "{code}");
        }
    }

    /// A "not now" with a time is retried then, and the backoff grown while nothing answered
    /// starts over; every other failure waits the doubling backoff.
    #[test]
    fn a_server_that_says_when_is_asked_again_then() {
        let grown = Duration::from_secs(16);
        let mut busy = Failure::new(
            "r",
            Some(429),
            "listing",
            "storage is (re)initializing",
            false,
        );
        busy.retry_after = Duration::from_secs(1);
        assert_eq!(
            retry_after(grown, &busy),
            (Duration::from_secs(1), RETRY_MIN)
        );
        let unreachable = Failure::new("r", None, "listing", "connection refused", true);
        assert_eq!(retry_after(grown, &unreachable), (grown, RETRY_MAX));
        let forbidden = Failure::new("r", Some(403), "listing", "forbidden", false);
        let one = Duration::from_secs(1);
        assert_eq!(retry_after(one, &forbidden), (one, 2 * one));
        let mut long = busy;
        long.retry_after = Duration::from_secs(600);
        assert_eq!(retry_after(one, &long).0, RETRY_MAX);
    }

    #[tokio::test]
    async fn a_listed_kind_is_trusted_before_its_handler_enqueues_and_synced_only_after() {
        // A world that never connects (the client is only built).
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("url"));
        let client = kube::Client::try_from(config).expect("client");
        let world = WatchContext::offline(client, crate::cluster::AdmissionApi::v1());
        let ar = constraint_resource("K8sX", "k8sx");
        let resource = crate::cluster::discovery::resource_name(&ar);
        let task = tokio::spawn(std::future::pending::<()>());
        world.stores.add_kind("K8sX", || KindWatch {
            resource: resource.clone(),
            store: TypedStore {
                store: Writer::<DynamicObject>::new(ar.clone()).as_reader(),
                ar,
            },
            task: task.abort_handle(),
        });
        assert!(!world.stores.kind_listed("K8sX"), "still listing");
        let ran = std::sync::atomic::AtomicBool::new(false);
        list_done(
            &world,
            &resource,
            &|w: &WatchContext, c: Change<'_, DynamicObject>| {
                assert!(matches!(c, Change::Listed));
                // A key this handler queues may be popped at once: the kind must be trusted.
                assert!(w.stores.kind_listed("K8sX"), "the gate would drop the key");
                // ... but not synced before the keys are queued.
                assert!(!w.stores.is_listed(&resource));
                assert!(w.stores.unlisted_kinds().contains(&resource));
                ran.store(true, std::sync::atomic::Ordering::SeqCst);
            },
        );
        assert!(ran.load(std::sync::atomic::Ordering::SeqCst));
        assert!(world.stores.is_listed(&resource) && world.stores.unlisted_kinds().is_empty());
        stop_kind(&world, "K8sX");
        assert!(!world.stores.is_listed(&resource));
        task.abort();
    }

    /// A CRD of `group`, and it trimmed.
    fn crd_of_group(group: &str) -> (CustomResourceDefinition, CustomResourceDefinition) {
        let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": format!("k8sx.{group}"),
                "annotations": { "kubectl.kubernetes.io/last-applied-configuration": "{…}" },
                "managedFields": [{ "manager": "gatekeeper", "operation": "Apply" }]
            },
            "spec": {
                "group": group,
                "names": { "kind": "K8sX", "plural": "k8sx" },
                "scope": "Cluster",
                "versions": [{ "name": "v1beta1", "served": true, "storage": true,
                               "schema": { "openAPIV3Schema": { "type": "object" } } }]
            },
            "status": { "conditions": [{ "type": "Established", "status": "True",
                                         "lastTransitionTime": "2026-11-30T09:00:00Z" }] }
        }))
        .expect("crd");
        let mut trimmed = crd.clone();
        trimmed.trim();
        (crd, trimmed)
    }

    /// Of another group's CRD only what is read is kept. A constraint CRD is compared with its
    /// template's and updated in place: its spec and annotations must survive (an update
    /// without them would drop them on the server).
    #[test]
    fn a_trimmed_crd_keeps_what_is_read_and_a_constraint_crd_all_but_managed_fields() {
        let (crd, trimmed) = crd_of_group("example.com");
        assert_eq!(crd_state(&trimmed), crd_state(&crd));
        assert!(matches!(
            crd_state(&trimmed),
            CrdState::Established(Some(_))
        ));
        let info = |c: &CustomResourceDefinition| {
            let i = CrdInfo::from_value(
                &crate::cluster::assemble::crd_to_value(c),
                Source::default(),
            );
            (i.name, i.group, i.kind, i.established, i.established_since)
        };
        assert_eq!(info(&trimmed), info(&crd));
        assert!(trimmed.spec.versions[0].schema.is_none());
        assert!(trimmed.metadata.annotations.is_none());
        assert_eq!(last_writer(&trimmed.metadata), Some("gatekeeper"));
        assert_eq!(trimmed.spec.names.plural, "k8sx");
        let (mut expected, trimmed) = crd_of_group(CONSTRAINTS_GROUP);
        assert_eq!(last_writer(&trimmed.metadata), Some("gatekeeper"));
        expected.metadata.managed_fields = trimmed.metadata.managed_fields.clone();
        assert_eq!(trimmed, expected);
    }

    /// Of managedFields only who last changed the object itself stays: the newest entry that
    /// is not a status subresource's, without its fields.
    #[test]
    fn a_trimmed_object_keeps_its_last_writer_only() {
        let mut o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": { "name": "b", "managedFields": [
                { "manager": "kubectl-vap", "operation": "Update", "time": "2026-12-07T10:00:00Z",
                  "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": {} } },
                { "manager": "gatekeeper", "operation": "Update", "time": "2026-12-07T10:00:05Z",
                  "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": {} } },
                { "manager": "kube-controller-manager", "operation": "Update",
                  "subresource": "status", "time": "2026-12-07T10:00:09Z" }
            ] }
        }))
        .expect("binding");
        o.trim();
        assert_eq!(last_writer(&o.metadata), Some("gatekeeper"));
        // Within the same second (the server orders them by name then): the other writer.
        let mut tie: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": { "name": "b", "managedFields": [
                { "manager": "gatekeeper", "operation": "Update", "time": "2026-12-07T10:00:05Z" },
                { "manager": "kubectl-vap", "operation": "Update", "time": "2026-12-07T10:00:05Z" }
            ] }
        }))
        .expect("binding");
        tie.trim();
        assert_eq!(last_writer(&tie.metadata), Some("gatekeeper"));
        let kept = o.metadata.managed_fields.as_deref().unwrap_or_default();
        assert_eq!(kept.len(), 1);
        assert!(kept[0].fields_v1.is_none(), "the fields are not kept");
        // None at all: nobody is named.
        let mut bare = DynamicObject::new(
            "b",
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        bare.trim();
        assert_eq!(last_writer(&bare.metadata), None);
    }
}
