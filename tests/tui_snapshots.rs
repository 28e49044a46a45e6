//! The TUI on ratatui's TestBackend: whole-screen snapshots of each view and state, driven by
//! the same key handling and `update` as the real terminal. The fixture is
//! tests/fixtures/tui/snapshot.yaml (every node state in a few objects).

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

use chrono::TimeZone;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use kubectl_vap::controller::{
    AccessError, AccessErrorKind, ClusterEvent, Connection, EventResult, EventVerb, Happened,
    LeaderHealth, LeaseInfo, LiveState, ReconcileEvent,
};
use kubectl_vap::core::tree::Node;
use kubectl_vap::core::{Options, PolicyShape};
use kubectl_vap::load::cel::default_options;
use kubectl_vap::model::ObjectRef;
use kubectl_vap::tui::app::{Mode, PromptKind};
use kubectl_vap::tui::keymap::Screen;
use kubectl_vap::tui::live_source::data_from_live;
use kubectl_vap::tui::tree_view::key_of;
use kubectl_vap::tui::{Action, App, Data, Offline, WriteCommand, dispatch, view};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::Color;
use std::sync::Arc;

mod support;

use support::tui::{FIXTURE, snapshot};

fn offline_data() -> Arc<Data> {
    Arc::new(Offline::data(
        snapshot(),
        vec![FIXTURE.to_string()],
        &default_options(),
    ))
}

/// A live state from the fixture: this copy reconciles and holds the lease.
fn live_state() -> LiveState {
    LiveState {
        snapshot: Arc::new(snapshot()),
        synced: true,
        lease: LeaseInfo {
            lease: "gatekeeper-system/kubectl-vap".into(),
            identity: "laptop-1".into(),
            holder: Some("laptop-1".into()),
            leading: true,
            participating: true,
            ..LeaseInfo::default()
        },
        vap_api: Some("admissionregistration.k8s.io/v1".into()),
        server_version: Some("v1.36.3".into()),
        writes_enabled: true,
        ..LiveState::default()
    }
}

fn live_data(state: &LiveState, reconcile: bool) -> Arc<Data> {
    live_data_in(state, reconcile, &default_options())
}

/// [`live_data`] under `opts`.
fn live_data_in(state: &LiveState, reconcile: bool, opts: &Options) -> Arc<Data> {
    Arc::new(data_from_live(
        Arc::new(state.clone()),
        "kind-payments",
        reconcile,
        opts,
    ))
}

/// The narrowed shape, for the tests about it (the binding wait, one VAP per template): the
/// default is `auto`.
fn narrowed() -> Options {
    default_options().with_shape(PolicyShape::Narrowed)
}

/// [`live_state`] with the objects the narrowed shape generates.
fn live_state_narrowed() -> LiveState {
    LiveState {
        snapshot: Arc::new(support::tui::snapshot_in(&narrowed())),
        ..live_state()
    }
}

/// What the controller's feed tells, as the live source forwards it.
fn told(h: Happened) -> Action {
    Action::Happened(Arc::new(h))
}

struct Ui {
    app: App,
    term: Terminal<TestBackend>,
    executed: Vec<WriteCommand>,
}

impl Ui {
    fn new(readonly: bool, data: Arc<Data>, w: u16, h: u16) -> Ui {
        let mut ui = Ui {
            app: App::new(readonly),
            term: Terminal::new(TestBackend::new(w, h)).unwrap(),
            executed: Vec::new(),
        };
        ui.act(Action::Resize(w, h));
        ui.act(Action::Data(data));
        ui
    }

    /// Like `new`, with every node expanded (templates start collapsed): for tests about
    /// rows deep in the tree.
    fn expanded(readonly: bool, data: Arc<Data>, w: u16, h: u16) -> Ui {
        let mut ui = Ui::new(readonly, data, w, h);
        ui.expand_all();
        ui
    }

    fn expand_all(&mut self) {
        fn paths(nodes: &[Node], at: &mut Vec<u64>, out: &mut Vec<Vec<u64>>) {
            for n in nodes.iter().filter(|n| !n.children.is_empty()) {
                at.push(key_of(&n.id));
                out.push(at.clone());
                paths(&n.children, at, out);
                at.pop();
            }
        }
        let data = self.app.data.clone().unwrap();
        let mut all = Vec::new();
        paths(&data.analysis.tree, &mut Vec::new(), &mut all);
        for p in all {
            self.app.tree.state.open(p);
        }
        self.app.tree.rebuild(&self.app.filter);
        self.draw();
    }

    fn draw(&mut self) {
        self.term.draw(|f| view::draw(f, &mut self.app)).unwrap();
    }

    /// Like the runtime: dispatch, record executed writes, draw.
    fn act(&mut self, a: Action) {
        let executed = &mut self.executed;
        dispatch(&mut self.app, a, &mut |cmd| {
            executed.push(cmd.clone());
            Some(Action::Flash(
                kubectl_vap::tui::Level::Info,
                format!("sent `{}`", cmd.cli()),
            ))
        });
        self.draw();
    }

    /// The write waiting for y/n, if one is.
    fn confirm(&self) -> Option<WriteCommand> {
        match &self.app.mode {
            Mode::Confirm(cmd) => Some(cmd.clone()),
            _ => None,
        }
    }

    /// The line being typed, if one is, for `kind`.
    fn typing(&self, kind: PromptKind) -> Option<String> {
        match &self.app.mode {
            Mode::Prompt(p) if p.kind == kind => Some(p.line.clone()),
            _ => None,
        }
    }

    fn key(&mut self, code: KeyCode) {
        let ev = KeyEvent::new(code, KeyModifiers::NONE);
        if let Some(a) = self.app.key_action(&ev) {
            self.act(a);
        } else {
            self.draw();
        }
    }

    fn chars(&mut self, s: &str) {
        for c in s.chars() {
            self.key(KeyCode::Char(c));
        }
    }

    fn select(&mut self, ids: &[&str]) {
        self.app
            .tree
            .state
            .select(ids.iter().map(|i| key_of(i)).collect());
        self.draw();
    }

    /// The screen as text, with clock times masked (the event log stamps local time).
    fn screen(&self) -> String {
        mask_times(&self.term.backend().to_string())
    }

    fn find(&self, text: &str) -> Option<(u16, u16)> {
        let buf = self.term.backend().buffer();
        for y in 0..buf.area.height {
            let line: String = (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect();
            if let Some(i) = line.find(text) {
                let x = line[..i].chars().count() as u16;
                return Some((x, y));
            }
        }
        None
    }
}

fn mask_times(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < chars.len() {
        let is_time = i + 8 <= chars.len()
            && chars[i..i + 8].iter().enumerate().all(|(k, c)| {
                if k == 2 || k == 5 {
                    *c == ':'
                } else {
                    c.is_ascii_digit()
                }
            });
        if is_time {
            out.push_str("HH:MM:SS");
            i += 8;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

#[test]
fn tui_tree() {
    let ui = Ui::new(false, offline_data(), 150, 42);
    insta::assert_snapshot!("tree", ui.screen());
}

/// The tree of the narrowed shape, by name (the default's, auto, is `tui_tree`'s): one VAP per
/// template, which its constraints' bindings share.
#[test]
fn tui_tree_narrowed() {
    let data = Arc::new(Offline::data(
        support::tui::snapshot_in(&narrowed()),
        vec![FIXTURE.to_string()],
        &narrowed(),
    ));
    let ui = Ui::expanded(false, data, 150, 48);
    insta::assert_snapshot!("tree_narrowed", ui.screen());
}

#[test]
fn tui_tree_colours_follow_state() {
    // Tall enough for every row of the fixture's tree.
    let ui = Ui::expanded(false, offline_data(), 150, 48);
    let (x, y) = ui
        .find("∅ VAP gatekeeper-k8sallowedrepos")
        .expect("missing VAP shown");
    assert_eq!(ui.term.backend().buffer()[(x, y)].fg, Color::Red);
    let (x, y) = ui.find("≠ VAPB").expect("out-of-sync binding shown");
    assert_eq!(ui.term.backend().buffer()[(x, y)].fg, Color::Yellow);
    for (text, colour) in [
        (
            "⊘ VAPB gatekeeper-k8srequiredlabels-taken-name",
            Color::Yellow,
        ),
        ("… VAPB gatekeeper-k8swaiting-fresh", Color::Cyan),
        ("† VAP gatekeeper-k8sdisallowedtags", Color::Yellow),
        ("! K8sRequiredLabels/taken-name", Color::Red),
        ("● k8srequiredlabels", Color::Green),
        ("? K8sUnknownKind/leftover", Color::Blue),
    ] {
        let (x, y) = ui.find(text).unwrap_or_else(|| panic!("{text} shown"));
        assert_eq!(ui.term.backend().buffer()[(x, y)].fg, colour, "{text}");
    }
    let (x, y) = ui
        .find("✔ VAP gatekeeper-k8srequiredlabels")
        .expect("in-sync VAP shown");
    assert_eq!(ui.term.backend().buffer()[(x, y)].fg, Color::Green);
}

#[test]
fn tui_filtered() {
    let mut ui = Ui::new(false, offline_data(), 150, 36);
    ui.key(KeyCode::Char('/'));
    ui.chars("missing");
    let typing = ui.screen();
    assert!(typing.contains("/missing█"), "{typing}");
    ui.key(KeyCode::Enter);
    assert_eq!(ui.app.mode, Mode::Normal);
    insta::assert_snapshot!("filtered", ui.screen());
    // Names match too.
    ui.key(KeyCode::Esc);
    ui.key(KeyCode::Char('/'));
    ui.chars("no-latest");
    ui.key(KeyCode::Enter);
    let s = ui.screen();
    assert!(s.contains("K8sDisallowedTags/no-latest"), "{s}");
    assert!(!s.contains("k8sallowedrepos "), "{s}");
    // esc clears the filter.
    ui.key(KeyCode::Esc);
    assert!(!ui.app.filter.is_active());
    assert!(ui.screen().contains("k8sallowedrepos"));
}

#[test]
fn tui_faults_only() {
    let mut ui = Ui::new(false, offline_data(), 150, 36);
    ui.key(KeyCode::Char('f'));
    insta::assert_snapshot!("faults_only", ui.screen());
}

#[test]
fn tui_help() {
    let mut ui = Ui::new(false, offline_data(), 120, 60);
    ui.key(KeyCode::Char('?'));
    assert_eq!(ui.app.screen, Screen::Help);
    insta::assert_snapshot!("help", ui.screen());
    ui.key(KeyCode::Esc);
    assert_eq!(ui.app.screen, Screen::Main);
}

#[test]
fn tui_yaml() {
    let mut ui = Ui::new(false, offline_data(), 120, 40);
    // A constraint: its YAML is the fixture's own text, stable whatever generation does.
    ui.select(&[
        "template/k8srequiredlabels",
        "constraint/K8sRequiredLabels/ns-must-have-owner",
    ]);
    ui.key(KeyCode::Char('y'));
    insta::assert_snapshot!("yaml", ui.screen());
    ui.key(KeyCode::Esc);
    assert_eq!(ui.app.screen, Screen::Main);
    // Observed objects hide managedFields (a constraint's own VAP, the default shape's).
    ui.select(&[
        "template/k8srequiredlabels",
        "constraint/K8sRequiredLabels/ns-must-have-owner",
        "policy/gatekeeper-k8srequiredlabels.ns-must-have-owner",
    ]);
    ui.key(KeyCode::Char('y'));
    let s = ui.screen();
    assert!(
        s.contains("uid: 33333333-0000-4000-8000-000000000001"),
        "{s}"
    );
    assert!(!s.contains("managedFields"), "managedFields are hidden");
    // y again closes the view.
    ui.key(KeyCode::Char('y'));
    assert_eq!(ui.app.screen, Screen::Main);
}

/// A constraint CRD that exists shows its YAML (metadata and spec, as read), never "does not
/// exist" (issue 42: the live TUI said `does not exist (in-sync)` of an in-sync CRD).
#[test]
fn tui_yaml_of_an_existing_crd() {
    let mut snap = snapshot();
    let crd = serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": "k8sallowedrepos.constraints.gatekeeper.sh", "uid": "crd-uid-1" },
        "spec": { "group": "constraints.gatekeeper.sh", "scope": "Cluster",
                  "names": { "kind": "K8sAllowedRepos", "plural": "k8sallowedrepos" },
                  "versions": [] } });
    snap.insert(crd, Default::default()).expect("a CRD");
    let data = Arc::new(Offline::data(
        snap,
        vec![FIXTURE.to_string()],
        &default_options(),
    ));
    let mut ui = Ui::new(false, data, 120, 40);
    ui.select(&[
        "template/k8sallowedrepos",
        "crd/k8sallowedrepos.constraints.gatekeeper.sh",
    ]);
    ui.key(KeyCode::Char('y'));
    let s = ui.screen();
    assert!(!s.contains("does not exist"), "{s}");
    assert!(
        s.contains("uid: crd-uid-1") && s.contains("kind: K8sAllowedRepos"),
        "{s}"
    );
}

#[test]
fn tui_diff() {
    let mut ui = Ui::new(false, offline_data(), 120, 36);
    ui.select(&[
        "template/k8srequiredlabels",
        "constraint/K8sRequiredLabels/pods-must-have-app",
        "binding/gatekeeper-k8srequiredlabels-pods-must-have-app",
    ]);
    ui.key(KeyCode::Char('d'));
    insta::assert_snapshot!("diff", ui.screen());
    // An in-sync object says so.
    ui.key(KeyCode::Esc);
    ui.select(&[
        "template/k8srequiredlabels",
        "constraint/K8sRequiredLabels/ns-must-have-owner",
    ]);
    ui.key(KeyCode::Char('d'));
    assert!(
        ui.screen()
            .contains("in sync: nothing to write for K8sRequiredLabels/ns-must-have-owner")
    );
}

#[test]
fn tui_detail_shows_findings_and_pod_status() {
    let mut ui = Ui::expanded(false, offline_data(), 150, 36);
    ui.select(&["template/k8srequiredlabels"]);
    let s = ui.screen();
    assert!(s.contains("Gatekeeper pod status"), "{s}");
    // Wrapped in the pane, whole.
    assert!(
        s.contains("vapGenerationStatus: observedGeneration=2"),
        "{s}"
    );
    assert!(s.contains("state=generated"), "{s}");
    // A missing VAP: the default shape's, the constraint's own.
    ui.select(&[
        "template/k8sallowedrepos",
        "constraint/K8sAllowedRepos/prod-repos",
        "policy/gatekeeper-k8sallowedrepos.prod-repos",
    ]);
    insta::assert_snapshot!("detail_missing_policy", ui.screen());
}

#[test]
fn tui_access_errors() {
    let mut state = live_state();
    Arc::make_mut(&mut state.snapshot).bindings.clear();
    state.access_errors = vec![
        AccessError {
            resource: "validatingadmissionpolicybindings.admissionregistration.k8s.io".into(),
            kind: AccessErrorKind::Forbidden,
            message: "forbidden: the user may not list/watch validatingadmissionpolicybindings.admissionregistration.k8s.io".into(),
        },
        AccessError {
            resource: "k8sunknownkinds.constraints.gatekeeper.sh".into(),
            kind: AccessErrorKind::NotServed,
            message: "k8sunknownkinds.constraints.gatekeeper.sh is not served (CRD not installed)".into(),
        },
    ];
    // As the reconciler publishes it: the snapshot names what it could not read.
    Arc::make_mut(&mut state.snapshot).unreadable =
        kubectl_vap::cluster::access::unreadable(&state.access_errors);
    state.lease.holder = Some("gatekeeper-vap-7c9d".into());
    state.lease.leading = false;
    let ui = Ui::new(false, live_data(&state, true), 150, 36);
    insta::assert_snapshot!("access_errors", ui.screen());
}

#[test]
fn tui_nothing_readable_is_explained_not_empty() {
    let state = LiveState {
        access_errors: vec![AccessError {
            resource: "validatingadmissionpolicies.admissionregistration.k8s.io".into(),
            kind: AccessErrorKind::NotServed,
            message: "the API server serves no ValidatingAdmissionPolicy API".into(),
        }],
        ..LiveState::default()
    };
    let ui = Ui::new(false, live_data(&state, false), 120, 24);
    let s = ui.screen();
    assert!(s.contains("API disabled"), "{s}");
    assert!(s.contains("nothing can be shown"), "{s}");
}

/// A copy refused only the cluster's Events (or the Lease) still reads every template: an
/// empty cluster is not blamed on it, and the load is announced.
#[test]
fn tui_an_events_refusal_does_not_blank_the_tree() {
    let mut state = LiveState {
        synced: true,
        access_errors: vec![AccessError {
            resource: kubectl_vap::controller::EVENTS_RESOURCE.into(),
            kind: AccessErrorKind::Forbidden,
            message: "events is forbidden".into(),
        }],
        ..LiveState::default()
    };
    let mut ui = Ui::new(false, live_data(&state, false), 120, 24);
    ui.act(Action::Data(live_data(&state, false)));
    let s = ui.screen();
    assert!(!s.contains("nothing can be shown"), "{s}");
    assert!(
        ui.app.log.iter().any(|e| e.text().starts_with("loaded")),
        "{:?}",
        ui.app.log
    );
    // A resource the tree is made of still blanks it.
    state.access_errors[0].resource =
        "validatingadmissionpolicybindings.admissionregistration.k8s.io".into();
    let ui = Ui::new(false, live_data(&state, false), 120, 24);
    assert!(
        ui.screen().contains("nothing can be shown"),
        "{}",
        ui.screen()
    );
}

#[test]
fn tui_readonly() {
    let mut ui = Ui::new(true, offline_data(), 150, 36);
    insta::assert_snapshot!("readonly", ui.screen());
    for k in ['p', 'r', 'R'] {
        ui.key(KeyCode::Char(k));
        assert!(ui.confirm().is_none(), "{k} is not handled in read-only");
        assert!(ui.executed.is_empty());
        assert!(
            ui.screen()
                .contains(&format!("{k} writes, and this copy is read-only")),
            "{}",
            ui.screen()
        );
    }
    ui.key(KeyCode::Char('?'));
    let help = ui.screen();
    assert!(!help.contains("reconcile the selected"), "{help}");
    // One text for why: the refused key above, a refused action, the help screen.
    let help_text: Vec<String> = view::help_lines(&ui.app)
        .iter()
        .map(|l| l.to_string())
        .collect();
    assert!(
        help_text
            .iter()
            .any(|l| l.trim() == kubectl_vap::tui::keymap::READONLY),
        "{help_text:?}"
    );
    assert_eq!(
        ui.app.write_refusal().as_deref(),
        Some(kubectl_vap::tui::keymap::READONLY)
    );
}

#[test]
fn tui_refused_action_offline() {
    let mut ui = Ui::new(false, offline_data(), 150, 36);
    ui.select(&["template/k8srequiredlabels"]);
    ui.key(KeyCode::Char('r'));
    assert!(ui.confirm().is_none(), "refused before asking");
    assert!(ui.executed.is_empty());
    insta::assert_snapshot!("refused_action", ui.screen());
}

#[test]
fn tui_write_asks_then_sends() {
    let state = live_state();
    let mut ui = Ui::new(false, live_data(&state, true), 150, 36);
    ui.select(&[
        "template/k8srequiredlabels",
        "constraint/K8sRequiredLabels/pods-must-have-app",
    ]);
    ui.key(KeyCode::Char('p'));
    assert_eq!(
        ui.confirm(),
        Some(WriteCommand::Replay("k8srequiredlabels".into()))
    );
    insta::assert_snapshot!("confirm", ui.screen());
    ui.key(KeyCode::Char('n'));
    assert!(ui.executed.is_empty());
    ui.key(KeyCode::Char('R'));
    ui.key(KeyCode::Char('y'));
    assert_eq!(ui.executed, vec![WriteCommand::ReconcileAll]);
    assert!(ui.screen().contains("sent `kubectl vap reconcile --all`"));
}

#[test]
fn tui_observing_asks_the_leader() {
    // No --reconcile: replay and reconcile are requests to the lease holder, asked like writes.
    let state = remote_state();
    let mut ui = Ui::new(false, live_data(&state, false), 150, 36);
    ui.select(&["template/k8srequiredlabels"]);
    ui.key(KeyCode::Char('r'));
    assert_eq!(
        ui.confirm(),
        Some(WriteCommand::Reconcile("k8srequiredlabels".into()))
    );
    ui.key(KeyCode::Char('y'));
    ui.key(KeyCode::Char('R'));
    ui.key(KeyCode::Char('y'));
    assert_eq!(
        ui.executed,
        vec![
            WriteCommand::Reconcile("k8srequiredlabels".into()),
            WriteCommand::ReconcileAll
        ]
    );
    let s = ui.screen();
    assert!(
        !s.contains("refused") && !s.contains("does not reconcile"),
        "{s}"
    );
    // --readonly still takes them away.
    let mut ui = Ui::new(true, live_data(&state, false), 150, 36);
    ui.key(KeyCode::Char('R'));
    assert!(ui.confirm().is_none() && ui.executed.is_empty());
    assert!(
        ui.row(0).contains("mode: read-only · observing │"),
        "{}",
        ui.row(0)
    );
}

#[test]
fn tui_selection_and_expansion_survive_refresh() {
    let mut state = live_state();
    let mut ui = Ui::expanded(false, live_data(&state, true), 150, 36);
    let sel = [
        "template/k8srequiredlabels",
        "constraint/K8sRequiredLabels/pods-must-have-app",
    ];
    ui.select(&sel);
    ui.key(KeyCode::Enter); // collapse the constraint
    let before_opened = ui.app.tree.state.opened().clone();
    // The cluster changes: the out-of-sync binding is fixed, a template disappears.
    Arc::make_mut(&mut state.snapshot)
        .templates
        .retain(|t| t.name() != "k8sallowedrepos");
    ui.act(told(Happened::Reconcile(ReconcileEvent {
        time: chrono::Utc.with_ymd_and_hms(2026, 11, 30, 9, 1, 0).unwrap(),
        verb: EventVerb::Update,
        object: ObjectRef::new(
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicyBinding",
            "gatekeeper-k8srequiredlabels-pods-must-have-app",
        ),
        result: EventResult::Ok,
        message: "binding-out-of-sync".into(),
        request: None,
    })));
    ui.act(Action::Data(live_data(&state, true)));
    let want: Vec<u64> = sel.iter().map(|i| key_of(i)).collect();
    assert_eq!(ui.app.tree.state.selected(), want.as_slice());
    assert_eq!(ui.app.tree.state.opened(), &before_opened);
    assert!(ui.screen().contains(
        "update ValidatingAdmissionPolicyBinding/gatekeeper-k8srequiredlabels-pods-must-have-app"
    ));
    // The selected node vanishes: the selection falls back to its nearest ancestor.
    ui.select(&[
        "template/k8sdisallowedtags",
        "constraint/K8sDisallowedTags/no-latest",
    ]);
    Arc::make_mut(&mut state.snapshot)
        .constraints
        .retain(|c| c.name() != "no-latest");
    ui.act(Action::Data(live_data(&state, true)));
    assert_eq!(
        ui.app.tree.state.selected(),
        &[key_of("template/k8sdisallowedtags")]
    );
}

#[test]
fn tui_resize() {
    let mut ui = Ui::new(false, offline_data(), 150, 36);
    for (w, h) in [(80, 24), (60, 12), (20, 5), (1, 1), (200, 60)] {
        ui.resize(w, h);
    }
    ui.resize(90, 30);
    insta::assert_snapshot!("narrow", ui.screen());
}

#[test]
fn tui_navigation_keys() {
    let mut ui = Ui::new(false, offline_data(), 150, 36);
    // Templates start collapsed: down goes to the next one; enter opens it.
    ui.key(KeyCode::Down);
    assert_eq!(
        ui.app.tree.state.selected(),
        &[key_of("template/k8sdisallowedtags")]
    );
    ui.key(KeyCode::Up);
    ui.key(KeyCode::Enter);
    ui.key(KeyCode::Down);
    assert_eq!(
        ui.app.tree.state.selected(),
        &[
            key_of("template/k8sallowedrepos"),
            key_of("crd/k8sallowedrepos.constraints.gatekeeper.sh")
        ]
    );
    ui.key(KeyCode::Left); // to the parent
    ui.key(KeyCode::Left); // collapse it
    ui.key(KeyCode::Down);
    assert_eq!(
        ui.app.tree.state.selected(),
        &[key_of("template/k8sdisallowedtags")]
    );
    ui.key(KeyCode::End);
    ui.key(KeyCode::Home);
    assert_eq!(
        ui.app.tree.state.selected(),
        &[key_of("template/k8sallowedrepos")]
    );
    let q = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    let a = ui.app.key_action(&q).unwrap();
    ui.act(a);
    assert!(ui.app.quit);
}

#[test]
fn tui_docs_cover_every_key_and_state() {
    let doc = std::fs::read_to_string("docs/tui.md").expect("docs/tui.md");
    for e in kubectl_vap::tui::keymap::TABLE {
        for k in e.keys {
            let label = format!("`{}`", k.label());
            assert!(
                doc.contains(&label),
                "docs/tui.md does not mention key {label}"
            );
        }
    }
    for l in kubectl_vap::tui::glyphs::STATES {
        let row = format!("| {} | `{}` |", l.glyph, l.state.as_str());
        assert!(doc.contains(&row), "docs/tui.md has no row {row:?}");
    }
    for (sev, glyph, _) in kubectl_vap::tui::glyphs::SEVERITIES {
        let row = format!("| {glyph} | `{}` |", sev.as_str());
        assert!(
            doc.contains(&row),
            "docs/tui.md has no severity row {row:?}"
        );
    }
}

#[test]
fn tui_refresh_rebuilds_only_what_changed() {
    let mut state = live_state();
    let mut ui = Ui::expanded(false, live_data(&state, true), 150, 36);
    let top = ui.app.data.as_ref().unwrap().analysis.tree.len();
    assert_eq!(
        ui.app.tree.rebuilt, top,
        "first data: every top-level subtree is built"
    );
    ui.act(Action::Data(live_data(&state, true)));
    assert_eq!(ui.app.tree.rebuilt, 0, "same data: everything reused");
    // One binding disappears: only its template's subtree is rebuilt.
    Arc::make_mut(&mut state.snapshot)
        .bindings
        .retain(|b| b.name() != "gatekeeper-k8srequiredlabels-pods-must-have-app");
    ui.act(Action::Data(live_data(&state, true)));
    assert_eq!(ui.app.tree.rebuilt, 1);
    let s = ui.screen();
    assert!(
        s.contains("∅ VAPB gatekeeper-k8srequiredlabels-pods-must-have-app  missing"),
        "{s}"
    );
    assert_eq!(ui.app.tree.shown, ui.app.tree.total);
    // A filter change rebuilds everything.
    ui.key(KeyCode::Char('f'));
    assert_eq!(ui.app.tree.rebuilt, top);
}

#[test]
fn tui_audit_key_audits_the_selection_live_only() {
    // Offline: refused, nothing sent.
    let mut ui = Ui::new(true, offline_data(), 150, 36);
    ui.select(&["template/k8srequiredlabels"]);
    ui.key(KeyCode::Char('a'));
    assert!(ui.executed.is_empty());
    assert!(
        ui.screen().contains("audit needs a cluster"),
        "{}",
        ui.screen()
    );

    // Live, even read-only (an audit writes nothing): the constraint, else its template.
    let state = live_state();
    let mut ui = Ui::new(true, live_data(&state, false), 150, 36);
    ui.select(&[
        "template/k8srequiredlabels",
        "constraint/K8sRequiredLabels/pods-must-have-app",
    ]);
    ui.key(KeyCode::Char('a'));
    ui.select(&["template/k8srequiredlabels"]);
    ui.key(KeyCode::Char('a'));
    // A binding: its constraint, not the whole template (issue 28, item 11).
    ui.select(&[
        "template/k8srequiredlabels",
        "constraint/K8sRequiredLabels/ns-must-have-owner",
        "binding/gatekeeper-k8srequiredlabels-ns-must-have-owner",
    ]);
    ui.key(KeyCode::Char('a'));
    assert_eq!(
        ui.executed,
        vec![
            WriteCommand::Audit("K8sRequiredLabels/pods-must-have-app".into()),
            WriteCommand::Audit("k8srequiredlabels".into()),
            WriteCommand::Audit("K8sRequiredLabels/ns-must-have-owner".into()),
        ]
    );
    assert!(ui.confirm().is_none(), "a read is not asked about");
}

/// `f` keeps what the header counts as a warning (issue 28, item 8): with only a CRD whose
/// template is gone (a `crd-orphan` warning), it showed "nothing matches the filter".
#[test]
fn tui_faults_only_keeps_warnings() {
    let mut snap = snapshot();
    snap.templates.clear();
    snap.constraints.clear();
    snap.policies.clear();
    snap.bindings.clear();
    let data = Arc::new(Offline::data(
        snap,
        vec![FIXTURE.into()],
        &default_options(),
    ));
    assert!(
        data.summary.warnings > 0 && data.summary.errors == 0,
        "{:?}",
        data.summary
    );
    let mut ui = Ui::new(false, data, 150, 36);
    ui.key(KeyCode::Char('f'));
    let s = ui.screen();
    assert!(!s.contains("nothing matches"), "{s}");
    assert!(
        s.contains("CRD k8srequiredlabels.constraints.gatekeeper.sh"),
        "{s}"
    );
}

/// Issue 28, item 11: a constraint whose binding is gone is drawn on the binding's row as
/// missing, not on the constraint's; template rows do not repeat the flag that decides
/// generateVAP (the detail pane says it once); rows cut at the pane's edge end in `…`;
/// offline the hint bar offers no replay or reconcile.
#[test]
fn tui_rows_say_each_thing_once_and_where_it_is() {
    let mut state = live_state();
    Arc::make_mut(&mut state.snapshot)
        .bindings
        .retain(|b| b.name() != "gatekeeper-k8srequiredlabels-ns-must-have-owner");
    let ui = Ui::expanded(false, live_data(&state, true), 150, 42);
    let s = ui.screen();
    assert!(
        s.contains("✔ K8sRequiredLabels/ns-must-have-owner  in-sync  binds with Deny"),
        "{s}"
    );
    assert!(
        s.contains("∅ VAPB gatekeeper-k8srequiredlabels-ns-must-have-owner  missing"),
        "{s}"
    );
    // The flag once: in the selected template's detail, on no tree row.
    let flag = "--default-create-vap-for-templates=true";
    let tree_rows: Vec<String> = (0..42).map(|y| ui.row(y)).collect();
    let on_tree = tree_rows
        .iter()
        .filter(|r| {
            r.split("││")
                .next()
                .is_some_and(|t| t.contains("generateVAP unset"))
        })
        .count();
    assert!(on_tree >= 1, "{s}");
    assert!(
        tree_rows.iter().all(|r| !r
            .split("││")
            .next()
            .unwrap_or_default()
            .contains("--default-create")),
        "{s}"
    );
    let ui = Ui::new(false, offline_data(), 150, 42);
    assert!(
        ui.screen().contains("generateVAP unset;") && ui.screen().contains(&flag[..25]),
        "the detail pane says it: {}",
        ui.screen()
    );
    // Cut rows end in `…`; rows that fit do not.
    let ui = Ui::new(false, offline_data(), 80, 24);
    let orphans = ui.row(8);
    assert!(
        orphans.contains("objects without a generating templ…│"),
        "{orphans}"
    );
    let fits = ui.row(3);
    assert!(fits.contains("generateVAP unset │"), "{fits}");
    // Offline, replay and reconcile can never run: not offered, however wide.
    let hints = ui.row(23);
    let wide = Ui::new(false, offline_data(), 200, 40).row(39);
    for h in [hints, wide] {
        assert!(!h.contains("replay") && !h.contains("reconcile"), "{h}");
        assert!(h.contains("? help") && h.contains("quit"), "{h}");
    }
}

/// Nothing read does not look healthy (issue 28, item 7): no `0 errors … 0 planned writes`
/// above what could not be read, and no "loaded" for it.
#[test]
fn tui_nothing_read_is_not_counted() {
    let forbidden = |resource: &str| AccessError {
        resource: resource.into(),
        kind: AccessErrorKind::Forbidden,
        message: format!("{resource} is forbidden: User \"trial\" cannot list"),
    };
    let state = LiveState {
        synced: true,
        access_errors: vec![
            forbidden("constrainttemplates.templates.gatekeeper.sh"),
            forbidden("validatingadmissionpolicies.admissionregistration.k8s.io"),
            forbidden("validatingadmissionpolicybindings.admissionregistration.k8s.io"),
        ],
        ..LiveState::default()
    };
    let ui = Ui::new(false, live_data(&state, false), 150, 36);
    let s = ui.screen();
    assert!(
        !s.contains("0 errors") && !s.contains("0 planned writes"),
        "{s}"
    );
    assert!(s.contains("⊘ nothing could be read"), "{s}");
    assert!(
        ui.app.log.iter().all(|l| !l.text().starts_with("loaded")),
        "{s}"
    );
}

#[test]
fn tui_test_key_asks_for_a_path_then_tests_it() {
    let mut ui = Ui::new(false, offline_data(), 150, 36);
    ui.key(KeyCode::Char('t'));
    assert!(ui.typing(PromptKind::TestPath).is_none());
    assert!(
        ui.screen().contains("test needs a cluster"),
        "{}",
        ui.screen()
    );

    let state = live_state();
    let mut ui = Ui::new(true, live_data(&state, false), 150, 36);
    ui.key(KeyCode::Char('t'));
    ui.chars("deploy/q.yamx");
    ui.key(KeyCode::Backspace);
    ui.chars("l");
    assert!(
        ui.screen().contains(" test file: deploy/q.yaml█"),
        "{}",
        ui.screen()
    );
    // Keys are the path's while typing: `q` did not quit, `d`, `y`, `a` did nothing else.
    assert!(!ui.app.quit);
    assert!(ui.executed.is_empty());
    ui.key(KeyCode::Enter);
    assert_eq!(
        ui.executed,
        vec![WriteCommand::Test("deploy/q.yaml".into())]
    );
    assert!(ui.typing(PromptKind::TestPath).is_none());

    ui.key(KeyCode::Char('t'));
    ui.chars("other.yaml");
    ui.key(KeyCode::Esc);
    assert_eq!(ui.executed.len(), 1, "esc cancels");
}

// ---- Issue 12: every UX problem under "Why", each with a test that failed before. ----

impl Ui {
    /// The text of screen row `y`.
    fn row(&self, y: u16) -> String {
        let buf = self.term.backend().buffer();
        (0..buf.area.width)
            .map(|x| buf[(x, y)].symbol().to_string())
            .collect()
    }

    /// The row the tree's selection marker is on.
    fn selected_row(&self) -> Option<u16> {
        self.find("›").map(|(_, y)| y)
    }

    fn resize(&mut self, w: u16, h: u16) {
        self.term.backend_mut().resize(w, h);
        self.act(Action::Resize(w, h));
    }
}

/// Every view the issue names, at the sizes it names (80×24, 60×15).
#[test]
fn tui_small_terminals() {
    for (w, h) in [(80u16, 24u16), (60, 15)] {
        let mut ui = Ui::new(false, offline_data(), w, h);
        insta::assert_snapshot!(format!("tree_{w}x{h}"), ui.screen());
        ui.key(KeyCode::Char('?'));
        ui.key(KeyCode::Char('G'));
        insta::assert_snapshot!(format!("help_end_{w}x{h}"), ui.screen());
        ui.key(KeyCode::Esc);
        ui.select(&["template/k8srequiredlabels"]);
        ui.key(KeyCode::Char('y'));
        ui.key(KeyCode::Char('w'));
        ui.key(KeyCode::Char('G'));
        insta::assert_snapshot!(format!("yaml_wrapped_{w}x{h}"), ui.screen());
        ui.key(KeyCode::Esc);
        ui.key(KeyCode::Char('e'));
        insta::assert_snapshot!(format!("events_{w}x{h}"), ui.screen());
        ui.key(KeyCode::Esc);
        ui.key(KeyCode::Char(':'));
        ui.chars("ctx prod");
        ui.key(KeyCode::Enter);
        insta::assert_snapshot!(format!("command_{w}x{h}"), ui.screen());
    }
}

#[test]
fn tui_layout_gives_the_tree_most_rows_and_keeps_quit_and_mode() {
    let ui = Ui::new(false, offline_data(), 80, 24);
    let top = ui.find("┌ Tree").expect("tree pane").1;
    let bottom = ui.find("┌ Detail").expect("detail pane").1;
    let tree_rows = bottom - top - 2;
    assert!(tree_rows >= 10, "the tree shows {tree_rows} rows at 80×24");
    let hints = ui.row(23);
    assert!(hints.contains("q/ctrl-c quit"), "{hints}");
    assert!(hints.contains("? help"), "{hints}");
    // The header drops whole fields, least important first: never the mode.
    for w in [100u16, 80, 60] {
        let ui = Ui::new(false, offline_data(), w, 24);
        let header = ui.row(0);
        assert!(header.contains("mode: offline snapshot"), "{w}: {header}");
        let hints = ui.row(ui.term.backend().buffer().area.height - 1);
        assert!(hints.contains("quit"), "{w}: {hints}");
    }
}

#[test]
fn tui_selected_row_is_legible() {
    let mut ui = Ui::expanded(false, offline_data(), 150, 42);
    // A row with a grey reason and a coloured state.
    ui.select(&[
        "template/k8sdisallowedtags",
        "constraint/K8sDisallowedTags/no-latest",
    ]);
    let y = ui.selected_row().expect("selection drawn");
    let buf = ui.term.backend().buffer();
    let (x0, _) = ui.find("┌ Tree").unwrap();
    let grey = |c: Color| matches!(c, Color::DarkGray | Color::Gray | Color::Reset);
    let mut cells = 0;
    for x in x0 + 1..x0 + 80 {
        let c = &buf[(x, y)];
        if c.symbol().trim().is_empty() {
            continue;
        }
        cells += 1;
        assert_ne!(
            c.bg,
            Color::Reset,
            "the selection has a background at x={x}"
        );
        assert_ne!(c.fg, c.bg, "fg = bg at x={x} ({:?})", c.symbol());
        assert!(
            !(grey(c.fg) && grey(c.bg)),
            "grey on grey at x={x}: {:?} on {:?} ({:?})",
            c.fg,
            c.bg,
            c.symbol()
        );
    }
    assert!(cells > 20, "the selected row has text");
}

#[test]
fn tui_states_and_severities_use_separate_glyphs() {
    let ui = Ui::expanded(false, offline_data(), 150, 48);
    let s = ui.screen();
    let data = ui.app.data.clone().unwrap();
    for n in data.analysis.tree.iter().flat_map(|n| n.walk()) {
        let tag = kubectl_vap::tui::tree_view::kind_tag(n.kind);
        for g in ["✖", "⚠", "ℹ"] {
            let row = format!("{g} {tag}{}", n.label);
            assert!(
                !s.contains(&row),
                "a state drawn with severity glyph: {row}"
            );
        }
    }
    // The foreign binding's only finding is a warning: it is not drawn as a red error.
    let (x, y) = ui
        .find("⊘ VAPB gatekeeper-k8srequiredlabels-taken-name")
        .unwrap();
    assert_ne!(ui.term.backend().buffer()[(x, y)].fg, Color::Red);
}

/// Templates start collapsed, each wearing the worst state below it (glyph and colour) with
/// `[below: …]` saying why; enter opens one and it shows its own state again.
#[test]
fn tui_collapsed_row_shows_the_worst_state_below() {
    let mut ui = Ui::new(false, offline_data(), 150, 42);
    let row = |ui: &Ui| ui.row(ui.selected_row().unwrap());
    // Collapsed at start: the row's glyph is the missing VAP's, in red.
    assert_eq!(
        ui.app.tree.state.selected(),
        &[key_of("template/k8sallowedrepos")]
    );
    let collapsed = row(&ui);
    assert!(
        collapsed.contains("∅ k8sallowedrepos  generate  [below: ∅ missing]"),
        "{collapsed}"
    );
    assert!(
        !ui.screen().contains("VAP gatekeeper-k8sallowedrepos"),
        "its children are hidden:\n{}",
        ui.screen()
    );
    // A green template hiding an error wears the error, in red.
    let (x, y) = ui
        .find("! k8srequiredlabels  generate  [below: ! error]")
        .unwrap_or_else(|| panic!("{}", ui.screen()));
    assert_eq!(ui.term.backend().buffer()[(x, y)].fg, Color::Red);
    // The same data again keeps the marker (reused items); enter opens it: its own state,
    // its children shown, every level below it open.
    ui.act(Action::Data(offline_data()));
    assert!(row(&ui).contains("[below: ∅ missing]"), "{}", row(&ui));
    ui.key(KeyCode::Enter);
    assert!(
        row(&ui).contains("● k8sallowedrepos  generate  ✖3"),
        "{}",
        row(&ui)
    );
    assert!(!row(&ui).contains("below"), "{}", row(&ui));
    let s = ui.screen();
    assert!(
        s.contains("∅ VAPB gatekeeper-k8sallowedrepos-prod-repos  missing"),
        "{s}"
    );
    ui.key(KeyCode::Left);
    assert!(row(&ui).contains("[below: ∅ missing]"), "{}", row(&ui));
    // A row no worse than its children has no marker.
    ui.select(&["template/k8sreplicalimits"]);
    ui.key(KeyCode::Enter);
    ui.key(KeyCode::Enter);
    assert!(!row(&ui).contains("below"), "{}", row(&ui));
}

/// `/` and `f` reveal matches inside collapsed templates: the way to each is opened.
#[test]
fn tui_filter_and_faults_open_collapsed_templates() {
    let mut ui = Ui::new(false, offline_data(), 150, 42);
    assert!(!ui.screen().contains("taken-name"), "{}", ui.screen());
    ui.key(KeyCode::Char('/'));
    ui.chars("taken-name");
    ui.key(KeyCode::Enter);
    let s = ui.screen();
    assert!(s.contains("! K8sRequiredLabels/taken-name  error"), "{s}");
    assert!(
        s.contains("⊘ VAPB gatekeeper-k8srequiredlabels-taken-name  foreign"),
        "{s}"
    );
    ui.key(KeyCode::Esc);
    let mut ui = Ui::new(false, offline_data(), 150, 42);
    ui.key(KeyCode::Char('f'));
    let s = ui.screen();
    for row in [
        "∅ VAP gatekeeper-k8sallowedrepos.prod-repos  missing",
        "≠ VAPB gatekeeper-k8srequiredlabels-pods-must-have-app  out-of-sync",
        "† VAPB gatekeeper-k8sdisallowedtags-no-latest  dangling",
    ] {
        assert!(s.contains(row), "{row} shown under faults only:\n{s}");
    }
}

#[test]
fn tui_order_is_stable_and_sortable() {
    let ui = Ui::expanded(false, offline_data(), 150, 48);
    let mut reversed = snapshot();
    reversed.templates.reverse();
    reversed.constraints.reverse();
    reversed.bindings.reverse();
    reversed.policies.reverse();
    reversed.crds.reverse();
    let data = Arc::new(Offline::data(
        reversed,
        vec![FIXTURE.to_string()],
        &default_options(),
    ));
    let mut other = Ui::expanded(false, data, 150, 48);
    let tree = |ui: &Ui| -> Vec<String> {
        (2..40)
            .map(|y| ui.row(y).chars().take(84).collect())
            .collect()
    };
    assert_eq!(
        tree(&ui),
        tree(&other),
        "listing order does not change the tree"
    );
    // `s`: the worst subtree first (errors before missing), by name among equals.
    other.key(KeyCode::Char('s'));
    let first = other.row(3);
    assert!(first.contains("k8sreplicalimits"), "{first}");
    assert!(other.row(0).contains("kubectl-vap") && other.row(1).contains("sort: state"));
    // It survives a refresh and a cleared filter; `:sort name` goes back.
    other.act(Action::Data(offline_data()));
    other.key(KeyCode::Char('f'));
    other.key(KeyCode::Esc);
    assert!(
        other.row(3).contains("k8sreplicalimits"),
        "{}",
        other.row(3)
    );
    other.key(KeyCode::Char(':'));
    other.chars("sort name");
    other.key(KeyCode::Enter);
    // Sorting by state moved the selection to the worst row; back on the first, the trees
    // are the same.
    other.key(KeyCode::Home);
    assert_eq!(tree(&ui), tree(&other));
}

#[test]
fn tui_selection_stays_in_view_when_rows_change() {
    let mut ui = Ui::new(false, offline_data(), 80, 24);
    let sel = ["group/orphans", "constraint/K8sUnknownKind/leftover"];
    // A filter shows few rows (the offset drops to 0) …
    ui.key(KeyCode::Char('/'));
    ui.chars("leftover");
    ui.key(KeyCode::Enter);
    ui.select(&sel);
    // … clearing it brings every row back: the selection must still be on screen.
    ui.key(KeyCode::Esc);
    let want: Vec<u64> = sel.iter().map(|i| key_of(i)).collect();
    assert_eq!(ui.app.tree.state.selected(), want.as_slice());
    let y = ui.selected_row().expect("the selection is in view");
    assert!(ui.row(y).contains("leftover"), "{}", ui.screen());
    // Same with faults-only turned off, selecting deep down.
    ui.key(KeyCode::Char('f'));
    ui.select(&[
        "template/k8srequiredlabels",
        "constraint/K8sRequiredLabels/taken-name",
    ]);
    ui.key(KeyCode::Char('f'));
    let y = ui.selected_row().expect("the selection is in view");
    assert!(ui.row(y).contains("taken-name"), "{}", ui.screen());
}

#[test]
fn tui_scrolling_stops_at_the_last_page() {
    let mut ui = Ui::new(false, offline_data(), 80, 24);
    ui.key(KeyCode::Char('?'));
    ui.key(KeyCode::Char('G'));
    // The help pane spans the screen, inside its borders.
    let width = 80 - 2;
    let last = view::help_rows(&ui.app, width).last().unwrap().to_string();
    let last: String = last.trim().chars().take(30).collect();
    let (_, y) = ui.find(&last).expect("G shows the last help line");
    let (_, bottom) = ui.find("└").unwrap();
    assert_eq!(y, bottom - 1, "the last line is on the last row");
    assert!(
        ui.row(3).trim_matches(['│', ' ']).len() > 2,
        "no blank page"
    );
    let at = ui.app.help_scroll;
    ui.key(KeyCode::Down);
    ui.key(KeyCode::PageDown);
    assert_eq!(ui.app.help_scroll, at, "no scrolling past the end");
    ui.key(KeyCode::Esc);
    // YAML: G leaves the last line at the bottom of a full pane.
    ui.select(&["template/k8srequiredlabels"]);
    ui.key(KeyCode::Char('y'));
    ui.key(KeyCode::Char('G'));
    let doc = ui.app.doc.as_ref().unwrap();
    let last = doc.lines.last().unwrap().to_string();
    let last: String = last.trim().chars().take(30).collect();
    let (_, y) = ui.find(&last).expect("last YAML line shown");
    let (_, bottom) = ui.find("└").unwrap();
    assert_eq!(y, bottom - 1, "{}", ui.screen());
    assert!(
        ui.row(3).trim_matches(['│', ' ']).len() > 2,
        "{}",
        ui.screen()
    );
}

/// `w` wraps the document on screen, YAML (`y`) and diff (`d`) alike: the longest line, cut
/// at the pane's edge before, reads whole across its continuation rows after.
#[test]
fn tui_wrap_shows_long_lines_whole() {
    for key in ['y', 'd'] {
        let mut ui = Ui::new(false, offline_data(), 80, 24);
        ui.select(&["template/k8srequiredlabels"]);
        ui.key(KeyCode::Char(key));
        let longest = ui
            .app
            .doc
            .as_ref()
            .unwrap()
            .lines
            .iter()
            .map(|l| l.to_string())
            .max_by_key(|l| l.chars().count())
            .unwrap();
        assert!(
            longest.chars().count() > 78,
            "{key}: the fixture has a long line"
        );
        let pages = |ui: &mut Ui| -> String {
            let mut rows: Vec<String> = Vec::new();
            ui.key(KeyCode::Char('g'));
            loop {
                let (_, bottom) = ui.find("└").unwrap();
                for y in 3..bottom {
                    let r = ui.row(y);
                    let inner: String = r.chars().skip(1).take(78).collect();
                    let inner = inner.trim_end().to_string();
                    match inner.strip_prefix("↪ ") {
                        Some(rest) => rows.last_mut().unwrap().push_str(rest),
                        None => rows.push(inner),
                    }
                }
                let before = ui.app.doc.as_ref().unwrap().scroll;
                ui.key(KeyCode::PageDown);
                if ui.app.doc.as_ref().unwrap().scroll == before {
                    break;
                }
                // Rows shown twice across pages are harmless for `contains`.
            }
            rows.join("\n")
        };
        let cut = pages(&mut ui);
        assert!(
            !cut.contains(longest.trim_end()),
            "{key}: without wrap it is cut"
        );
        ui.key(KeyCode::Char('w'));
        let wrapped = pages(&mut ui);
        assert!(
            wrapped.contains(longest.trim_end()),
            "{key}: {longest}\n---\n{wrapped}"
        );
    }
}

#[test]
fn tui_event_log_scrolls_full_screen() {
    let mut ui = Ui::new(false, offline_data(), 80, 24);
    for i in 1..=40 {
        ui.act(Action::Flash(
            kubectl_vap::tui::Level::Info,
            format!("event number {i:02}"),
        ));
    }
    ui.key(KeyCode::Char('e'));
    assert_eq!(ui.app.screen, Screen::Events);
    // Log lines start with their time (the status line shows flashes without one).
    assert!(
        ui.screen().contains("HH:MM:SS event number 40"),
        "follows the newest"
    );
    ui.key(KeyCode::Char('g'));
    let s = ui.screen();
    // 25: the fixture's objects and what the default shape generated for it.
    assert!(s.contains("HH:MM:SS loaded 25 objects"), "{s}");
    assert!(!s.contains("HH:MM:SS event number 40"), "{s}");
    ui.key(KeyCode::Down);
    assert!(!ui.screen().contains("HH:MM:SS loaded 25 objects"));
    // New lines do not move a scrolled-up log; G follows again.
    ui.act(Action::Flash(
        kubectl_vap::tui::Level::Info,
        "event number 41".into(),
    ));
    assert!(!ui.screen().contains("HH:MM:SS event number 41"));
    ui.key(KeyCode::Char('G'));
    ui.act(Action::Flash(
        kubectl_vap::tui::Level::Info,
        "event number 42".into(),
    ));
    assert!(
        ui.screen().contains("HH:MM:SS event number 42"),
        "{}",
        ui.screen()
    );
    ui.key(KeyCode::Esc);
    assert_eq!(ui.app.screen, Screen::Main);
}

/// An audit's progress is a message the UI shows (the status line) and does not log: the
/// event log keeps outcomes, not a line per half second of a long audit.
#[test]
fn tui_audit_progress_is_shown_not_logged() {
    let mut ui = Ui::new(false, offline_data(), 80, 24);
    let logged = ui.app.log.len();
    for done in [3, 7] {
        ui.act(Action::Progress {
            what: "auditing k8srequiredlabels".into(),
            done,
            total: 10,
        });
    }
    let s = ui.screen();
    assert!(
        s.contains("auditing k8srequiredlabels: 7/10 dry-runs"),
        "{s}"
    );
    assert!(!s.contains("3/10"), "{s}");
    assert_eq!(ui.app.log.len(), logged);
}

#[test]
fn tui_commands_and_unknown_keys_answer() {
    let mut ui = Ui::new(false, offline_data(), 100, 30);
    ui.key(KeyCode::Char('x'));
    assert!(
        ui.screen().contains("unknown key x — ? for help"),
        "{}",
        ui.screen()
    );
    ui.key(KeyCode::Char(':'));
    ui.chars("ctx prod");
    assert!(ui.screen().contains(" :ctx prod█"), "{}", ui.screen());
    ui.key(KeyCode::Enter);
    assert!(
        ui.screen()
            .contains("offline snapshot (-f): there is no context to switch"),
        "{}",
        ui.screen()
    );
    assert!(ui.executed.is_empty());
    ui.key(KeyCode::Char(':'));
    ui.chars("frobnicate");
    ui.key(KeyCode::Enter);
    assert!(
        ui.screen().contains(":frobnicate: unknown command"),
        "{}",
        ui.screen()
    );
    ui.key(KeyCode::Char(':'));
    ui.chars("help");
    ui.key(KeyCode::Enter);
    assert_eq!(ui.app.screen, Screen::Help);
    ui.key(KeyCode::Char(':'));
    ui.chars("q");
    assert!(!ui.app.quit, "typing is not acting");
    ui.key(KeyCode::Enter);
    assert!(ui.app.quit);
}

#[test]
fn tui_copies_a_name_or_the_yaml() {
    let mut ui = Ui::new(false, offline_data(), 100, 30);
    // A constraint's own VAP (the default shape's), observed.
    let vap = "gatekeeper-k8srequiredlabels.ns-must-have-owner";
    ui.select(&[
        "template/k8srequiredlabels",
        "constraint/K8sRequiredLabels/ns-must-have-owner",
        &format!("policy/{vap}"),
    ]);
    ui.key(KeyCode::Char('c'));
    assert_eq!(ui.app.copy.take().as_deref(), Some(vap));
    assert!(ui.screen().contains(&format!("copied {vap}")));
    ui.key(KeyCode::Char('y'));
    ui.key(KeyCode::Char('c'));
    let yaml = ui.app.copy.take().expect("the YAML is copied");
    assert!(yaml.contains("kind: ValidatingAdmissionPolicy\n"), "{yaml}");
    assert!(!yaml.contains("managedFields"));
}

#[test]
fn tui_loaded_is_said_once_synced_and_connecting_goes_away() {
    let mut state = live_state();
    state.synced = false;
    let mut ui = Ui::new(false, live_data(&state, true), 150, 36);
    ui.act(Action::Flash(
        kubectl_vap::tui::Level::Info,
        "connecting to kind-payments: listing and watching…".into(),
    ));
    ui.act(Action::Data(live_data(&state, true)));
    assert!(
        ui.app.log.iter().all(|e| !e.text().starts_with("loaded")),
        "nothing is loaded while lists run"
    );
    // The status line (second to last row) keeps saying it while lists run …
    assert!(ui.row(34).contains("connecting to kind-payments"));
    state.synced = true;
    ui.act(Action::Data(live_data(&state, true)));
    let loaded: Vec<_> = ui
        .app
        .log
        .iter()
        .filter(|e| e.text().starts_with("loaded"))
        .collect();
    assert_eq!(loaded.len(), 1);
    // … and stops once they have.
    assert!(!ui.row(34).contains("connecting"), "{}", ui.screen());
}

/// Marks the CRDs `which` accepts Established 29.8 s before now, with the snapshot's clock
/// now: their bindings wait for `--binding-wait` (30 s), which ends 200 ms from now. Returns
/// that end.
fn waits_end_soon(
    state: &mut LiveState,
    which: impl Fn(&str) -> bool,
) -> chrono::DateTime<chrono::Utc> {
    let now = chrono::Utc::now();
    let since = now - chrono::Duration::milliseconds(29_800);
    let snap = Arc::make_mut(&mut state.snapshot);
    snap.now = Some(now);
    for c in snap.crds.iter_mut().filter(|c| which(&c.name)) {
        c.established_since = Some(since);
    }
    since + chrono::Duration::seconds(30)
}

/// What the source sends when the next deadline passes (it waits for it, then analyses on a
/// blocking thread, never the UI's).
fn at_deadline(data: &Data) -> Arc<Data> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    Arc::new(rt.block_on(kubectl_vap::tui::source::at_deadline(data)))
}

#[test]
fn tui_time_based_states_change_without_an_event() {
    // k8srequiredlabels's CRD became Established just under 30 s ago; one binding is not
    // there yet: it waits for --binding-wait (30 s), then is missing. The binding wait is the
    // narrowed shape's (an inline binding follows its VAP at once): that shape by name.
    let mut state = live_state_narrowed();
    let deadline = waits_end_soon(&mut state, |n| {
        n == "k8srequiredlabels.constraints.gatekeeper.sh"
    });
    Arc::make_mut(&mut state.snapshot)
        .bindings
        .retain(|b| b.name() != "gatekeeper-k8srequiredlabels-pods-must-have-app");
    let mut ui = Ui::expanded(false, live_data_in(&state, true, &narrowed()), 150, 42);
    let row = "VAPB gatekeeper-k8srequiredlabels-pods-must-have-app";
    assert!(
        ui.screen().contains(&format!("… {row}  waiting")),
        "{}",
        ui.screen()
    );
    let data = ui.app.data.clone().unwrap();
    assert_eq!(data.next_deadline, Some(deadline));
    // A tick analyses nothing (the UI never does); the source does once the deadline passes,
    // though no object changed.
    ui.act(Action::Tick(deadline + chrono::Duration::seconds(1)));
    assert!(ui.screen().contains(&format!("… {row}  waiting")));
    ui.act(Action::Data(at_deadline(&data)));
    assert!(
        ui.screen().contains(&format!("∅ {row}  missing")),
        "{}",
        ui.screen()
    );
    assert_eq!(ui.app.data.as_ref().unwrap().next_deadline, None);
}

/// A write that failed stays noted on its object's finding when a deadline passes and the
/// analysis runs again (the controller's state is kept with the data).
#[test]
fn tui_failed_write_notes_survive_a_deadline() {
    // The deadline is the binding wait's, the narrowed shape's: that shape by name.
    let mut state = live_state_narrowed();
    waits_end_soon(&mut state, |_| true);
    let failed = kubectl_vap::controller::FailedWrite {
        why: "forbidden: no create".into(),
        refused: false,
        contested: false,
    };
    state.failed_writes = Arc::new(
        [(
            kubectl_vap::model::ObjectId::new(
                "ValidatingAdmissionPolicy",
                "gatekeeper-k8sallowedrepos",
            ),
            failed,
        )]
        .into(),
    );
    let ui = Ui::new(false, live_data_in(&state, true, &narrowed()), 150, 42);
    let noted = |data: &Data| {
        data.analysis
            .findings
            .iter()
            .filter(|f| f.object.name == "gatekeeper-k8sallowedrepos")
            .any(|f| {
                f.message
                    .ends_with("the last write failed: forbidden: no create")
            })
    };
    let data = ui.app.data.clone().unwrap();
    assert!(noted(&data), "noted from the live state");
    let again = at_deadline(&data);
    assert_eq!(again.next_deadline, None, "analysed again");
    assert!(noted(&again), "still noted after the analysis ran again");
}

// ---- Issue 12: the TUI acts wherever the reconciler runs, and shows what happened. ----

/// The fixture's clock (the view measures ages and countdowns from it before any tick).
fn fixture_now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap()
}

/// An observing copy on a laptop; the reconciler runs in the cluster (pod kubectl-vap-7c9d5),
/// holds the Lease for 12 minutes, 3 items queued, last drained 4 s ago.
fn remote_state() -> LiveState {
    let mut state = live_state();
    state.writes_enabled = false;
    state.lease = LeaseInfo {
        lease: "gatekeeper-system/kubectl-vap".into(),
        identity: "laptop-1".into(),
        holder: Some("kubectl-vap-7c9d5-x2k4".into()),
        leading: false,
        participating: false,
        since: Some(fixture_now() - chrono::Duration::minutes(12)),
        health: Some(LeaderHealth {
            pod: Some("kubectl-vap-7c9d5".into()),
            queue: 3,
            last_sync: Some(fixture_now() - chrono::Duration::seconds(4)),
            settings: Some(kubectl_vap::core::settings::Settings::of(&default_options())),
            refused: Vec::new(),
            contested: Vec::new(),
            guard: None,
        }),
        vacant: false,
        unreadable: None,
        unresponsive_until: None,
    };
    state
}

/// Live data as the source stamps it: the kubeconfig's contexts and the session number.
fn stamped(mut data: Data, contexts: &[&str], session: u64) -> Arc<Data> {
    data.contexts = contexts.iter().map(|c| c.to_string()).collect();
    data.session = session;
    Arc::new(data)
}

const CONTEXTS: &[&str] = &["kind-payments", "kind-payroll", "prod-eu"];

fn observing(state: &LiveState) -> Arc<Data> {
    stamped(
        data_from_live(
            Arc::new(state.clone()),
            "kind-payments",
            false,
            &default_options(),
        ),
        CONTEXTS,
        1,
    )
}

/// The live view starting: attempt `attempt`, retrying at `retry_at` after `message`.
fn starting(
    context: &str,
    attempt: u32,
    retry_at: Option<chrono::DateTime<chrono::Utc>>,
    message: Option<String>,
) -> Data {
    let at = kubectl_vap::tui::data::Connecting {
        attempt,
        retry_at,
        message,
    };
    kubectl_vap::tui::from_live::connecting(context, false, at, fixture_now())
}

/// Each size the issue names: the full screen, 80×24 and 60×15.
const SIZES: [(u16, u16); 3] = [(150, 36), (80, 24), (60, 15)];

fn snapshot_name(name: &str, (w, h): (u16, u16)) -> String {
    if w == 150 {
        name.to_string()
    } else {
        format!("{name}_{w}x{h}")
    }
}

#[test]
fn tui_remote_leader_with_health() {
    for size in SIZES {
        let ui = Ui::new(false, observing(&remote_state()), size.0, size.1);
        insta::assert_snapshot!(snapshot_name("remote_leader", size), ui.screen());
        let header = ui.row(0);
        assert!(
            header.contains("mode: observing (asks the leader)"),
            "{header}"
        );
        // Whose settings judge the tree goes before the leader's health.
        if size.0 == 150 {
            assert!(
                header.contains("leader: kubectl-vap-7c9d5 for 12m │ settings: leader's"),
                "{header}"
            );
        }
    }
    let wide = Ui::new(false, observing(&remote_state()), 190, 36).row(0);
    assert!(
        wide.contains(
            "leader: kubectl-vap-7c9d5 for 12m │ queue 3, synced 4s ago │ settings: leader's"
        ),
        "{wide}"
    );
    // This copy leading says so, with its own queue.
    let mut state = live_state();
    state.queue_depth = 2;
    state.lease.since = Some(fixture_now() - chrono::Duration::seconds(40));
    let ui = Ui::new(false, live_data(&state, true), 150, 36);
    assert!(
        ui.row(0)
            .contains("mode: reconciling │ leader: this copy for 40s │ queue 2 │"),
        "{}",
        ui.row(0)
    );
}

#[test]
fn tui_header_drops_health_before_the_leader_and_never_the_mode() {
    let widths: Vec<(u16, String)> = [200u16, 150, 120, 100, 90, 70, 60, 50]
        .into_iter()
        .map(|w| (w, Ui::new(false, observing(&remote_state()), w, 24).row(0)))
        .collect();
    for (w, header) in &widths {
        assert!(
            header.contains("mode: observing (asks the leader)"),
            "{w}: {header}"
        );
        // The health goes before the leader, the server version first of all.
        if header.contains("queue 3") {
            assert!(
                header.contains("leader: kubectl-vap-7c9d5"),
                "{w}: {header}"
            );
        }
        if header.contains("server:") {
            assert!(
                header.contains("VAP API:") && header.contains("queue 3"),
                "{w}: {header}"
            );
        }
    }
    assert!(widths[0].1.contains("server: v1.36.3"), "{}", widths[0].1);
    // Whose settings judge the tree stays as long as the leader does, before the health.
    assert!(
        widths[1].1.contains("settings: leader's") && !widths[1].1.contains("queue 3"),
        "{}",
        widths[1].1
    );
    // At 120 columns the health has gone, the leader stays.
    assert!(
        !widths[2].1.contains("queue 3") && widths[2].1.contains("leader: kubectl-vap-7c9d5"),
        "{}",
        widths[2].1
    );
}

#[test]
fn tui_vacant_lease_warns_in_red() {
    let mut state = remote_state();
    state.lease.holder = None;
    state.lease.health = None;
    state.lease.since = None;
    state.lease.vacant = true;
    let warning = "no copy reconciles: nobody holds Lease gatekeeper-system/kubectl-vap";
    for size in SIZES {
        let ui = Ui::new(false, observing(&state), size.0, size.1);
        insta::assert_snapshot!(snapshot_name("vacant", size), ui.screen());
        // Never dropped, whatever the width: the line starts with it (cut at the edge).
        let at = ui
            .find(&warning[..(size.0 as usize - 6).min(warning.len())])
            .unwrap_or_else(|| panic!("{size:?}: {}", ui.screen()));
        assert_eq!(ui.term.backend().buffer()[at].fg, Color::Red);
        assert!(ui.row(0).contains("mode: observing"), "{size:?}");
    }
    // A holder that stopped renewing is named.
    state.lease.holder = Some("kubectl-vap-7c9d5-x2k4".into());
    let ui = Ui::new(false, observing(&state), 150, 36);
    assert!(
        ui.screen()
            .contains("no copy reconciles: kubectl-vap-7c9d5-x2k4 stopped renewing Lease gatekeeper-system/kubectl-vap"),
        "{}",
        ui.screen()
    );
    assert!(ui.row(0).contains("leader: none"), "{}", ui.row(0));
}

/// A holder that stopped renewing while its Lease has not expired yet (a `kill -9`, with a
/// standby running): said as unresponsive with the time left, in yellow — not "no copy
/// reconciles", which said so for 17 s while the standby was about to take over (issue 21,
/// item 9).
#[test]
fn tui_unresponsive_leader_is_not_said_to_be_absent() {
    let mut state = remote_state();
    state.lease.unresponsive_until = Some(fixture_now() + chrono::Duration::seconds(9));
    let ui = Ui::new(false, observing(&state), 150, 36);
    let warning = "leader kubectl-vap-7c9d5 unresponsive; its Lease gatekeeper-system/kubectl-vap expires in 9s, then a standby takes over if one runs";
    let at = ui
        .find(warning)
        .unwrap_or_else(|| panic!("{}", ui.screen()));
    assert_eq!(ui.term.backend().buffer()[at].fg, Color::Yellow);
    assert!(
        !ui.screen().contains("no copy reconciles"),
        "{}",
        ui.screen()
    );
    assert!(
        ui.row(0).contains("leader: kubectl-vap-7c9d5"),
        "{}",
        ui.row(0)
    );
    // Its age stops: "for 12m" would keep counting for a leader that is gone (issue 42).
    assert!(
        ui.row(0)
            .contains("leader: kubectl-vap-7c9d5 (unresponsive)")
            && !ui.row(0).contains(" for "),
        "{}",
        ui.row(0)
    );
    // The countdown moves with the clock alone: a tick a second later asks for a redraw
    // (with the leader's last sync minutes old, no other word on screen changes).
    if let Some(h) = state.lease.health.as_mut() {
        h.last_sync = Some(fixture_now() - chrono::Duration::minutes(3));
    }
    let mut ui = Ui::new(false, observing(&state), 150, 36);
    ui.app.redraw = false;
    ui.act(Action::Tick(
        fixture_now() + chrono::Duration::milliseconds(1500),
    ));
    assert!(ui.app.redraw, "the countdown changed");
    assert!(ui.screen().contains("expires in 8s"), "{}", ui.screen());
    // Expired, while a standby has up to 5 s to take it: how long ago, not "in 0s" for 5 s
    // (issue 28, item 11).
    ui.act(Action::Tick(fixture_now() + chrono::Duration::seconds(12)));
    let s = ui.screen();
    assert!(
        s.contains(
            "its Lease gatekeeper-system/kubectl-vap expired 3s ago; a standby takes over if one runs"
        ),
        "{s}"
    );
    assert!(!s.contains("in 0s") && !s.contains("in -"), "{s}");
    // Not "expired 3s ago, then a standby takes over": the takeover is still to come.
    assert!(!s.contains("ago, then"), "{s}");
}

fn reconnecting() -> Arc<Data> {
    stamped(
        starting(
            "kind-payments",
            3,
            Some(fixture_now() + chrono::Duration::seconds(4)),
            Some("discovering admissionregistration.k8s.io/v1: client error (Connect): tcp connect error: Connection refused (os error 111)".into()),
        ),
        CONTEXTS,
        1,
    )
}

#[test]
fn tui_reconnecting_counts_down_to_the_next_attempt() {
    let line = "connecting to kind-payments (attempt 3, next in 4s): discovering admissionregistration.k8s.io/v1";
    for size in SIZES {
        let ui = Ui::new(false, reconnecting(), size.0, size.1);
        insta::assert_snapshot!(snapshot_name("reconnecting", size), ui.screen());
        let s = ui.screen();
        assert!(
            s.contains(&line[..(size.0 as usize - 4).min(line.len())]),
            "{s}"
        );
        assert!(
            !s.contains("0 errors"),
            "nothing is counted while connecting: {s}"
        );
        assert!(!s.contains("no ConstraintTemplates"), "{s}");
    }
    // The clock moves the countdown (and asks for a redraw); the same second does not.
    let mut ui = Ui::new(false, reconnecting(), 150, 36);
    ui.act(Action::Tick(
        fixture_now() + chrono::Duration::milliseconds(1500),
    ));
    assert!(ui.app.redraw, "the countdown changed");
    assert!(
        ui.screen().contains("(attempt 3, next in 3s)"),
        "{}",
        ui.screen()
    );
    ui.app.redraw = false;
    ui.act(Action::Tick(
        fixture_now() + chrono::Duration::milliseconds(1700),
    ));
    assert!(!ui.app.redraw, "same second, same text");
    // Nothing can be sent before the live view runs; "loaded" is not said.
    ui.select(&[]);
    ui.key(KeyCode::Char('R'));
    assert!(ui.confirm().is_none() && ui.executed.is_empty());
    assert!(
        ui.screen().contains("not connected to kind-payments yet"),
        "{}",
        ui.screen()
    );
    assert!(ui.app.log.iter().all(|l| !l.text().starts_with("loaded")));
    // The first attempt, before any failure, just says what it does.
    let first = stamped(starting("kind-payments", 1, None, None), CONTEXTS, 1);
    let ui = Ui::new(false, first, 100, 30);
    assert!(
        ui.row(2)
            .contains("⟳ connecting to kind-payments: listing and watching…"),
        "{}",
        ui.screen()
    );
}

#[test]
fn tui_unreachable_api_server_is_said_with_how_long() {
    let mut state = remote_state();
    state.connection = Connection::Unreachable {
        since: fixture_now() - chrono::Duration::seconds(42),
        message: "watching constrainttemplates.templates.gatekeeper.sh: connection reset by peer"
            .into(),
    };
    for size in SIZES {
        let ui = Ui::new(false, observing(&state), size.0, size.1);
        insta::assert_snapshot!(snapshot_name("unreachable", size), ui.screen());
        let (x, y) = ui
            .find("✖ API server unreachable since")
            .unwrap_or_else(|| panic!("{}", ui.screen()));
        assert_eq!(ui.term.backend().buffer()[(x, y)].fg, Color::Red);
    }
    let ui = Ui::new(false, observing(&state), 150, 36);
    let s = ui.screen();
    assert!(
        s.contains("API server unreachable since HH:MM:SS (42s)"),
        "{s}"
    );
    // The tree keeps the last state seen.
    assert!(s.contains("k8srequiredlabels"));
    // Each watch's failure to connect is the same outage: said once, not a line per resource
    // (issue 42, item 7); a resource that is forbidden is no outage and stays.
    let resources = [
        "constrainttemplates.templates.gatekeeper.sh",
        "validatingadmissionpolicies.admissionregistration.k8s.io",
        "validatingadmissionpolicybindings.admissionregistration.k8s.io",
    ];
    state.access_errors = resources
        .iter()
        .map(|r| kubectl_vap::controller::AccessError {
            resource: r.to_string(),
            kind: kubectl_vap::controller::AccessErrorKind::Other,
            message: format!("watching {r}: connection refused"),
        })
        .chain([kubectl_vap::controller::AccessError {
            resource: "configs.config.gatekeeper.sh".into(),
            kind: kubectl_vap::controller::AccessErrorKind::Forbidden,
            message: "forbidden: cannot list/watch configs.config.gatekeeper.sh".into(),
        }])
        .collect();
    let s = Ui::new(false, observing(&state), 150, 36).screen();
    assert_eq!(s.matches("connection refused").count(), 0, "{s}");
    let forbidden = s.lines().filter(|l| l.contains("restricted (403)")).count();
    assert_eq!(forbidden, 1, "{s}");
}

/// An outage is its own state (issue 28, item 6): the tree is what was seen while the API
/// server answered, the counts and the leader's words are replaced by since when it does not
/// answer — never zeroed, never "nobody leads" because this copy cannot see the renewals —
/// and the moment it answers again the fresh state shows.
#[test]
fn tui_an_outage_keeps_the_last_state_and_says_so() {
    use kubectl_vap::tui::from_live::while_unreachable;
    let connected = remote_state();
    let last = data_from_live(
        Arc::new(connected.clone()),
        "kind-payments",
        false,
        &default_options(),
    );
    let mut ui = Ui::new(false, stamped(last.clone(), CONTEXTS, 1), 150, 36);
    assert!(ui.screen().contains("errors ⚠"), "{}", ui.screen());
    // What the controller publishes during the outage: its stores unreadable (nothing in
    // them to analyse), the Lease judged vacant after its duration without renewals seen.
    let down_since = fixture_now() - chrono::Duration::seconds(20);
    let outage = LiveState {
        snapshot: Arc::new(kubectl_vap::snapshot::Snapshot {
            now: Some(fixture_now()),
            ..Default::default()
        }),
        connection: Connection::Unreachable {
            since: down_since,
            message: "client error (Connect): connection refused".into(),
        },
        lease: LeaseInfo {
            vacant: true,
            ..connected.lease.clone()
        },
        ..connected.clone()
    };
    let stale = while_unreachable(&Arc::new(outage), Some(&last)).expect("kept while unreachable");
    ui.act(Action::Data(stamped(stale, CONTEXTS, 1)));
    let s = ui.screen();
    // (The screen's clock times are masked: HH:MM:SS.)
    assert!(s.contains("✖ API server unreachable since HH:MM:SS"), "{s}");
    assert!(
        !s.contains("0 errors"),
        "counts are not zeroed:
{s}"
    );
    assert!(
        !s.contains("leader: none") && !s.contains("no copy reconciles"),
        "the leader was alive; only the API server was gone:
{s}"
    );
    assert!(
        s.contains("leader: kubectl-vap-7c9d5 as of HH:MM:SS"),
        "{s}"
    );
    assert!(
        s.contains("pods-must-have-app") || s.contains("k8srequiredlabels"),
        "the tree is kept:
{s}"
    );
    // Answering again: the fresh state, at once (no stale data is kept past it).
    assert!(while_unreachable(&Arc::new(connected.clone()), Some(&last)).is_none());
    ui.act(Action::Data(observing(&connected)));
    let s = ui.screen();
    assert!(!s.contains("unreachable"), "{s}");
    assert!(s.contains("leader: kubectl-vap-7c9d5 for 12m"), "{s}");
}

#[test]
fn tui_ctx_lists_contexts_and_switches() {
    for size in SIZES {
        let mut ui = Ui::new(false, observing(&remote_state()), size.0, size.1);
        ui.key(KeyCode::Char(':'));
        ui.chars("ctx");
        ui.key(KeyCode::Enter);
        insta::assert_snapshot!(snapshot_name("ctx_list", size), ui.screen());
    }
    let mut ui = Ui::new(false, observing(&remote_state()), 150, 36);
    ui.key(KeyCode::Char(':'));
    ui.chars("ctx");
    ui.key(KeyCode::Enter);
    let Mode::Picker(picker) = ui.app.mode.clone() else {
        panic!("the list is open")
    };
    assert_eq!(picker.names, CONTEXTS);
    assert_eq!(picker.selected, 0, "the current context is selected");
    assert!(
        ui.screen().contains("› ● kind-payments  (current)"),
        "{}",
        ui.screen()
    );
    // Keys are the list's while it is open: esc closes it, nothing switched, nothing quit.
    ui.key(KeyCode::Char('q'));
    assert!(!ui.app.quit && matches!(ui.app.mode, Mode::Picker(_)));
    ui.key(KeyCode::Esc);
    assert!(ui.app.mode == Mode::Normal && ui.executed.is_empty());
    // enter switches to the selected one.
    ui.key(KeyCode::Char(':'));
    ui.chars("ctx");
    ui.key(KeyCode::Enter);
    ui.key(KeyCode::Down);
    ui.key(KeyCode::Down);
    ui.key(KeyCode::Down);
    ui.key(KeyCode::Up);
    ui.key(KeyCode::Enter);
    assert_eq!(
        ui.executed,
        vec![WriteCommand::SwitchContext("kind-payroll".into())]
    );
    assert_eq!(ui.app.mode, Mode::Normal);
    // `:ctx NAME` directly; tab completes; an unknown name says what it could be.
    ui.key(KeyCode::Char(':'));
    ui.chars("ctx pr");
    ui.key(KeyCode::Tab);
    assert_eq!(
        ui.typing(PromptKind::Command).as_deref(),
        Some("ctx prod-eu")
    );
    ui.key(KeyCode::Enter);
    assert_eq!(
        ui.executed.last(),
        Some(&WriteCommand::SwitchContext("prod-eu".into()))
    );
    ui.key(KeyCode::Char(':'));
    ui.chars("ctx k");
    ui.key(KeyCode::Tab);
    assert_eq!(
        ui.typing(PromptKind::Command).as_deref(),
        Some("ctx kind-pay")
    );
    assert!(
        ui.screen()
            .contains("(contexts: kind-payments, kind-payroll; tab completes)"),
        "{}",
        ui.screen()
    );
    ui.key(KeyCode::Enter);
    assert!(
        ui.screen().contains(
            "no context \"kind-pay\" in the kubeconfig — did you mean one of kind-payments, kind-payroll?"
        ),
        "{}",
        ui.screen()
    );
    assert_eq!(ui.executed.len(), 2, "an unknown name switches nothing");
    ui.key(KeyCode::Char(':'));
    ui.chars("cont");
    ui.key(KeyCode::Tab);
    assert_eq!(
        ui.typing(PromptKind::Command).as_deref(),
        Some("cont"),
        "not a command: no completion"
    );
    ui.key(KeyCode::Esc);
}

#[test]
fn tui_switching_context_empties_the_tree_and_refills_it() {
    use kubectl_vap::admission::audit::{AuditReport, ConstraintAudit, Status};
    use kubectl_vap::core::verdict::ConstraintRef;
    let mut ui = Ui::new(false, observing(&remote_state()), 150, 36);
    // An audit result from the first cluster.
    ui.act(Action::Audited(Arc::new(AuditReport {
        complete: true,
        requests: 1,
        constraints: vec![ConstraintAudit {
            constraint: ConstraintRef {
                kind: "K8sRequiredLabels".into(),
                name: "pods-must-have-app".into(),
            },
            template: "k8srequiredlabels".into(),
            binding: Some("gatekeeper-k8srequiredlabels-pods-must-have-app".into()),
            validation_actions: vec!["Deny".into()],
            status: Status::Audited,
            note: None,
            in_scope: 0,
            checked: 0,
            violations: Vec::new(),
            hidden: Vec::new(),
            errors: Vec::new(),
        }],
    })));
    assert!(!ui.app.violations.is_empty());
    // The source switched: its next session starts empty, on the other context.
    let other = stamped(starting("prod-eu", 1, None, None), CONTEXTS, 2);
    ui.act(Action::Data(other));
    assert!(ui.row(0).contains("context: prod-eu"), "{}", ui.row(0));
    assert!(ui.app.tree.items.is_empty(), "the tree empties");
    assert!(
        ui.app.violations.is_empty(),
        "the old cluster's audit is forgotten"
    );
    assert!(
        ui.screen().contains("connecting to prod-eu"),
        "{}",
        ui.screen()
    );
    // … and refills from the new one; "loaded" is said for it.
    let loaded_before = ui
        .app
        .log
        .iter()
        .filter(|l| l.text().starts_with("loaded"))
        .count();
    let state = remote_state();
    let data = data_from_live(Arc::new(state), "prod-eu", false, &default_options());
    ui.act(Action::Data(stamped(data, CONTEXTS, 2)));
    assert!(ui.screen().contains("k8srequiredlabels"));
    let loaded_after = ui
        .app
        .log
        .iter()
        .filter(|l| l.text().starts_with("loaded"))
        .count();
    assert_eq!(loaded_after, loaded_before + 1);
}

/// The leader's Events an observing copy's feed tells: a replay, and a write it could not
/// make (a series of 3).
fn cluster_events() -> Vec<Action> {
    let template = ObjectRef::new(
        "templates.gatekeeper.sh/v1",
        "ConstraintTemplate",
        "k8srequiredlabels",
    );
    [
        ClusterEvent {
            time: fixture_now() - chrono::Duration::seconds(30),
            reporter: "kubectl-vap-7c9d5-x2k4".into(),
            regarding: template,
            reason: "Replayed".into(),
            note: "replayed 3 constraints of K8sRequiredLabels: 1 write".into(),
            warning: false,
            count: 1,
            request: None,
            from_a_holder: true,
        },
        ClusterEvent {
            time: fixture_now() - chrono::Duration::seconds(10),
            reporter: "kubectl-vap-7c9d5-x2k4".into(),
            regarding: ObjectRef::new(
                "constraints.gatekeeper.sh/v1beta1",
                "K8sRequiredLabels",
                "pods-must-have-app",
            ),
            reason: "WriteFailed".into(),
            note: "update ValidatingAdmissionPolicyBinding/gatekeeper-k8srequiredlabels-pods-must-have-app: forbidden".into(),
            warning: true,
            count: 3,
            request: None,
            from_a_holder: true,
        },
    ]
    .into_iter()
    .map(|e| told(Happened::Cluster(e)))
    .collect()
}

#[test]
fn tui_cluster_events_appear_in_the_log_once() {
    let state = remote_state();
    let mut ui = Ui::new(false, observing(&state), 150, 36);
    for e in cluster_events() {
        ui.act(e);
    }
    insta::assert_snapshot!("cluster_events", ui.screen());
    let warning = "WriteFailed K8sRequiredLabels/pods-must-have-app: update";
    let at = ui
        .find(warning)
        .unwrap_or_else(|| panic!("{}", ui.screen()));
    // A write the leader could not make is a failure: red (issue 21, item 2).
    assert_eq!(ui.term.backend().buffer()[at].fg, Color::Red);
    assert!(
        ui.app
            .log
            .iter()
            .any(|l| l.text().starts_with("WriteFailed")
                && l.text().ends_with("— by kubectl-vap-7c9d5-x2k4 (×3)")),
        "{:?}",
        ui.app.log
    );
    // The same state again (any refresh): no line twice.
    ui.act(Action::Data(observing(&state)));
    ui.act(Action::Data(observing(&state)));
    let count = |ui: &Ui, what: &str| {
        ui.app
            .log
            .iter()
            .filter(|l| l.text().starts_with(what))
            .count()
    };
    assert_eq!(count(&ui, "WriteFailed"), 1);
    assert_eq!(count(&ui, "Replayed"), 1);
    // The full-screen log at the small sizes.
    for (w, h) in [(80u16, 24u16), (60, 15)] {
        let mut ui = Ui::new(false, observing(&state), w, h);
        for e in cluster_events() {
            ui.act(e);
        }
        ui.key(KeyCode::Char('e'));
        insta::assert_snapshot!(format!("cluster_events_{w}x{h}"), ui.screen());
    }
}

#[test]
fn tui_observing_hint_bar_offers_replay_and_reconcile() {
    for size in SIZES {
        let mut ui = Ui::new(false, observing(&remote_state()), size.0, size.1);
        let hints = ui.row(size.1 - 1);
        assert!(
            hints.contains("p replay") && hints.contains("r reconcile"),
            "{size:?}: {hints}"
        );
        assert!(
            hints.contains("? help") && hints.contains("quit"),
            "{size:?}: {hints}"
        );
        if size.0 >= 80 {
            assert!(hints.contains("R reconcile all"), "{size:?}: {hints}");
        }
        // And asks, as it would for a write of its own.
        ui.select(&["template/k8srequiredlabels"]);
        ui.key(KeyCode::Char('p'));
        assert_eq!(
            ui.confirm(),
            Some(WriteCommand::Replay("k8srequiredlabels".into()))
        );
        insta::assert_snapshot!(snapshot_name("observing_asks", size), ui.screen());
    }
    // Offline they cannot run: the other hints keep their place.
    let ui = Ui::new(false, offline_data(), 80, 24);
    assert!(!ui.row(23).contains("replay"), "{}", ui.row(23));
}

/// A change of who leads, as the controller tells it once: a line in the log, a warning
/// when nobody leads, news when someone does.
#[test]
fn tui_lease_changes_are_logged_as_told() {
    use kubectl_vap::controller::{LeaseChange, LeaseTurn};
    let mut ui = Ui::new(false, observing(&remote_state()), 150, 36);
    let lease = |what| {
        told(Happened::Lease(LeaseChange {
            time: fixture_now(),
            lease: "gatekeeper-system/kubectl-vap".into(),
            what,
        }))
    };
    ui.act(lease(LeaseTurn::Expired {
        holder: "laptop-2".into(),
    }));
    ui.act(lease(LeaseTurn::Leads {
        holder: "kubectl-vap-7c9d5-x2k4".into(),
        was: Some("this copy".into()),
    }));
    let level = |text: &str| {
        ui.app
            .log
            .iter()
            .find(|l| l.text().ends_with(text))
            .map(|l| l.level())
    };
    assert_eq!(
        level("nobody leads: laptop-2 stopped renewing it; no copy reconciles"),
        Some(kubectl_vap::tui::Level::Warn)
    );
    assert_eq!(
        level("kubectl-vap-7c9d5-x2k4 leads now (was this copy)"),
        Some(kubectl_vap::tui::Level::Info)
    );
    assert!(
        ui.screen().contains(
            "lease gatekeeper-system/kubectl-vap — kubectl-vap-7c9d5-x2k4 leads now (was this copy)"
        ),
        "the event pane shows the newest: {}",
        ui.screen()
    );
}

/// Two `t` verdicts that differ only at the end of a long line: at 160 columns the event
/// pane wraps them, so both endings show (cut at the edge, they looked the same); at 80×24
/// the full-screen log (`e`) shows them whole, and the status line ends a cut line in `…`.
#[test]
fn tui_long_log_lines_wrap_so_verdicts_differ() {
    let verdict = |label: &str| {
        format!(
            "test Pod payments/web-{label}: denied (dry-run create) by binding gatekeeper-k8srequiredlabels-payments-ns-must-have-owner → constraint K8sRequiredLabels/payments-ns-must-have-owner → template k8srequiredlabels: you must provide labels: {{\"{label}\"}}"
        )
    };
    let (a, b) = (verdict("owner"), verdict("team"));
    assert!(a.len() > 160);
    let mut ui = Ui::new(false, live_data(&live_state(), true), 160, 45);
    for line in [&a, &b] {
        ui.act(Action::Flash(kubectl_vap::tui::Level::Info, line.clone()));
    }
    let s = ui.screen();
    for end in ["labels: {\"owner\"}", "labels: {\"team\"}"] {
        assert!(s.contains(end), "{end} on screen:\n{s}");
    }
    // Continuations sit under the text, not under the time.
    let (x_text, _) = ui.find("test Pod payments/web-owner").unwrap();
    let (x_cont, _) = ui.find("labels: {\"owner\"}").unwrap();
    assert!(x_cont >= x_text, "{s}");

    let mut ui = Ui::new(false, live_data(&live_state(), true), 80, 24);
    for line in [&a, &b] {
        ui.act(Action::Flash(kubectl_vap::tui::Level::Info, line.clone()));
    }
    let status = ui.row(22);
    assert!(status.trim_end().ends_with('…'), "{status}");
    ui.key(KeyCode::Char('e'));
    let s = ui.screen();
    for end in ["labels: {\"owner\"}", "labels: {\"team\"}"] {
        assert!(s.contains(end), "{end} in the full-screen log:\n{s}");
    }
    // G shows the last row; scrolling up goes by rows, and G follows again.
    ui.key(KeyCode::Char('G'));
    assert!(ui.screen().contains("labels: {\"team\"}"));
    insta::assert_snapshot!("events_wrapped_80x24", ui.screen());
}

/// Help at 80×24: long explanations wrap under their text instead of being cut.
#[test]
fn tui_help_wraps_at_80_columns() {
    let mut ui = Ui::new(false, offline_data(), 80, 24);
    ui.key(KeyCode::Char('?'));
    let s = ui.screen();
    assert!(s.contains("enter keeps it, esc clears it"), "{s}");
    let (x_key, _) = ui.find("filter the tree by name").unwrap();
    let (x_cont, _) = ui.find("`k8srequired`); enter keeps it").unwrap();
    assert_eq!(x_key, x_cont, "the continuation is under the text:\n{s}");
}

/// At 80×24 the detail pane has four rows: `J`/`K` scroll it to the findings and planned
/// writes, its title says which rows show, and another selection starts at the top.
#[test]
fn tui_detail_pane_scrolls_at_80x24() {
    let mut ui = Ui::expanded(false, offline_data(), 80, 24);
    // A missing VAP: the default shape's, the constraint's own.
    ui.select(&[
        "template/k8sallowedrepos",
        "constraint/K8sAllowedRepos/prod-repos",
        "policy/gatekeeper-k8sallowedrepos.prod-repos",
    ]);
    let s = ui.screen();
    assert!(!s.contains("Planned"), "below the pane at first:\n{s}");
    let title = |ui: &Ui| {
        let (_, y) = ui.find("┌ Detail").unwrap();
        ui.row(y)
    };
    assert!(title(&ui).contains("Detail (1–6 of"), "{}", title(&ui));
    for _ in 0..30 {
        ui.key(KeyCode::Char('J'));
    }
    let s = ui.screen();
    assert!(s.contains("Planned"), "{s}");
    assert!(s.contains("(d: diff)"), "the last row is reached:\n{s}");
    let bottom = title(&ui);
    // Bounded: the last row is on the pane's last line, not above a blank page.
    let (_, last) = ui.find("(d: diff)").unwrap();
    let (_, hints) = ui.find("? help").unwrap();
    assert_eq!(last, hints - 3, "{s}");
    ui.key(KeyCode::Char('K'));
    assert_ne!(title(&ui), bottom);
    insta::assert_snapshot!("detail_scrolled_80x24", ui.screen());
    // Another node: from the top again.
    ui.key(KeyCode::Up);
    assert!(title(&ui).contains("Detail (1–") || title(&ui).contains("Detail ─"));
    // The keys are in the one table: help and the hint bar show them.
    assert!(ui.row(23).contains("J/K detail"), "{}", ui.row(23));
    ui.key(KeyCode::Char('?'));
    assert!(ui.screen().contains("scroll the detail pane down"));
}

/// The tree's title gives the selection's row, so a selection out of sight is found; sorting
/// by state selects the worst row, at the top.
#[test]
fn tui_tree_title_shows_the_position_and_sort_shows_the_worst() {
    // 33 nodes in the default shape: a VAP per bound constraint beside each template's row.
    let mut ui = Ui::new(false, offline_data(), 80, 24);
    assert!(
        ui.screen().contains("Tree (1/6 · 33 nodes)"),
        "{}",
        ui.screen()
    );
    ui.key(KeyCode::Char('G'));
    assert!(
        ui.screen().contains("Tree (6/6 · 33 nodes)"),
        "{}",
        ui.screen()
    );
    ui.key(KeyCode::Enter);
    ui.key(KeyCode::Char('G'));
    let s = ui.screen();
    assert!(s.contains("Tree (8/8 · 33 nodes)"), "{s}");
    ui.key(KeyCode::Char('/'));
    ui.chars("leftover");
    ui.key(KeyCode::Enter);
    assert!(ui.screen().contains("· 2 of 33 nodes)"), "{}", ui.screen());
    ui.key(KeyCode::Esc);

    // Everything open, the selection at the bottom: `s` brings the worst row into view,
    // selected, at the top.
    let mut ui = Ui::expanded(false, offline_data(), 80, 24);
    ui.key(KeyCode::Char('G'));
    ui.key(KeyCode::Char('s'));
    let s = ui.screen();
    let y = ui.selected_row().expect("the selection is in view");
    assert_eq!(y, 3, "the first row:\n{s}");
    assert!(ui.row(y).contains("k8sreplicalimits  error"), "{s}");
    assert!(s.contains("Tree (1/"), "{s}");
}

/// The header and the log count in words that agree with the number.
#[test]
fn tui_counts_are_pluralized() {
    let mut state = live_state();
    let snap = Arc::make_mut(&mut state.snapshot);
    snap.templates.retain(|t| t.name() == "k8sreplicalimits");
    snap.constraints.clear();
    snap.policies.clear();
    snap.bindings.clear();
    snap.crds.clear();
    let ui = Ui::new(false, live_data(&state, true), 150, 36);
    let s = ui.screen();
    assert!(s.contains("✖ 1 error ⚠ 0 warnings ℹ 0 infos"), "{s}");
    assert!(
        s.contains("1 template, 0 constraints, 0 VAPs, 0 bindings"),
        "{s}"
    );
    assert!(
        s.contains("objects: 1 error, 0 warnings, 0 infos, 0 planned writes"),
        "{s}"
    );
    assert!(!s.contains("1 errors"), "{s}");
}

/// The outcome of `p`/`r`/`R` is one line: the answer, or the handler's line when it comes
/// first, paired by the request's id; the other is not logged again. Without Events the
/// answer still says it; the same outcome twice is two lines.
#[test]
fn tui_a_request_outcome_is_logged_once() {
    use kubectl_vap::tui::Level;
    let holder = "kubectl-vap-7c9d5-x2k4";
    let summary = "replayed 3 constraints of K8sRequiredLabels: 1 write";
    let template = ObjectRef::new(
        "templates.gatekeeper.sh/v1",
        "ConstraintTemplate",
        "k8srequiredlabels",
    );
    let answer = |id: &str| {
        Action::Answer(
            Level::Info,
            format!("`kubectl vap replay k8srequiredlabels`: {summary} (by {holder})"),
            Some(id.into()),
        )
    };
    let event = |id: &str| {
        told(Happened::Cluster(ClusterEvent {
            time: fixture_now(),
            reporter: holder.into(),
            regarding: template.clone(),
            reason: "Replayed".into(),
            note: summary.into(),
            warning: false,
            count: 1,
            request: Some(id.into()),
            from_a_holder: true,
        }))
    };
    let lines = |ui: &Ui| {
        ui.app
            .log
            .iter()
            .filter(|l| l.text().contains(summary))
            .count()
    };
    // The answer first, then the Event: one line, the answer's.
    let mut ui = Ui::new(false, observing(&remote_state()), 150, 36);
    ui.act(answer("r1"));
    ui.act(event("r1"));
    assert_eq!(lines(&ui), 1, "{}", ui.screen());
    assert!(
        ui.screen()
            .contains("`kubectl vap replay k8srequiredlabels`:")
    );
    // The same again (p pressed twice): a second line.
    ui.act(answer("r2"));
    ui.act(event("r2"));
    assert_eq!(lines(&ui), 2, "{}", ui.screen());
    // Another request's Event with the same words is its own line: paired by id, not text.
    ui.act(event("r3"));
    assert_eq!(lines(&ui), 3, "{}", ui.screen());

    // The Event first, then the answer: one line, the Event's.
    let mut ui = Ui::new(false, observing(&remote_state()), 150, 36);
    ui.act(event("r1"));
    ui.act(answer("r1"));
    assert_eq!(lines(&ui), 1, "{}", ui.screen());
    assert!(ui.screen().contains(&format!(
        "Replayed ConstraintTemplate/k8srequiredlabels: {summary} — by {holder}"
    )));

    // No Event (this copy may not read them): the answer is the line.
    let mut ui = Ui::new(false, observing(&remote_state()), 150, 36);
    ui.act(answer("r1"));
    assert_eq!(lines(&ui), 1, "{}", ui.screen());

    // This copy leads: its own log line and the answer are one outcome too.
    let mut ui = Ui::new(false, live_data(&live_state(), true), 150, 36);
    ui.act(told(Happened::Reconcile(ReconcileEvent {
        time: fixture_now(),
        verb: EventVerb::Replay,
        object: template.clone(),
        result: EventResult::Ok,
        message: summary.into(),
        request: Some("r1".into()),
    })));
    ui.act(Action::Answer(
        Level::Info,
        format!("`kubectl vap replay k8srequiredlabels`: {summary} (by laptop-1)"),
        Some("r1".into()),
    ));
    assert_eq!(lines(&ui), 1, "{}", ui.screen());
}

/// Issue 42, item 4: the API server's caret diagram under a CEL error is logged as lines, each
/// under the text's column, never with a literal `\n`; the status bar shows the first line.
#[test]
fn a_message_of_several_lines_is_logged_as_lines() {
    let mut ui = Ui::new(false, observing(&remote_state()), 150, 36);
    let refused = "create ValidatingAdmissionPolicy/gatekeeper-k8sx FAILED: compilation failed: ERROR: <input>:1:11: undeclared reference to 'nosuch'\n | variables.nosuch == 'x'\n | ..........^";
    ui.act(Action::Flash(
        kubectl_vap::tui::Level::Error,
        refused.into(),
    ));
    let s = ui.screen();
    assert!(!s.contains("\\n"), "{s}");
    let first = s
        .lines()
        .find(|l| l.contains("undeclared reference to 'nosuch'"))
        .unwrap_or_else(|| panic!("{s}"));
    let column = first.find("create").expect("the text");
    let under: Vec<&str> = s
        .lines()
        .filter(|l| l.contains(" | variables.nosuch") || l.contains(" | ..........^"))
        .collect();
    assert_eq!(under.len(), 2, "{s}");
    for l in under {
        assert_eq!(l.find('|'), Some(column + 1), "under the text: {l}\n{s}");
    }
}
