//! A request handled on the copy that leads: its keys tracked ([`Tracker`]) until each has been
//! reconciled after it came in, then its writes and failures counted and said ([`summary`]).

use crate::controller::reconcile::keys::Key;
use crate::controller::reconcile::reconcilers::Outcome;
use crate::controller::view::state::Command;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long a request waits for its keys before it reports what it has.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(60);

struct Pending {
    begun: Instant,
    /// Keys not reconciled since the request came in.
    left: HashSet<Key>,
    tally: Tallied,
    /// Keys whose write the API server refused (422): not retried, a failure to report.
    refused: HashSet<Key>,
    /// Keys that came back for later (the binding wait).
    waiting: HashSet<Key>,
    retrying: HashSet<Key>,
    reply: oneshot::Sender<Tallied>,
}

/// What a request did when it is answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tallied {
    pub writes: u64,
    pub failures: u64,
    /// Keys whose write the API server refused.
    pub refused: usize,
    /// Keys the request concerned.
    pub keys: usize,
    /// Keys waiting (the binding wait), and keys not finished by the deadline.
    pub waiting: usize,
    pub unfinished: usize,
}

/// Requests in progress on this copy.
#[derive(Default)]
pub struct Tracker {
    pending: Mutex<Vec<Pending>>,
}

impl Tracker {
    /// Tracks `keys`; the receiver gets what they did once each key has been reconciled (or
    /// at [`Tracker::expire`]).
    pub fn begin(&self, keys: &[Key]) -> oneshot::Receiver<Tallied> {
        let (reply, rx) = oneshot::channel();
        let p = Pending {
            begun: Instant::now(),
            left: keys.iter().cloned().collect(),
            tally: Tallied {
                keys: keys.len(),
                ..Tallied::default()
            },
            refused: HashSet::new(),
            waiting: HashSet::new(),
            retrying: HashSet::new(),
            reply,
        };
        if p.left.is_empty() {
            p.finish();
        } else {
            self.pending.lock().push(p);
        }
        rx
    }

    pub fn processed(
        &self,
        key: &Key,
        started: Instant,
        outcome: &Outcome,
        writes: u64,
        failures: u64,
    ) {
        let mut pending = self.pending.lock();
        let done = pending.extract_if(.., |p| {
            // A reconcile that began before the request read older state: it does not count.
            if started < p.begun || !(p.left.contains(key) || p.retrying.contains(key)) {
                return false;
            }
            p.tally.writes += writes;
            p.tally.failures += failures;
            p.left.remove(key);
            p.retrying.remove(key);
            match outcome {
                Outcome::Retry(_) | Outcome::Forbidden(_) => p.retrying.insert(key.clone()),
                Outcome::RequeueAfter(_) => p.waiting.insert(key.clone()),
                Outcome::Refused(_) => p.refused.insert(key.clone()),
                Outcome::Done | Outcome::Unknown(_) => false,
            };
            p.left.is_empty() && p.retrying.is_empty()
        });
        done.for_each(Pending::finish);
    }

    /// Answers the requests older than `deadline` with what they have.
    pub fn expire(&self, deadline: Duration) {
        let mut pending = self.pending.lock();
        let old = pending.extract_if(.., |p| p.begun.elapsed() >= deadline);
        old.for_each(Pending::finish);
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.pending.lock().is_empty()
    }
}

impl Pending {
    fn finish(self) {
        let _ = self.reply.send(Tallied {
            refused: self.refused.len(),
            waiting: self.waiting.len(),
            unfinished: self.left.len() + self.retrying.len(),
            ..self.tally
        });
    }
}

/// "replayed 25 constraints of template k8sx: 2 writes, 1 write refused by the API server, 1 failed,
/// 3 waiting (binding wait)". A request that wrote nothing because its writes were refused
/// never reads "0 writes".
pub fn summary(command: &Command, t: &Tallied) -> String {
    let (total, refused) = (t.keys as u64, t.refused as u64);
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let constraints = |n| plural(n, "constraint", "constraints");
    let what = match command {
        Command::Replay(t) => format!("replayed {} of template {t}", constraints(total)),
        Command::Reconcile(t) => format!(
            "reconciled template {t} and {}",
            constraints(total.saturating_sub(1))
        ),
        Command::ReconcileAll => {
            format!("reconciled everything ({})", plural(total, "item", "items"))
        }
    };
    let mut parts = Vec::new();
    if t.writes > 0 || (t.failures == 0 && refused == 0) {
        parts.push(plural(t.writes, "write", "writes"));
    }
    // A refused key refused one write (a refusal ends its reconcile); the other failed
    // writes beside them.
    if refused > 0 {
        parts.push(format!(
            "{} refused by the API server",
            plural(refused, "write", "writes")
        ));
    }
    let other = t.failures.saturating_sub(refused);
    if other > 0 {
        parts.push(format!("{other} failed"));
    }
    if t.waiting > 0 {
        parts.push(format!("{} waiting (binding wait)", t.waiting));
    }
    if t.unfinished > 0 {
        let secs = REQUEST_DEADLINE.as_secs();
        parts.push(format!("{} not finished within {secs}s", t.unfinished));
    }
    format!("{what}: {}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_done_when_each_key_was_reconciled_after_it_came_in() {
        let t = Tracker::default();
        let before = Instant::now();
        let keys = [Key::constraint("K8sX", "a"), Key::constraint("K8sX", "b")];
        let mut rx = t.begin(&keys);
        // A reconcile that started before the request does not count.
        t.processed(&keys[0], before, &Outcome::Done, 5, 0);
        let after = Instant::now();
        t.processed(&keys[0], after, &Outcome::Done, 1, 0);
        assert!(rx.try_recv().is_err(), "b is not reconciled yet");
        let conflict = crate::controller::WriteError::Conflict(std::sync::Arc::new(
            crate::cluster::apply::ApplyError::Conflict("update K8sX/b".into()),
        ));
        t.processed(&keys[1], after, &Outcome::Retry(conflict), 0, 0);
        assert!(rx.try_recv().is_err(), "b must be retried");
        let later = Outcome::RequeueAfter(Duration::from_secs(1));
        t.processed(&keys[1], after, &later, 1, 1);
        let answered = rx.try_recv().expect("answered");
        assert_eq!((answered.writes, answered.failures), (2, 1));
        // A refused write is named as such, and a request whose only write was refused does
        // not say "0 writes".
        let refused = Tallied {
            keys: 2,
            failures: 1,
            refused: 1,
            ..Tallied::default()
        };
        assert_eq!(
            summary(&Command::Reconcile("k8sx".into()), &refused),
            "reconciled template k8sx and 1 constraint: 1 write refused by the API server"
        );
        assert_eq!(
            summary(&Command::Replay("k8sx".into()), &answered),
            "replayed 2 constraints of template k8sx: 2 writes, 1 failed, 1 waiting (binding wait)"
        );
        assert!(t.is_empty());
    }

    #[test]
    fn a_request_without_keys_is_answered_at_once_and_a_late_one_at_its_deadline() {
        let t = Tracker::default();
        let mut rx = t.begin(&[]);
        let said =
            |c, rx: &mut oneshot::Receiver<Tallied>| summary(&c, &rx.try_recv().expect("answered"));
        assert_eq!(
            said(Command::Replay("k8sx".into()), &mut rx),
            "replayed 0 constraints of template k8sx: 0 writes"
        );
        let mut rx = t.begin(&[Key::Template("t".into())]);
        t.expire(Duration::ZERO);
        assert_eq!(
            said(Command::ReconcileAll, &mut rx),
            "reconciled everything (1 item): 0 writes, 1 not finished within 60s"
        );
    }
}
