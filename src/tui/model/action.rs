//! Everything that can happen to the UI is one `Action`; `update` turns an action into the next
//! one (or none). Keys map to actions through the keymap; data and timers arrive as actions too.

pub use super::data::Level;
use super::data::{Data, EventLine};
use crate::controller::Happened;
use std::sync::Arc;

/// A command the user asked for: the writes (asked first, off with `--readonly`), the audit
/// and test (reads: dry-runs only) and a context switch. The source carries it out (live) or
/// refuses it (offline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteCommand {
    /// Audit a template's or a constraint's scope (`kubectl vap audit TARGET`).
    Audit(String),
    /// Dry-run a file's objects (`kubectl vap test -f PATH`).
    Test(String),
    /// Re-enqueue every constraint of the template's kind (`kubectl vap replay TEMPLATE`).
    Replay(String),
    /// Reconcile the template's VAP and bindings (`kubectl vap reconcile TEMPLATE`).
    Reconcile(String),
    /// Reconcile everything (`kubectl vap reconcile --all`).
    ReconcileAll,
    /// Stop the live view and start one on another kubeconfig context (`:ctx NAME`).
    SwitchContext(String),
}

impl WriteCommand {
    /// The question the confirmation asks.
    pub fn prompt(&self) -> String {
        match self {
            WriteCommand::Audit(t) => format!("Audit {t}?"),
            WriteCommand::Test(p) => format!("Test {p}?"),
            WriteCommand::Replay(t) => format!("Replay every constraint of template {t}?"),
            WriteCommand::Reconcile(t) => {
                format!("Reconcile template {t} (its VAP and bindings)?")
            }
            WriteCommand::ReconcileAll => "Reconcile everything (all templates, orphans)?".into(),
            WriteCommand::SwitchContext(c) => format!("Switch to context {c}?"),
        }
    }
    /// The one-shot command line that does the same.
    pub fn cli(&self) -> String {
        match self {
            WriteCommand::Audit(t) => format!("kubectl vap audit {t}"),
            WriteCommand::Test(p) => format!("kubectl vap test -f {p}"),
            WriteCommand::Replay(t) => format!("kubectl vap replay {t}"),
            WriteCommand::Reconcile(t) => format!("kubectl vap reconcile {t}"),
            WriteCommand::ReconcileAll => "kubectl vap reconcile --all".into(),
            WriteCommand::SwitchContext(c) => format!("kubectl vap --context {c}"),
        }
    }
}

#[derive(Debug, Clone)]
pub enum Action {
    // Keys (the keymap's actions).
    Quit,
    Help,
    Back,
    StartFilter,
    Enter,
    Yaml,
    Diff,
    FaultsOnly,
    Audit,
    TestFile,
    Replay,
    Reconcile,
    ReconcileAll,
    Up,
    Down,
    Left,
    Right,
    PageUp,
    PageDown,
    First,
    Last,
    /// Scroll the detail pane a row down or up (`J`/`K`): at 80×24 it has four rows.
    DetailDown,
    DetailUp,
    /// Cycle the tree's order (name, state).
    Sort,
    /// Wrap long lines in YAML and diff.
    Wrap,
    /// Copy the selected name, or the document on screen, to the terminal's clipboard.
    Copy,
    /// Open or close the event log full-screen.
    Events,
    /// Start typing a `:` command.
    StartCommand,
    /// A key the current screen does not use: said (the message), not ignored.
    NotHere(String),
    // The line being typed (filter, path, command): one prompt for all three.
    PromptPush(char),
    PromptPop,
    /// Tab: complete the command or the context name typed so far.
    PromptComplete,
    PromptDone,
    PromptCancel,
    // The list `:ctx` opens.
    /// Move the selection by this many rows (bounded by the list's ends).
    PickerMove(isize),
    PickerDone,
    PickerCancel,
    // The one confirmation path for writes.
    Ask(WriteCommand),
    ConfirmYes,
    ConfirmNo,
    /// Carry out a confirmed write: handled by the runtime (it talks to the source), never by
    /// `update`.
    Execute(WriteCommand),
    // From the outside.
    Data(Arc<Data>),
    /// What the controller's feed told (a reconcile action, a cluster Event, a Lease change):
    /// a line of the event log.
    Happened(Arc<Happened>),
    /// A line of the event log from the source itself (offline: a duplicate in the input).
    Logged(EventLine),
    Flash(Level, String),
    /// The answer to a replay or reconcile (with the request's id): flashed and logged like
    /// `Flash`, but said once with the handler's line about the same request (whichever
    /// comes first stays).
    Answer(Level, String, Option<String>),
    /// How far an audit (`a`) is: shown until the next message, not logged (the outcome is).
    Progress {
        what: String,
        done: usize,
        total: usize,
    },
    /// An audit's typed results (`a`), kept per constraint (`violations::Store`).
    Audited(Arc<crate::admission::audit::AuditReport>),
    Resize(u16, u16),
    /// The loop's timer; carries the clock, so the countdowns and ages it moves are tested.
    Tick(chrono::DateTime<chrono::Utc>),
}
