//! Gatekeeper's pod statuses, written by the leader (issue 38): what each reconcile concluded
//! (`world::Concluded`) as the `ConstraintTemplatePodStatus` and `ConstraintPodStatus` that
//! Gatekeeper's status controller aggregates into the template's and constraint's
//! `status.byPod` (`core::pod_status` builds them; docs/reconciler.md says what is written).
//!
//! Written only when what an entry says changed: what this copy wrote, or listed under its id
//! once after each resync, is kept here, so a converged copy sends nothing at rest. Fenced like
//! every write. Without Gatekeeper's status CRDs nothing is written (said once per resync).

use crate::controller::reconcile::world::Concluded;
use crate::controller::view::fence::Fence;
use crate::core::pod_status::{
    self, CONSTRAINT_STATUS_KIND, POD_LABEL, TEMPLATE_STATUS_KIND, says_the_same,
};
use crate::model::STATUS_GROUP;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The field manager of our server-side applies.
const MANAGER: &str = "kubectl-vap";

/// The pod statuses this copy writes.
pub struct PodStatuses {
    client: kube::Client,
    /// The entries' id: the Lease's name, the same whoever holds it.
    id: String,
    /// Gatekeeper's namespace, where its status controller reads them.
    namespace: String,
    known: Mutex<Known>,
}

/// What this copy knows is in the cluster under its id.
#[derive(Default)]
struct Known {
    /// By (kind, name): the object as last written or listed.
    objects: BTreeMap<(&'static str, String), Value>,
    /// Listed since the last resync.
    listed: bool,
    /// Gatekeeper's status CRDs are not served: nothing is written until the next resync.
    unserved: bool,
    /// A failure already said since the last resync (said again once it changes).
    said: Option<String>,
}

fn resource(kind: &'static str) -> ApiResource {
    let plural = match kind {
        TEMPLATE_STATUS_KIND => "constrainttemplatepodstatuses",
        _ => "constraintpodstatuses",
    };
    ApiResource {
        group: STATUS_GROUP.into(),
        version: "v1beta1".into(),
        api_version: format!("{STATUS_GROUP}/v1beta1"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

impl PodStatuses {
    pub fn new(client: kube::Client, id: &str, namespace: &str) -> Self {
        PodStatuses {
            client,
            id: id.to_string(),
            namespace: namespace.to_string(),
            known: Mutex::default(),
        }
    }

    /// List again before the next write: on every resync (gaining the Lease, and the periodic
    /// one), so an entry someone deleted or changed is written again.
    pub fn relist(&self) {
        if let Ok(mut k) = self.known.lock() {
            *k = Known::default();
        }
    }

    fn api(&self, kind: &'static str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &resource(kind))
    }

    /// Says `what` once until it changes or the next resync: a failure here repeats on every
    /// reconcile (a missing grant, an unserved kind), and must not flood the log.
    fn say_once(&self, what: String) {
        let Ok(mut k) = self.known.lock() else {
            return;
        };
        if k.said.as_deref() != Some(what.as_str()) {
            tracing::warn!("{what}");
            k.said = Some(what);
        }
    }

    /// Lists this copy's entries of both kinds, if not listed since the last resync; `false`
    /// when nothing can be written (not served, or the list failed).
    async fn listed(&self, fence: &Fence) -> bool {
        match self.known.lock() {
            Ok(k) if k.unserved => return false,
            Ok(k) if k.listed => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
        let Some(left) = fence.remaining() else {
            return false;
        };
        let mine = ListParams::default().labels(&format!("{POD_LABEL}={}", self.id));
        let mut objects = BTreeMap::new();
        for kind in [TEMPLATE_STATUS_KIND, CONSTRAINT_STATUS_KIND] {
            let listed = tokio::time::timeout(left, self.api(kind).list(&mine)).await;
            match listed {
                Ok(Ok(list)) => {
                    for o in list.items {
                        let name = o.metadata.name.clone().unwrap_or_default();
                        let value = serde_json::to_value(&o).unwrap_or(Value::Null);
                        objects.insert((kind, name), value);
                    }
                }
                Ok(Err(kube::Error::Api(s))) if s.code == 404 => {
                    tracing::info!(
                        "Gatekeeper's {kind} is not served: no pod status is written (docs/reconciler.md)"
                    );
                    if let Ok(mut k) = self.known.lock() {
                        k.unserved = true;
                    }
                    return false;
                }
                Ok(Err(e)) => {
                    self.say_once(format!(
                        "cannot list Gatekeeper's {kind} objects in {}: {e}; its entries are written once it can",
                        self.namespace
                    ));
                    return false;
                }
                Err(_) => return false,
            }
        }
        if let Ok(mut k) = self.known.lock() {
            k.objects = objects;
            k.listed = true;
        }
        true
    }

    /// Writes what `concluded` says, if it says something new, while `fence` allows.
    pub async fn publish(&self, fence: &Fence, concluded: Concluded) {
        if !fence.may_write() || !self.listed(fence).await {
            return;
        }
        let (id, ns) = (self.id.as_str(), self.namespace.as_str());
        let (kind, name, desired) = match concluded {
            Concluded::Template { name, entry } => {
                let status_name = pod_status::template_status_name(id, &name);
                let desired = entry
                    .and_then(|e| pod_status::template_status(id, ns, &e.object, &e.generation));
                (TEMPLATE_STATUS_KIND, status_name, desired)
            }
            Concluded::Constraint { kind, name, entry } => {
                let status_name = pod_status::constraint_status_name(id, &kind, &name);
                let desired = entry
                    .and_then(|e| pod_status::constraint_status(id, ns, &e.object, &e.generation));
                (CONSTRAINT_STATUS_KIND, status_name, desired)
            }
        };
        // A name Gatekeeper's packing cannot hold (an id or name that starts or ends with a
        // dash): no entry, as Gatekeeper would write none.
        let Some(name) = name else {
            return;
        };
        let key = (kind, name.clone());
        let current = self
            .known
            .lock()
            .ok()
            .and_then(|k| k.objects.get(&key).cloned());
        match (desired, current) {
            (Some(d), current) if !current.as_ref().is_some_and(|c| says_the_same(&d, c)) => {
                self.apply(fence, kind, &name, d).await;
            }
            (None, Some(_)) => self.delete(fence, kind, &name).await,
            _ => {}
        }
    }

    async fn apply(&self, fence: &Fence, kind: &'static str, name: &str, desired: Value) {
        let Some(left) = fence.remaining() else {
            return;
        };
        let (api, params) = (self.api(kind), PatchParams::apply(MANAGER).force());
        let patch = Patch::Apply(&desired);
        match tokio::time::timeout(left, api.patch(name, &params, &patch)).await {
            Ok(Ok(_)) => {
                tracing::debug!("wrote {kind} {}/{name}", self.namespace);
                if let Ok(mut k) = self.known.lock() {
                    k.objects.insert((kind, name.to_string()), desired);
                }
            }
            Ok(Err(e)) => self.say_once(format!(
                "cannot write Gatekeeper's {kind} {}/{name}: {e}",
                self.namespace
            )),
            // The fence closed first: whether it landed is not known; the next resync lists.
            Err(_) => self.relist(),
        }
    }

    async fn delete(&self, fence: &Fence, kind: &'static str, name: &str) {
        let Some(left) = fence.remaining() else {
            return;
        };
        let (api, params) = (self.api(kind), DeleteParams::default());
        let gone = match tokio::time::timeout(left, api.delete(name, &params)).await {
            Ok(Ok(_)) => Ok(()),
            // Someone deleted it first: gone all the same.
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => Ok(()),
            Ok(Err(e)) => Err(Some(e)),
            Err(_) => Err(None),
        };
        match gone {
            Ok(()) => {
                tracing::debug!("deleted {kind} {}/{name}", self.namespace);
                if let Ok(mut k) = self.known.lock() {
                    k.objects.remove(&(kind, name.to_string()));
                }
            }
            Err(Some(e)) => self.say_once(format!(
                "cannot delete Gatekeeper's {kind} {}/{name}: {e}",
                self.namespace
            )),
            Err(None) => self.relist(),
        }
    }
}
