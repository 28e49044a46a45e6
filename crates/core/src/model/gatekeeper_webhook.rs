//! Gatekeeper's ValidatingWebhookConfiguration, read for what Gatekeeper v3.22+ copies into its
//! VAPs under its default `--sync-vap-enforcement-scope=true`: the rules, selectors, match
//! policy and match conditions of the webhook `validation.gatekeeper.sh` in the configuration
//! named by `--validating-webhook-configuration-name` (Gatekeeper's
//! `pkg/controller/webhookconfig`, `pkg/drivers/k8scel/transform/make_vap_objects.go`).

use k8s_openapi::api::admissionregistration::v1 as ar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Gatekeeper's default `--validating-webhook-configuration-name`.
pub const DEFAULT_CONFIGURATION_NAME: &str = "gatekeeper-validating-webhook-configuration";
/// The webhook of that configuration whose matching Gatekeeper copies.
pub const WEBHOOK_NAME: &str = "validation.gatekeeper.sh";
pub const VWC_KIND: &str = "ValidatingWebhookConfiguration";

/// What Gatekeeper copies from its validating webhook.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GatekeeperWebhook {
    /// The configuration's name.
    pub configuration: String,
    pub rules: Vec<ar::RuleWithOperations>,
    pub namespace_selector: Option<LabelSelector>,
    pub object_selector: Option<LabelSelector>,
    pub match_policy: Option<String>,
    pub match_conditions: Vec<ar::MatchCondition>,
}

impl GatekeeperWebhook {
    /// From a raw ValidatingWebhookConfiguration: `Ok(None)` when it has no webhook
    /// `validation.gatekeeper.sh` (Gatekeeper then uses its defaults); `Err` says what cannot
    /// be read.
    pub fn from_value(raw: &serde_json::Value) -> Result<Option<Self>, String> {
        let vwc: ar::ValidatingWebhookConfiguration = serde_json::from_value(raw.clone())
            .map_err(|e| format!("not a ValidatingWebhookConfiguration: {e}"))?;
        let configuration = vwc.metadata.name.unwrap_or_default();
        Ok(vwc
            .webhooks
            .into_iter()
            .flatten()
            .find(|w| w.name == WEBHOOK_NAME)
            .map(|w| GatekeeperWebhook {
                configuration,
                rules: w.rules.unwrap_or_default(),
                namespace_selector: w.namespace_selector,
                object_selector: w.object_selector,
                match_policy: w.match_policy,
                match_conditions: w.match_conditions.unwrap_or_default(),
            }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_validation_webhook_is_read_and_others_are_not() {
        let vwc = json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": VWC_KIND,
            "metadata": { "name": DEFAULT_CONFIGURATION_NAME },
            "webhooks": [
                { "name": "check-ignore-label.gatekeeper.sh", "sideEffects": "None",
                  "admissionReviewVersions": ["v1"], "clientConfig": {} },
                { "name": WEBHOOK_NAME, "sideEffects": "None", "admissionReviewVersions": ["v1"],
                  "clientConfig": {}, "matchPolicy": "Exact",
                  "namespaceSelector": { "matchExpressions": [
                      { "key": "admission.gatekeeper.sh/ignore", "operator": "DoesNotExist" }] },
                  "rules": [{ "apiGroups": ["*"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                              "resources": ["*", "pods/ephemeralcontainers"], "scope": "*" }] }
            ]
        });
        let w = GatekeeperWebhook::from_value(&vwc)
            .expect("readable")
            .expect("has the webhook");
        assert_eq!(w.configuration, DEFAULT_CONFIGURATION_NAME);
        assert_eq!(w.match_policy.as_deref(), Some("Exact"));
        assert_eq!(w.rules.len(), 1);
        assert!(w.namespace_selector.is_some() && w.object_selector.is_none());
        let none = json!({ "apiVersion": "admissionregistration.k8s.io/v1", "kind": VWC_KIND,
                           "metadata": { "name": "x" }, "webhooks": [] });
        assert_eq!(GatekeeperWebhook::from_value(&none), Ok(None));
        assert!(GatekeeperWebhook::from_value(&json!({"webhooks": 3})).is_err());
    }
}
