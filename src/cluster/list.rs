//! One consistent-enough read of everything the analysis needs, for `check`/`plan` on a
//! live cluster: templates, constraint CRDs, constraints of every kind, VAPs, bindings and
//! Gatekeeper's pod statuses. Resources that cannot be read are reported, never shown as empty.

use super::access::AccessError;
use super::assemble::Assembly;
use super::decode::{Listed, Objects};
use super::discovery::{
    AdmissionApi, constraint_resource, pod_status_resources, resource_name, templates_resource,
};
use super::{KubeError, status_code};
use crate::model::CONSTRAINTS_GROUP;
use crate::snapshot::Snapshot;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Resource;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;

/// What a failed read of one resource means for the user.
pub fn access_error(resource: &str, e: &kube::Error) -> AccessError {
    AccessError::from_status(resource, status_code(e), "reading", &super::describe(e))
}

/// Every object of `ar`, each decoded on its own: one that cannot be is a stub that names it
/// and says why (a finding of its own), never a failed list.
async fn list_dynamic(
    client: &kube::Client,
    ar: &ApiResource,
) -> Result<Vec<DynamicObject>, kube::Error> {
    let objects = Objects::new(client.clone(), DynamicObject::url_path(ar, None));
    let lp = ListParams::default();
    Ok(said(retried(|| objects.list(&lp)).await?))
}

/// Attempts after the first for a read the server throttled or could not serve now.
const READ_RETRIES: u32 = 3;

/// `read`, sent again when the server answers 429, 503 or 504, after what it asked
/// ([`retry_wait`]), at most [`READ_RETRIES`] more times, as client-go retries a throttled
/// request. The client retries nothing by itself (writes must pass the reconciler's fence
/// before each attempt); a one-shot listing has no fence, and a throttled read must not end
/// `check` with exit 2.
pub async fn retried<T, F, Fut>(mut read: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 0;
    loop {
        match read().await {
            Err(e) => match retry_wait(&e, attempt) {
                Some(wait) => {
                    attempt += 1;
                    tracing::debug!(
                        "{}; reading again in {}s ({attempt} of {READ_RETRIES})",
                        super::describe(&e),
                        wait.as_secs()
                    );
                    tokio::time::sleep(wait).await;
                }
                None => return Err(e),
            },
            ok => return ok,
        }
    }
}

/// How long to wait before reading again after `e` on retry `attempt` (0: the first), or
/// `None`: not again. What the server asked (`retryAfterSeconds`), 1 s at least, 10 s at most.
fn retry_wait(e: &kube::Error, attempt: u32) -> Option<std::time::Duration> {
    match e {
        kube::Error::Api(s) if matches!(s.code, 429 | 503 | 504) && attempt < READ_RETRIES => {
            let asked = s.details.as_ref().map_or(0, |d| d.retry_after_seconds);
            Some(std::time::Duration::from_secs(u64::from(
                asked.clamp(1, 10),
            )))
        }
        _ => None,
    }
}

/// The items of `listed`; what could not be decoded said once each.
fn said<K>(listed: Listed<K>) -> Vec<K> {
    for u in &listed.undecodable {
        tracing::warn!(
            "{} cannot be decoded: {}",
            crate::text::printable(&u.object),
            crate::text::printable(&u.reason)
        );
    }
    listed.items
}

/// The constraint kinds the CRDs define: `(kind, plural)`.
pub fn constraint_kinds(crds: &[CustomResourceDefinition]) -> Vec<(String, String)> {
    crds.iter()
        .filter(|c| c.spec.group == CONSTRAINTS_GROUP)
        .map(|c| (c.spec.names.kind.clone(), c.spec.names.plural.clone()))
        .collect()
}

/// Gatekeeper's Configs named `config`, in every namespace (which one counts is the analysis's
/// call: `Options::with_gatekeeper_config`), each parsed. No Gatekeeper (the kind not served)
/// is none.
pub async fn gatekeeper_configs(
    client: &kube::Client,
) -> Result<Vec<Result<crate::model::GatekeeperConfig, InvalidConfig>>, kube::Error> {
    let ar = super::discovery::gatekeeper_config_resource();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let lp = ListParams::default().fields(&format!(
        "metadata.name={}",
        crate::model::gatekeeper_config::CONFIG_NAME
    ));
    match api.list(&lp).await {
        Ok(l) => Ok(l.items.iter().map(|o| parse_config(o, &ar)).collect()),
        Err(e) if status_code(&e) == Some(404) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// A Config Gatekeeper's CRD would not have admitted: its exclusions are not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Gatekeeper Config {object}: {why}; its exclusions are not applied")]
pub struct InvalidConfig {
    /// `namespace/name`.
    pub object: String,
    pub why: String,
}

/// One Config, or why Gatekeeper's CRD would not have admitted it.
pub fn parse_config(
    o: &DynamicObject,
    ar: &ApiResource,
) -> Result<crate::model::GatekeeperConfig, InvalidConfig> {
    let raw = super::assemble::dyn_to_value(o, ar);
    crate::model::GatekeeperConfig::from_value(&raw).map_err(|why| InvalidConfig {
        object: format!(
            "{}/{}",
            o.metadata.namespace.as_deref().unwrap_or_default(),
            o.metadata.name.as_deref().unwrap_or_default()
        ),
        why,
    })
}

/// Gatekeeper's validating webhooks: of the configuration `name`, or of every configuration
/// (`None`; which one counts is the analysis's call: `Options::with_gatekeeper_webhook`).
pub async fn gatekeeper_webhooks(
    client: &kube::Client,
    name: Option<&str>,
) -> Result<Vec<crate::model::GatekeeperWebhook>, kube::Error> {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let lp = match name {
        Some(n) => ListParams::default().fields(&format!("metadata.name={n}")),
        None => ListParams::default(),
    };
    Ok(api
        .list(&lp)
        .await?
        .items
        .iter()
        .filter_map(parse_webhook)
        .collect())
}

/// Gatekeeper's webhook of one configuration, or `None` when it has none (warned when it
/// cannot be read).
pub fn parse_webhook(
    o: &k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration,
) -> Option<crate::model::GatekeeperWebhook> {
    let raw = serde_json::to_value(o).ok()?;
    match crate::model::GatekeeperWebhook::from_value(&raw) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(
                "ValidatingWebhookConfiguration {}: {e}",
                o.metadata.name.as_deref().unwrap_or_default()
            );
            None
        }
    }
}

/// Lists a snapshot. `Err` only when nothing useful can be read (no VAP API, connection);
/// resources that fail individually come back as access errors next to the partial snapshot.
pub async fn list_snapshot(
    client: &kube::Client,
    api: &AdmissionApi,
) -> Result<(Snapshot, Vec<AccessError>), KubeError> {
    let mut snap = Assembly::new();
    let mut errors = Vec::new();

    // CRDs first: they say which constraint kinds exist.
    let crd_api: Objects<CustomResourceDefinition> = Objects::new(
        client.clone(),
        CustomResourceDefinition::url_path(&(), None),
    );
    let lp = ListParams::default();
    let crds = match retried(|| crd_api.list(&lp)).await {
        Ok(l) => said(l),
        Err(e) => {
            if matches!(e, kube::Error::Api(_)) {
                errors.push(access_error(
                    "customresourcedefinitions.apiextensions.k8s.io",
                    &e,
                ));
                Vec::new()
            } else {
                return Err(KubeError::request("listing CustomResourceDefinitions", e));
            }
        }
    };
    crds.iter().for_each(|c| snap.crd(c));

    let mut resources = vec![templates_resource(), api.policy(), api.binding()];
    for (kind, plural) in constraint_kinds(&crds) {
        resources.push(constraint_resource(&kind, &plural));
    }
    for ar in &resources {
        match list_dynamic(client, ar).await {
            Ok(items) => items.iter().for_each(|o| snap.object(o, ar)),
            // Answered: that resource cannot be read; the others can.
            Err(e) if !super::unanswered(&e) => errors.push(access_error(&resource_name(ar), &e)),
            Err(e) => {
                return Err(KubeError::request(
                    format!("listing {}", resource_name(ar)),
                    e,
                ));
            }
        }
    }
    // Pod statuses are optional (Gatekeeper may not run here): ignore their errors.
    for ar in pod_status_resources() {
        if let Ok(items) = list_dynamic(client, &ar).await {
            items.iter().for_each(|o| snap.object(o, &ar));
        }
    }
    let configs = match gatekeeper_configs(client).await {
        // One reading: each invalid Config said once.
        Ok(read) => read
            .into_iter()
            .filter_map(|c| c.inspect_err(|e| tracing::warn!("{e}")).ok())
            .collect(),
        Err(e @ kube::Error::Api(_)) => {
            errors.push(access_error("configs.config.gatekeeper.sh", &e));
            Vec::new()
        }
        Err(e) => return Err(KubeError::request("listing Gatekeeper's Configs", e)),
    };
    let mut snap = snap.finish(&errors, []);
    snap.gatekeeper_configs = configs;
    // Gatekeeper's webhook matters to its own shape only; a view that may not read webhook
    // configurations judges that shape as if there were none.
    snap.gatekeeper_webhooks = match gatekeeper_webhooks(client, None).await {
        Ok(w) => w,
        Err(e) => {
            tracing::debug!(
                "listing ValidatingWebhookConfigurations: {}",
                crate::text::kube_error_text(&e)
            );
            Vec::new()
        }
    };
    // What is served narrows the bindings; without discovery, what any server serves.
    snap.served = match super::discovery::discover_served(client).await {
        Ok(served) => served,
        Err(e) => {
            tracing::warn!(
                "discovery failed, judging kinds by the built-in resources: {}",
                crate::text::error_text(&e)
            );
            let mut served = crate::model::served::Served::builtin();
            crds.iter().for_each(|c| {
                if let Ok(v) = serde_json::to_value(c) {
                    served.add_crd(&v);
                }
            });
            served
        }
    };
    Ok((snap, errors))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, retry_after: u32) -> kube::Error {
        kube::Error::Api(Box::new(
            serde_json::from_value(serde_json::json!({
                "code": code, "message": "m", "details": { "retryAfterSeconds": retry_after }
            }))
            .expect("a Status"),
        ))
    }

    /// A throttled read is read again after what the server asked (1 s at least, 10 s at
    /// most), a few times; anything else is the caller's at once.
    #[test]
    fn a_throttled_read_is_retried_after_what_the_server_asked() {
        let s = std::time::Duration::from_secs;
        assert_eq!(retry_wait(&status(429, 7), 0), Some(s(7)));
        assert_eq!(retry_wait(&status(503, 0), 1), Some(s(1)));
        assert_eq!(retry_wait(&status(504, 600), 2), Some(s(10)));
        assert_eq!(retry_wait(&status(429, 1), READ_RETRIES), None);
        assert_eq!(retry_wait(&status(403, 0), 0), None);
        assert_eq!(retry_wait(&status(500, 0), 0), None);
        let unanswered = kube::Error::Service("connection refused".into());
        assert_eq!(retry_wait(&unanswered, 0), None);
    }
}
