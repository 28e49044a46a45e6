//! The terminal UI (`kubectl vap` with no subcommand), in the Elm style: one `Action` enum,
//! `update` the only place state changes, `view::draw` a function of the state, and one loop
//! (`select!` over the terminal's events, the source's actions and a timer) on the process's
//! one tokio runtime; the data source's tasks run there too and do the analysis on blocking
//! threads, so IO and analysis never hold up drawing. Logs go to a file
//! (`logging::init_file`, set up once by `cli`).
//!
//! Its folders, bottom up (each file imports only files of its own folder or of one before
//! it; `tests/layering.rs`, `FOLDERS`):
//! - `say/`: `words` (counts, ages, countdowns as the UI says them), `glyphs` (states and
//!   severities: glyphs, colours; the styles every pane shares);
//! - `model/`: `data` (what a source delivers: the controller's published state as it is, and
//!   the analysis), `action` (what can happen), `keymap` (the one key table: hints, help,
//!   handling), `contexts` (the kubeconfig's, for `:ctx`), `violations` (audit results kept),
//!   `tree_view` (cached tree items, stable ids), `detail` (detail pane, YAML, diff), `app`
//!   (the state and its one `Mode`), `update` (the one place it changes);
//! - `draw/`: `lines` (wrapping, cutting, fitting lines to columns), `view` (drawing; it notes
//!   what it measured for `update`), `terminal` (the clipboard);
//! - `sources/`: `source` (the data-source trait, offline snapshots, deadlines), `from_live`
//!   (a published `LiveState` as `Data`), `live_source` (the reconciler adapter).

mod draw;
mod model;
mod say;
mod sources;

// Every file's module, at the path it is named by (the tests, the benches, `cli`).
pub use draw::{lines, terminal, view};
pub use model::{action, app, contexts, data, detail, keymap, tree_view, update, violations};
pub use say::{glyphs, words};
pub use sources::{from_live, live_source, source};

pub use action::{Action, Level, WriteCommand};
pub use app::App;
pub use data::Data;
pub use source::{Notify, Offline, Source};
pub use update::{dispatch, update};

use crossterm::event::{Event, EventStream};
use futures::StreamExt;
use std::process::ExitCode;
use std::time::Duration;

/// How often the loop wakes without input: ages and countdowns on screen move with the
/// clock (a frame is drawn only when their words change), and flashes expire.
const TICK: Duration = Duration::from_secs(1);
/// How long quitting waits for the source to stop (the reconciler releases its lease; a
/// start under way gets 5 s to finish first).
const STOP_WAIT: Duration = Duration::from_secs(16);

/// What the TUI takes from the command line (`cli` builds it, and chooses the source: files
/// or the current context).
#[derive(Debug, Clone, Default)]
pub struct TuiOptions {
    /// `--readonly`: no write actions.
    pub readonly: bool,
    /// Colours on screen; without, `--color=never` or NO_COLOR, see [`paint`].
    pub colour: bool,
}

/// One frame: the view, and without colour the same cells in the terminal's own colours. A
/// background colour marks something (the selection, a bar), so it becomes reverse video
/// rather than nothing; bold, dim and the rest stay (NO_COLOR is about colour).
fn paint(f: &mut ratatui::Frame, app: &mut App, colour: bool) {
    view::draw(f, app);
    if !colour {
        monochrome(f.buffer_mut());
    }
}

/// Every cell's colours reset; a coloured background as reverse video.
pub fn monochrome(buf: &mut ratatui::buffer::Buffer) {
    use ratatui::style::{Color, Modifier};
    for cell in buf.content.iter_mut() {
        if cell.bg != Color::Reset {
            cell.modifier.insert(Modifier::REVERSED);
        }
        cell.fg = Color::Reset;
        cell.bg = Color::Reset;
        cell.underline_color = Color::Reset;
    }
}

/// Why the UI ended other than by the user quitting.
#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    /// Taking, reading or drawing on the terminal failed, or the runtime could not start.
    #[error(transparent)]
    Terminal(#[from] std::io::Error),
    /// The source could show nothing at all (`Source::refusal`), still so when the user quit.
    #[error("{0}")]
    Refused(String),
}

/// `kubectl vap`: the UI on any source, on the process's one runtime (the source's tasks,
/// the reconciler's, the UI loop's).
pub fn run(source: Box<dyn Source>, opts: &TuiOptions) -> Result<ExitCode, TuiError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(ui(source, opts))
}

/// The UI loop: one `select!` over the terminal's events, the source's actions and a timer;
/// each batch of actions handled, then one frame drawn if anything changed.
async fn ui(mut source: Box<dyn Source>, opts: &TuiOptions) -> Result<ExitCode, TuiError> {
    // Logs go to a file, set up once for the process (`logging::init_file`, by `cli`).
    tracing::info!("TUI starting");
    // ratatui's own set-up: raw mode, the alternate screen, and a panic hook that restores
    // the terminal before the panic message is printed.
    let mut terminal = ratatui::try_init()?;
    let result = looped(&mut terminal, source.as_mut(), opts).await;
    drop(terminal);
    ratatui::restore();
    tracing::info!("TUI stopped");
    result?;
    match source.refusal() {
        Some(why) => Err(TuiError::Refused(why)),
        None => Ok(ExitCode::SUCCESS),
    }
}

async fn looped(
    terminal: &mut ratatui::DefaultTerminal,
    source: &mut dyn Source,
    opts: &TuiOptions,
) -> Result<(), TuiError> {
    let mut app = App::new(opts.readonly);
    let size = terminal.size()?;
    update(&mut app, Action::Resize(size.width, size.height));
    terminal.draw(|f| paint(f, &mut app, opts.colour))?;
    // Test hook (tests/tmux_tui.rs): a panic inside the UI must restore the terminal.
    if std::env::var_os("KUBECTL_VAP_TUI_TEST_PANIC").is_some() {
        panic!("KUBECTL_VAP_TUI_TEST_PANIC is set: panicking on purpose after the first frame");
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    source.start(Notify(tx));
    let mut keys = EventStream::new();
    let mut keys_open = true;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let first = tokio::select! {
            key = keys.next(), if keys_open => match key {
                Some(Ok(Event::Key(k))) => app.key_action(&k),
                Some(Ok(Event::Resize(w, h))) => Some(Action::Resize(w, h)),
                Some(Ok(_)) => None,
                Some(Err(e)) => Some(keys_gone(&mut keys_open, &e.to_string())),
                None => Some(keys_gone(&mut keys_open, "input ended")),
            },
            a = rx.recv() => a,
            _ = tick.tick() => Some(Action::Tick(chrono::Utc::now())),
        };
        let had_flash = app.flash.is_some();
        let mut changed = false;
        // Handle everything pending, then draw once.
        let mut next = first;
        loop {
            if let Some(action) = next.take() {
                changed |= !matches!(action, Action::Tick(_));
                dispatch(&mut app, action, &mut |cmd| {
                    tracing::info!(command = %cmd.cli(), "executing");
                    source.execute(cmd)
                });
            }
            // Hooks from `update`: `c` copies (OSC 52).
            if let Some(text) = app.copy.take() {
                let _ = terminal::copy(&text);
            }
            changed |= std::mem::take(&mut app.redraw);
            if app.quit {
                return stop(terminal, &mut app, source, opts.colour).await;
            }
            match rx.try_recv() {
                Ok(a) => next = Some(a),
                Err(_) => break,
            }
        }
        if changed || had_flash != app.flash.is_some() {
            terminal.draw(|f| paint(f, &mut app, opts.colour))?;
        }
    }
}

/// Quit: stopping a live source may take a moment (the reconciler releases its lease): say
/// so, and wait for it (bounded).
async fn stop(
    terminal: &mut ratatui::DefaultTerminal,
    app: &mut App,
    source: &mut dyn Source,
    colour: bool,
) -> Result<(), TuiError> {
    if app.data.as_ref().is_some_and(|d| d.running()) {
        let text = "quitting: stopping the reconciler (it releases its lease)…";
        update(app, Action::Flash(Level::Info, text.into()));
        let _ = terminal.draw(|f| paint(f, app, colour));
    }
    if let Some(task) = source.stop() {
        let _ = tokio::time::timeout(STOP_WAIT, task).await;
    }
    Ok(())
}

/// The terminal is gone or unreadable: said once, and keys are not read any more.
fn keys_gone(open: &mut bool, why: &str) -> Action {
    *open = false;
    tracing::error!("reading the terminal: {why}");
    Action::Flash(
        Level::Error,
        format!("cannot read keys: {why} (ctrl-c or closing the terminal ends it)"),
    )
}
