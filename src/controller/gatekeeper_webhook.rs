//! Keeps the stores' copy of Gatekeeper's validating webhook current
//! (`model::gatekeeper_webhook`), for `--policy-shape gatekeeper`: Gatekeeper v3.22+ copies what
//! that webhook matches into its VAPs, and so do we. Read once before the first reconcile, then
//! watched by name; a change reconciles every template. Only the Gatekeeper shape reads it (the
//! other shapes have no use for it, and need no right to read webhook configurations).

use super::shared::Shared;
use crate::cluster::list::{gatekeeper_webhooks, parse_webhook};
use crate::model::GatekeeperWebhook;
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use std::sync::Arc;

/// The first read. A failure is logged and leaves none: the VAPs then match what Gatekeeper's
/// do without its webhook (every create and update), until the watch reads it.
pub async fn first_read(shared: &Shared, name: &str) {
    match gatekeeper_webhooks(&shared.client, Some(name)).await {
        Ok(webhooks) => {
            shared.stores.set_gatekeeper_webhooks(webhooks);
        }
        Err(e) => tracing::warn!(
            "reading Gatekeeper's ValidatingWebhookConfiguration {name} (the VAPs match every create and update until it can be read): {}",
            crate::text::kube_error_text(&e)
        ),
    }
}

/// Watches the configuration `name`; each change of what its webhook matches re-enqueues
/// everything.
pub async fn run(shared: Arc<Shared>, name: String) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(shared.client.clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut seen: Option<GatekeeperWebhook> = None;
    let mut relisting: Option<Option<GatekeeperWebhook>> = None;
    let mut stream = crate::cluster::watch::changes(api, config, "Gatekeeper's webhook");
    while let Some(event) = stream.next().await {
        let publish = match event {
            Ok(Event::Init) => {
                relisting = Some(None);
                false
            }
            Ok(Event::InitApply(o)) => {
                if let Some(r) = relisting.as_mut() {
                    *r = parse_webhook(&o);
                }
                false
            }
            Ok(Event::InitDone) => {
                seen = relisting.take().flatten();
                true
            }
            Ok(Event::Apply(o)) => {
                seen = parse_webhook(&o);
                true
            }
            Ok(Event::Delete(_)) => {
                seen = None;
                true
            }
            // Forbidden or failed: logged and retried by the watch; what was read stays.
            Err(_) => false,
        };
        if publish
            && shared
                .stores
                .set_gatekeeper_webhooks(seen.iter().cloned().collect())
        {
            tracing::info!("Gatekeeper's validating webhook changed: reconciling every template");
            shared.resync();
        }
    }
}
