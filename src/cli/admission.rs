//! `test` and `audit`: argument handling and printing; the work is in `crate::admission`.

use super::args::{AuditArgs, Cli, TestArgs};
use super::exit::Exit;
use super::output;
use super::stdio::{self, errln};
use crate::admission::audit::{AuditOptions, AuditReport, Status};
use crate::admission::session::{self, clients};
use crate::admission::{audit as audit_mod, objects, test as test_mod};
use crate::load::input::ReadOptions;
use crate::snapshot::Snapshot;
use crate::text::{printable, printable_lines};
use anyhow::Context;
use std::io::IsTerminal;

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Everything the analysis reads from the cluster at `url`, and what could not be read.
async fn read_cluster(
    reader: &kube::Client,
    url: &str,
) -> anyhow::Result<(Snapshot, Vec<crate::controller::state::AccessError>)> {
    let api = session::discover(reader, url).await?;
    crate::cluster::list_snapshot(reader, &api)
        .await
        .with_context(|| format!("reading {url}"))
}

/// The cluster's policies, bindings and constraints. What cannot be read only weakens
/// attribution (binding names are then parsed), so it is a warning, not an error.
async fn live_snapshot(reader: &kube::Client, url: &str) -> anyhow::Result<Snapshot> {
    let (snap, errors) = read_cluster(reader, url).await?;
    for e in &errors {
        errln!(
            "warning: {} (attribution falls back to binding names)",
            e.message
        );
    }
    Ok(snap)
}

pub fn test(cli: &Cli, args: &TestArgs) -> anyhow::Result<Exit> {
    if cli.input().filenames.is_empty() {
        return Err(super::exit::usage(
            "test needs -f FILE (files, folders or - for stdin)",
        ));
    }
    let opts = ReadOptions {
        max_input_bytes: cli.input().max_input_bytes,
    };
    let read = objects::read(&cli.input().filenames, &mut std::io::stdin().lock(), opts)
        .context("reading input")?;
    // A samples folder holds fixtures beside its objects: each skipped with one line.
    let (manifests, skipped): (Vec<_>, Vec<_>) = read
        .into_iter()
        .partition(|m| objects::not_an_object(m).is_none());
    for m in &skipped {
        let why = objects::not_an_object(m).unwrap_or_default();
        errln!(
            "note: {}",
            printable(&format!("{}: skipped: {why}", m.source))
        );
    }
    if manifests.is_empty() {
        anyhow::bail!("the input holds no object to test (only what is skipped above)");
    }
    let gen_opts = cli.generation_options();
    // Offline, policy objects given twice: the last copy is used; each ignored one is named.
    // (Live, every manifest is sent as it is.)
    let duplicates = match args.offline {
        true => test_mod::policy_snapshot(&manifests).duplicates,
        false => Vec::new(),
    };
    for d in &duplicates {
        errln!(
            "warning: {}",
            printable(&format!(
                "{} at {} is ignored: it is in the input again at {}, and the last copy is used",
                d.object, d.dropped, d.kept
            ))
        );
    }
    if let Some(ns) = &args.namespace
        && let Some((m, theirs)) = test_mod::namespace_conflict(&manifests, ns)
    {
        anyhow::bail!(
            "{}: the object is in namespace {theirs:?}, not {ns:?} (-n): pass -n {theirs}, or leave -n out",
            m.source
        );
    }
    let report = if args.offline {
        test_mod::offline(&manifests, &gen_opts, args.namespace.as_deref())
    } else {
        runtime()?.block_on(async {
            let mut conn = crate::cluster::client::ConnectionOptions::from(&cli.conn);
            conn.namespace = args.namespace.clone();
            let (reader, actor, url) = clients(conn).await?;
            let snap = live_snapshot(&reader, &url).await?;
            anyhow::Ok(test_mod::live(&reader, &actor, &snap, &manifests, &gen_opts).await)
        })?
    };
    let text = match output::structured(&report, args.out.format())? {
        Some(t) => t,
        None => printable_lines(&test_mod::table(&report)).into_owned(),
    };
    stdio::stdout(&text)?;
    Ok(Exit::of_report(report.exit_code()))
}

pub fn audit(cli: &Cli, args: &AuditArgs) -> anyhow::Result<Exit> {
    let opts = AuditOptions {
        qps: f64::from(args.qps),
        burst: args.burst,
        concurrency: usize::from(args.concurrency),
        progress: std::io::stderr().is_terminal(),
        report_to: None,
        // -A is the default; -n narrows it.
        namespace: args.namespace.clone().filter(|_| !args.all_namespaces),
    };
    let report = runtime()?.block_on(async {
        let (reader, actor, url) = clients(&cli.conn).await?;
        // No templates served is no constraints to audit, not "No violations." (exit 2).
        super::live::require_templates(&reader, &url).await?;
        let snap = live_snapshot(&reader, &url).await?;
        // Ctrl-C or SIGTERM (a CI job's timeout): the report of what was found so far.
        let interrupt = super::live::terminated();
        // Said on stderr so a script (or a person without a terminal) knows the listing is done.
        let listed = |n: usize| errln!("dry-running {n} object(s) in scope");
        audit_mod::audit(
            &reader,
            &actor,
            &snap,
            args.target.as_deref(),
            &opts,
            listed,
            interrupt,
        )
        .await
        .with_context(|| format!("auditing on {url}"))
    })?;
    stdio::stdout(&audit_text(&report, &args.out.shown())?)?;
    if !report.complete {
        errln!("interrupted: the report holds what was found so far");
    }
    Ok(Exit::of_report(report.exit_code()))
}

pub fn audit_text(report: &AuditReport, shown: &output::Shown) -> anyhow::Result<String> {
    let p = |s: &str| printable(s).into_owned();
    // -o name: the objects that violate a constraint, as kubectl's -o name names them (no
    // namespace, as `kubectl get -A -o name`).
    let names = || {
        let violations = report.constraints.iter().flat_map(|c| &c.violations);
        violations
            .map(|v| {
                p(&format!(
                    "{}/{}",
                    v.object.kind.to_lowercase(),
                    v.object.name
                ))
            })
            .collect()
    };
    if let Some(t) = shown.not_a_table(report, names)? {
        return Ok(t);
    }
    let wide = shown.wide();
    let mut rows = Vec::new();
    let mut notes = String::new();
    for c in &report.constraints {
        let who = p(&c.constraint.to_string());
        match c.status {
            Status::Audited => {}
            _ => {
                notes.push_str(&format!(
                    "{who}: {}\n",
                    p(c.note.as_deref().unwrap_or_default())
                ));
                continue;
            }
        }
        // -o wide: which template and binding each row comes through.
        let row = |action: String, object: String, message: String| {
            let mut r = vec![who.clone(), action, object];
            if wide {
                r.push(p(&c.template));
                r.push(p(c.binding.as_deref().unwrap_or("-")));
            }
            r.push(message);
            r
        };
        for v in &c.violations {
            rows.push(row(
                v.action.to_string(),
                p(&v.object.to_string()),
                p(&v.message),
            ));
        }
        for h in &c.hidden {
            rows.push(row(
                "hidden".into(),
                p(&h.object.to_string()),
                p(&format!(
                    "not observable: the server reported only its first denial, by {}",
                    h.denied_by
                )),
            ));
        }
        for e in &c.errors {
            rows.push(row(
                e.outcome.to_string(),
                p(&e.object.to_string()),
                p(&e.message),
            ));
        }
    }
    let header: &[&str] = if wide {
        &[
            "CONSTRAINT",
            "ACTION",
            "OBJECT",
            "TEMPLATE",
            "BINDING",
            "MESSAGE",
        ]
    } else {
        &["CONSTRAINT", "ACTION", "OBJECT", "MESSAGE"]
    };
    let table = shown.table(header, &rows);
    // --no-headers is for scripts: the rows and nothing else (none when there are none).
    if shown.no_headers {
        return Ok(printable_lines(&table).into_owned());
    }
    let mut text = if rows.is_empty() {
        "No violations.\n".to_string()
    } else {
        table
    };
    if !notes.is_empty() {
        text.push('\n');
        text.push_str(&notes);
    }
    let violations: usize = report.constraints.iter().map(|c| c.violations.len()).sum();
    let audited = report
        .constraints
        .iter()
        .filter(|c| c.status == Status::Audited)
        .count();
    use super::report::count;
    text.push_str(&format!(
        "\n{} in {}; {}{}\n",
        count(violations, "violation", "violations"),
        count(audited, "audited constraint", "audited constraints"),
        count(report.requests, "dry-run request", "dry-run requests"),
        if report.complete {
            ""
        } else {
            "; INTERRUPTED: partial"
        }
    ));
    Ok(printable_lines(&text).into_owned())
}

/// `check --audit`: the live `check` report plus an info finding per constraint with
/// violations. Info findings do not change the exit code: the report is for reading.
pub fn check_audit(cli: &Cli, out: &super::args::ReportOutputArgs) -> anyhow::Result<Exit> {
    if !cli.input().filenames.is_empty() {
        return Err(super::exit::usage(
            "check --audit needs a cluster: existing objects are audited there, not in files",
        ));
    }
    let opts = AuditOptions {
        progress: std::io::stderr().is_terminal(),
        ..AuditOptions::default()
    };
    let (snap, report, judged) = runtime()?.block_on(async {
        let (reader, actor, url) = clients(&cli.conn).await?;
        // As `check` does: judged by the leader's settings when a copy leads.
        let judged = super::live::judged_settings(&reader, cli).await.options;
        // As `check` does: what is not served is said, what may not be read ends it.
        let (snap, errors) = read_cluster(&reader, &url).await?;
        super::live::everything_read(&errors, &url)?;
        let report = audit_mod::audit(
            &reader,
            &actor,
            &snap,
            None,
            &opts,
            |_| {},
            std::future::pending(),
        )
        .await
        .with_context(|| format!("auditing on {url}"))?;
        anyhow::Ok((snap, report, judged))
    })?;
    let extra = audit_mod::findings(&report);
    let (text, code) = super::report::check_report_with(&snap, &judged, &out.shown(), extra)?;
    stdio::stdout(&text)?;
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::audit::{ConstraintAudit, Status, Violation};
    use crate::admission::test::ObjectId;

    fn report() -> AuditReport {
        let object = ObjectId {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("team".into()),
            name: "bad".into(),
        };
        AuditReport {
            complete: true,
            constraints: vec![ConstraintAudit {
                constraint: crate::core::verdict::ConstraintRef {
                    kind: "K8sRequiredLabels".into(),
                    name: "owner".into(),
                },
                template: "k8srequiredlabels".into(),
                binding: Some("gatekeeper-k8srequiredlabels-owner".into()),
                validation_actions: vec!["Deny".into()],
                status: Status::Audited,
                note: None,
                in_scope: 1,
                checked: 1,
                violations: vec![Violation {
                    object,
                    action: "Deny",
                    message: "missing owner".into(),
                }],
                hidden: Vec::new(),
                errors: Vec::new(),
            }],
            requests: 1,
        }
    }

    /// One of each is said in the singular; wide adds the template and the binding.
    #[test]
    fn the_audit_table_counts_in_words_and_wide_names_template_and_binding() {
        let text = audit_text(&report(), &super::super::args::Format::Table.into()).expect("text");
        assert!(
            text.ends_with("\n1 violation in 1 audited constraint; 1 dry-run request\n"),
            "{text}"
        );
        let wide = audit_text(&report(), &super::super::args::Format::Wide.into()).expect("text");
        let header = wide.lines().next().unwrap_or_default();
        assert!(
            header.split_whitespace().eq([
                "CONSTRAINT",
                "ACTION",
                "OBJECT",
                "TEMPLATE",
                "BINDING",
                "MESSAGE"
            ]),
            "{wide}"
        );
        assert!(
            wide.contains("gatekeeper-k8srequiredlabels-owner"),
            "{wide}"
        );
    }

    /// kubectl's conventions on `audit`: `-o name` names the violating objects,
    /// `--no-headers` prints only the rows, `-o jsonpath` reads the JSON report.
    #[test]
    fn the_audit_speaks_kubectls_output_formats() {
        use super::output::{Output, Shown};
        let shown = |output: Output, no_headers: bool| Shown { output, no_headers };
        let name = audit_text(&report(), &shown(Output::Name, false)).expect("name");
        assert_eq!(name, "configmap/bad\n");
        let rows = audit_text(&report(), &shown(Output::Table, true)).expect("rows");
        assert_eq!(rows.lines().count(), 1, "{rows}");
        assert!(
            rows.contains("missing owner") && !rows.contains("CONSTRAINT"),
            "{rows}"
        );
        let path =
            Output::parse("jsonpath={.constraints[*].violations[*].message}").expect("a template");
        let text = audit_text(&report(), &shown(path, false)).expect("jsonpath");
        assert_eq!(text, "missing owner");
    }
}
