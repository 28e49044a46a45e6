//! Keeps the stores' view of what the API server serves (`model::served`) current: the
//! narrowed bindings' rules are computed from it. Discovered at start, again when a
//! CustomResourceDefinition comes, goes or changes (a constraint may name its kind), and every
//! [`EVERY`] (aggregated APIs come and go without a CRD). A change re-enqueues everything: the
//! template side widens or narrows its VAP, the constraint side its binding.

use super::resync::Resync;
use crate::cluster::discovery::discover_served;
use crate::controller::store::stores::Stores;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// CRD events come in bursts (a chart installs dozens): one discovery after the burst.
const SETTLE: Duration = Duration::from_millis(500);
const EVERY: Duration = Duration::from_secs(60);
/// After a failed discovery.
const RETRY: Duration = Duration::from_secs(5);

/// May touch: the client (discovery), the stores (what is served) and a [`Resync`] when that
/// changes.
pub struct DiscoveryContext {
    pub client: kube::Client,
    pub stores: Arc<Stores>,
    pub resync: Resync,
}

/// One discovery; whether what is served changed. A failure is logged and changes nothing:
/// what was known stays known (a binding narrowed on it still matches what it did).
pub async fn refresh(ctx: &DiscoveryContext) -> Result<bool, ()> {
    let served = discover_served(&ctx.client).await.map_err(|e| {
        let error = crate::text::error_text(&e);
        tracing::warn!("discovering what the API server serves: {error}");
    })?;
    let failed = served.failed_groups.clone();
    let changed = ctx.stores.set_served(served);
    if changed && !failed.is_empty() {
        tracing::warn!(
            "API groups not discoverable, constraints naming their kinds match the whole group: {}",
            failed.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    Ok(changed)
}

/// Keeps discovery current after the first one (`first_ok`: it succeeded; else retried soon).
pub async fn run(ctx: DiscoveryContext, mut crds: watch::Receiver<u64>, first_ok: bool) {
    let mut wait = if first_ok { EVERY } else { RETRY };
    loop {
        tokio::select! {
            changed = crds.changed() => {
                if changed.is_err() {
                    return;
                }
                tokio::time::sleep(SETTLE).await;
                crds.mark_unchanged();
            }
            _ = tokio::time::sleep(wait) => {}
        }
        wait = match refresh(&ctx).await {
            Ok(true) => {
                tracing::info!("what the API server serves changed: reconciling everything");
                ctx.resync.resync();
                EVERY
            }
            Ok(false) => EVERY,
            Err(()) => RETRY,
        };
    }
}
