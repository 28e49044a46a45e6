//! The grants of `install --print` for a user that is not the admin (the test env's `vap-user`,
//! or a user impersonated with `--as`): a ClusterRole and the Lease's Role, each bound to the
//! user under one name, the way `install --print` grants its ServiceAccount (`testenv::rbac`
//! creates them); the roles as the real binary's `install --print` prints them ([`printed`]);
//! a client impersonating a user, and waiting until the authorizer has learnt a grant.

use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

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

/// Creates the four objects of `g`, and `install --print`'s Role in Gatekeeper's namespace
/// (its pod statuses, its Deployments: created if missing) for `g.user`.
pub async fn grant(client: &kube::Client, g: &Grant<'_>) {
    testenv::rbac::grant_cluster(client, g.name, g.user, &g.cluster_rules).await;
    testenv::rbac::grant_in(client, g.namespace, g.name, g.user, &g.namespace_rules).await;
    let gatekeeper = kubectl_vap::core::options::DEFAULT_GATEKEEPER_NAMESPACE;
    testenv::ensure_namespace(client, gatekeeper)
        .await
        .expect("Gatekeeper's namespace");
    let rules = kubectl_vap::cli::install::pod_status_role_rules();
    // A name of its own: the Lease's Role may be in Gatekeeper's namespace too.
    let name = format!("{}-gatekeeper", g.name);
    testenv::rbac::grant_in(client, gatekeeper, &name, g.user, &rules).await;
}

/// The ClusterRole rules of `install --print` with `verbs` removed on `resource` ([`rules_without`]).
pub fn install_rules_without(resource: &str, verbs: &[&str]) -> Value {
    rules_without(
        &kubectl_vap::cli::install::cluster_role_rules(),
        resource,
        verbs,
    )
}

/// `rules` with `verbs` removed on `resource` (a rule naming other resources too is split, so
/// only `resource` loses them).
pub fn rules_without(rules: &Value, resource: &str, verbs: &[&str]) -> Value {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .expect("a list")
            .iter()
            .filter_map(|s| s.as_str().map(String::from))
            .collect()
    };
    let mut out = Vec::new();
    for rule in rules.as_array().expect("rules") {
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

/// A role as `install --print` prints it: its namespace (`None`: a ClusterRole) and rules.
pub struct PrintedRole {
    pub namespace: Option<String>,
    pub rules: Value,
}

/// The roles `install --print --namespace NS` prints, read from the real binary's output.
pub struct Printed {
    /// The reconciler's ClusterRole (`kubectl-vap`).
    pub cluster: PrintedRole,
    /// Its Role for the Lease and the requests ConfigMap, in NS.
    pub lease: PrintedRole,
    /// Its Role for the Events it reports.
    pub events: PrintedRole,
    /// The operator's ClusterRole (`kubectl-vap-operator`): read, and ask the holder.
    pub operator: PrintedRole,
    /// The guard policy and its binding (`kubectl-vap-guard`), as printed.
    pub guard: Vec<Value>,
}

/// What `kubectl-vap install --print --namespace namespace` prints, by role.
pub fn printed(namespace: &str) -> Printed {
    let out = super::cli::output(super::cli::kubectl_vap().args([
        "install",
        "--print",
        "--namespace",
        namespace,
    ]));
    assert!(
        out.status.success(),
        "install --print: {}",
        super::cli::stderr(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut roles = BTreeMap::new();
    let mut guard = Vec::new();
    for doc in text.split("\n---\n") {
        let Ok(v) = serde_norway::from_str::<Value>(doc) else {
            continue;
        };
        if v["metadata"]["name"] == kubectl_vap::cli::install::GUARD_NAME {
            guard.push(v.clone());
        }
        if matches!(v["kind"].as_str(), Some("ClusterRole" | "Role")) {
            let meta = &v["metadata"];
            roles.insert(
                meta["name"].as_str().unwrap_or_default().to_string(),
                PrintedRole {
                    namespace: meta["namespace"].as_str().map(String::from),
                    rules: v["rules"].clone(),
                },
            );
        }
    }
    let mut take = |name: &str| {
        roles
            .remove(name)
            .unwrap_or_else(|| panic!("install --print prints no role {name}:\n{text}"))
    };
    Printed {
        cluster: take("kubectl-vap"),
        lease: take("kubectl-vap-lease"),
        events: take("kubectl-vap-events"),
        operator: take("kubectl-vap-operator"),
        guard,
    }
}

impl Printed {
    /// The printed guard, confining `user` instead of the ServiceAccount it names (the rest
    /// byte for byte as printed): for a test user, or one impersonated with `--as`.
    pub fn guard_for(&self, namespace: &str, user: &str) -> Vec<Value> {
        let sa = kubectl_vap::cli::install::service_account_user(namespace);
        let text = serde_json::to_string(&self.guard).expect("JSON");
        assert!(text.contains(&sa), "the guard names {sa}: {text}");
        serde_json::from_str(&text.replace(&sa, user)).expect("JSON")
    }

    /// The namespaced roles of the reconciler (the Lease's, the Events').
    fn reconciler_roles(&self) -> [(&str, &Value); 2] {
        [&self.lease, &self.events].map(|r| {
            (
                r.namespace.as_deref().expect("a Role has a namespace"),
                &r.rules,
            )
        })
    }

    /// Grants `user` the reconciler's roles as printed, each under `name`, but its ClusterRole
    /// with `cluster_rules` (the printed ones, or fewer).
    pub async fn grant_reconciler(
        &self,
        client: &kube::Client,
        name: &str,
        user: &str,
        cluster_rules: &Value,
    ) {
        testenv::rbac::grant_cluster(client, name, user, cluster_rules).await;
        for (namespace, rules) in self.reconciler_roles() {
            testenv::rbac::grant_in(client, namespace, name, user, rules).await;
        }
    }

    /// Removes what [`Printed::grant_reconciler`] granted as `name`.
    pub async fn revoke_reconciler(&self, client: &kube::Client, name: &str) {
        for (namespace, _) in self.reconciler_roles() {
            testenv::rbac::revoke(client, name, namespace).await;
        }
    }
}

/// Replaces the rules of ClusterRole `name` (a grant) with `rules`.
pub async fn set_cluster_rules(client: &kube::Client, name: &str, rules: &Value) {
    Api::<ClusterRole>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "rules": rules })),
        )
        .await
        .unwrap_or_else(|e| panic!("replacing the rules of ClusterRole {name}: {e}"));
}

/// Waits (30 s) until the API server's authorizer says `allowed` to `user` doing `attributes`
/// (a SubjectAccessReview's `resourceAttributes`: verb, group, resource, namespace, name): a
/// grant reaches it a moment after it is written.
pub async fn until_authorized(client: &kube::Client, user: &str, attributes: Value, allowed: bool) {
    let review: SubjectAccessReview = serde_json::from_value(
        json!({ "spec": { "user": user, "resourceAttributes": attributes } }),
    )
    .expect("a SubjectAccessReview");
    let api = Api::<SubjectAccessReview>::all(client.clone());
    let what = format!("the authorizer says allowed={allowed} for {user}: {attributes}");
    super::poll::eventually(&what, Duration::from_secs(30), || async {
        api.create(&PostParams::default(), &review)
            .await
            .ok()
            .and_then(|r| r.status)
            .is_some_and(|s| s.allowed == allowed)
    })
    .await
}

/// A client of `env`'s admin that impersonates `user` (as `--as` does): only `user`'s grants
/// apply to it.
pub async fn client_as(env: &testenv::TestEnv, user: &str) -> kube::Client {
    let conn = kubectl_vap::cluster::client::ConnectionOptions {
        kubeconfig: Some(env.kubeconfig_admin().display().to_string()),
        as_user: Some(user.to_string()),
        ..Default::default()
    };
    kubectl_vap::cluster::client_from(&conn, false)
        .await
        .unwrap_or_else(|e| panic!("a client as {user}: {e}"))
}
