//! `render`, `render --static` and `check --static` on files, with the real binary. No
//! cluster (the round trip on a real API server: `e2e_render.rs`; static manifests loaded by a
//! real kube-apiserver: `e2e_versions.rs`).

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;
use support::cli::{kubectl_vap_defaults, output, stderr, stdout_json};
use support::library;

fn vap(args: &[&str]) -> Output {
    output(kubectl_vap_defaults().args(args).env_remove("KUBECONFIG"))
}

fn lib() -> String {
    library::root().display().to_string()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The rendering without its `# from:` line (which names the input files).
fn without_from(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with("# from:"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Every library sample's template and constraint, as YAML documents in one list.
fn library_docs() -> Vec<String> {
    let mut docs = Vec::new();
    for (name, _) in library::SAMPLES {
        for file in ["template.yaml", "constraint.yaml"] {
            let path = library::dir(name).join(file);
            docs.push(std::fs::read_to_string(&path).expect("sample"));
        }
    }
    docs
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path.display().to_string()
}

fn items(out: &Output) -> Vec<Value> {
    stdout_json(out)["items"].as_array().expect("items").clone()
}

fn names(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn render_is_the_same_bytes_twice_and_whatever_the_input_order() {
    let first = vap(&["render", "-f", &lib()]);
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let second = vap(&["render", "-f", &lib()]);
    assert_eq!(first.stdout, second.stdout, "same input, same bytes");

    // The same documents in one file, in reverse order: the same objects, same bytes (but
    // for the header line that names the input).
    let dir = tempfile::tempdir().expect("tmp");
    let mut docs = library_docs();
    // A second constraint of one kind, so that the order within a kind is at stake too.
    docs.push(docs[1].replace("name: repo-is-internal", "name: also-internal"));
    let forward = write(dir.path(), "forward.yaml", &docs.join("\n---\n"));
    docs.reverse();
    let reversed = write(dir.path(), "all.yaml", &docs.join("\n---\n"));
    let one = vap(&["render", "-f", &forward]);
    let other = vap(&["render", "-f", &reversed]);
    assert_eq!(other.status.code(), Some(0), "{}", stderr(&other));
    assert_eq!(without_from(&stdout(&one)), without_from(&stdout(&other)));
    assert!(stdout(&one).contains("also-internal"));

    let text = stdout(&first);
    assert!(
        text.starts_with("# Rendered by kubectl vap render"),
        "{text}"
    );
    for line in [
        "# from: files ",
        "# selection: everything",
        "--policy-shape=auto",
        "# shapes: k8sallowedrepos=inline",
        "# 12 objects",
    ] {
        assert!(text.contains(line), "the header says {line:?}: {text}");
    }
    // JSON: the same objects, as a List, in the same order.
    let json = vap(&["render", "-f", &lib(), "-o", "json"]);
    let list = stdout_json(&json);
    assert_eq!(
        (list["apiVersion"].as_str(), list["kind"].as_str()),
        (Some("v1"), Some("List"))
    );
    let from_yaml: Vec<Value> = serde_norway::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("yaml doc"))
        .filter(|v: &Value| !v.is_null())
        .collect();
    assert_eq!(&from_yaml, list["items"].as_array().expect("items"));
    let n = names(&from_yaml);
    let kinds: Vec<&str> = n
        .iter()
        .map(|n| n.split('/').next().unwrap_or_default())
        .collect();
    let mut sorted = kinds.clone();
    sorted.sort_by_key(|k| match *k {
        "CustomResourceDefinition" => 0,
        "ValidatingAdmissionPolicy" => 1,
        _ => 2,
    });
    assert_eq!(kinds, sorted, "CRDs, then VAPs, then bindings: {n:?}");
}

#[test]
fn every_object_carries_its_labels_and_owner_with_the_uid_the_input_gives() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut docs = library_docs();
    // The first template with a uid, as `kubectl get -o yaml` prints it; the others without.
    docs[0] = docs[0].replacen("metadata:\n", "metadata:\n  uid: 0f0e-template-uid\n", 1);
    docs[1] = docs[1].replacen("metadata:\n", "metadata:\n  uid: 0f0e-constraint-uid\n", 1);
    let input = write(dir.path(), "in.yaml", &docs.join("\n---\n"));
    let out = vap(&["render", "-f", &input, "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for o in items(&out) {
        assert_eq!(
            o["metadata"]["labels"]["app.kubernetes.io/managed-by"], "kubectl-vap",
            "{o}"
        );
        let owner = &o["metadata"]["ownerReferences"][0];
        assert_eq!(owner["controller"], true, "{o}");
        let expected = match owner["name"].as_str() {
            Some("k8sallowedrepos") => json!("0f0e-template-uid"),
            Some("repo-is-internal") => json!("0f0e-constraint-uid"),
            // No uid in the input: none written (an empty one would be refused).
            _ => Value::Null,
        };
        assert_eq!(owner["uid"], expected, "{o}");
    }
}

#[test]
fn a_template_or_a_constraint_is_selected_by_name_and_an_unknown_name_is_exit_2() {
    let out = vap(&["render", "-f", &lib(), "-o", "json", "k8sreplicalimits"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        names(&items(&out)),
        [
            "CustomResourceDefinition/k8sreplicalimits.constraints.gatekeeper.sh",
            "ValidatingAdmissionPolicy/gatekeeper-k8sreplicalimits.replicas-1-to-3",
            "ValidatingAdmissionPolicyBinding/gatekeeper-k8sreplicalimits-replicas-1-to-3",
        ]
    );
    // A constraint (kind without case, as kubectl takes it): what it owns only.
    let out = vap(&[
        "render",
        "-f",
        &lib(),
        "-o",
        "json",
        "k8sdisallowedtags/no-latest",
    ]);
    assert_eq!(
        names(&items(&out)),
        [
            "ValidatingAdmissionPolicy/gatekeeper-k8sdisallowedtags.no-latest",
            "ValidatingAdmissionPolicyBinding/gatekeeper-k8sdisallowedtags-no-latest",
        ]
    );
    // Narrowed: the template's one VAP is the template's, the binding the constraint's.
    let out = vap(&[
        "render",
        "-f",
        &lib(),
        "-o",
        "json",
        "--policy-shape=narrowed",
        "K8sDisallowedTags/no-latest",
    ]);
    assert_eq!(
        names(&items(&out)),
        ["ValidatingAdmissionPolicyBinding/gatekeeper-k8sdisallowedtags-no-latest"]
    );
    let out = vap(&["render", "-f", &lib(), "no-such-template", "K8sNope/x"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no-such-template, K8sNope/x not in files"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing rendered");
}

#[test]
fn dir_output_writes_one_file_per_object_and_removes_only_its_own_stale_files() {
    let dir = tempfile::tempdir().expect("tmp");
    let outdir = dir.path().join("out");
    let out = vap(&[
        "render",
        "-f",
        &lib(),
        "-o",
        &format!("dir={}", outdir.display()),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut files: Vec<String> = std::fs::read_dir(&outdir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 12, "{files:?}");
    assert!(
        files.contains(
            &"validatingadmissionpolicybinding-gatekeeper-k8sreplicalimits-replicas-1-to-3.yaml"
                .to_string()
        ),
        "{files:?}"
    );
    let one = std::fs::read_to_string(outdir.join(&files[0])).expect("file");
    assert!(one.starts_with("# Rendered by kubectl vap render"), "{one}");
    // A file of someone else's stays; ours whose object is no longer selected goes.
    std::fs::write(outdir.join("mine.yaml"), "kind: ConfigMap\n").expect("write");
    let out = vap(&[
        "render",
        "-f",
        &lib(),
        "--output-dir",
        &outdir.display().to_string(),
        "k8sreplicalimits",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let left: Vec<String> = std::fs::read_dir(&outdir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left.len(), 4, "3 objects and the other file: {left:?}");
    assert!(left.contains(&"mine.yaml".to_string()));
    assert!(stderr(&out).contains("removed "), "{}", stderr(&out));
}

#[test]
fn bad_input_gets_what_check_gives() {
    let dir = tempfile::tempdir().expect("tmp");
    // Unreadable: the same message (file and line) and exit 2.
    let broken = write(
        dir.path(),
        "broken.yaml",
        "kind: ConstraintTemplate\nmetadata: [\n",
    );
    let render = vap(&["render", "-f", &broken]);
    let check = vap(&["check", "-f", &broken]);
    assert_eq!(render.status.code(), Some(2));
    assert_eq!(check.status.code(), Some(2));
    assert_eq!(stderr(&render), stderr(&check));
    assert!(
        stderr(&render).contains("broken.yaml"),
        "{}",
        stderr(&render)
    );

    // A constraint that cannot be bound (Deny and Warn): check's finding, exit 1, and the
    // rest is rendered.
    let mut docs = library_docs();
    docs[1] = docs[1].replace("enforcementAction: deny", "enforcementAction: scoped\n  scopedEnforcementActions:\n  - action: deny\n    enforcementPoints: [{name: vap.k8s.io}]\n  - action: warn\n    enforcementPoints: [{name: vap.k8s.io}]");
    let input = write(dir.path(), "in.yaml", &docs.join("\n---\n"));
    let render = vap(&["render", "-f", &input, "-o", "json"]);
    let check = stdout_json(&vap(&["check", "-f", &input, "-o", "json"]));
    assert_eq!(render.status.code(), Some(1), "{}", stderr(&render));
    let err = stderr(&render);
    let finding = check["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["code"] == "constraint-error")
        .expect("check's constraint-error");
    assert!(err.contains("constraint-error"), "{err}");
    assert!(
        err.contains(finding["message"].as_str().expect("message")),
        "the same words as check: {err}"
    );
    let n = names(&items(&render));
    assert!(!n.iter().any(|n| n.contains("repo-is-internal")), "{n:?}");
    assert!(
        n.iter().any(|n| n.contains("no-latest")),
        "the rest is rendered: {n:?}"
    );
}

/// The library with the k8srequiredlabels template reading `params` directly.
fn with_params_template(dir: &Path) -> String {
    let mut docs = library_docs();
    let i = docs
        .iter()
        .position(|d| d.contains("name: k8srequiredlabels"))
        .expect("template");
    docs[i] = docs[i].replace(
        "expression: \"variables.params.labels.all(",
        "expression: \"params.spec.parameters.labels.all(",
    );
    write(dir, "in.yaml", &docs.join("\n---\n"))
}

#[test]
fn static_manifests_are_renamed_ownerless_paramless_and_refused_where_they_cannot_be() {
    let out = vap(&["render", "--static", "-f", &lib(), "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let objs = items(&out);
    assert_eq!(objs.len(), 8, "{:?}", names(&objs));
    for o in &objs {
        let name = o["metadata"]["name"].as_str().expect("name");
        assert!(name.ends_with(".static.k8s.io"), "{name}");
        assert!(name.len() <= 253);
        assert!(o["metadata"]["ownerReferences"].is_null(), "{o}");
        assert!(
            o["spec"]["paramKind"].is_null() && o["spec"]["paramRef"].is_null(),
            "{o}"
        );
        let constraint = o["metadata"]["annotations"]["kubectl-vap.io/constraint"]
            .as_str()
            .expect("the constraint it came from");
        assert!(constraint.contains('/'), "{constraint}");
        if o["kind"] == "ValidatingAdmissionPolicyBinding" {
            let policy = o["spec"]["policyName"].as_str().expect("policyName");
            assert!(policy.ends_with(".static.k8s.io"), "{policy}");
            assert!(
                objs.iter().any(|p| p["metadata"]["name"] == policy),
                "{policy} is in the set"
            );
        }
    }
    // Whatever --policy-shape says: static is inline.
    let narrowed = vap(&[
        "render",
        "--static",
        "-f",
        &lib(),
        "-o",
        "json",
        "--policy-shape=narrowed",
    ]);
    assert_eq!(narrowed.stdout, out.stdout);
    // The YAML stream carries the AdmissionConfiguration that loads it.
    let yaml = stdout(&vap(&["render", "--static", "-f", &lib()]));
    for line in [
        "#   kind: AdmissionConfiguration",
        "#       kind: ValidatingAdmissionPolicyConfiguration",
        "#       staticManifestsDir: \"/etc/kubernetes/admission/kubectl-vap\"",
        "ManifestBasedAdmissionControlConfig=true",
    ] {
        assert!(yaml.contains(line), "{line}: {yaml}");
    }

    // A template that reads `params` itself: refused for each of its constraints, the rest
    // rendered.
    let dir = tempfile::tempdir().expect("tmp");
    let input = with_params_template(dir.path());
    let out = vap(&["render", "--static", "-f", &input, "-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("static-refused"), "{err}");
    assert!(err.contains("reads `params` directly"), "{err}");
    let n = names(&items(&out));
    assert_eq!(n.len(), 6, "{n:?}");
    assert!(!n.iter().any(|n| n.contains("k8srequiredlabels")), "{n:?}");
    // Not refused by the plain render: the API objects have a paramKind in the narrowed shape.
    let plain = vap(&[
        "render",
        "-f",
        &input,
        "-o",
        "json",
        "--policy-shape=narrowed",
    ]);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));

    // A constraint too large to inline: refused, with the reason.
    let mut docs = library_docs();
    let big: Vec<String> = (0..7000)
        .map(|i| format!("\"registry-{i:05}.example/\""))
        .collect();
    docs[1] = docs[1].replace(
        "    repos:\n      - \"registry.internal.example/\"",
        &format!("    repos: [{}]", big.join(", ")),
    );
    let input = write(dir.path(), "big.yaml", &docs.join("\n---\n"));
    let out = vap(&["render", "--static", "-f", &input, "-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("static-refused") && err.contains("cannot be rendered inline"),
        "{err}"
    );
    assert!(
        !names(&items(&out))
            .iter()
            .any(|n| n.contains("repo-is-internal"))
    );
}

#[test]
fn check_static_reports_manifests_whose_constraint_changed_or_is_gone() {
    let dir = tempfile::tempdir().expect("tmp");
    let statics: PathBuf = dir.path().join("static");
    let out = vap(&[
        "render",
        "--static",
        "-f",
        &lib(),
        "--output-dir",
        &statics.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let static_codes = |input: &str| -> (Option<i32>, Vec<(String, String)>) {
        let out = vap(&[
            "check",
            "-f",
            input,
            "--static",
            &statics.display().to_string(),
            "-o",
            "json",
        ]);
        let report = stdout_json(&out);
        let found = report["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .filter(|f| f["code"].as_str().is_some_and(|c| c.starts_with("static-")))
            .map(|f| {
                (
                    f["code"].as_str().unwrap_or_default().to_string(),
                    f["object"]["name"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        (out.status.code(), found)
    };
    assert_eq!(static_codes(&lib()).1, vec![], "just rendered: in line");

    // A parameter changed: its VAP is out of sync (the binding is not).
    let mut docs = library_docs();
    docs[3] = docs[3].replace("tags: [\"latest\"]", "tags: [\"latest\", \"dev\"]");
    // A constraint deleted: both its manifests dangle.
    docs.remove(7);
    let input = write(dir.path(), "changed.yaml", &docs.join("\n---\n"));
    let (code, found) = static_codes(&input);
    assert_eq!(code, Some(1));
    assert_eq!(
        found,
        vec![
            (
                "static-out-of-sync".to_string(),
                "gatekeeper-k8sdisallowedtags.no-latest.static.k8s.io".to_string()
            ),
            (
                "static-dangling".to_string(),
                "gatekeeper-k8srequiredlabels.deployments-have-owner.static.k8s.io".to_string()
            ),
            (
                "static-dangling".to_string(),
                "gatekeeper-k8srequiredlabels-deployments-have-owner.static.k8s.io".to_string()
            ),
        ]
    );
    // Not a folder: a usage error.
    let out = vap(&["check", "-f", &lib(), "--static", &input]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
}
