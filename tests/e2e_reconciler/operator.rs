//! `run` as an operator reads it: without a right it needs it says once what it lacks, in
//! `check`'s words, and exits 2 in the foreground (or stays up, unready, when told to wait or
//! in a pod); a change someone must act on (a template turned invalid, valid again) is one
//! line, once.

use crate::env::{Env, LEASE_NS, TIMEOUT, eventually, template};
use crate::support::cli::{self, Served};
use crate::support::objects::inline_policy_name;
use crate::support::rbac::{self, Grant};
use serde_json::json;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The four stores `run` cannot do without.
const STORES: [&str; 4] = [
    "constrainttemplates.templates.gatekeeper.sh",
    "customresourcedefinitions.apiextensions.k8s.io",
    "validatingadmissionpolicies.admissionregistration.k8s.io",
    "validatingadmissionpolicybindings.admissionregistration.k8s.io",
];

/// `kubectl-vap run` on Lease `lease` with the user of `kubeconfig`, its log in `log`.
fn run_with(kubeconfig: &Path, lease: &str, log: &Path) -> Command {
    let mut cmd = cli::kubectl_vap();
    cmd.args(["run", "--binding-wait=0s"])
        .args(["--lease-namespace", LEASE_NS, "--lease-name", lease])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stderr(std::fs::File::create(log).expect("the log file"));
    cmd
}

/// `run --in-cluster` on Lease `lease` in a pod's shoes (the non-admin user), its log in `log`.
fn run_in_pod(e: &Env, lease: &str, log: &Path) -> Command {
    let mut cmd = e
        .env
        .in_pod_command(Path::new(cli::BIN), LEASE_NS)
        .expect("in-pod command");
    cmd.args(["run", "--in-cluster", "--binding-wait=0s"])
        .args(["--lease-namespace", LEASE_NS, "--lease-name", lease])
        .stderr(std::fs::File::create(log).expect("the log file"));
    cmd
}

fn read(log: &Path) -> String {
    std::fs::read_to_string(log).expect("the log")
}

/// Lines of `text` that contain `what`.
fn count(text: &str, what: &str) -> usize {
    text.lines().filter(|l| l.contains(what)).count()
}

/// What no log line of an operator's may show: kube's debug dumps of an API error.
fn assert_no_debug_dump(log: &str) {
    for dump in ["Api(Status", "Status {", "ErrorResponse {"] {
        assert!(!log.contains(dump), "a debug dump ({dump}) in:\n{log}");
    }
}

/// As a user without rights, `run` in the foreground tries once and exits 2, naming each
/// resource it may not read and the verbs, in the words `check` uses, and what it needs on
/// the Lease; no Debug structs, no line per retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_run_without_rights_says_what_it_lacks_and_exits_2() {
    let e = Env::new().await;
    let lease = e.env.unique_name("norights");
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = dir.path().join("run.log");
    let mut run = Served::spawn(run_with(&e.env.kubeconfig_user(), &lease, &log));
    let status = run.exited_within(TIMEOUT).await;
    let said = read(&log);
    eprintln!("run without rights said:\n{said}");
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{said}");
    for resource in STORES {
        let line = format!("forbidden: cannot list/watch {resource};");
        assert_eq!(count(&said, &line), 1, "{resource} said once:\n{said}");
    }
    assert!(
        said.contains(&format!("cannot use Lease {LEASE_NS}/{lease}"))
            && said.contains("needs get/create/update on leases"),
        "{said}"
    );
    assert_no_debug_dump(&said);

    // In `check`'s words: every line `check` says about a store, `run` says too.
    let check = cli::output(
        cli::kubectl_vap()
            .args(["check", "--kubeconfig"])
            .arg(e.env.kubeconfig_user()),
    );
    assert_eq!(check.status.code(), Some(2), "{check:?}");
    let check_said = cli::stderr(&check);
    // Its error is one line, the list's line breaks escaped.
    let lines: Vec<&str> = check_said
        .split("\\n")
        .flat_map(str::lines)
        .map(str::trim)
        .filter(|l| l.starts_with("forbidden: cannot list/watch"))
        .collect();
    assert!(!lines.is_empty(), "{check_said}");
    for line in lines {
        assert!(said.contains(line), "check says {line:?}; run:\n{said}");
    }
}

/// Told to wait (`--wait-for-access`), and in a pod (`--in-cluster`), `run` without rights
/// stays up and unready, says once what it lacks (not once per retry), and once the grant
/// comes it is ready, saying so once per resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_run_waits_for_access_saying_once_what_it_lacks() {
    let e = Env::new().await;
    let lease = e.env.unique_name("waits");
    let dir = tempfile::tempdir().expect("a temp dir");
    let (fg_log, pod_log) = (dir.path().join("fg.log"), dir.path().join("pod.log"));
    let mut fg = run_with(&e.env.kubeconfig_user(), &lease, &fg_log);
    fg.arg("--wait-for-access");
    let mut copies = [
        Served::spawn(fg),
        Served::spawn(run_in_pod(&e, &lease, &pod_log)),
    ];
    // Retries with backoff meanwhile (0.5 s, doubling): over this window a line per retry
    // would be six, and a summary every 10 s one more.
    tokio::time::sleep(Duration::from_secs(20)).await;
    for (run, log) in copies.iter_mut().zip([&fg_log, &pod_log]) {
        let said = read(log);
        eprintln!("run waiting for access said:\n{said}");
        assert_eq!(run.exited_within(Duration::ZERO).await, None, "{said}");
        let readyz = run.get("/readyz");
        assert!(
            readyz.starts_with("HTTP/1.1 503") && readyz.contains(STORES[0]),
            "{readyz}"
        );
        for resource in STORES {
            let line = format!("forbidden: cannot list/watch {resource};");
            assert_eq!(count(&said, &line), 1, "{resource} said once:\n{said}");
        }
        assert_eq!(
            count(&said, &format!("cannot use Lease {LEASE_NS}/{lease}")),
            1,
            "{said}"
        );
        assert_no_debug_dump(&said);
        assert!(said.lines().count() <= 15, "a line per retry?\n{said}");
    }

    let role = e.env.unique_name("vap-waits");
    let grant = Grant::install(&role, testenv::USER_NAME, LEASE_NS, &lease);
    rbac::grant(&e.client, &grant).await;
    for (run, log) in copies.iter().zip([&fg_log, &pod_log]) {
        eventually("ready once granted", || async {
            run.answers("/readyz", 200)
        })
        .await;
        let said = read(log);
        for resource in STORES {
            let line = format!("{resource} listed and watched again");
            assert_eq!(count(&said, &line), 1, "{resource} regained, once:\n{said}");
        }
    }
    for run in copies {
        assert!(run.terminate().success());
    }
    testenv::rbac::revoke(&e.client, &role, LEASE_NS).await;
}

/// A template made invalid, then valid again, while `run` leads: one WARN line naming the
/// template and why, then one INFO line, however often the template is reconciled between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_run_says_once_that_a_template_turned_invalid_and_valid() {
    let e = Env::new().await;
    let kind = e.generating_kind("Turns", "c").await;
    let name = kind.to_lowercase();
    let lease = e.env.unique_name("turns");
    let dir = tempfile::tempdir().expect("a temp dir");
    let log = dir.path().join("run.log");
    let run = Served::spawn(run_with(&e.env.kubeconfig_admin(), &lease, &log));
    run.wait_ready(TIMEOUT, Duration::from_millis(200)).await;
    e.until_vap("the VAP is written", &inline_policy_name(&kind, "c"), true)
        .await;

    let valid = template(&kind, Some(true));
    let mut invalid = valid.clone();
    invalid["spec"]["targets"][0]["code"][0]["source"]["validations"][0]["expression"] =
        json!("object.metadata.labels[");
    let invalid_line = format!("template {name} cannot be generated");
    let valid_line = format!("template {name} is valid again");
    e.put_template(&invalid).await;
    eventually("the WARN line", || async {
        count(&read(&log), &invalid_line) > 0
    })
    .await;
    // Reconciled again meanwhile (its constraint, a resync): still one line.
    e.constrain(&kind, "c2").await;
    e.put_template(&valid).await;
    eventually("the INFO line", || async {
        count(&read(&log), &valid_line) > 0
    })
    .await;
    e.until_vapb(
        "the new constraint's binding",
        &crate::support::objects::binding_name(&kind, "c2"),
        true,
    )
    .await;
    let said = read(&log);
    let lines = |what: &str| -> Vec<&str> { said.lines().filter(|l| l.contains(what)).collect() };
    let warned = lines(&invalid_line);
    let told = lines(&valid_line);
    assert!(
        warned.len() == 1
            && warned[0].contains("WARN")
            && warned[0].contains("validations[0].expression"),
        "{said}"
    );
    assert!(told.len() == 1 && told[0].contains("INFO"), "{said}");
    assert_no_debug_dump(&said);
    assert!(run.terminate().success());
    e.sweep(&[&kind], "turns-clean").await;
}
