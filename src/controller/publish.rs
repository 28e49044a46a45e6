//! The published [`LiveState`]: rebuilt when something views show changed (a store, the
//! queue, the status, the Lease, the cluster's Events), at most once per [`COALESCE`], and
//! `/readyz` kept true to what this copy can read.

use super::lease::HolderView;
use super::shared::Shared;
use super::state::{ClusterEvent, Connection, Health, LiveState, Log};
use super::tasks::changed;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Bursts of changes are published once per this interval at most.
const COALESCE: Duration = Duration::from_millis(250);
/// Readiness, the overlay sweep and the connection are looked at this often anyway.
const TICK: Duration = Duration::from_secs(1);

/// What the publisher reads besides [`Shared`].
pub struct Sources {
    pub view: watch::Receiver<HolderView>,
    pub cluster_events: watch::Receiver<Log<ClusterEvent>>,
    /// What this copy publishes while it leads (its own health, shown as the holder's).
    pub health: Health,
    /// Include the stores' snapshot (views need it; a headless `run` does not).
    pub with_snapshot: bool,
}

fn connection(shared: &Shared) -> Connection {
    match shared.outage.unreachable() {
        Some((ago, message)) => Connection::Unreachable {
            since: chrono::Utc::now() - chrono::Duration::from_std(ago).unwrap_or_default(),
            message,
        },
        None => Connection::Connected,
    }
}

/// Keeps `/readyz` true: ready only while every store is listed and watched (a copy that
/// cannot read something decides nothing that rests on it, and says so).
fn readiness(shared: &Shared) {
    // A copy whose Lease requests fail or go unanswered cannot lead, nor tell who does.
    if let Some(lease) = shared.status.access_error(super::lease::LEASES) {
        shared.metrics.set_ready(Err(lease.message));
        return;
    }
    let unknown = shared.unknown_stores();
    shared
        .metrics
        .set_ready(if shared.status.synced() && unknown.is_empty() {
            Ok(())
        } else if unknown.is_empty() {
            Err("watches not synced yet".into())
        } else {
            Err(unknown
                .iter()
                .map(|(_, why)| why.clone())
                .collect::<Vec<_>>()
                .join("\n"))
        });
}

fn fill(shared: &Shared, state: &mut LiveState, src: &Sources) {
    if src.with_snapshot {
        state.snapshot = Arc::new(shared.snapshot());
    }
    // The logs themselves: a clone copies a few chunk pointers, no event.
    state.events = shared.status.events();
    state.queue_depth = shared.queue.len();
    state.access_errors = shared.status.access_errors();
    state.synced = shared.status.synced();
    state.gatekeeper_generator = shared.status.gatekeeper_generator();
    state.writes_enabled = shared.status.writes_enabled();
    state.connection = connection(shared);
    state.cluster_events = src.cluster_events.borrow().clone();
    let view = src.view.borrow().clone();
    state.lease.leading = shared.leadership.is_leading();
    state.lease.holder = view.holder;
    state.lease.since = view.since;
    state.lease.vacant = view.vacant && !state.lease.leading;
    state.lease.unreadable = view.unreadable.filter(|_| !state.lease.leading);
    state.lease.unresponsive_until = view.unresponsive_until.filter(|_| !state.lease.leading);
    state.lease.health = if state.lease.leading {
        Some((src.health)())
    } else {
        view.health
    };
}

pub async fn run(
    shared: Arc<Shared>,
    mut state: LiveState,
    tx: watch::Sender<Arc<LiveState>>,
    mut src: Sources,
) {
    let mut depth = shared.queue.depth();
    let mut status = shared.status.subscribe();
    loop {
        shared.stores.sweep_overlay();
        readiness(&shared);
        // The queue drained with everything listed: the last sync, published with renewals.
        if *depth.borrow_and_update() == 0 && shared.status.synced() {
            shared.status.set_last_sync(chrono::Utc::now());
        }
        fill(&shared, &mut state, &src);
        shared.metrics.queue_depth.store(
            state.queue_depth as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        let last_connection = state.connection.clone();
        if tx.send(Arc::new(state.clone())).is_err() {
            return;
        }
        // Wait for a change; the tick republishes only when the connection changed. A source
        // whose sender is gone (no cluster Events followed by a headless `run`) never wakes it.
        loop {
            tokio::select! {
                () = changed(&mut status) => break,
                () = changed(&mut depth) => break,
                () = changed(&mut src.view) => break,
                () = changed(&mut src.cluster_events) => break,
                () = tokio::time::sleep(TICK) => {
                    shared.stores.sweep_overlay();
                    readiness(&shared);
                    if connection(&shared) != last_connection {
                        break;
                    }
                }
            }
        }
        tokio::time::sleep(COALESCE).await;
    }
}
