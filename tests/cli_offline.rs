//! The real binary on files: `check`, `plan`, `version`, bad input. No cluster.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use serde_json::Value;
use std::process::Output;
use support::cli::{
    kubeconfig, kubectl_vap, kubectl_vap_defaults, output, output_with_stdin, stderr, stdout_json,
};

fn vap(args: &[&str]) -> Output {
    output(kubectl_vap().args(args).env_remove("KUBECONFIG"))
}

fn demo() -> String {
    format!("{}/assets/demo", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn check_on_the_demo_lists_every_finding_code_and_exits_1() {
    // The README's command as a user runs it: every default of the command line (`auto`).
    let out = output(kubectl_vap_defaults().args(["check", "-f", &demo(), "-o", "json"]));
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let mut codes: Vec<&str> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f["code"].as_str().expect("code"))
        .collect();
    codes.sort();
    codes.dedup();
    let mut all: Vec<&str> = kubectl_vap::core::Code::ALL
        .iter()
        .map(|c| c.as_str())
        // Only a cluster shows these (`check --audit`'s violations and cost overruns, the writes its API server
        // refuses, its type checker's warnings, the leader's writer conflicts), and only input
        // that holds an object twice
        // shows input-duplicate (the demo is one consistent snapshot; see
        // `duplicates_are_named`); the static-* codes only `render --static` and
        // `check --static DIR` (tests/render_offline.rs).
        .filter(|c| {
            ![
                "constraint-violations",
                "policy-cost-exceeded",
                "write-refused",
                "writer-conflict",
                "guard-missing",
                "policy-type-warning",
                "input-duplicate",
                "static-refused",
                "static-out-of-sync",
                "static-dangling",
            ]
            .contains(c)
        })
        .collect();
    all.sort();
    assert_eq!(codes, all);
    let f = &report["findings"][0];
    for key in ["code", "severity", "object", "message"] {
        assert!(!f[key].is_null(), "finding has {key}: {f}");
    }
    for key in ["apiVersion", "kind", "name"] {
        assert!(f["object"][key].is_string(), "object has {key}");
    }
    assert!(report["summary"]["errors"].as_u64().expect("errors") > 0);
}

#[test]
fn check_table_and_yaml_agree_with_json() {
    let json: Value =
        serde_json::from_slice(&vap(&["check", "-f", &demo(), "-o", "json"]).stdout).expect("json");
    let yaml: Value =
        serde_norway::from_slice(&vap(&["check", "-f", &demo(), "-o", "yaml"]).stdout)
            .expect("yaml");
    assert_eq!(json, yaml);
    let table = String::from_utf8(vap(&["check", "-f", &demo()]).stdout).expect("utf8");
    assert!(table.starts_with("SEVERITY"), "{table}");
    let n = json["findings"].as_array().expect("findings").len();
    assert_eq!(
        table
            .lines()
            .filter(|l| l.starts_with("ERROR") || l.starts_with("WARNING") || l.starts_with("INFO"))
            .count(),
        n
    );
}

#[test]
fn plan_on_the_demo_lists_writes_with_diffs() {
    let out = vap(&["plan", "-f", &demo(), "-o", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let plan: Value = serde_json::from_slice(&out.stdout).expect("JSON plan");
    let actions = plan["actions"].as_array().expect("actions");
    for verb in ["create", "update", "delete"] {
        assert!(
            actions.iter().any(|a| a["verb"] == verb),
            "plan has a {verb}"
        );
    }
    assert!(
        actions
            .iter()
            .all(|a| a["diff"].as_str().is_some_and(|d| d.contains("@@")))
    );
    // Foreign objects (another controller's CRD, VAP and binding in the demo) are never in the
    // plan, whatever the shape.
    let foreign = [
        "k8shttpsonly.constraints.gatekeeper.sh",
        "gatekeeper-k8shttpsonly.ingress-https-only",
        "gatekeeper-k8sallowedrepos-payments-allowed-repos",
    ];
    let defaults = output(kubectl_vap_defaults().args(["plan", "-f", &demo(), "-o", "json"]));
    let defaults: Value = serde_json::from_slice(&defaults.stdout).expect("JSON plan");
    for a in actions
        .iter()
        .chain(defaults["actions"].as_array().expect("actions"))
    {
        let name = a["object"]["name"].as_str().expect("name");
        assert!(!foreign.contains(&name), "{a}");
    }
    let text = String::from_utf8(vap(&["plan", "-f", &demo()]).stdout).expect("utf8");
    assert!(
        text.contains("Plan: ")
            && text.contains(
                "delete validatingadmissionpolicybinding/gatekeeper-search-ns-must-have-owner"
            ),
        "{text}"
    );
}

#[test]
fn a_clean_input_exits_0() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("t.yaml");
    std::fs::write(
        &p,
        "apiVersion: templates.gatekeeper.sh/v1\nkind: ConstraintTemplate\nmetadata: {name: k8sx}\nspec:\n  crd: {spec: {names: {kind: K8sX}}}\n  targets:\n  - target: admission.k8s.gatekeeper.sh\n    code: [{engine: Rego, source: {rego: package x}}]\n",
    )
    .expect("write");
    let out = vap(&["check", "-f", p.to_str().expect("utf8 path")]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("No findings"));
}

/// `vap ARGS` with `input` on its standard input.
fn vap_stdin(args: &[&str], input: &[u8]) -> Output {
    output_with_stdin(kubectl_vap().args(args).env_remove("KUBECONFIG"), input)
}

#[test]
fn stdin_is_read_for_dash() {
    let out = vap_stdin(
        &["check", "-f", "-", "-o", "json"],
        b"apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sLost\nmetadata: {name: x}\n",
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["findings"][0]["code"], "constraint-orphan");
    assert_eq!(out.status.code(), Some(0), "info only");
}

#[test]
fn bad_input_names_file_and_line_and_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("broken.yaml");
    std::fs::write(
        &p,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n---\napiVersion: v1\nkind: [oops\n",
    )
    .expect("write");
    let out = vap(&["check", "-f", p.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("broken.yaml:6") || err.contains("broken.yaml:7"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    let out = vap(&["check", "-f", "/no/such/path"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/path: no such file"));

    let out = vap(&["check", "-o", "xml", "-f", &demo()]);
    assert_eq!(out.status.code(), Some(3), "usage errors exit 3");
}

/// What a bug report needs, for people and as JSON: version, commit, build date, target, and
/// the API versions spoken.
#[test]
fn version_says_what_a_bug_report_needs() {
    let out = vap(&["version"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    let mut lines = table.lines();
    // `kubectl vap --version`'s line first.
    assert_eq!(
        lines.next(),
        Some(format!("kubectl-vap {}", env!("CARGO_PKG_VERSION")).as_str())
    );
    for label in ["commit:", "built:", "target:", "k8s-openapi:", "APIs:"] {
        assert!(
            table.lines().any(|l| l.starts_with(label)),
            "{label} in\n{table}"
        );
    }
    assert!(
        table.contains("admissionregistration.k8s.io  v1 "),
        "{table}"
    );

    let out = vap(&["version", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("version -o json is JSON");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    // Tests run from a checkout: a commit, not `unknown`.
    let commit = v["gitCommit"].as_str().expect("gitCommit");
    let sha = commit.trim_end_matches("-dirty");
    assert!(
        sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit()),
        "{commit}"
    );
    let built = v["buildDate"].as_str().expect("buildDate");
    assert!(
        chrono::DateTime::parse_from_rfc3339(built).is_ok(),
        "{built}"
    );
    let target = v["target"].as_str().expect("target");
    assert!(
        target.starts_with(std::env::consts::ARCH) && target.contains(std::env::consts::OS),
        "{target}"
    );
    let level = v["k8sOpenapi"]["kubernetes"]
        .as_str()
        .expect("k8sOpenapi.kubernetes");
    assert!(
        level
            .strip_prefix("1.")
            .is_some_and(|m| m.parse::<u32>().is_ok()),
        "{level}"
    );
    let versions = |group: &str| -> Vec<String> {
        let api = v["apis"]
            .as_array()
            .expect("apis")
            .iter()
            .find(|a| a["group"] == group)
            .unwrap_or_else(|| panic!("{group} in {v}"));
        serde_json::from_value(api["versions"].clone()).expect("versions")
    };
    assert_eq!(versions("admissionregistration.k8s.io"), ["v1"]);
    assert_eq!(versions("templates.gatekeeper.sh"), ["v1"]);
    assert_eq!(versions("constraints.gatekeeper.sh"), ["v1beta1"]);
    // The table and JSON say the same.
    assert!(
        table.contains(&format!("commit:      {commit}\n")),
        "{table}"
    );
}

#[test]
fn run_in_cluster_outside_a_pod_says_so_in_a_json_line_and_exits_2() {
    let out = output(
        kubectl_vap()
            .args(["run", "--in-cluster", "--once"])
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT"),
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    let v: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    assert_eq!(v["level"], "ERROR", "{last}");
    let msg = v["fields"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("in-cluster configuration is not available") && msg.contains("--kubeconfig"),
        "{msg}"
    );
}

/// A kubeconfig in `dir` whose API server is port 1 on loopback: nothing listens, the
/// connection is refused at once.
fn dead_kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    kubeconfig(dir, "https://127.0.0.1:1")
}

#[test]
fn a_dead_api_server_is_named_once_with_the_cause_and_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dead_kubeconfig(dir.path());
    for args in [&["check"][..], &["run", "--once"][..]] {
        let out = output(
            kubectl_vap()
                .args(args)
                .arg("--kubeconfig")
                .arg(&kubeconfig),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(
            lines.len(),
            1,
            "{args:?}: one line, no duplicate client logs: {stderr}"
        );
        let line = lines[0];
        assert!(line.starts_with("error: "), "{line}");
        assert!(line.contains("https://127.0.0.1:1"), "says where: {line}");
        assert!(line.contains("Connection refused"), "says why: {line}");
        assert_eq!(
            line.matches("(Connect)").count(),
            1,
            "each cause once: {line}"
        );
    }
}

/// `--context NAME` the kubeconfig lacks is said in kubectl's words (`context "x" does not
/// exist`), with a close name when there is one, else the contexts there are; a kubeconfig that
/// cannot be read names its path once.
#[test]
fn a_missing_context_or_kubeconfig_is_said_as_kubectl_says_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The kubeconfig's one context is called "u" (its user).
    let kubeconfig = dead_kubeconfig(dir.path());
    for (context, hint) in [
        ("U", "did you mean \"u\"?"),
        ("nosuch", "the kubeconfig's contexts: u"),
    ] {
        let out = output(
            kubectl_vap()
                .args(["check", "--context", context, "--kubeconfig"])
                .arg(&kubeconfig),
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("context \"{context}\" does not exist")) && err.contains(hint),
            "{context}: {err}"
        );
        assert!(!err.contains("failed to load current context"), "{err}");
    }
    let missing = dir.path().join("nowhere.yaml");
    let out = output(kubectl_vap().arg("check").arg("--kubeconfig").arg(&missing));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(
        err.matches(&*missing.to_string_lossy()).count(),
        1,
        "the path once: {err}"
    );
}

/// `plan --exit-code`: 1 when writes are planned (as `git diff --exit-code`), 0 when none;
/// without the flag `plan` exits 0 either way.
#[test]
fn plan_exit_code_says_whether_writes_are_planned() {
    assert_eq!(vap(&["plan", "-f", &demo()]).status.code(), Some(0));
    let out = vap(&["plan", "--exit-code", "-f", &demo()]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A Rego-only template, no CRDs in the input: nothing to write.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("t.yaml");
    std::fs::write(
        &file,
        "apiVersion: templates.gatekeeper.sh/v1\nkind: ConstraintTemplate\nmetadata: {name: k8sa}\nspec: {crd: {spec: {names: {kind: K8sA}}}, targets: [{target: admission.k8s.gatekeeper.sh, rego: package a}]}\n",
    )
    .expect("write");
    let out = vap(&["plan", "--exit-code", "-f", &file.to_string_lossy()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("No changes"));
}

/// Flags that would be ignored are refused (usage: exit 3): TUI flags on subcommands, files for
/// commands that act on a cluster; `reconcile` says what it needs.
#[test]
fn flags_that_would_be_ignored_are_refused() {
    let out = vap(&["check", "--readonly", "-f", &demo()]);
    assert_eq!(out.status.code(), Some(3));
    let help = vap(&["check", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        !help.contains("--readonly") && !help.contains("--reconcile"),
        "{help}"
    );
    let out = vap(&["replay", "k8sx", "-f", &demo()]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unexpected argument '-f'"));
    let out = vap(&["reconcile"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--all"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let help = vap(&["reconcile", "--help"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("Reconcile every template"));
}

/// Logs on a pipe or in a file carry no colour codes (a CI log or `run 2>run.log` would show
/// them as noise), and there are logs to look at: a warning from `check`, and `run`'s debug
/// logs written to a file.
#[test]
fn logs_off_a_terminal_carry_no_colour_codes() {
    let out = vap(&["check", "--log", "kubectl_vap=loud[[", "-f", &demo()]);
    let err = stderr(&out);
    assert!(
        err.contains("WARN") && err.contains("is not a log filter"),
        "{err}"
    );
    assert!(!out.stderr.contains(&0x1b), "{err:?}");

    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dead_kubeconfig(dir.path());
    let log = dir.path().join("run.log");
    let file = std::fs::File::create(&log).expect("log file");
    let out = output(
        kubectl_vap()
            .args(["run", "--once", "--log", "debug", "--kubeconfig"])
            .arg(&kubeconfig)
            .stderr(file),
    );
    assert_eq!(out.status.code(), Some(2));
    let text = std::fs::read(&log).expect("the log");
    let lossy = String::from_utf8_lossy(&text);
    assert!(lossy.contains("DEBUG"), "{lossy}");
    assert!(!text.contains(&0x1b), "{lossy:?}");
}

/// Two `kind: List` documents on stdin: separated by `---`, the items of both count; run
/// together (one document with duplicate keys), the input is refused naming the key and its
/// line. Never are items dropped silently.
#[test]
fn two_lists_on_stdin_are_both_read_or_refused() {
    let list = |kind: &str, names: &[&str]| {
        let items: String = names
            .iter()
            .map(|n| {
                format!(
                    "- apiVersion: constraints.gatekeeper.sh/v1beta1\n  kind: {kind}\n  metadata: {{name: {n}}}\n"
                )
            })
            .collect();
        format!("apiVersion: v1\nkind: List\nitems:\n{items}")
    };
    let (a, b) = (list("K8sLostA", &["a1", "a2"]), list("K8sLostB", &["b1"]));
    let out = vap_stdin(
        &["check", "-f", "-", "-o", "json"],
        format!("{a}---\n{b}").as_bytes(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = stdout_json(&out);
    assert_eq!(report["summary"]["constraints"], 3, "{report}");
    let mut names: Vec<&str> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["object"]["name"].as_str())
        .collect();
    names.sort();
    assert_eq!(names, ["a1", "a2", "b1"]);

    let out = vap_stdin(
        &["check", "-f", "-", "-o", "json"],
        format!("{a}{b}").as_bytes(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "no report from part of the input");
    // The second List's first key is on the line after the first List's 9 lines.
    let err = stderr(&out);
    assert!(
        err.contains("<stdin>:10") && err.contains("duplicate key \"apiVersion\""),
        "{err}"
    );
}

/// The flags only the TUI reads.
const TUI_ONLY: [&str; 2] = ["--readonly", "--reconcile"];

/// No subcommand's help offers the TUI's own flags (the TUI's help does).
#[test]
fn subcommand_help_lists_no_tui_flags() {
    let top = String::from_utf8_lossy(&vap(&["--help"]).stdout).into_owned();
    let flags = |help: &str| -> Vec<String> {
        help.split(|c: char| c.is_whitespace() || c == ',')
            .filter(|w| w.starts_with("--"))
            .map(String::from)
            .collect()
    };
    for f in TUI_ONLY {
        assert!(flags(&top).iter().any(|w| w == f), "the TUI has {f}: {top}");
    }
    // Every subcommand the help lists (a new one is checked without changing this test).
    let commands: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    for c in [
        "check",
        "plan",
        "run",
        "replay",
        "reconcile",
        "install",
        "test",
        "audit",
        "version",
    ] {
        assert!(commands.contains(&c), "{c} listed: {top}");
    }
    for c in commands {
        let out = vap(&[c, "--help"]);
        assert_eq!(out.status.code(), Some(0), "{c}: {}", stderr(&out));
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("Usage:"), "{c}: {help}");
        for f in TUI_ONLY {
            assert!(
                !flags(&help).iter().any(|w| w == f),
                "{c} --help lists {f}: {help}"
            );
        }
    }
}

/// `-f` given to a subcommand that reads no files is refused (usage: exit 3, as clap refuses
/// any flag the command does not take), never ignored: `install -f x` printing manifests as if
/// `x` had been read. Given before the command, the TUI's `-f` is refused too.
#[test]
fn files_are_refused_where_they_would_be_ignored() {
    let demo = demo();
    for args in [
        &["install", "--print"][..],
        &["version"],
        &["audit"],
        &["run", "--once"],
        &["replay", "k8sx"],
        &["reconcile", "--all"],
    ] {
        let out = vap(&[args, &["-f", &demo]].concat());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} did nothing");
        assert!(err.contains("unexpected argument '-f'"), "{args:?}: {err}");
    }
    let out = vap(&["-f", &demo, "check"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out)
            .contains("--filename before the command is the TUI's; for `check`, give it after"),
        "{}",
        stderr(&out)
    );
    // kubectl's connection flags go before or after a command that connects: here to a
    // server that is not there, named in the error (exit 2, cannot tell).
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dead_kubeconfig(dir.path());
    let kubeconfig = kubeconfig.to_str().expect("utf8 path");
    for args in [
        &["--kubeconfig", kubeconfig, "check"][..],
        &["--log", "error", "check", "--kubeconfig", kubeconfig],
    ] {
        let out = vap(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("https://127.0.0.1:1"), "{args:?}: {err}");
    }
}

/// Three constraints sharing a kind and name: every ignored copy is an `input-duplicate`
/// finding naming its file and line and the copy used (the last), and
/// nothing is said in a log line instead.
#[test]
fn duplicates_are_named_with_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let constraint = |n: &str| {
        format!(
            "apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sRequiredLabels\nmetadata:\n  name: owner\n  labels: {{copy: \"{n}\"}}\n"
        )
    };
    std::fs::write(
        dir.path().join("a.yaml"),
        format!("{}---\n{}", constraint("1"), constraint("2")),
    )
    .expect("write");
    std::fs::write(dir.path().join("b.yaml"), constraint("3")).expect("write");
    let (a, b) = (
        dir.path().join("a.yaml").display().to_string(),
        dir.path().join("b.yaml").display().to_string(),
    );
    let out = vap(&["check", "-f", &a, "-f", &b, "-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(!stderr(&out).contains("WARN"), "{}", stderr(&out));
    let report = stdout_json(&out);
    let dups: Vec<&Value> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["code"] == "input-duplicate")
        .collect();
    let sources: Vec<&str> = dups
        .iter()
        .map(|f| f["source"].as_str().expect("source"))
        .collect();
    assert_eq!(sources, [format!("{a}:1"), format!("{a}:7")]);
    for f in &dups {
        assert_eq!(f["severity"], "warning");
        assert_eq!(f["object"]["kind"], "K8sRequiredLabels");
        assert_eq!(f["object"]["name"], "owner");
        let m = f["message"].as_str().expect("message");
        assert!(
            m.contains(&format!("{b}:1")) && m.contains("last one is used"),
            "{m}"
        );
    }
    assert_eq!(report["summary"]["constraints"], 1);
    // The table says it too, in the object's kubectl name, with counts in their number.
    let out = vap(&["check", "-f", &a, "-f", &b]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("input-duplicate")
            && text.contains("k8srequiredlabels/owner")
            && text.contains(&format!("{a}:7")),
        "{text}"
    );
    assert!(
        text.contains(
            "0 errors, 2 warnings, 1 info in 0 templates, 1 constraint, 0 policies, 0 bindings"
        ),
        "{text}"
    );
}

/// `-o wide` adds where each finding's object was read and what it relates to; the plain
/// table names objects as `kubectl get` takes them, never `vap/…` (kubectl knows no such
/// short name).
#[test]
fn check_wide_adds_source_and_related_columns() {
    let out = vap(&["check", "-f", &demo(), "-o", "wide"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text.lines().next().expect("header");
    assert!(
        header
            .split_whitespace()
            .eq(["SEVERITY", "CODE", "OBJECT", "SOURCE", "RELATED", "MESSAGE"]),
        "{header}"
    );
    assert!(text.contains("/assets/demo/"), "sources are files: {text}");
    let plain = String::from_utf8_lossy(&vap(&["check", "-f", &demo()]).stdout).into_owned();
    assert!(
        plain.contains(" validatingadmissionpolicybinding/gatekeeper-")
            && plain.contains(" validatingadmissionpolicy/gatekeeper-")
            && !plain.contains(" vap/")
            && !plain.contains(" vapb/"),
        "{plain}"
    );
    // Commands without a table refuse wide rather than ignore it.
    let out = vap(&["plan", "-f", &demo(), "-o", "wide"]);
    assert_eq!(out.status.code(), Some(3));
}

/// Each command's help shows the flags it takes and no other: the TUI's, files, the Lease and
/// generation flags only where they are used (check and plan read the leader's settings from
/// its Lease); kubectl's connection flags where the command connects, and the exit codes.
#[test]
fn each_help_shows_only_the_flags_its_command_uses() {
    let help = |cmd: &str| {
        let out = vap(&[cmd, "--help"]);
        assert_eq!(out.status.code(), Some(0), "{cmd}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let has =
        |h: &str, flag: &str| h.contains(&format!("{flag} ")) || h.contains(&format!("{flag}\n"));
    //            command      -f     lease  generation  connects
    for (cmd, files, lease, gen_flags, connects) in [
        ("check", true, true, true, true),
        ("plan", true, true, true, true),
        ("test", true, false, true, true),
        ("run", false, true, true, true),
        ("replay", false, true, true, true),
        ("reconcile", false, true, true, true),
        ("audit", false, false, false, true),
        ("install", false, false, false, false),
        ("version", false, false, false, false),
    ] {
        let h = help(cmd);
        assert_eq!(has(&h, "--filename"), files, "{cmd}: {h}");
        assert_eq!(has(&h, "--max-input-bytes"), files, "{cmd}: {h}");
        assert_eq!(has(&h, "--lease-namespace"), lease, "{cmd}: {h}");
        assert_eq!(has(&h, "--binding-wait"), gen_flags, "{cmd}: {h}");
        for flag in [
            "--kubeconfig",
            "--context",
            "--cluster",
            "--user",
            "--server",
            "--token",
            "--certificate-authority",
            "--insecure-skip-tls-verify",
            "--as",
            "--request-timeout",
        ] {
            assert_eq!(has(&h, flag), connects, "{cmd} {flag}: {h}");
        }
        assert!(!has(&h, "--readonly"), "{cmd}: {h}");
        assert!(
            h.contains("Exit codes") && h.contains("3  usage"),
            "{cmd}: {h}"
        );
    }
    let audit = help("audit");
    assert!(
        audit.contains("-n, --namespace") && audit.contains("-A, --all-namespaces"),
        "{audit}"
    );
}

/// Bare `install` applies nothing and prints no manifests someone could take for an
/// installation: it says what to run (exit 3, a usage error).
#[test]
fn install_without_print_says_how_to_install() {
    let out = vap(&["install"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("kubectl vap install --print | kubectl apply -f -"),
        "{}",
        stderr(&out)
    );
}

/// Gatekeeper's Config in the input (the one Gatekeeper reconciles: `config` in its namespace)
/// exempts the namespaces it excludes from the webhook: exact names in each VAP's
/// `namespaceSelector`, globs in a match condition; a Config Gatekeeper ignores changes nothing.
#[test]
fn gatekeepers_config_in_the_input_exempts_its_namespaces() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = |name: &str| {
        format!(
            "apiVersion: config.gatekeeper.sh/v1alpha1\nkind: Config\nmetadata:\n  name: {name}\n  namespace: gatekeeper-system\nspec:\n  match:\n  - excludedNamespaces: [cfg-excluded, cfg-skip-*]\n    processes: [webhook]\n"
        )
    };
    let plan = |extra: Option<String>| {
        if let Some(text) = extra {
            std::fs::write(dir.path().join("config.yaml"), text).expect("write");
        }
        let out = vap(&[
            "plan",
            "-f",
            &demo(),
            "-f",
            dir.path().to_str().expect("utf8 path"),
            "-o",
            "json",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        String::from_utf8(out.stdout).expect("utf8")
    };
    let ignored = plan(Some(config("not-config")));
    assert!(!ignored.contains("cfg-excluded"), "{ignored}");
    let text = plan(Some(config("config")));
    assert!(
        text.contains("cfg-excluded")
            && text.contains("gatekeeper_internal_match_global_excluded_namespaces")
            && text.contains(r#"^cfg\\\\-skip\\\\-.*$"#),
        "{text}"
    );
}

/// `cmd` with standard output (and, with `close_stderr`, standard error) a pipe whose reader
/// has already gone, as `kubectl vap plan | head -1` leaves it once `head` exits.
fn with_closed_pipes(mut cmd: std::process::Command, close_stderr: bool) -> Output {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    cmd.stdout(writer.try_clone().expect("the pipe's writer"));
    if close_stderr {
        cmd.stderr(writer);
    } else {
        cmd.stderr(std::process::Stdio::piped());
    }
    cmd.spawn()
        .and_then(|c| c.wait_with_output())
        .expect("runs")
}

/// Every command that writes to standard output, in every format, survives a reader that went
/// away (`| head -1`): no panic (before: "failed printing to stdout: Broken pipe", exit 101,
/// for `plan` in all three formats), and the exit code the table says for what it found. The
/// same with standard error closed too (its warnings and logs go nowhere, nothing more).
#[test]
fn a_closed_pipe_ends_no_command_in_a_panic() {
    let demo = demo();
    let dir = tempfile::tempdir().expect("tempdir");
    let cm = dir.path().join("cm.yaml");
    std::fs::write(
        &cm,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: prod}\n",
    )
    .expect("write");
    let cm = cm.to_str().expect("utf8 path");
    let mut cases: Vec<(Vec<&str>, i32)> = Vec::new();
    for o in ["table", "wide", "json", "yaml"] {
        cases.push((vec!["check", "-f", &demo, "-o", o], 1));
        cases.push((vec!["version", "-o", o], 0));
    }
    for o in ["table", "json", "yaml"] {
        cases.push((vec!["plan", "-f", &demo, "-o", o], 0));
        cases.push((vec!["plan", "--exit-code", "-f", &demo, "-o", o], 1));
        cases.push((vec!["test", "--offline", "-f", &demo, "-f", cm, "-o", o], 0));
    }
    cases.extend([
        (vec!["install", "--print", "--metrics-service"], 0),
        (vec!["help"], 0),
        (vec!["help", "rbac"], 0),
        (vec!["help", "check"], 0),
        (vec!["--help"], 0),
        (vec!["check", "--help"], 0),
        (vec!["--version"], 0),
        // Errors go to standard error: closed too below.
        (vec!["check", "-f", "/no/such/path"], 2),
        (vec!["check", "--no-such-flag"], 3),
        // A warning on stderr, the report on stdout.
        (vec!["check", "--log", "loud[[", "-f", &demo], 1),
    ]);
    for (args, code) in &cases {
        for close_stderr in [false, true] {
            let mut cmd = kubectl_vap();
            cmd.args(args).env_remove("KUBECONFIG");
            let out = with_closed_pipes(cmd, close_stderr);
            let err = stderr(&out);
            assert_eq!(
                out.status.code(),
                Some(*code),
                "{args:?} (stderr closed: {close_stderr}): {err}"
            );
            assert!(!err.contains("panicked"), "{args:?}: {err}");
        }
    }
}

/// What guards the test above for commands it cannot reach without a cluster: no source file
/// prints with the macros that panic on a closed pipe; `cli::stdio` is the one writer.
#[test]
fn only_cli_stdio_writes_to_stdout_and_stderr() {
    fn walk(dir: &std::path::Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("src").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, found);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("cli/stdio.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("source");
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                if ["print!(", "println!(", "eprint!(", "eprintln!("]
                    .iter()
                    .any(|m| code.contains(m))
                {
                    found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                }
            }
        }
    }
    let mut found = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut found,
    );
    assert!(
        found.is_empty(),
        "use cli::stdio::stdout / errln!, which survive a closed pipe:\n{}",
        found.join("\n")
    );
}

/// The exit-code table, end to end on commands that need no cluster: 0 printed, 1 findings,
/// 2 cannot tell (input that cannot be read), 3 usage (including flags that would be ignored:
/// connection flags where nothing connects, before or after the command).
#[test]
fn every_command_follows_the_exit_code_table() {
    let demo = demo();
    let cases: [(&[&str], i32); 16] = [
        (&["version"], 0),
        (&["install", "--print"], 0),
        (&["help", "prerequisites"], 0),
        (&["check", "-f", &demo], 1),
        (&["plan", "--exit-code", "-f", &demo], 1),
        (&["check", "-f", "/no/such/path"], 2),
        (&["install"], 3),
        (&["help", "no-such-topic"], 3),
        (&["check", "--no-such-flag"], 3),
        (&["version", "--context", "nowhere"], 3),
        (&["--context", "nowhere", "version"], 3),
        (&["install", "--print", "--server", "https://x"], 3),
        (&["check", "-f", &demo, "--token", "t"], 3),
        (&["plan", "-f", &demo, "--insecure-skip-tls-verify"], 3),
        (&["--as", "alice", "check", "-f", &demo], 3),
        (&["test", "--offline", "-f", &demo, "--context", "c"], 3),
    ];
    for (args, code) in cases {
        let out = vap(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        if code == 3
            && args.iter().any(|a| {
                [
                    "--context",
                    "--server",
                    "--token",
                    "--as",
                    "--insecure-skip-tls-verify",
                ]
                .contains(a)
            })
        {
            assert!(
                err.contains("unexpected argument") || err.contains("is a connection flag"),
                "{args:?} says why: {err}"
            );
        }
    }
}

/// kubectl's `--server` needs no kubeconfig: with none at all (no file, no `KUBECONFIG`),
/// `check --server URL --token T --insecure-skip-tls-verify` connects there — to a port where
/// nothing listens, named in the error (exit 2).
#[test]
fn the_server_flag_needs_no_kubeconfig() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = output(
        kubectl_vap()
            .args(["check", "--server", "https://127.0.0.1:1", "--token", "t"])
            .arg("--insecure-skip-tls-verify")
            .env_remove("KUBECONFIG")
            .env("HOME", home.path()),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("https://127.0.0.1:1") && err.contains("Connection refused"),
        "{err}"
    );
    // Without --server and without a kubeconfig, it says what is missing.
    let out = output(
        kubectl_vap()
            .arg("check")
            .env_remove("KUBECONFIG")
            .env("HOME", home.path()),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("kubeconfig"), "{}", stderr(&out));
}

/// `kubectl vap help TOPIC` holds what a krew user has no docs/ folder for: what must be true
/// before `run`, how to switch Gatekeeper's generator off, what the roles grant, the exit
/// codes; `help COMMAND` is that command's help; nothing points into the repository.
#[test]
fn help_topics_say_what_the_docs_would() {
    let text = |args: &[&str]| {
        let out = vap(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let all = text(&["help"]);
    for topic in ["prerequisites", "gatekeeper", "rbac", "exit-codes"] {
        assert!(
            all.contains(&format!("  {topic} ")),
            "{topic} listed: {all}"
        );
        let t = text(&["help", topic]);
        assert!(!t.contains("docs/"), "{topic}: {t}");
    }
    let pre = text(&["help", "prerequisites"]);
    assert!(
        pre.contains("kubectl get crd constrainttemplates.templates.gatekeeper.sh")
            && pre.contains("--operation=generate"),
        "{pre}"
    );
    assert!(text(&["help", "exit-codes"]).contains("3  usage"));
    assert!(text(&["help", "check"]).contains("Usage: kubectl vap check"));
    let out = vap(&["help", "no-such-topic"]);
    assert!(stderr(&out).contains("prerequisites"), "{}", stderr(&out));
}

/// With `KUBECONFIG` set, a usage error's usage line does not show `--kubeconfig <KUBECONFIG>`
/// as if it were required (clap printed flags filled from the environment there).
#[test]
fn a_usage_line_shows_no_flag_the_environment_filled() {
    let out = output(
        kubectl_vap()
            .arg("reconcile")
            .env("KUBECONFIG", "/nonexistent/kubeconfig"),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let usage = err
        .lines()
        .find(|l| l.starts_with("Usage:"))
        .unwrap_or_else(|| panic!("a usage line: {err}"));
    assert_eq!(usage, "Usage: kubectl vap reconcile <TEMPLATE|--all>");
}

/// kubectl's output conventions on `check`: `-o name` (each object once, `kind/name`),
/// `-o jsonpath=…` on the JSON report, `--no-headers` (rows only, with wide too).
#[test]
fn check_speaks_kubectls_output_formats() {
    let json = stdout_json(&vap(&["check", "-f", &demo(), "-o", "json"]));
    let findings = json["findings"].as_array().expect("findings");

    let names = vap(&["check", "-f", &demo(), "-o", "name"]);
    assert_eq!(names.status.code(), Some(1), "{}", stderr(&names));
    let names = String::from_utf8_lossy(&names.stdout).into_owned();
    let lines: Vec<&str> = names.lines().collect();
    let mut unique = lines.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), lines.len(), "each object once:\n{names}");
    for f in findings {
        let kind = f["object"]["kind"].as_str().expect("kind").to_lowercase();
        let name = f["object"]["name"].as_str().expect("name");
        let want = format!("{kind}/{name}");
        assert!(lines.contains(&want.as_str()), "{want} in\n{names}");
    }

    let codes = vap(&["check", "-f", &demo(), "-o", "jsonpath={.findings[*].code}"]);
    assert_eq!(codes.status.code(), Some(1), "{}", stderr(&codes));
    let want: Vec<&str> = findings
        .iter()
        .map(|f| f["code"].as_str().expect("code"))
        .collect();
    assert_eq!(String::from_utf8_lossy(&codes.stdout), want.join(" "));

    let range = vap(&[
        "check",
        "-f",
        &demo(),
        "-o",
        r#"jsonpath={range .findings[*]}{.severity}{"\t"}{.code}{"\n"}{end}"#,
    ]);
    let text = String::from_utf8_lossy(&range.stdout).into_owned();
    assert_eq!(text.lines().count(), findings.len(), "{text}");
    assert!(text.lines().all(|l| l.split('\t').count() == 2), "{text}");

    for (format, columns) in [("table", 4), ("wide", 6)] {
        let with = vap(&["check", "-f", &demo(), "-o", format]);
        let with = String::from_utf8_lossy(&with.stdout).into_owned();
        assert!(with.starts_with("SEVERITY"), "{with}");
        let without = vap(&["check", "-f", &demo(), "-o", format, "--no-headers"]);
        assert_eq!(without.status.code(), Some(1));
        let without = String::from_utf8_lossy(&without.stdout).into_owned();
        assert!(!without.contains("SEVERITY"), "{without}");
        assert_eq!(
            without.lines().count(),
            findings.len(),
            "rows only:\n{without}"
        );
        // The rows are the table's rows.
        let rows: Vec<&str> = with.lines().skip(1).take(findings.len()).collect();
        assert_eq!(without.lines().collect::<Vec<_>>(), rows, "{format}");
        if format == "wide" {
            let header = with.lines().next().unwrap_or_default();
            assert_eq!(header.split_whitespace().count(), columns, "{header}");
        }
    }

    // A template kubectl would refuse is a usage error, said before anything is read.
    let bad = vap(&["check", "-f", &demo(), "-o", "jsonpath={.findings["]);
    assert_eq!(bad.status.code(), Some(3), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("jsonpath"), "{}", stderr(&bad));
    let bad = vap(&["check", "-f", &demo(), "-o", "names"]);
    assert_eq!(bad.status.code(), Some(3));
    assert!(
        stderr(&bad).contains("jsonpath=TEMPLATE"),
        "{}",
        stderr(&bad)
    );
}
