//! `check` and `plan`: the analysis of a snapshot, printed. The snapshot comes from files here
//! or from the cluster (live), and everything after loading is one code path.

use super::args::{Cli, Format, OutputArgs, PlanArgs};
use super::output;
use crate::core::{Analysis, Options, PlannedWrite, Summary, Verb, analyze};
use crate::load::input::ReadOptions;
use crate::snapshot::Snapshot;
use crate::text::{printable, printable_lines};
use anyhow::Context;
use serde::Serialize;
use std::process::ExitCode;

#[derive(Serialize)]
struct CheckReport<'a> {
    findings: &'a [crate::core::Finding],
    summary: CheckSummary<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CheckSummary<'a> {
    #[serde(flatten)]
    counts: &'a Summary,
    templates: usize,
    constraints: usize,
    policies: usize,
    bindings: usize,
    ignored: usize,
}

#[derive(Serialize)]
struct PlanReport<'a> {
    actions: &'a [PlannedWrite],
    summary: PlanSummary,
}

#[derive(Serialize, Default)]
struct PlanSummary {
    create: usize,
    update: usize,
    delete: usize,
}

/// The `-f` input of `check`, `plan` and the TUI.
pub fn load_files(cli: &Cli) -> anyhow::Result<Snapshot> {
    let opts = ReadOptions {
        max_input_bytes: cli.input().max_input_bytes,
    };
    crate::load::files::read_input(&cli.input().filenames, opts).context("reading input")
}

pub fn check_files(cli: &Cli, out: &OutputArgs) -> anyhow::Result<ExitCode> {
    let snap = load_files(cli)?;
    let (text, code) = check_report(&snap, &cli.generation_options(), out.output)?;
    print!("{text}");
    Ok(code)
}

pub fn plan_files(cli: &Cli, args: &PlanArgs) -> anyhow::Result<ExitCode> {
    let snap = load_files(cli)?;
    let (text, writes) = plan_report(&snap, &cli.generation_options(), args.out.format())?;
    print!("{text}");
    Ok(plan_exit_code(args, writes))
}

/// `plan`'s exit code: 0, or with `--exit-code` 1 when writes are planned.
pub fn plan_exit_code(args: &PlanArgs, writes: usize) -> ExitCode {
    if args.exit_code && writes > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The `check` report and its exit code (1 when any warning or error is found).
pub fn check_report(
    snap: &Snapshot,
    opts: &Options,
    format: Format,
) -> anyhow::Result<(String, ExitCode)> {
    check_report_with(snap, opts, format, Vec::new())
}

/// [`check_report`] with findings from elsewhere added (`check --audit`'s).
pub fn check_report_with(
    snap: &Snapshot,
    opts: &Options,
    format: Format,
    extra: Vec<crate::core::Finding>,
) -> anyhow::Result<(String, ExitCode)> {
    let Analysis { mut findings, .. } = analyze(snap, opts);
    findings.extend(extra);
    let counts = Summary::of(&findings);
    let code = if counts.has_problems() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    let summary = CheckSummary {
        counts: &counts,
        templates: snap.templates.len(),
        constraints: snap.constraints.len(),
        policies: snap.policies.len(),
        bindings: snap.bindings.len(),
        ignored: snap.ignored.values().sum(),
    };
    let report = CheckReport {
        findings: &findings,
        summary,
    };
    if let Some(text) = output::structured(&report, format)? {
        return Ok((text, code));
    }
    let mut sorted: Vec<_> = findings.iter().collect();
    sorted.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(a.code.cmp(&b.code))
            .then(a.object.cmp(&b.object))
    });
    let wide = format == Format::Wide;
    let rows: Vec<Vec<String>> = sorted
        .iter()
        .map(|f| {
            let mut row = vec![
                f.severity.as_str().to_uppercase(),
                f.code.as_str().to_string(),
                printable(&kubectl_name(&f.object)).into_owned(),
            ];
            // -o wide: where the object was read, and the objects the finding relates it to.
            if wide {
                row.push(printable(f.source.as_deref().unwrap_or("-")).into_owned());
                let related: Vec<String> = f.related.iter().map(kubectl_name).collect();
                row.push(if related.is_empty() {
                    "-".to_string()
                } else {
                    printable(&related.join(",")).into_owned()
                });
            }
            row.push(printable(&f.message).into_owned());
            row
        })
        .collect();
    let mut text = if rows.is_empty() {
        String::from("No findings.\n")
    } else if wide {
        output::table(
            &["SEVERITY", "CODE", "OBJECT", "SOURCE", "RELATED", "MESSAGE"],
            &rows,
        )
    } else {
        output::table(&["SEVERITY", "CODE", "OBJECT", "MESSAGE"], &rows)
    };
    text.push_str(&format!(
        "\n{}, {}, {} in {}, {}, {}, {}\n",
        count(counts.errors, "error", "errors"),
        count(counts.warnings, "warning", "warnings"),
        count(counts.infos, "info", "infos"),
        count(snap.templates.len(), "template", "templates"),
        count(snap.constraints.len(), "constraint", "constraints"),
        count(snap.policies.len(), "policy", "policies"),
        count(snap.bindings.len(), "binding", "bindings"),
    ));
    Ok((printable_lines(&text).into_owned(), code))
}

/// The `plan` report and how many writes it plans.
pub fn plan_report(
    snap: &Snapshot,
    opts: &Options,
    format: Format,
) -> anyhow::Result<(String, usize)> {
    let Analysis { plan, .. } = analyze(snap, opts);
    let writes = plan.len();
    let mut summary = PlanSummary::default();
    for w in &plan {
        match w.verb {
            Verb::Create => summary.create += 1,
            Verb::Update => summary.update += 1,
            Verb::Delete => summary.delete += 1,
        }
    }
    let report = PlanReport {
        actions: &plan,
        summary,
    };
    if let Some(text) = output::structured(&report, format)? {
        return Ok((text, writes));
    }
    let summary = &report.summary;
    if plan.is_empty() {
        return Ok((
            "No changes: the cluster matches the desired state.\n".into(),
            writes,
        ));
    }
    let mut text = String::new();
    for w in &plan {
        text.push_str(&format!(
            "{} {}  # {}: {}\n",
            w.verb.as_str(),
            printable(&kubectl_name(&w.object)),
            w.code,
            printable(&w.reason)
        ));
        for line in w.diff.lines() {
            text.push_str("    ");
            text.push_str(&printable(line));
            text.push('\n');
        }
        text.push('\n');
    }
    text.push_str(&format!(
        "Plan: {} to create, {} to update, {} to delete.\n",
        summary.create, summary.update, summary.delete
    ));
    Ok((printable_lines(&text).into_owned(), writes))
}

/// `n` and the noun in its number: "1 error", "2 errors".
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// An object as `kubectl get` takes it: the lowercase kind (kubectl's singular resource name)
/// and the name, e.g. `validatingadmissionpolicy/NAME`, `k8srequiredlabels/NAME`. kubectl
/// knows no short name for VAPs and bindings (`vap/…` is not one).
pub fn kubectl_name(o: &crate::model::ObjectRef) -> String {
    format!("{}/{}", o.kind.to_lowercase(), o.name)
}
