//! `check -w` (issue 43) on a real kube-apiserver: the real binary prints the report, then a
//! line for each finding as it appears and as it goes, while the cluster changes under it, and
//! ends on SIGINT with `check`'s exit code for what it showed last.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::{cli, cluster};
use testenv::gatekeeper;

/// How long a change may take to be printed: the watch lets it settle for under a second.
const SHOWN_WITHIN: Duration = Duration::from_secs(60);

/// Lines of the child's stdout until one satisfies `wanted`; all of them, or a panic naming
/// what was read.
fn read_until(lines: &mpsc::Receiver<String>, what: &str, wanted: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + SHOWN_WITHIN;
    let mut read = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(l) if wanted(&l) => return,
            Ok(l) => read.push(l),
            Err(_) => break,
        }
    }
    panic!(
        "check -w never printed {what}; it printed:\n{}",
        read.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn e2e_check_w_prints_findings_as_they_come_and_go() {
    let (env, client) = cluster::private_env(&["gatekeeper-system"]).await;
    let mut child = cli::kubectl_vap()
        .arg("--kubeconfig")
        .arg(env.kubeconfig_admin())
        .args(["check", "-w"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn check -w");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    read_until(&lines, "the first report", |l| {
        l.starts_with("No findings.")
    });

    // A generating template and nothing else: its CRD is missing, and says so.
    let template = gatekeeper::template(
        "K8sWatched",
        "v1",
        json!({}),
        gatekeeper::cel_targets(json!({
            "generateVAP": true,
            "validations": [{ "expression": "true", "message": "never" }] })),
    );
    cluster::create_template(&client, &template).await;
    read_until(&lines, "the CRD missing", |l| {
        l.starts_with("+ ERROR") && l.contains("crd-missing") && l.contains("k8swatched")
    });

    // The template goes: so does its finding.
    let templates = cluster::templates(&client);
    templates
        .delete("k8swatched", &Default::default())
        .await
        .expect("delete the template");
    read_until(&lines, "the CRD finding gone", |l| {
        l.starts_with("- ERROR") && l.contains("crd-missing") && l.contains("k8swatched")
    });

    // It ends on SIGINT, within moments (it once lost a signal sent between two waits and
    // never ended: a bounded wait makes that a failure, not a hang).
    testenv::signal(child.id(), libc::SIGINT);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("check -w's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("check -w did not end within 30 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(0), "clean at the end: 0");

    // -o json is one report's format: refused with a usage error.
    let out = cli::as_admin(cli::kubectl_vap(), &env, &["check", "-w", "-o", "json"]);
    assert_eq!(out.status.code(), Some(3), "{}", cli::stderr(&out));
}
