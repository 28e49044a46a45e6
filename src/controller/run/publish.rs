//! The published [`LiveState`]: rebuilt when something views show changed (a store, the
//! queue, the status, the Lease), at most once per [`COALESCE`] (the one coalescing between
//! the stores and the screen), and `/readyz` kept true to what this copy can read.

use crate::controller::reconcile::queue::SharedQueue;
use crate::controller::store::stores::Stores;
use crate::controller::tasks::changed;
use crate::controller::tell::metrics::Metrics;
use crate::controller::tell::outage::Outage;
use crate::controller::tell::write_log::WriteLog;
use crate::controller::view::state::{Connection, FailedWrite, LeaseInfo, LiveState};
use crate::controller::view::status::Status;
use crate::model::ObjectId;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

const COALESCE: Duration = Duration::from_millis(250);
/// Readiness, the overlay sweep and the connection are looked at this often anyway.
const TICK: Duration = Duration::from_secs(1);

/// May touch what the publisher reads and keeps: the client (is the server back?), the stores
/// (the snapshot; their overlay swept, their watches retried), the queue (its depth; keys
/// retried once the server answers), the status, the metrics (`/readyz`, the queue depth), the
/// outage log and the write log (swept).
pub struct PublishContext {
    pub client: kube::Client,
    pub stores: Arc<Stores>,
    pub queue: Arc<SharedQueue>,
    pub status: Arc<Status>,
    pub metrics: Arc<Metrics>,
    pub outage: Arc<Outage>,
    pub write_log: Arc<WriteLog>,
}

/// What the publisher reads besides its [`PublishContext`].
pub struct Sources {
    /// The Lease as this copy sees it (the election's, or the holder followed).
    pub lease: watch::Receiver<LeaseInfo>,
    /// Include the stores' snapshot (views need it; a headless `run` does not).
    pub with_snapshot: bool,
}

fn connection(outage: &Outage) -> Connection {
    match outage.unreachable() {
        Some((ago, message)) => Connection::Unreachable {
            since: chrono::Utc::now() - chrono::Duration::from_std(ago).unwrap_or_default(),
            message,
        },
        None => Connection::Connected,
    }
}

/// Keeps `/readyz` true, every reason to be unready said: a copy whose Lease requests fail or
/// go unanswered cannot lead, nor tell who does; on a store it cannot read, nothing is decided;
/// while another writer contests objects, this copy does not keep them as it should.
fn readiness(ctx: &PublishContext) {
    settle_contests(ctx);
    let lease = ctx
        .status
        .access_error(crate::controller::lead::lease::LEASES);
    let contests = ctx.status.contests();
    let unknown = ctx.status.why_unknown(ctx.stores.unknown());
    let contested = contests
        .iter()
        .map(crate::controller::view::status::contest_text);
    let reasons: Vec<String> = lease
        .map(|l| l.message)
        .into_iter()
        .chain(unknown.into_iter().map(|(_, why)| why))
        .chain(ctx.status.lacking_rights())
        .chain(judge_guard(ctx))
        .chain(contested)
        .collect();
    ctx.metrics.set_ready(if !reasons.is_empty() {
        Err(reasons.join("\n"))
    } else if ctx.status.synced() {
        Ok(())
    } else {
        Err("watches not synced yet".into())
    });
}

/// What is wrong with the guard this copy expects (`run --expect-guard`), judged on the
/// stores (`core::guard`): said once when it changes — an error log, a line in the views' event
/// log — and kept in the status for `/readyz` and the Lease's health. Nothing before both
/// stores are listed.
fn judge_guard(ctx: &PublishContext) -> Option<String> {
    use crate::controller::view::state::{EventResult, EventVerb};
    use crate::core::guard::{GUARD_NAME, guard_problem};
    let expected = ctx.status.guard_expected()?;
    let Some((policy, binding)) = ctx.stores.policy_and_binding(GUARD_NAME) else {
        return ctx.status.guard_problem();
    };
    let problem = guard_problem(&expected, policy.as_ref(), binding.as_ref());
    if ctx.status.set_guard_problem(problem.clone()) {
        let guard = crate::model::ObjectRef::new(
            "admissionregistration.k8s.io/v1",
            crate::model::VAP_KIND,
            GUARD_NAME,
        );
        let result = match &problem {
            Some(p) => {
                tracing::error!("{p}");
                EventResult::Failed(p.clone())
            }
            None => {
                tracing::info!("the guard {GUARD_NAME} is whole again");
                EventResult::Ok
            }
        };
        ctx.status
            .log(EventVerb::Guard, guard, result, String::new());
    }
    problem
}

/// Ends the contests that are over (the write tried after the hold stood): said once each.
fn settle_contests(ctx: &PublishContext) {
    for c in ctx.status.settle_contests() {
        tracing::info!(
            // A string field, as the log has always had it.
            object = c.object.to_string().as_str(),
            other = c.other,
            "{}: written again (field manager {:?} no longer undoes it)",
            c.object,
            c.other
        );
    }
    ctx.metrics.set_contested(ctx.status.contests().len());
}

/// The failed writes views show: this copy's own, unless another copy leads — then the
/// writes that leader says the API server refuses (an observer has no writes of its own).
fn failed_writes(status: &Status, lease: &LeaseInfo) -> Arc<BTreeMap<ObjectId, FailedWrite>> {
    let remote = lease
        .health
        .as_ref()
        .filter(|_| !lease.leading && !lease.vacant);
    Arc::new(match remote {
        Some(h) => {
            let said = |refused: bool| {
                move |(object, why): &(ObjectId, String)| {
                    let write = FailedWrite {
                        why: why.clone(),
                        refused,
                        contested: !refused,
                    };
                    (object.clone(), write)
                }
            };
            let refused = h.refused.iter().map(said(true));
            refused.chain(h.contested.iter().map(said(false))).collect()
        }
        None => status.failed_writes(),
    })
}

/// `state` as it is now. (Also the first state views see, so none reads an empty snapshot
/// from a copy whose stores are listed: it said "loaded 0 objects" once.)
pub fn fill(ctx: &PublishContext, state: &mut LiveState, src: &Sources) {
    if src.with_snapshot {
        let snapshot = ctx.stores.snapshot(&ctx.status.access_errors());
        state.snapshot = Arc::new(snapshot);
    }
    state.queue_depth = ctx.queue.len();
    state.access_errors = ctx.status.access_errors();
    state.synced = ctx.status.synced();
    state.gatekeeper_generator = ctx.status.gatekeeper_generator();
    state.writes_enabled = ctx.status.writes_enabled();
    state.connection = connection(&ctx.outage);
    state.lease = src.lease.borrow().clone();
    if let Some(holder) = &state.lease.holder {
        ctx.status.saw_holder(holder);
    }
    state.failed_writes = failed_writes(&ctx.status, &state.lease);
}

pub async fn run(
    ctx: PublishContext,
    mut state: LiveState,
    tx: watch::Sender<Arc<LiveState>>,
    mut src: Sources,
) {
    let mut depth = ctx.queue.depth();
    let mut status = ctx.status.subscribe();
    let mut drained = false;
    let mut was_unreachable = false;
    loop {
        ctx.stores.sweep_overlay();
        readiness(&ctx);
        // The last sync (published with renewals) is stamped when the queue drains with
        // everything listed, not at every publish while it stays empty: each renewal would
        // carry a new stamp, and every view would analyse again every retry period.
        let empty = *depth.borrow_and_update() == 0 && ctx.status.synced();
        if empty && !drained {
            ctx.status.set_last_sync(chrono::Utc::now());
        }
        drained = empty;
        status.borrow_and_update();
        src.lease.borrow_and_update();
        fill(&ctx, &mut state, &src);
        ctx.metrics.set_queue_depth(state.queue_depth);
        let last_connection = state.connection.clone();
        // Back from an outage: the watches waiting out their backoff (up to 30 s) list now,
        // so the views show the cluster as soon as it answers, not a backoff later.
        if was_unreachable && last_connection == Connection::Connected {
            ctx.stores.retry_now();
            // And the writes that met the outage: now, not when their backoff (up to 30 s)
            // ends.
            let released = ctx.queue.server_answers();
            if released > 0 {
                tracing::debug!("the API server answers: {released} keys retried now");
            }
        }
        was_unreachable = last_connection != Connection::Connected;
        if tx.send(Arc::new(state.clone())).is_err() {
            return;
        }
        // Wait for a change; the tick republishes only when the connection changed. A source
        // whose sender is gone never wakes it (`changed`).
        let mut tick = tokio::time::interval(TICK);
        tick.reset();
        loop {
            tokio::select! {
                () = changed(&mut status) => break,
                () = changed(&mut depth) => break,
                () = changed(&mut src.lease) => break,
                _ = tick.tick() => {
                    ctx.stores.sweep_overlay();
                    ctx.write_log.sweep();
                    readiness(&ctx);
                    // While nothing answers, ask the server itself once a tick: every watch
                    // may be waiting out its backoff, and nothing else would notice it is back.
                    if was_unreachable {
                        let asked = tokio::time::timeout(TICK, ctx.client.apiserver_version());
                        if let Ok(Ok(_)) = asked.await {
                            ctx.outage.reachable();
                        }
                    }
                    if connection(&ctx.outage) != last_connection {
                        break;
                    }
                }
            }
        }
        tokio::time::sleep(COALESCE).await;
    }
}
