//! [`Shared`]: what every task of a running copy shares — the stores, the queue, the status,
//! leadership, metrics, the event recorder and the request tracker — and the world the
//! reconcilers run against ([`ConstraintStore`], [`TemplateStore`], [`Writer`]: reads come from
//! the stores, writes go to the API server in `writer.rs`). Private to `controller/`: outside,
//! [`super::Controller`] is the only door.

use super::events::Recorder;
use super::fence::Leadership;
use super::keys::Key;
use super::metrics::Metrics;
use super::outage::{Outage, WriteFailures};
use super::queue::SharedQueue;
use super::requests::Tracker;
use super::state::{EventResult, EventVerb};
use super::status::Status;
use super::stores::Stores;
use super::world::{ConstraintStore, Enqueue, Read, TemplateStore};
use crate::core::desired::CrdState;
use crate::model::served::Served;
use crate::model::{Binding, Constraint, ConstraintTemplate, CrdInfo, ObjectRef, Policy};
use chrono::{DateTime, Utc};
use std::sync::Arc;

pub struct Shared {
    pub client: kube::Client,
    pub stores: Stores,
    pub queue: Arc<SharedQueue>,
    pub status: Status,
    pub leadership: Leadership,
    pub metrics: Arc<Metrics>,
    /// The one log of an API server that does not answer (watches, Lease, writes).
    pub outage: Outage,
    /// Rate limiting of the logs of failed writes.
    pub write_log: WriteFailures,
    /// Outcomes as Kubernetes Events.
    pub recorder: Recorder,
    /// Requests in progress, and what their keys' reconciles did.
    pub tracker: Tracker,
}

impl Shared {
    /// Whether a write may be sent now: writes enabled and leadership confirmed.
    pub fn may_write(&self) -> bool {
        self.leadership.may_write() && self.status.writes_enabled()
    }

    pub fn log(&self, verb: EventVerb, object: ObjectRef, result: EventResult, message: String) {
        self.status.log(verb, object, result, message);
    }

    /// Enqueues every key a resync visits.
    pub fn resync(&self) {
        for k in self.stores.all_keys() {
            self.queue.enqueue(k);
        }
    }

    /// Every store that is not known now, with why.
    pub fn unknown_stores(&self) -> Vec<(String, String)> {
        self.status.why_unknown(self.stores.unknown())
    }

    /// The fence is gone (lease lost, renewal deadline passed): what was queued is dropped and
    /// every store lists again, so nothing decided before is acted on after.
    pub fn forget_everything(&self) {
        self.queue.discard();
        self.stores.forget();
        self.status.touch();
    }

    /// The stores as a snapshot, now.
    pub fn snapshot(&self) -> crate::snapshot::Snapshot {
        self.stores.snapshot(&self.status.access_errors())
    }

    /// What this copy is doing, for a person debugging a wait that did not end.
    pub fn progress_report(&self) -> String {
        let events: Vec<String> = self
            .status
            .events()
            .iter()
            .rev()
            .take(10)
            .map(|e| format!("{e:?}"))
            .collect();
        let access: Vec<String> = self
            .status
            .access_errors()
            .into_iter()
            .map(|e| e.message)
            .collect();
        format!(
            "synced={}, unlisted kinds={:?}, access errors={access:?}, queue={}, last events (newest first)={events:#?}",
            self.status.synced(),
            self.stores.unlisted_kinds(),
            self.queue.describe(),
        )
    }
}

impl ConstraintStore for Shared {
    fn constraint(&self, kind: &str, name: &str) -> Read<Option<Constraint>> {
        self.stores.constraint(kind, name)
    }
    fn constraint_names(&self, kind: &str) -> Vec<String> {
        self.stores.constraint_names(kind)
    }
    fn crd_state(&self, kind: &str) -> Read<CrdState> {
        self.stores.crd_state(kind)
    }
    fn binding(&self, name: &str) -> Read<Option<Binding>> {
        self.stores.binding(name)
    }
    fn opinions_known(&self) -> Read<()> {
        self.stores.opinions_known()
    }
    fn served(&self) -> Read<Arc<Served>> {
        self.stores.served()
    }
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

impl TemplateStore for Shared {
    fn template(&self, name: &str) -> Read<Option<ConstraintTemplate>> {
        self.stores.template(name)
    }
    fn template_names(&self) -> Vec<String> {
        self.stores.template_names()
    }
    fn templates_listed(&self) -> bool {
        self.stores.templates_listed()
    }
    fn policy(&self, name: &str) -> Read<Option<Policy>> {
        self.stores.policy(name)
    }
    fn crd(&self, name: &str) -> Read<Option<CrdInfo>> {
        self.stores.crd(name)
    }
    fn bindings_of_kind(&self, kind: &str) -> Read<Vec<Binding>> {
        self.stores.bindings_of_kind(kind)
    }
    fn constraints_of_kind(&self, kind: &str) -> Read<Vec<Constraint>> {
        self.stores.constraints_of_kind(kind)
    }
}

/// The keys of a command: the template's (reconcile only) and its kind's constraints.
pub fn keys_of_template(shared: &Shared, template: &str, with_template: bool) -> Vec<Key> {
    let mut keys = Vec::new();
    if with_template {
        keys.push(Key::Template(template.to_string()));
    }
    // A command only enqueues: an unknown store just means no constraint keys here.
    if let Read::Known(Some(t)) = shared.stores.template(template)
        && let Some(kind) = t.kind
    {
        keys.extend(
            shared
                .stores
                .constraint_names(&kind)
                .into_iter()
                .map(|n| Key::constraint(&kind, n)),
        );
    }
    keys
}

#[cfg(test)]
impl Shared {
    /// A copy with empty stores on `client` (which need never answer), for unit tests.
    pub fn offline(client: kube::Client, admission: crate::cluster::AdmissionApi) -> Self {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        use kube::api::DynamicObject;
        use kube::runtime::reflector::store::Writer;
        let dynamic = |ar: kube::core::ApiResource| Writer::<DynamicObject>::new(ar).as_reader();
        let readers = super::stores::Readers {
            templates: dynamic(crate::cluster::discovery::templates_resource()),
            crds: Writer::<CustomResourceDefinition>::default().as_reader(),
            policies: dynamic(admission.policy()),
            bindings: dynamic(admission.binding()),
        };
        Shared {
            client,
            stores: Stores::new(admission, readers, super::keys::Scope::All),
            queue: Arc::default(),
            status: Status::default(),
            leadership: Leadership::default(),
            metrics: Arc::default(),
            outage: Outage::default(),
            write_log: Default::default(),
            recorder: Recorder::default(),
            tracker: Tracker::default(),
        }
    }
}
