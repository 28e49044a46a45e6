//! Watches (kube-runtime reflectors) feeding the stores, and the mapping of every event to
//! the keys it concerns: a template → its key; a constraint → its key; a VAP/VAPB → its
//! controller owner (so an edited or deleted object is repaired at once); a constraint CRD →
//! start/stop that kind's constraint watch and re-enqueue its constraints.

use super::live::{KindWatch, LiveWorld};
use super::queue::Key;
use super::state::AccessError;
use super::world::Enqueue;
use crate::core::desired::CrdState;
use crate::kube::discovery::constraint_resource;
use crate::model::CONSTRAINTS_GROUP;
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Resource;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The keys an event on a VAP concerns: its controller template, and the template its name
/// belongs to (so a foreign VAP going away lets the template write its own).
pub fn policy_keys(p: &DynamicObject) -> Vec<Key> {
    let mut keys = Vec::new();
    for r in p.metadata.owner_references.iter().flatten() {
        if r.controller == Some(true) && r.api_version.starts_with("templates.gatekeeper.sh/") {
            keys.push(Key::Template(r.name.clone()));
        }
    }
    if let Some(t) = p
        .metadata
        .name
        .as_deref()
        .and_then(|n| n.strip_prefix("gatekeeper-"))
        && !keys.contains(&Key::Template(t.to_string()))
    {
        keys.push(Key::Template(t.to_string()));
    }
    keys
}

/// The keys an event on a VAPB concerns: its controller constraint.
pub fn binding_keys(b: &DynamicObject) -> Vec<Key> {
    b.metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|r| {
            r.controller == Some(true) && r.api_version.starts_with("constraints.gatekeeper.sh/")
        })
        .map(|r| Key::constraint(&r.kind, &r.name))
        .collect()
}

/// Records (or clears, with `None`) a read problem of `resource`.
pub fn set_access(world: &LiveWorld, resource: &str, error: Option<AccessError>) {
    let mut access = world.access.lock().unwrap_or_else(|p| p.into_inner());
    let changed = match error {
        Some(e) => access.insert(resource.to_string(), e.clone()).as_ref() != Some(&e),
        None => access.remove(resource).is_some(),
    };
    if changed {
        world.dirty.store(true, Ordering::Relaxed);
    }
}

fn watch_error(resource: &str, e: &watcher::Error) -> AccessError {
    let status = match e {
        watcher::Error::InitialListFailed(k)
        | watcher::Error::WatchStartFailed(k)
        | watcher::Error::WatchFailed(k) => crate::kube::status_code(k),
        watcher::Error::WatchError(s) => Some(s.code),
        watcher::Error::NoResourceVersion => None,
    };
    AccessError::from_status(resource, status, "watching", &format!("{e}; retrying"))
}

/// Runs a reflector for `api` into `writer`, calling `on_event(world, object, deleted)`.
pub fn spawn_watch<K, F>(
    api: Api<K>,
    writer: Writer<K>,
    resource: String,
    world: Arc<LiveWorld>,
    on_event: F,
) -> tokio::task::JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Default + Send + Sync,
    F: Fn(&Arc<LiveWorld>, &K, bool) + Send + Sync + 'static,
{
    spawn_watch_with(api, writer, resource, world, on_event)
}

/// As [`spawn_watch`], for resources whose dynamic type has no default (DynamicObject).
pub fn spawn_watch_with<K, F>(
    api: Api<K>,
    writer: Writer<K>,
    resource: String,
    world: Arc<LiveWorld>,
    on_event: F,
) -> tokio::task::JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync,
    F: Fn(&Arc<LiveWorld>, &K, bool) + Send + Sync + 'static,
{
    tokio::spawn(async move {
        // managedFields are never read and are most of a small object's size: dropped before
        // the store, they cost neither memory nor the serialization of every read.
        // Initial lists from the API server's watch cache (resourceVersion=0), as client-go's
        // reflectors do: a quorum read of etcd per resource buys nothing a watch that follows
        // does not correct.
        let stream = watcher(api, watcher::Config::default().any_semantic())
            .default_backoff()
            .modify(|o: &mut K| o.meta_mut().managed_fields = None)
            .reflect(writer);
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(ev) => {
                    world.dirty.store(true, Ordering::Relaxed);
                    match ev {
                        watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                            on_event(&world, &o, false)
                        }
                        watcher::Event::Delete(o) => on_event(&world, &o, true),
                        watcher::Event::InitDone => set_access(&world, &resource, None),
                        watcher::Event::Init => {}
                    }
                }
                Err(e) => {
                    let err = watch_error(&resource, &e);
                    tracing::warn!("{}", err.message);
                    set_access(&world, &resource, Some(err));
                }
            }
        }
    })
}

pub fn on_template(world: &Arc<LiveWorld>, t: &DynamicObject, _deleted: bool) {
    if let Some(name) = &t.metadata.name {
        world.queue.enqueue(Key::Template(name.clone()));
    }
}

pub fn on_policy(world: &Arc<LiveWorld>, p: &DynamicObject, deleted: bool) {
    if !deleted && world.take_own_write(true, p) {
        return;
    }
    for k in policy_keys(p) {
        world.queue.enqueue(k);
    }
}

pub fn on_binding(world: &Arc<LiveWorld>, b: &DynamicObject, deleted: bool) {
    if !deleted && world.take_own_write(false, b) {
        return;
    }
    for k in binding_keys(b) {
        world.queue.enqueue(k);
    }
}

fn established(crd: &CustomResourceDefinition) -> bool {
    crd_state(crd) != CrdState::NotEstablished
}

/// Whether a CRD serves its kind, and since when (the `Established` condition's transition).
pub fn crd_state(crd: &CustomResourceDefinition) -> CrdState {
    let condition = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Established"));
    match condition {
        Some(c) if c.status == "True" => {
            CrdState::Established(c.last_transition_time.as_ref().and_then(|t| {
                chrono::DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond() as u32)
            }))
        }
        _ => CrdState::NotEstablished,
    }
}

/// A constraint CRD changed: start (or stop) the kind's watch; its constraints' readiness changed.
pub fn on_crd(world: &Arc<LiveWorld>, crd: &CustomResourceDefinition, deleted: bool) {
    if crd.spec.group != CONSTRAINTS_GROUP {
        return;
    }
    let kind = crd.spec.names.kind.clone();
    if deleted {
        stop_kind(world, &kind);
        return;
    }
    if established(crd) {
        start_kind(world, &kind, &crd.spec.names.plural);
    }
    for name in super::world::ConstraintStore::constraint_names(&**world, &kind) {
        world.queue.enqueue(Key::constraint(&kind, name));
    }
}

/// Starts the constraint watch of `kind` if it is not running.
pub fn start_kind(world: &Arc<LiveWorld>, kind: &str, plural: &str) {
    let mut watches = world.constraints.write().unwrap_or_else(|p| p.into_inner());
    if watches.contains_key(kind) {
        return;
    }
    let ar = constraint_resource(kind, plural);
    let writer: Writer<DynamicObject> = Writer::new(ar.clone());
    let store = writer.as_reader();
    let api: Api<DynamicObject> = Api::all_with(world.client.clone(), &ar);
    let resource = crate::kube::discovery::resource_name(&ar);
    let kind_owned = kind.to_string();
    let task = spawn_watch_with(api, writer, resource, world.clone(), move |w, c, _| {
        if let Some(name) = &c.metadata.name {
            w.queue.enqueue(Key::constraint(&kind_owned, name));
        }
    });
    tracing::info!(kind, "watching constraints of kind {kind}");
    watches.insert(
        kind.to_string(),
        KindWatch {
            plural: plural.to_string(),
            store,
            task: task.abort_handle(),
        },
    );
}

/// Stops the constraint watch of `kind` (its CRD is gone) and re-enqueues what depended on it.
pub fn stop_kind(world: &Arc<LiveWorld>, kind: &str) {
    let removed = world
        .constraints
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .remove(kind);
    let Some(w) = removed else { return };
    w.task.abort();
    tracing::info!(
        kind,
        "stopped watching constraints of kind {kind} (CRD deleted)"
    );
    let names: Vec<String> = w
        .store
        .state()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    for n in names {
        world.queue.enqueue(Key::constraint(kind, n));
    }
    for b in world.bindings.state() {
        for k in binding_keys(&b) {
            if matches!(&k, Key::Constraint { kind: bk, .. } if bk == kind) {
                world.queue.enqueue(k);
            }
        }
    }
}

/// Waits until every constraint watch started so far has listed once.
pub async fn constraint_watches_ready(world: &LiveWorld) {
    let stores: Vec<_> = world
        .constraints
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .map(|w| w.store.clone())
        .collect();
    for s in stores {
        let _ = s.wait_until_ready().await;
    }
}
