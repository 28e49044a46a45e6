//! [`Resync`]: everything enqueued again and Gatekeeper's pod statuses listed again — what the
//! periodic resync does, and what a change of what is served, of Gatekeeper's Config or
//! webhook, of its generator or of who leads asks for.

use crate::controller::reconcile::queue::SharedQueue;
use crate::controller::reconcile::world::Enqueue;
use crate::controller::store::stores::Stores;
use crate::controller::tell::pod_status::PodStatuses;
use std::sync::Arc;

/// May touch: the stores (read for their keys), the queue (every key enqueued) and the pod
/// statuses (listed again).
pub struct Resync {
    pub stores: Arc<Stores>,
    pub queue: Arc<SharedQueue>,
    pub pod_statuses: Arc<PodStatuses>,
}

impl Resync {
    pub fn resync(&self) {
        self.pod_statuses.relist();
        for k in self.stores.all_keys() {
            self.queue.enqueue(k);
        }
    }
}
