//! [`Shared`]: what several tasks of a running copy share. The reconcilers' world is
//! `writer::Live` over it. Private to `controller/`: outside, [`crate::controller::Controller`]
//! is the door.

use super::tasks::Tasks;
use crate::controller::ask::channel::Answers;
use crate::controller::ask::requests::Tracker;
use crate::controller::reconcile::queue::SharedQueue;
use crate::controller::reconcile::world::Enqueue;
use crate::controller::store::stores::Stores;
use crate::controller::tell::events::Recorder;
use crate::controller::tell::metrics::Metrics;
use crate::controller::tell::outage::{Outage, WriteFailures};
use crate::controller::tell::pod_status::PodStatuses;
use crate::controller::tell::write_log::WriteLog;
use crate::controller::view::fence::Leadership;
use crate::controller::view::status::Status;
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
    /// Failed writes that will be retried.
    pub failures: WriteFailures,
    pub recorder: Recorder,
    /// Requests in progress, and what their keys' reconciles did.
    pub tracker: Tracker,
    pub tasks: Tasks,
    /// Answers to other copies' requests, published in the Lease with the renewals.
    pub answers: Answers,
    /// What was decided, written where Gatekeeper's users look.
    pub pod_statuses: PodStatuses,
    /// Each write's log line; counted when one object is written again and again.
    pub write_log: WriteLog,
}

impl Shared {
    pub fn new(
        client: kube::Client,
        stores: Stores,
        queue: SharedQueue,
        recorder: Recorder,
        tasks: Tasks,
        pod_statuses: PodStatuses,
    ) -> Self {
        Shared {
            client,
            stores,
            queue: Arc::new(queue),
            status: Status::default(),
            leadership: Leadership::default(),
            metrics: Arc::default(),
            outage: Outage::default(),
            failures: WriteFailures::default(),
            recorder,
            tracker: Tracker::default(),
            tasks,
            answers: Answers::default(),
            pod_statuses,
            write_log: WriteLog::default(),
        }
    }

    pub fn may_write(&self) -> bool {
        self.leadership.fence.may_write() && self.status.writes_enabled()
    }

    pub fn resync(&self) {
        self.pod_statuses.relist();
        for k in self.stores.all_keys() {
            self.queue.enqueue(k);
        }
    }

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

#[cfg(test)]
impl Shared {
    /// A copy with empty stores on `client` (which need never answer), for unit tests.
    pub fn offline(client: kube::Client, admission: crate::cluster::AdmissionApi) -> Self {
        let (stores, _) = Stores::new(admission, crate::controller::reconcile::keys::Scope::All);
        let queue = SharedQueue::default();
        let pod_statuses = PodStatuses::new(client.clone(), "kubectl-vap", "gatekeeper-system");
        let tasks = Tasks::default();
        Shared::new(
            client,
            stores,
            queue,
            Recorder::default(),
            tasks,
            pod_statuses,
        )
    }
}
