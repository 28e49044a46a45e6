//! `kubectl vap test --offline`: which bindings and constraints in the files select each
//! object, computed without a cluster (`KUBECONFIG` points nowhere on purpose; the
//! `--kubeconfig` flag is refused there, as every connection flag is where nothing connects).

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use serde_json::Value;
use std::process::Output;
use support::cli::{kubeconfig, kubectl_vap, output_with_stdin};

const POLICIES: &str = r#"
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sRequiredLabels
metadata: {name: cms-in-prod}
spec:
  match:
    kinds: [{apiGroups: [""], kinds: [ConfigMap]}]
    namespaces: [prod]
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sRequiredLabels
metadata: {name: not-kube}
spec:
  enforcementAction: warn
  match:
    excludedNamespaces: ["kube-*"]
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sRequiredLabels
metadata: {name: by-namespace-label}
spec:
  match:
    namespaceSelector: {matchLabels: {env: prod}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: team-binding}
spec:
  policyName: team-policy
  validationActions: [Deny]
  matchResources:
    objectSelector: {matchLabels: {team: a}}
"#;

const OBJECTS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: prod, labels: {team: b}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: proxy, namespace: kube-system}
"#;

fn vap(args: &[&str], stdin: &str) -> Output {
    output_with_stdin(
        kubectl_vap()
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .args(args),
        stdin.as_bytes(),
    )
}

/// `object name` → `binding` → `selects`.
fn verdicts(out: &Output) -> Vec<(String, String, String)> {
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let mut rows = Vec::new();
    for o in v["objects"].as_array().expect("objects") {
        for s in o["selectedBy"].as_array().expect("selectedBy") {
            rows.push((
                o["object"]["name"].as_str().unwrap_or_default().to_string(),
                s["binding"].as_str().unwrap_or_default().to_string(),
                s["selects"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    rows
}

#[test]
fn offline_test_says_which_constraints_select_each_object() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policies = dir.path().join("policies.yaml");
    std::fs::write(&policies, POLICIES).expect("write");
    let p = policies.display().to_string();
    let out = vap(
        &["test", "--offline", "-f", &p, "-f", "-", "-o", "json"],
        OBJECTS,
    );
    assert_eq!(out.status.code(), Some(0), "offline explains: exit 0");
    let rows = verdicts(&out);
    let get = |obj: &str, binding: &str| -> String {
        rows.iter()
            .find(|(o, b, _)| o == obj && b == binding)
            .map(|r| r.2.clone())
            .unwrap_or_else(|| panic!("{obj}/{binding} in {rows:?}"))
    };
    assert_eq!(
        get("settings", "gatekeeper-k8srequiredlabels-cms-in-prod"),
        "yes"
    );
    assert_eq!(
        get("proxy", "gatekeeper-k8srequiredlabels-cms-in-prod"),
        "no"
    );
    assert_eq!(
        get("settings", "gatekeeper-k8srequiredlabels-not-kube"),
        "yes"
    );
    assert_eq!(get("proxy", "gatekeeper-k8srequiredlabels-not-kube"), "no");
    // A namespace's labels are not in the files: said, not guessed.
    assert_eq!(
        get(
            "settings",
            "gatekeeper-k8srequiredlabels-by-namespace-label"
        ),
        "unknown"
    );
    // Someone else's binding, judged on its own matchResources.
    assert_eq!(get("settings", "team-binding"), "no");

    let table = vap(&["test", "--offline", "-f", &p, "-f", "-"], OBJECTS);
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("no      gatekeeper-k8srequiredlabels-not-kube (K8sRequiredLabels/not-kube) [Warn, planned]: spec.match.excludedNamespaces lists kube-system"),
        "{text}"
    );
}

/// Bad input: cannot tell (2); no input at all: the command line is wrong (3).
#[test]
fn bad_input_exits_2_and_no_input_3() {
    let out = vap(&["test", "--offline", "-f", "-"], "kind: ConfigMap\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("<stdin>:1"),
        "names the place"
    );
    let out = vap(&["test", "--offline"], "");
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs -f"));
}

#[test]
fn as_group_needs_as() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = kubeconfig(dir.path(), "https://127.0.0.1:1");
    let out = output_with_stdin(
        kubectl_vap().arg("--kubeconfig").arg(&kubeconfig).args([
            "test",
            "-f",
            "-",
            "--as-group",
            "admins",
        ]),
        OBJECTS.as_bytes(),
    );
    assert_eq!(out.status.code(), Some(3), "a usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--as-group needs --as"));
}

/// The policies given twice (a copy of the file): each policy object counts once — the last
/// copy, as `check` and `kubectl apply -f` take it — and each ignored copy is named on stderr.
#[test]
fn policies_given_twice_count_once_and_are_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policies = dir.path().join("policies.yaml");
    let copy = dir.path().join("copy.yaml");
    std::fs::write(&policies, POLICIES).expect("write");
    std::fs::write(&copy, POLICIES).expect("write");
    let (p, c) = (policies.display().to_string(), copy.display().to_string());
    let once = vap(
        &["test", "--offline", "-f", &p, "-f", "-", "-o", "json"],
        OBJECTS,
    );
    let twice = vap(
        &[
            "test",
            "--offline",
            "-f",
            &p,
            "-f",
            &c,
            "-f",
            "-",
            "-o",
            "json",
        ],
        OBJECTS,
    );
    assert_eq!(verdicts(&once), verdicts(&twice));
    let err = String::from_utf8_lossy(&twice.stderr);
    assert!(
        err.contains(&format!(
            "{p}:2 is ignored: it is in the input again at {c}:2"
        )),
        "{err}"
    );
}

/// `test -n NS` as kubectl's `-n`: an object that names no namespace is judged in NS (offline,
/// here: the constraint for `prod` selects it; without `-n` its namespace is not known); one
/// that names another namespace is refused (exit 2), naming its place, as kubectl refuses it.
#[test]
fn test_n_puts_objects_without_a_namespace_there() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policies = dir.path().join("policies.yaml");
    std::fs::write(&policies, POLICIES).expect("write");
    let p = policies.display().to_string();
    let bare = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bare}\n";
    let selects = |extra: &[&str]| {
        let args = [
            &["test", "--offline", "-f", &p, "-f", "-", "-o", "json"],
            extra,
        ]
        .concat();
        let out = vap(&args, bare);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let ns = report["objects"][0]["object"]["namespace"].clone();
        let verdict = verdicts(&out)
            .into_iter()
            .find(|(o, b, _)| o == "bare" && b == "gatekeeper-k8srequiredlabels-cms-in-prod")
            .map(|r| r.2)
            .unwrap_or_default();
        (ns, verdict)
    };
    assert_eq!(
        selects(&["-n", "prod"]),
        (Value::from("prod"), "yes".to_string())
    );
    assert_eq!(
        selects(&["--namespace", "dev"]),
        (Value::from("dev"), "no".to_string())
    );
    let (ns, verdict) = selects(&[]);
    assert_eq!(ns, Value::Null);
    assert_ne!(verdict, "yes", "without -n the namespace is not known");

    let out = vap(
        &["test", "--offline", "-n", "dev", "-f", "-"],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: prod}\n",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("<stdin>:1") && err.contains("\"prod\"") && err.contains("-n prod"),
        "{err}"
    );
}

/// Issue 42, item 7: a samples folder holds fixtures beside its objects (gatekeeper-library's
/// AdmissionReview of a webhook request). `test -f` skips each with one line naming file and
/// line, and judges the rest (before: the fixture was an object, and live a Rust Debug dump
/// with exit 2 for the whole run). Only fixtures: nothing to test, exit 2.
#[test]
fn a_fixture_beside_the_objects_is_skipped_with_one_line() {
    let review = r#"
apiVersion: admission.k8s.io/v1
kind: AdmissionReview
request:
  uid: "1"
  kind: {group: "", version: v1, kind: Pod}
  operation: CREATE
"#;
    let input = format!("{OBJECTS}---{review}");
    let out = vap(&["test", "--offline", "-f", "-", "-o", "json"], &input);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let skipped: Vec<&str> = stderr.lines().filter(|l| l.contains("skipped")).collect();
    assert_eq!(skipped.len(), 1, "{stderr}");
    assert!(
        skipped[0].contains("AdmissionReview") && skipped[0].contains("<stdin>:10"),
        "{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let kinds: Vec<&str> = v["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .filter_map(|o| o["object"]["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["ConfigMap", "ConfigMap"]);
    let out = vap(&["test", "--offline", "-f", "-"], review);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no object to test"));
}
