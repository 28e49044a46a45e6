//! `update`: the one place the state changes, one function per concern, and `dispatch`,
//! which runs an action and what it leads to. `update` does no IO; a confirmed write comes
//! back as `Action::Execute`, which the runtime hands to the data source.

use super::action::{Action, Level, WriteCommand};
use super::app::{App, DocKind, FLASH_TTL, Mode, Prompt, PromptKind, Said, switch_context};
use super::data::{EventLine, Origin};
use super::keymap::Screen;
use super::tree_view::Filter;
use crate::tui::say::words::count;

/// The one place the state changes: each concern has its own function below.
pub fn update(app: &mut App, action: Action) -> Option<Action> {
    // Any key clears a stale flash (errors stay until then).
    if !matches!(
        action,
        Action::Tick(_)
            | Action::Data(_)
            | Action::Happened(_)
            | Action::Logged(_)
            | Action::Audited(_)
            | Action::Progress { .. }
            | Action::Resize(..)
            | Action::Flash(..)
            | Action::Answer(..)
    ) {
        app.flash = None;
    }
    match action {
        Action::Quit => {
            app.quit = true;
            None
        }
        Action::NotHere(why) => {
            app.flash(Level::Warn, why);
            None
        }
        a @ (Action::StartCommand
        | Action::StartFilter
        | Action::TestFile
        | Action::PromptPush(_)
        | Action::PromptPop
        | Action::PromptComplete
        | Action::PromptCancel
        | Action::PromptDone) => on_prompt(app, a),
        a @ (Action::PickerMove(_) | Action::PickerDone | Action::PickerCancel) => {
            on_picker(app, a)
        }
        a @ (Action::FaultsOnly | Action::Sort) => {
            on_filter(app, a);
            None
        }
        a @ (Action::Help
        | Action::Events
        | Action::Back
        | Action::Yaml
        | Action::Diff
        | Action::Wrap
        | Action::Copy) => {
            on_view(app, a);
            None
        }
        a @ (Action::Up
        | Action::Down
        | Action::Left
        | Action::Right
        | Action::Enter
        | Action::PageUp
        | Action::PageDown
        | Action::First
        | Action::Last
        | Action::DetailDown
        | Action::DetailUp) => {
            on_move(app, a);
            None
        }
        Action::Audit => on_audit(app),
        a @ (Action::Replay
        | Action::Reconcile
        | Action::ReconcileAll
        | Action::Ask(_)
        | Action::ConfirmYes
        | Action::ConfirmNo
        | Action::Execute(_)) => on_write(app, a),
        a @ (Action::Data(_)
        | Action::Happened(_)
        | Action::Logged(_)
        | Action::Flash(..)
        | Action::Answer(..)
        | Action::Audited(_)
        | Action::Progress { .. }
        | Action::Resize(..)
        | Action::Tick(_)) => {
            on_outside(app, a);
            None
        }
    }
}

/// The line being typed — the filter (`/`, applied as it is typed), the path `t` tests, a
/// `:` command (tab completes it) — and what enter does with it.
fn on_prompt(app: &mut App, action: Action) -> Option<Action> {
    let start = |kind| {
        Mode::Prompt(Prompt {
            kind,
            line: String::new(),
        })
    };
    match action {
        Action::StartCommand => app.mode = start(PromptKind::Command),
        Action::StartFilter => {
            app.mode = Mode::Prompt(Prompt {
                kind: PromptKind::Filter,
                line: app.filter.text.clone(),
            })
        }
        Action::TestFile => match app.data.as_ref().map(|d| &d.origin) {
            Some(Origin::Live { .. }) => app.mode = start(PromptKind::TestPath),
            _ => app.flash(
                Level::Error,
                "test needs a cluster: kubectl vap test --offline -f explains offline",
            ),
        },
        _ => return typed(app, action),
    }
    None
}

/// A key while a line is typed.
fn typed(app: &mut App, action: Action) -> Option<Action> {
    let Mode::Prompt(Prompt { kind, line }) = &app.mode else {
        return None;
    };
    let (kind, mut line) = (*kind, line.clone());
    match action {
        Action::PromptPush(c) => line.push(c),
        Action::PromptPop => {
            line.pop();
        }
        Action::PromptComplete => {
            if let Some(done) = app.completion(&line) {
                line = done;
            }
        }
        Action::PromptCancel => {
            app.mode = Mode::Normal;
            if kind == PromptKind::Filter {
                app.filter.text.clear();
                app.rebuild();
            }
            return None;
        }
        Action::PromptDone => {
            app.mode = Mode::Normal;
            return done(app, kind, line.trim().to_string());
        }
        _ => return None,
    }
    // Typing filters as it goes.
    if kind == PromptKind::Filter {
        app.filter.text.clone_from(&line);
        app.rebuild();
    }
    app.mode = Mode::Prompt(Prompt { kind, line });
    None
}

/// Enter on a typed line.
fn done(app: &mut App, kind: PromptKind, line: String) -> Option<Action> {
    match kind {
        PromptKind::Filter => {
            if app.filter.is_active() && app.tree.shown == 0 {
                app.flash(
                    Level::Warn,
                    format!("nothing matches {:?}", app.filter.text),
                );
            }
            None
        }
        PromptKind::TestPath if line.is_empty() => {
            app.flash(Level::Info, "no file given: nothing tested");
            None
        }
        PromptKind::TestPath => Some(Action::Execute(WriteCommand::Test(line))),
        PromptKind::Command => app.run_command(line.trim_start_matches(':')),
    }
}

/// The context list `:ctx` opened.
fn on_picker(app: &mut App, action: Action) -> Option<Action> {
    let Mode::Picker(picker) = &mut app.mode else {
        return None;
    };
    match action {
        Action::PickerMove(by) => {
            let last = picker.names.len().saturating_sub(1);
            picker.selected = picker.selected.saturating_add_signed(by).min(last);
        }
        Action::PickerDone => {
            let name = picker.names.get(picker.selected).cloned();
            app.mode = Mode::Normal;
            return name.map(switch_context);
        }
        Action::PickerCancel => app.mode = Mode::Normal,
        _ => {}
    }
    None
}

/// What the tree shows besides the filter typed with `/`: faults only, the order.
fn on_filter(app: &mut App, action: Action) {
    match action {
        Action::FaultsOnly => {
            app.filter.faults_only = !app.filter.faults_only;
            app.rebuild();
            let text = if app.filter.faults_only {
                format!(
                    "faults only: {} shown",
                    count(app.tree.shown, "node", "nodes")
                )
            } else {
                "showing everything".to_string()
            };
            app.flash(Level::Info, text);
        }
        Action::Sort => {
            let by = app.filter.sort.next();
            app.sort_by(by);
        }
        _ => {}
    }
}

/// Which screen is shown (help, events, YAML, diff, back) and how (wrap), and copying it.
fn on_view(app: &mut App, action: Action) {
    match action {
        Action::Help => {
            app.screen = if app.screen == Screen::Help {
                Screen::Main
            } else {
                Screen::Help
            };
            app.help_scroll = 0;
        }
        Action::Events => {
            app.screen = if app.screen == Screen::Events {
                Screen::Main
            } else {
                Screen::Events
            };
            app.log_scroll = None;
        }
        Action::Back => match app.screen {
            Screen::Doc | Screen::Help | Screen::Events => {
                app.screen = Screen::Main;
                app.doc = None;
            }
            Screen::Main if app.filter.is_active() => {
                // The order is a preference, not a filter: it stays.
                app.filter = Filter {
                    sort: app.filter.sort,
                    ..Filter::default()
                };
                app.rebuild();
                app.flash(Level::Info, "filter cleared");
            }
            Screen::Main => {}
        },
        Action::Yaml | Action::Diff => {
            let kind = if matches!(action, Action::Yaml) {
                DocKind::Yaml
            } else {
                DocKind::Diff
            };
            if app.screen == Screen::Doc && app.doc.as_ref().is_some_and(|d| d.kind == kind) {
                app.screen = Screen::Main;
                app.doc = None;
            } else {
                app.open_doc(kind);
            }
        }
        Action::Wrap => {
            // The same lines take more or fewer rows: the next frame keeps the scroll in
            // bounds.
            app.wrap = !app.wrap;
            app.flash(
                Level::Info,
                if app.wrap {
                    "wrapping long lines"
                } else {
                    "long lines cut (w wraps)"
                },
            );
        }
        Action::Copy => match app.copy_text() {
            Some((what, text)) => {
                app.copy = Some(text);
                app.flash(
                    Level::Info,
                    format!("copied {what} to the clipboard (OSC 52: the terminal must allow it)"),
                );
            }
            None => app.flash(Level::Warn, "nothing selected to copy"),
        },
        _ => {}
    }
}

/// Moving: the tree's selection on the main screen, scrolling elsewhere.
fn on_move(app: &mut App, action: Action) {
    match action {
        Action::DetailDown => return app.scroll_detail(1),
        Action::DetailUp => return app.scroll_detail(-1),
        _ => {}
    }
    if app.screen != Screen::Main {
        match action {
            Action::Up => app.scroll(|s, _| s.saturating_sub(1)),
            Action::Down => app.scroll(|s, _| s + 1),
            Action::PageUp => app.scroll(|s, p| s.saturating_sub(p)),
            Action::PageDown => app.scroll(|s, p| s + p),
            Action::First => app.scroll(|_, _| 0),
            Action::Last => app.scroll(|_, _| usize::MAX),
            // Expanding means nothing off the tree.
            _ => {}
        }
        return;
    }
    let page = app.page;
    let state = &mut app.tree.state;
    match action {
        Action::Up => {
            state.key_up();
        }
        Action::Down => {
            state.key_down();
        }
        Action::PageUp => {
            state.select_relative(|c| c.unwrap_or(0).saturating_sub(page));
        }
        Action::PageDown => {
            state.select_relative(|c| c.unwrap_or(0) + page);
        }
        Action::First => {
            state.select_first();
        }
        Action::Last => {
            state.select_last();
        }
        Action::Enter | Action::Left | Action::Right => {
            let before = state.opened().clone();
            match action {
                Action::Enter => state.toggle_selected(),
                Action::Left => state.key_left(),
                _ => state.key_right(),
            };
            app.tree.refresh_open(&app.filter, &before);
        }
        _ => {}
    }
}

/// `a`: the audit of the selection, run against the cluster (dry-runs only).
fn on_audit(app: &mut App) -> Option<Action> {
    match app.audit_target() {
        Ok(target) => {
            if let Some(d) = &app.data {
                app.violations.begin(&target, &d.snapshot);
            }
            Some(Action::Execute(WriteCommand::Audit(target)))
        }
        Err(why) => {
            app.flash(Level::Error, why);
            None
        }
    }
}

/// The writes (replay, reconcile): refused or asked about, confirmed, handed on.
fn on_write(app: &mut App, action: Action) -> Option<Action> {
    match action {
        Action::Replay | Action::Reconcile | Action::ReconcileAll => {
            // Why it cannot run at all comes first, then what the selection allows.
            if let Some(why) = app.write_refusal() {
                app.flash(Level::Error, why);
            } else {
                match app.write_for(&action) {
                    Ok(cmd) => return Some(Action::Ask(cmd)),
                    Err(why) => app.flash(Level::Warn, why),
                }
            }
        }
        Action::Ask(cmd) => match app.write_refusal() {
            Some(why) => app.flash(Level::Error, why),
            None => app.mode = Mode::Confirm(cmd),
        },
        Action::ConfirmYes | Action::ConfirmNo => {
            let asked = std::mem::take(&mut app.mode);
            match (asked, action) {
                (Mode::Confirm(cmd), Action::ConfirmYes) => return Some(Action::Execute(cmd)),
                (Mode::Confirm(_), _) => app.flash(Level::Info, "cancelled"),
                (other, _) => app.mode = other,
            }
        }
        Action::Execute(cmd) => {
            // Reaches `update` only when no source can carry it out.
            app.flash(Level::Error, format!("cannot run `{}` here", cmd.cli()));
        }
        _ => {}
    }
    None
}

/// What comes from outside the keyboard: data, messages, audit results, the terminal's size,
/// the clock.
fn on_outside(app: &mut App, action: Action) {
    match action {
        Action::Data(d) => app.set_data(d),
        Action::Happened(h) => app.told(EventLine::Happened(h)),
        Action::Logged(line) => app.told(line),
        Action::Audited(report) => {
            if let Some(d) = &app.data {
                app.violations.record(&report, &d.snapshot);
            }
            app.show_violations();
        }
        Action::Progress { what, done, total } => {
            app.flash(Level::Info, format!("{what}: {done}/{total} dry-runs"));
        }
        Action::Flash(level, text) => {
            // From a source or a command: an outcome worth keeping in the log.
            app.log_local(level, text.clone());
            app.show(level, text);
        }
        Action::Answer(level, text, id) => {
            // Logged unless the handler's line said it already.
            if id.as_deref().is_none_or(|id| app.said(id, Said::Answer)) {
                app.log_local(level, text.clone());
            }
            app.show(level, text);
        }
        // The next frame is drawn at the new size, and measures what scrolling needs.
        Action::Resize(..) => {}
        Action::Tick(now) => {
            // Ages and countdowns on screen move with the clock: redraw when their words do.
            let before = app.clock_words();
            app.clock = Some(now);
            app.redraw |= app.clock_words() != before;
            if app
                .flash
                .as_ref()
                .is_some_and(|f| f.level != Level::Error && f.at.elapsed() > FLASH_TTL)
            {
                app.flash = None;
            }
        }
        _ => {}
    }
}

/// Runs an action and everything it leads to. `execute` carries out confirmed writes (the
/// runtime passes the source; tests may pass a recorder).
pub fn dispatch(
    app: &mut App,
    action: Action,
    execute: &mut dyn FnMut(WriteCommand) -> Option<Action>,
) {
    let mut next = Some(action);
    // A chain is short (key → ask → confirm → execute → flash); the bound is a safety net.
    for _ in 0..16 {
        let Some(a) = next.take() else { break };
        next = match a {
            Action::Execute(cmd) => execute(cmd),
            a => update(app, a),
        };
    }
}
