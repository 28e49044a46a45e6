//! Another writer undoing ours: when to stop writing an object, and when to try again.
//!
//! The reconciler converges objects it owns. A second writer that converges the same objects
//! to something else (Gatekeeper's own generator, a GitOps tool, a person's `kubectl edit` in a
//! loop) makes both rewrite each other for ever: thousands of writes a minute, Events, audit
//! log and etcd history. This table counts, per object, how often this copy's write undid a
//! change another field manager made; past [`Tuning::undos`] within [`Tuning::window`] the
//! object is contested: not written for a hold, which doubles each time the other writer
//! undoes the one write tried after it, and ends when that write stands for a window.
//!
//! Pure: the caller says what time it is (a monotonic time since an epoch of its choosing),
//! so the rules are tested without a clock.

use crate::model::ObjectId;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// A point in time: how long after the caller's epoch (a monotonic clock's).
pub type Instant = Duration;

/// The thresholds. A person editing an object by hand undoes at most a few writes a minute;
/// a controller in a loop, hundreds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// Undos of one object within `window` that make it contested.
    pub undos: usize,
    pub window: Duration,
    /// The first hold; each renewed contest doubles it, up to `longest_hold`.
    pub first_hold: Duration,
    pub longest_hold: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            undos: 5,
            window: Duration::from_secs(60),
            first_hold: Duration::from_secs(120),
            longest_hold: Duration::from_secs(1800),
        }
    }
}

/// A contested object, as views and `check` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contest {
    pub object: ObjectId,
    /// The field manager whose changes this copy's writes undid (the last one seen).
    pub other: String,
    /// How many of this copy's writes undid the other's in the window that started it.
    pub undos: usize,
    /// When the object became contested.
    pub since: Instant,
    /// When one write is tried again.
    pub held_until: Instant,
}

/// What [`Contests::undid`] decided about the write it was told of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undo {
    /// Counted; not (yet) a contest.
    Counted,
    /// The object just became contested (say so, once).
    Started(Contest),
    /// The write tried after a hold was undone again: held again, for longer (not said again).
    HeldAgain(Contest),
}

#[derive(Debug)]
struct Record {
    /// When this copy's recent writes undid another's, oldest first, within the window.
    undone_at: VecDeque<Instant>,
    other: String,
    held: Option<Held>,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    since: Instant,
    until: Instant,
    length: Duration,
    undos: usize,
    /// When the one write after the hold went (it undid the other writer's last change).
    probed_at: Option<Instant>,
}

/// Every object some other writer changes under this copy.
#[derive(Debug, Default)]
pub struct Contests {
    tuning: Tuning,
    records: BTreeMap<ObjectId, Record>,
}

impl Contests {
    pub fn new(tuning: Tuning) -> Self {
        Contests {
            tuning,
            records: BTreeMap::new(),
        }
    }

    /// How long `object` is not to be written from `now`, if it is held.
    pub fn held(&self, object: &ObjectId, now: Instant) -> Option<Duration> {
        let held = self.records.get(object)?.held?;
        (now < held.until).then(|| held.until - now)
    }

    /// A write of `object` by this copy undid a change by field manager `other`, at `now`.
    pub fn undid(&mut self, object: &ObjectId, other: &str, now: Instant) -> Undo {
        let tuning = self.tuning;
        let record = self
            .records
            .entry(object.clone())
            .or_insert_with(|| Record {
                undone_at: VecDeque::new(),
                other: other.to_string(),
                held: None,
            });
        record.other = other.to_string();
        if let Some(mut held) = record.held {
            // The one write after a hold undoes the other writer's last change by definition:
            // it is the probe. Whether the other writer is still there shows in the next undo.
            if held.probed_at.is_none() && now >= held.until {
                held.probed_at = Some(now);
                record.held = Some(held);
                return Undo::Counted;
            }
            // The probe was undone (this write repairs it again): held again, for longer.
            held.length = held.length.saturating_mul(2).min(tuning.longest_hold);
            held.until = now + held.length;
            held.probed_at = None;
            record.held = Some(held);
            return Undo::HeldAgain(contest(object, record, &held));
        }
        record.undone_at.push_back(now);
        while record
            .undone_at
            .front()
            .is_some_and(|t| now.saturating_sub(*t) > tuning.window)
        {
            record.undone_at.pop_front();
        }
        let undos = record.undone_at.len();
        if undos < tuning.undos {
            return Undo::Counted;
        }
        let held = Held {
            since: now,
            until: now + tuning.first_hold,
            length: tuning.first_hold,
            undos,
            probed_at: None,
        };
        record.held = Some(held);
        record.undone_at.clear();
        Undo::Started(contest(object, record, &held))
    }

    /// Forgets what is over at `now`: counts older than the window, and contests whose probe
    /// (the write after the hold) stood for a window, or whose hold ended a window ago with no
    /// write needed. Returns the contests that ended.
    pub fn settle(&mut self, now: Instant) -> Vec<Contest> {
        let window = self.tuning.window;
        let mut ended = Vec::new();
        self.records.retain(|object, record| {
            if let Some(held) = record.held {
                let calm_since = held.probed_at.unwrap_or(held.until);
                if now < held.until || now.saturating_sub(calm_since) < window {
                    return true;
                }
                ended.push(contest(object, record, &held));
                return false;
            }
            let recent = |t: &Instant| now.saturating_sub(*t) <= window;
            record.undone_at.retain(recent);
            !record.undone_at.is_empty()
        });
        ended
    }

    /// The contested objects, by name.
    pub fn current(&self) -> Vec<Contest> {
        let held = self.records.iter().filter_map(|(object, record)| {
            let h = record.held.as_ref()?;
            Some(contest(object, record, h))
        });
        held.collect()
    }
}

fn contest(object: &ObjectId, record: &Record, held: &Held) -> Contest {
    Contest {
        object: object.clone(),
        other: record.other.clone(),
        undos: held.undos,
        since: held.since,
        held_until: held.until,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(kind: &str, name: &str) -> ObjectId {
        ObjectId::new(kind, name)
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_few_undos_are_a_person_editing_and_many_are_a_contest() {
        let vap = &id("ValidatingAdmissionPolicy", "gatekeeper-k8srequiredlabels");
        let t0 = secs(1_000_000);
        let mut c = Contests::new(Tuning::default());
        // Four undos a minute apart: never five within a window.
        for i in 0..4 {
            assert_eq!(
                c.undid(vap, "kubectl-edit", t0 + secs(61 * i)),
                Undo::Counted
            );
        }
        assert_eq!(
            c.undid(vap, "kubectl-edit", t0 + secs(61 * 4)),
            Undo::Counted
        );
        assert!(c.current().is_empty());
        // Five within the window: contested, held for the first hold.
        let t1 = t0 + secs(1000);
        for i in 0..4 {
            assert_eq!(c.undid(vap, "gatekeeper", t1 + secs(i)), Undo::Counted);
        }
        let Undo::Started(contest) = c.undid(vap, "gatekeeper", t1 + secs(4)) else {
            panic!("the fifth undo within a minute starts a contest");
        };
        assert_eq!((contest.other.as_str(), contest.undos), ("gatekeeper", 5));
        assert_eq!(c.held(vap, t1 + secs(4)), Some(secs(120)));
        assert_eq!(c.held(vap, t1 + secs(64)), Some(secs(60)));
        assert_eq!(c.held(vap, t1 + secs(124)), None, "one write is tried");
        assert_eq!(
            c.held(&id("ValidatingAdmissionPolicyBinding", "other"), t1),
            None
        );
        assert_eq!(c.current(), vec![contest]);
    }

    #[test]
    fn a_hold_doubles_while_the_other_writer_stays_and_ends_when_it_goes() {
        let vap = &id("ValidatingAdmissionPolicy", "gatekeeper-k8srequiredlabels");
        let t0 = secs(1_000_000);
        let mut c = Contests::new(Tuning::default());
        for i in 0..5 {
            c.undid(vap, "gatekeeper", t0 + secs(i));
        }
        // The write tried after the hold (the probe) undoes the other writer's last change:
        // counted as the probe, not as the other writer still being there.
        let probe = t0 + secs(4 + 120);
        assert_eq!(c.undid(vap, "gatekeeper", probe), Undo::Counted);
        // The other writer undid the probe, so the next write undoes it again: held for twice
        // as long.
        let after = probe + secs(1);
        let Undo::HeldAgain(again) = c.undid(vap, "gatekeeper", after) else {
            panic!("held again");
        };
        assert_eq!(again.held_until, after + secs(240));
        assert_eq!(again.since, t0 + secs(4), "the contest's start stays");
        // Doubling stops at the longest hold.
        let mut at = after;
        for _ in 0..10 {
            at += secs(3600);
            assert_eq!(c.undid(vap, "gatekeeper", at), Undo::Counted, "the probe");
            at += secs(1);
            c.undid(vap, "gatekeeper", at);
        }
        assert_eq!(c.held(vap, at), Some(secs(1800)));
        // The other writer gone: the probe after the hold stands. Within a window of it: not
        // over yet.
        let probe = at + secs(1800);
        assert_eq!(c.undid(vap, "gatekeeper", probe), Undo::Counted);
        assert!(c.settle(probe + secs(30)).is_empty());
        // The probe stood for a window: over, said once, forgotten.
        let ended = c.settle(probe + secs(61));
        assert_eq!(ended.len(), 1);
        assert_eq!(&ended[0].object, vap);
        assert!(c.current().is_empty());
        assert!(c.settle(at + secs(4000)).is_empty());
        // Counts older than the window are forgotten too: four old and one new start nothing.
        let t2 = at + secs(5000);
        for i in 0..4 {
            c.undid(vap, "gatekeeper", t2 + secs(i));
        }
        c.settle(t2 + secs(200));
        assert_eq!(c.undid(vap, "gatekeeper", t2 + secs(201)), Undo::Counted);
    }
}
