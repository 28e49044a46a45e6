//! `install --print`: the in-cluster manifests (Deployment, PodDisruptionBudget, ServiceAccount,
//! least-privilege RBAC, the guard policy that confines the service account's writes where
//! RBAC cannot, optionally the metrics Service) for the image `scripts/image` builds.
//!
//! The image facts below are also written in `scripts/image` and the `Dockerfile`;
//! `tests/image_config.rs` and `tests/e2e_image.rs` check that all three agree.

use super::exit::Exit;

/// The tag `scripts/image` and `scripts/release` give the image of this version.
pub const DEFAULT_IMAGE: &str = concat!(
    "ghcr.io/kubectl-vap/kubectl-vap:",
    env!("CARGO_PKG_VERSION")
);
/// The image's numeric user and group: non-root, so `runAsNonRoot` can verify it.
pub const IMAGE_UID: u32 = 65532;
/// The image's entrypoint (for `docker run IMAGE`). The Deployment does not rely on it: its
/// container states the binary ([`IMAGE_ENTRYPOINT`]`[0]`) and `run --in-cluster` itself.
pub const IMAGE_ENTRYPOINT: [&str; 3] = ["/kubectl-vap", "run", "--in-cluster"];
/// `/metrics`, `/healthz` and `/readyz` (`run --metrics-addr`); the image exposes it.
pub const METRICS_PORT: u16 = 8080;

const NAME: &str = "kubectl-vap";
pub use crate::core::guard::GUARD_NAME;
/// Where the Events about templates go (cluster-scoped objects' events live in `default`).
const EVENTS_NAMESPACE: &str = "default";

/// What `install --print` is asked for.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    /// Where everything namespaced goes, the Lease included.
    pub namespace: String,
    pub image: String,
    /// Also a ClusterIP Service for the metrics port (for a Prometheus scrape config).
    pub metrics_service: bool,
}

/// `install --print`: the in-cluster manifests with least-privilege RBAC.
pub fn install(opts: &InstallOptions) -> anyhow::Result<Exit> {
    super::stdio::stdout(&install_manifests(opts)?)?;
    Ok(Exit::Clean)
}

/// The ClusterRole `run` needs: exactly the verbs and resources it uses.
pub fn cluster_role_rules() -> serde_json::Value {
    serde_json::json!([
        { "apiGroups": ["templates.gatekeeper.sh"], "resources": ["constrainttemplates"], "verbs": ["list", "watch"] },
        // get: the API server requires it on a VAP's paramKind from whoever writes the VAP.
        { "apiGroups": ["constraints.gatekeeper.sh"], "resources": ["*"], "verbs": ["get", "list", "watch"] },
        // create/update/delete: constraint CRDs are ours (Gatekeeper's generate operation is off).
        { "apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["list", "watch", "create", "update", "delete"] },
        { "apiGroups": ["admissionregistration.k8s.io"],
          "resources": ["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
          "verbs": ["list", "watch", "create", "update", "delete"] },
        // Gatekeeper's Config: the namespaces it excludes from its webhook, left out of the VAPs.
        { "apiGroups": ["config.gatekeeper.sh"], "resources": ["configs"], "verbs": ["list", "watch"] },
        // Gatekeeper's webhook: what its own shape's VAPs match (--policy-shape gatekeeper).
        { "apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"], "verbs": ["list", "watch"] }
    ])
}

/// The Role for the Lease `lease_name`, in the lease namespace only: get and update on that
/// Lease alone (`resourceNames`; list and watch by name for a copy that follows its holder),
/// and on the ConfigMap that carries requests from other copies
/// (get, list and watch by name, patch to answer); create cannot be narrowed to a name (the
/// API server authorizes a create before the object, and so its name, is known), so it has its
/// own rules. Plus the Events about the Lease ("reconcile everything"), which live beside it.
pub fn lease_role_rules(lease_name: &str) -> serde_json::Value {
    let requests = crate::controller::requests_configmap(lease_name);
    let mut rules = serde_json::json!([
        { "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease_name], "verbs": ["get", "list", "watch", "update"] },
        { "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"] },
        { "apiGroups": [""], "resources": ["configmaps"], "resourceNames": [requests], "verbs": ["get", "list", "watch", "patch"] },
        { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"] }
    ]);
    if let (Some(rules), serde_json::Value::Array(events)) =
        (rules.as_array_mut(), events_role_rules())
    {
        rules.extend(events);
    }
    rules
}

/// The rules for the Kubernetes Events that report outcomes, in each namespace they go to:
/// `default` (Events about templates, which are cluster-scoped) and the Lease's (Events about
/// the Lease). Events have generated names: neither rule can name them.
pub fn events_role_rules() -> serde_json::Value {
    serde_json::json!([
        { "apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"] }
    ])
}

/// The rules in Gatekeeper's namespace: its pod statuses, where its status controller reads
/// them (kubectl-vap's entries say what it generated: docs/reconciler.md, issue 38; the names
/// come from templates and constraints, so no rule can name them, and the guard confines the
/// writes to objects labelled with kubectl-vap's id); and its Deployments, listed there only to
/// see whether Gatekeeper's own generator runs (cluster-wide, the list would read every
/// Deployment's spec, their env values among them).
pub fn pod_status_role_rules() -> serde_json::Value {
    serde_json::json!([
        { "apiGroups": [crate::model::STATUS_GROUP],
          "resources": ["constrainttemplatepodstatuses", "constraintpodstatuses"],
          "verbs": ["list", "create", "patch", "delete"] },
        { "apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"] }
    ])
}

/// What a person at a TUI needs, wherever the reconciler runs: read everything the TUI shows,
/// the Lease (who reconciles), the Events (what it did), and ask the holder to replay or
/// reconcile through the requests ConfigMap. Read-only but for that one ConfigMap; bind it
/// with `kubectl create clusterrolebinding NAME --clusterrole=kubectl-vap-operator --user=…`.
pub fn operator_rules(lease_name: &str) -> serde_json::Value {
    let read = ["get", "list", "watch"];
    serde_json::json!([
        { "apiGroups": ["templates.gatekeeper.sh"], "resources": ["constrainttemplates"], "verbs": read },
        { "apiGroups": ["constraints.gatekeeper.sh"], "resources": ["*"], "verbs": read },
        { "apiGroups": ["status.gatekeeper.sh"], "resources": ["*"], "verbs": read },
        { "apiGroups": ["config.gatekeeper.sh"], "resources": ["configs"], "verbs": read },
        { "apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"], "verbs": read },
        { "apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": read },
        { "apiGroups": ["admissionregistration.k8s.io"],
          "resources": ["validatingadmissionpolicies", "validatingadmissionpolicybindings"], "verbs": read },
        { "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease_name], "verbs": ["get", "list", "watch"] },
        { "apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["list", "watch"] },
        { "apiGroups": [""], "resources": ["configmaps"],
          "resourceNames": [crate::controller::requests_configmap(lease_name)],
          "verbs": ["get", "list", "watch", "patch"] }
    ])
}

/// The username of the in-cluster reconciler: its ServiceAccount's.
pub fn service_account_user(namespace: &str) -> String {
    format!("system:serviceaccount:{namespace}:{NAME}")
}

/// The guard (`core::guard`) of the reconciler whose Lease is `namespace`/`lease`, confining
/// `user`.
pub fn guard_objects(namespace: &str, lease: &str, user: &str) -> [serde_json::Value; 2] {
    let requests = crate::controller::requests_configmap(lease);
    crate::core::guard::guard_objects(namespace, lease, &requests, user)
}

/// The manifests as one multi-document YAML stream.
pub fn install_manifests(opts: &InstallOptions) -> Result<String, serde_norway::Error> {
    let mut out = String::from(
        "# kubectl-vap in-cluster reconciler. The namespace must exist (it is not created here), and\n# so must Gatekeeper's, gatekeeper-system, where it writes its pod statuses.\n",
    );
    for d in install_objects(opts) {
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(&d)?);
    }
    Ok(out)
}

/// The Role `kubectl-vap-<suffix>` in `namespace` with `rules`, and the RoleBinding that grants
/// it to our ServiceAccount (in `sa_namespace`).
fn role_with_binding(
    suffix: &str,
    namespace: &str,
    labels: &serde_json::Value,
    rules: serde_json::Value,
    sa_namespace: &str,
) -> [serde_json::Value; 2] {
    use serde_json::json;
    let name = format!("{NAME}-{suffix}");
    let metadata = json!({ "name": name, "namespace": namespace, "labels": labels });
    [
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": metadata,
            "rules": rules
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": metadata,
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name },
            "subjects": [{ "kind": "ServiceAccount", "name": NAME, "namespace": sa_namespace }]
        }),
    ]
}

/// The manifests as objects, in apply order: who the reconciler is and what it may do
/// ([`identity_and_rights`]), then what runs.
pub fn install_objects(opts: &InstallOptions) -> Vec<serde_json::Value> {
    use serde_json::json;
    let ns = opts.namespace.as_str();
    let labels = json!({ "app.kubernetes.io/name": NAME, "app.kubernetes.io/managed-by": NAME });
    let selector = json!({ "app.kubernetes.io/name": NAME });
    let lease = crate::controller::DEFAULT_LEASE_NAME;
    let mut docs = identity_and_rights(ns, lease, &labels);
    docs.extend([
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": crate::controller::requests_configmap(lease),
                "namespace": ns, "labels": labels
            }
        }),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": NAME, "namespace": ns, "labels": labels },
            "spec": {
                // Every copy watches; the Lease lets one write. The second takes over in ~1 s
                // after a release (rollout, drain) instead of waiting for a new pod.
                "replicas": 2,
                "selector": { "matchLabels": selector },
                "template": {
                    "metadata": { "labels": labels },
                    "spec": {
                        "serviceAccountName": NAME,
                        // The in-cluster config reads the token and CA from the kubelet's mount.
                        "automountServiceAccountToken": true,
                        "securityContext": {
                            "runAsNonRoot": true,
                            "runAsUser": IMAGE_UID,
                            "runAsGroup": IMAGE_UID,
                            "seccompProfile": { "type": "RuntimeDefault" }
                        },
                        // Two copies on one node would leave nothing when that node goes.
                        "affinity": { "podAntiAffinity": { "preferredDuringSchedulingIgnoredDuringExecution": [{
                            "weight": 100,
                            "podAffinityTerm": {
                                "labelSelector": { "matchLabels": selector },
                                "topologyKey": "kubernetes.io/hostname"
                            }
                        }] } },
                        "containers": [{
                            "name": NAME,
                            "image": opts.image,
                            // Stated, not left to the image's entrypoint: an image built
                            // otherwise (or a later one) still runs the reconciler.
                            "command": [IMAGE_ENTRYPOINT[0]],
                            "args": ["run", "--in-cluster",
                                     format!("--lease-namespace={ns}"),
                                     "--expect-guard",
                                     format!("--metrics-addr=0.0.0.0:{METRICS_PORT}")],
                            // Published with the Lease renewals: views name the pod that leads.
                            "env": [{ "name": "POD_NAME",
                                      "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }],
                            "ports": [{ "name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP" }],
                            "livenessProbe": { "httpGet": { "path": "/healthz", "port": "metrics" },
                                               "periodSeconds": 10, "failureThreshold": 3 },
                            // Ready once every watch has listed: until then the stores are partial.
                            "readinessProbe": { "httpGet": { "path": "/readyz", "port": "metrics" },
                                                "periodSeconds": 5, "failureThreshold": 3 },
                            // docs/benchmarks.md: peak RSS 89–102 MiB converging 5,200 objects,
                            // 185 MiB at 10,400, ~8.5 KiB more per binding. The limit leaves room
                            // for ~45,000 bindings; no CPU limit (throttling only slows convergence).
                            "resources": { "requests": { "cpu": "50m", "memory": "128Mi" },
                                           "limits": { "memory": "512Mi" } },
                            "securityContext": {
                                "allowPrivilegeEscalation": false,
                                "readOnlyRootFilesystem": true,
                                "capabilities": { "drop": ["ALL"] }
                            }
                        }]
                    }
                }
            }
        }),
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": { "name": NAME, "namespace": ns, "labels": labels },
            // A drain evicts one copy at a time; the other holds (or takes) the Lease.
            "spec": { "maxUnavailable": 1, "selector": { "matchLabels": selector } }
        }),
    ]);
    if opts.metrics_service {
        docs.push(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": format!("{NAME}-metrics"), "namespace": ns, "labels": labels },
            "spec": {
                "selector": selector,
                "ports": [{ "name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP" }]
            }
        }));
    }
    docs
}

/// The reconciler's ServiceAccount in `ns`, its roles and their bindings, the guard, and the
/// operator's ClusterRole: everything `install --print` grants, in apply order.
fn identity_and_rights(
    ns: &str,
    lease: &str,
    labels: &serde_json::Value,
) -> Vec<serde_json::Value> {
    use serde_json::json;
    let mut docs = vec![
        json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": { "name": NAME, "namespace": ns, "labels": labels }
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": NAME, "labels": labels },
            "rules": cluster_role_rules()
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": NAME, "labels": labels },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME },
            "subjects": [{ "kind": "ServiceAccount", "name": NAME, "namespace": ns }]
        }),
    ];
    docs.extend(role_with_binding(
        "lease",
        ns,
        labels,
        lease_role_rules(lease),
        ns,
    ));
    docs.extend(role_with_binding(
        "events",
        EVENTS_NAMESPACE,
        labels,
        events_role_rules(),
        ns,
    ));
    docs.extend(role_with_binding(
        "status",
        crate::core::options::DEFAULT_GATEKEEPER_NAMESPACE,
        labels,
        pod_status_role_rules(),
        ns,
    ));
    docs.extend(guard_objects(ns, lease, &service_account_user(ns)));
    docs.push(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": format!("{NAME}-operator"), "labels": labels },
        "rules": operator_rules(lease)
    }));
    docs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(text: &str) -> Vec<serde_json::Value> {
        text.split("\n---\n")
            .filter_map(|d| serde_norway::from_str::<serde_json::Value>(d).ok())
            .filter(|v| v.is_object())
            .collect()
    }

    fn opts(metrics_service: bool) -> InstallOptions {
        InstallOptions {
            namespace: "vap-system".into(),
            image: "example/img:1".into(),
            metrics_service,
        }
    }

    #[test]
    fn install_prints_least_privilege_manifests_without_a_namespace() {
        let out = install_manifests(&opts(false)).expect("yaml");
        let docs = docs(&out);
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "Role",
                "RoleBinding",
                "Role",
                "RoleBinding",
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding",
                "ClusterRole",
                "ConfigMap",
                "Deployment",
                "PodDisruptionBudget"
            ]
        );
        // The lease rights live only in the Role, in the lease namespace.
        let role = &docs[3];
        assert_eq!(role["metadata"]["namespace"], "vap-system");
        assert_eq!(
            role["rules"],
            lease_role_rules(crate::controller::DEFAULT_LEASE_NAME)
        );
        // Only create, which cannot be narrowed, names no object; and Events (generated names).
        for rule in role["rules"].as_array().into_iter().flatten() {
            if rule["resources"] == serde_json::json!(["events"]) {
                assert_eq!(
                    rule["verbs"],
                    serde_json::json!(["create", "patch"]),
                    "{rule}"
                );
            } else if rule["verbs"] != serde_json::json!(["create"]) {
                let named = if rule["resources"] == serde_json::json!(["leases"]) {
                    "kubectl-vap"
                } else {
                    "kubectl-vap-requests"
                };
                assert_eq!(rule["resourceNames"], serde_json::json!([named]), "{rule}");
            }
        }
        // Events about templates go to `default`, create and patch only (the Lease's beside it).
        assert_eq!(docs[5]["metadata"]["namespace"], "default");
        assert_eq!(docs[5]["rules"], events_role_rules());
        // Gatekeeper's pod statuses, in Gatekeeper's namespace only.
        assert_eq!(docs[7]["metadata"]["namespace"], "gatekeeper-system");
        assert_eq!(docs[7]["rules"], pod_status_role_rules());
        // The operator's role reads, and writes only the requests ConfigMap.
        assert_eq!(docs[11]["metadata"]["name"], "kubectl-vap-operator");
        for rule in docs[11]["rules"].as_array().into_iter().flatten() {
            let writes = rule["verbs"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| !["get", "list", "watch"].contains(&v.as_str().unwrap_or("*")));
            if writes {
                assert_eq!(
                    rule["resources"],
                    serde_json::json!(["configmaps"]),
                    "{rule}"
                );
                assert_eq!(
                    rule["resourceNames"],
                    serde_json::json!(["kubectl-vap-requests"])
                );
            }
        }
        let cluster = serde_json::to_string(&docs[1]["rules"]).unwrap_or_default();
        assert!(!cluster.contains("leases"));
        // No wildcard verbs, no write verbs outside the admission objects.
        for rule in docs[1]["rules"].as_array().into_iter().flatten() {
            let verbs: Vec<&str> = rule["verbs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str())
                .collect();
            assert!(!verbs.contains(&"*"));
            let writes_allowed = ["admissionregistration.k8s.io", "apiextensions.k8s.io"];
            if !writes_allowed.iter().any(|g| rule["apiGroups"][0] == *g) {
                assert!(
                    verbs.iter().all(|v| ["get", "list", "watch"].contains(v)),
                    "{rule}"
                );
            }
        }
        assert!(!out.contains("kind: Namespace"));
    }

    /// The guard confines the service account, and nobody else, to constraint CRDs and its
    /// own Lease and ConfigMap; the reconciler would never take it for its own (no managed-by
    /// label, no `gatekeeper-` name). Its CEL is judged by a real API server in
    /// tests/e2e_reconciler/rbac.rs.
    #[test]
    fn the_guard_names_the_service_account_its_group_and_its_objects() {
        let docs = install_objects(&opts(false));
        let vap = docs
            .iter()
            .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
            .expect("the guard");
        assert_eq!(vap["metadata"]["name"], GUARD_NAME);
        assert!(
            vap["metadata"]["labels"]
                .get(crate::model::MANAGED_BY_LABEL)
                .is_none()
        );
        assert!(!GUARD_NAME.starts_with("gatekeeper-"));
        assert_eq!(
            vap["spec"]["matchConditions"][0]["expression"],
            "request.userInfo.username == \"system:serviceaccount:vap-system:kubectl-vap\""
        );
        let text = vap["spec"]["validations"].to_string();
        for needle in [
            "constraints.gatekeeper.sh",
            "\\\"kubectl-vap\\\"",
            "\\\"kubectl-vap-requests\\\"",
            "\\\"vap-system\\\"",
        ] {
            assert!(text.contains(needle), "{needle} in {text}");
        }
        let binding = docs
            .iter()
            .find(|d| d["kind"] == "ValidatingAdmissionPolicyBinding")
            .expect("its binding");
        assert_eq!(binding["spec"]["policyName"], GUARD_NAME);
        assert_eq!(
            binding["spec"]["validationActions"],
            serde_json::json!(["Deny"])
        );
    }

    #[test]
    fn the_deployment_runs_the_reconciler_hardened_with_probes() {
        let docs = install_objects(&opts(false));
        let deployment = docs
            .iter()
            .position(|d| d["kind"] == "Deployment")
            .expect("a Deployment");
        let pod = &docs[deployment]["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(docs[deployment]["spec"]["replicas"], 2);
        assert_eq!(
            c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.name"
        );
        assert_eq!(c["image"], "example/img:1");
        // `run --in-cluster` stated, not left to the image's entrypoint.
        assert_eq!(c["command"], serde_json::json!(["/kubectl-vap"]));
        assert_eq!(
            c["args"],
            serde_json::json!([
                "run",
                "--in-cluster",
                "--lease-namespace=vap-system",
                "--expect-guard",
                "--metrics-addr=0.0.0.0:8080"
            ])
        );
        assert_eq!(c["ports"][0]["containerPort"], METRICS_PORT);
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
        for probe in ["livenessProbe", "readinessProbe"] {
            assert_eq!(c[probe]["httpGet"]["port"], c["ports"][0]["name"]);
        }
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["securityContext"]["runAsUser"], IMAGE_UID);
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        let sc = &c["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["allowPrivilegeEscalation"], false);
        assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
        assert!(c["resources"]["limits"]["memory"].is_string());
        // The budget and the Deployment select the same pods.
        assert_eq!(
            docs[deployment + 1]["spec"]["selector"],
            docs[deployment]["spec"]["selector"],
            "PodDisruptionBudget selector"
        );
        assert_eq!(docs[deployment + 1]["spec"]["maxUnavailable"], 1);
    }

    #[test]
    fn the_metrics_service_is_optional() {
        assert!(
            !install_objects(&opts(false))
                .iter()
                .any(|d| d["kind"] == "Service")
        );
        let docs = install_objects(&opts(true));
        let svc = docs.last().expect("a Service");
        assert_eq!(svc["kind"], "Service");
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
        let deployment = docs
            .iter()
            .find(|d| d["kind"] == "Deployment")
            .expect("a Deployment");
        assert_eq!(
            svc["spec"]["selector"],
            deployment["spec"]["selector"]["matchLabels"]
        );
    }

    #[test]
    fn the_default_image_is_this_versions_tag() {
        assert_eq!(
            DEFAULT_IMAGE,
            format!(
                "ghcr.io/kubectl-vap/kubectl-vap:{}",
                env!("CARGO_PKG_VERSION")
            )
        );
    }
}
