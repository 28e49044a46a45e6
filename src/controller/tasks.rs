//! The tasks of a running copy, under one supervisor: every task starts through [`Tasks`] (one
//! tokio `JoinSet`), so none runs unseen, and [`Tasks::supervise`] notices one that dies; and
//! [`changed`], the one way a task waits on a watch channel.

use futures::FutureExt;
use parking_lot::Mutex;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use tokio::sync::{Notify, watch};
use tokio::task::{AbortHandle, Id, JoinSet};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// As long as the copy: ending before the copy stops is a failure.
    Copy,
    /// Until its work is done (a request, a first wait): ending is fine, panicking is not.
    Job,
}

/// A task that died while the copy ran: which one, and how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("task {task} {cause}")]
pub struct Failure {
    pub task: String,
    /// `panicked: <message>`, or `ended while the copy runs`.
    pub cause: String,
}

/// How a task ended, as it reports it: its name, its lifetime, its panic's message if any.
type End = (String, Lifetime, Result<(), String>);

#[derive(Default)]
pub struct Tasks {
    set: Mutex<JoinSet<End>>,
    /// A task was added (a supervisor that found none running waits for one).
    added: Notify,
    /// Cancelled when the copy stops (asked to, or after a failure): the election releases the
    /// Lease when it sees this.
    stopping: CancellationToken,
    failure: watch::Sender<Option<Failure>>,
    /// Tests of the supervisor: the task of this name ends as a panic once started.
    fail: Option<String>,
}

impl Tasks {
    pub fn new(fail: Option<String>) -> Self {
        Tasks {
            fail,
            ..Tasks::default()
        }
    }

    pub fn spawn<F>(&self, name: impl Into<String>, lifetime: Lifetime, task: F) -> AbortHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let name = name.into();
        let injected = self.fail.as_deref() == Some(name.as_str());
        // The hook has already seen a real panic; this only catches it.
        let task = AssertUnwindSafe(task).catch_unwind();
        let handle = self.set.lock().spawn(async move {
            let ended = if injected {
                drop(task);
                tokio::task::yield_now().await;
                // No real panic, so the panic hook is not told (a test process's hook keeps
                // its cluster's folder after any panic, not after one it asked for).
                Err("failure injected for a test".into())
            } else {
                task.await.map_err(panic_text)
            };
            (name, lifetime, ended)
        });
        self.added.notify_one();
        handle
    }

    pub fn stopping(&self) -> CancellationToken {
        self.stopping.clone()
    }

    /// The first failure, once there is one.
    pub fn failure(&self) -> watch::Receiver<Option<Failure>> {
        self.failure.subscribe()
    }

    /// The next task to end, with how it ended (`None`: aborted); `None` when none runs.
    async fn next_end(&self) -> Option<(Id, Option<End>)> {
        // The lock is held within each poll only, never across an await: spawning goes on.
        let end = std::future::poll_fn(|cx| self.set.lock().poll_join_next_with_id(cx)).await?;
        Some(end.map_or_else(|e| (e.id(), None), |(id, end)| (id, Some(end))))
    }

    /// Watches the tasks until `asked` (the owner's stop) or a failure, then stops the copy in
    /// order: `stopping` is cancelled (writes stop, the election releases the Lease and ends);
    /// after a failure the rest runs on (`/healthz` says why) until `asked`; then every task
    /// is aborted. `on_failure` is told the failure first (health, writes off).
    pub async fn supervise(
        &self,
        asked: CancellationToken,
        mut election: Option<Id>,
        on_failure: impl FnOnce(&Failure),
    ) -> Result<(), Failure> {
        let mut failure = None;
        loop {
            // With no task running, `next_end` gives `None`: wait for one to be added.
            let (id, end) = tokio::select! {
                () = asked.cancelled() => break,
                Some(end) = self.next_end() => end,
                () = self.added.notified() => continue,
            };
            election = election.filter(|e| *e != id);
            if let Some(f) = judge(end, false) {
                tracing::error!("{f}: this copy stops writing and releases its Lease");
                on_failure(&f);
                self.failure.send_replace(Some(f.clone()));
                failure = Some(f);
                break;
            }
        }
        self.stopping.cancel();
        while election.is_some()
            && let Some((id, end)) = self.next_end().await
        {
            election = election.filter(|e| *e != id);
            judge(end, true);
        }
        if failure.is_some() {
            asked.cancelled().await;
        }
        self.set.lock().abort_all();
        while let Some((_, end)) = self.next_end().await {
            judge(end, true);
        }
        failure.map_or(Ok(()), Err)
    }
}

/// Whether a task's end is a failure. A task aborted on purpose (`None`: the kind watch of a
/// CRD that went, every task once the copy stops) is not; a panic always is (logged even
/// while `stopping`, when it changes nothing more).
fn judge(end: Option<End>, stopping: bool) -> Option<Failure> {
    let (task, lifetime, ended) = end?;
    let cause = match ended {
        Err(panic) => format!("panicked: {panic}"),
        Ok(()) if lifetime == Lifetime::Copy && !stopping => "ended while the copy runs".into(),
        Ok(()) => return None,
    };
    let failure = Failure { task, cause };
    if stopping {
        tracing::error!("{failure} while the copy stopped");
    }
    Some(failure)
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    let text = payload.downcast_ref::<&str>().copied();
    payload
        .downcast::<String>()
        .map_or_else(|_| text.unwrap_or("(no message)").into(), |s| *s)
}

/// Resolves at the next change `rx` sees; never once its sender is gone (a closed channel
/// must not turn a wait into a busy loop: `changed` would return at once, every time).
pub async fn changed<T>(rx: &mut watch::Receiver<T>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A task of the copy that panics is noticed with its name and message, the election
    /// still ends first, and the rest waits for the owner's stop.
    #[tokio::test]
    async fn a_panicking_task_is_a_failure_and_the_copy_stops_in_order() {
        let tasks = std::sync::Arc::new(Tasks::default());
        let order = std::sync::Arc::new(Mutex::new(Vec::new()));
        let (o, stopping) = (order.clone(), tasks.stopping());
        let election = tasks.spawn("election", Lifetime::Copy, async move {
            stopping.cancelled().await;
            o.lock().push("released");
        });
        let o = order.clone();
        tasks.spawn("watch", Lifetime::Copy, async move {
            let _abort_noted = Noted(o);
            std::future::pending::<()>().await;
        });
        tasks.spawn("worker 1", Lifetime::Copy, async {
            tokio::task::yield_now().await;
            panic!("the bug");
        });
        let asked = CancellationToken::new();
        let supervisor = {
            let (tasks, asked, order) = (tasks.clone(), asked.clone(), order.clone());
            tokio::spawn(async move {
                tasks
                    .supervise(asked, Some(election.id()), |_| order.lock().push("told"))
                    .await
            })
        };
        let mut failure = tasks.failure();
        let seen = failure.wait_for(Option::is_some).await.expect("a failure");
        let said = seen.as_ref().map(ToString::to_string);
        drop(seen);
        assert_eq!(said.as_deref(), Some("task worker 1 panicked: the bug"));
        // The election ends on its own; the watch runs on until the owner stops the copy.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(*order.lock(), ["told", "released"]);
        asked.cancel();
        let result = supervisor.await.expect("the supervisor");
        assert_eq!(result.map_err(|f| f.task), Err("worker 1".to_string()));
        assert_eq!(*order.lock(), ["told", "released", "aborted"]);
    }

    struct Noted(std::sync::Arc<Mutex<Vec<&'static str>>>);
    impl Drop for Noted {
        fn drop(&mut self) {
            self.0.lock().push("aborted");
        }
    }

    async fn next_failure(tasks: &Tasks) -> Option<String> {
        let (_, end) = tasks.next_end().await.expect("an end");
        judge(end, false).map(|f| f.to_string())
    }

    /// A task of the copy's lifetime that returns is a failure; a job that returns, or a task
    /// aborted on purpose, is not; a job that panics is, and so is the task a test names.
    #[tokio::test]
    async fn what_counts_as_a_failure() {
        let tasks = Tasks::new(Some("injected".into()));
        tasks.spawn("request 1", Lifetime::Job, async {});
        let aborted = tasks.spawn("kind watch", Lifetime::Copy, std::future::pending());
        aborted.abort();
        for _ in 0..2 {
            assert_eq!(next_failure(&tasks).await, None);
        }
        tasks.spawn("publish", Lifetime::Copy, async {});
        let said = next_failure(&tasks).await;
        assert_eq!(
            said.as_deref(),
            Some("task publish ended while the copy runs")
        );
        tasks.spawn("request 2", Lifetime::Job, async { panic!("oops") });
        let said = next_failure(&tasks).await;
        assert_eq!(said.as_deref(), Some("task request 2 panicked: oops"));
        tasks.spawn("injected", Lifetime::Copy, std::future::pending());
        let said = next_failure(&tasks).await;
        let injected = "task injected panicked: failure injected for a test";
        assert_eq!(said.as_deref(), Some(injected));
        assert!(tasks.next_end().await.is_none());
    }

    /// Every task of a copy starts through the supervisor: no `tokio::spawn` in
    /// `src/controller/` (and its folders) outside tests, but the one that starts the
    /// supervisor itself.
    #[test]
    fn every_task_of_a_copy_starts_through_the_supervisor() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/controller");
        let mut found = Vec::new();
        // Its folders too.
        let mut dirs = vec![dir];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("src/controller") {
                let path = entry.expect("an entry").path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).expect("a source file");
                let code = text.split("#[cfg(test)]").next().unwrap_or_default();
                for (i, line) in code.lines().enumerate() {
                    let spawns = line.contains("tokio::spawn(") || line.contains("task::spawn(");
                    if spawns && !line.contains("tokio::spawn(supervise(") {
                        found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "tasks started around the supervisor (use Tasks::spawn):\n{}",
            found.join("\n")
        );
    }

    /// A closed channel never wakes a waiter: the busy loop of issue 27 (a `select!` over a
    /// channel whose sender was dropped) cannot come back through this helper.
    #[tokio::test(start_paused = true)]
    async fn a_closed_channel_never_resolves() {
        let (tx, mut rx) = watch::channel(0);
        drop(tx);
        let wait = std::time::Duration::from_secs(3600);
        let waited = tokio::time::timeout(wait, changed(&mut rx)).await;
        assert!(waited.is_err(), "changed() resolved on a closed channel");
    }
}
