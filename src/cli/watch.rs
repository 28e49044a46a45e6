//! `check -w`: the report once, then a line for each finding that appears (`+`) or goes (`-`)
//! as the cluster changes, as `kubectl get -w` prints rows as they change. A user who fixes a
//! template watches its findings go. The cluster is watched, not polled: the copy runs as a
//! view (the TUI without `--reconcile`), which writes nothing; each settled change is judged
//! with the same analysis and settings as the first report.

use super::args::ReportOutputArgs;
use super::exit::Exit;
use super::output::Output;
use crate::core::{Finding, Summary, analyze};
use crate::text::{printable, printable_lines};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a change is let settle before the cluster is judged again: one template brings
/// its CRD, VAPs and bindings within moments, judged once rather than half-way.
const SETTLE: Duration = Duration::from_millis(700);

/// The findings shown, by what they are and what they are about.
type Shown = BTreeMap<(String, String), Finding>;

fn shown(findings: Vec<Finding>) -> Shown {
    findings
        .into_iter()
        .map(|f| ((f.code.as_str().to_string(), kubectl_name(&f)), f))
        .collect()
}

fn kubectl_name(f: &Finding) -> String {
    super::report::kubectl_name(&f.object)
}

/// One line of the watch: `+` a finding that appeared (or says something new now), `-` one
/// that went, with the table's columns.
fn line(sign: char, f: &Finding) -> String {
    format!(
        "{sign} {:<7}  {}  {}  {}",
        f.severity.as_str().to_uppercase(),
        f.code.as_str(),
        printable(&kubectl_name(f)),
        printable_lines(&f.message)
    )
}

/// The lines from `before` to `after`: what went first, then what came, each in the order of
/// their keys. A finding whose message changed is said again with `+`.
fn changes(before: &Shown, after: &Shown) -> Vec<String> {
    let gone = before
        .iter()
        .filter(|(key, _)| !after.contains_key(*key))
        .map(|(_, f)| line('-', f));
    let came = after
        .iter()
        .filter(|(key, f)| before.get(*key).is_none_or(|was| was.message != f.message))
        .map(|(_, f)| line('+', f));
    gone.chain(came).collect()
}

/// `check -w` on the current context: ends on SIGINT or SIGTERM with `check`'s exit code for
/// what it showed last (0 clean, 1 warnings or errors).
pub fn check_watch(cli: &super::args::Cli, out: &ReportOutputArgs) -> anyhow::Result<Exit> {
    if !matches!(out.output, Output::Table | Output::Wide) || out.no_headers {
        return Err(super::exit::usage(
            "check -w prints the table, then a line per finding as it appears or goes: -o json, yaml, name, jsonpath and --no-headers are for one report (run check again)",
        ));
    }
    super::live::runtime()?.block_on(async {
        let first = super::live::first_report(cli, out).await?;
        super::stdio::stdout(&first.text)?;
        let mut showing = shown(first.findings);
        let lease = cli.lease();
        let config = crate::controller::Config::new(
            first.options.clone(),
            crate::controller::Mode::ReadOnly,
            lease.lease_namespace.clone(),
            lease.lease_name.clone(),
        );
        let view =
            crate::controller::launch(first.client, config, crate::controller::Tuning::default())
                .await
                .map_err(|e| anyhow::anyhow!("watching {}: {e}", first.url))?;
        let mut states = view.subscribe();
        // Listening for SIGINT and SIGTERM from here on, through every wait below: a signal
        // that came while no listener was waiting (during the settle, or the analysis) was
        // lost, and the process, whose handler was installed, never ended.
        let mut stopped = std::pin::pin!(super::live::terminated());
        loop {
            tokio::select! {
                changed = states.changed() => if changed.is_err() { break },
                () = &mut stopped => break,
            }
            tokio::select! {
                () = tokio::time::sleep(SETTLE) => {}
                () = &mut stopped => break,
            }
            let state = states.borrow_and_update().clone();
            // Half-listed (a watch relisting), nothing can be judged: the next change will.
            if !state.synced {
                continue;
            }
            let now = shown(analyze(&state.snapshot, &first.options).findings);
            for l in changes(&showing, &now) {
                super::stdio::stdout(&format!("{l}\n"))?;
            }
            showing = now;
        }
        super::live::stop(view).await;
        let last: Vec<Finding> = showing.into_values().collect();
        Ok(Exit::findings_if(Summary::of(&last).has_problems()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Code;
    use crate::model::ObjectRef;

    fn finding(code: Code, name: &str, message: &str) -> Finding {
        let object = ObjectRef::new("templates.gatekeeper.sh/v1", "ConstraintTemplate", name);
        Finding::new(code, object, message.to_string())
    }

    #[test]
    fn what_went_then_what_came_and_what_changed() {
        let before = shown(vec![
            finding(Code::TemplateError, "a", "bad"),
            finding(Code::TemplateError, "b", "worse"),
        ]);
        let after = shown(vec![
            finding(Code::TemplateError, "b", "worse still"),
            finding(Code::CrdMissing, "c", "no CRD"),
        ]);
        let lines = changes(&before, &after);
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(
            lines[0].starts_with("- ERROR    template-error  constrainttemplate/a  bad"),
            "{lines:#?}"
        );
        assert!(
            lines[1].starts_with("+ ERROR    crd-missing  constrainttemplate/c"),
            "{lines:#?}"
        );
        assert!(lines[2].ends_with("worse still"), "{lines:#?}");
        assert!(
            changes(&after, &after).is_empty(),
            "nothing changed: nothing said"
        );
    }
}
