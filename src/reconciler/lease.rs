//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager): only the holder
//! writes. Gaining the lease → resync everything; losing it → stop writing at once; shutdown →
//! release it.

use super::live::LiveWorld;
use super::state::{EventResult, EventVerb};
use super::world::Enqueue;
use crate::model::ObjectRef;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::watch;

/// Default lease duration (seconds): a crashed holder is replaced after at most this long.
pub const LEASE_DURATION: u64 = 15;
/// Renew this long before expiry (a third of the duration when that is shorter).
pub const LEASE_GRACE: u64 = 5;

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
    match api.get_opt(name).await? {
        Some(l) => Ok(l
            .spec
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())),
        None => Ok(None),
    }
}

/// Runs the election until `shutdown`, flipping `world.leading`; releases the lease at the end.
/// `holder_tx` receives the observed holder identity.
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
    let lease_err = |e: &dyn std::fmt::Display| super::Error::Lease {
        lease: lease_name.clone(),
        message: e.to_string(),
    };
    // The manager needs the Lease to exist (it creates it); retry while that fails (RBAC, network).
    let duration = duration.as_secs().max(3);
    let grace = LEASE_GRACE.min(duration / 3);
    let manager: LeaseManager = loop {
        let built = LeaseManagerBuilder::new(world.client.clone(), &name)
            .with_namespace(&namespace)
            .with_identity(&identity)
            .with_field_manager("kubectl-vap")
            .with_duration(duration)
            .with_grace(grace)
            .build()
            .await;
        match built {
            Ok(m) => break m,
            Err(e) => {
                let msg = format!(
                    "cannot use Lease {lease_name}: {e} (needs get/create/update/patch on leases in namespace {namespace}, and the namespace must exist)"
                );
                tracing::warn!("{msg}");
                super::watches::set_access(
                    &world,
                    "leases.coordination.k8s.io",
                    Some(super::state::AccessError {
                        resource: "leases.coordination.k8s.io".into(),
                        kind: super::state::AccessErrorKind::Other,
                        message: msg,
                    }),
                );
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(3)) => continue,
                    _ = shutdown.changed() => return Ok(()),
                }
            }
        }
    };
    super::watches::set_access(&world, "leases.coordination.k8s.io", None);
    // A follower otherwise sleeps until the holder's lease would expire: watching the holder
    // lets it take a released lease at once.
    let mut holder_rx = holder_tx.subscribe();
    // Poll the holder for views (cheap: one GET every few seconds).
    let poll = {
        let client = world.client.clone();
        let (ns, n) = (namespace.clone(), name.clone());
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            loop {
                if let Ok(h) = holder(&client, &ns, &n).await {
                    holder_tx.send_if_modified(|cur| {
                        let changed = *cur != h;
                        *cur = h.clone();
                        changed
                    });
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                    _ = shutdown.changed() => return,
                }
            }
        })
    };
    let result = loop {
        tokio::select! {
            changed = manager.changed() => match changed {
                Ok(leading) => {
                    world.leading.store(leading, Ordering::SeqCst);
                    world.metrics.leader.store(leading, Ordering::Relaxed);
                    world.dirty.store(true, Ordering::Relaxed);
                    let lease = lease_ref(&namespace, &name);
                    if leading {
                        tracing::info!("acquired Lease {lease_name} as {identity}: resyncing everything");
                        world.log(EventVerb::Lease, lease, EventResult::Ok, format!("{identity} acquired the lease; resync"));
                        for k in world.all_keys() {
                            world.queue.enqueue(k);
                        }
                    } else {
                        tracing::warn!("lost Lease {lease_name}: not writing any more");
                        world.log(EventVerb::Lease, lease, EventResult::Ok, format!("{identity} lost the lease; writes stop"));
                    }
                }
                Err(e) => {
                    // Unsure whether we still hold it: stop writing at once. The manager still
                    // believes it leads and would silently renew without ever reporting a
                    // change, so give the lease up cleanly (once the server answers) and
                    // compete again from scratch.
                    if world.leading.swap(false, Ordering::SeqCst) {
                        world.log(
                            EventVerb::Lease,
                            lease_ref(&namespace, &name),
                            EventResult::Failed(e.to_string()),
                            format!("{identity} cannot renew the lease; writes stop"),
                        );
                    }
                    world.metrics.leader.store(false, Ordering::Relaxed);
                    world.dirty.store(true, Ordering::Relaxed);
                    tracing::warn!("{}", lease_err(&e));
                    loop {
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                            _ = shutdown.changed() => break,
                        }
                        match manager.release().await {
                            Ok(()) => break,
                            Err(e) => tracing::debug!("releasing Lease {lease_name} after an error: {e}"),
                        }
                    }
                    if *shutdown.borrow() {
                        break Ok(());
                    }
                }
            },
            released = holder_rx.changed() => {
                // The manager caches the Lease until the old holder's expiry. `release()` is a
                // no-op for a follower apart from re-reading the Lease (documented as safe for
                // non-holders); the restarted `changed()` then sees it free and takes it.
                if released.is_ok() && holder_rx.borrow().is_none() && !world.leading.load(Ordering::SeqCst) {
                    tracing::debug!("Lease {lease_name} was released; trying to acquire it");
                    if let Err(e) = manager.release().await {
                        tracing::debug!("re-reading Lease {lease_name}: {e}");
                    }
                }
            }
            _ = shutdown.changed() => break Ok(()),
        }
    };
    world.leading.store(false, Ordering::SeqCst);
    world.metrics.leader.store(false, Ordering::Relaxed);
    poll.abort();
    if let Err(e) = manager.release().await {
        tracing::warn!("releasing Lease {lease_name}: {e}");
    } else {
        tracing::info!("released Lease {lease_name}");
    }
    result
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
                holder_tx.send_if_modified(|cur| {
                    let changed = *cur != h;
                    *cur = h.clone();
                    changed
                });
            }
            Err(e) => {
                let kind = match crate::kube::status_code(&e) {
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
