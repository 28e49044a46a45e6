//! Leader election on a `coordination.k8s.io/v1` Lease, with fenced writes: only the holder
//! writes, and only before a monotonic deadline from its last successful renewal.
//!
//! The election is client-go's (`tools/leaderelection`): the holder renews every retry period;
//! a follower takes the Lease once it has seen the same record (resourceVersion) for a whole
//! lease duration *by its own clock*, so wall-clock skew between copies does not matter; every
//! write to the Lease carries the resourceVersion read, so two copies cannot both win.
//!
//! The fence is client-go's renew deadline: a renewal sent at `t` lets this copy write until
//! `t + renew_deadline`, shorter than the lease duration, so by the time any other copy can
//! consider the Lease expired (a full duration after *it* saw that renewal, which is after `t`)
//! this copy has stopped writing, with `duration - renew_deadline` to spare for a request in
//! flight. The deadline is checked right before every write ([`Fence::may_write`]). A copy
//! that was paused (SIGSTOP, a long GC-like stall, a suspended laptop), or cannot renew, finds
//! its deadline passed: it writes nothing more, drops its queue, relists every store, and only
//! writes again after it holds the Lease again, confirmed by the server.

use super::live::LiveWorld;
use super::state::{EventResult, EventVerb};
use super::world::Enqueue;
use crate::model::ObjectRef;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// Default lease duration (seconds): a crashed holder is replaced after at most this long.
pub const LEASE_DURATION: u64 = 15;

/// The timings derived from the lease duration (client-go's 15 s / 10 s / 2 s, scaled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub duration: Duration,
    /// Writes stop this long after a renewal was sent, unless another renewal succeeded.
    pub renew_deadline: Duration,
    /// How often the holder renews and a follower looks.
    pub retry: Duration,
}

impl Timing {
    pub fn new(duration: Duration) -> Timing {
        // At least 1 s: the Lease stores whole seconds.
        let duration = duration.max(Duration::from_secs(1));
        Timing {
            duration,
            renew_deadline: duration * 2 / 3,
            retry: (duration / 7).max(Duration::from_millis(100)),
        }
    }
}

/// A monotonic clock that keeps counting while the machine is suspended (Linux
/// `CLOCK_BOOTTIME`): a laptop that slept must not wake up believing its deadline is ahead.
/// Elsewhere, `std::time::Instant`.
pub fn mono_now() -> Duration {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes into the timespec we own.
        if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } == 0 {
            return Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        }
    }
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

/// Whether this copy may write now: a deadline on [`mono_now`], set from each successful
/// renewal and cleared when leadership is lost.
#[derive(Debug, Default)]
pub struct Fence {
    deadline: Mutex<Option<Duration>>,
}

impl Fence {
    /// True only before the deadline of the last successful renewal.
    pub fn may_write(&self) -> bool {
        self.deadline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|d| mono_now() < d)
    }

    /// A renewal sent at `sent` succeeded.
    pub fn renewed(&self, sent: Duration, timing: &Timing) {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(sent + timing.renew_deadline);
    }

    /// Set, and passed: leadership is no longer confirmed.
    pub fn expired(&self) -> bool {
        self.deadline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|d| mono_now() >= d)
    }

    /// No more writes; returns whether there was a deadline.
    pub fn revoke(&self) -> bool {
        self.deadline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .is_some()
    }
}

/// A unique identity for this copy: `<hostname>-<pid>-<random>`.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kubectl-vap".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{host}-{}-{:06x}", std::process::id(), nanos & 0xff_ffff)
}

pub fn lease_ref(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef::new(
        "coordination.k8s.io/v1",
        "Lease",
        format!("{namespace}/{name}"),
    )
}

/// The current holder of the Lease, if any (`None` also when it cannot be read).
pub async fn holder(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<String>, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    Ok(api.get_opt(name).await?.and_then(|l| holder_of(&l)))
}

fn holder_of(l: &Lease) -> Option<String> {
    l.spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty())
}

fn now_micro() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// One election step's view of the Lease.
struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    /// The Lease record last seen (resourceVersion) and when, on [`mono_now`].
    observed: Option<(String, Duration)>,
}

/// What one attempt concluded.
enum Attempt {
    /// This copy holds the Lease (acquired or renewed).
    Holds,
    /// Another copy holds it (named, if any).
    Other(Option<String>),
}

impl Elector {
    /// Acquires or renews the Lease (client-go's `tryAcquireOrRenew`).
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let now = mono_now();
        let seconds = i32::try_from(self.timing.duration.as_secs()).unwrap_or(i32::MAX);
        let pp = PostParams {
            field_manager: Some(crate::cluster::apply::FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        let Some(current) = self.api.get_opt(&self.name).await? else {
            let lease: Lease = serde_json::from_value(serde_json::json!({
                "metadata": { "name": self.name },
                "spec": { "holderIdentity": self.identity, "leaseDurationSeconds": seconds,
                          "acquireTime": now_micro(), "renewTime": now_micro(), "leaseTransitions": 0 }
            }))
            .map_err(kube::Error::SerdeError)?;
            return match self.api.create(&pp, &lease).await {
                Ok(l) => {
                    self.observed = l.metadata.resource_version.clone().map(|rv| (rv, now));
                    Ok(Attempt::Holds)
                }
                Err(e) if crate::cluster::status_code(&e) == Some(409) => Ok(Attempt::Other(None)),
                Err(e) => Err(e),
            };
        };
        let rv = current
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        if self.observed.as_ref().map(|(r, _)| r) != Some(&rv) {
            self.observed = Some((rv.clone(), now));
        }
        let holder = holder_of(&current);
        let ours = holder.as_deref() == Some(self.identity.as_str());
        let spec = current.spec.clone().unwrap_or_default();
        if !ours && holder.is_some() {
            // Expired only once this copy has seen the same record for the holder's whole
            // duration, on its own clock.
            let their = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs)
                .unwrap_or(self.timing.duration);
            let seen_at = self.observed.as_ref().map(|(_, t)| *t).unwrap_or(now);
            if now < seen_at + their {
                return Ok(Attempt::Other(holder));
            }
        }
        let mut next = current.clone();
        let mut s = spec.clone();
        s.holder_identity = Some(self.identity.clone());
        s.lease_duration_seconds = Some(seconds);
        let stamp: serde_json::Value = now_micro().into();
        s.renew_time = serde_json::from_value(stamp.clone()).ok();
        if !ours {
            s.acquire_time = serde_json::from_value(stamp).ok();
            s.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        next.spec = Some(s);
        next.metadata.managed_fields = None;
        // The resourceVersion read: if anyone wrote the Lease since, this fails (409).
        match self.api.replace(&self.name, &pp, &next).await {
            Ok(l) => {
                self.observed = l.metadata.resource_version.clone().map(|rv| (rv, now));
                Ok(Attempt::Holds)
            }
            Err(e) if crate::cluster::status_code(&e) == Some(409) => Ok(Attempt::Other(holder)),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up if this copy holds it (a waiting copy takes it at once).
    async fn release(&self) -> Result<(), kube::Error> {
        let Some(current) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        if holder_of(&current).as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        let mut next = current.clone();
        let mut s = current.spec.clone().unwrap_or_default();
        s.holder_identity = None;
        s.renew_time = None;
        next.spec = Some(s);
        next.metadata.managed_fields = None;
        self.api
            .replace(&self.name, &PostParams::default(), &next)
            .await
            .map(|_| ())
    }
}

/// Runs the election until `shutdown`: keeps `world.fence` (and `world.leading`, for views)
/// up to date; releases the lease at the end. `holder_tx` receives the observed holder.
pub async fn run(
    world: Arc<LiveWorld>,
    namespace: String,
    name: String,
    identity: String,
    duration: Duration,
    holder_tx: watch::Sender<Option<String>>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), super::Error> {
    let lease_name = format!("{namespace}/{name}");
    let timing = Timing::new(duration);
    let mut elector = Elector {
        api: Api::namespaced(world.client.clone(), &namespace),
        name: name.clone(),
        identity: identity.clone(),
        timing,
        observed: None,
    };
    let lease = lease_ref(&namespace, &name);
    let mut failing_since: Option<Duration> = None;
    loop {
        // A deadline passed while leading (paused, or renewals failed for too long): nothing
        // decided before counts. Checked before asking the server, so even a renewal that
        // succeeds now starts from fresh lists.
        if world.fence.expired() {
            lose(
                &world,
                &lease,
                &identity,
                "the renew deadline passed (this copy was paused, or could not renew)",
            );
        }
        let sent = mono_now();
        match elector.try_acquire_or_renew().await {
            Ok(Attempt::Holds) => {
                world.outage.reachable();
                super::watches::set_access(&world, "leases.coordination.k8s.io", None);
                if let Some(since) = failing_since.take() {
                    tracing::info!(
                        "Lease {lease_name} reachable again after {}s",
                        (mono_now() - since).as_secs()
                    );
                }
                world.fence.renewed(sent, &timing);
                // A renewal that took longer than the deadline confirms nothing.
                if !world.fence.may_write() {
                    lose(&world, &lease, &identity, "the renewal came back too late");
                } else if !world.set_leading(true) {
                    world.dirty.store(true, Ordering::Relaxed);
                    tracing::info!(
                        "acquired Lease {lease_name} as {identity}: resyncing everything"
                    );
                    world.log(
                        EventVerb::Lease,
                        lease.clone(),
                        EventResult::Ok,
                        format!("{identity} acquired the lease; resync"),
                    );
                    for k in world.all_keys() {
                        world.queue.enqueue(k);
                    }
                }
                send_holder(&holder_tx, Some(identity.clone()));
            }
            Ok(Attempt::Other(holder)) => {
                world.outage.reachable();
                if world.leading.load(Ordering::SeqCst) {
                    let by = holder.clone().unwrap_or_else(|| "another copy".into());
                    lose(
                        &world,
                        &lease,
                        &identity,
                        &format!("{by} holds the Lease now"),
                    );
                }
                send_holder(&holder_tx, holder);
            }
            Err(e) => {
                // The fence keeps its deadline: writes go on until it passes, no longer.
                let msg = format!(
                    "cannot use Lease {lease_name}: {e} (needs get/create/update on leases in namespace {namespace}, and the namespace must exist)"
                );
                if crate::cluster::status_code(&e).is_none() {
                    // No answer at all: part of the copy's one outage log.
                    world
                        .outage
                        .failed(&format!("Lease {lease_name}"), &e.to_string());
                } else if failing_since.is_none() {
                    failing_since = Some(mono_now());
                    tracing::warn!("{msg}");
                } else {
                    tracing::debug!("{msg}");
                }
                let kind = match crate::cluster::status_code(&e) {
                    Some(401 | 403) => super::state::AccessErrorKind::Forbidden,
                    _ => super::state::AccessErrorKind::Other,
                };
                super::watches::set_access(
                    &world,
                    "leases.coordination.k8s.io",
                    Some(super::state::AccessError {
                        resource: "leases.coordination.k8s.io".into(),
                        kind,
                        message: msg,
                    }),
                );
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(timing.retry) => {}
            _ = shutdown.changed() => break,
        }
    }
    world.fence.revoke();
    let held = world.set_leading(false);
    // Released even if this copy believes it lost it: `release` checks the holder first.
    match elector.release().await {
        Ok(()) if held => tracing::info!("released Lease {lease_name}"),
        Ok(()) => {}
        Err(e) => tracing::warn!("releasing Lease {lease_name}: {e}"),
    }
    Ok(())
}

fn send_holder(tx: &watch::Sender<Option<String>>, h: Option<String>) {
    tx.send_if_modified(|cur| {
        let changed = *cur != h;
        *cur = h;
        changed
    });
}

/// Leadership is not confirmed any more: writes stop at once, and the queue and the stores
/// built while leading are dropped (the stores list again) before this copy writes again.
fn lose(world: &LiveWorld, lease: &ObjectRef, identity: &str, why: &str) {
    let had = world.fence.revoke();
    let was = world.set_leading(false);
    if !had && !was {
        return;
    }
    tracing::warn!(
        "lost Lease {}: {why}; not writing; dropping the queue and relisting everything before writing again",
        lease.name
    );
    world.log(
        EventVerb::Lease,
        lease.clone(),
        EventResult::Ok,
        format!("{identity} lost the lease ({why}); writes stop, queue dropped, relisting"),
    );
    world.forget_everything();
}

/// Polls the holder of a Lease this copy does not compete for (read-only views).
pub async fn watch_holder(
    world: Arc<LiveWorld>,
    namespace: String,
    name: String,
    holder_tx: watch::Sender<Option<String>>,
) {
    let resource = "leases.coordination.k8s.io";
    loop {
        match holder(&world.client, &namespace, &name).await {
            Ok(h) => {
                super::watches::set_access(&world, resource, None);
                send_holder(&holder_tx, h);
            }
            Err(e) => {
                let kind = match crate::cluster::status_code(&e) {
                    Some(401 | 403) => super::state::AccessErrorKind::Forbidden,
                    _ => super::state::AccessErrorKind::Other,
                };
                super::watches::set_access(
                    &world,
                    resource,
                    Some(super::state::AccessError {
                        resource: resource.into(),
                        kind,
                        message: format!(
                            "cannot read Lease {namespace}/{name} to show who reconciles: {e}"
                        ),
                    }),
                );
            }
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_closes_at_the_deadline_and_stays_closed_once_revoked() {
        let timing = Timing::new(Duration::from_secs(15));
        assert_eq!(timing.renew_deadline, Duration::from_secs(10));
        assert!(timing.renew_deadline < timing.duration);
        let fence = Fence::default();
        assert!(!fence.may_write(), "never renewed");
        fence.renewed(mono_now(), &timing);
        assert!(fence.may_write() && !fence.expired());
        // A renewal sent long ago (as after a pause) confirms nothing now.
        fence.renewed(mono_now().saturating_sub(timing.renew_deadline), &timing);
        assert!(!fence.may_write() && fence.expired());
        assert!(fence.revoke());
        assert!(!fence.may_write() && !fence.expired() && !fence.revoke());
    }
}
