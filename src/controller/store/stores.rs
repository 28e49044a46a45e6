//! The local stores the watches fill: templates, CRDs, VAPs, bindings, and one store per
//! constraint kind; what each store is known to hold; and our own recent writes.
//!
//! Knowledge before action: a store is *known* only while it holds a complete list and its
//! watch runs ([`Stores::store_known`]); anything else makes a read `Unknown`, so "absent"
//! cannot be confused with "unreadable".
//!
//! Read-your-writes: a store lags our own writes by one watch event, so a write's result is
//! preferred (the overlay) until the store has caught up by resourceVersion: a reconcile in
//! between neither creates twice nor updates from a stale version (I4). After [`OVERLAY_TTL`]
//! reads trust the store again, but the write counts as unseen ([`Stores::unseen_writes`])
//! until the store shows it: "converged" is never said of stores lagging behind a burst.

use super::objects::{
    binding_keys, controllers_in, crd_state, established, is_constraint_crd, last_writer,
    policy_keys,
};
use crate::cluster::access::AccessError;
use crate::cluster::apply::Applied;
use crate::cluster::assemble::{Assembly, crd_to_value, dyn_to_value};
use crate::cluster::discovery::{AdmissionApi, resource_name, templates_resource};
use crate::controller::reconcile::keys::{Key, Obj, Scope};
use crate::controller::reconcile::world::{ConstraintStore, Read, TemplateStore, Unreadable};
use crate::core::PlannedWrite;
use crate::core::desired::CrdState;
use crate::model::served::Served;
use crate::model::{
    Binding, CONSTRAINTS_GROUP, Constraint, ConstraintTemplate, CrdInfo, GatekeeperConfig,
    GatekeeperWebhook, Policy, Source,
};
use crate::snapshot::Snapshot;
use chrono::{DateTime, Utc};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef as StoreRef, Store};
use parking_lot::{Mutex, RwLock};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

pub const CRDS_RESOURCE: &str = "customresourcedefinitions.apiextensions.k8s.io";

/// How long a write's result is preferred over a store that has not seen it yet.
const OVERLAY_TTL: Duration = Duration::from_secs(10);

pub struct KindWatch {
    /// `<plural>.constraints.gatekeeper.sh`, also its CRD's name.
    pub resource: String,
    pub store: TypedStore,
    pub task: tokio::task::AbortHandle,
}

#[derive(Clone)]
pub struct TypedStore {
    pub ar: ApiResource,
    pub store: Store<DynamicObject>,
}

impl TypedStore {
    pub fn get(&self, name: &str) -> Option<Arc<DynamicObject>> {
        self.store.get(&StoreRef::new_with(name, self.ar.clone()))
    }

    /// The name its listing state is kept under.
    fn resource(&self) -> String {
        resource_name(&self.ar)
    }

    fn value(&self, name: &str) -> Option<serde_json::Value> {
        self.get(name).map(|o| dyn_to_value(&o, &self.ar))
    }

    pub fn names(&self) -> Vec<String> {
        let objects = self.store.state();
        objects
            .iter()
            .filter_map(|o| o.metadata.name.clone())
            .collect()
    }
}

pub struct Writers {
    pub templates: Writer<DynamicObject>,
    pub crds: Writer<CustomResourceDefinition>,
    pub policies: Writer<DynamicObject>,
    pub bindings: Writer<DynamicObject>,
}

#[derive(Clone)]
struct Recent {
    /// `None` after a delete (`rv` is then the deleted object's).
    object: Option<serde_json::Value>,
    rv: u64,
    at: Instant,
}

impl Recent {
    fn fresh(&self) -> bool {
        self.at.elapsed() < OVERLAY_TTL
    }

    /// Whether a store holding `stored_rv` for this object, and having applied every event
    /// up to `seen_rv`, shows this write (or something newer).
    fn shown(&self, stored_rv: Option<u64>, seen_rv: u64) -> bool {
        match (&self.object, stored_rv) {
            (Some(_), Some(rv)) if rv >= self.rv => true,
            // The store applied events past our write, so what it holds came after it
            // (resourceVersions are etcd revisions, applied in order by one watch).
            (Some(_), _) => seen_rv >= self.rv,
            (None, None) => true,
            // Recreated after our delete.
            (None, Some(rv)) => rv > self.rv,
        }
    }
}

/// What each watch has done with its resource (by resource name).
#[derive(Default)]
pub struct Listing {
    /// The store holds a complete list: set *before* the list's handler enqueues (a key popped
    /// in between must not be dropped as "still listing").
    complete: HashSet<String>,
    /// The list was acted on: set *after* the handler enqueued (so "synced" never precedes the
    /// keys the list concerns).
    listed: HashSet<String>,
}

pub struct Stores {
    admission: AdmissionApi,
    templates: TypedStore,
    crds: Store<CustomResourceDefinition>,
    policies: TypedStore,
    bindings: TypedStore,
    kinds: RwLock<HashMap<String, KindWatch>>,
    /// Gatekeeper's pod statuses (shown by views, never decided on).
    pod_statuses: Mutex<Vec<TypedStore>>,
    /// On a watch channel, so waits for "listed" need no polling.
    listing: watch::Sender<Listing>,
    overlay: Mutex<HashMap<(Obj, String), Recent>>,
    /// The newest resourceVersion each store of objects we write has applied (list or event).
    seen_rv: Mutex<HashMap<Obj, u64>>,
    /// Bumped to make every watch drop its store and list again (after the fence was lost).
    relist: watch::Sender<u64>,
    /// A one-shot `reconcile TEMPLATE` sees only that template (the cache primes on it).
    scope: Scope,
    /// What the API server serves (discovery), once read: the narrowed bindings' rules.
    served: RwLock<Option<Arc<Served>>>,
    /// Gatekeeper's `Config` objects named `config` (`gatekeeper_config`): the exclusions the
    /// reconcilers add to the exempt namespaces.
    gatekeeper_configs: RwLock<Arc<Vec<GatekeeperConfig>>>,
    /// Gatekeeper's validating webhook (`gatekeeper_webhook`), read for its own shape only.
    gatekeeper_webhooks: RwLock<Arc<Vec<GatekeeperWebhook>>>,
    /// Bumped when a CRD comes, goes or changes: discovery looks again.
    crds_changed: watch::Sender<u64>,
}

fn parse_rv(rv: Option<&str>) -> Option<u64> {
    rv?.parse().ok()
}

fn meta_rv(meta: &ObjectMeta) -> u64 {
    parse_rv(meta.resource_version.as_deref()).unwrap_or(0)
}

/// Replaces what `slot` holds; whether it differs from before (equal, the old `Arc` stays: the
/// workers tell a change by pointer).
fn replace<T: PartialEq>(slot: &RwLock<T>, new: T) -> bool {
    let mut current = slot.write();
    let changed = *current != new;
    if changed {
        *current = new;
    }
    changed
}

impl Stores {
    pub fn new(admission: AdmissionApi, scope: Scope) -> (Self, Writers) {
        let writers = Writers {
            templates: Writer::new(templates_resource()),
            crds: Writer::default(),
            policies: Writer::new(admission.policy()),
            bindings: Writer::new(admission.binding()),
        };
        let typed = |ar: ApiResource, w: &Writer<DynamicObject>| TypedStore {
            ar,
            store: w.as_reader(),
        };
        let stores = Stores {
            templates: typed(templates_resource(), &writers.templates),
            crds: writers.crds.as_reader(),
            policies: typed(admission.policy(), &writers.policies),
            bindings: typed(admission.binding(), &writers.bindings),
            admission,
            served: RwLock::new(None),
            gatekeeper_configs: RwLock::new(Arc::new(Vec::new())),
            gatekeeper_webhooks: RwLock::new(Arc::new(Vec::new())),
            crds_changed: watch::channel(0).0,
            kinds: RwLock::new(HashMap::new()),
            pod_statuses: Mutex::new(Vec::new()),
            listing: watch::Sender::default(),
            overlay: Mutex::new(HashMap::new()),
            seen_rv: Mutex::new(HashMap::new()),
            relist: watch::Sender::new(0),
            scope,
        };
        (stores, writers)
    }

    pub fn admission(&self) -> &AdmissionApi {
        &self.admission
    }

    pub fn set_listed(&self, resource: &str) {
        self.listing
            .send_modify(|l| _ = l.listed.insert(resource.to_string()));
    }

    pub fn set_complete(&self, resource: &str) {
        self.listing
            .send_modify(|l| _ = l.complete.insert(resource.to_string()));
    }

    /// The watch of `resource` stopped: neither complete nor listed until it lists again.
    pub fn unlist(&self, resource: &str) {
        self.listing.send_modify(|l| {
            l.complete.remove(resource);
            l.listed.remove(resource);
        });
    }

    pub fn is_listed(&self, resource: &str) -> bool {
        self.listing.borrow().listed.contains(resource)
    }

    pub fn listing_changes(&self) -> watch::Receiver<Listing> {
        self.listing.subscribe()
    }

    pub fn store_known(&self, resource: &str) -> Read<()> {
        let complete = self.listing.borrow().complete.contains(resource);
        if complete {
            Read::Known(())
        } else {
            Read::Unknown(Unreadable(resource.to_string()))
        }
    }

    /// Whether the constraints of `kind` can be trusted: its store holds a complete list (or
    /// there is no watch, so there are no constraints of the kind to wait for).
    #[cfg(test)]
    pub fn kind_listed(&self, kind: &str) -> bool {
        let resource = self.kinds.read().get(kind).map(|w| w.resource.clone());
        resource.is_none_or(|r| matches!(self.store_known(&r), Read::Known(())))
    }

    /// Constraint kinds whose watch runs but has not listed yet (their resource names).
    pub fn unlisted_kinds(&self) -> Vec<String> {
        let mut kinds = Vec::from_iter(self.kinds.read().values().map(|w| w.resource.clone()));
        kinds.retain(|r| !self.is_listed(r));
        kinds
    }

    /// Templates, CRDs, VAPs and bindings (start-up waits for these).
    pub fn fixed_resources(&self) -> [String; 4] {
        [
            self.templates.resource(),
            CRDS_RESOURCE.to_string(),
            self.policies.resource(),
            self.bindings.resource(),
        ]
    }

    /// The stores (fixed and of every watched kind) that are not known now.
    pub fn unknown(&self) -> Vec<String> {
        let mut all = self.fixed_resources().to_vec();
        all.extend(self.kinds.read().values().map(|w| w.resource.clone()));
        all.retain(|r| matches!(self.store_known(r), Read::Unknown(_)));
        all
    }

    /// Drops what every store is known to hold and our recent writes, and makes every watch
    /// list again: nothing decided before is acted on after.
    pub fn forget(&self) {
        self.listing.send_modify(|l| {
            l.complete.clear();
            l.listed.clear();
        });
        self.overlay.lock().clear();
        self.seen_rv.lock().clear();
        self.relist.send_modify(|n| *n += 1);
    }

    /// The API server answers again after an outage: every watch still waiting out its
    /// backoff lists at once (what it holds stays until then).
    pub fn retry_now(&self) {
        self.relist.send_modify(|n| *n += 1);
    }

    pub fn relists(&self) -> watch::Receiver<u64> {
        self.relist.subscribe()
    }

    /// Adds the watch of `kind` unless one runs: `start` is only called then.
    pub fn add_kind(&self, kind: &str, start: impl FnOnce() -> KindWatch) {
        let mut kinds = self.kinds.write();
        kinds.entry(kind.to_string()).or_insert_with(start);
    }

    pub fn remove_kind(&self, kind: &str) -> Option<KindWatch> {
        self.kinds.write().remove(kind)
    }

    pub fn watched_kinds(&self) -> Vec<String> {
        self.kinds.read().keys().cloned().collect()
    }

    fn kind_store(&self, kind: &str) -> Option<TypedStore> {
        self.kinds.read().get(kind).map(|w| w.store.clone())
    }

    pub fn add_pod_statuses(&self, statuses: TypedStore) {
        self.pod_statuses.lock().push(statuses);
    }

    /// The VAP and the binding named `name` as the stores hold them (JSON, `None` when
    /// absent); `None` until both kinds are listed (an empty store is not an absent object).
    pub fn policy_and_binding(
        &self,
        name: &str,
    ) -> Option<(Option<serde_json::Value>, Option<serde_json::Value>)> {
        let listed =
            self.is_listed(&self.policies.resource()) && self.is_listed(&self.bindings.resource());
        listed.then(|| (self.policies.value(name), self.bindings.value(name)))
    }

    pub fn crds(&self) -> Vec<std::sync::Arc<CustomResourceDefinition>> {
        self.crds.state()
    }
    pub fn templates(&self) -> Vec<std::sync::Arc<DynamicObject>> {
        self.templates.store.state()
    }
    pub fn policies(&self) -> Vec<std::sync::Arc<DynamicObject>> {
        self.policies.store.state()
    }
    pub fn bindings(&self) -> Vec<std::sync::Arc<DynamicObject>> {
        self.bindings.store.state()
    }

    /// A store object as JSON, or our newer write of it. The store is looked at twice: when
    /// the overlay has nothing to say, the second look sees the same store or a newer one.
    fn read(&self, obj: Obj, name: &str) -> Option<serde_json::Value> {
        self.overlay_says(obj, name).unwrap_or_else(|| match obj {
            Obj::Crd => self.crd_named(name).map(|c| crd_to_value(&c)),
            Obj::Policy => self.policies.value(name),
            Obj::Binding => self.bindings.value(name),
        })
    }

    /// `name` through the overlay, decoded, while `store` is known (an undecodable one is
    /// logged and read as absent).
    fn decoded<T, E: std::fmt::Display>(
        &self,
        obj: Obj,
        store: &TypedStore,
        name: &str,
        decode: impl FnOnce(serde_json::Value, Source) -> Result<T, E>,
    ) -> Read<Option<T>> {
        self.store_known(&store.resource()).map(|()| {
            let v = self.read(obj, name)?;
            decode(v, Source::default())
                .map_err(|e| tracing::warn!(object = ?obj, name, "{e}"))
                .ok()
        })
    }

    /// `Some(ours)` while our write is newer than the store; `None` once the store has caught
    /// up (removing the entry) or the entry is no longer fresh.
    fn overlay_says(&self, obj: Obj, name: &str) -> Option<Option<serde_json::Value>> {
        let stored_rv = self.stored_rv(obj, name);
        let key = (obj, name.to_string());
        let seen_rv = self.seen_rv.lock().get(&obj).copied().unwrap_or(0);
        let mut overlay = self.overlay.lock();
        let recent = overlay.get(&key)?;
        if recent.shown(stored_rv, seen_rv) {
            overlay.remove(&key);
            return None;
        }
        recent.fresh().then(|| recent.object.clone())
    }

    /// Records that the store of `resource` has applied everything up to `rv` (a list's
    /// resourceVersion, or an event's): writes of ours at or below it are in the store.
    pub fn saw(&self, resource: &str, rv: &str, listed: bool) {
        let obj = match resource {
            CRDS_RESOURCE => Obj::Crd,
            r if r == self.policies.resource() => Obj::Policy,
            r if r == self.bindings.resource() => Obj::Binding,
            _ => return,
        };
        let Some(rv) = parse_rv(Some(rv)) else {
            return;
        };
        let mut seen = self.seen_rv.lock();
        let at = seen.entry(obj).or_insert(0);
        // A list is the whole truth at its resourceVersion; events only move forward.
        *at = if listed { rv } else { (*at).max(rv) };
    }

    /// Whether `meta` is the watch echoing our own write (same resourceVersion: no reconcile
    /// needed, and its overlay entry goes); anyone else's change has a newer one.
    pub fn take_own_write(&self, kind: Obj, meta: &ObjectMeta) -> bool {
        let (Some(name), Some(rv)) = (
            meta.name.as_deref(),
            parse_rv(meta.resource_version.as_deref()),
        ) else {
            return false;
        };
        let key = (kind, name.to_string());
        let mut overlay = self.overlay.lock();
        let echo = overlay
            .get(&key)
            .is_some_and(|r| r.object.is_some() && r.rv == rv);
        if echo {
            overlay.remove(&key);
        }
        echo
    }

    pub fn sweep_overlay(&self) {
        let keys: Vec<(Obj, String)> = self.overlay.lock().keys().cloned().collect();
        for (obj, name) in keys {
            let _ = self.overlay_says(obj, &name);
        }
    }

    /// How many writes of this copy the stores do not show yet, however old.
    pub fn unseen_writes(&self) -> usize {
        self.sweep_overlay();
        self.overlay.lock().len()
    }

    /// The field manager other than this copy that last changed `name`, as the store shows it:
    /// a write of it now undoes that manager's change (`core::contest`). `None` while a write of
    /// ours is newer than the store (the store shows an older state, not the other's answer).
    pub fn changed_by_another(&self, obj: Obj, name: &str) -> Option<String> {
        if self.overlay.lock().contains_key(&(obj, name.to_string())) {
            return None;
        }
        let writer = match obj {
            Obj::Crd => self
                .crd_named(name)
                .and_then(|c| last_writer(&c.metadata).map(str::to_string)),
            Obj::Policy => self
                .policies
                .get(name)
                .and_then(|o| last_writer(&o.metadata).map(str::to_string)),
            Obj::Binding => self
                .bindings
                .get(name)
                .and_then(|o| last_writer(&o.metadata).map(str::to_string)),
        };
        writer.filter(|w| w != crate::cluster::apply::FIELD_MANAGER)
    }

    fn crd_named(&self, name: &str) -> Option<Arc<CustomResourceDefinition>> {
        self.crds.get(&StoreRef::new(name))
    }

    fn stored_rv(&self, obj: Obj, name: &str) -> Option<u64> {
        match obj {
            Obj::Crd => self.crd_named(name).map(|c| meta_rv(&c.metadata)),
            Obj::Policy => self.policies.get(name).map(|o| meta_rv(&o.metadata)),
            Obj::Binding => self.bindings.get(name).map(|o| meta_rv(&o.metadata)),
        }
    }

    /// Makes every overlay entry `by` older, as if written that long ago.
    #[cfg(test)]
    fn age_overlay(&self, by: Duration) {
        for r in self.overlay.lock().values_mut() {
            r.at = r.at.checked_sub(by).unwrap_or(r.at);
        }
    }

    pub fn remember(&self, w: &PlannedWrite, applied: &Applied) {
        let key = (Obj::of(&w.object.kind), w.object.name.clone());
        let (object, rv) = match applied {
            Applied::Written(v) => (Some(v.clone()), v["metadata"]["resourceVersion"].as_str()),
            Applied::Deleted | Applied::AlreadyGone => (None, w.resource_version.as_deref()),
        };
        let recent = Recent {
            object,
            rv: parse_rv(rv).unwrap_or(0),
            at: Instant::now(),
        };
        self.overlay.lock().insert(key, recent);
    }

    /// Every key a resync visits: templates, constraints, and the owners of VAPs/bindings.
    pub fn all_keys(&self) -> Vec<Key> {
        let mut keys = Vec::from_iter(self.templates.names().into_iter().map(Key::Template));
        for (kind, w) in self.kinds.read().iter() {
            keys.extend(w.store.names().iter().map(|n| Key::constraint(kind, n)));
        }
        for p in self.policies() {
            keys.extend(policy_keys(&p));
        }
        for b in self.bindings() {
            keys.extend(binding_keys(&b));
        }
        keys.sort();
        keys.dedup();
        keys
    }

    pub fn crds_changed(&self) {
        self.crds_changed.send_modify(|n| *n += 1);
    }

    pub fn crd_changes(&self) -> watch::Receiver<u64> {
        self.crds_changed.subscribe()
    }

    pub fn set_served(&self, served: Served) -> bool {
        replace(&self.served, Some(Arc::new(served)))
    }

    /// Gatekeeper's Configs as last read (none before the first read, or without Gatekeeper).
    pub fn gatekeeper_configs(&self) -> Arc<Vec<GatekeeperConfig>> {
        self.gatekeeper_configs.read().clone()
    }

    pub fn set_gatekeeper_configs(&self, configs: Vec<GatekeeperConfig>) -> bool {
        replace(&self.gatekeeper_configs, Arc::new(configs))
    }

    pub fn gatekeeper_webhooks(&self) -> Arc<Vec<GatekeeperWebhook>> {
        self.gatekeeper_webhooks.read().clone()
    }

    pub fn set_gatekeeper_webhooks(&self, webhooks: Vec<GatekeeperWebhook>) -> bool {
        replace(&self.gatekeeper_webhooks, Arc::new(webhooks))
    }

    pub fn snapshot(&self, errors: &[AccessError]) -> Snapshot {
        let mut a = Assembly::quiet();
        let add = |a: &mut Assembly, s: &TypedStore| {
            s.store.state().iter().for_each(|o| a.object(o, &s.ar))
        };
        add(&mut a, &self.templates);
        self.crds.state().iter().for_each(|c| a.crd(c));
        for w in self.kinds.read().values() {
            add(&mut a, &w.store);
        }
        add(&mut a, &self.policies);
        add(&mut a, &self.bindings);
        self.pod_statuses.lock().iter().for_each(|s| add(&mut a, s));
        // Every store not known now (still listing, relisting, failing) proves nothing either.
        let mut snap = a.finish(errors, self.unknown());
        if let Some(served) = &*self.served.read() {
            snap.served = (**served).clone();
        }
        snap.gatekeeper_configs = (**self.gatekeeper_configs.read()).clone();
        snap.gatekeeper_webhooks = (**self.gatekeeper_webhooks.read()).clone();
        snap
    }
}

impl ConstraintStore for Stores {
    fn constraint(&self, kind: &str, name: &str) -> Read<Option<Constraint>> {
        // Which kinds exist comes from the CRD store.
        if let Read::Unknown(u) = self.store_known(CRDS_RESOURCE) {
            return Read::Unknown(u);
        }
        let Some(store) = self.kind_store(kind) else {
            // No watch: no constraint of the kind exists, unless its CRD serves the kind and
            // the watch is only about to start.
            let served = self
                .crds
                .find(|c| is_constraint_crd(c, kind) && established(c));
            return match served {
                Some(c) => Read::Unknown(Unreadable(c.metadata.name.clone().unwrap_or_default())),
                None => Read::Known(None),
            };
        };
        self.store_known(&store.resource()).map(|()| {
            store
                .value(name)
                .map(|v| Constraint::from_value(v, Source::default()))
        })
    }

    fn constraint_names(&self, kind: &str) -> Vec<String> {
        self.kind_store(kind).map(|s| s.names()).unwrap_or_default()
    }

    fn crd_state(&self, kind: &str) -> Read<CrdState> {
        let of_kind = |c: &CustomResourceDefinition| is_constraint_crd(c, kind);
        self.store_known(CRDS_RESOURCE).map(|()| {
            // By name when the kind is watched (its CRD's name is its resource's); else a scan.
            let resource = self.kinds.read().get(kind).map(|w| w.resource.clone());
            let crd = resource
                .and_then(|r| self.crd_named(&r))
                .filter(|c| of_kind(c))
                .or_else(|| self.crds.find(of_kind));
            crd.map(|c| crd_state(&c))
                .unwrap_or(CrdState::NotEstablished)
        })
    }

    fn policy(&self, name: &str) -> Read<Option<Policy>> {
        self.decoded(Obj::Policy, &self.policies, name, Policy::from_value)
    }

    fn binding(&self, name: &str) -> Read<Option<Binding>> {
        self.decoded(Obj::Binding, &self.bindings, name, Binding::from_value)
    }

    fn opinions_known(&self) -> Read<()> {
        match self.store_known(&self.templates.resource()) {
            Read::Known(()) => self.store_known(&self.policies.resource()),
            unknown => unknown,
        }
    }

    fn served(&self) -> Read<Arc<Served>> {
        match &*self.served.read() {
            Some(s) => Read::Known(s.clone()),
            None => Read::Unknown(Unreadable("the API server's discovery".into())),
        }
    }

    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

impl TemplateStore for Stores {
    fn template(&self, name: &str) -> Read<Option<ConstraintTemplate>> {
        self.store_known(&self.templates.resource()).map(|()| {
            self.templates
                .value(name)
                .map(|v| ConstraintTemplate::from_value(v, Source::default()))
        })
    }

    /// Within the scope: a copy scoped to one template primes its cache on that one alone.
    fn template_names(&self) -> Vec<String> {
        self.templates
            .names()
            .into_iter()
            .filter(|n| self.scope.contains(&Key::Template(n.clone())))
            .collect()
    }

    fn templates_listed(&self) -> bool {
        self.is_listed(&self.templates.resource())
    }

    fn crd(&self, name: &str) -> Read<Option<CrdInfo>> {
        self.store_known(CRDS_RESOURCE).map(|()| {
            let v = self.read(Obj::Crd, name)?;
            Some(CrdInfo::from_value(&v, Source::default()))
        })
    }

    fn bindings_of_kind(&self, kind: &str) -> Read<Vec<Binding>> {
        let of_kind =
            |meta: &ObjectMeta| controllers_in(meta, CONSTRAINTS_GROUP).any(|r| r.kind == kind);
        self.store_known(&self.bindings.resource()).map(|()| {
            let stored: Vec<String> = self
                .bindings()
                .iter()
                .filter(|b| of_kind(&b.metadata))
                .filter_map(|b| b.metadata.name.clone())
                .collect();
            // Through the overlay: a binding we just deleted is gone.
            let mut values: Vec<_> = stored
                .iter()
                .filter_map(|n| self.read(Obj::Binding, n))
                .collect();
            // A binding we created counts until the store shows it, however far the watch lags
            // (not only while reads trust the overlay): its VAP must outlive it (I2).
            self.sweep_overlay();
            for ((obj, name), recent) in self.overlay.lock().iter() {
                if *obj == Obj::Binding
                    && !stored.contains(name)
                    && let Some(o) = &recent.object
                    && ObjectMeta::deserialize(&o["metadata"]).is_ok_and(|m| of_kind(&m))
                {
                    values.push(o.clone());
                }
            }
            values
                .into_iter()
                .filter_map(|v| Binding::from_value(v, Source::default()).ok())
                .collect()
        })
    }

    fn constraints_of_kind(&self, kind: &str) -> Read<Vec<Constraint>> {
        self.constraint(kind, "").map(|_| {
            self.constraint_names(kind)
                .iter()
                .filter_map(|n| self.constraint(kind, n).known().ok().flatten())
                .collect()
        })
    }
}

/// The stores driven as the watches drive them (`watches::spawn_watch`): kube-runtime's store
/// writer receives the list (`Init`, `InitApply`, `InitDone`) and the watch's events, and the
/// listing state is set around them; our writes come in through `remember`.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Verb;
    use crate::core::findings::Code;
    use crate::model::ObjectRef;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    const VAP: &str = "ValidatingAdmissionPolicy";
    const VAPB: &str = "ValidatingAdmissionPolicyBinding";

    /// An object as the server returns it: `value` marks which version of it this is.
    fn object(kind: &str, name: &str, rv: u64, value: &str) -> serde_json::Value {
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {
                "name": name,
                "uid": format!("uid-{name}"),
                "resourceVersion": rv.to_string(),
                "labels": { "v": value },
                "ownerReferences": [{
                    "apiVersion": "constraints.gatekeeper.sh/v1beta1",
                    "kind": "K8sX", "name": "c", "uid": "u", "controller": true
                }]
            }
        })
    }

    fn dynamic(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).expect("a DynamicObject")
    }

    /// The watch's initial list, applied to the store as `spawn_watch` does.
    fn list(writer: &mut Writer<DynamicObject>, items: Vec<serde_json::Value>) {
        writer.apply_watcher_event(&Event::Init);
        for o in items {
            writer.apply_watcher_event(&Event::InitApply(dynamic(o)));
        }
        writer.apply_watcher_event(&Event::InitDone);
    }

    /// What `policy(name)` (VAP) or `binding(name)` reads: the version label, `None` if
    /// absent; panics on `Unknown`.
    fn version(s: &Stores, kind: &str, name: &str) -> Option<String> {
        let meta = match kind {
            VAP => s.policy(name).map(|p| p.map(|p| p.meta)),
            _ => s.binding(name).map(|b| b.map(|b| b.meta)),
        };
        meta.known().expect("known").map(|m| m.labels["v"].clone())
    }

    fn write(verb: Verb, kind: &str, name: &str, rv: Option<u64>) -> PlannedWrite {
        PlannedWrite {
            verb,
            object: ObjectRef::new("admissionregistration.k8s.io/v1", kind, name),
            code: Code::PolicyMissing,
            reason: String::new(),
            body: None,
            uid: None,
            resource_version: rv.map(|r| r.to_string()),
            diff: String::new(),
        }
    }

    /// Remembers our write of `name` (an update from resourceVersion `from`, or a create) that
    /// the server answered with `value` at resourceVersion `rv`.
    fn wrote(s: &Stores, kind: &str, name: &str, from: Option<u64>, rv: u64, value: &str) {
        let verb = if from.is_some() {
            Verb::Update
        } else {
            Verb::Create
        };
        let applied = Applied::Written(object(kind, name, rv, value));
        s.remember(&write(verb, kind, name, from), &applied);
    }

    /// Stores whose policy and binding stores are listed and watched, holding `p` and `b` at
    /// resourceVersion 5.
    fn listed() -> (Stores, Writers) {
        let (s, mut w) = Stores::new(AdmissionApi::v1(), Scope::All);
        list(&mut w.policies, vec![object(VAP, "p", 5, "theirs")]);
        list(&mut w.bindings, vec![object(VAPB, "b", 5, "theirs")]);
        let [_, _, policies, bindings] = s.fixed_resources();
        s.set_complete(&policies);
        s.set_complete(&bindings);
        (s, w)
    }

    #[test]
    fn a_store_is_known_only_while_listed_and_watched() {
        let (s, mut w) = Stores::new(AdmissionApi::v1(), Scope::All);
        let [_, _, policies, _] = s.fixed_resources();
        assert!(
            matches!(s.policy("p"), Read::Unknown(_)),
            "never listed: absent cannot be told from unread"
        );
        // The list is in the store, but the watch that follows has not started yet.
        list(&mut w.policies, vec![object(VAP, "p", 5, "theirs")]);
        assert!(matches!(s.policy("p"), Read::Unknown(_)));
        assert_eq!(s.unknown().len(), 4);
        // Listed and watching.
        s.set_complete(&policies);
        assert_eq!(version(&s, VAP, "p").as_deref(), Some("theirs"));
        assert_eq!(version(&s, VAP, "q"), None, "known absent");
        assert!(!s.unknown().contains(&policies));
        // The watch broke: the store still holds `p`, but nothing in it is known any more.
        s.unlist(&policies);
        assert!(matches!(s.policy("p"), Read::Unknown(_)));
        assert!(matches!(s.policy("q"), Read::Unknown(_)));
        // Listed again, then the fence was lost: every store lists again before it is known.
        s.set_complete(&policies);
        let relists = s.relists();
        s.forget();
        assert!(matches!(s.policy("p"), Read::Unknown(_)));
        assert!(
            relists.has_changed().expect("open"),
            "the watches are told to relist"
        );
    }

    #[test]
    fn our_write_is_read_until_the_store_catches_up_and_a_newer_event_supersedes_it() {
        let (s, mut w) = listed();
        // We updated `p`: the server answered with resourceVersion 7; the watch lags.
        wrote(&s, VAP, "p", Some(5), 7, "ours");
        assert_eq!(version(&s, VAP, "p").as_deref(), Some("ours"));
        assert_eq!(s.unseen_writes(), 1);
        // The watch echoes our write: no reconcile needed, and the store holds it now.
        let echo = dynamic(object(VAP, "p", 7, "ours"));
        assert!(s.take_own_write(Obj::Policy, &echo.metadata));
        w.policies.apply_watcher_event(&Event::Apply(echo));
        assert_eq!(version(&s, VAP, "p").as_deref(), Some("ours"));
        assert_eq!(s.unseen_writes(), 0);

        // Another write of ours, then someone else's newer change arrives first.
        wrote(&s, VAP, "p", Some(7), 9, "ours again");
        assert_eq!(version(&s, VAP, "p").as_deref(), Some("ours again"));
        let newer = dynamic(object(VAP, "p", 10, "someone else's"));
        assert!(
            !s.take_own_write(Obj::Policy, &newer.metadata),
            "not our echo: it is reconciled"
        );
        w.policies.apply_watcher_event(&Event::Apply(newer));
        assert_eq!(version(&s, VAP, "p").as_deref(), Some("someone else's"));
        assert_eq!(s.unseen_writes(), 0);
    }

    /// `run --once` on a 5,000-binding takeover said "did not converge; ~4,000 writes still
    /// needed": the watch lagged more than the overlay's lifetime behind the burst of writes,
    /// the expired entries counted as seen, and convergence was claimed on stale stores.
    #[test]
    fn a_write_the_store_lags_behind_is_unseen_however_old() {
        let (s, mut w) = listed();
        let [_, _, policies, bindings] = s.fixed_resources();
        wrote(&s, VAP, "p", Some(5), 7, "ours");
        wrote(&s, VAPB, "b", Some(5), 8, "ours");
        s.age_overlay(OVERLAY_TTL);
        // Reads trust the store again ...
        assert_eq!(version(&s, VAP, "p").as_deref(), Some("theirs"));
        // ... but the writes are not in it yet.
        assert_eq!(s.unseen_writes(), 2);
        // The policy watch catches up with our write.
        w.policies
            .apply_watcher_event(&Event::Apply(dynamic(object(VAP, "p", 7, "ours"))));
        s.saw(&policies, "7", false);
        assert_eq!(s.unseen_writes(), 1);
        // Events of other objects past our write's resourceVersion: the binding store has
        // applied everything up to it, so whatever it holds of `b` (here: its delete by
        // someone else) came after our write.
        s.saw(&bindings, "7", false);
        assert_eq!(s.unseen_writes(), 1, "7 is before our write (8)");
        w.bindings
            .apply_watcher_event(&Event::Delete(dynamic(object(VAPB, "b", 9, "ours"))));
        s.saw(&bindings, "9", false);
        assert_eq!(s.unseen_writes(), 0);
        assert_eq!(version(&s, VAPB, "b"), None);
    }

    /// The names `bindings_of_kind("K8sX")` reads, sorted.
    fn of_kind(s: &Stores) -> Vec<String> {
        let bs = s.bindings_of_kind("K8sX").known().expect("known");
        let mut n: Vec<String> = bs.into_iter().map(|b| b.meta.name).collect();
        n.sort();
        n
    }

    #[test]
    fn a_created_binding_counts_before_its_event_and_a_deleted_one_is_gone_at_once() {
        let (s, mut w) = listed();
        // Created: read by name and among its kind's bindings before the watch shows it.
        wrote(&s, VAPB, "new", None, 6, "ours");
        assert_eq!(version(&s, VAPB, "new").as_deref(), Some("ours"));
        assert_eq!(of_kind(&s), ["b", "new"]);

        // Deleted: gone for the reconcilers while the store still holds it.
        s.remember(&write(Verb::Delete, VAPB, "b", Some(5)), &Applied::Deleted);
        assert_eq!(version(&s, VAPB, "b"), None);
        assert_eq!(of_kind(&s), ["new"]);
        // The watch's delete: still gone, and the overlay has nothing left to say about it.
        w.bindings
            .apply_watcher_event(&Event::Delete(dynamic(object(VAPB, "b", 5, "theirs"))));
        assert_eq!(version(&s, VAPB, "b"), None);
        // Recreated by someone else after our delete: seen.
        w.bindings
            .apply_watcher_event(&Event::Apply(dynamic(object(VAPB, "b", 8, "recreated"))));
        assert_eq!(version(&s, VAPB, "b").as_deref(), Some("recreated"));
    }

    /// The 5,000-binding takeover's watch lagged longer than the overlay is trusted for reads:
    /// a binding created then must still hold its VAP back (I2) until the store shows it.
    #[test]
    fn a_created_binding_counts_for_its_kind_until_the_store_shows_it_however_old() {
        let (s, _w) = listed();
        let [.., bindings] = s.fixed_resources();
        wrote(&s, VAPB, "new", None, 6, "ours");
        s.age_overlay(OVERLAY_TTL);
        assert_eq!(of_kind(&s), ["b", "new"]);
        // The store applied events past our create and holds no `new`: deleted since.
        s.saw(&bindings, "7", false);
        assert_eq!(of_kind(&s), ["b"]);
    }
}
