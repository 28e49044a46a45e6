//! RBAC for a user that is not the admin: the test env's `vap-user` (no grants of its own) or a
//! user impersonated with `--as`. Granted as a ClusterRole and a namespaced Role (the Lease's),
//! each bound to the user under one name, the way `install --print` grants its ServiceAccount.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
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
    let (name, ns) = (g.name, g.namespace);
    let subjects =
        json!([{ "kind": "User", "name": g.user, "apiGroup": "rbac.authorization.k8s.io" }]);
    let role_ref =
        |kind: &str| json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name });
    let client = client.clone();
    create::<ClusterRole>(
        Api::all(client.clone()),
        json!({ "metadata": { "name": name }, "rules": g.cluster_rules }),
    )
    .await;
    create::<Role>(
        Api::namespaced(client.clone(), ns),
        json!({ "metadata": { "name": name, "namespace": ns }, "rules": g.namespace_rules }),
    )
    .await;
    create::<ClusterRoleBinding>(
        Api::all(client.clone()),
        json!({ "metadata": { "name": name }, "roleRef": role_ref("ClusterRole"), "subjects": subjects }),
    )
    .await;
    create::<RoleBinding>(
        Api::namespaced(client, ns),
        json!({ "metadata": { "name": name, "namespace": ns }, "roleRef": role_ref("Role"), "subjects": subjects }),
    )
    .await;
}

async fn create<K>(api: Api<K>, obj: Value)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let o: K = serde_json::from_value(obj).expect("an RBAC object");
    api.create(&PostParams::default(), &o)
        .await
        .unwrap_or_else(|e| panic!("creating a {}: {e}", K::kind(&())));
}

/// Deletes what [`grant`] created as `name` in `namespace` (whatever of it exists).
pub async fn revoke(client: &kube::Client, name: &str, namespace: &str) {
    let dp = DeleteParams::default();
    let _ = Api::<ClusterRoleBinding>::all(client.clone())
        .delete(name, &dp)
        .await;
    let _ = Api::<ClusterRole>::all(client.clone())
        .delete(name, &dp)
        .await;
    let _ = Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .delete(name, &dp)
        .await;
    let _ = Api::<Role>::namespaced(client.clone(), namespace)
        .delete(name, &dp)
        .await;
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
