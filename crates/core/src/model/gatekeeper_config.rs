//! Gatekeeper's `Config` (`config.gatekeeper.sh`), read for one thing: the namespaces it
//! excludes from the webhook. Gatekeeper reconciles only the Config named `config` in its own
//! namespace; its `spec.match[]` entries exclude namespaces (exact names or globs with `*`) from
//! the processes they list, and an entry for `webhook` or `*` is what Gatekeeper's own VAPs
//! leave out (`gatekeeper_internal_match_global_excluded_namespaces`).

use serde::Deserialize;
use std::collections::BTreeSet;

pub const CONFIG_GROUP: &str = "config.gatekeeper.sh";
pub const CONFIG_KIND: &str = "Config";
/// The only name Gatekeeper reconciles.
pub const CONFIG_NAME: &str = "config";

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GatekeeperConfig {
    /// `None` when read from a file that names none.
    pub namespace: Option<String>,
    pub name: String,
    /// Namespace names and globs excluded from the webhook, sorted.
    pub webhook_excluded: BTreeSet<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MatchEntry {
    #[serde(default)]
    excluded_namespaces: Vec<String>,
    #[serde(default)]
    processes: Vec<String>,
}

impl GatekeeperConfig {
    /// From the raw object. `Err` says which field is not what Gatekeeper's CRD allows.
    pub fn from_value(raw: &serde_json::Value) -> Result<Self, String> {
        let meta = &raw["metadata"];
        let entries: Vec<MatchEntry> = match raw.pointer("/spec/match") {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(m) => serde_json::from_value(m.clone())
                .map_err(|e| format!("spec.match: {e} (Gatekeeper's Config CRD: a list of {{excludedNamespaces: [string], processes: [string]}})"))?,
        };
        let webhook_excluded = entries
            .into_iter()
            .filter(|e| e.processes.iter().any(|p| p == "*" || p == "webhook"))
            .flat_map(|e| e.excluded_namespaces)
            .filter(|n| !n.is_empty())
            .collect();
        Ok(GatekeeperConfig {
            namespace: meta["namespace"].as_str().map(str::to_string),
            name: meta["name"].as_str().unwrap_or_default().to_string(),
            webhook_excluded,
        })
    }

    /// Whether Gatekeeper running in `namespace` reconciles this one (a file's Config without a
    /// namespace counts as being in it).
    pub fn is_gatekeepers(&self, namespace: &str) -> bool {
        self.name == CONFIG_NAME && self.namespace.as_deref().is_none_or(|n| n == namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_webhooks_exclusions_count() {
        let c = GatekeeperConfig::from_value(&json!({
            "apiVersion": "config.gatekeeper.sh/v1alpha1", "kind": "Config",
            "metadata": {"name": "config", "namespace": "gatekeeper-system"},
            "spec": {"match": [
                {"excludedNamespaces": ["kube-*", "team-a"], "processes": ["*"]},
                {"excludedNamespaces": ["audit-only"], "processes": ["audit"]},
                {"excludedNamespaces": ["hooked"], "processes": ["sync", "webhook"]},
                {"excludedNamespaces": ["nothing"]}
            ]}
        }))
        .unwrap();
        assert_eq!(
            c.webhook_excluded.into_iter().collect::<Vec<_>>(),
            ["hooked", "kube-*", "team-a"]
        );
    }

    #[test]
    fn gatekeeper_reconciles_only_config_in_its_namespace() {
        let c = |name: &str, ns: Option<&str>| GatekeeperConfig {
            name: name.into(),
            namespace: ns.map(str::to_string),
            ..Default::default()
        };
        assert!(c("config", Some("gatekeeper-system")).is_gatekeepers("gatekeeper-system"));
        assert!(c("config", None).is_gatekeepers("gatekeeper-system"));
        assert!(!c("config", Some("other")).is_gatekeepers("gatekeeper-system"));
        assert!(!c("config-2", Some("gatekeeper-system")).is_gatekeepers("gatekeeper-system"));
    }

    #[test]
    fn a_malformed_match_is_named() {
        let e = GatekeeperConfig::from_value(&json!({
            "metadata": {"name": "config"}, "spec": {"match": {"excludedNamespaces": "x"}}
        }))
        .unwrap_err();
        assert!(e.starts_with("spec.match: "), "{e}");
    }

    #[test]
    fn no_spec_excludes_nothing() {
        let c = GatekeeperConfig::from_value(&json!({"metadata": {"name": "config"}})).unwrap();
        assert!(c.webhook_excluded.is_empty());
    }
}
