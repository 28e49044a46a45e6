//! The CEL Gatekeeper v3.23.1 writes into its own VAPs, as data (`gatekeeper_cel.json`, recorded
//! from its `pkg/drivers/k8scel/transform`): the four `spec.match` matchers, the `params`
//! variable, and the conditions of its global exclusions and exemptions. The Gatekeeper shapes
//! (`--policy-shape gatekeeper`, `gatekeeper-unsynced`) write these byte for byte, so Gatekeeper
//! taking our objects over finds nothing to change (it compares whole specs); the other shapes
//! write our own (`core::cel`). `tests/e2e_gatekeeper.rs` compares them with the real
//! Gatekeeper's objects.

use serde::Deserialize;
use std::sync::OnceLock;

#[derive(Deserialize)]
struct Texts {
    matchers: Vec<(String, String)>,
    global_excluded_namespaces: String,
    global_exempted_namespaces: String,
    params: String,
}

fn texts() -> &'static Texts {
    static TEXTS: OnceLock<Texts> = OnceLock::new();
    TEXTS.get_or_init(|| {
        serde_json::from_str(include_str!("gatekeeper_cel.json"))
            .expect("gatekeeper_cel.json is compiled in and parsed by the unit test")
    })
}

/// The four matchers, in Gatekeeper's order.
pub fn matchers() -> Vec<(&'static str, String)> {
    texts()
        .matchers
        .iter()
        .map(|(name, expression)| (name.as_str(), expression.clone()))
        .collect()
}

/// `variables.params`.
pub fn params() -> &'static str {
    &texts().params
}

/// Gatekeeper's namespace list: each name quoted as it is (`quoteNamespaces`), comma-joined.
/// Names and globs of namespaces: DNS-label characters and `*`, nothing to escape.
fn list(namespaces: &[String]) -> String {
    namespaces
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(",")
}

/// Go's `fmt.Sprintf` of a template with two `%s`, both `value`.
fn fill(template: &str, value: &str) -> String {
    template.replacen("%s", value, 2)
}

/// The condition of the Config's webhook exclusions, or `None` when there are none.
pub fn global_excluded(namespaces: &[String]) -> Option<String> {
    (!namespaces.is_empty()).then(|| fill(&texts().global_excluded_namespaces, &list(namespaces)))
}

/// The condition of the exempt-namespace flags, or `None` when there are none.
pub fn global_exempted(namespaces: &[String]) -> Option<String> {
    (!namespaces.is_empty()).then(|| fill(&texts().global_exempted_namespaces, &list(namespaces)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_texts_parse_and_fill() {
        let names: Vec<&str> = matchers().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, super::super::cel::MATCHER_NAMES);
        assert!(params().starts_with("!has(params.spec)"));
        assert_eq!(global_excluded(&[]), None);
        let e = global_excluded(&["a".into(), "kube-*".into()]).expect("a condition");
        assert_eq!(e.matches("![\"a\",\"kube-*\"].exists").count(), 2, "{e}");
        assert!(!e.contains("%s"));
        let x = global_exempted(&["b*".into()]).expect("a condition");
        assert!(x.contains("![\"b*\"].exists") && !x.contains("%s"));
    }
}
