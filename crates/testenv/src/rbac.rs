//! RBAC for a user that is not the admin: the env's [`crate::USER_NAME`] (no grants of its own)
//! or a user impersonated with `--as`. A grant is a role and its binding under one name.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

/// Grants `rules` cluster-wide to `user`: ClusterRole and ClusterRoleBinding `name`.
pub async fn grant_cluster(client: &kube::Client, name: &str, user: &str, rules: &Value) {
    create::<ClusterRole>(
        Api::all(client.clone()),
        json!({ "metadata": { "name": name }, "rules": rules }),
    )
    .await;
    create::<ClusterRoleBinding>(
        Api::all(client.clone()),
        json!({ "metadata": { "name": name }, "roleRef": role_ref("ClusterRole", name),
                "subjects": subjects(user) }),
    )
    .await;
}

/// Grants `rules` in `namespace` to `user`: Role and RoleBinding `name`.
pub async fn grant_in(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    user: &str,
    rules: &Value,
) {
    let metadata = json!({ "name": name, "namespace": namespace });
    create::<Role>(
        Api::namespaced(client.clone(), namespace),
        json!({ "metadata": metadata, "rules": rules }),
    )
    .await;
    create::<RoleBinding>(
        Api::namespaced(client.clone(), namespace),
        json!({ "metadata": metadata, "roleRef": role_ref("Role", name),
                "subjects": subjects(user) }),
    )
    .await;
}

/// Deletes what [`grant_cluster`] and [`grant_in`] created as `name` (whatever of it exists).
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

fn subjects(user: &str) -> Value {
    json!([{ "kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io" }])
}

fn role_ref(kind: &str, name: &str) -> Value {
    json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name })
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
