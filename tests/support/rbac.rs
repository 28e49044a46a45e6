//! The grants of `install --print` for a user that is not the admin (the test env's `vap-user`,
//! or a user impersonated with `--as`): a ClusterRole and the Lease's Role, each bound to the
//! user under one name, the way `install --print` grants its ServiceAccount (`testenv::rbac`
//! creates them).

use serde_json::{Value, json};

/// What to grant: `cluster_rules` cluster-wide and `namespace_rules` in `namespace`, to `user`,
/// as ClusterRole, ClusterRoleBinding, Role and RoleBinding all named `name`.
pub struct Grant<'a> {
    pub name: &'a str,
    pub user: &'a str,
    pub cluster_rules: Value,
    pub namespace: &'a str,
    pub namespace_rules: Value,
}

impl Grant<'_> {
    /// `install --print`'s rules: its ClusterRole's, and its Lease Role's for `lease` in
    /// `namespace`.
    pub fn install<'a>(name: &'a str, user: &'a str, namespace: &'a str, lease: &str) -> Grant<'a> {
        Grant {
            name,
            user,
            cluster_rules: kubectl_vap::cli::install::cluster_role_rules(),
            namespace,
            namespace_rules: kubectl_vap::cli::install::lease_role_rules(lease),
        }
    }
}

/// Creates the four objects of `g`.
pub async fn grant(client: &kube::Client, g: &Grant<'_>) {
    testenv::rbac::grant_cluster(client, g.name, g.user, &g.cluster_rules).await;
    testenv::rbac::grant_in(client, g.namespace, g.name, g.user, &g.namespace_rules).await;
}

/// The ClusterRole rules of `install --print` with `verbs` removed on `resource` (a rule
/// naming other resources too is split, so only `resource` loses them).
pub fn install_rules_without(resource: &str, verbs: &[&str]) -> Value {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .expect("a list")
            .iter()
            .filter_map(|s| s.as_str().map(String::from))
            .collect()
    };
    let mut out = Vec::new();
    for rule in kubectl_vap::cli::install::cluster_role_rules()
        .as_array()
        .expect("rules")
    {
        let resources = strings(&rule["resources"]);
        if !resources.iter().any(|r| r == resource) {
            out.push(rule.clone());
            continue;
        }
        let others: Vec<&String> = resources.iter().filter(|r| *r != resource).collect();
        if !others.is_empty() {
            let mut r = rule.clone();
            r["resources"] = json!(others);
            out.push(r);
        }
        let kept: Vec<String> = strings(&rule["verbs"])
            .into_iter()
            .filter(|v| !verbs.contains(&v.as_str()))
            .collect();
        if !kept.is_empty() {
            let mut r = rule.clone();
            r["resources"] = json!([resource]);
            r["verbs"] = json!(kept);
            out.push(r);
        }
    }
    json!(out)
}
