//! The audit results the TUI keeps while it runs: one entry per constraint, with the versions
//! (`metadata.generation`, else `resourceVersion`) of the constraint and its template seen when
//! it was audited. An entry whose constraint or template has changed since is *stale*: still
//! shown, dimmed, until `a` audits it again. Pure: the store is filled from `AuditReport`s and
//! read against whatever snapshot is current.

use crate::admission::audit::{AuditReport, ConstraintAudit, Status, template_name};
use crate::core::tree::{
    constraint_node_id, constraint_of_node, template_node_id, template_of_node,
};
use crate::model::meta::Meta;
use crate::model::{Constraint, ObjectId};
use crate::snapshot::Snapshot;
use crate::tui::say::glyphs;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use std::collections::{BTreeMap, HashMap};

/// A constraint by `(kind, name)`.
pub type ConstraintKey = (String, String);

/// What an audit saw of a constraint and its template. Generation first: Gatekeeper writes
/// constraint and template status all the time, which moves `resourceVersion` but not the spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Versions {
    pub constraint: Option<String>,
    pub template: Option<String>,
}

fn version(meta: &Meta) -> Option<String> {
    if meta.generation > 0 {
        Some(format!("generation {}", meta.generation))
    } else if !meta.resource_version.is_empty() {
        Some(format!("resourceVersion {}", meta.resource_version))
    } else {
        None
    }
}

/// The current versions of a constraint and its template; `None` when the constraint is gone.
fn current(snap: &Snapshot, key: &ConstraintKey) -> Option<Versions> {
    let c = snap
        .constraints
        .iter()
        .find(|c| c.kind == key.0 && c.name() == key.1)?;
    Some(versions_of(snap, c))
}

fn versions_of(snap: &Snapshot, c: &Constraint) -> Versions {
    let tname = template_name(snap, &c.kind);
    Versions {
        constraint: version(&c.meta),
        template: snap
            .templates
            .iter()
            .find(|t| t.name() == tname)
            .and_then(|t| version(&t.meta)),
    }
}

/// Why a kept result no longer describes the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stale {
    Constraint,
    Template,
    Gone,
}

impl Stale {
    pub fn as_str(self) -> &'static str {
        match self {
            Stale::Constraint => "the constraint changed since",
            Stale::Template => "its template changed since",
            Stale::Gone => "the constraint is gone",
        }
    }
}

/// One constraint's last audit.
#[derive(Debug, Clone)]
pub struct Entry {
    pub audit: ConstraintAudit,
    pub seen: Versions,
    /// The audit ran to its end (not interrupted).
    pub complete: bool,
}

/// What a tree node shows about its audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Badge {
    /// Violations found (summed over a template's constraints).
    pub violations: usize,
    /// Objects in scope whose verdict was not seen: hidden behind another binding's denial, or
    /// not checked (forbidden, rejected by a webhook). Never counted as compliant.
    pub unchecked: usize,
    /// Some audit behind it was interrupted: the count is partial.
    pub interrupted: bool,
    /// Some result behind it is stale.
    pub stale: bool,
    /// A constraint whose verdicts could not be seen (`dryrun`: not observable; not bound).
    pub unseen: Option<Status>,
}

impl Badge {
    /// Whether it says everything in scope was seen: nothing hidden, unchecked or cut short.
    fn whole(&self) -> bool {
        self.unseen.is_none() && self.unchecked == 0 && !self.interrupted
    }
}

#[derive(Debug, Default)]
pub struct Store {
    entries: BTreeMap<ConstraintKey, Entry>,
    /// Versions seen when `a` was pressed, per constraint, until its result arrives. The
    /// audit reads the cluster after that, so a change in between makes the result stale
    /// (never wrongly fresh).
    pending: HashMap<ConstraintKey, Versions>,
}

impl Store {
    /// `a` was pressed on `target` (as `kubectl vap audit TARGET` takes it): remember what the
    /// constraints looked like.
    pub fn begin(&mut self, target: &str, snap: &Snapshot) {
        for c in crate::admission::audit::select(snap, Some(target)).unwrap_or_default() {
            self.pending
                .insert((c.kind.clone(), c.name().to_string()), versions_of(snap, c));
        }
    }

    /// An audit's results replace what was kept for the constraints it covers.
    pub fn record(&mut self, report: &AuditReport, snap: &Snapshot) {
        for a in &report.constraints {
            let key = (a.constraint.kind.clone(), a.constraint.name.clone());
            let seen = self
                .pending
                .remove(&key)
                .or_else(|| current(snap, &key))
                .unwrap_or_default();
            self.entries.insert(
                key,
                Entry {
                    audit: a.clone(),
                    seen,
                    complete: report.complete,
                },
            );
        }
    }

    pub fn get(&self, kind: &str, name: &str) -> Option<&Entry> {
        self.entries.get(&(kind.to_string(), name.to_string()))
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a kept result is stale against `snap`, and why; `None`: fresh (or not kept).
    pub fn is_stale(&self, kind: &str, name: &str, snap: &Snapshot) -> Option<Stale> {
        let key = (kind.to_string(), name.to_string());
        let entry = self.entries.get(&key)?;
        let Some(now) = current(snap, &key) else {
            return Some(Stale::Gone);
        };
        if now.constraint != entry.seen.constraint {
            Some(Stale::Constraint)
        } else if now.template != entry.seen.template {
            Some(Stale::Template)
        } else {
            None
        }
    }

    /// The badge of every node with a kept result, by tree node id (`constraint/Kind/name`,
    /// and `template/NAME` rolled up over its constraints).
    pub fn badges(&self, snap: &Snapshot) -> HashMap<String, Badge> {
        let mut out: HashMap<String, Badge> = HashMap::new();
        for ((kind, name), e) in &self.entries {
            let stale = self.is_stale(kind, name, snap).is_some();
            let unseen = (e.audit.status != Status::Audited).then_some(e.audit.status);
            let b = Badge {
                violations: e.audit.violations.len(),
                unchecked: e.audit.hidden.len() + e.audit.errors.len(),
                interrupted: !e.complete && unseen.is_none(),
                stale,
                unseen,
            };
            out.insert(constraint_node_id(&ObjectId::new(kind, name)), b);
            // A template whose audited constraints were all unseen does not claim 0 violations.
            let t = out
                .entry(template_node_id(&template_name(snap, kind)))
                .or_insert(Badge {
                    unseen,
                    ..Badge::default()
                });
            t.violations += b.violations;
            t.unchecked += b.unchecked;
            t.interrupted |= b.interrupted;
            t.stale |= stale;
            if unseen.is_none() {
                t.unseen = None;
            }
        }
        out
    }
}

/// What is stale: readable, but dimmer than any other secondary text.
fn dimmed() -> Style {
    glyphs::dim().add_modifier(Modifier::DIM)
}

/// The spans a badge adds to a tree line. Green only for a whole audit with no violations:
/// objects not seen, or an audit cut short, are said and drawn as a warning.
pub fn badge_spans(b: &Badge) -> Vec<Span<'static>> {
    let mut text = match b.unseen {
        Some(Status::NotObservable) => "not observable".to_string(),
        Some(Status::NotAudited) => "not audited".to_string(),
        Some(_) => "not bound: nothing to audit".to_string(),
        None if b.violations == 1 => "1 violation".to_string(),
        None => format!("{} violations", b.violations),
    };
    if b.unchecked > 0 {
        text.push_str(&format!(", {} unseen", b.unchecked));
    }
    if b.interrupted {
        text.push_str(", interrupted");
    }
    let style = if b.stale {
        dimmed()
    } else if b.violations > 0 && b.unseen.is_none() {
        glyphs::alarm()
    } else if !b.whole() {
        glyphs::warn()
    } else {
        Style::new().fg(Color::Green)
    };
    let mut out = vec![Span::raw("  "), Span::styled(text, style)];
    if b.stale {
        out.push(Span::styled(" (stale)", dimmed()));
    }
    out
}

/// The detail pane's section for a constraint, or for a template (its constraints' totals).
pub fn section(store: &Store, snap: &Snapshot, node_id: &str) -> Vec<Line<'static>> {
    let bold = glyphs::bold();
    if let Some(tname) = template_of_node(node_id) {
        let Some(b) = store.badges(snap).get(node_id).copied() else {
            return Vec::new();
        };
        let mut out = vec![
            Line::default(),
            Line::styled("Violations (last audit)", bold),
        ];
        let text = match b.unseen {
            Some(_) => format!("  none of the audited constraints of {tname} could be seen"),
            None => format!(
                "  {} in the audited constraints of {tname}{}{}; select one for the objects",
                b.violations,
                match b.unchecked {
                    0 => String::new(),
                    n => format!(
                        ", {} unseen",
                        crate::tui::say::words::count(n, "object verdict", "object verdicts")
                    ),
                },
                if b.interrupted {
                    " (an audit was interrupted)"
                } else {
                    ""
                }
            ),
        };
        let mut l = vec![Span::raw(text)];
        if b.stale {
            l.push(Span::styled(" — some are stale", dimmed()));
        }
        out.push(Line::from(l));
        return out;
    }
    let Some(constraint) = constraint_of_node(node_id) else {
        return Vec::new();
    };
    let (kind, name) = (constraint.kind.as_str(), constraint.name.as_str());
    // Never audited: nothing to say (the key bar and help name `a`).
    let Some(e) = store.get(kind, name) else {
        return Vec::new();
    };
    let stale = store.is_stale(kind, name, snap);
    // Stale results stay readable but dimmed: they describe an older spec.
    let body = |s: Style| if stale.is_some() { dimmed() } else { s };
    let a = &e.audit;
    let mut out = vec![Line::default()];
    let title = match a.status {
        Status::Audited => format!(
            "Violations ({} of {} checked, {} in scope{}{})",
            a.violations.len(),
            a.checked,
            a.in_scope,
            match a.hidden.len() + a.errors.len() {
                0 => String::new(),
                n => format!(", {n} unseen"),
            },
            if e.complete { "" } else { ", interrupted" }
        ),
        Status::NotObservable => "Violations: not observable".to_string(),
        Status::NotBound => "Violations: not bound".to_string(),
        Status::NotAudited => "Violations: not audited".to_string(),
    };
    out.push(Line::styled(title, body(bold)));
    if let Some(why) = stale {
        out.push(Line::styled(
            format!("  stale — press a to re-audit ({})", why.as_str()),
            glyphs::warn(),
        ));
    }
    if let Some(note) = &a.note {
        out.push(Line::styled(format!("  {note}"), body(Style::new())));
    }
    for v in &a.violations {
        out.push(Line::styled(
            format!("  {} {}", v.action, v.object),
            body(Style::new().fg(Color::Red)),
        ));
        out.push(Line::styled(
            format!("    {}", v.message),
            body(Style::new()),
        ));
    }
    for h in &a.hidden {
        out.push(Line::styled(
            format!(
                "  ? {}: not observable, denied first by {}",
                h.object, h.denied_by
            ),
            body(glyphs::warn()),
        ));
    }
    for x in &a.errors {
        out.push(Line::styled(
            format!(
                "  ! {} not checked ({}): {}",
                x.object, x.outcome, x.message
            ),
            body(Style::new().fg(Color::Red)),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::audit::Violation;
    use crate::admission::test::ObjectId;
    use crate::core::verdict::ConstraintRef;
    use serde_json::json;

    fn snap(constraint_generation: i64, template_generation: i64) -> Snapshot {
        let mut s = Snapshot::default();
        s.insert(
            json!({"apiVersion": "templates.gatekeeper.sh/v1", "kind": "ConstraintTemplate",
                   "metadata": {"name": "k8sreq", "generation": template_generation},
                   "spec": {"crd": {"spec": {"names": {"kind": "K8sReq"}}}}}),
            Default::default(),
        )
        .expect("template");
        for name in ["one", "two"] {
            s.insert(
                json!({"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sReq",
                       "metadata": {"name": name, "generation": constraint_generation,
                                    "resourceVersion": "7"}}),
                Default::default(),
            )
            .expect("constraint");
        }
        s
    }

    fn audit(name: &str, violations: usize, status: Status) -> ConstraintAudit {
        ConstraintAudit {
            constraint: ConstraintRef {
                kind: "K8sReq".into(),
                name: name.into(),
            },
            template: "k8sreq".into(),
            binding: None,
            validation_actions: vec!["Deny".into()],
            status,
            note: None,
            in_scope: 5,
            checked: 5,
            violations: (0..violations)
                .map(|i| Violation {
                    object: ObjectId {
                        api_version: "v1".into(),
                        kind: "Pod".into(),
                        namespace: Some("default".into()),
                        name: format!("p{i}"),
                    },
                    action: "Deny",
                    message: "missing label".into(),
                })
                .collect(),
            hidden: Vec::new(),
            errors: Vec::new(),
        }
    }

    fn report(audits: Vec<ConstraintAudit>) -> AuditReport {
        AuditReport {
            complete: true,
            constraints: audits,
            requests: 5,
        }
    }

    #[test]
    fn a_result_goes_stale_when_the_constraint_or_template_generation_changes() {
        let before = snap(1, 1);
        let mut store = Store::default();
        store.record(&report(vec![audit("one", 2, Status::Audited)]), &before);
        assert_eq!(store.is_stale("K8sReq", "one", &before), None);
        // Status writes move resourceVersion, not generation: still fresh.
        let mut status_only = snap(1, 1);
        status_only.constraints[0].meta.resource_version = "99".into();
        assert_eq!(store.is_stale("K8sReq", "one", &status_only), None);
        assert_eq!(
            store.is_stale("K8sReq", "one", &snap(2, 1)),
            Some(Stale::Constraint)
        );
        assert_eq!(
            store.is_stale("K8sReq", "one", &snap(1, 2)),
            Some(Stale::Template)
        );
        assert_eq!(
            store.is_stale("K8sReq", "one", &Snapshot::default()),
            Some(Stale::Gone)
        );
        // Not audited: nothing to be stale.
        assert_eq!(store.is_stale("K8sReq", "two", &snap(2, 2)), None);
    }

    #[test]
    fn without_a_generation_the_resource_version_decides() {
        let mut before = snap(0, 0);
        let mut store = Store::default();
        store.record(&report(vec![audit("one", 1, Status::Audited)]), &before);
        assert_eq!(store.is_stale("K8sReq", "one", &before), None);
        before.constraints[0].meta.resource_version = "8".into();
        assert_eq!(
            store.is_stale("K8sReq", "one", &before),
            Some(Stale::Constraint)
        );
    }

    #[test]
    fn versions_seen_when_a_was_pressed_win_over_the_snapshot_at_arrival() {
        let mut store = Store::default();
        store.begin("k8sreq", &snap(1, 1));
        // The constraint changed while the audit ran: its result may describe either spec.
        let later = snap(2, 1);
        store.record(&report(vec![audit("one", 1, Status::Audited)]), &later);
        assert_eq!(
            store.is_stale("K8sReq", "one", &later),
            Some(Stale::Constraint)
        );
        // A pending entry is used once.
        store.record(&report(vec![audit("one", 1, Status::Audited)]), &later);
        assert_eq!(store.is_stale("K8sReq", "one", &later), None);
    }

    #[test]
    fn counts_roll_up_to_the_template_and_staleness_with_them() {
        let s = snap(1, 1);
        let mut store = Store::default();
        store.record(
            &report(vec![
                audit("one", 2, Status::Audited),
                audit("two", 3, Status::Audited),
            ]),
            &s,
        );
        let b = store.badges(&s);
        assert_eq!(b["constraint/K8sReq/one"].violations, 2);
        assert_eq!(b["constraint/K8sReq/two"].violations, 3);
        assert_eq!(
            b["template/k8sreq"],
            Badge {
                violations: 5,
                ..Badge::default()
            }
        );
        // A later audit of one constraint replaces only its entry.
        store.record(&report(vec![audit("one", 0, Status::Audited)]), &s);
        assert_eq!(store.badges(&s)["template/k8sreq"].violations, 3);
        // One stale constraint makes the template's total stale.
        let mut changed = snap(1, 1);
        changed.constraints[1].meta.generation = 2;
        let b = store.badges(&changed);
        assert!(!b["constraint/K8sReq/one"].stale);
        assert!(b["constraint/K8sReq/two"].stale);
        assert!(b["template/k8sreq"].stale);
    }

    /// A badge's text and colour.
    fn drawn(b: &Badge) -> (String, Option<Color>) {
        let spans = badge_spans(b);
        let text: String = spans.iter().map(|s| s.content.clone()).collect();
        (text.trim().to_string(), spans[1].style.fg)
    }

    #[test]
    fn unseen_objects_and_interrupted_audits_are_not_drawn_clean() {
        use crate::admission::audit::{Hidden, ObjectError};
        let s = snap(1, 1);
        let mut store = Store::default();
        let mut unseen = audit("one", 0, Status::Audited);
        let object = || ObjectId {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some("default".into()),
            name: "p".into(),
        };
        unseen.errors.push(ObjectError {
            object: object(),
            outcome: "forbidden",
            message: "cannot patch".into(),
            over_cost_budget: false,
        });
        unseen.hidden.push(Hidden {
            object: object(),
            denied_by: "another".into(),
        });
        store.record(&report(vec![unseen, audit("two", 0, Status::Audited)]), &s);
        let b = store.badges(&s);
        assert_eq!(
            drawn(&b["constraint/K8sReq/one"]),
            ("0 violations, 2 unseen".into(), Some(Color::Yellow))
        );
        // Everything seen, nothing found: the one clean green.
        assert_eq!(
            drawn(&b["constraint/K8sReq/two"]),
            ("0 violations".into(), Some(Color::Green))
        );
        assert_eq!(
            drawn(&b["template/k8sreq"]),
            ("0 violations, 2 unseen".into(), Some(Color::Yellow))
        );
        // Interrupted: partial, said so, never green.
        let mut cut = report(vec![audit("two", 0, Status::Audited)]);
        cut.complete = false;
        store.record(&cut, &s);
        let b = store.badges(&s);
        assert_eq!(
            drawn(&b["constraint/K8sReq/two"]),
            ("0 violations, interrupted".into(), Some(Color::Yellow))
        );
        assert_eq!(
            drawn(&b["template/k8sreq"]),
            (
                "0 violations, 2 unseen, interrupted".into(),
                Some(Color::Yellow)
            )
        );
        // Violations stay red, with what was not seen beside them.
        let mut red = audit("one", 1, Status::Audited);
        red.hidden.push(Hidden {
            object: object(),
            denied_by: "another".into(),
        });
        store.record(&report(vec![red]), &s);
        assert_eq!(
            drawn(&store.badges(&s)["constraint/K8sReq/one"]),
            ("1 violation, 1 unseen".into(), Some(Color::Red))
        );
    }

    #[test]
    fn not_observable_is_said_not_counted_as_clean() {
        let s = snap(1, 1);
        let mut store = Store::default();
        store.record(&report(vec![audit("one", 0, Status::NotObservable)]), &s);
        let b = store.badges(&s)["constraint/K8sReq/one"];
        assert_eq!(b.unseen, Some(Status::NotObservable));
        assert_eq!(
            store.badges(&s)["template/k8sreq"].unseen,
            Some(Status::NotObservable)
        );
        // Once one of its constraints is seen, the template has a count.
        store.record(&report(vec![audit("two", 1, Status::Audited)]), &s);
        assert_eq!(store.badges(&s)["template/k8sreq"].unseen, None);
        let text: String = badge_spans(&b).iter().map(|s| s.content.clone()).collect();
        assert_eq!(text.trim(), "not observable");
    }
}
