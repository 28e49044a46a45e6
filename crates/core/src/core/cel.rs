//! Our own CEL for Gatekeeper's `spec.match` matchers, evaluated by the API server from the
//! constraint (the policy's param). The names are Gatekeeper's, so either generator recognises
//! the other's policies; the expressions are ours. The e2e tests are the judge that they work.
//!
//! Globs follow Gatekeeper's wildcard type: one `*` at the start or at the end.

use super::cel_literal::{self, string_list};
use crate::model::{KindMatch, Match};

/// Names of the four matchers, in the order they are generated.
pub const EXCLUDED_NAMESPACES: &str = "gatekeeper_internal_match_excluded_namespaces";
pub const NAMESPACES: &str = "gatekeeper_internal_match_namespaces";
pub const NAME: &str = "gatekeeper_internal_match_name";
pub const KINDS: &str = "gatekeeper_internal_match_kinds";
pub const MATCHER_NAMES: [&str; 4] = [EXCLUDED_NAMESPACES, NAMESPACES, NAME, KINDS];
/// Gatekeeper's name for the condition that exempts namespaces by prefix or suffix.
pub const GLOBAL_EXEMPTED_NAMESPACES: &str = "gatekeeper_internal_match_global_exempted_namespaces";
/// Gatekeeper's name for the condition of its Config's webhook exclusions.
pub const GLOBAL_EXCLUDED_NAMESPACES: &str = "gatekeeper_internal_match_global_excluded_namespaces";

/// The namespace a request is about: the request's, or a Namespace's own name, or "" when
/// cluster-scoped (namespace matchers pass for cluster-scoped objects, as in Gatekeeper).
/// `request.namespace` is absent (not "") on a cluster-scoped request: reading it there is an
/// error ("no such key"), which the policy's failurePolicy would turn into a denial.
const NS: &str = r#"((has(request.namespace) && request.namespace != "") ? request.namespace : ((request.kind.group == "" && request.kind.kind == "Namespace") ? request.name : ""))"#;

fn glob(pattern: &str, subject: &str) -> String {
    format!(
        r#"({p} == {s} || ({p}.endsWith("*") && {s}.startsWith({p}.substring(0, size({p}) - 1))) || ({p}.startsWith("*") && {s}.endsWith({p}.substring(1))))"#,
        p = pattern,
        s = subject
    )
}

fn absent(field: &str) -> String {
    format!("!has(params.spec) || !has(params.spec.match) || !has(params.spec.match.{field})")
}

/// The four matchers as (name, expression), in generation order. `[x].all(v, …)` binds a
/// value once, which keeps the expressions short without needing `cel.bind`.
pub fn matchers() -> Vec<(&'static str, String)> {
    let excluded = format!(
        "{} || [{NS}].all(ns, ns == \"\" || !params.spec.match.excludedNamespaces.exists(p, {}))",
        absent("excludedNamespaces"),
        glob("p", "ns")
    );
    let namespaces = format!(
        "{} || size(params.spec.match.namespaces) == 0 || [{NS}].all(ns, ns == \"\" || params.spec.match.namespaces.exists(p, {}))",
        absent("namespaces"),
        glob("p", "ns")
    );
    let name = format!(
        "{} || [params.spec.match.name].all(n, n == \"\" || {} || (n.endsWith(\"*\") && request.name == \"\" && object != null && has(object.metadata.generateName) && object.metadata.generateName.startsWith(n.substring(0, size(n) - 1))))",
        absent("name"),
        glob("n", "request.name")
    );
    let kinds = format!(
        "{} || size(params.spec.match.kinds) == 0 || params.spec.match.kinds.exists(k, \
(!has(k.apiGroups) || size(k.apiGroups) == 0 || k.apiGroups.exists(g, g == \"*\" || g == request.kind.group)) && \
(!has(k.kinds) || size(k.kinds) == 0 || k.kinds.exists(x, x == \"*\" || x == request.kind.kind)))",
        absent("kinds")
    );
    vec![
        (EXCLUDED_NAMESPACES, excluded),
        (NAMESPACES, namespaces),
        (NAME, name),
        (KINDS, kinds),
    ]
}

/// The matchers for one constraint's `spec.match`, its values written into the CEL (the
/// inline shape: no params). The same tests as [`matchers`], on the same names; a matcher
/// whose field is absent or empty admits everything there, so it is left out here.
pub fn inline_matchers(m: &Match) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if !m.excluded_namespaces.is_empty() {
        out.push((
            EXCLUDED_NAMESPACES,
            format!(
                "[{NS}].all(ns, ns == \"\" || !{}.exists(p, {}))",
                string_list(&m.excluded_namespaces),
                glob("p", "ns")
            ),
        ));
    }
    if !m.namespaces.is_empty() {
        out.push((
            NAMESPACES,
            format!(
                "[{NS}].all(ns, ns == \"\" || {}.exists(p, {}))",
                string_list(&m.namespaces),
                glob("p", "ns")
            ),
        ));
    }
    if let Some(name) = m.name.as_deref().filter(|n| !n.is_empty()) {
        out.push((
            NAME,
            format!(
                "[{}].all(n, {} || (n.endsWith(\"*\") && request.name == \"\" && object != null && has(object.metadata.generateName) && object.metadata.generateName.startsWith(n.substring(0, size(n) - 1))))",
                cel_literal::string(name),
                glob("n", "request.name")
            ),
        ));
    }
    if let Some(kinds) = inline_kinds(&m.kinds) {
        out.push((KINDS, kinds));
    }
    out
}

/// The kinds matcher for `kinds` as one disjunction, or `None` when it admits every kind.
fn inline_kinds(kinds: &[KindMatch]) -> Option<String> {
    let any = |v: &[String]| v.is_empty() || v.iter().any(|x| x == "*");
    let mut terms = Vec::new();
    for k in kinds {
        let group = (!any(&k.api_groups))
            .then(|| format!("request.kind.group in {}", string_list(&k.api_groups)));
        let kind =
            (!any(&k.kinds)).then(|| format!("request.kind.kind in {}", string_list(&k.kinds)));
        match (group, kind) {
            (None, None) => return None,
            (Some(g), None) => terms.push(g),
            (None, Some(k)) => terms.push(k),
            (Some(g), Some(k)) => terms.push(format!("({g} && {k})")),
        }
    }
    (!terms.is_empty()).then(|| terms.join(" || "))
}

/// The condition that leaves out namespaces exempt by prefix or suffix (cluster-scoped objects
/// are never exempt; a Namespace by its own name), or `None` when there are none.
pub fn global_exempted(
    prefixes: &std::collections::BTreeSet<String>,
    suffixes: &std::collections::BTreeSet<String>,
) -> Option<String> {
    if prefixes.is_empty() && suffixes.is_empty() {
        return None;
    }
    Some(format!(
        "[{NS}].all(ns, ns == \"\" || !({}.exists(p, ns.startsWith(p)) || {}.exists(s, ns.endsWith(s))))",
        string_list(prefixes),
        string_list(suffixes)
    ))
}

/// The condition that leaves out namespaces Gatekeeper's Config excludes by glob (`*` any run of
/// characters, as Gatekeeper reads them; everything else literal), or `None` when there are
/// none. Each glob becomes an anchored RE2 pattern here, once, rather than in every request.
pub fn global_excluded(globs: &std::collections::BTreeSet<String>) -> Option<String> {
    if globs.is_empty() {
        return None;
    }
    let patterns: Vec<String> = globs.iter().map(|g| glob_pattern(g)).collect();
    Some(format!(
        "[{NS}].all(ns, ns == \"\" || !{}.exists(p, ns.matches(p)))",
        string_list(&patterns)
    ))
}

/// `kube-*` → `^kube\-.*$`: RE2, every character but `*` literal.
fn glob_pattern(glob: &str) -> String {
    let mut p = String::from("^");
    for c in glob.chars() {
        match c {
            '*' => p.push_str(".*"),
            c if c.is_ascii_alphanumeric() => p.push(c),
            c if c.is_ascii_punctuation() => {
                p.push('\\');
                p.push(c);
            }
            c => p.push(c),
        }
    }
    p.push('$');
    p
}

/// `variables.anyObject`: the old object on a DELETE, else the object.
pub const ANY_OBJECT: &str = r#"has(request.operation) && request.operation == "DELETE" && object == null ? oldObject : object"#;
/// `variables.params`: the constraint's `spec.parameters`, or null.
pub const PARAMS: &str =
    "!has(params.spec) ? null : !has(params.spec.parameters) ? null : params.spec.parameters";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_become_anchored_literal_patterns() {
        assert_eq!(glob_pattern("kube-*"), "^kube\\-.*$");
        assert_eq!(glob_pattern("*-system"), "^.*\\-system$");
        assert_eq!(glob_pattern("a.b"), "^a\\.b$");
        let none = std::collections::BTreeSet::new();
        assert_eq!(global_excluded(&none), None);
        let one = std::collections::BTreeSet::from(["kube-*".to_string()]);
        let e = global_excluded(&one).expect("a condition");
        assert!(e.contains(r#"["^kube\\-.*$"]"#), "{e}");
    }
}
