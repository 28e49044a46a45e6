//! The live world: the reflector stores as [`ConstraintStore`]/[`TemplateStore`], writes to the
//! API server as [`Writer`] (only while this copy holds the lease), the shared work queue.
//!
//! Read-your-writes: a store lags our own writes by one watch event. A write's result is kept
//! in a short-lived overlay and preferred until the store has caught up (by resourceVersion),
//! so a reconcile that runs in between neither creates twice nor updates from a stale version
//! (I4: one needed change = one write).

use super::metrics::Metrics;
use super::queue::{Key, WorkQueue};
use super::state::{EventResult, EventVerb, LiveState, ReconcileEvent};
use super::world::{
    ConstraintStore, Enqueue, Read, TemplateStore, Unreadable, WriteOutcome, Writer,
};
use crate::cluster::apply::{Applied, ApplyError, apply_write};
use crate::cluster::discovery::AdmissionApi;
use crate::core::desired::CrdState;
use crate::core::{PlannedWrite, Verb};
use crate::model::{
    Binding, CONSTRAINTS_GROUP, Constraint, ConstraintTemplate, CrdInfo, ObjectRef, Policy, Source,
};
use chrono::{DateTime, Utc};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::reflector::{ObjectRef as StoreRef, Store};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The resource name of the CRD store.
pub const CRDS_RESOURCE: &str = "customresourcedefinitions.apiextensions.k8s.io";

/// How long a write's result is preferred over a store that has not seen it yet.
const OVERLAY_TTL: Duration = Duration::from_secs(10);

/// The constraint watch of one kind.
pub struct KindWatch {
    pub plural: String,
    /// The resource name (`<plural>.constraints.gatekeeper.sh`) its listing state is kept under.
    pub resource: String,
    pub store: Store<DynamicObject>,
    pub task: tokio::task::AbortHandle,
}

/// The kinds of object this copy writes (the overlay's key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Obj {
    Policy,
    Binding,
    Crd,
}

impl Obj {
    pub fn of(kind: &str) -> Obj {
        match kind {
            crate::cluster::discovery::VAP_KIND => Obj::Policy,
            crate::core::crd::CRD_KIND => Obj::Crd,
            _ => Obj::Binding,
        }
    }
}

#[derive(Clone)]
struct Recent {
    /// The object as written, or `None` after a delete.
    object: Option<serde_json::Value>,
    /// Its resourceVersion (or that of the deleted object).
    rv: u64,
    at: Instant,
}

/// The shared, de-duplicating queue with a wake-up for workers.
#[derive(Default)]
pub struct LiveQueue {
    pub inner: Mutex<WorkQueue>,
    pub notify: Notify,
}

impl Enqueue for LiveQueue {
    fn enqueue(&self, key: Key) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(key);
        self.notify.notify_waiters();
        self.notify.notify_one();
    }
    fn enqueue_at(&self, key: Key, at: DateTime<Utc>) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_at(key, at);
        self.notify.notify_one();
    }
}

impl LiveQueue {
    /// A worker finished `key` (it may now be taken again).
    pub fn done(&self, key: &Key) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .done(key);
    }
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Drops every queued and delayed key (keys being processed finish, then are not requeued
    /// unless pushed again): what was queued rests on knowledge this copy no longer trusts.
    pub fn discard(&self) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .discard();
    }
}

pub struct LiveWorld {
    pub client: kube::Client,
    pub admission: AdmissionApi,
    pub templates: Store<DynamicObject>,
    pub crds: Store<CustomResourceDefinition>,
    pub policies: Store<DynamicObject>,
    pub bindings: Store<DynamicObject>,
    pub constraints: RwLock<HashMap<String, KindWatch>>,
    pub queue: Arc<LiveQueue>,
    pub metrics: Arc<Metrics>,
    /// This copy holds the lease (for views and metrics; writes check [`LiveWorld::fence`]).
    pub leading: AtomicBool,
    /// Notified whenever `leading` may have changed.
    pub leadership: Notify,
    /// Writes are allowed only before its deadline (from the last successful renewal).
    pub fence: super::lease::Fence,
    /// Bumped to make every watch drop its store and list again (after the fence was lost).
    pub relist: tokio::sync::watch::Sender<u64>,
    /// Keys whose reconcile found a store unknown: enqueued again whenever a store lists.
    parked: Mutex<std::collections::BTreeSet<Key>>,
    /// Resource names of the four fixed stores.
    pub res_templates: String,
    pub res_crds: String,
    pub res_policies: String,
    pub res_bindings: String,
    /// Writes are allowed at all (false: read-only, or refused because of Gatekeeper).
    pub writes_enabled: AtomicBool,
    pub events: Mutex<VecDeque<ReconcileEvent>>,
    /// Bumped on every store change, so the publisher knows to rebuild the snapshot.
    pub dirty: AtomicBool,
    /// Resources this copy cannot read, by resource name.
    pub access: Mutex<std::collections::BTreeMap<String, super::state::AccessError>>,
    overlay: Mutex<HashMap<(Obj, String), Recent>>,
    /// Resources (by resource name) whose watch has completed a list and acted on it.
    listed: Mutex<std::collections::HashSet<String>>,
    /// Resources whose store holds a complete list: set *before* the list's handler enqueues
    /// (a key popped in between must not be dropped as "still listing"), `listed` after it (so
    /// "synced" never precedes the keys the list concerns).
    complete: Mutex<std::collections::HashSet<String>>,
    /// Every watch, including every constraint kind's, has listed once.
    pub synced: AtomicBool,
    /// What looks like Gatekeeper's own generator, as last detected.
    pub gatekeeper_generator: Mutex<Option<String>>,
    /// Rate limiting of the logs of failed writes.
    write_failures: FailureLog,
    /// The one log of an API server that does not answer (watches, Lease, writes).
    pub outage: super::outage::Outage,
    /// Objects whose write was refused as forbidden (logged once each, until one passes).
    forbidden: Mutex<std::collections::HashSet<String>>,
}

/// Failed writes that will be retried, logged without flooding: the first failure at once,
/// then at most one summary per [`FAILURE_SUMMARY_EVERY`] with how many failed meanwhile, and
/// one line when writes pass again. (A 10 s outage printed 2,300 lines before.)
#[derive(Default)]
struct FailureLog(Mutex<FailureState>);

#[derive(Default)]
struct FailureState {
    since: Option<Instant>,
    last_line: Option<Instant>,
    count: u64,
    unlogged: u64,
}

const FAILURE_SUMMARY_EVERY: Duration = Duration::from_secs(10);

impl FailureLog {
    fn failed(&self, label: &str, object: &str, msg: &str) {
        let mut st = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        st.count += 1;
        let since = *st.since.get_or_insert(now);
        if st
            .last_line
            .is_none_or(|t| now - t >= FAILURE_SUMMARY_EVERY)
        {
            let more = std::mem::take(&mut st.unlogged);
            st.last_line = Some(now);
            if more == 0 {
                tracing::warn!(object, reason = label, "{msg}; retried with backoff");
            } else {
                tracing::warn!(
                    object,
                    reason = label,
                    "writes failing for {}s, {} failure(s), {more} not logged; latest: {msg}",
                    (now - since).as_secs(),
                    st.count
                );
            }
        } else {
            st.unlogged += 1;
            tracing::debug!(object, reason = label, "{msg}");
        }
    }

    fn succeeded(&self) {
        let mut st = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(since) = st.since.take() {
            tracing::info!(
                "writes pass again after {}s and {} failure(s)",
                since.elapsed().as_secs(),
                st.count
            );
            *st = FailureState::default();
        }
    }
}

fn mark(set: &Mutex<std::collections::HashSet<String>>, resource: &str, on: bool) {
    let mut set = set.lock().unwrap_or_else(|p| p.into_inner());
    if on {
        set.insert(resource.to_string());
    } else {
        set.remove(resource);
    }
}

fn stored_rv(meta: &ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|r| r.parse::<u64>().ok())
        .unwrap_or(0)
}

fn rv_of(v: &serde_json::Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A store object as JSON with its type set (list items may lack it).
pub fn dyn_to_value(obj: &DynamicObject, ar: &ApiResource) -> serde_json::Value {
    let mut v = serde_json::to_value(obj).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("apiVersion".into(), ar.api_version.clone().into());
        o.insert("kind".into(), ar.kind.clone().into());
    }
    v
}

pub fn crd_to_value(crd: &CustomResourceDefinition) -> serde_json::Value {
    let mut v = serde_json::to_value(crd).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("apiVersion".into(), "apiextensions.k8s.io/v1".into());
        o.insert("kind".into(), "CustomResourceDefinition".into());
    }
    v
}

impl LiveWorld {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: kube::Client,
        admission: AdmissionApi,
        templates: Store<DynamicObject>,
        crds: Store<CustomResourceDefinition>,
        policies: Store<DynamicObject>,
        bindings: Store<DynamicObject>,
        queue: Arc<LiveQueue>,
        metrics: Arc<Metrics>,
    ) -> Self {
        LiveWorld {
            client,
            admission: admission.clone(),
            templates,
            crds,
            policies,
            bindings,
            constraints: RwLock::new(HashMap::new()),
            queue,
            metrics,
            leading: AtomicBool::new(false),
            leadership: Notify::new(),
            fence: super::lease::Fence::default(),
            relist: tokio::sync::watch::Sender::new(0),
            parked: Mutex::new(std::collections::BTreeSet::new()),
            res_templates: crate::cluster::discovery::resource_name(
                &crate::cluster::discovery::templates_resource(),
            ),
            res_crds: CRDS_RESOURCE.to_string(),
            res_policies: crate::cluster::discovery::resource_name(&admission.policy()),
            res_bindings: crate::cluster::discovery::resource_name(&admission.binding()),
            writes_enabled: AtomicBool::new(false),
            events: Mutex::new(VecDeque::new()),
            dirty: AtomicBool::new(true),
            access: Mutex::new(std::collections::BTreeMap::new()),
            overlay: Mutex::new(HashMap::new()),
            listed: Mutex::new(std::collections::HashSet::new()),
            complete: Mutex::new(std::collections::HashSet::new()),
            synced: AtomicBool::new(false),
            gatekeeper_generator: Mutex::new(None),
            write_failures: FailureLog::default(),
            outage: super::outage::Outage::default(),
            forbidden: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// Records that the watch of `resource` listed and its handler acted on the list
    /// (`false`: the watch stopped).
    pub fn set_listed(&self, resource: &str, listed: bool) {
        mark(&self.listed, resource, listed);
    }

    /// Records that the store of `resource` holds a complete list (`false`: the watch stopped).
    pub fn set_complete(&self, resource: &str, complete: bool) {
        mark(&self.complete, resource, complete);
    }

    pub fn is_listed(&self, resource: &str) -> bool {
        self.listed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(resource)
    }

    /// The resource name of a watched constraint kind.
    fn kind_resource(&self, kind: &str) -> Option<String> {
        let watches = self.constraints.read().unwrap_or_else(|p| p.into_inner());
        watches.get(kind).map(|w| w.resource.clone())
    }

    /// Whether the constraints of `kind` can be trusted: its store holds a complete list (or
    /// there is no watch, so there are no constraints of the kind to wait for). A constraint
    /// reconciled before its kind has listed would look deleted.
    pub fn kind_listed(&self, kind: &str) -> bool {
        self.kind_resource(kind).is_none_or(|resource| {
            self.complete
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&resource)
        })
    }

    /// Constraint kinds whose watch runs but has not listed yet.
    pub fn unlisted_kinds(&self) -> Vec<String> {
        let watches = self.constraints.read().unwrap_or_else(|p| p.into_inner());
        watches
            .values()
            .map(|w| w.resource.clone())
            .filter(|r| !self.is_listed(r))
            .collect()
    }

    pub fn may_write(&self) -> bool {
        self.fence.may_write() && self.writes_enabled.load(Ordering::SeqCst)
    }

    /// `Known` while the store of `resource` holds a complete list and its watch runs.
    pub fn store_known(&self, resource: &str) -> Read<()> {
        let complete = self
            .complete
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(resource);
        if complete {
            Read::Known(())
        } else {
            Read::Unknown(Unreadable(resource.to_string()))
        }
    }

    /// A reconcile found `resource` unknown: `key` comes back when a store lists.
    pub fn park(&self, key: Key) {
        self.parked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key);
    }

    /// Enqueues every parked key.
    pub fn unpark(&self) {
        let keys = std::mem::take(&mut *self.parked.lock().unwrap_or_else(|p| p.into_inner()));
        for k in keys {
            self.queue.enqueue(k);
        }
    }

    /// Every store that is not known now, with why: the fixed four and every watched kind.
    pub fn unknown_stores(&self) -> Vec<(String, String)> {
        let mut resources = vec![
            self.res_templates.clone(),
            self.res_crds.clone(),
            self.res_policies.clone(),
            self.res_bindings.clone(),
        ];
        resources.extend(
            self.constraints
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .map(|w| w.resource.clone()),
        );
        let access = self.access.lock().unwrap_or_else(|p| p.into_inner());
        resources
            .into_iter()
            .filter(|r| matches!(self.store_known(r), Read::Unknown(_)))
            .map(|r| {
                let why = access
                    .get(&r)
                    .map(|e| e.message.clone())
                    .unwrap_or_else(|| format!("{r}: not listed and watched yet"));
                (r, why)
            })
            .collect()
    }

    /// The fence is gone (lease lost, renewal deadline passed): what was queued is dropped and
    /// every store lists again, so nothing decided before is acted on after.
    pub fn forget_everything(&self) {
        {
            let mut complete = self.complete.lock().unwrap_or_else(|p| p.into_inner());
            complete.clear();
        }
        self.listed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.queue.discard();
        self.parked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.overlay
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.relist.send_modify(|n| *n += 1);
        self.dirty.store(true, Ordering::Relaxed);
    }

    pub fn log(&self, verb: EventVerb, object: ObjectRef, result: EventResult, message: String) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if events.len() >= super::state::EVENT_LOG_CAPACITY {
            events.pop_front();
        }
        events.push_back(ReconcileEvent {
            time: Utc::now(),
            verb,
            object,
            result,
            message,
        });
        self.dirty.store(true, Ordering::Relaxed);
    }

    /// A store object, or our newer write of it.
    fn read(&self, is_policy: bool, name: &str) -> Option<serde_json::Value> {
        let (store, ar) = self.store_of(is_policy);
        let stored = store.get(&StoreRef::new_with(name, ar.clone()));
        let obj = if is_policy { Obj::Policy } else { Obj::Binding };
        match self.overlay_says(obj, name, stored.as_deref().map(|o| stored_rv(&o.metadata))) {
            Some(ours) => ours,
            None => stored.map(|o| dyn_to_value(&o, &ar)),
        }
    }

    fn store_of(&self, is_policy: bool) -> (&Store<DynamicObject>, ApiResource) {
        if is_policy {
            (&self.policies, self.admission.policy())
        } else {
            (&self.bindings, self.admission.binding())
        }
    }

    /// `Some(ours)` while our write is newer than the store; `None` once the store has caught
    /// up (or the entry expired), removing the entry.
    fn overlay_says(
        &self,
        obj: Obj,
        name: &str,
        stored_rv: Option<u64>,
    ) -> Option<Option<serde_json::Value>> {
        let key = (obj, name.to_string());
        let mut overlay = self.overlay.lock().unwrap_or_else(|p| p.into_inner());
        let recent = overlay.get(&key)?;
        let caught_up = match (&recent.object, stored_rv) {
            // Our write is in the store (or something newer is).
            (Some(_), Some(rv)) => rv >= recent.rv,
            // Our delete is in the store.
            (None, None) => true,
            // Recreated after our delete.
            (None, Some(rv)) => rv > recent.rv,
            (Some(_), None) => false,
        };
        if caught_up || recent.at.elapsed() >= OVERLAY_TTL {
            overlay.remove(&key);
            None
        } else {
            Some(recent.object.clone())
        }
    }

    /// Whether `obj` is exactly what this copy just wrote (same resourceVersion): the watch
    /// echoing our own write, which needs no reconcile. The store now holds the write, so the
    /// overlay entry is dropped. Anyone else's change has a newer resourceVersion and is
    /// reconciled as usual.
    pub fn take_own_write(&self, kind: Obj, meta: &ObjectMeta) -> bool {
        let (Some(name), Some(rv)) = (meta.name.as_deref(), meta.resource_version.as_deref())
        else {
            return false;
        };
        let Ok(rv) = rv.parse::<u64>() else {
            return false;
        };
        let key = (kind, name.to_string());
        let mut overlay = self.overlay.lock().unwrap_or_else(|p| p.into_inner());
        let echo = overlay
            .get(&key)
            .is_some_and(|r| r.object.is_some() && r.rv == rv);
        if echo {
            overlay.remove(&key);
        }
        echo
    }

    /// Drops overlay entries the stores have caught up with, or that are too old to matter.
    pub fn sweep_overlay(&self) {
        let keys: Vec<(Obj, String)> = self
            .overlay
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        for (obj, name) in keys {
            let _ = self.overlay_says(obj, &name, self.stored_rv(obj, &name));
        }
    }

    /// The resourceVersion of `name` in its store, if it is there.
    fn stored_rv(&self, obj: Obj, name: &str) -> Option<u64> {
        match obj {
            Obj::Crd => self
                .crds
                .get(&StoreRef::new(name))
                .map(|c| stored_rv(&c.metadata)),
            Obj::Policy | Obj::Binding => {
                let (store, ar) = self.store_of(obj == Obj::Policy);
                store
                    .get(&StoreRef::new_with(name, ar))
                    .map(|o| stored_rv(&o.metadata))
            }
        }
    }

    fn remember(&self, w: &PlannedWrite, applied: &Applied) {
        let obj = Obj::of(&w.object.kind);
        let recent = match applied {
            Applied::Written(v) => Recent {
                object: Some(v.clone()),
                rv: rv_of(v),
                at: Instant::now(),
            },
            Applied::Deleted | Applied::AlreadyGone => Recent {
                object: None,
                rv: w
                    .resource_version
                    .as_deref()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0),
                at: Instant::now(),
            },
        };
        self.overlay
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((obj, w.object.name.clone()), recent);
    }

    pub fn constraint_resource(&self, kind: &str) -> Option<(ApiResource, Store<DynamicObject>)> {
        let watches = self.constraints.read().unwrap_or_else(|p| p.into_inner());
        watches.get(kind).map(|w| {
            (
                crate::cluster::discovery::constraint_resource(kind, &w.plural),
                w.store.clone(),
            )
        })
    }

    /// Every key a resync visits: templates, constraints, and the owners of VAPs/bindings.
    pub fn all_keys(&self) -> Vec<Key> {
        let mut keys: Vec<Key> = self
            .templates
            .state()
            .iter()
            .filter_map(|t| t.metadata.name.clone())
            .map(Key::Template)
            .collect();
        {
            let watches = self.constraints.read().unwrap_or_else(|p| p.into_inner());
            for (kind, w) in watches.iter() {
                keys.extend(
                    w.store
                        .state()
                        .iter()
                        .filter_map(|c| c.metadata.name.clone())
                        .map(|n| Key::constraint(kind, n)),
                );
            }
        }
        for p in self.policies.state() {
            keys.extend(super::watches::policy_keys(&p));
        }
        for b in self.bindings.state() {
            keys.extend(super::watches::binding_keys(&b));
        }
        keys.sort();
        keys.dedup();
        keys
    }

    /// The snapshot of the stores, for views and `--once`'s final check.
    pub fn snapshot(&self) -> crate::snapshot::Snapshot {
        let mut snap = crate::snapshot::Snapshot::default();
        let cluster = Source::default();
        let mut add = |v: serde_json::Value| {
            if let Err(e) = snap.insert(v, cluster.clone()) {
                tracing::debug!("skipping an unreadable object: {e}");
            }
        };
        let tar = crate::cluster::discovery::templates_resource();
        self.templates
            .state()
            .iter()
            .for_each(|o| add(dyn_to_value(o, &tar)));
        self.crds
            .state()
            .iter()
            .filter(|c| c.spec.group == CONSTRAINTS_GROUP)
            .for_each(|c| add(crd_to_value(c)));
        {
            let watches = self.constraints.read().unwrap_or_else(|p| p.into_inner());
            for (kind, w) in watches.iter() {
                let ar = crate::cluster::discovery::constraint_resource(kind, &w.plural);
                w.store
                    .state()
                    .iter()
                    .for_each(|o| add(dyn_to_value(o, &ar)));
            }
        }
        let par = self.admission.policy();
        self.policies
            .state()
            .iter()
            .for_each(|o| add(dyn_to_value(o, &par)));
        let bar = self.admission.binding();
        self.bindings
            .state()
            .iter()
            .for_each(|o| add(dyn_to_value(o, &bar)));
        snap.now = Some(Utc::now());
        snap.crds_listed = true;
        snap.unreadable = unreadable(
            self.access
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values(),
        );
        // Every store not known now (still listing, relisting, failing) proves nothing either.
        snap.unreadable
            .extend(self.unknown_stores().into_iter().map(|(r, _)| r));
        snap
    }

    pub fn fill_state(&self, state: &mut LiveState, with_snapshot: bool) {
        if with_snapshot {
            state.snapshot = self.snapshot();
        }
        state.events = self
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        state.queue_depth = self.queue.len();
        state.access_errors = self
            .access
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        state.synced = self.synced.load(Ordering::SeqCst);
        state.gatekeeper_generator = self
            .gatekeeper_generator
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        state.lease.leading = self.leading.load(Ordering::SeqCst);
        state.writes_enabled = self.writes_enabled.load(Ordering::SeqCst);
    }
}

impl LiveWorld {
    pub fn is_leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    /// Records whether this copy leads; returns what it was.
    pub fn set_leading(&self, on: bool) -> bool {
        let was = self.leading.swap(on, Ordering::SeqCst);
        self.metrics.leader.store(on, Ordering::Relaxed);
        self.leadership.notify_waiters();
        was
    }

    /// Resolves when this copy's leadership may have changed.
    pub async fn leadership_changed(&self) {
        self.leadership.notified().await;
    }

    pub fn access_error(&self, resource: &str) -> Option<super::state::AccessError> {
        self.access
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(resource)
            .cloned()
    }

    pub fn access_errors(&self) -> Vec<super::state::AccessError> {
        self.access
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    pub fn watched_kinds(&self) -> Vec<String> {
        self.constraints
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    pub fn progress_report(&self) -> String {
        let queue = format!(
            "{:?}",
            *self.queue.inner.lock().unwrap_or_else(|p| p.into_inner())
        );
        let events: Vec<String> = self
            .events()
            .iter()
            .rev()
            .take(10)
            .map(|e| format!("{e:?}"))
            .collect();
        let access: Vec<String> = self
            .access_errors()
            .into_iter()
            .map(|e| e.message)
            .collect();
        format!(
            "synced={}, unlisted kinds={:?}, access errors={access:?}, queue={queue}, last events (newest first)={events:#?}",
            self.synced.load(Ordering::SeqCst),
            self.unlisted_kinds(),
        )
    }

    pub fn writes_enabled(&self) -> bool {
        self.writes_enabled.load(Ordering::SeqCst)
    }

    pub fn events(&self) -> Vec<ReconcileEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Every unknown store is unknown for a reason retrying does not fix (forbidden, not
    /// served).
    pub fn definitely_unreadable(&self, unknown: &[(String, String)]) -> bool {
        let access = self.access.lock().unwrap_or_else(|p| p.into_inner());
        unknown.iter().all(|(r, _)| {
            access
                .get(r)
                .is_some_and(|e| e.kind != super::state::AccessErrorKind::Other)
        })
    }

    /// Whether a write of this copy was refused as forbidden.
    pub fn a_write_was_forbidden(&self) -> bool {
        !self
            .forbidden
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Waits until every watch has listed and the queue has been empty for a moment, or
    /// `timeout` passes.
    pub async fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut quiet = 0;
        while tokio::time::Instant::now() < deadline {
            if self.queue.is_empty() && self.synced.load(Ordering::SeqCst) {
                quiet += 1;
                if quiet >= 5 {
                    return true;
                }
            } else {
                quiet = 0;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }
}

impl ConstraintStore for LiveWorld {
    fn constraint(&self, kind: &str, name: &str) -> Read<Option<Constraint>> {
        // Which kinds exist comes from the CRD store.
        if let Read::Unknown(u) = self.store_known(&self.res_crds) {
            return Read::Unknown(u);
        }
        let Some((ar, store)) = self.constraint_resource(kind) else {
            // No watch: no constraint of the kind exists, unless its CRD serves the kind and
            // the watch is only about to start.
            let served = self.crds.find(|c| {
                c.spec.group == CONSTRAINTS_GROUP
                    && c.spec.names.kind == kind
                    && super::watches::crd_state(c) != CrdState::NotEstablished
            });
            return match served {
                Some(c) => Read::Unknown(Unreadable(c.metadata.name.clone().unwrap_or_default())),
                None => Read::Known(None),
            };
        };
        let resource = crate::cluster::discovery::resource_name(&ar);
        self.store_known(&resource).map(|()| {
            store
                .get(&StoreRef::new_with(name, ar.clone()))
                .map(|o| Constraint::from_value(dyn_to_value(&o, &ar), Source::default()))
        })
    }

    fn constraint_names(&self, kind: &str) -> Vec<String> {
        match self.constraint_resource(kind) {
            Some((_, store)) => store
                .state()
                .iter()
                .filter_map(|o| o.metadata.name.clone())
                .collect(),
            None => Vec::new(),
        }
    }

    fn crd_state(&self, kind: &str) -> Read<CrdState> {
        if let Read::Unknown(u) = self.store_known(&self.res_crds) {
            return Read::Unknown(u);
        }
        let of_kind = |c: &CustomResourceDefinition| {
            c.spec.group == CONSTRAINTS_GROUP && c.spec.names.kind == kind
        };
        // By name when the kind is watched (its plural is known); a scan otherwise.
        let plural = self
            .constraints
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(kind)
            .map(|w| w.plural.clone());
        let crd = plural
            .and_then(|p| {
                self.crds
                    .get(&StoreRef::new(&format!("{p}.{CONSTRAINTS_GROUP}")))
            })
            .filter(|c| of_kind(c))
            .or_else(|| self.crds.find(of_kind));
        Read::Known(
            crd.map(|c| super::watches::crd_state(&c))
                .unwrap_or(CrdState::NotEstablished),
        )
    }

    fn binding(&self, name: &str) -> Read<Option<Binding>> {
        self.store_known(&self.res_bindings).map(|()| {
            let v = self.read(false, name)?;
            Binding::from_value(v, Source::default())
                .map_err(|e| tracing::warn!(binding = name, "{e}"))
                .ok()
        })
    }

    fn opinions_known(&self) -> Read<()> {
        match self.store_known(&self.res_templates) {
            Read::Known(()) => self.store_known(&self.res_policies),
            unknown => unknown,
        }
    }

    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

impl TemplateStore for LiveWorld {
    fn template(&self, name: &str) -> Read<Option<ConstraintTemplate>> {
        let ar = crate::cluster::discovery::templates_resource();
        self.store_known(&self.res_templates).map(|()| {
            self.templates
                .get(&StoreRef::new_with(name, ar.clone()))
                .map(|o| ConstraintTemplate::from_value(dyn_to_value(&o, &ar), Source::default()))
        })
    }

    fn template_names(&self) -> Vec<String> {
        self.templates
            .state()
            .iter()
            .filter_map(|t| t.metadata.name.clone())
            .collect()
    }

    fn templates_listed(&self) -> bool {
        self.is_listed(&crate::cluster::discovery::resource_name(
            &crate::cluster::discovery::templates_resource(),
        ))
    }

    fn policy(&self, name: &str) -> Read<Option<Policy>> {
        self.store_known(&self.res_policies).map(|()| {
            let v = self.read(true, name)?;
            Policy::from_value(v, Source::default())
                .map_err(|e| tracing::warn!(policy = name, "{e}"))
                .ok()
        })
    }

    fn crd(&self, name: &str) -> Read<Option<CrdInfo>> {
        self.store_known(&self.res_crds)
            .map(|()| self.crd_unchecked(name))
    }

    fn bindings_of_kind(&self, kind: &str) -> Read<Vec<Binding>> {
        self.store_known(&self.res_bindings)
            .map(|()| self.bindings_of_kind_unchecked(kind))
    }
}

impl LiveWorld {
    fn crd_unchecked(&self, name: &str) -> Option<CrdInfo> {
        let stored = self.crds.get(&StoreRef::new(name));
        let v = match self.overlay_says(
            Obj::Crd,
            name,
            stored.as_deref().map(|c| stored_rv(&c.metadata)),
        ) {
            Some(ours) => ours?,
            None => crd_to_value(stored.as_deref()?),
        };
        Some(CrdInfo::from_value(&v, Source::default()))
    }

    fn bindings_of_kind_unchecked(&self, kind: &str) -> Vec<Binding> {
        let names: Vec<String> = self
            .bindings
            .state()
            .iter()
            .filter(|b| {
                b.metadata.owner_references.iter().flatten().any(|r| {
                    r.controller == Some(true)
                        && r.api_version.starts_with("constraints.gatekeeper.sh/")
                        && r.kind == kind
                })
            })
            .filter_map(|b| b.metadata.name.clone())
            .collect();
        // Bindings we just created that the store has not seen yet count too.
        let mut names = names;
        for ((obj, name), recent) in self
            .overlay
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let controlled = recent.object.as_ref().is_some_and(|o| {
                o["metadata"]["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| r["controller"] == true && r["kind"] == kind)
            });
            if *obj == Obj::Binding && controlled && !names.contains(name) {
                names.push(name.clone());
            }
        }
        // Through the overlay: a binding we just deleted is gone.
        names
            .iter()
            .filter_map(|n| self.read(false, n))
            .filter_map(|v| Binding::from_value(v, Source::default()).ok())
            .collect()
    }
}

impl LiveWorld {
    /// Logs a forbidden write of `object` the first time only.
    fn forbidden_once(&self, object: &str, msg: &str) {
        let first = self
            .forbidden
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(object.to_string());
        if first {
            tracing::warn!(
                object,
                "{msg}; retried with a backoff up to {}s until the RBAC allows it (not logged again; counted in kubectl_vap_write_errors_total{{reason=\"forbidden\"}})",
                super::logic::FORBIDDEN_BACKOFF_MAX.as_secs()
            );
        } else {
            tracing::debug!(object, "{msg}");
        }
    }

    /// A write of `object` passed: if it was forbidden before, say it is allowed now.
    fn allowed_again(&self, object: &str) {
        let was = self
            .forbidden
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(object);
        if was {
            tracing::info!(object, "{object}: allowed now (it was forbidden)");
        }
    }
}

impl Writer for LiveWorld {
    async fn write(&self, w: &PlannedWrite) -> WriteOutcome {
        {
            let verb = match w.verb {
                Verb::Create => EventVerb::Create,
                Verb::Update => EventVerb::Update,
                Verb::Delete => EventVerb::Delete,
            };
            if !self.writes_enabled.load(Ordering::SeqCst) {
                return WriteOutcome::Skipped("writes are disabled".into());
            }
            // Checked right before sending, against a monotonic deadline from the last
            // successful renewal: a copy that was paused, or cannot renew, sends nothing more,
            // whatever it still believes about the Lease.
            if !self.fence.may_write() {
                return WriteOutcome::Skipped("leadership not confirmed (Lease)".into());
            }
            let resource = match Obj::of(&w.object.kind) {
                Obj::Policy => "validatingadmissionpolicies",
                Obj::Binding => "validatingadmissionpolicybindings",
                Obj::Crd => "customresourcedefinitions",
            };
            match apply_write(&self.client, &self.admission, w).await {
                Ok(applied) => {
                    self.remember(w, &applied);
                    self.write_failures.succeeded();
                    self.outage.reachable();
                    self.allowed_again(&w.object.to_string());
                    // A delete that found nothing changed nothing: not a write.
                    if matches!(applied, Applied::AlreadyGone) {
                        self.metrics.error("already_gone");
                    } else {
                        self.metrics.write(w.verb.as_str(), resource);
                    }
                    tracing::info!(
                        verb = w.verb.as_str(),
                        object = %w.object,
                        "{} {}: {}",
                        w.verb.as_str(),
                        w.object,
                        w.reason
                    );
                    self.log(verb, w.object.clone(), EventResult::Ok, w.reason.clone());
                    self.dirty.store(true, Ordering::Relaxed);
                    WriteOutcome::Done
                }
                Err(ApplyError::Conflict(msg)) => {
                    self.outage.reachable();
                    self.metrics.error("conflict");
                    tracing::debug!("{msg}");
                    self.log(
                        verb,
                        w.object.clone(),
                        EventResult::Failed("conflict; retried".into()),
                        w.reason.clone(),
                    );
                    WriteOutcome::Retry(msg)
                }
                Err(e) => {
                    let text = e.to_string();
                    // A VAP with a paramKind needs `get` on that kind: the server answers 422
                    // with a Forbidden cause.
                    let forbidden = matches!(e.status(), Some(401 | 403))
                        || (e.status() == Some(422) && text.contains("Forbidden"));
                    let label = match e.status() {
                        _ if forbidden => "forbidden",
                        Some(422) => "invalid",
                        Some(_) => "failed",
                        None => "unreachable",
                    };
                    self.metrics.error(label);
                    let msg = if forbidden {
                        format!(
                            "forbidden: {text} (grant the ClusterRole from `kubectl vap install --print`)"
                        )
                    } else {
                        text
                    };
                    self.log(
                        verb,
                        w.object.clone(),
                        EventResult::Failed(msg.clone()),
                        w.reason.clone(),
                    );
                    if label != "unreachable" {
                        self.outage.reachable();
                    }
                    if label == "invalid" {
                        // The server refuses this body whatever happens around it: one report,
                        // no retry (the next change of its source tries again).
                        tracing::warn!(object = %w.object, "{msg} (not retried)");
                        WriteOutcome::Refused(msg)
                    } else if forbidden {
                        // RBAC may allow it later, and no event says when: retried slowly
                        // (backoff up to 5 min), logged once per object until it passes.
                        self.forbidden_once(&w.object.to_string(), &msg);
                        WriteOutcome::Forbidden(msg)
                    } else if label == "unreachable" {
                        // No answer: the copy's one outage log, not a line per write.
                        self.outage.failed(&w.object.to_string(), &msg);
                        WriteOutcome::Failed(msg)
                    } else {
                        // May pass later (a grant, the server back): retried with backoff,
                        // logged at most once per interval with a count.
                        self.write_failures
                            .failed(label, &w.object.to_string(), &msg);
                        WriteOutcome::Failed(msg)
                    }
                }
            }
        }
    }
}

/// Resources whose stores prove nothing (forbidden or not served), for `Snapshot::unreadable`.
pub fn unreadable<'a>(
    errors: impl IntoIterator<Item = &'a super::state::AccessError>,
) -> std::collections::BTreeSet<String> {
    errors
        .into_iter()
        .filter(|e| e.kind != super::state::AccessErrorKind::Other)
        .map(|e| e.resource.clone())
        .collect()
}
