//! Where the UI's data comes from. A source runs as tasks on the TUI's one runtime, delivers
//! `Data` with its analysis done (on a blocking thread, never the UI's), analyses again when a
//! time-based state's deadline passes, and carries out confirmed commands. `Offline` reads a
//! snapshot from files; the live source follows the reconciler.

use crate::controller::LiveState;
use crate::core::Options;
use crate::snapshot::Snapshot;
use crate::tui::model::action::{Action, Level, WriteCommand};
use crate::tui::model::data::{Data, EventLine, Origin};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

/// A handle sources use to wake the UI.
#[derive(Clone)]
pub struct Notify(pub UnboundedSender<Action>);

impl Notify {
    /// False once the UI has gone: the source should stop.
    pub fn send(&self, a: Action) -> bool {
        self.0.send(a).is_ok()
    }
}

pub trait Source: Send {
    /// Starts delivering data through `notify`, as tasks on the current tokio runtime;
    /// returns at once.
    fn start(&mut self, notify: Notify);
    /// Carries out a confirmed command. The returned action (a flash) says what happened now;
    /// later effects arrive as actions.
    fn execute(&mut self, cmd: WriteCommand) -> Option<Action>;
    /// Quit: background work stops (the reconciler stops and releases its lease); the
    /// returned task ends when it has.
    fn stop(&mut self) -> Option<JoinHandle<()>>;
    /// After `stop`: why the source could show nothing at all when the user quit (a cluster
    /// without ValidatingAdmissionPolicy v1); the UI then exits 2 with it, as the commands do.
    fn refusal(&self) -> Option<String> {
        None
    }
}

/// Analyses `data`'s snapshot again each time a deadline passes (a binding's
/// `--binding-wait` ends though no object changed), so the TUI agrees with `check` at that
/// moment: the data to send then, once the analysis (on a blocking thread) is done.
pub async fn at_deadline(data: &Data) -> Data {
    let Some(due) = data.next_deadline else {
        return std::future::pending().await;
    };
    let wait = (due - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(wait).await;
    let data = data.clone();
    let now = chrono::Utc::now().max(due);
    tracing::debug!(%now, "a time-based state changed: analysing again");
    match tokio::task::spawn_blocking(move || data.reanalysed(now)).await {
        Ok(d) => d,
        // The analysis panicked: nothing new to show (the panic hook said it).
        Err(_) => std::future::pending().await,
    }
}

/// `-f`: one snapshot, analysed once (and again at its deadlines).
pub struct Offline {
    snapshot: Option<Snapshot>,
    paths: Vec<String>,
    opts: Options,
    task: Option<JoinHandle<()>>,
}

impl Offline {
    pub fn new(snapshot: Snapshot, paths: Vec<String>, opts: Options) -> Self {
        Offline {
            snapshot: Some(snapshot),
            paths,
            opts,
            task: None,
        }
    }

    /// The data this source delivers (for tests and benchmarks: same code path, no task).
    pub fn data(snapshot: Snapshot, paths: Vec<String>, opts: &Options) -> Data {
        let context = format!("files: {}", paths.join(", "));
        let origin = Origin::Offline { paths };
        Data {
            context,
            ..Data::prepare(
                origin,
                Arc::new(LiveState::default()),
                Arc::new(snapshot),
                opts,
            )
        }
    }
}

/// A warning in the event log for each copy of an object the input held again later (also an
/// `input-duplicate` finding on the object): no input is dropped without a word.
pub fn duplicate_lines(snapshot: &Snapshot) -> Vec<EventLine> {
    snapshot
        .duplicates
        .iter()
        .map(|d| {
            EventLine::own(
                Level::Warn,
                format!(
                    "input: {} at {} is ignored: it is in the input again at {}, and the last copy is used",
                    d.object, d.dropped, d.kept
                ),
            )
        })
        .collect()
}

impl Source for Offline {
    fn start(&mut self, notify: Notify) {
        let Some(snapshot) = self.snapshot.take() else {
            return;
        };
        let paths = self.paths.clone();
        let opts = self.opts.clone();
        self.task = Some(tokio::spawn(async move {
            let started = std::time::Instant::now();
            for line in duplicate_lines(&snapshot) {
                notify.send(Action::Logged(line));
            }
            let analysed =
                tokio::task::spawn_blocking(move || Offline::data(snapshot, paths, &opts));
            let Ok(mut data) = analysed.await else { return };
            tracing::info!(elapsed = ?started.elapsed(), "analysed the snapshot");
            while notify.send(Action::Data(Arc::new(data.clone()))) {
                data = at_deadline(&data).await;
            }
        }));
    }

    fn execute(&mut self, cmd: WriteCommand) -> Option<Action> {
        // The UI refuses before asking; this is the backstop.
        Some(Action::Flash(
            Level::Error,
            match cmd {
                WriteCommand::SwitchContext(_) => {
                    "offline snapshot (-f): there is no context to switch"
                }
                _ => "offline snapshot: nothing to reconcile",
            }
            .to_string(),
        ))
    }

    fn stop(&mut self) -> Option<JoinHandle<()>> {
        if let Some(t) = &self.task {
            t.abort();
        }
        self.task.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of an object that the input held again later is said in the event log, with
    /// both places, as `check` says it in a finding.
    #[test]
    fn duplicates_in_the_input_are_warned_in_the_event_log() {
        let doc =
            "apiVersion: constraints.gatekeeper.sh/v1beta1\nkind: K8sX\nmetadata: {name: c}\n";
        let mut snap = Snapshot::default();
        for file in ["a.yaml", "b.yaml"] {
            crate::load::files::load_text(&mut snap, file, doc).expect("loads");
        }
        snap.dedupe();
        let [line]: [EventLine; 1] = duplicate_lines(&snap).try_into().expect("one line");
        assert_eq!(line.level(), Level::Warn);
        assert_eq!(
            line.text(),
            "input: K8sX/c at a.yaml:1 is ignored: it is in the input again at b.yaml:1, and the last copy is used"
        );
        let data = Offline::data(
            snap,
            vec!["a.yaml".into(), "b.yaml".into()],
            &crate::load::cel::default_options(),
        );
        assert!(
            data.analysis
                .findings
                .iter()
                .any(|f| f.code == crate::core::Code::InputDuplicate)
        );
    }
}
