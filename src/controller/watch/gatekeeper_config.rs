//! Keeps the stores' copies of Gatekeeper's `Config` (the namespaces it excludes are left out
//! of every narrowed VAP, as Gatekeeper does) and, for `--policy-shape gatekeeper` only, of its
//! validating webhook (Gatekeeper v3.22+ copies what it matches into its VAPs, and so do we;
//! the other shapes need no right to read webhook configurations). Each is read before the
//! first reconcile (a start does not write VAPs without them, then again with them), then
//! watched: a change reconciles every template. Without Gatekeeper the watch keeps trying, so
//! a Config that comes later counts.

use super::resync::Resync;
use crate::cluster::access::AccessError;
use crate::cluster::discovery::{gatekeeper_config_resource, resource_name};
use crate::cluster::list::{InvalidConfig, access_error, gatekeeper_configs, gatekeeper_webhooks};
use crate::cluster::list::{parse_config, parse_webhook};
use crate::controller::store::stores::Stores;
use crate::controller::view::status::Status;
use crate::model::GatekeeperConfig;
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::{self, Event};
use std::collections::BTreeMap;
use std::sync::Arc;

/// May touch what reading and watching Gatekeeper's Config and webhook use: the client, the
/// stores (what was read), the status (a Config that cannot be read) and a [`Resync`] when
/// what was read changes.
pub struct GatekeeperConfigContext {
    pub client: kube::Client,
    pub stores: Arc<Stores>,
    pub status: Arc<Status>,
    pub resync: Resync,
}

/// The Configs found invalid (object → why), so each is said once per change: when it turns
/// invalid or its reason changes, and when it is valid again. The watch re-reads every Config
/// on any event and on every relist; a Config read again as it was says nothing.
#[derive(Debug, Default)]
pub struct Invalid(BTreeMap<String, String>);

impl Invalid {
    /// The valid Configs of `read`; what changed since the last reading goes to `say`
    /// (`true`: a warning).
    fn sort(
        &mut self,
        read: Vec<Result<GatekeeperConfig, InvalidConfig>>,
        mut say: impl FnMut(bool, String),
    ) -> Vec<GatekeeperConfig> {
        let was = std::mem::take(&mut self.0);
        let mut valid = Vec::new();
        for c in read {
            let c = match c {
                Ok(c) => c,
                Err(e) => {
                    if was.get(&e.object) != Some(&e.why) {
                        say(true, e.to_string());
                    }
                    self.0.insert(e.object, e.why);
                    continue;
                }
            };
            let object = format!("{}/{}", c.namespace.as_deref().unwrap_or_default(), c.name);
            if was.contains_key(&object) {
                let line =
                    format!("Gatekeeper Config {object} is valid again: its exclusions apply");
                say(false, line);
            }
            valid.push(c);
        }
        valid
    }
}

/// A line [`Invalid::sort`] says, logged.
fn log(warn: bool, line: String) {
    if warn {
        tracing::warn!("{line}");
    } else {
        tracing::info!("{line}");
    }
}

/// The first read of the Configs; whether it failed, and those found invalid. A failure is
/// logged and leaves none: the VAPs then apply in the namespaces the Config would exclude
/// (stricter, never looser), until the watch reads it.
pub async fn first_read(ctx: &GatekeeperConfigContext) -> (bool, Invalid) {
    let mut invalid = Invalid::default();
    match gatekeeper_configs(&ctx.client).await {
        Ok(read) => {
            let configs = invalid.sort(read, log);
            ctx.stores.set_gatekeeper_configs(configs);
            (false, invalid)
        }
        Err(e) => {
            let resource = resource_name(&gatekeeper_config_resource());
            cannot_read(ctx, access_error(&resource, &e));
            (true, invalid)
        }
    }
}

/// A Config that cannot be read: said once, in the words `check` uses, and one of the copy's
/// access errors until it is read.
fn cannot_read(ctx: &GatekeeperConfigContext, error: AccessError) {
    tracing::warn!(
        "{}; Gatekeeper's excluded namespaces stay subject to the VAPs until it is read",
        error.message
    );
    let resource = error.resource.clone();
    ctx.status.set_access(&resource, Some(error));
}

/// How long the Config may answer 429, 503 or 504 before that is said (a restarting API
/// server answers 503 for its first second or so).
const TRANSIENT_QUIET: std::time::Duration = std::time::Duration::from_secs(30);

/// Failures a starting server (503: its paths not yet installed) or a busy one (429, 504)
/// answers for a moment: kept quiet until they have lasted [`TRANSIENT_QUIET`].
#[derive(Default)]
struct Transient(Option<tokio::time::Instant>);

impl Transient {
    /// Whether a failure with this status is one to keep quiet about for now.
    fn quiet(&mut self, status: Option<u16>) -> bool {
        if !status.is_some_and(|s| matches!(s, 429 | 503 | 504)) {
            return false;
        }
        let since = *self.0.get_or_insert_with(tokio::time::Instant::now);
        since.elapsed() < TRANSIENT_QUIET
    }

    /// The server answered: the next failure starts a new count.
    fn answered(&mut self) {
        self.0 = None;
    }
}

/// Watches the Configs in every namespace. A read that fails with an answer (forbidden) is said
/// once (`failing`: the first read said it), and its recovery once; not served is no failure.
pub async fn run(ctx: GatekeeperConfigContext, (mut failing, mut invalid): (bool, Invalid)) {
    let ar = gatekeeper_config_resource();
    let resource = resource_name(&ar);
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &ar);
    let config = watcher::Config::default().fields(&format!(
        "metadata.name={}",
        crate::model::gatekeeper_config::CONFIG_NAME
    ));
    // The reflector keeps what was read through a relist, and swaps at its end.
    let writer = Writer::new(ar.clone());
    let store = writer.as_reader();
    let changes = crate::cluster::watch::changes(api, config, "Gatekeeper's Config");
    let mut stream = reflector::reflector(writer, changes).boxed();
    let mut transient = Transient::default();
    while let Some(event) = stream.next().await {
        if event.is_ok() {
            transient.answered();
        }
        match event {
            Ok(Event::Init | Event::InitApply(_)) => continue,
            Ok(Event::InitDone) if std::mem::take(&mut failing) => {
                tracing::info!("Gatekeeper's Config read again");
                ctx.status.set_access(&resource, None);
            }
            Ok(_) => {}
            // Retried by the watch; what was read stays.
            Err(e) => {
                let status = crate::cluster::watch::status(&e);
                if transient.quiet(status) {
                    tracing::debug!(
                        "reading Gatekeeper's Config: {}; retrying",
                        crate::cluster::watch::describe(&e)
                    );
                    continue;
                }
                if !failing && status.is_some_and(|s| s != 404) {
                    failing = true;
                    let why = crate::cluster::watch::describe(&e);
                    cannot_read(
                        &ctx,
                        AccessError::from_status(&resource, status, "reading", &why),
                    );
                }
                continue;
            }
        }
        let mut objects = store.state();
        // One per namespace (the name is fixed): in a stable order, so equal lists compare equal.
        objects.sort_by(|a, b| a.metadata.namespace.cmp(&b.metadata.namespace));
        let read = objects.iter().map(|o| parse_config(o, &ar)).collect();
        let configs = invalid.sort(read, log);
        if ctx.stores.set_gatekeeper_configs(configs) {
            tracing::info!("Gatekeeper's Config changed: reconciling every template");
            ctx.resync.resync();
        }
    }
}

/// The first read of the webhook configuration `name`. A failure is logged and leaves none:
/// the VAPs then match what Gatekeeper's do without its webhook (every create and update),
/// until the watch reads it.
pub async fn first_read_webhook(ctx: &GatekeeperConfigContext, name: &str) {
    match gatekeeper_webhooks(&ctx.client, Some(name)).await {
        Ok(webhooks) => {
            ctx.stores.set_gatekeeper_webhooks(webhooks);
        }
        Err(e) => tracing::warn!(
            "reading Gatekeeper's ValidatingWebhookConfiguration {name} (the VAPs match every create and update until it can be read): {}",
            crate::text::kube_error_text(&e)
        ),
    }
}

/// Watches the webhook configuration `name`; each change of what its webhook matches
/// re-enqueues everything.
pub async fn run_webhook(ctx: GatekeeperConfigContext, name: String) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(ctx.client.clone());
    let mut stream = crate::cluster::watch::object(api, &name, "Gatekeeper's webhook");
    while let Some(read) = stream.next().await {
        // Forbidden or failed: logged and retried by the watch; what was read stays.
        let Ok(o) = read else { continue };
        let webhooks = o.as_ref().and_then(parse_webhook).into_iter().collect();
        if ctx.stores.set_gatekeeper_webhooks(webhooks) {
            tracing::info!("Gatekeeper's validating webhook changed: reconciling every template");
            ctx.resync.resync();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A starting or busy server's answers are quiet for a while, then said; an answer starts
    /// the count again; any other failure is said at once.
    #[tokio::test(start_paused = true)]
    async fn transient_answers_are_said_only_if_they_last() {
        let mut t = Transient::default();
        assert!(!t.quiet(Some(403)) && !t.quiet(None));
        assert!(t.quiet(Some(503)));
        tokio::time::advance(TRANSIENT_QUIET / 2).await;
        assert!(t.quiet(Some(429)));
        tokio::time::advance(TRANSIENT_QUIET).await;
        assert!(!t.quiet(Some(503)), "lasted: said");
        t.answered();
        assert!(t.quiet(Some(504)), "a new count");
    }

    fn valid(ns: &str) -> Result<GatekeeperConfig, InvalidConfig> {
        Ok(GatekeeperConfig {
            namespace: Some(ns.into()),
            name: "config".into(),
            ..GatekeeperConfig::default()
        })
    }

    fn invalid(ns: &str, why: &str) -> Result<GatekeeperConfig, InvalidConfig> {
        Err(InvalidConfig {
            object: format!("{ns}/config"),
            why: why.into(),
        })
    }

    /// The watch re-reads every Config on any event: an invalid one is warned when it turns
    /// invalid or its reason changes, and told once when valid again; never again in between.
    #[test]
    fn an_invalid_config_is_said_once_per_change() {
        let mut seen = Invalid::default();
        let mut sort = |read| {
            let mut said = Vec::new();
            let valid = seen.sort(read, |warn, line| said.push((warn, line)));
            (valid, said)
        };
        let (configs, said) = sort(vec![valid("a"), invalid("gk", "spec.match: bad")]);
        assert_eq!(configs.len(), 1);
        assert_eq!(said.len(), 1);
        assert!(
            said[0].0 && said[0].1.contains("gk/config: spec.match: bad"),
            "{said:?}"
        );
        // Read again as it was (another Config changed, a relist): nothing said.
        let (_, said) = sort(vec![valid("b"), invalid("gk", "spec.match: bad")]);
        assert!(said.is_empty(), "{said:?}");
        let (_, said) = sort(vec![invalid("gk", "spec.match: worse")]);
        assert!(
            said.len() == 1 && said[0].0 && said[0].1.contains("worse"),
            "{said:?}"
        );
        let (configs, said) = sort(vec![valid("gk")]);
        assert_eq!(configs.len(), 1);
        assert!(said.len() == 1 && !said[0].0 && said[0].1.contains("gk/config is valid again"));
        let (_, said) = sort(vec![valid("gk")]);
        assert!(said.is_empty(), "{said:?}");
    }
}
