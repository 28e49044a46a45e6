//! What a generated policy and binding match before any CEL runs: the pre-filter the API
//! server applies from `matchConstraints` / `matchResources` (docs/generation.md, "Narrowed
//! policies").
//!
//! Gatekeeper's shape matches every create and update in the cluster and leaves `spec.match` to
//! the `gatekeeper_internal_match_*` conditions, which need the binding's params first. So every
//! request paid a param lookup per binding, and after an API server restart every request was
//! refused while a param informer was not synced (gatekeeper#4530). Here a constraint's
//! `match.kinds` become resource rules, its exact namespaces a namespace selector, and a VAP
//! matches the union of what its constraints match. The conditions stay as they are: this is
//! only ever a superset of what they admit.

use super::options::Exemptions;
use crate::model::Match;
use crate::model::served::{GroupResource, Served};
use k8s_openapi::api::admissionregistration::v1 as ar;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use std::collections::BTreeSet;

/// The label every namespace carries with its own name (since Kubernetes 1.21).
pub const NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// Gatekeeper's opt-out label: its webhook ignores namespaces that carry it.
pub const IGNORE_LABEL: &str = "admission.gatekeeper.sh/ignore";

/// A set of resources in requests' paths. `everything` absorbs the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    pub everything: bool,
    /// Groups matched whole (`resources: ["*"]`): a kind not served yet, or `kinds: ["*"]`.
    pub groups: BTreeSet<String>,
    pub resources: BTreeSet<GroupResource>,
    /// The namespaces matched: `None` any; else only these (and cluster-scoped objects, which a
    /// namespace selector never skips). Kept apart from the kinds: "everything" is about kinds.
    pub namespaces: Option<BTreeSet<String>>,
}

/// A `match.kinds` entry the served resources do not resolve: matched wider until it is served.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Unresolved {
    /// `""` is the core group; `*` any group.
    pub group: String,
    pub kind: String,
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.group.as_str() {
            "*" => write!(f, "{} (any group)", self.kind),
            "" => write!(f, "{} (core group)", self.kind),
            g => write!(f, "{}.{g}", self.kind),
        }
    }
}

impl Coverage {
    pub fn everything() -> Self {
        Coverage {
            everything: true,
            namespaces: None,
            ..Default::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.everything && self.groups.is_empty() && self.resources.is_empty()
    }

    /// The union. The empty coverage (no constraint yet) is its identity.
    pub fn union(&mut self, other: &Coverage) {
        let namespaces = match (self.is_empty(), &self.namespaces, &other.namespaces) {
            (true, _, theirs) => theirs.clone(),
            (_, Some(a), Some(b)) => Some(a.union(b).cloned().collect()),
            _ => None,
        };
        if self.everything || other.everything {
            *self = Coverage::everything();
        } else {
            self.groups.extend(other.groups.iter().cloned());
            self.resources.extend(other.resources.iter().cloned());
        }
        self.namespaces = namespaces;
    }

    /// Whether every request `other` matches is matched here too.
    pub fn covers(&self, other: &Coverage) -> bool {
        let namespaces = match (&self.namespaces, &other.namespaces) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(a), Some(b)) => b.is_subset(a),
        };
        let kinds = self.everything
            || (!other.everything
                && other.groups.iter().all(|g| self.groups.contains(g))
                && other
                    .resources
                    .iter()
                    .all(|gr| self.groups.contains(&gr.0) || self.resources.contains(gr)));
        namespaces && kinds
    }

    /// What a policy's or binding's `matchResources` match: its rules (`from_rules`), and the
    /// namespaces its selector names with `kubernetes.io/metadata.name In`.
    pub fn from_match(m: Option<&ar::MatchResources>) -> Coverage {
        let mut c = Coverage::from_rules(m.and_then(|m| m.resource_rules.as_deref()));
        let named = m
            .and_then(|m| m.namespace_selector.as_ref())
            .and_then(|s| s.match_expressions.as_ref())
            .into_iter()
            .flatten()
            .find(|e| e.key == NAME_LABEL && e.operator == "In");
        c.namespaces = named.map(|e| e.values.iter().flatten().cloned().collect());
        c
    }

    /// The rules that match exactly this coverage: one per group, sorted, so the same coverage
    /// always renders to the same bytes (no writes at rest).
    pub fn rules(&self, operations: &[String], scope: &str) -> Vec<ar::NamedRuleWithOperations> {
        let rule = |group: &str, resources: Vec<String>| ar::NamedRuleWithOperations {
            api_groups: Some(vec![group.to_string()]),
            api_versions: Some(vec!["*".into()]),
            resources: Some(resources),
            operations: Some(operations.to_vec()),
            scope: Some(scope.to_string()),
            resource_names: None,
        };
        if self.everything {
            return vec![rule("*", vec!["*".into()])];
        }
        let mut groups: BTreeSet<&str> = self.groups.iter().map(String::as_str).collect();
        groups.extend(self.resources.iter().map(|(g, _)| g.as_str()));
        groups
            .into_iter()
            .map(|g| {
                if self.groups.contains(g) {
                    rule(g, vec!["*".into()])
                } else {
                    let resources = self
                        .resources
                        .iter()
                        .filter(|(rg, _)| rg == g)
                        .map(|(_, r)| r.clone())
                        .collect();
                    rule(g, resources)
                }
            })
            .collect()
    }

    /// What rules written by anyone match, read conservatively: a wildcard group, or no rules
    /// at all (an empty `matchResources` defers to the policy), match everything.
    pub fn from_rules(rules: Option<&[ar::NamedRuleWithOperations]>) -> Coverage {
        let Some(rules) = rules.filter(|r| !r.is_empty()) else {
            return Coverage::everything();
        };
        let mut c = Coverage {
            namespaces: None,
            ..Default::default()
        };
        for r in rules {
            let groups = r.api_groups.as_deref().unwrap_or_default();
            let resources = r.resources.as_deref().unwrap_or_default();
            if groups.iter().any(|g| g == "*") {
                return Coverage::everything();
            }
            for g in groups {
                for res in resources {
                    if res == "*" || res == "*/*" || res.starts_with("*/") {
                        c.groups.insert(g.clone());
                    } else {
                        c.resources.insert((g.clone(), res.clone()));
                    }
                }
            }
        }
        c
    }
}

/// What `m.kinds` match, resolved through `served`, and the entries it could not resolve (they
/// are matched wider: the whole group, or everything for a kind in any group).
///
/// Semantics are our kinds matcher's (`core::cel`): no kinds, or an entry with no groups or no
/// kinds, match any; `*` matches any. Only resources, never subresources: Gatekeeper's own
/// `*` rule matches no subresource, and matching `pods/status` would judge every kubelet's
/// status update of a pod that broke a constraint before it existed — and refuse it.
pub fn coverage_of(m: &Match, served: &Served) -> (Coverage, Vec<Unresolved>) {
    let (mut c, unresolved) = kinds_coverage(m, served);
    let exact = exact(&m.namespaces);
    c.namespaces = (!m.namespaces.is_empty() && exact.len() == dedup_len(&m.namespaces))
        .then(|| exact.into_iter().collect());
    (c, unresolved)
}

fn kinds_coverage(m: &Match, served: &Served) -> (Coverage, Vec<Unresolved>) {
    let mut c = Coverage {
        namespaces: None,
        ..Default::default()
    };
    let mut unresolved = Vec::new();
    if m.kinds.is_empty() {
        return (Coverage::everything(), unresolved);
    }
    let any = vec!["*".to_string()];
    for entry in &m.kinds {
        let groups = if entry.api_groups.is_empty() {
            &any
        } else {
            &entry.api_groups
        };
        let kinds = if entry.kinds.is_empty() {
            &any
        } else {
            &entry.kinds
        };
        for g in groups {
            for k in kinds {
                match (g.as_str(), k.as_str()) {
                    ("*", "*") => return (Coverage::everything(), Vec::new()),
                    (g, "*") => {
                        c.groups.insert(g.to_string());
                        c.resources.extend(served.of_kind_group(g));
                    }
                    ("*", k) => {
                        let found = served.of_kind_in_any_group(k);
                        // Unknown anywhere, or a group we could not read may hold it.
                        if found.is_empty() || !served.failed_groups.is_empty() {
                            unresolved.push(Unresolved {
                                group: "*".into(),
                                kind: k.to_string(),
                            });
                            return (Coverage::everything(), unresolved);
                        }
                        if !found.iter().any(|(_, r)| !r.contains('/')) {
                            // Served only as a subresource (Scale): no resource carries it.
                            return (Coverage::everything(), unresolved);
                        }
                        c.resources.extend(found);
                    }
                    (g, k) => match served.of_kind(g, k) {
                        // Served only as a subresource (Scale): the group's resources.
                        Some(found) if found.iter().all(|(_, r)| r.contains('/')) => {
                            c.groups.insert(g.to_string());
                        }
                        Some(found) if !served.failed_groups.contains(g) => {
                            c.resources.extend(found.iter().cloned())
                        }
                        _ => {
                            unresolved.push(Unresolved {
                                group: g.to_string(),
                                kind: k.to_string(),
                            });
                            c.groups.insert(g.to_string());
                        }
                    },
                }
            }
        }
    }
    // Resources of a group matched whole add nothing; subresources are never matched.
    let groups = c.groups.clone();
    c.resources
        .retain(|(g, r)| !groups.contains(g) && !r.contains('/'));
    unresolved.sort();
    unresolved.dedup();
    (c, unresolved)
}

fn requirement(key: &str, operator: &str, values: Option<Vec<String>>) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values,
    }
}

fn exact(names: &[String]) -> Vec<String> {
    let set: BTreeSet<&String> = names.iter().filter(|n| !n.contains('*')).collect();
    set.into_iter().cloned().collect()
}

/// The binding's namespace selector: the constraint's own, plus its exact `namespaces` (only
/// when every entry is exact: a glob admits other names) and exact `excludedNamespaces`. A
/// namespace selector never skips cluster-scoped objects, and judges a Namespace by its own
/// labels, so it agrees with the namespace matchers for both.
pub fn binding_namespace_selector(m: &Match, own: LabelSelector) -> LabelSelector {
    let mut expressions = own.match_expressions.unwrap_or_default();
    let included = exact(&m.namespaces);
    if !m.namespaces.is_empty() && included.len() == dedup_len(&m.namespaces) {
        expressions.push(requirement(NAME_LABEL, "In", Some(included)));
    }
    let excluded = exact(&m.excluded_namespaces);
    if !excluded.is_empty() {
        expressions.push(requirement(NAME_LABEL, "NotIn", Some(excluded)));
    }
    LabelSelector {
        match_labels: own.match_labels,
        match_expressions: (!expressions.is_empty()).then_some(expressions),
    }
}

/// `selector` with what Gatekeeper exempts added: namespaces labelled
/// `admission.gatekeeper.sh/ignore`, and the exempt namespaces by name (the inline shape's
/// bindings; the narrowed shape keeps these on the VAP, [`policy_namespace_selector`]).
pub fn exempt(selector: LabelSelector, e: &Exemptions) -> LabelSelector {
    let mut expressions = selector.match_expressions.unwrap_or_default();
    expressions.push(requirement(IGNORE_LABEL, "DoesNotExist", None));
    if !e.namespaces.is_empty() {
        expressions.push(requirement(
            NAME_LABEL,
            "NotIn",
            Some(e.namespaces.iter().cloned().collect()),
        ));
    }
    LabelSelector {
        match_labels: selector.match_labels,
        match_expressions: Some(expressions),
    }
}

fn dedup_len(v: &[String]) -> usize {
    v.iter().collect::<BTreeSet<_>>().len()
}

/// The VAP's namespace selector: what Gatekeeper exempts, namespaces labelled
/// `admission.gatekeeper.sh/ignore` and the exempt namespaces by name; and, when every
/// constraint names its namespaces exactly, only those (`c.namespaces`).
pub fn policy_namespace_selector(e: &Exemptions, c: &Coverage) -> LabelSelector {
    let mut expressions = vec![requirement(IGNORE_LABEL, "DoesNotExist", None)];
    if let Some(only) = &c.namespaces {
        expressions.push(requirement(
            NAME_LABEL,
            "In",
            Some(only.iter().cloned().collect()),
        ));
    }
    if !e.namespaces.is_empty() {
        expressions.push(requirement(
            NAME_LABEL,
            "NotIn",
            Some(e.namespaces.iter().cloned().collect()),
        ));
    }
    LabelSelector {
        match_labels: None,
        match_expressions: Some(expressions),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::constraint::KindMatch;

    fn kinds(entries: &[(&[&str], &[&str])]) -> Match {
        Match {
            kinds: entries
                .iter()
                .map(|(g, k)| KindMatch {
                    api_groups: g.iter().map(|s| s.to_string()).collect(),
                    kinds: k.iter().map(|s| s.to_string()).collect(),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn gr(g: &str, r: &str) -> GroupResource {
        (g.to_string(), r.to_string())
    }

    #[test]
    fn a_known_kind_becomes_its_resources_never_subresources() {
        let (c, unresolved) = coverage_of(&kinds(&[(&[""], &["Pod"])]), &Served::builtin());
        assert!(unresolved.is_empty());
        assert!(!c.everything && c.groups.is_empty());
        assert_eq!(c.resources, BTreeSet::from([gr("", "pods")]));
        let rules = c.rules(&["*".into()], "*");
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].api_groups, Some(vec![String::new()]));
    }

    #[test]
    fn no_kinds_or_stars_match_everything() {
        let served = Served::builtin();
        assert!(coverage_of(&Match::default(), &served).0.everything);
        assert!(
            coverage_of(&kinds(&[(&["*"], &["*"])]), &served)
                .0
                .everything
        );
        assert!(coverage_of(&kinds(&[(&[], &[])]), &served).0.everything);
    }

    #[test]
    fn an_unknown_kind_is_matched_by_its_whole_group_until_served() {
        let m = kinds(&[(&["example.com"], &["Widget"])]);
        let (c, unresolved) = coverage_of(&m, &Served::builtin());
        assert_eq!(c.groups, BTreeSet::from(["example.com".to_string()]));
        assert_eq!(unresolved.len(), 1);
        let mut served = Served::builtin();
        served.add_crd(&serde_json::json!({"spec": {"group": "example.com",
            "names": {"plural": "widgets", "kind": "Widget"}, "versions": [{"name": "v1"}]}}));
        let (c, unresolved) = coverage_of(&m, &served);
        assert!(unresolved.is_empty());
        assert_eq!(c.resources, BTreeSet::from([gr("example.com", "widgets")]));
        // Unknown in any group: everything.
        let (c, _) = coverage_of(&kinds(&[(&["*"], &["Gadget"])]), &served);
        assert!(c.everything);
    }

    #[test]
    fn a_failed_group_is_not_trusted_to_be_complete() {
        let mut served = Served::builtin();
        served.failed_groups.insert("apps".into());
        let (c, unresolved) = coverage_of(&kinds(&[(&["apps"], &["Deployment"])]), &served);
        assert!(c.groups.contains("apps"));
        assert_eq!(unresolved.len(), 1);
    }

    #[test]
    fn a_kind_served_only_as_a_subresource_matches_its_group() {
        let (c, _) = coverage_of(
            &kinds(&[(&["autoscaling"], &["Scale"])]),
            &Served::builtin(),
        );
        assert_eq!(c.groups, BTreeSet::from(["autoscaling".to_string()]));
        assert!(c.resources.is_empty());
        let (c, _) = coverage_of(&kinds(&[(&["autoscaling"], &["*"])]), &Served::builtin());
        assert!(c.groups.contains("autoscaling") && c.resources.is_empty());
    }

    #[test]
    fn coverage_covers_and_reads_back_from_its_rules() {
        let served = Served::builtin();
        let (pods, _) = coverage_of(&kinds(&[(&[""], &["Pod"])]), &served);
        let (both, _) = coverage_of(&kinds(&[(&[""], &["Pod", "ConfigMap"])]), &served);
        assert!(both.covers(&pods) && !pods.covers(&both));
        assert!(Coverage::everything().covers(&both));
        assert!(!both.covers(&Coverage::everything()));
        let read = Coverage::from_rules(Some(&both.rules(&["CREATE".into()], "*")));
        assert_eq!(read, both);
        // Namespaces: only what every constraint names exactly, read back from the selector.
        let in_a = Match {
            namespaces: vec!["a".into()],
            ..kinds(&[(&[""], &["Pod"])])
        };
        let (a, _) = coverage_of(&in_a, &served);
        assert_eq!(a.namespaces, Some(BTreeSet::from(["a".to_string()])));
        assert!(
            pods.covers(&a) && !a.covers(&pods),
            "any namespace covers one"
        );
        let mut u = Coverage::default();
        u.union(&a);
        assert_eq!(
            u.namespaces, a.namespaces,
            "the empty coverage is the identity"
        );
        u.union(&pods);
        assert_eq!(u.namespaces, None);
        let m = ar::MatchResources {
            resource_rules: Some(a.rules(&["*".into()], "*")),
            namespace_selector: Some(policy_namespace_selector(&Exemptions::default(), &a)),
            ..Default::default()
        };
        assert_eq!(Coverage::from_match(Some(&m)), a);
        assert!(Coverage::from_rules(None).everything);
    }

    #[test]
    fn exact_namespaces_become_a_selector_and_globs_do_not() {
        let m = Match {
            namespaces: vec!["b".into(), "a".into(), "a".into()],
            excluded_namespaces: vec!["x".into(), "kube-*".into()],
            ..Default::default()
        };
        let s = binding_namespace_selector(&m, LabelSelector::default());
        let e = s.match_expressions.expect("expressions");
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].values, Some(vec!["a".into(), "b".into()]));
        assert_eq!(
            (e[1].operator.as_str(), &e[1].values),
            ("NotIn", &Some(vec!["x".into()]))
        );
        let globbed = Match {
            namespaces: vec!["a".into(), "team-*".into()],
            ..Default::default()
        };
        let s = binding_namespace_selector(&globbed, LabelSelector::default());
        assert_eq!(s.match_expressions, None);
    }
}
