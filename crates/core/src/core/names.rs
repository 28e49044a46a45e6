//! Object names, exactly as Gatekeeper v3.23 derives them, so either tool can take over.

const PREFIX: &str = "gatekeeper-";
/// The longest name an admissionregistration object may have.
pub const MAX_NAME: usize = 253;

/// `gatekeeper-<template name>`.
pub fn policy_name(template_name: &str) -> String {
    format!("{PREFIX}{template_name}")
}

/// The policy a constraint of `kind` binds to. Derived from the kind, because the constraint
/// side never reads the template (Gatekeeper requires template name == lower(kind)).
pub fn policy_name_for_kind(kind: &str) -> String {
    policy_name(&kind.to_lowercase())
}

/// `gatekeeper-<lower(kind)>-<constraint name>`, shortened with a hash above 253 characters.
pub fn binding_name(kind: &str, constraint_name: &str) -> String {
    shortened(format!("{PREFIX}{}-{constraint_name}", kind.to_lowercase()))
}

/// The VAP of one constraint in the inline shape: `gatekeeper-<lower(kind)>.<constraint name>`,
/// shortened like a binding's name. The dot keeps it apart from every template's VAP
/// (`gatekeeper-<template>`, and a template's name is its lowercase kind, which has no dot),
/// and it is one-to-one: the first dot ends the kind. Ownership is still decided by the
/// controller reference (the constraint), never by this name.
pub fn inline_policy_name(kind: &str, constraint_name: &str) -> String {
    shortened(format!("{PREFIX}{}.{constraint_name}", kind.to_lowercase()))
}

/// The one VAP (and its binding) of a template's constraints of one set of enforcement
/// actions in the folded shape (`core::fold`): `gatekeeper-<template>.folded-<actions>`,
/// shortened like a binding's name. The dot keeps it apart from every template's VAP; from an
/// inline VAP (`gatekeeper-<kind>.<constraint>`) only the name of its constraint keeps it apart,
/// as no spelling could (a constraint may be named `folded-deny`): there, as everywhere, the
/// controller reference decides whose it is (the template's here, the constraint's there).
pub fn folded_policy_name(template_name: &str, actions: &str) -> String {
    shortened(format!("{PREFIX}{template_name}.folded-{actions}"))
}

/// `full`, or above 253 characters its head and `-` and 8 hex characters of its SHA-256
/// (Gatekeeper's `GetVAPBindingName`).
fn shortened(full: String) -> String {
    shortened_to(full, MAX_NAME)
}

/// `full`, or above `max` characters its head and `-` and 8 hex characters of its SHA-256
/// (a static manifest's name needs room for its suffix: `core::render::static_name`).
pub fn shortened_to(full: String, max: usize) -> String {
    if full.len() <= max {
        return full;
    }
    let digest = hmac_sha256::Hash::hash(full.as_bytes());
    let hash: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    // Names are DNS subdomains (ASCII), so byte truncation cannot split a character; be safe anyway.
    let mut cut = max - 9;
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = full[..cut].trim_end_matches(['-', '.']);
    format!("{head}-{hash}")
}

/// The v3.16–v3.22 binding name, cleaned up when controlled by the same constraint.
pub fn legacy_binding_name(constraint_name: &str) -> String {
    format!("{PREFIX}{constraint_name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_plain() {
        assert_eq!(
            policy_name("k8srequiredlabels"),
            "gatekeeper-k8srequiredlabels"
        );
        assert_eq!(
            policy_name_for_kind("K8sRequiredLabels"),
            "gatekeeper-k8srequiredlabels"
        );
        assert_eq!(
            binding_name("K8sRequiredLabels", "ns-must-have-owner"),
            "gatekeeper-k8srequiredlabels-ns-must-have-owner"
        );
        assert_eq!(legacy_binding_name("x"), "gatekeeper-x");
        assert_eq!(
            inline_policy_name("K8sRequiredLabels", "ns-must-have-owner"),
            "gatekeeper-k8srequiredlabels.ns-must-have-owner"
        );
    }

    #[test]
    fn exactly_253_is_kept() {
        let kind = "K";
        let name = "a".repeat(MAX_NAME - "gatekeeper-k-".len());
        let b = binding_name(kind, &name);
        assert_eq!(b.len(), MAX_NAME);
        assert!(b.ends_with("aaaa"));
    }

    #[test]
    fn long_names_are_truncated_with_the_hash_of_the_full_name() {
        let name = "a".repeat(300);
        let full = format!("gatekeeper-k8sx-{name}");
        let b = binding_name("K8sX", &name);
        // `printf 'gatekeeper-k8sx-aaa…a' | sha256sum` (300 a's), first 8 hex digits.
        let hash = "ff45f313";
        assert_eq!(b.len(), MAX_NAME);
        assert_eq!(&b[..244], &full[..244]);
        assert_eq!(b, format!("{}-{hash}", &full[..244]));
    }

    #[test]
    fn truncation_trims_separators_before_the_hash() {
        // Put a run of '-' and '.' right at the cut so it must be trimmed.
        let prefix_len = "gatekeeper-k-".len();
        let mut name = "a".repeat(244 - prefix_len - 3);
        name.push_str("-.-");
        name.push_str(&"b".repeat(50));
        let b = binding_name("K", &name);
        assert!(b.len() < MAX_NAME);
        let (head, hash) = b.rsplit_once('-').expect("hash suffix");
        assert_eq!(hash.len(), 8);
        assert!(head.ends_with('a'), "{head}");
    }

    #[test]
    fn distinct_long_names_get_distinct_hashes() {
        let a = binding_name("K", &format!("{}x", "a".repeat(300)));
        let b = binding_name("K", &format!("{}y", "a".repeat(300)));
        assert_ne!(a, b);
    }
}
