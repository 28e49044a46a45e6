//! What this copy knows about itself, behind one lock: its event log, what it cannot read,
//! whether it may write (and why not), whether every watch has listed, the objects whose
//! writes are forbidden. Every change wakes the publisher ([`Status::changed`]).

use super::log::Log;
use super::state::{
    AccessError, AccessErrorKind, EventResult, EventVerb, ReconcileEvent, WriteError,
};
use crate::model::ObjectRef;
use chrono::Utc;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashSet};
use tokio::sync::watch;

#[derive(Default)]
struct Inner {
    /// This copy's reconcile actions; published as it is (a clone shares the entries).
    events: Log<ReconcileEvent>,
    /// Resources this copy cannot read, by resource name.
    access: BTreeMap<String, AccessError>,
    /// What looks like Gatekeeper's own generator, as last detected.
    gatekeeper_generator: Option<String>,
    /// Writes are allowed at all (false: read-only, or refused because of Gatekeeper).
    writes_enabled: bool,
    /// Every watch, including every constraint kind's, has listed once.
    synced: bool,
    /// Objects whose last write was refused as forbidden (logged once each, until one passes).
    forbidden: HashSet<String>,
    /// When the queue last drained with everything listed.
    last_sync: Option<chrono::DateTime<Utc>>,
    /// Bodies the server refused as invalid (422), by object: (digest, refusal, when). The
    /// same body is not sent again until it changes or [`REFUSED_FOR`] passes.
    refused: std::collections::HashMap<String, (u64, WriteError, std::time::Instant)>,
}

/// How long a refused body is not sent again (then a resync may try it once more).
pub const REFUSED_FOR: std::time::Duration = std::time::Duration::from_secs(600);

/// `s` cut to at most `max` bytes, on a character boundary, with `…` where it was cut.
fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut cut = max.saturating_sub(3);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &s[..cut])
}

/// How many refused writes the leader publishes on its Lease (the annotation stays small).
pub const PUBLISHED_REFUSALS: usize = 20;

pub struct Status {
    inner: Mutex<Inner>,
    /// Bumped on every change views show.
    version: watch::Sender<u64>,
}

impl Default for Status {
    fn default() -> Self {
        Status {
            inner: Mutex::default(),
            version: watch::Sender::new(0),
        }
    }
}

impl Status {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock())
    }

    /// Something views show changed (a store, the queue, the status): the publisher looks.
    pub fn touch(&self) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// A receiver that sees every [`Status::touch`].
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    pub fn log(&self, verb: EventVerb, object: ObjectRef, result: EventResult, message: String) {
        self.with(|s| {
            s.events.push(ReconcileEvent {
                time: Utc::now(),
                verb,
                object,
                result,
                message,
            });
        });
        self.touch();
    }

    /// The event log as it is now: cheap (it copies no entry).
    pub fn events(&self) -> Log<ReconcileEvent> {
        self.with(|s| s.events.clone())
    }

    /// Records (or clears, with `None`) a read problem of `resource`.
    pub fn set_access(&self, resource: &str, error: Option<AccessError>) {
        let changed = self.with(|s| match error {
            Some(e) => s.access.insert(resource.to_string(), e.clone()).as_ref() != Some(&e),
            None => s.access.remove(resource).is_some(),
        });
        if changed {
            self.touch();
        }
    }

    pub fn access_error(&self, resource: &str) -> Option<AccessError> {
        self.with(|s| s.access.get(resource).cloned())
    }

    pub fn access_errors(&self) -> Vec<AccessError> {
        self.with(|s| s.access.values().cloned().collect())
    }

    /// Whether every resource of `unknown` is unreadable for a reason retrying does not fix
    /// (forbidden, not served).
    pub fn definitely_unreadable(&self, unknown: &[(String, String)]) -> bool {
        self.with(|s| {
            unknown.iter().all(|(r, _)| {
                s.access
                    .get(r)
                    .is_some_and(|e| e.kind != AccessErrorKind::Other)
            })
        })
    }

    /// What is known of `resources` that are not known now: (resource, why).
    pub fn why_unknown(&self, resources: Vec<String>) -> Vec<(String, String)> {
        self.with(|s| {
            resources
                .into_iter()
                .map(|r| {
                    let why = s
                        .access
                        .get(&r)
                        .map(|e| e.message.clone())
                        .unwrap_or_else(|| format!("{r}: not listed and watched yet"));
                    (r, why)
                })
                .collect()
        })
    }

    pub fn writes_enabled(&self) -> bool {
        self.with(|s| s.writes_enabled)
    }

    pub fn set_writes_enabled(&self, on: bool) {
        self.with(|s| s.writes_enabled = on);
        self.touch();
    }

    pub fn gatekeeper_generator(&self) -> Option<String> {
        self.with(|s| s.gatekeeper_generator.clone())
    }

    pub fn set_gatekeeper_generator(&self, found: Option<String>) {
        self.with(|s| s.gatekeeper_generator = found);
        self.touch();
    }

    pub fn synced(&self) -> bool {
        self.with(|s| s.synced)
    }

    pub fn set_synced(&self) {
        self.with(|s| s.synced = true);
        self.touch();
    }

    pub fn last_sync(&self) -> Option<chrono::DateTime<Utc>> {
        self.with(|s| s.last_sync)
    }

    /// Not a change views wait for (it is read with the next one).
    pub fn set_last_sync(&self, at: chrono::DateTime<Utc>) {
        self.with(|s| s.last_sync = Some(at));
    }

    /// A write of `object` was forbidden; true the first time (until it is allowed again).
    pub fn forbidden(&self, object: &str) -> bool {
        self.with(|s| s.forbidden.insert(object.to_string()))
    }

    /// A write of `object` passed; true if it was forbidden before.
    pub fn allowed(&self, object: &str) -> bool {
        self.with(|s| s.forbidden.remove(object))
    }

    /// The server refused `body` of `object` as invalid.
    pub fn refused(&self, object: &str, body: u64, refusal: &WriteError) {
        self.with(|s| {
            s.refused.insert(
                object.to_string(),
                (body, refusal.clone(), std::time::Instant::now()),
            )
        });
    }

    /// How `body` of `object` was refused, if this very body was refused recently.
    pub fn refusal(&self, object: &str, body: u64) -> Option<WriteError> {
        self.with(|s| {
            s.refused.retain(|_, (_, _, at)| at.elapsed() < REFUSED_FOR);
            s.refused
                .get(object)
                .filter(|(b, _, _)| *b == body)
                .map(|(_, m, _)| m.clone())
        })
    }

    /// The writes refused now (object, the server's message), at most [`PUBLISHED_REFUSALS`],
    /// each message at most 512 bytes: what the leader publishes with its health, for views
    /// elsewhere to show on the object.
    pub fn refusals(&self) -> Vec<(String, String)> {
        self.with(|s| {
            s.refused.retain(|_, (_, _, at)| at.elapsed() < REFUSED_FOR);
            let mut out: Vec<(String, String)> = s
                .refused
                .iter()
                .map(|(o, (_, e, _))| (o.clone(), clip(&e.to_string(), 512)))
                .collect();
            out.sort();
            out.truncate(PUBLISHED_REFUSALS);
            out
        })
    }

    /// A write of `object` passed: no refusal stands.
    pub fn accepted(&self, object: &str) {
        self.with(|s| s.refused.remove(object));
    }

    /// Whether the last write of some object was forbidden.
    pub fn any_forbidden(&self) -> bool {
        self.with(|s| !s.forbidden.is_empty())
    }
}
