//! Audit results in the TUI (issue 13): counts on the constraint and template nodes, the
//! violating objects in the detail pane, and results kept but drawn stale once the constraint
//! or its template changes. ratatui's TestBackend, the fixture of tests/tui_snapshots.rs.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

use kubectl_vap::admission::audit::{
    AuditReport, ConstraintAudit, Hidden, ObjectError, Status, Violation,
};
use kubectl_vap::admission::test::ObjectId;
use kubectl_vap::controller::{LeaseInfo, LiveState};
use kubectl_vap::core::verdict::ConstraintRef;
use kubectl_vap::load::cel::default_options;
use kubectl_vap::tui::live_source::data_from_live;
use kubectl_vap::tui::tree_view::key_of;
use kubectl_vap::tui::{Action, App, update, view};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::{Color, Modifier};
use std::sync::Arc;

mod support;

/// The fixture as a live cluster, every constraint at `generation`.
fn live(generation: i64) -> Action {
    let mut snapshot = support::tui::snapshot();
    for c in &mut snapshot.constraints {
        c.meta.generation = generation;
    }
    let state = LiveState {
        snapshot: Arc::new(snapshot),
        synced: true,
        lease: LeaseInfo {
            holder: Some("laptop-1".into()),
            ..LeaseInfo::default()
        },
        ..LiveState::default()
    };
    Action::Data(Arc::new(data_from_live(
        Arc::new(state),
        "kind-payments",
        false,
        &default_options(),
    )))
}

fn pod(name: &str) -> ObjectId {
    ObjectId {
        api_version: "v1".into(),
        kind: "Pod".into(),
        namespace: Some("shop".into()),
        name: name.into(),
    }
}

fn audited(name: &str, status: Status, violations: Vec<Violation>) -> ConstraintAudit {
    ConstraintAudit {
        constraint: ConstraintRef {
            kind: "K8sRequiredLabels".into(),
            name: name.into(),
        },
        template: "k8srequiredlabels".into(),
        binding: Some(format!("gatekeeper-k8srequiredlabels-{name}")),
        validation_actions: vec!["Warn".into()],
        status,
        note: (status == Status::NotObservable)
            .then(|| "bound with Audit only (dryrun): verdicts go to the audit log".into()),
        in_scope: 3,
        checked: 3,
        violations,
        hidden: Vec::new(),
        errors: Vec::new(),
    }
}

/// What `kubectl vap audit k8srequiredlabels` found: two Pods warned about by one constraint,
/// one hidden behind another denial; the other constraint bound with Audit only.
fn report() -> Action {
    let warn = |name: &str| Violation {
        object: pod(name),
        action: "Warn",
        message: format!("you must provide labels: {{\"app\"}} ({name})"),
    };
    let mut pods = audited(
        "pods-must-have-app",
        Status::Audited,
        vec![warn("web-1"), warn("web-2")],
    );
    pods.hidden.push(Hidden {
        object: pod("db-0"),
        denied_by: "gatekeeper-k8sdisallowedtags-no-latest".into(),
    });
    Action::Audited(Arc::new(AuditReport {
        complete: true,
        constraints: vec![
            pods,
            audited("ns-must-have-owner", Status::NotObservable, Vec::new()),
        ],
        requests: 3,
    }))
}

struct Screen {
    app: App,
    term: Terminal<TestBackend>,
}

impl Screen {
    fn after(actions: Vec<Action>) -> Screen {
        let mut app = App::new(false);
        // Wide enough that the detail pane (a third of the screen beside a tree that takes
        // what its rows need) shows a violation's message on one row.
        update(&mut app, Action::Resize(200, 40));
        for a in actions {
            update(&mut app, a);
        }
        // Templates start collapsed: open this one, as enter does.
        app.tree
            .state
            .open(vec![key_of("template/k8srequiredlabels")]);
        app.tree.rebuild(&app.filter);
        let mut s = Screen {
            app,
            term: Terminal::new(TestBackend::new(200, 40)).expect("test backend"),
        };
        s.select(&[
            "template/k8srequiredlabels",
            "constraint/K8sRequiredLabels/pods-must-have-app",
        ]);
        s
    }
    fn select(&mut self, ids: &[&str]) {
        self.app
            .tree
            .state
            .select(ids.iter().map(|i| key_of(i)).collect());
        self.term
            .draw(|f| view::draw(f, &mut self.app))
            .expect("draw");
    }
    /// The screen, the event log's local clock (`│HH:MM:SS `) masked.
    fn text(&self) -> String {
        let screen = self.term.backend().to_string();
        let clock = |l: &str| {
            let b = l.as_bytes();
            l.starts_with("\"│")
                && b.len() > 13
                && [4, 5, 7, 8, 10, 11].iter().all(|&i| b[i].is_ascii_digit())
                && b[6] == b':'
                && b[9] == b':'
        };
        screen
            .lines()
            .map(|l| match clock(l) {
                true => format!("\"│HH:MM:SS{}", &l[12..]),
                false => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
    /// The first cell of `what` on the row holding `needle`.
    fn cell(&self, needle: &str, what: &str) -> Option<ratatui::buffer::Cell> {
        let buf = self.term.backend().buffer();
        (0..buf.area.height).find_map(|y| {
            let row: String = (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect();
            match (row.contains(needle), row.find(what)) {
                (true, Some(i)) => Some(buf[(row[..i].chars().count() as u16, y)].clone()),
                _ => None,
            }
        })
    }
    /// The row holding `needle`, and whether its `what` cell is dimmed.
    fn dimmed(&self, needle: &str, what: &str) -> bool {
        self.cell(needle, what)
            .is_some_and(|c| c.modifier.contains(Modifier::DIM))
    }
}

#[test]
fn tui_violations_on_nodes_and_in_the_detail_pane() {
    let s = Screen::after(vec![live(1), report()]);
    let text = s.text();
    insta::assert_snapshot!("violations_fresh", text);
    assert!(text.contains("pods-must-have-app"), "{text}");
    for line in [
        "2 violations",
        "Warn Pod shop/web-1",
        "not observable, denied first by",
    ] {
        assert!(text.contains(line), "missing {line:?}:\n{text}");
    }
    assert!(!text.contains("stale"), "{text}");
    assert!(!s.dimmed("pods-must-have-app", "2 violations"));
}

#[test]
fn tui_violations_go_stale_when_the_constraint_changes() {
    // The constraint's spec changed after the audit (generation 1 → 2): kept, drawn stale.
    let s = Screen::after(vec![live(1), report(), live(2)]);
    let text = s.text();
    insta::assert_snapshot!("violations_stale", text);
    assert!(text.contains("stale — press a to re-audit"), "{text}");
    assert!(text.contains("Warn Pod shop/web-1"), "still shown:\n{text}");
    assert!(s.dimmed("pods-must-have-app", "2 violations"), "{text}");
}

#[test]
fn tui_not_observable_is_said_on_the_node_and_in_the_detail() {
    let mut s = Screen::after(vec![live(1), report()]);
    s.select(&[
        "template/k8srequiredlabels",
        "constraint/K8sRequiredLabels/ns-must-have-owner",
    ]);
    let text = s.text();
    assert!(text.contains("Violations: not observable"), "{text}");
    assert!(text.contains("bound with Audit only (dryrun)"), "{text}");
    // The template: the total over its constraints, the unseen one adding nothing.
    s.select(&["template/k8srequiredlabels"]);
    let text = s.text();
    assert!(
        text.contains("2 in the audited constraints of k8srequiredlabels"),
        "{text}"
    );
}

/// A constraint with no violations but objects the server was not asked about (forbidden) is
/// not a clean green "0 violations": it says how many were unseen, in the warning colour, and
/// that the audit was interrupted.
#[test]
fn tui_unseen_objects_and_an_interrupted_audit_are_not_a_clean_zero() {
    let mut taken = audited("taken-name", Status::Audited, Vec::new());
    taken.errors.push(ObjectError {
        object: pod("api-0"),
        outcome: "forbidden",
        message: "User \"ci\" cannot patch resource \"pods\"".into(),
        over_cost_budget: false,
    });
    let cut = Action::Audited(Arc::new(AuditReport {
        complete: false,
        constraints: vec![taken],
        requests: 3,
    }));
    let mut s = Screen::after(vec![live(1), cut]);
    s.select(&[
        "template/k8srequiredlabels",
        "constraint/K8sRequiredLabels/taken-name",
    ]);
    let text = s.text();
    let badge = "0 violations, 1 unseen, interrupted";
    assert!(text.contains(badge), "{text}");
    // The template's row (the selected row is drawn in the selection's colours).
    let colour = s.cell("● k8srequiredlabels", badge).map(|c| c.fg);
    assert_eq!(colour, Some(Color::Yellow), "{text}");
    assert!(
        text.contains("Violations (0 of 3 checked, 3 in scope, 1 unseen, interrupted)"),
        "{text}"
    );
    assert!(
        text.contains("! Pod shop/api-0 not checked (forbidden)"),
        "{text}"
    );
}
