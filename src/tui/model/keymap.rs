//! The one keymap table. The hint bar, the help screen and key handling all read it, and
//! `--readonly` removes the write actions from it, so a key that is not shown does nothing.

use super::action::Action;
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// A key as the table spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Ctrl(char),
    Esc,
    Enter,
    Up,
    Down,
    Left,
    Right,
    PageUp,
    PageDown,
    Home,
    End,
}

impl Key {
    pub fn from_event(ev: &KeyEvent) -> Option<Key> {
        if ev.kind == KeyEventKind::Release {
            return None;
        }
        Some(match ev.code {
            KeyCode::Char(c) if ev.modifiers.contains(KeyModifiers::CONTROL) => {
                Key::Ctrl(c.to_ascii_lowercase())
            }
            KeyCode::Char(c) => Key::Char(c),
            KeyCode::Esc => Key::Esc,
            KeyCode::Enter => Key::Enter,
            KeyCode::Up => Key::Up,
            KeyCode::Down => Key::Down,
            KeyCode::Left => Key::Left,
            KeyCode::Right => Key::Right,
            KeyCode::PageUp => Key::PageUp,
            KeyCode::PageDown => Key::PageDown,
            KeyCode::Home => Key::Home,
            KeyCode::End => Key::End,
            _ => return None,
        })
    }

    pub fn label(self) -> String {
        match self {
            Key::Char(c) => c.to_string(),
            Key::Ctrl(c) => format!("ctrl-{c}"),
            Key::Esc => "esc".into(),
            Key::Enter => "enter".into(),
            Key::Up => "↑".into(),
            Key::Down => "↓".into(),
            Key::Left => "←".into(),
            Key::Right => "→".into(),
            Key::PageUp => "pgup".into(),
            Key::PageDown => "pgdn".into(),
            Key::Home => "home".into(),
            Key::End => "end".into(),
        }
    }
}

/// Which screen a key works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screen {
    /// The tree and the detail pane.
    Main,
    /// A full-screen document: YAML or diff.
    Doc,
    Help,
    /// The event log, full-screen.
    Events,
}

const MAIN: &[Screen] = &[Screen::Main];
const ALL: &[Screen] = &[Screen::Main, Screen::Doc, Screen::Help, Screen::Events];
const MAIN_DOC: &[Screen] = &[Screen::Main, Screen::Doc];
const DOC: &[Screen] = &[Screen::Doc];
const MAIN_EVENTS: &[Screen] = &[Screen::Main, Screen::Events];
const BACK: &[Screen] = &[Screen::Doc, Screen::Help, Screen::Events, Screen::Main];

pub struct Entry {
    pub keys: &'static [Key],
    pub action: Action,
    /// The word in the hint bar; `None`: listed in help only.
    pub hint: Option<&'static str>,
    pub help: &'static str,
    /// A write action: asks for confirmation, and `--readonly` removes it.
    pub write: bool,
    pub screens: &'static [Screen],
}

/// THE table.
pub static TABLE: &[Entry] = &[
    Entry {
        keys: &[Key::Char('?')],
        action: Action::Help,
        hint: Some("help"),
        help: "show or hide this help",
        write: false,
        screens: ALL,
    },
    Entry {
        keys: &[Key::Char('/')],
        action: Action::StartFilter,
        hint: Some("filter"),
        help: "filter the tree by name or state (e.g. `missing`, `k8srequired`); enter keeps it, esc clears it",
        write: false,
        screens: MAIN,
    },
    Entry {
        keys: &[Key::Esc],
        action: Action::Back,
        hint: Some("back"),
        help: "back: close the view, or clear the filter and faults-only",
        write: false,
        screens: BACK,
    },
    Entry {
        keys: &[Key::Enter],
        action: Action::Enter,
        hint: Some("expand"),
        help: "expand or collapse the selected node",
        write: false,
        screens: MAIN,
    },
    // Shift and the move keys: the same motion in the other pane. Not ctrl-d/ctrl-u, which
    // k9s users know as delete; pgup/pgdn page the tree.
    Entry {
        keys: &[Key::Char('J')],
        action: Action::DetailDown,
        hint: Some("detail"),
        help: "scroll the detail pane down (its title shows the rows in sight)",
        write: false,
        screens: MAIN,
    },
    Entry {
        keys: &[Key::Char('K')],
        action: Action::DetailUp,
        hint: Some("detail"),
        help: "scroll the detail pane up",
        write: false,
        screens: MAIN,
    },
    Entry {
        keys: &[Key::Char('y')],
        action: Action::Yaml,
        hint: Some("yaml"),
        help: "the selected object as YAML (as read from the cluster or the files)",
        write: false,
        screens: MAIN_DOC,
    },
    Entry {
        keys: &[Key::Char('d')],
        action: Action::Diff,
        hint: Some("diff"),
        help: "diff live vs desired: the writes planned for the selection, or \"in sync\"",
        write: false,
        screens: MAIN_DOC,
    },
    Entry {
        keys: &[Key::Char('f')],
        action: Action::FaultsOnly,
        hint: Some("faults"),
        help: "show faults only (error, missing, out-of-sync, dangling, foreign, or an error or warning finding) and their parents",
        write: false,
        screens: MAIN,
    },
    Entry {
        keys: &[Key::Char('e')],
        action: Action::Events,
        hint: Some("events"),
        help: "the event log full-screen (scrolls; esc or e closes)",
        write: false,
        screens: MAIN_EVENTS,
    },
    Entry {
        keys: &[Key::Char('w')],
        action: Action::Wrap,
        hint: Some("wrap"),
        help: "wrap long lines in YAML and diff, or cut them",
        write: false,
        screens: DOC,
    },
    Entry {
        keys: &[Key::Char('s')],
        action: Action::Sort,
        hint: None,
        help: "sort the tree by name or by worst state (stays between refreshes)",
        write: false,
        screens: MAIN,
    },
    Entry {
        keys: &[Key::Char('c')],
        action: Action::Copy,
        hint: None,
        help: "copy the selected name, or the YAML or diff on screen, to the clipboard (OSC 52)",
        write: false,
        screens: MAIN_DOC,
    },
    Entry {
        keys: &[Key::Char(':')],
        action: Action::StartCommand,
        hint: None,
        help: "command: :q, :help, :events, :sort name|state, :ctx (list contexts), :ctx NAME (switch); tab completes",
        write: false,
        screens: ALL,
    },
    Entry {
        keys: &[Key::Char('a')],
        action: Action::Audit,
        hint: None,
        help: "audit the selected template or constraint: dry-runs, violations in the event log (live)",
        write: false,
        screens: MAIN,
    },
    Entry {
        keys: &[Key::Char('t')],
        action: Action::TestFile,
        hint: None,
        help: "test a file: its objects dry-run through admission, verdicts in the event log (live)",
        write: false,
        screens: MAIN,
    },
    Entry {
        keys: &[Key::Char('p')],
        action: Action::Replay,
        hint: Some("replay"),
        help: "replay the selected template's constraints (asks first; done by the lease holder)",
        write: true,
        screens: MAIN,
    },
    Entry {
        keys: &[Key::Char('r')],
        action: Action::Reconcile,
        hint: Some("reconcile"),
        help: "reconcile the selected template: its VAP and bindings (asks first; done by the lease holder)",
        write: true,
        screens: MAIN,
    },
    Entry {
        keys: &[Key::Char('R')],
        action: Action::ReconcileAll,
        hint: Some("reconcile all"),
        help: "reconcile everything, orphans included (asks first; done by the lease holder)",
        write: true,
        screens: MAIN,
    },
    Entry {
        keys: &[Key::Char('q'), Key::Ctrl('c')],
        action: Action::Quit,
        hint: Some("quit"),
        help: "quit (stops the embedded reconciler and releases the lease)",
        write: false,
        screens: ALL,
    },
    Entry {
        keys: &[Key::Up, Key::Char('k')],
        action: Action::Up,
        hint: None,
        help: "move up (scroll in a view)",
        write: false,
        screens: ALL,
    },
    Entry {
        keys: &[Key::Down, Key::Char('j')],
        action: Action::Down,
        hint: None,
        help: "move down (scroll in a view)",
        write: false,
        screens: ALL,
    },
    Entry {
        keys: &[Key::Left, Key::Char('h')],
        action: Action::Left,
        hint: None,
        help: "collapse, or go to the parent",
        write: false,
        screens: MAIN,
    },
    Entry {
        keys: &[Key::Right, Key::Char('l')],
        action: Action::Right,
        hint: None,
        help: "expand",
        write: false,
        screens: MAIN,
    },
    Entry {
        keys: &[Key::PageUp],
        action: Action::PageUp,
        hint: None,
        help: "page up",
        write: false,
        screens: ALL,
    },
    Entry {
        keys: &[Key::PageDown],
        action: Action::PageDown,
        hint: None,
        help: "page down",
        write: false,
        screens: ALL,
    },
    Entry {
        keys: &[Key::Home, Key::Char('g')],
        action: Action::First,
        hint: None,
        help: "first line",
        write: false,
        screens: ALL,
    },
    Entry {
        keys: &[Key::End, Key::Char('G')],
        action: Action::Last,
        hint: None,
        help: "last line",
        write: false,
        screens: ALL,
    },
];

/// Why `--readonly` refuses a write: one text for a removed key, a refused action and the help.
pub const READONLY: &str = "this copy is read-only (--readonly): replay and reconcile are off";

/// The table as this session uses it: with or without the write actions.
#[derive(Debug, Clone)]
pub struct Keymap {
    readonly: bool,
}

impl Keymap {
    pub fn new(readonly: bool) -> Self {
        Keymap { readonly }
    }

    pub fn readonly(&self) -> bool {
        self.readonly
    }

    /// The entries in effect, in table order.
    pub fn entries(&self) -> impl Iterator<Item = &'static Entry> + '_ {
        TABLE.iter().filter(move |e| !(self.readonly && e.write))
    }

    pub fn lookup(&self, screen: Screen, key: Key) -> Option<Action> {
        self.entries()
            .find(|e| e.screens.contains(&screen) && e.keys.contains(&key))
            .map(|e| e.action.clone())
    }

    /// A write key that `--readonly` took away.
    pub fn removed(&self, key: Key) -> bool {
        self.readonly && TABLE.iter().any(|e| e.write && e.keys.contains(&key))
    }

    /// `(keys, word)` pairs for the hint bar of a screen.
    pub fn hints(&self, screen: Screen) -> Vec<(String, &'static str)> {
        self.hint_groups(screen)
            .into_iter()
            .map(|(keys, e)| (keys, e.hint.unwrap_or_default()))
            .collect()
    }

    /// The entries the hint bar of a screen shows, in table order.
    pub fn hint_entries(&self, screen: Screen) -> impl Iterator<Item = &'static Entry> + '_ {
        self.entries()
            .filter(move |e| e.screens.contains(&screen) && e.hint.is_some())
    }

    /// The hint bar's items: neighbours with the same word share one (`J/K detail`), with
    /// their keys joined; each with its first entry.
    pub fn hint_groups(&self, screen: Screen) -> Vec<(String, &'static Entry)> {
        let mut out: Vec<(String, &'static Entry)> = Vec::new();
        for e in self.hint_entries(screen) {
            match out.last_mut() {
                Some((keys, last)) if last.hint == e.hint => {
                    keys.push('/');
                    keys.push_str(&keys_label(e.keys));
                }
                _ => out.push((keys_label(e.keys), e)),
            }
        }
        out
    }
}

pub fn keys_label(keys: &[Key]) -> String {
    keys.iter().map(|k| k.label()).collect::<Vec<_>>().join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readonly_removes_writes_from_hints_and_handling() {
        let rw = Keymap::new(false);
        let ro = Keymap::new(true);
        assert!(rw.lookup(Screen::Main, Key::Char('R')).is_some());
        assert!(ro.lookup(Screen::Main, Key::Char('R')).is_none());
        assert!(ro.lookup(Screen::Main, Key::Char('p')).is_none());
        assert!(
            ro.hints(Screen::Main)
                .iter()
                .all(|(_, h)| !h.contains("reconcile"))
        );
        assert!(
            rw.hints(Screen::Main)
                .iter()
                .any(|(_, h)| *h == "reconcile")
        );
    }

    #[test]
    fn no_key_is_bound_twice_on_a_screen() {
        for screen in [Screen::Main, Screen::Doc, Screen::Help, Screen::Events] {
            let mut seen = Vec::new();
            for e in TABLE.iter().filter(|e| e.screens.contains(&screen)) {
                for k in e.keys {
                    assert!(!seen.contains(k), "{k:?} bound twice on {screen:?}");
                    seen.push(*k);
                }
            }
        }
    }
}
