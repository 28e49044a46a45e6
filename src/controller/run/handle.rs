//! [`Controller`]: the running reconciler as everything outside `controller/` sees it — the only
//! door. Its state (published on a watch channel), requests (replay, reconcile), waits
//! (`leading`, `idle`, `converged`), what it did (its event log, its writes) and `stop`.
//! Nothing outside reaches its stores, queue or locks.

use crate::controller::error::Error;
use crate::controller::lead::lease::LEASES;
use crate::controller::reconcile::cache::OpinionCache;
use crate::controller::reconcile::queue::SharedQueue;
use crate::controller::store::stores::Stores;
use crate::controller::tasks::{Tasks, changed};
use crate::controller::tell::metrics::Metrics;
use crate::controller::view::fence::Leadership;
use crate::controller::view::state::{
    AccessError, Command, Happened, LiveState, ReconcileEvent, RequestOutcome,
};
use crate::controller::view::status::Status;
use crate::snapshot::Snapshot;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::{Instant, sleep_until, timeout_at};
use tokio_util::sync::CancellationToken;

/// A request and where its outcome goes.
pub(super) struct Request {
    pub command: Command,
    pub reply: oneshot::Sender<Result<RequestOutcome, Error>>,
}

/// The running reconciler. Cheap to clone; every clone is the same reconciler. Dropping the
/// clones does not stop it: call [`Controller::stop`] (which releases the lease).
#[derive(Clone)]
pub struct Controller {
    pub(super) inner: Arc<Inner>,
}

/// Built by `start::launch`, its one maker.
pub(super) struct Inner {
    pub identity: String,
    pub state: watch::Receiver<Arc<LiveState>>,
    pub requests: mpsc::Sender<Request>,
    /// The owner's stop (see [`Controller::stop`]).
    pub stop: CancellationToken,
    pub join: Mutex<Option<tokio::task::JoinHandle<Result<(), Error>>>>,
    pub world: HandleContext,
    pub cache: Arc<OpinionCache>,
}

/// May touch what the door reads and waits on: the stores, the queue, the status, the
/// leadership, the metrics, and the supervisor (for a task's failure). It writes nothing: a
/// request goes to the copy's tasks through `Inner::requests`.
pub(super) struct HandleContext {
    pub stores: Arc<Stores>,
    pub queue: Arc<SharedQueue>,
    pub status: Arc<Status>,
    pub leadership: Arc<Leadership>,
    pub metrics: Arc<Metrics>,
    pub tasks: Arc<Tasks>,
}

impl HandleContext {
    /// The stores not known now (resource, why).
    fn unknown_stores(&self) -> Vec<(String, String)> {
        self.status.why_unknown(self.stores.unknown())
    }

    fn snapshot(&self) -> Snapshot {
        self.stores.snapshot(&self.status.access_errors())
    }

    /// What this copy is doing, for a person debugging a wait that did not end.
    fn progress_report(&self) -> String {
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

/// Why this copy does not lead (see [`Controller::leading`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotLeading {
    /// Another copy holds the Lease (by identity), or nobody could be named.
    #[error("Lease is held by {}", .0.as_deref().unwrap_or("another copy"))]
    HeldBy(Option<String>),
    /// The Lease cannot be used at all (RBAC, missing namespace): waiting does not help.
    #[error("{}", .0.message)]
    LeaseUnusable(AccessError),
    /// This copy does not take part in the election (read-only, or refusing to write).
    #[error("this copy does not compete for the Lease")]
    NotParticipating,
}

/// How a wait for convergence ended (see [`Controller::converged`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Convergence {
    /// Every store known, the queue drained.
    Idle,
    /// Stores that cannot be read (resource, why): nothing resting on them was decided.
    Unreadable(Vec<(String, String)>),
    /// A write was forbidden: a missing right does not fix itself by retrying.
    Forbidden,
    /// Work still queued when the time ran out (writes keep failing?).
    TimedOut,
}

/// How long the queue must stay empty to count as idle: a watch event of our own last write,
/// or a key a list handler is about to queue, may still come.
const QUIET: Duration = Duration::from_millis(500);

/// How long a store may stay forbidden (or not served) before [`Controller::converged`] gives
/// up on it: the authorizer's caches take a moment to see a new grant.
const UNREADABLE_GRACE: Duration = Duration::from_secs(3);

impl Controller {
    pub fn identity(&self) -> &str {
        &self.inner.identity
    }

    pub fn state(&self) -> Arc<LiveState> {
        self.inner.state.borrow().clone()
    }

    /// A receiver of every published state (for views that redraw on change).
    pub fn subscribe(&self) -> watch::Receiver<Arc<LiveState>> {
        self.inner.state.clone()
    }

    /// What happens from now on, each once: this copy's reconcile actions, the cluster's
    /// Events other copies report, changes of who leads. The first call gets everything since
    /// the copy started (nothing said during start-up is lost); later ones from the call on.
    pub fn feed(&self) -> broadcast::Receiver<Happened> {
        self.inner.world.status.feed()
    }

    /// Asks for `command` and waits for its outcome: handled here when this copy leads,
    /// otherwise by the lease holder, wherever it runs.
    pub async fn request(&self, command: Command) -> Result<RequestOutcome, Error> {
        let (reply, outcome) = oneshot::channel();
        self.inner
            .requests
            .send(Request { command, reply })
            .await
            .map_err(|_| Error::Stopped)?;
        outcome.await.map_err(|_| Error::Stopped)?
    }

    /// Waits until this copy holds the Lease, for at most `timeout`.
    pub async fn leading(&self, timeout: Duration) -> Result<(), NotLeading> {
        let world = &self.inner.world;
        let start = Instant::now();
        let deadline = start + timeout;
        // A Lease that cannot be used is given this long: a grant may be on its way through
        // the authorizer's cache.
        let grace_end = start + UNREADABLE_GRACE;
        let mut leading = world.leadership.subscribe();
        let mut state = self.subscribe();
        let mut status = world.status.subscribe();
        loop {
            if *leading.borrow_and_update() {
                return Ok(());
            }
            status.borrow_and_update();
            let lease = state.borrow_and_update().lease.clone();
            if !lease.participating {
                return Err(NotLeading::NotParticipating);
            }
            let now = Instant::now();
            if let Some(e) = world.status.access_error(LEASES)
                && now >= grace_end
            {
                return Err(NotLeading::LeaseUnusable(e));
            }
            if now >= deadline {
                let other = lease.holder.filter(|h| *h != self.inner.identity);
                return Err(NotLeading::HeldBy(other));
            }
            // Leadership, the Lease's holder and access errors wake us; the clock only at the
            // end of the grace and at the deadline.
            let wake = if now < grace_end { grace_end } else { deadline };
            tokio::select! {
                _ = changed(&mut leading) => {}
                _ = changed(&mut state) => {}
                _ = changed(&mut status) => {}
                _ = sleep_until(wake.min(deadline)) => {}
            }
        }
    }

    /// What this copy is forbidden, once it has tried everything once: the first lists of its
    /// stores (tried before [`crate::controller::launch`] returned) and, when it competes, its
    /// first attempt at the Lease (waited for, at most `timeout`). Only refusals: a resource
    /// that is not served may come (a CRD installed later), and other failures are retried.
    pub async fn forbidden(&self, timeout: Duration) -> Vec<AccessError> {
        let world = &self.inner.world;
        let deadline = Instant::now() + timeout;
        let mut state = self.subscribe();
        let mut status = world.status.subscribe();
        let mut leading = world.leadership.subscribe();
        loop {
            status.borrow_and_update();
            leading.borrow_and_update();
            let lease = state.borrow_and_update().lease.clone();
            let tried = !lease.participating
                || world.leadership.is_leading()
                || lease.holder.is_some()
                || world.status.access_error(LEASES).is_some();
            if tried || Instant::now() >= deadline {
                break;
            }
            tokio::select! {
                () = changed(&mut state) => {}
                () = changed(&mut status) => {}
                () = changed(&mut leading) => {}
                () = sleep_until(deadline) => {}
            }
        }
        let mut errors = world.status.access_errors();
        errors.retain(|e| e.kind == crate::controller::view::state::AccessErrorKind::Forbidden);
        // Readable, but not allowed to lead: as forbidden as a store it may not read.
        if let Some(message) = world.status.lacking_rights() {
            errors.push(AccessError {
                resource: crate::controller::lead::rights::RIGHTS.to_string(),
                kind: crate::controller::view::state::AccessErrorKind::Forbidden,
                message,
            });
        }
        errors
    }

    /// Waits until every watch has listed, the stores show every write of this copy (so a
    /// snapshot taken now is what the writes made), and the queue has stayed empty for `QUIET`
    /// (every key reconciled, delayed ones included); or `timeout` passes.
    pub async fn idle(&self, timeout: Duration) -> bool {
        let world = &self.inner.world;
        let mut depth = world.queue.depth();
        let mut status = world.status.subscribe();
        let deadline = Instant::now() + timeout;
        loop {
            let empty = *depth.borrow_and_update() == 0;
            status.borrow_and_update();
            if empty && world.status.synced() && world.stores.unseen_writes() == 0 {
                // Quiet for a moment: no change of the queue in between.
                match timeout_at(deadline.min(Instant::now() + QUIET), depth.changed()).await {
                    Err(_) => return *depth.borrow() == 0 && world.status.synced(),
                    Ok(_) => continue,
                }
            }
            // Every watch event touches the status: a store that caught up with a write wakes us.
            tokio::select! {
                _ = changed(&mut depth) => {}
                _ = changed(&mut status) => {}
                _ = sleep_until(deadline) => return false,
            }
        }
    }

    /// Waits for convergence: idle with every store known. Gives up early when a write was
    /// forbidden or a store stays forbidden or unserved.
    pub async fn converged(&self, limit: Duration) -> Convergence {
        let world = &self.inner.world;
        let deadline = Instant::now() + limit;
        let mut unreadable_since: Option<Instant> = None;
        loop {
            let slice = Duration::from_secs(1).min(deadline - Instant::now());
            let idle = self.idle(slice).await;
            let unknown = world.unknown_stores();
            if idle && unknown.is_empty() {
                return Convergence::Idle;
            }
            if !unknown.is_empty() && world.status.definitely_unreadable(&unknown) {
                let since = *unreadable_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= UNREADABLE_GRACE {
                    return Convergence::Unreadable(unknown);
                }
            } else {
                unreadable_since = None;
            }
            if world.status.any_forbidden() {
                return Convergence::Forbidden;
            }
            if Instant::now() >= deadline {
                return if unknown.is_empty() {
                    Convergence::TimedOut
                } else {
                    Convergence::Unreadable(unknown)
                };
            }
        }
    }

    /// This copy's reconcile actions so far (oldest first, bounded).
    pub fn events(&self) -> Vec<ReconcileEvent> {
        self.inner.world.status.events()
    }

    /// Writes the API server accepted from this copy.
    pub fn writes_total(&self) -> u64 {
        self.inner.world.metrics.writes_total()
    }

    /// `/metrics` as this copy would serve it.
    pub fn metrics_text(&self) -> String {
        self.inner.world.metrics.render()
    }

    pub fn access_errors(&self) -> Vec<AccessError> {
        self.inner.world.status.access_errors()
    }

    pub fn watched_kinds(&self) -> Vec<String> {
        self.inner.world.stores.watched_kinds()
    }

    /// What this copy is doing, for a person debugging a wait that did not end: the queue,
    /// whether it synced, unlisted kinds, access errors, the last events.
    pub fn progress_report(&self) -> String {
        self.inner.world.progress_report()
    }

    /// Whether this copy may write at all (false: read-only, or Gatekeeper's generator).
    pub fn writes_enabled(&self) -> bool {
        self.inner.world.status.writes_enabled()
    }

    pub fn opinion(&self, kind: &str) -> Option<crate::core::desired::Opinion> {
        self.inner.cache.get(kind)
    }

    pub fn snapshot(&self) -> Snapshot {
        self.inner.world.snapshot()
    }

    /// How long [`Controller::stop`] waits for the Lease to be released (unreleased, it
    /// expires by itself a lease duration later).
    pub const STOP_WAIT: Duration = Duration::from_secs(10);

    /// Resolves once a task of this copy has failed (panicked, or ended while the copy ran),
    /// with what failed. The copy has then stopped writing and released its Lease; `/healthz`
    /// and `/readyz` say why until [`Controller::stop`] ends the rest.
    pub async fn failed(&self) -> Error {
        let mut failure = self.inner.world.tasks.failure();
        // The value, not the channel's lock, is kept across the wait below.
        let failed = failure.wait_for(Option::is_some).await.map(|f| f.clone());
        match failed {
            Ok(f) => f.map_or(Error::Stopped, Error::TaskFailed),
            // The supervisor is gone: nothing can fail any more.
            Err(_) => std::future::pending().await,
        }
    }

    /// Stops: writes end, the Lease is released, the watches stop. Waits at most
    /// [`Controller::STOP_WAIT`] for the release; calling it again (or on another clone)
    /// returns at once. After a task failed, its failure ([`Error::TaskFailed`]).
    pub async fn stop(&self) -> Result<(), Error> {
        self.inner.stop.cancel();
        let Some(join) = self.inner.join.lock().take() else {
            return Ok(());
        };
        match tokio::time::timeout(Self::STOP_WAIT, join).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => Err(Error::Task(e)),
            Err(_) => Err(Error::NotReleased {
                secs: Self::STOP_WAIT.as_secs(),
            }),
        }
    }
}
