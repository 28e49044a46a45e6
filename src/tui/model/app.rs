//! The UI state: what is shown and how, and the operations `update` (in `update.rs`, the
//! only place that calls them) changes it with. No IO; no layout (what the last frame
//! measured is in `App::drawn`).

use super::action::{Action, Level, WriteCommand};
use super::contexts;
use super::data::{Data, EventLine, Origin, is_tree_resource};
use super::detail;
use super::keymap::{self, Key, Keymap, Screen};
use super::tree_view::{Filter, SortBy, TreeView, find};
use crate::core::tree::{Node, NodeKind};
use crate::tui::say::words::{age, count, seconds_until};
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::text::Line;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an info flash stays (errors stay until the next key).
pub const FLASH_TTL: Duration = Duration::from_secs(6);
/// Lines kept in the event log.
pub const LOG_CAP: usize = 500;
/// Outcomes remembered as said once and waiting for their pair (see `App::said`).
const UNPAIRED_CAP: usize = 64;

/// What keys do now, besides the screen's keymap: one of these at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Mode {
    /// The keymap of the screen.
    #[default]
    Normal,
    /// A line is being typed.
    Prompt(Prompt),
    /// The context list `:ctx` opened.
    Picker(Picker),
    /// A write waiting for y/n.
    Confirm(WriteCommand),
}

/// A line being typed, and what it is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub kind: PromptKind,
    pub line: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    /// `/`: the tree's filter, applied as it is typed.
    Filter,
    /// `t`: the path of a file to test.
    TestPath,
    /// `:` a command (k9s grammar: `:q`, `:help`, `:ctx NAME`, …).
    Command,
}

impl PromptKind {
    /// What the status line shows before the line, and after it.
    pub fn words(self) -> (&'static str, &'static str) {
        match self {
            PromptKind::Filter => (" /", "  (name or state; enter keeps, esc clears)"),
            PromptKind::TestPath => (
                " test file: ",
                "  (enter dry-runs its objects, esc cancels)",
            ),
            PromptKind::Command => (
                " :",
                "  (q, help, events, sort name|state, ctx [NAME]; tab completes, esc cancels)",
            ),
        }
    }
}

/// Which of the two reports of a request's outcome a log line was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Said {
    /// The answer to this copy's request.
    Answer,
    /// The handler's Event (or this copy's own log line when it handled it).
    Event,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocKind {
    Yaml,
    Diff,
}

/// A full-screen document (YAML or diff) of one node.
pub struct Doc {
    pub kind: DocKind,
    pub title: String,
    pub lines: Vec<Line<'static>>,
    pub scroll: usize,
}

/// The kubeconfig's contexts, as `:ctx` lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picker {
    pub names: Vec<String>,
    /// The context in use (marked).
    pub current: String,
    pub selected: usize,
}

/// A scrolled pane as the last frame drew it: rows in sight, rows in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub rows: usize,
    pub len: usize,
}

impl Extent {
    /// The first row of the last page: scrolling stops there (so `G` shows the last page,
    /// not the last line alone or a blank one).
    pub fn last_top(self) -> usize {
        self.len.saturating_sub(self.rows)
    }
}

/// What the last frame measured, for `update` to scroll by. The view writes it as it draws
/// (the layout is the view's alone), so `update` never computes a layout; a frame is drawn
/// after every batch of actions, before the next key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drawn {
    /// The detail pane; `None` when the main screen had no room for it.
    pub detail: Option<Extent>,
    /// The full-screen document, help and event log; `None` before they were first drawn.
    pub doc: Option<Extent>,
    pub help: Option<Extent>,
    pub events: Option<Extent>,
}

pub struct Flash {
    pub level: Level,
    pub text: String,
    pub at: Instant,
}

pub struct App {
    pub keymap: Keymap,
    pub data: Option<Arc<Data>>,
    pub tree: TreeView,
    pub filter: Filter,
    pub mode: Mode,
    pub screen: Screen,
    pub help_scroll: usize,
    pub doc: Option<Doc>,
    /// Wrap long lines in YAML and diff (`w`).
    pub wrap: bool,
    /// The first event-log row shown on the events screen; `None` follows the newest.
    pub log_scroll: Option<usize>,
    /// The detail pane's first row (`J`/`K`), for the selection it was scrolled on: another
    /// selection starts at the top.
    detail_scroll: (Vec<super::tree_view::Key>, usize),
    /// The time, from the loop's ticks; before the first, the data's clock (so the view is a
    /// function of the state: ages and countdowns are measured from it).
    pub clock: Option<chrono::DateTime<chrono::Utc>>,
    pub flash: Option<Flash>,
    /// The event log pane: what the controller told, command outcomes, errors; the newest
    /// [`LOG_CAP`], oldest first.
    pub log: VecDeque<EventLine>,
    /// Requests (by id) whose outcome one side (the answer, or the handler's line) logged and
    /// whose other side has not come yet: when it comes, it is not logged again.
    unpaired: VecDeque<(String, Said)>,
    /// The first non-empty data was summed up in the log.
    announced: bool,
    /// Audit results kept while the TUI runs (`a`), marked stale as the cluster changes.
    pub violations: super::violations::Store,
    /// Rows of the tree pane, for page up/down (the view writes it as it draws the tree).
    pub page: usize,
    /// What the last frame measured: scrolling is bounded by what the view shows.
    pub drawn: Drawn,
    /// Text for the terminal's clipboard (`c`): the runtime sends it (OSC 52) and clears it.
    pub copy: Option<String>,
    /// Something changed without a key (the clock moved what is on screen): redraw.
    pub redraw: bool,
    pub quit: bool,
}

impl App {
    pub fn new(readonly: bool) -> Self {
        App {
            keymap: Keymap::new(readonly),
            data: None,
            tree: TreeView::default(),
            filter: Filter::default(),
            mode: Mode::Normal,
            wrap: false,
            log_scroll: None,
            detail_scroll: (Vec::new(), 0),
            drawn: Drawn::default(),
            copy: None,
            redraw: false,
            screen: Screen::Main,
            help_scroll: 0,
            doc: None,
            clock: None,
            flash: None,
            log: VecDeque::new(),
            unpaired: VecDeque::new(),
            announced: false,
            violations: super::violations::Store::default(),
            page: 20,
            quit: false,
        }
    }

    /// What a key means right now: filter typing and confirmation first, then the keymap.
    pub fn key_action(&self, ev: &KeyEvent) -> Option<Action> {
        if ev.kind == KeyEventKind::Release {
            return None;
        }
        let ctrl_c = ev.modifiers.contains(KeyModifiers::CONTROL) && ev.code == KeyCode::Char('c');
        if ctrl_c {
            return Some(Action::Quit);
        }
        match &self.mode {
            Mode::Prompt(p) if p.kind == PromptKind::Command && ev.code == KeyCode::Tab => {
                return Some(Action::PromptComplete);
            }
            Mode::Prompt(_) => {
                return match ev.code {
                    KeyCode::Char(c) if !ev.modifiers.contains(KeyModifiers::CONTROL) => {
                        Some(Action::PromptPush(c))
                    }
                    KeyCode::Backspace => Some(Action::PromptPop),
                    KeyCode::Enter => Some(Action::PromptDone),
                    KeyCode::Esc => Some(Action::PromptCancel),
                    _ => None,
                };
            }
            Mode::Picker(p) => {
                let page = isize::try_from(p.names.len()).unwrap_or(isize::MAX);
                return Some(match ev.code {
                    KeyCode::Up | KeyCode::Char('k') => Action::PickerMove(-1),
                    KeyCode::Down | KeyCode::Char('j') => Action::PickerMove(1),
                    KeyCode::PageUp | KeyCode::Home | KeyCode::Char('g') => {
                        Action::PickerMove(-page)
                    }
                    KeyCode::PageDown | KeyCode::End | KeyCode::Char('G') => {
                        Action::PickerMove(page)
                    }
                    KeyCode::Enter => Action::PickerDone,
                    KeyCode::Esc => Action::PickerCancel,
                    _ => Action::NotHere(
                        "contexts: ↑/↓ move, enter switches, esc closes".to_string(),
                    ),
                });
            }
            Mode::Confirm(_) => {
                return match ev.code {
                    KeyCode::Char('y') | KeyCode::Enter => Some(Action::ConfirmYes),
                    KeyCode::Char('n') | KeyCode::Esc => Some(Action::ConfirmNo),
                    _ => None,
                };
            }
            Mode::Normal => {}
        }
        let key = Key::from_event(ev)?;
        match self.keymap.lookup(self.screen, key) {
            Some(a) => Some(a),
            // A letter that does nothing here says so, instead of nothing happening.
            None if self.keymap.removed(key) => Some(Action::NotHere(format!(
                "{} writes, and {}",
                key.label(),
                keymap::READONLY
            ))),
            None if matches!(key, Key::Char(_) | Key::Ctrl(_)) => Some(Action::NotHere(format!(
                "unknown key {} — ? for help",
                key.label()
            ))),
            None => None,
        }
    }

    pub fn selected_node(&self) -> Option<&Node> {
        let data = self.data.as_ref()?;
        find(&data.analysis.tree, self.tree.state.selected())
    }

    /// The detail pane's first row for the current selection.
    pub fn detail_scroll(&self) -> usize {
        let (at, scroll) = &self.detail_scroll;
        if at.as_slice() == self.tree.state.selected() {
            *scroll
        } else {
            0
        }
    }

    /// Scrolls the detail pane by `by` rows, never past the row that fills its last line.
    pub(super) fn scroll_detail(&mut self, by: isize) {
        let Some(extent) = self.drawn.detail else {
            self.flash(
                Level::Warn,
                "no detail pane at this size: y shows the object",
            );
            return;
        };
        let at = self
            .detail_scroll()
            .saturating_add_signed(by)
            .min(extent.last_top());
        self.detail_scroll = (self.tree.state.selected().to_vec(), at);
    }

    /// The top-level node of the selection (a template, or the orphans group).
    pub(super) fn selected_root(&self) -> Option<&Node> {
        let data = self.data.as_ref()?;
        let first = self.tree.state.selected().first()?;
        find(&data.analysis.tree, std::slice::from_ref(first))
    }

    /// The time ages and countdowns are measured at: the loop's clock, else the data's.
    pub fn now(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.clock
            .or_else(|| self.data.as_ref().and_then(|d| d.snapshot.now))
    }

    /// What on screen moves with the clock, worded as the view words it (`words::age`,
    /// `words::seconds_until`): the connection's countdown or outage, the leader's ages.
    /// A tick that changes them asks for a redraw; one that does not draws nothing.
    pub(super) fn clock_words(&self) -> Vec<String> {
        let (Some(d), Some(now)) = (self.data.as_deref(), self.now()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some(at) = d.connecting.as_ref().and_then(|c| c.retry_at) {
            out.push(seconds_until(at, now).to_string());
        }
        if let Some((since, _)) = d.unreachable() {
            out.push(age(now - since));
        }
        let l = &d.live.lease;
        // The unresponsive leader's countdown (view.rs) ticks by itself: nothing else redraws it.
        if let (Some(until), false) = (l.unresponsive_until, l.vacant) {
            out.push(seconds_until(until, now).to_string());
            out.push(age(now - until));
        }
        if d.running() && l.unreadable.is_none() && !l.vacant {
            out.extend(
                [l.since, d.leader_last_sync()]
                    .into_iter()
                    .flatten()
                    .map(|t| age(now - t)),
            );
        }
        out
    }

    /// A flash from the UI itself: only errors go to the event log.
    pub(super) fn flash(&mut self, level: Level, text: impl Into<String>) {
        let text = text.into();
        if level == Level::Error {
            self.log_local(level, text.clone());
        }
        self.show(level, text);
    }

    /// Shows `text` in the status line, not logged: errors until the next key, the rest for
    /// [`FLASH_TTL`].
    pub(super) fn show(&mut self, level: Level, text: String) {
        self.flash = Some(Flash {
            level,
            text,
            at: Instant::now(),
        });
    }

    pub(super) fn log_local(&mut self, level: Level, text: String) {
        self.log_line(EventLine::own(level, text));
    }

    /// Appends to the event log, dropping its oldest line past [`LOG_CAP`].
    pub(super) fn log_line(&mut self, line: EventLine) {
        if self.log.len() == LOG_CAP {
            self.log.pop_front();
        }
        self.log.push_back(line);
    }

    /// A line the controller told: logged, unless it reports a request's outcome whose
    /// answer said it already.
    pub(super) fn told(&mut self, line: EventLine) {
        let new = match line.request() {
            Some(id) => self.said(id, Said::Event),
            None => true,
        };
        if new {
            self.log_line(line);
        }
    }

    /// Whether a request's outcome, reported by `side`, is new to the log. The answer to a
    /// request and the handler's Event about it say the same: the first to arrive is logged
    /// and the other is not. The answer comes even when Events cannot be read, the Event
    /// even when the answer timed out, so the outcome is always said — once. They are paired
    /// by the request's id, so the same outcome twice (`p` pressed twice) is two lines.
    pub(super) fn said(&mut self, id: &str, side: Said) -> bool {
        if let Some(i) = self
            .unpaired
            .iter()
            .position(|(k, s)| k == id && *s != side)
        {
            self.unpaired.remove(i);
            return false;
        }
        self.unpaired.push_back((id.to_string(), side));
        while self.unpaired.len() > UNPAIRED_CAP {
            self.unpaired.pop_front();
        }
        true
    }

    pub(super) fn rebuild(&mut self) {
        self.tree.rebuild(&self.filter);
    }

    pub(super) fn open_doc(&mut self, kind: DocKind) {
        let Some(node) = self.selected_node() else {
            self.flash(Level::Warn, "nothing selected");
            return;
        };
        let Some(data) = self.data.clone() else {
            return;
        };
        let (title, lines) = match kind {
            DocKind::Yaml => detail::yaml(&data, node),
            DocKind::Diff => detail::diff(&data, node),
        };
        self.doc = Some(Doc {
            kind,
            title,
            lines,
            scroll: 0,
        });
        self.screen = Screen::Doc;
    }

    pub(super) fn set_data(&mut self, data: Arc<Data>) {
        // Another live session (`:ctx`, a restart): what the old cluster said is not this one's.
        if self
            .data
            .as_ref()
            .is_some_and(|d| d.session != data.session)
        {
            self.new_session();
        }
        // "loaded" only once every list has finished (a partial tree is no summary), and not
        // for a cluster that could not be read at all, nor one read only in part: what
        // could not be read says more than counts that would look healthy.
        let settled = match data.origin {
            Origin::Offline { .. } => true,
            Origin::Live { .. } => {
                data.running() && data.live.synced && data.unreachable().is_none()
            }
        };
        let first = !self.announced
            && settled
            && (data.snapshot.object_count() > 0
                || !data.live.access_errors.iter().any(is_tree_resource));
        self.tree.set_tree(&data.analysis, &self.filter);
        self.data = Some(data.clone());
        self.show_violations();
        if first {
            self.announced = true;
            // "connecting…" and the like are over.
            if self.flash.as_ref().is_some_and(|f| f.level != Level::Error) {
                self.flash = None;
            }
            let s = &data.summary;
            self.log_local(
                Level::Info,
                format!(
                    "loaded {}: {}, {}, {}, {}",
                    count(data.snapshot.object_count(), "object", "objects"),
                    count(s.errors, "error", "errors"),
                    count(s.warnings, "warning", "warnings"),
                    count(s.infos, "info", "infos"),
                    count(data.analysis.plan.len(), "planned write", "planned writes"),
                ),
            );
        }
        // A document on screen follows the data.
        if let Some(kind) = self.doc.as_ref().map(|d| d.kind) {
            let scroll = self.doc.as_ref().map_or(0, |d| d.scroll);
            self.open_doc(kind);
            if let Some(d) = &mut self.doc {
                d.scroll = scroll;
            }
        }
    }

    /// Forgets what belonged to the previous live session: its audit results, the documents
    /// and questions about its objects; "loaded" is said again for the new one.
    pub(super) fn new_session(&mut self) {
        self.violations = super::violations::Store::default();
        self.announced = false;
        if matches!(
            self.mode,
            Mode::Confirm(_)
                | Mode::Prompt(Prompt {
                    kind: PromptKind::TestPath,
                    ..
                })
        ) {
            self.mode = Mode::Normal;
        }
        if self.screen == Screen::Doc {
            self.screen = Screen::Main;
            self.doc = None;
        }
    }

    /// The kept audit results on the tree, stale ones marked against the current snapshot.
    pub(super) fn show_violations(&mut self) {
        if let Some(d) = &self.data {
            let badges = self.violations.badges(&d.snapshot);
            self.tree.set_badges(badges, &self.filter);
        }
    }

    /// Why no write can run now (read-only, offline, not connected yet).
    pub fn write_refusal(&self) -> Option<String> {
        if self.keymap.readonly() {
            return Some(keymap::READONLY.to_string());
        }
        match &self.data {
            None => Some("no data yet".to_string()),
            Some(d) => d.write_refusal(),
        }
    }

    /// What `a` audits: the selected constraint (`Kind/name`), else the selection's template.
    pub(super) fn audit_target(&self) -> Result<String, String> {
        match self.data.as_ref().map(|d| &d.origin) {
            Some(Origin::Live { .. }) => {}
            _ => return Err("audit needs a cluster: it dry-runs existing objects".into()),
        }
        // The selected constraint, or the constraint of the selected binding (its parent).
        let path = self.tree.state.selected();
        let at = |depth: usize| {
            let d = self.data.as_deref()?;
            find(
                &d.analysis.tree,
                path.get(..depth).filter(|p| !p.is_empty())?,
            )
        };
        let constraint = [path.len(), path.len().saturating_sub(1)]
            .into_iter()
            .filter_map(at)
            .find_map(|n| crate::core::tree::constraint_of_node(&n.id));
        if let Some(constraint) = constraint {
            // As `kubectl vap audit Kind/name` takes it.
            return Ok(constraint.to_string());
        }
        match self.selected_root() {
            Some(root) if root.kind == NodeKind::Template => Ok(root.label.clone()),
            _ => Err("audit works on a template or a constraint: select one".into()),
        }
    }

    /// The write `p`/`r`/`R` stand for, or why there is none.
    pub(super) fn write_for(&self, action: &Action) -> Result<WriteCommand, String> {
        if let Action::ReconcileAll = action {
            return Ok(WriteCommand::ReconcileAll);
        }
        let root = self.selected_root().ok_or("nothing selected")?;
        if root.kind != NodeKind::Template {
            return Err(match action {
                Action::Replay => "replay works on a template: select one".into(),
                _ => "orphans belong to no template: R (reconcile all) sweeps them".into(),
            });
        }
        Ok(match action {
            Action::Replay => WriteCommand::Replay(root.label.clone()),
            _ => WriteCommand::Reconcile(root.label.clone()),
        })
    }

    /// Scrolls the screen's document, never past [`Extent::last_top`] of the last frame's
    /// measure of the screen (not drawn yet: unbounded; the view keeps what it draws in
    /// bounds).
    pub(super) fn scroll(&mut self, f: impl Fn(usize, usize) -> usize) {
        let drawn = match self.screen {
            Screen::Doc => self.drawn.doc,
            Screen::Help => self.drawn.help,
            Screen::Events => self.drawn.events,
            Screen::Main => return,
        };
        let unbounded = Extent {
            rows: 0,
            len: usize::MAX,
        };
        let extent = drawn.unwrap_or(unbounded);
        let max = extent.last_top();
        let page = extent.rows.max(1);
        let bounded = |at: usize| f(at, page).min(max);
        match self.screen {
            Screen::Doc => {
                if let Some(d) = &mut self.doc {
                    d.scroll = bounded(d.scroll);
                }
            }
            Screen::Help => self.help_scroll = bounded(self.help_scroll),
            Screen::Events => {
                let at = bounded(self.log_scroll.unwrap_or(max));
                // At the end again: follow new lines.
                self.log_scroll = (at < max).then_some(at);
            }
            Screen::Main => {}
        }
    }

    /// What `c` copies: the document on screen, else the selected object's name.
    pub(super) fn copy_text(&self) -> Option<(String, String)> {
        if self.screen == Screen::Doc
            && let Some(d) = &self.doc
        {
            let text: Vec<String> = d.lines.iter().map(ToString::to_string).collect();
            return Some((d.title.clone(), text.join("\n") + "\n"));
        }
        let node = self.selected_node()?;
        let name = node
            .object
            .as_ref()
            .map_or_else(|| node.label.clone(), |o| o.name.clone());
        Some((name.clone(), name))
    }

    /// Orders the tree. By state, the worst row comes first and is selected (in sight at the
    /// top, its position 1 in the title): that is what the order was asked for; by name,
    /// the selection stays and is scrolled into view.
    pub(super) fn sort_by(&mut self, by: SortBy) {
        self.filter.sort = by;
        self.rebuild();
        let text = match by {
            SortBy::State => {
                // Not `select_first`: it picks the first row of the last frame, drawn in the
                // old order.
                if let Some(first) = self.tree.items.first() {
                    self.tree.state.select(vec![*first.identifier()]);
                }
                "sorted by state: the worst first, selected".to_string()
            }
            SortBy::Name => format!("sorted by {}", by.as_str()),
        };
        self.flash(Level::Info, text);
    }

    /// Runs a `:` command (k9s grammar).
    pub(super) fn run_command(&mut self, line: &str) -> Option<Action> {
        let mut words = line.split_whitespace();
        let verb = words.next()?;
        let arg = words.next();
        match (verb, arg) {
            ("q" | "q!" | "quit" | "exit", _) => return Some(Action::Quit),
            ("help" | "h" | "?", _) => {
                self.screen = Screen::Help;
                self.help_scroll = 0;
            }
            ("events" | "ev" | "log", _) => {
                self.screen = Screen::Events;
                self.log_scroll = None;
            }
            ("sort", Some(by @ ("name" | "state"))) => {
                self.sort_by(if by == "name" {
                    SortBy::Name
                } else {
                    SortBy::State
                });
            }
            ("ctx" | "context", name) => return self.context_command(name),
            _ => self.flash(
                Level::Warn,
                format!(":{line}: unknown command — :help lists the keys; commands are :q, :help, :events, :sort name|state, :ctx [NAME]"),
            ),
        }
        None
    }

    /// `:ctx` lists the kubeconfig's contexts; `:ctx NAME` switches to one.
    pub(super) fn context_command(&mut self, name: Option<&str>) -> Option<Action> {
        let Some(data) = self.data.clone() else {
            self.flash(Level::Warn, "no data yet: the live view is starting");
            return None;
        };
        if let Origin::Offline { .. } = data.origin {
            self.flash(
                Level::Warn,
                "offline snapshot (-f): there is no context to switch",
            );
            return None;
        }
        let names = &data.contexts;
        if names.is_empty() {
            self.flash(
                Level::Warn,
                "no contexts: the kubeconfig could not be read (the log says why)",
            );
            return None;
        }
        match name {
            None => {
                let current = data.context.clone();
                self.mode = Mode::Picker(Picker {
                    selected: names.iter().position(|n| *n == current).unwrap_or(0),
                    names: names.clone(),
                    current,
                });
                None
            }
            Some(name) if names.iter().any(|n| n == name) => Some(switch_context(name.to_string())),
            Some(name) => {
                let close = contexts::matches(names, name);
                let hint = match close.as_slice() {
                    [] => "; :ctx lists them".to_string(),
                    [one] => format!(" — did you mean {one}?"),
                    many => format!(
                        " — did you mean one of {}?",
                        many.iter().take(4).copied().collect::<Vec<_>>().join(", ")
                    ),
                };
                self.flash(
                    Level::Warn,
                    format!("no context {name:?} in the kubeconfig{hint}"),
                );
                None
            }
        }
    }

    /// What tab makes of the command line typed so far: a command's name, or the context
    /// `:ctx` names.
    pub(super) fn completion(&self, line: &str) -> Option<String> {
        const VERBS: [&str; 5] = ["ctx", "events", "help", "q", "sort"];
        match line.split_once(' ') {
            Some((verb @ ("ctx" | "context"), arg)) => {
                let names = &self.data.as_ref()?.contexts;
                let arg = arg.trim_start();
                contexts::complete(names, arg).map(|c| format!("{verb} {c}"))
            }
            Some(("sort", arg)) => ["name", "state"]
                .iter()
                .find(|w| w.starts_with(arg.trim_start()))
                .map(|w| format!("sort {w}")),
            Some(_) => None,
            None => {
                let mut found = VERBS.iter().filter(|v| v.starts_with(line));
                match (found.next(), found.next()) {
                    (Some(v), None) => Some(format!("{v} ")),
                    _ => None,
                }
            }
        }
    }

    /// Contexts that the `:ctx` argument typed so far could be (for the prompt's hint).
    pub fn context_suggestions(&self) -> Vec<&str> {
        let (Mode::Prompt(p), Some(data)) = (&self.mode, self.data.as_ref()) else {
            return Vec::new();
        };
        if p.kind != PromptKind::Command {
            return Vec::new();
        }
        match p.line.trim_start_matches(':').split_once(' ') {
            Some(("ctx" | "context", arg)) => contexts::matches(&data.contexts, arg.trim()),
            _ => Vec::new(),
        }
    }
}

/// Hands a switch to the source (the header and tree follow once it has switched).
pub(super) fn switch_context(name: String) -> Action {
    Action::Execute(WriteCommand::SwitchContext(name))
}
