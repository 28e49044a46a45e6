//! `check` and `plan`: the analysis of a snapshot, printed. The snapshot comes from files here
//! or from the cluster (live), and everything after loading is one code path.

use super::args::{Cli, Format, PlanArgs, ReportOutputArgs};
use super::exit::Exit;
use super::output;
use super::output::Shown;
use crate::core::settings::Judged;
use crate::core::{Analysis, Code, Finding, Options, PlannedWrite, Summary, Verb, analyze};
use crate::load::input::ReadOptions;
use crate::snapshot::Snapshot;
use crate::text::{printable, printable_lines};
use anyhow::Context;
use serde::Serialize;

#[derive(Serialize)]
struct CheckReport<'a> {
    findings: &'a [crate::core::Finding],
    summary: CheckSummary<'a>,
    /// Live: whose generation settings the cluster was judged by.
    #[serde(skip_serializing_if = "Option::is_none")]
    settings: Option<&'a Judged>,
}

/// What a report on a live cluster adds to one on files.
#[derive(Debug, Clone, Default)]
pub struct Live {
    /// Whose generation settings it judged by (the leader's, or local flags and why).
    pub settings: Option<Judged>,
    /// Planned writes the API server refuses (a server-side dry-run of each): the object and
    /// the server's message.
    pub refused: Vec<Refused>,
    /// Objects the leader does not write for now because another writer keeps undoing its
    /// writes (the object, the leader's words), from its Lease.
    pub contested: Vec<(crate::model::ObjectId, String)>,
    /// What the leader says is wrong with the guard that confines it (`run --expect-guard`):
    /// a `guard-missing` error.
    pub guard: Option<String>,
    /// `template-error`s of templates whose VAP the API server's compiler refuses in a dry-run
    /// before anything of them is written (`core::probe`).
    pub templates_refused: Vec<Finding>,
}

/// `writer-conflict` errors for the objects the leader says another writer contests.
fn contested_findings(contested: &[(crate::model::ObjectId, String)]) -> Vec<Finding> {
    let named = |object: &crate::model::ObjectId| {
        let api_version = match object.kind.as_str() {
            crate::core::crd::CRD_KIND => crate::core::crd::CRD_API_VERSION,
            _ => "admissionregistration.k8s.io/v1",
        };
        crate::model::ObjectRef::new(api_version, &object.kind, &object.name)
    };
    contested
        .iter()
        .map(|(object, said)| Finding::new(Code::WriterConflict, named(object), said.clone()))
        .collect()
}

/// A planned write the API server refuses, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Refused {
    pub verb: Verb,
    pub object: crate::model::ObjectRef,
    pub message: String,
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
    /// Live: the planned writes the API server refuses in a dry-run, with its message.
    #[serde(skip_serializing_if = "Option::is_none")]
    refused: Option<&'a [Refused]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    settings: Option<&'a Judged>,
}

#[derive(Serialize, Default)]
struct PlanSummary {
    create: usize,
    update: usize,
    delete: usize,
    /// Live: how many of them the API server refuses.
    #[serde(skip_serializing_if = "Option::is_none")]
    refused: Option<usize>,
}

/// The `-f` input of `check`, `plan` and the TUI.
pub fn load_files(cli: &Cli) -> anyhow::Result<Snapshot> {
    let opts = ReadOptions {
        max_input_bytes: cli.input().max_input_bytes,
    };
    crate::load::files::read_input(&cli.input().filenames, opts).context("reading input")
}

pub fn check_files(cli: &Cli, out: &ReportOutputArgs) -> anyhow::Result<Exit> {
    let snap = load_files(cli)?;
    let opts = cli.generation_options();
    let statics = super::static_check::static_findings(cli, &snap, &opts)?;
    let (text, code) = check_report_with(&snap, &opts, &out.shown(), statics)?;
    super::stdio::stdout(&text)?;
    Ok(code)
}

pub fn plan_files(cli: &Cli, args: &PlanArgs) -> anyhow::Result<Exit> {
    let snap = load_files(cli)?;
    let (text, writes) = plan_report(&snap, &cli.generation_options(), args.out.format())?;
    super::stdio::stdout(&text)?;
    Ok(plan_exit_code(args, writes))
}

/// `plan`'s exit code: 0, or with `--exit-code` 1 when writes are planned.
pub fn plan_exit_code(args: &PlanArgs, writes: usize) -> Exit {
    Exit::findings_if(args.exit_code && writes > 0)
}

/// The `check` report and its exit code (1 when any warning or error is found).
pub fn check_report(
    snap: &Snapshot,
    opts: &Options,
    format: Format,
) -> anyhow::Result<(String, Exit)> {
    check_report_with(snap, opts, &format.into(), Vec::new())
}

/// [`check_report`] with findings from elsewhere added (`check --audit`'s).
pub fn check_report_with(
    snap: &Snapshot,
    opts: &Options,
    shown: &Shown,
    extra: Vec<crate::core::Finding>,
) -> anyhow::Result<(String, Exit)> {
    check_report_live(snap, opts, shown, extra, &Live::default())
}

/// What `check` finds on a live cluster: the analysis, `extra` (`check --audit`'s, the static
/// manifests'), the planned writes the server refuses, the objects another writer contests.
pub fn live_findings(
    snap: &Snapshot,
    opts: &Options,
    extra: Vec<crate::core::Finding>,
    live: &Live,
) -> Vec<Finding> {
    let Analysis {
        mut findings, plan, ..
    } = analyze(snap, opts);
    findings.extend(extra);
    let refused = live
        .refused
        .iter()
        .map(|r| {
            Finding::new(
                Code::WriteRefused,
                r.object.clone(),
                format!(
                    "the API server refuses the {} that would bring it in line: {}",
                    r.verb.as_str(),
                    r.message
                ),
            )
        })
        .collect();
    crate::core::findings::add_refusals(&mut findings, &plan, refused);
    findings.extend(contested_findings(&live.contested));
    findings.extend(live.templates_refused.iter().cloned());
    findings.extend(live.guard.iter().map(|problem| {
        let guard = crate::model::ObjectRef::new(
            "admissionregistration.k8s.io/v1",
            crate::model::VAP_KIND,
            crate::core::guard::GUARD_NAME,
        );
        Finding::new(
            Code::GuardMissing,
            guard,
            format!("the leader says: {problem}"),
        )
    }));
    findings
}

/// [`check_report_with`] on a live cluster: a planned write the server refuses is an error
/// finding on its object, with the server's message; JSON says whose settings judged.
pub fn check_report_live(
    snap: &Snapshot,
    opts: &Options,
    shown: &Shown,
    extra: Vec<crate::core::Finding>,
    live: &Live,
) -> anyhow::Result<(String, Exit)> {
    let findings = live_findings(snap, opts, extra, live);
    let counts = Summary::of(&findings);
    let code = Exit::findings_if(counts.has_problems());
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
        settings: live.settings.as_ref(),
    };
    let mut sorted: Vec<_> = findings.iter().collect();
    sorted.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then(a.code.cmp(&b.code))
            .then(a.object.cmp(&b.object))
    });
    // -o name: the objects the findings are about, in the table's order.
    let names = || {
        sorted
            .iter()
            .map(|f| printable(&kubectl_name(&f.object)).into_owned())
            .collect()
    };
    if let Some(text) = shown.not_a_table(&report, names)? {
        return Ok((text, code));
    }
    let wide = shown.wide();
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
            // A message of several lines (the server's caret diagram) prints as lines.
            row.push(printable_lines(&f.message).into_owned());
            row
        })
        .collect();
    let table = if wide {
        shown.table(
            &["SEVERITY", "CODE", "OBJECT", "SOURCE", "RELATED", "MESSAGE"],
            &rows,
        )
    } else {
        shown.table(&["SEVERITY", "CODE", "OBJECT", "MESSAGE"], &rows)
    };
    // --no-headers is for scripts: the rows and nothing else (none when there are none).
    if shown.no_headers {
        return Ok((printable_lines(&table).into_owned(), code));
    }
    let mut text = if rows.is_empty() {
        String::from("No findings.\n")
    } else {
        table
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
    plan_report_live(snap, opts, format, None)
}

/// [`plan_report`] on a live cluster: each write the server refuses in a dry-run is marked,
/// with its message.
pub fn plan_report_live(
    snap: &Snapshot,
    opts: &Options,
    format: Format,
    live: Option<&Live>,
) -> anyhow::Result<(String, usize)> {
    let Analysis { plan, .. } = analyze(snap, opts);
    let writes = plan.len();
    let refused = |w: &PlannedWrite| {
        live.into_iter()
            .flat_map(|l| &l.refused)
            .find(|r| r.verb == w.verb && r.object == w.object)
    };
    let mut summary = PlanSummary {
        refused: live.map(|l| l.refused.len()),
        ..PlanSummary::default()
    };
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
        refused: live.map(|l| l.refused.as_slice()),
        settings: live.and_then(|l| l.settings.as_ref()),
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
        if let Some(r) = refused(w) {
            // The server's message line by line, each under the first (a caret diagram).
            let mut lines = r.message.split('\n');
            text.push_str(&format!(
                "    REFUSED by the API server (dry-run): {}\n",
                printable(lines.next().unwrap_or_default())
            ));
            for line in lines {
                text.push_str(&format!("      {}\n", printable(line)));
            }
        }
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
    if let Some(n) = summary.refused.filter(|n| *n > 0) {
        text.push_str(&format!(
            "{n} of them the API server refuses (dry-run): fix the template or constraint.\n"
        ));
    }
    Ok((printable_lines(&text).into_owned(), writes))
}

pub use crate::text::count;

/// An object as `kubectl get` takes it: the lowercase kind (kubectl's singular resource name)
/// and the name, e.g. `validatingadmissionpolicy/NAME`, `k8srequiredlabels/NAME`. kubectl
/// knows no short name for VAPs and bindings (`vap/…` is not one).
pub fn kubectl_name(o: &crate::model::ObjectRef) -> String {
    format!("{}/{}", o.kind.to_lowercase(), o.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ObjectRef;

    const TEMPLATE_AND_CONSTRAINT: &str = r#"apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: k8sdemo}
spec:
  crd: {spec: {names: {kind: K8sDemo}}}
  targets:
  - target: admission.k8s.gatekeeper.sh
    code:
    - engine: K8sNativeValidation
      source:
        validations:
        - expression: "true"
          message: "no"
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: K8sDemo
metadata: {name: c}
spec: {enforcementAction: deny}
"#;

    fn snapshot() -> Snapshot {
        let mut snap = Snapshot::offline();
        crate::load::files::load_text(&mut snap, "demo.yaml", TEMPLATE_AND_CONSTRAINT)
            .expect("loads");
        snap
    }

    fn refused(verb: Verb, kind: &str, name: &str, message: &str) -> Refused {
        let api_version = if kind == "CustomResourceDefinition" {
            "apiextensions.k8s.io/v1"
        } else {
            "admissionregistration.k8s.io/v1"
        };
        Refused {
            verb,
            object: ObjectRef::new(api_version, kind, name),
            message: message.into(),
        }
    }

    #[test]
    fn counts_and_kubectl_names() {
        assert_eq!(count(1, "error", "errors"), "1 error");
        assert_eq!(count(0, "error", "errors"), "0 errors");
        assert_eq!(count(2, "policy", "policies"), "2 policies");
        assert_eq!(
            kubectl_name(&ObjectRef::new(
                "admissionregistration.k8s.io/v1",
                "ValidatingAdmissionPolicy",
                "gatekeeper-k8sdemo"
            )),
            "validatingadmissionpolicy/gatekeeper-k8sdemo"
        );
    }

    /// A write the server refuses is an error finding on its object, in the server's words
    /// (escaped for the terminal); JSON says whose settings judged.
    /// `check`'s report (text, exit code) on an empty snapshot with `live`'s additions.
    fn checked(live: &Live, format: Format) -> (String, Exit) {
        let opts = crate::load::cel::default_options();
        check_report_live(
            &Snapshot::offline(),
            &opts,
            &format.into(),
            Vec::new(),
            live,
        )
        .expect("a report")
    }

    #[test]
    fn check_names_a_refused_write_and_the_settings() {
        let live = Live {
            settings: Some(Judged::Local {
                why: "no copy leads".into(),
            }),
            refused: vec![refused(
                Verb::Create,
                "ValidatingAdmissionPolicy",
                "gatekeeper-k8sdemo",
                "spec.validations[0]: Invalid\u{1b}[2J",
            )],
            ..Live::default()
        };
        let (text, code) = checked(&live, Format::Table);
        assert_eq!(code, Exit::Findings);
        assert_eq!(
            text,
            "SEVERITY  CODE           OBJECT                                        MESSAGE\n\
             ERROR     write-refused  validatingadmissionpolicy/gatekeeper-k8sdemo  the API server refuses the create that would bring it in line: spec.validations[0]: Invalid\\x1b[2J\n\
             \n\
             1 error, 0 warnings, 0 infos in 0 templates, 0 constraints, 0 policies, 0 bindings\n"
        );
        let (json, _) = checked(&live, Format::Json);
        let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
        assert_eq!(json["settings"]["source"], "local", "{json}");
        assert_eq!(json["settings"]["why"], "no copy leads", "{json}");
        assert_eq!(json["summary"]["errors"], 1, "{json}");
        assert_eq!(json["findings"][0]["code"], "write-refused", "{json}");
        // What the leader's Lease says another writer contests is an error of its own.
        let contested = Live {
            contested: vec![(
                crate::model::ObjectId::new(
                    "ValidatingAdmissionPolicyBinding",
                    "gatekeeper-k8sdemo",
                ),
                "another writer (field manager \"manager\") undid this copy's writes".into(),
            )],
            ..live
        };
        let (json, code) = checked(&contested, Format::Json);
        assert_eq!(code, Exit::Findings);
        let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
        let conflict = json["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|f| f["code"] == "writer-conflict")
            .unwrap_or_else(|| panic!("a writer-conflict finding: {json}"));
        assert_eq!(conflict["severity"], "error");
        assert_eq!(
            conflict["object"]["kind"],
            "ValidatingAdmissionPolicyBinding"
        );
        assert!(
            conflict["message"]
                .as_str()
                .is_some_and(|m| m.contains("manager"))
        );
    }

    #[test]
    fn check_without_findings_says_so() {
        let (text, code) = check_report(
            &Snapshot::offline(),
            &crate::load::cel::default_options(),
            Format::Table,
        )
        .expect("a report");
        assert_eq!(code, Exit::Clean);
        assert_eq!(
            text,
            "No findings.\n\n0 errors, 0 warnings, 0 infos in 0 templates, 0 constraints, 0 policies, 0 bindings\n"
        );
    }

    /// A refused write is marked under its line of the plan, and counted at the end; the
    /// plan itself is the same as without the server.
    #[test]
    fn plan_marks_the_writes_the_server_refuses() {
        let snap = snapshot();
        let opts = crate::load::cel::default_options();
        let (offline, writes) = plan_report(&snap, &opts, Format::Table).expect("a plan");
        assert!(writes >= 2, "{offline}");
        // The default shape gives constraint c a VAP of its own (inline).
        let policy_name = crate::core::names::inline_policy_name("K8sDemo", "c");
        assert_eq!(policy_name, "gatekeeper-k8sdemo.c");
        let policy = format!("validatingadmissionpolicy/{policy_name}");
        assert!(
            offline.contains(&format!("create {policy}  # ")),
            "{offline}"
        );
        assert!(!offline.contains("REFUSED"), "{offline}");
        let live = Live {
            settings: None,
            refused: vec![refused(
                Verb::Create,
                "ValidatingAdmissionPolicy",
                &policy_name,
                "no\nsecond line",
            )],
            ..Live::default()
        };
        let (text, n) = plan_report_live(&snap, &opts, Format::Table, Some(&live)).expect("a plan");
        assert_eq!(n, writes);
        let lines: Vec<&str> = text.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with(&format!("create {policy}  # ")))
            .expect("the policy's create");
        // The server's lines as lines (issue 42: a caret diagram printed with literal `\n`s).
        assert_eq!(
            lines[at + 1..at + 3],
            [
                "    REFUSED by the API server (dry-run): no",
                "      second line"
            ]
        );
        assert_eq!(
            lines.last(),
            Some(&"1 of them the API server refuses (dry-run): fix the template or constraint.")
        );
        let (json, _) = plan_report_live(&snap, &opts, Format::Json, Some(&live)).expect("a plan");
        let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
        assert_eq!(json["summary"]["refused"], 1, "{json}");
        assert_eq!(json["refused"][0]["message"], "no\nsecond line", "{json}");
    }

    #[test]
    fn an_empty_plan_says_so() {
        let (text, writes) = plan_report(
            &Snapshot::offline(),
            &crate::load::cel::default_options(),
            Format::Table,
        )
        .expect("a plan");
        assert_eq!(writes, 0);
        assert_eq!(text, "No changes: the cluster matches the desired state.\n");
    }
}
