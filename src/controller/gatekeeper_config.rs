//! Keeps the stores' copy of Gatekeeper's `Config` current (`model::gatekeeper_config`): the
//! namespaces it excludes from Gatekeeper's webhook are left out of every narrowed VAP, as
//! Gatekeeper leaves them out of its own. Read once before the first reconcile (so a start does
//! not write VAPs without them and again with them), then watched; a change reconciles every
//! template. Without Gatekeeper (its Config kind not served) there is none, and the watch keeps
//! trying, so a Config that comes later counts.

use super::shared::Shared;
use crate::cluster::access::AccessError;
use crate::cluster::discovery::{gatekeeper_config_resource, resource_name};
use crate::cluster::list::{gatekeeper_configs, parse_config};
use crate::model::GatekeeperConfig;
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The first read; whether it failed. A failure is logged and leaves none: the VAPs then apply
/// in the namespaces the Config would exclude (stricter, never looser), until the watch reads
/// it.
pub async fn first_read(shared: &Shared) -> bool {
    match gatekeeper_configs(&shared.client).await {
        Ok(configs) => {
            shared.stores.set_gatekeeper_configs(configs);
            false
        }
        Err(e) => {
            let why = crate::text::kube_error_text(&e);
            cannot_read(shared, crate::cluster::status_code(&e), &why);
            true
        }
    }
}

/// A Config that cannot be read (`status`: the server's answer, `why`: its words): said once,
/// in the words `check` uses, and one of the copy's access errors until it is read.
fn cannot_read(shared: &Shared, status: Option<u16>, why: &str) {
    let resource = resource_name(&gatekeeper_config_resource());
    let error = AccessError::from_status(&resource, status, "reading", &why);
    tracing::warn!(
        "{}; Gatekeeper's excluded namespaces stay subject to the VAPs until it is read",
        error.message
    );
    shared.status.set_access(&resource, Some(error));
}

/// Watches the Configs named `config` in every namespace; each change of what they exclude
/// re-enqueues everything. A read that fails with an answer (forbidden) is said once
/// (`failing`: the first read said it), and its recovery once; no Gatekeeper (not served) is
/// not a failure.
pub async fn run(shared: Arc<Shared>, mut failing: bool) {
    let ar = gatekeeper_config_resource();
    let api: Api<DynamicObject> = Api::all_with(shared.client.clone(), &ar);
    let config = watcher::Config::default().fields(&format!(
        "metadata.name={}",
        crate::model::gatekeeper_config::CONFIG_NAME
    ));
    let mut seen: BTreeMap<String, GatekeeperConfig> = BTreeMap::new();
    let mut relisting: Option<BTreeMap<String, GatekeeperConfig>> = None;
    let mut stream = crate::cluster::watch::changes(api, config, "Gatekeeper's Config");
    while let Some(event) = stream.next().await {
        let publish = match event {
            Ok(Event::Init) => {
                relisting = Some(BTreeMap::new());
                false
            }
            Ok(Event::InitApply(o)) => {
                if let (Some(r), Some(c)) = (relisting.as_mut(), parse_config(&o, &ar)) {
                    r.insert(key(&o), c);
                }
                false
            }
            Ok(Event::InitDone) => {
                seen = relisting.take().unwrap_or_default();
                if std::mem::take(&mut failing) {
                    tracing::info!("Gatekeeper's Config read again");
                    shared.status.set_access(&resource_name(&ar), None);
                }
                true
            }
            Ok(Event::Apply(o)) => {
                match parse_config(&o, &ar) {
                    Some(c) => seen.insert(key(&o), c),
                    None => seen.remove(&key(&o)),
                };
                true
            }
            Ok(Event::Delete(o)) => {
                seen.remove(&key(&o));
                true
            }
            // Retried by the watch; what was read stays.
            Err(e) => {
                let status = crate::cluster::watch::status(&e);
                if !failing && status.is_some_and(|s| s != 404) {
                    failing = true;
                    cannot_read(&shared, status, &crate::cluster::watch::describe(&e));
                }
                false
            }
        };
        if publish
            && shared
                .stores
                .set_gatekeeper_configs(seen.values().cloned().collect())
        {
            tracing::info!("Gatekeeper's Config changed: reconciling every template");
            shared.resync();
        }
    }
}

fn key(o: &DynamicObject) -> String {
    o.metadata.namespace.clone().unwrap_or_default()
}
