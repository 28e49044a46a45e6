//! The default shape (`--policy-shape auto`, every flag at its default) on templates written
//! the way the Gatekeeper policy library writes them (issue 39), on a real kube-apiserver:
//! every constraint bound, every sample judged as expected; then the same cluster moved to
//! Gatekeeper's own shape, and every sample judged the same there.
//!
//! The templates are this project's, each written to hold one pattern the library uses and
//! the default once got wrong:
//! - a constraint with no `parameters` under a template that asks `has(variables.params.x)`
//!   (`variables.params` is `null`), and one whose parameters are all booleans under a template
//!   that runs a list macro over an absent field: the API server's type checker refused their
//!   inline VAPs when the parameters were typed literals;
//! - a template that reads `params` itself (`params.spec.parameters.x`), which only a VAP with
//!   a `paramKind` has;
//! - a constraint whose parameters are too long to be written into CEL (a 10,000-entry
//!   allow-list);
//! - a constraint kind whose name ends in `List`.
//!
//! And the type checker's warnings on a VAP as `policy-type-warning` findings (issue 38).

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{cli, cluster, poll};
use testenv::{TestEnv, gatekeeper};

/// The namespace every constraint here matches and every sample is tried in.
const NS: &str = "default-shape";
/// How long the admission plugin may take to see what `run` wrote: a policy whose constraint
/// kind is new may take up to ~30 s to configure (docs/generation.md).
const SETTLE: Duration = Duration::from_secs(120);

/// One template with its constraints and samples.
struct Case {
    template: Value,
    constraints: Vec<Value>,
    /// `(sample, denied with a message containing this)`; `None`: admitted.
    samples: Vec<(Value, Option<&'static str>)>,
}

fn template(kind: &str, properties: Value, source: Value) -> Value {
    let mut source = source;
    source["generateVAP"] = json!(true);
    gatekeeper::template(
        kind,
        "v1",
        json!({ "validation": { "openAPIV3Schema": { "type": "object", "properties": properties } } }),
        gatekeeper::cel_targets(source),
    )
}

/// A constraint of `kind` selecting `kinds` (core group) in [`NS`], with `parameters` if any.
fn constraint(kind: &str, name: &str, kinds: &[&str], parameters: Option<Value>) -> Value {
    let mut spec = json!({ "match": {
        "kinds": [{ "apiGroups": [""], "kinds": kinds }],
        "namespaces": [NS] } });
    if let Some(p) = parameters {
        spec["parameters"] = p;
    }
    gatekeeper::constraint(kind, name, spec)
}

fn pod(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    spec["containers"] = json!([{ "name": "c", "image": "registry.example/app:1.0" }]);
    json!({ "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "namespace": NS }, "spec": spec })
}

fn configmap(name: &str, labels: Value) -> Value {
    json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name, "namespace": NS, "labels": labels }, "data": { "k": "v" } })
}

fn cases() -> Vec<Case> {
    // No parameters at all: `variables.params` is null, asked with `has()`.
    let host_paths = Case {
        template: template(
            "K8sDefaultHostPaths",
            json!({ "allowedHostPaths": { "type": "array", "items": { "type": "object",
                "properties": { "pathPrefix": { "type": "string" } } } } }),
            json!({
                "variables": [{ "name": "allowedPaths", "expression":
                    "!has(variables.params.allowedHostPaths) ? [] : variables.params.allowedHostPaths" }],
                "validations": [{ "expression":
                    "!has(variables.anyObject.spec.volumes) || variables.anyObject.spec.volumes.all(v, !has(v.hostPath) || variables.allowedPaths.exists(p, v.hostPath.path.startsWith(p.pathPrefix)))",
                    "message": "a hostPath volume outside the allowed paths" }]
            }),
        ),
        constraints: vec![constraint(
            "K8sDefaultHostPaths",
            "no-host-paths",
            &["Pod"],
            None,
        )],
        samples: vec![
            (
                pod(
                    "with-host-path",
                    json!({ "volumes": [{ "name": "v", "hostPath": { "path": "/etc" } }] }),
                ),
                Some("a hostPath volume outside the allowed paths"),
            ),
            (pod("without-host-path", json!({})), None),
        ],
    };
    // Parameters that are all booleans, and a list macro over a field they do not have.
    let host_network = Case {
        template: template(
            "K8sDefaultHostNetwork",
            json!({ "hostNetwork": { "type": "boolean" },
                    "exemptImages": { "type": "array", "items": { "type": "string" } } }),
            json!({
                "variables": [{ "name": "exemptPrefixes", "expression":
                    "!has(variables.params.exemptImages) ? [] : variables.params.exemptImages.filter(i, i.endsWith('*')).map(i, i.replace('*', ''))" }],
                "validations": [{ "expression":
                    "!has(variables.anyObject.spec.hostNetwork) || !variables.anyObject.spec.hostNetwork || (has(variables.params.hostNetwork) && variables.params.hostNetwork) || variables.anyObject.spec.containers.all(c, variables.exemptPrefixes.exists(p, c.image.startsWith(p)))",
                    "message": "the host network is not allowed" }]
            }),
        ),
        constraints: vec![
            constraint(
                "K8sDefaultHostNetwork",
                "psp-host-network",
                &["Pod"],
                Some(json!({ "hostNetwork": false })),
            ),
            constraint(
                "K8sDefaultHostNetwork",
                "psp-host-network-empty",
                &["Pod"],
                Some(json!({})),
            ),
        ],
        samples: vec![
            (
                pod("host-network", json!({ "hostNetwork": true })),
                Some("the host network is not allowed"),
            ),
            (pod("pod-network", json!({ "hostNetwork": false })), None),
        ],
    };
    // `params` itself, as Gatekeeper's own VAPs have it.
    let reads_params = Case {
        template: template(
            "K8sDefaultForbiddenLabel",
            json!({ "label": { "type": "string" } }),
            json!({ "validations": [{ "expression":
                "!has(object.metadata.labels) || !(params.spec.parameters.label in object.metadata.labels)",
                "message": "a forbidden label" }] }),
        ),
        constraints: vec![constraint(
            "K8sDefaultForbiddenLabel",
            "no-legacy",
            &["ConfigMap"],
            Some(json!({ "label": "legacy" })),
        )],
        samples: vec![
            (
                configmap("labelled-legacy", json!({ "legacy": "yes" })),
                Some("a forbidden label"),
            ),
            (
                configmap("labelled-modern", json!({ "modern": "yes" })),
                None,
            ),
        ],
    };
    // Too long for CEL: 10,000 allowed values (and a second constraint that fits).
    let allowed: Vec<String> = (0..10_000).map(|i| format!("tier-{i:05}")).collect();
    let mut allowed_with_gold = allowed;
    allowed_with_gold.push("gold".into());
    let allow_list = Case {
        template: template(
            "K8sDefaultAllowList",
            json!({ "allowed": { "type": "array", "items": { "type": "string" } } }),
            json!({ "validations": [{ "expression":
                "!has(object.metadata.labels) || !('tier' in object.metadata.labels) || object.metadata.labels['tier'] in variables.params.allowed",
                "message": "a tier that is not allowed" }] }),
        ),
        constraints: vec![
            constraint(
                "K8sDefaultAllowList",
                "tiers",
                &["ConfigMap"],
                Some(json!({ "allowed": allowed_with_gold })),
            ),
            constraint(
                "K8sDefaultAllowList",
                "tiers-small",
                &["Secret"],
                Some(json!({ "allowed": ["silver"] })),
            ),
        ],
        samples: vec![
            (configmap("tier-gold", json!({ "tier": "gold" })), None),
            (
                configmap("tier-tin", json!({ "tier": "tin" })),
                Some("a tier that is not allowed"),
            ),
        ],
    };
    vec![host_paths, host_network, reads_params, allow_list]
}

/// The real binary as the admin of `env`, every default of its command line.
fn vap(env: &TestEnv, args: &[&str]) -> Output {
    cli::as_admin(cli::kubectl_vap_defaults(), env, args)
}

/// A dry-run create of `obj`: `None` admitted, `Some(message)` refused.
async fn refusal(client: &kube::Client, obj: &Value) -> Option<String> {
    cluster::refusal(client, obj, SETTLE).await
}

fn kind_of(case: &Case) -> &str {
    case.template["spec"]["crd"]["spec"]["names"]["kind"]
        .as_str()
        .expect("kind")
}

/// Whether `auto` keeps the case's template in one VAP with params: it reads `params` itself,
/// or a constraint of it cannot be written into CEL.
fn narrowed_by_auto(case: &Case) -> bool {
    matches!(
        kind_of(case),
        "K8sDefaultForbiddenLabel" | "K8sDefaultAllowList"
    )
}

/// Every sample of every case judged as expected, within [`SETTLE`] (the admission plugin
/// sees new policies late); a denial must come from a VAP whose name starts with what
/// `policy_of` gives for the case (as the API server quotes it), so a verdict of objects
/// already replaced does not count. `shape` names the shape in failures.
async fn every_sample_judged(
    client: &kube::Client,
    cases: &[Case],
    shape: &str,
    policy_of: impl Fn(&Case) -> String,
) {
    for case in cases {
        let kind = kind_of(case);
        let policy = policy_of(case);
        for (sample, denied_with) in &case.samples {
            let name = &sample["metadata"]["name"];
            let start = Instant::now();
            poll::within(SETTLE, poll::EVERY, || async {
                let got = refusal(client, sample).await;
                match (&got, denied_with) {
                    (None, None) => Ok(()),
                    (Some(m), Some(want)) if m.contains(want) && m.contains(&policy) => Ok(()),
                    _ => Err(got),
                }
            })
            .await
            .unwrap_or_else(|got| {
                panic!(
                    "{shape}: {kind} {name}: wanted {denied_with:?} from {policy}…, the server said {got:?}"
                )
            });
            eprintln!(
                "{shape}: {kind} {name} as expected after {:?}",
                start.elapsed()
            );
        }
    }
}

/// Issue 39's done-when for the default shape, on the patterns above: `run --once` with every
/// default converges (no VAP refused by the API server), `check` finds nothing, every
/// constraint is bound, every sample is judged as expected; and the same after the cluster is
/// moved to Gatekeeper's shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_the_default_shape_enforces_every_constraint_as_gatekeepers_does() {
    let (env, client) = cluster::private_env(&[NS, "gatekeeper-system"]).await;
    let cases = cases();
    for case in &cases {
        cluster::create_template(&client, &case.template).await;
    }
    cli::converge(&env, &[]);
    for case in &cases {
        for c in &case.constraints {
            cluster::create_constraint(&client, c).await;
        }
    }
    cli::converge(&env, &[]);
    let out = vap(&env, &["check", "-o", "json"]);
    let report = cli::stdout_json(&out);
    let problems: Vec<String> = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["severity"] != json!("info"))
        .map(|f| format!("{} {}: {}", f["code"], f["object"]["name"], f["message"]))
        .collect();
    assert_eq!(
        (out.status.code(), problems),
        (Some(0), vec![]),
        "converged"
    );

    // Every constraint bound, to the VAP of the shape `auto` chose for its template.
    let bindings = cluster::bindings(&client)
        .list(&Default::default())
        .await
        .expect("bindings");
    let bound_to = |kind: &str, name: &str| -> Option<String> {
        let binding = format!("gatekeeper-{}-{name}", kind.to_lowercase());
        bindings
            .items
            .iter()
            .find(|b| b.metadata.name.as_deref() == Some(binding.as_str()))
            .and_then(|b| b.spec.as_ref()?.policy_name.clone())
    };
    for case in &cases {
        let kind = kind_of(case);
        let template = kind.to_lowercase();
        for c in &case.constraints {
            let name = c["metadata"]["name"].as_str().expect("name");
            let policy = bound_to(kind, name).unwrap_or_else(|| panic!("{kind} {name} is bound"));
            // Inline unless the template reads `params` itself or a constraint cannot be
            // written into CEL: then one VAP with params serves them all.
            let wanted = if narrowed_by_auto(case) {
                format!("gatekeeper-{template}")
            } else {
                format!("gatekeeper-{template}.{name}")
            };
            assert_eq!(policy, wanted, "{kind} {name}");
        }
    }
    let template_policy = |case: &Case| format!("'gatekeeper-{}'", kind_of(case).to_lowercase());
    every_sample_judged(&client, &cases, "auto", |case| {
        if narrowed_by_auto(case) {
            template_policy(case)
        } else {
            format!("'gatekeeper-{}.", kind_of(case).to_lowercase())
        }
    })
    .await;

    // Gatekeeper's own shape: one VAP per template with params; the same verdicts, given by
    // those VAPs.
    cli::converge(&env, &["--policy-shape", "gatekeeper"]);
    every_sample_judged(&client, &cases, "gatekeeper", template_policy).await;
}

/// A template whose CEL is `expression`, with one constraint `c` on ConfigMaps in [`NS`].
fn type_check_case(kind: &str, expression: &str) -> (Value, Value) {
    let source = json!({ "validations": [{ "expression": expression, "message": "no" }] });
    (
        template(kind, json!({}), source),
        constraint(kind, "c", &["ConfigMap"], None),
    )
}

/// The `policy-type-warning` findings of one `check -o json`, as (VAP, message).
fn type_warnings(env: &TestEnv, extra: &[&str]) -> (Vec<(String, String)>, Value) {
    let mut args = vec!["check", "-o", "json"];
    args.extend_from_slice(extra);
    let report = cli::stdout_json(&vap(env, &args));
    let found = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["code"] == json!("policy-type-warning"))
        .map(|f| {
            let name = f["object"]["name"].as_str().unwrap_or_default();
            let message = f["message"].as_str().unwrap_or_default();
            (name.to_string(), message.to_string())
        })
        .collect();
    (found, report)
}

/// Polls `check -o json` (the type checker writes a VAP's status asynchronously) until its
/// `policy-type-warning` findings satisfy `done`; fails after 60 s with the report and `vap`.
async fn type_warnings_until(
    env: &TestEnv,
    extra: &[&str],
    vap_name: &str,
    what: &str,
    done: impl Fn(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let got = poll::within(Duration::from_secs(60), Duration::from_secs(1), || async {
        let (found, report) = type_warnings(env, extra);
        if done(&found) { Ok(found) } else { Err(report) }
    })
    .await;
    match got {
        Ok(found) => found,
        Err(report) => {
            let vap = cluster::policy(&env.client_admin().await, vap_name).await;
            let vap = serde_json::to_string_pretty(&vap).unwrap_or_default();
            panic!("{what}: not within 60 s: {report:#}\nthe VAP: {vap}")
        }
    }
}

/// The VAP's status once the type checker has seen its current generation.
async fn checked_status(client: &kube::Client, name: &str) -> Value {
    poll::within(Duration::from_secs(60), poll::EVERY, || async {
        let p = cluster::policy(client, name).await.expect("the VAP exists");
        let status = serde_json::to_value(&p.status).unwrap_or_default();
        match (p.metadata.generation, status["observedGeneration"].as_i64()) {
            (Some(g), Some(o)) if g == o => Ok(status),
            _ => Err(status),
        }
    })
    .await
    .unwrap_or_else(|s| panic!("{name}: its generation never type-checked: {s}"))
}

/// Makes the VAP's resource rules name version `v1` instead of `*` (as an edit by hand would):
/// the type checker skips every rule whose `apiVersions` holds a wildcard.
async fn name_versions(client: &kube::Client, name: &str) {
    let api = cluster::policies(client);
    let mut p = api.get(name).await.expect("the VAP");
    let spec = p.spec.as_mut().expect("spec");
    let rules = spec.match_constraints.as_mut().expect("matchConstraints");
    for r in rules.resource_rules.iter_mut().flatten() {
        r.api_versions = Some(vec!["v1".into()]);
    }
    api.replace(name, &Default::default(), &p)
        .await
        .expect("the VAP's update");
}

/// Issue 38: the type checker (kube-controller-manager's
/// `validatingadmissionpolicy-status-controller`) writes its warnings into a VAP's
/// `status.typeChecking.expressionWarnings`; `check` reports each on a VAP kubectl-vap owns as
/// `policy-type-warning`, naming the template (and the constraint, inline), the expression and
/// the checker's words; status makes no write. Measured on the way: the checker skips a rule
/// whose `apiVersions` holds `*`, which every VAP kubectl-vap writes has (a constraint names
/// groups and kinds, never versions), so the generated VAPs are not checked at all; the test
/// makes the rules name `v1`, as a VAP naming versions would, to have warnings to report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_the_type_checkers_warnings_are_findings() {
    let env = tokio::task::spawn_blocking(TestEnv::start)
        .await
        .expect("env");
    // The type checker is kube-controller-manager's, not the API server's.
    let _kcm = env
        .start_controller_manager_with(testenv::ControllerManagerOptions {
            controllers: vec!["validatingadmissionpolicy-status-controller".into()],
            extra_args: Vec::new(),
        })
        .await
        .expect("kube-controller-manager");
    let client = cluster::prepared(&env, &[NS, "gatekeeper-system"]).await;
    // A ConfigMap has no field `nosuchfield` (nor `spec`).
    let broken = type_check_case("K8sDefaultNoSuchField", "object.nosuchfield == 'x'");
    let sound = type_check_case("K8sDefaultSound", "object.metadata.name != 'forbidden'");
    for (t, _) in [&broken, &sound] {
        cluster::create_template(&client, t).await;
    }
    cli::converge(&env, &[]);
    for (_, c) in [&broken, &sound] {
        cluster::create_constraint(&client, c).await;
    }
    cli::converge(&env, &[]);

    // The default shape writes each constraint its own VAP, its rules at `apiVersions: ["*"]`:
    // the checker sees the generation and checks nothing.
    let (inline, inline_sound) = (
        "gatekeeper-k8sdefaultnosuchfield.c",
        "gatekeeper-k8sdefaultsound.c",
    );
    let status = checked_status(&client, inline).await;
    eprintln!("{inline} as generated: {status}");
    assert!(
        status["typeChecking"]["expressionWarnings"].is_null(),
        "the checker skips apiVersions *: {status}"
    );
    assert_eq!(type_warnings(&env, &[]).0, vec![], "nothing to report");
    let report = cli::stdout_json(&vap(&env, &["plan", "-o", "json"]));
    assert_eq!(
        report["actions"],
        json!([]),
        "status makes no write: {report:#}"
    );

    // Rules that name a version are checked: the broken template's VAP gets a warning, the
    // sound one's none.
    for name in [inline, inline_sound] {
        name_versions(&client, name).await;
    }
    let found = type_warnings_until(&env, &[], inline, "the warning on the inline VAP", |f| {
        f.iter().any(|(n, _)| n == inline)
    })
    .await;
    let status = checked_status(&client, inline_sound).await;
    eprintln!("inline: {found:#?}\n{inline_sound}: {status}");
    let (_, found) = (found, type_warnings(&env, &[]).0);
    assert_eq!(found.len(), 1, "only the broken template's VAP: {found:#?}");
    let message = &found[0].1;
    for words in [
        inline,
        "template k8sdefaultnosuchfield",
        "constraint K8sDefaultNoSuchField c",
        "spec.validations[0].expression",
        "undefined field 'nosuchfield'",
    ] {
        assert!(message.contains(words), "{words}: {message}");
    }

    // `run` rewrites the rules (their spec differs) and the warning goes with the generation
    // it was about.
    cli::converge(&env, &[]);
    type_warnings_until(
        &env,
        &[],
        inline,
        "the warning gone after run",
        <[_]>::is_empty,
    )
    .await;

    // The narrowed shape: one VAP per template, owned by the template.
    cli::converge(&env, &["--policy-shape", "narrowed"]);
    assert_eq!(
        type_warnings(&env, &["--policy-shape", "narrowed"]).0,
        vec![],
        "as generated: nothing checked"
    );
    let narrowed = "gatekeeper-k8sdefaultnosuchfield";
    name_versions(&client, narrowed).await;
    let shape = ["--policy-shape", "narrowed"];
    let found = type_warnings_until(
        &env,
        &shape,
        narrowed,
        "the warning on the narrowed VAP",
        |f| f.iter().any(|(n, _)| n == narrowed),
    )
    .await;
    eprintln!("narrowed: {found:#?}");
    assert_eq!(found.len(), 1, "{found:#?}");
    let message = &found[0].1;
    for words in [
        "template k8sdefaultnosuchfield",
        "spec.validations[0].expression",
        "undefined field 'nosuchfield'",
    ] {
        assert!(message.contains(words), "{words}: {message}");
    }
    assert!(!message.contains("constraint"), "{message}");
}

/// The namespace of the move probe.
const MOVES_NS: &str = "shape-moves";

/// A constraint of the move probe's template: ConfigMaps in [`MOVES_NS`] carry label `l<i>`.
fn label_constraint(i: usize) -> Value {
    let mut c = constraint(
        "K8sDefaultMoveLabel",
        &format!("c{i}"),
        &["ConfigMap"],
        Some(json!({ "key": format!("l{i}") })),
    );
    c["spec"]["match"]["namespaces"] = json!([MOVES_NS]);
    c
}

/// What the probe saw go wrong: a compliant request refused or a violating one admitted.
#[derive(Debug, Default)]
struct Probe {
    sent: usize,
    wrong: Vec<String>,
}

/// Probes until `stop`: every ~100 ms a compliant ConfigMap (every label of the 11
/// constraints) must be admitted and a violating one (no label) denied.
async fn probe_until(client: kube::Client, stop: tokio::sync::watch::Receiver<bool>) -> Probe {
    let labels: serde_json::Map<String, Value> =
        (0..=10).map(|i| (format!("l{i}"), json!("x"))).collect();
    let mut compliant = configmap("compliant", Value::Object(labels));
    compliant["metadata"]["namespace"] = json!(MOVES_NS);
    let mut violating = configmap("violating", json!({}));
    violating["metadata"]["namespace"] = json!(MOVES_NS);
    let mut probe = Probe::default();
    let start = Instant::now();
    while !*stop.borrow() {
        let at = start.elapsed();
        if let Some(why) = cluster::refusal(&client, &compliant, SETTLE).await {
            probe
                .wrong
                .push(format!("{at:?}: compliant refused: {why}"));
        }
        if cluster::refusal(&client, &violating, SETTLE)
            .await
            .is_none()
        {
            probe.wrong.push(format!("{at:?}: violating admitted"));
        }
        probe.sent += 2;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    probe
}

/// Issue 39: `auto` moves a template between shapes when it passes 10 constraints (its
/// constraints' own VAPs → one VAP with params) and back. A probe of compliant and violating
/// selected requests every ~100 ms, from before the first move to after the second, under
/// `failurePolicy: Fail`, sees no compliant request refused and no violating one admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_moving_between_shapes_refuses_nothing_and_admits_nothing() {
    let (env, client) = cluster::private_env(&[MOVES_NS, "gatekeeper-system"]).await;
    let mut source = json!({
        "failurePolicy": "Fail",
        "validations": [{ "expression":
            "has(object.metadata.labels) && variables.params.key in object.metadata.labels",
            "message": "a required label is missing" }] });
    source["generateVAP"] = json!(true);
    let t = template(
        "K8sDefaultMoveLabel",
        json!({ "key": { "type": "string" } }),
        source,
    );
    cluster::create_template(&client, &t).await;
    let mut run = cli::Served::spawn({
        let mut cmd = cli::kubectl_vap_defaults();
        cmd.arg("--kubeconfig")
            .arg(env.kubeconfig_admin())
            .args(["run", "--binding-wait=0s"]);
        cmd
    });
    run.wait_ready(SETTLE, poll::EVERY).await;
    cluster::until_kind_served(&client, "K8sDefaultMoveLabel", SETTLE).await;
    for i in 0..10 {
        cluster::create_constraint(&client, &label_constraint(i)).await;
    }
    let policies = cluster::policies(&client);
    let vap_names = || async {
        let list = policies.list(&Default::default()).await.expect("VAPs");
        list.items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .filter(|n| n.starts_with("gatekeeper-k8sdefaultmovelabel"))
            .collect::<Vec<_>>()
    };
    poll::eventually("ten inline VAPs, in force", SETTLE, || async {
        let mut violating = configmap("violating", json!({}));
        violating["metadata"]["namespace"] = json!(MOVES_NS);
        vap_names().await.len() == 10
            && cluster::refusal(&client, &violating, SETTLE)
                .await
                .is_some()
    })
    .await;

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let prober = tokio::spawn(probe_until(client.clone(), stopped));
    tokio::time::sleep(Duration::from_secs(2)).await;
    // 10 → 11: one VAP with params.
    cluster::create_constraint(&client, &label_constraint(10)).await;
    poll::eventually("one VAP with params", SETTLE, || async {
        vap_names().await == ["gatekeeper-k8sdefaultmovelabel"]
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    // 11 → 10: a VAP per constraint again.
    cluster::constraints(&client, "K8sDefaultMoveLabel")
        .delete("c10", &Default::default())
        .await
        .expect("delete c10");
    poll::eventually("ten inline VAPs again", SETTLE, || async {
        vap_names().await.len() == 10
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.send(true).expect("the prober listens");
    let probe = prober.await.expect("the prober");
    eprintln!("{} probes", probe.sent);
    assert!(probe.sent > 20, "the probe ran: {probe:?}");
    assert!(probe.wrong.is_empty(), "{:#?}", probe.wrong);
    assert!(
        run.exited_within(Duration::ZERO).await.is_none(),
        "run still runs"
    );
}

/// Issue 42 (item 4): a template whose CEL the API server's compiler refuses is the
/// template's error before any constraint exists, though the default writes no VAP for a
/// template without constraints: `check` reports a `template-error` on the template with the
/// server's words (a dry-run of the VAP it would write), `run` says so (its status entry in
/// Gatekeeper's `ConstraintTemplatePodStatus`: e2e_gatekeeper), and a sound template beside it
/// gets neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_a_broken_templates_cel_is_its_error_before_any_constraint() {
    let env = tokio::task::spawn_blocking(TestEnv::start)
        .await
        .expect("env");
    let client = cluster::prepared(&env, &[NS, "gatekeeper-system"]).await;
    let validations = |expression: &str| json!({ "validations": [{ "expression": expression, "message": "never" }] });
    let broken = template(
        "K8sDefaultBrokenCel",
        json!({}),
        validations("variables.nosuchvariable == 'x'"),
    );
    let sound = template(
        "K8sDefaultSoundCel",
        json!({}),
        validations("object.metadata.name != ''"),
    );
    for t in [&broken, &sound] {
        cluster::create_template(&client, t).await;
    }
    // `run` writes the constraint CRDs and no VAP (no constraint), and says what the server
    // thinks of the broken template's CEL.
    let out = vap(&env, &["run", "--once"]);
    let said = cli::stderr(&out);
    assert!(
        said.contains("refuses the VAP template k8sdefaultbrokencel generates"),
        "{said}"
    );
    assert!(!said.contains("k8sdefaultsoundcel generates"), "{said}");
    let vaps = cluster::policies(&client)
        .list(&Default::default())
        .await
        .expect("VAPs");
    assert!(
        vaps.items.iter().all(|p| !p
            .metadata
            .name
            .as_deref()
            .unwrap_or_default()
            .starts_with("gatekeeper-k8sdefault")),
        "a dry-run writes nothing"
    );
    // `check`: an error on the template, with the server's words, none on the sound one.
    let out = vap(&env, &["check", "-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", cli::stderr(&out));
    let report = cli::stdout_json(&out);
    let on = |name: &str| {
        report["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["code"] == "template-error" && f["object"]["name"] == name)
            .cloned()
            .collect::<Vec<_>>()
    };
    let found = on("k8sdefaultbrokencel");
    assert_eq!(found.len(), 1, "{report:#}");
    assert_eq!(found[0]["object"]["kind"], "ConstraintTemplate");
    let message = found[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("nosuchvariable"), "{message}");
    assert_eq!(on("k8sdefaultsoundcel"), Vec::<Value>::new(), "{report:#}");
    // The table prints the server's diagram as lines, never as `\n` escapes.
    let table = vap(&env, &["check"]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("template-error"), "{text}");
    assert!(!text.contains("\\n"), "{text}");
}
