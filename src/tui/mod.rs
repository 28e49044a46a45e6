//! The terminal UI (`kubectl vap` with no subcommand), in the Elm style: one `Action` enum,
//! `app::update` the only place state changes, `view::draw` a function of the state, the
//! terminal owned by `terminal`, data from a `source` thread so IO never blocks drawing, and
//! logs in a file (`logging::init_file`, set up once by `cli`).
//!
//! Files, bottom up (each imports only files above it in this list): `words` (counts, ages,
//! countdowns as the UI says them), `glyphs` (states and severities: glyphs, colours; the
//! styles every pane shares), `lines` (wrapping, cutting, fitting lines to columns), `data`
//! (what a source delivers, over the controller's published types), `action` (what can
//! happen), `keymap` (the one key table: hints, help, handling), `contexts` (the
//! kubeconfig's, for `:ctx`), `violations` (audit results kept), `tree_view` (cached tree
//! items, stable ids), `detail` (detail pane, YAML, diff), `app` (the state), `update` (the
//! one place it changes), `view` (drawing; it notes what it measured for `update`),
//! `terminal` (setup, teardown, panic hook, clipboard), `source` (the data-source trait,
//! offline snapshots), `from_live` (a published `LiveState` as `Data`), `live_source` (the
//! reconciler adapter).

pub mod action;
pub mod app;
pub mod contexts;
pub mod data;
pub mod detail;
pub mod from_live;
pub mod glyphs;
pub mod keymap;
pub mod lines;
pub mod live_source;
pub mod source;
pub mod terminal;
pub mod tree_view;
pub mod update;
pub mod view;
pub mod violations;
pub mod words;

pub use action::{Action, Level, WriteCommand};
pub use app::App;
pub use data::Data;
pub use source::{Msg, Notify, Offline, Source};
pub use update::{dispatch, update};

use crossterm::event::{self, Event};
use std::process::ExitCode;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// How often the loop wakes without input (flash expiry).
const TICK: Duration = Duration::from_millis(250);

/// What the TUI takes from the command line (`cli` builds it, and chooses the source: files
/// or the current context).
#[derive(Debug, Clone, Default)]
pub struct TuiOptions {
    /// `--readonly`: no write actions.
    pub readonly: bool,
}

/// Why the UI ended other than by the user quitting.
#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    /// Taking, reading or drawing on the terminal failed.
    #[error(transparent)]
    Terminal(#[from] std::io::Error),
    /// The source could show nothing at all (`Source::refusal`), still so when the user quit.
    #[error("{0}")]
    Refused(String),
}

/// `kubectl vap`: the UI loop on any source.
pub fn run(mut source: Box<dyn Source>, opts: &TuiOptions) -> Result<ExitCode, TuiError> {
    let readonly = opts.readonly;
    // Logs go to a file, set up once for the process (`logging::init_file`, by `cli`).
    tracing::info!("TUI starting");

    let mut guard = terminal::Guard::enter()?;
    let (tx, rx) = mpsc::channel();
    let input = tx.clone();
    std::thread::spawn(move || {
        // Blocking reads live here, so the UI thread only ever waits on the channel.
        loop {
            let msg = match event::read() {
                Ok(Event::Key(k)) => Msg::Key(k),
                Ok(Event::Resize(w, h)) => Msg::Action(Action::Resize(w, h)),
                Ok(_) => continue,
                Err(e) => {
                    // The terminal is gone or unreadable: say so once and stop reading.
                    tracing::error!(error = %e, "reading the terminal");
                    let _ = input.send(Msg::Action(Action::Flash(
                        Level::Error,
                        format!("cannot read keys: {e} (ctrl-c or closing the terminal ends it)"),
                    )));
                    break;
                }
            };
            if input.send(msg).is_err() {
                break;
            }
        }
    });

    let mut app = App::new(readonly);
    let size = guard.terminal.size()?;
    update(&mut app, Action::Resize(size.width, size.height));
    guard.terminal.draw(|f| view::draw(f, &mut app))?;
    // Test hook (tests/tmux_tui.rs): a panic inside the UI must restore the terminal.
    if std::env::var_os("KUBECTL_VAP_TUI_TEST_PANIC").is_some() {
        panic!("KUBECTL_VAP_TUI_TEST_PANIC is set: panicking on purpose after the first frame");
    }
    source.start(Notify(tx));

    let result = (|| -> Result<(), TuiError> {
        loop {
            let first = match rx.recv_timeout(TICK) {
                Ok(m) => m,
                Err(RecvTimeoutError::Timeout) => Msg::Action(Action::Tick(chrono::Utc::now())),
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let had_flash = app.flash.is_some();
            let mut changed = false;
            // Handle everything pending, then draw once.
            let mut next = Some(first);
            while let Some(msg) = next.take() {
                let action = match msg {
                    Msg::Key(k) => app.key_action(&k),
                    Msg::Action(a) => Some(a),
                };
                if let Some(action) = action {
                    changed |= !matches!(action, Action::Tick(_));
                    dispatch(&mut app, action, &mut |cmd| {
                        tracing::info!(command = %cmd.cli(), "executing");
                        source.execute(cmd)
                    });
                }
                // Hooks from `update` (issue 12): `c` copies (OSC 52); a deadline re-analysed.
                if let Some(text) = app.copy.take() {
                    let _ = terminal::copy(&text);
                }
                changed |= std::mem::take(&mut app.redraw);
                if app.quit {
                    return Ok(());
                }
                next = rx.try_recv().ok();
            }
            if changed || had_flash != app.flash.is_some() {
                guard.terminal.draw(|f| view::draw(f, &mut app))?;
            }
        }
        Ok(())
    })();
    // Stopping a live source may take a moment (the reconciler releases its lease): say so.
    if app
        .data
        .as_ref()
        .is_some_and(|d| matches!(d.origin, data::Origin::Live { .. }))
    {
        update(
            &mut app,
            Action::Flash(
                Level::Info,
                "quitting: stopping the reconciler (it releases its lease)…".into(),
            ),
        );
        let _ = guard.terminal.draw(|f| view::draw(f, &mut app));
    }
    source.stop();
    drop(guard);
    tracing::info!("TUI stopped");
    result?;
    match source.refusal() {
        Some(why) => Err(TuiError::Refused(why)),
        None => Ok(ExitCode::SUCCESS),
    }
}
