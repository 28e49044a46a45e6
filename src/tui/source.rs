//! Where the UI's data comes from. A source delivers `Data` from its own thread (analysis is
//! done there, never on the UI thread) and carries out confirmed writes. `Offline` reads a
//! snapshot from files; the live source adapts the reconciler's watch channel.

use super::action::{Action, Level, WriteCommand};
use super::data::{ClusterInfo, Data, EventLine, Origin, clock};
use crate::core::Options;
use crate::snapshot::Snapshot;
use crossterm::event::KeyEvent;
use std::sync::Arc;
use std::sync::mpsc::Sender;

/// What reaches the UI loop: keys (mapped there, as their meaning depends on the state) and
/// actions from sources and timers.
#[derive(Debug)]
pub enum Msg {
    Key(KeyEvent),
    Action(Action),
}

/// A handle sources use to wake the UI.
#[derive(Clone)]
pub struct Notify(pub Sender<Msg>);

impl Notify {
    /// False once the UI has gone: the source should stop.
    pub fn send(&self, a: Action) -> bool {
        self.0.send(Msg::Action(a)).is_ok()
    }
}

pub trait Source: Send {
    /// Starts delivering data through `notify`; returns at once.
    fn start(&mut self, notify: Notify);
    /// Carries out a confirmed write. The returned action (usually a flash) says what happened
    /// now; later effects show up in the data's event log.
    fn execute(&mut self, cmd: WriteCommand) -> Option<Action>;
    /// Quit: stop background work (the reconciler stops and releases its lease).
    fn stop(&mut self);
    /// After `stop`: why the source could show nothing at all when the user quit (a cluster
    /// without ValidatingAdmissionPolicy v1); the UI then exits 2 with it, as the commands do.
    fn refusal(&self) -> Option<String> {
        None
    }
}

/// `-f`: one snapshot, analysed once.
pub struct Offline {
    snapshot: Option<Snapshot>,
    paths: Vec<String>,
    opts: Options,
}

impl Offline {
    pub fn new(snapshot: Snapshot, paths: Vec<String>, opts: Options) -> Self {
        Offline {
            snapshot: Some(snapshot),
            paths,
            opts,
        }
    }

    /// The data this source delivers (for tests and benchmarks: same code path, no thread).
    pub fn data(snapshot: Snapshot, paths: Vec<String>, opts: &Options) -> Data {
        let info = ClusterInfo {
            context: format!("files: {}", paths.join(", ")),
            ..ClusterInfo::default()
        };
        let events = duplicate_lines(&snapshot);
        Data::prepare(
            Origin::Offline { paths },
            info,
            Arc::new(snapshot),
            opts,
            events,
        )
    }
}

/// A warning in the event log for each copy of an object the input held again later (also an
/// `input-duplicate` finding on the object): no input is dropped without a word.
fn duplicate_lines(snapshot: &Snapshot) -> Vec<EventLine> {
    let time = clock(chrono::Utc::now());
    snapshot
        .duplicates
        .iter()
        .zip(1..)
        .map(|(d, seq)| {
            EventLine::own(
                seq,
                time.clone(),
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
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            let data = Offline::data(snapshot, paths, &opts);
            tracing::info!(elapsed = ?started.elapsed(), "analysed the snapshot");
            notify.send(Action::Data(Arc::new(data)));
        });
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

    fn stop(&mut self) {}
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
        let data = Offline::data(
            snap,
            vec!["a.yaml".into(), "b.yaml".into()],
            &crate::load::cel::default_options(),
        );
        let [line] = data.events.as_slice() else {
            panic!("one line: {:?}", data.events)
        };
        assert_eq!(line.level(), Level::Warn);
        assert_eq!(
            line.text(),
            "input: K8sX/c at a.yaml:1 is ignored: it is in the input again at b.yaml:1, and the last copy is used"
        );
        assert!(
            data.analysis
                .findings
                .iter()
                .any(|f| f.code == crate::core::Code::InputDuplicate)
        );
    }
}
