//! The generation flags shared by every command (design: "the generation flags").

use super::cel_syntax::CelChecker;
use crate::model::GatekeeperConfig;
use std::collections::BTreeSet;
use std::time::Duration;

/// `--policy-shape`: what the generated objects match before their CEL runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PolicyShape {
    /// Per template (`core::shape::resolve`): `Inline` wherever that serves every constraint of
    /// a template of at most [`INLINE_AT_MOST`] constraints, `Narrowed` otherwise
    /// (docs/generation.md, "The default").
    #[default]
    Auto,
    /// Bindings narrowed to their constraint's kinds and exact namespaces, each VAP to the
    /// union of its constraints, exempt namespaces left out (`core::scope`).
    Narrowed,
    /// Gatekeeper v3.23.1's objects byte for byte under its default
    /// `--sync-vap-enforcement-scope=true`: each VAP matches what Gatekeeper's validating
    /// webhook matches (copied from it, operations intersected with the template's), or every
    /// create and update when that webhook is not there; filtered in CEL.
    Gatekeeper,
    /// Gatekeeper v3.23.1's objects under `--sync-vap-enforcement-scope=false`: every create and
    /// update, filtered in CEL.
    GatekeeperUnsynced,
    /// One VAP per constraint, its parameters and `spec.match` written into the CEL: no
    /// `paramKind`, so nothing the API server must sync before it can judge a request
    /// (docs/generation.md, "Inline policies"). Bindings narrowed as in `Narrowed`, with the
    /// exemptions on them.
    Inline,
}

impl PolicyShape {
    /// Every shape, as `--policy-shape` names them.
    pub const ALL: [PolicyShape; 5] = [
        PolicyShape::Auto,
        PolicyShape::Narrowed,
        PolicyShape::Inline,
        PolicyShape::Gatekeeper,
        PolicyShape::GatekeeperUnsynced,
    ];

    /// Gatekeeper's own objects (either sync setting).
    pub fn is_gatekeepers(self) -> bool {
        matches!(
            self,
            PolicyShape::Gatekeeper | PolicyShape::GatekeeperUnsynced
        )
    }

    /// The shape of the objects of a template with `constraints` constraints, by their count
    /// alone: `Auto` resolved, any other shape as it is (`core::shape::resolve` also asks
    /// whether inline serves the template).
    pub fn for_template(self, constraints: usize) -> PolicyShape {
        match self {
            PolicyShape::Auto if constraints <= INLINE_AT_MOST => PolicyShape::Inline,
            PolicyShape::Auto => PolicyShape::Narrowed,
            shape => shape,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PolicyShape::Auto => "auto",
            PolicyShape::Narrowed => "narrowed",
            PolicyShape::Gatekeeper => "gatekeeper",
            PolicyShape::Inline => "inline",
            PolicyShape::GatekeeperUnsynced => "gatekeeper-unsynced",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// `--policy-shape auto`: the most constraints a template may have and still get a VAP per
/// constraint. Chosen from docs/benchmarks.md ("The shapes side by side, and the default"):
/// each inline VAP costs the API server ~0.6 MiB of Go heap and compile time (5,000 of them:
/// +3.1 GiB; 1,250: 8.5 s before every binding is in force), while one narrowed VAP serves a
/// template's constraints at once; ten keeps what one template can add under ~6–10 MiB.
pub const INLINE_AT_MOST: usize = 10;

/// The namespaces no narrowed VAP applies to, as Gatekeeper exempts them from its webhook:
/// by name (`--exempt-namespace`, and always the Lease's namespace), by prefix and by suffix.
/// Namespaces labelled `admission.gatekeeper.sh/ignore` are always exempt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exemptions {
    pub namespaces: BTreeSet<String>,
    pub prefixes: BTreeSet<String>,
    pub suffixes: BTreeSet<String>,
    /// Globs (`kube-*`, `*-system`, `a*b`) of Gatekeeper's Config that exclude namespaces from
    /// its webhook; its exact names are in `namespaces`. Read from the cluster or the input,
    /// never a flag ([`Options::with_gatekeeper_config`]).
    pub excluded_globs: BTreeSet<String>,
    /// The `--exempt-namespace` flags alone (`namespaces` adds the Lease's namespace and the
    /// Config's names): what Gatekeeper, which has the same flags, exempts in its own VAPs.
    pub flagged: BTreeSet<String>,
    /// Everything the Config excludes from the webhook, names and globs: what Gatekeeper
    /// writes into its own VAPs' `gatekeeper_internal_match_global_excluded_namespaces`.
    pub config_excluded: BTreeSet<String>,
}

impl Exemptions {
    /// Gatekeeper's list of exempt namespaces for its VAPs (`GetAllExemptedNamespacesWithWildcard`):
    /// the flags' names, prefixes as `p*`, suffixes as `*s`, sorted.
    pub fn gatekeeper_exempted(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .flagged
            .iter()
            .cloned()
            .chain(self.prefixes.iter().map(|p| format!("{p}*")))
            .chain(self.suffixes.iter().map(|s| format!("*{s}")))
            .collect();
        all.sort();
        all
    }
}

/// The Lease's namespace when no flag says otherwise (`--lease-namespace`).
pub const DEFAULT_LEASE_NAMESPACE: &str = "gatekeeper-system";
/// Where Gatekeeper runs, and so where its `Config` is (`--gatekeeper-namespace`).
pub const DEFAULT_GATEKEEPER_NAMESPACE: &str = "gatekeeper-system";

impl Exemptions {
    /// Only the default Lease namespace.
    pub fn lease_namespace(ns: &str) -> Self {
        Exemptions {
            namespaces: BTreeSet::from([ns.to_string()]),
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    Fail,
    Ignore,
}

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Fail" => Some(FailurePolicy::Fail),
            "Ignore" => Some(FailurePolicy::Ignore),
            _ => None,
        }
    }
}

/// What a decision needs besides the snapshot. No `Default`: the flags' defaults are
/// [`Options::with_cel`] with the edge's CEL checker, `load::cel::default_options()` in the main
/// crate, where that checker is.
#[derive(Debug, Clone)]
pub struct Options {
    /// `--default-create-vap-for-templates`: decides when a template leaves `generateVAP` unset.
    pub default_create_vap_for_templates: bool,
    /// `--default-create-vap-binding-for-constraints`: decides for deny/warn/dryrun constraints.
    pub default_create_vap_binding_for_constraints: bool,
    /// `--default-failure-policy`: when the template's source sets none.
    pub default_failure_policy: FailurePolicy,
    /// `--binding-wait`: how long after the constraint CRD is Established before the first binding.
    pub binding_wait: Duration,
    /// `--policy-shape`.
    pub policy_shape: PolicyShape,
    /// `--exempt-namespace[-prefix|-suffix]` and the Lease's namespace; Gatekeeper's Config
    /// adds its exclusions ([`Options::with_gatekeeper_config`]).
    pub exemptions: Exemptions,
    /// `--gatekeeper-namespace`: whose `config` Config's webhook exclusions are exempt.
    pub gatekeeper_namespace: String,
    /// `--validating-webhook-configuration-name`: Gatekeeper's webhook configuration, whose
    /// `validation.gatekeeper.sh` webhook `--policy-shape gatekeeper` copies.
    pub webhook_configuration_name: String,
    /// That webhook, when read ([`Options::with_gatekeeper_webhook`]).
    pub gatekeeper_webhook: Option<crate::model::GatekeeperWebhook>,
    /// `--emit-admission-audit-annotations` (Gatekeeper's flag, upstream after v3.23.1): every
    /// VAP publishes the constraints that evaluated a request in the API server's audit log,
    /// and every binding adds `Audit` beside `Deny` or `Warn`.
    pub emit_admission_audit_annotations: bool,
    /// What parses a template's CEL (syntax only): the edge's, which has the stack and the
    /// memory for it.
    pub cel: CelChecker,
}

impl Options {
    /// Gatekeeper v3.20+ defaults, templates' CEL checked by `cel`; the shape `auto`, the
    /// command line's default too.
    pub fn with_cel(cel: CelChecker) -> Self {
        Options {
            default_create_vap_for_templates: true,
            default_create_vap_binding_for_constraints: true,
            default_failure_policy: FailurePolicy::Fail,
            binding_wait: Duration::from_secs(30),
            // The command line's default (`cli::args::GenerationArgs`), so that the tests built
            // on these options test what a user runs; a test about another shape names it.
            policy_shape: PolicyShape::Auto,
            exemptions: Exemptions::lease_namespace(DEFAULT_LEASE_NAMESPACE),
            gatekeeper_namespace: DEFAULT_GATEKEEPER_NAMESPACE.into(),
            webhook_configuration_name:
                crate::model::gatekeeper_webhook::DEFAULT_CONFIGURATION_NAME.into(),
            gatekeeper_webhook: None,
            emit_admission_audit_annotations: false,
            cel,
        }
    }

    /// These options with `shape` (`--policy-shape auto` resolved for one template:
    /// `core::shape::resolve`).
    pub fn with_shape(&self, shape: PolicyShape) -> Options {
        let mut o = self.clone();
        o.policy_shape = shape;
        o
    }

    /// These options with Gatekeeper's validating webhook: the one of the configuration
    /// [`Options::webhook_configuration_name`] names, if read.
    pub fn with_gatekeeper_webhook(&self, webhooks: &[crate::model::GatekeeperWebhook]) -> Options {
        let mut o = self.clone();
        o.gatekeeper_webhook = webhooks
            .iter()
            .find(|w| w.configuration == self.webhook_configuration_name)
            .cloned();
        o
    }

    /// These options with the webhook exclusions of the Config Gatekeeper reconciles (the one
    /// named `config` in `gatekeeper_namespace`) added to the exemptions: exact names to
    /// [`Exemptions::namespaces`], globs to [`Exemptions::excluded_globs`]. Gatekeeper's VAPs
    /// leave them out; so do ours. Other Configs are ignored, as Gatekeeper ignores them.
    pub fn with_gatekeeper_config(&self, configs: &[GatekeeperConfig]) -> Options {
        let mut o = self.clone();
        for c in configs
            .iter()
            .filter(|c| c.is_gatekeepers(&self.gatekeeper_namespace))
        {
            for n in &c.webhook_excluded {
                o.exemptions.config_excluded.insert(n.clone());
                if n.contains('*') {
                    o.exemptions.excluded_globs.insert(n.clone());
                } else {
                    o.exemptions.namespaces.insert(n.clone());
                }
            }
        }
        o
    }
}

#[cfg(test)]
mod gatekeeper_config_tests {
    use super::*;

    /// The flags' defaults; no template is checked here.
    fn defaults() -> Options {
        super::testing::options()
    }

    fn config(ns: Option<&str>, name: &str, excluded: &[&str]) -> GatekeeperConfig {
        GatekeeperConfig {
            namespace: ns.map(str::to_string),
            name: name.into(),
            webhook_excluded: excluded.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn the_configs_names_and_globs_join_the_exemptions() {
        let o = defaults().with_gatekeeper_config(&[
            config(Some("gatekeeper-system"), "config", &["team-a", "kube-*"]),
            // Not Gatekeeper's: another namespace, another name.
            config(Some("elsewhere"), "config", &["team-b"]),
            config(Some("gatekeeper-system"), "other", &["team-c"]),
        ]);
        let names: Vec<&str> = o.exemptions.namespaces.iter().map(String::as_str).collect();
        assert_eq!(names, ["gatekeeper-system", "team-a"]);
        let globs: Vec<&str> = o
            .exemptions
            .excluded_globs
            .iter()
            .map(String::as_str)
            .collect();
        assert_eq!(globs, ["kube-*"]);
        // The flags' options are not changed.
        assert!(defaults().exemptions.excluded_globs.is_empty());
    }

    #[test]
    fn another_gatekeeper_namespace_reads_its_own_config() {
        let o = Options {
            gatekeeper_namespace: "gk".into(),
            ..defaults()
        }
        .with_gatekeeper_config(&[
            config(Some("gatekeeper-system"), "config", &["team-a"]),
            config(Some("gk"), "config", &["team-b"]),
        ]);
        assert!(o.exemptions.namespaces.contains("team-b"));
        assert!(!o.exemptions.namespaces.contains("team-a"));
    }
}

/// Options for the core's own unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::Options;
    use crate::core::cel_syntax::{CelChecker, CelSyntax};

    /// Accepts every expression: the unit tests here never ask about CEL (the parser is the
    /// main crate's, `load::cel_syntax`; its tests and tests/core_*.rs use the real checker).
    struct AcceptsAll;

    impl CelSyntax for AcceptsAll {
        fn check(&self, _: &[(String, &str)]) -> Result<(), String> {
            Ok(())
        }
        fn first_free_read(&self, _: &[(String, &str)], _: &str) -> Option<String> {
            None
        }
        fn rename_variables(
            &self,
            _: &str,
            _: &std::collections::BTreeMap<String, String>,
        ) -> Result<String, String> {
            Err("not parsed here".into())
        }
    }

    /// The flags' defaults with [`AcceptsAll`].
    pub(crate) fn options() -> Options {
        Options::with_cel(CelChecker::new(AcceptsAll))
    }
}
