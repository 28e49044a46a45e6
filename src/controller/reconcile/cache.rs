//! The opinion cache of gatekeeper#3287: `constraint kind → Opinion`. The template side is its
//! only writer, through [`OpinionCache::should_generate_vap`]; the constraint side only reads
//! it, and never reads a ConstraintTemplate.
//!
//! A fresh cache is *cold*: a kind without an opinion may be one whose template the template
//! side has not reached yet, not one without a template. Taking it for the latter makes a copy
//! that starts on a converged cluster delete bindings as orphans and write them again. So the
//! constraint side defers such keys ([`OpinionCache::defer_if_cold`]) until the cache is primed:
//! every template of a complete list reconciled once ([`OpinionCache::prime_if_ready`]).

use super::keys::Key;
use super::world::Enqueue;
use crate::core::desired::Opinion;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::time::Instant;

#[derive(Debug, Default)]
pub struct OpinionCache {
    map: RwLock<BTreeMap<String, Opinion>>,
    /// Per kind: constraint reconciles hold it shared while they decide and write; the template
    /// side holds it exclusively while it checks that no binding is left and deletes the VAP,
    /// so a binding write that read an old opinion cannot land after the VAP is gone (I2).
    kind_locks: Mutex<BTreeMap<String, Arc<tokio::sync::RwLock<()>>>>,
    /// Set once, under `tracked`'s lock; read without it on every constraint reconcile.
    primed: AtomicBool,
    /// One lock, short sections.
    tracked: Mutex<Tracked>,
}

/// What the template side remembers beside the opinions.
#[derive(Debug, Default)]
struct Tracked {
    /// Until primed: the templates reconciled, and the constraint keys that found no opinion.
    reconciled: BTreeSet<String>,
    deferred: BTreeSet<Key>,
    /// Templates the template side has seen in its store: name → (uid, kind). Only a template
    /// this copy saw go away may take its constraint CRD with it (deleting a CRD deletes every
    /// constraint of its kind); a CRD found without its template is reported, never deleted.
    seen: BTreeMap<String, (String, String)>,
    /// Templates that stopped generating, and since when: the turn-off waits a moment for a
    /// flip back (see `reconcilers::TURN_OFF_SETTLE`).
    turning_off: BTreeMap<String, Instant>,
}

impl OpinionCache {
    /// The published opinion of `kind` (`None`: no template holds the kind).
    pub fn get(&self, kind: &str) -> Option<Opinion> {
        self.map.read().get(kind).cloned()
    }

    /// The lock of `kind` (see the field's documentation). A new kind's lock first drops
    /// those nobody holds of kinds no template publishes any more: templates come and go for
    /// months, and a lock nobody holds guards nothing (the next caller makes a fresh one).
    pub fn kind_lock(&self, kind: &str) -> Arc<tokio::sync::RwLock<()>> {
        let mut locks = self.kind_locks.lock();
        if let Some(lock) = locks.get(kind) {
            return lock.clone();
        }
        let opinions = self.map.read();
        locks.retain(|k, lock| Arc::strong_count(lock) > 1 || opinions.contains_key(k));
        locks.entry(kind.to_string()).or_default().clone()
    }

    pub fn kinds_of_template(&self, template: &str) -> Vec<String> {
        self.map
            .read()
            .iter()
            .filter(|(_, o)| o.template == template)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Whether a missing opinion now means "no template holds the kind".
    pub fn is_primed(&self) -> bool {
        self.primed.load(Ordering::SeqCst)
    }

    /// The constraint side, finding no opinion for `key`'s kind: while the cache is cold,
    /// remembers `key` for the priming to enqueue and returns true (decide nothing now).
    pub fn defer_if_cold(&self, key: &Key) -> bool {
        if self.is_primed() {
            return false;
        }
        // Checked again under the lock the priming takes: a key is either deferred before the
        // priming drains the set, or sees the cache primed.
        let mut t = self.tracked.lock();
        if self.is_primed() {
            return false;
        }
        t.deferred.insert(key.clone());
        true
    }

    /// Whatever it concluded.
    pub fn template_reconciled(&self, template: &str) {
        if !self.is_primed() {
            self.tracked.lock().reconciled.insert(template.to_string());
        }
    }

    /// Primes the cache once the template store has `listed` and every template in it was
    /// reconciled, then enqueues the deferred keys whose kind still has no opinion (one that got
    /// an opinion since has fanned out to them already). Whether the cache is primed.
    pub fn prime_if_ready(&self, listed: bool, templates: &[String], queue: &impl Enqueue) -> bool {
        if self.is_primed() {
            return true;
        }
        if !listed {
            return false;
        }
        let deferred = {
            let mut t = self.tracked.lock();
            if !templates.iter().all(|n| t.reconciled.contains(n)) {
                return false;
            }
            self.primed.store(true, Ordering::SeqCst);
            t.reconciled.clear();
            std::mem::take(&mut t.deferred)
        };
        let map = self.map.read();
        for key in deferred {
            if let Key::Constraint { kind, .. } = &key
                && map.contains_key(kind)
            {
                continue;
            }
            queue.enqueue(key);
        }
        true
    }

    pub fn saw_template(&self, template: &str, uid: &str, kind: &str) {
        let seen = (uid.to_string(), kind.to_string());
        self.tracked.lock().seen.insert(template.to_string(), seen);
    }

    /// The uid and kind of `template`, if this copy saw it (before it went away).
    pub fn seen_template(&self, template: &str) -> Option<(String, String)> {
        self.tracked.lock().seen.get(template).cloned()
    }

    /// The template's deletion is complete (its CRD is gone): nothing more to remember.
    pub fn forget_template(&self, template: &str) {
        self.tracked.lock().seen.remove(template);
    }

    /// When `template` was first seen not generating since it last did (`now` on the first call).
    pub fn turning_off_since(&self, template: &str, now: Instant) -> Instant {
        let mut t = self.tracked.lock();
        *t.turning_off.entry(template.to_string()).or_insert(now)
    }

    /// The template generates again, or its turn-off went through.
    pub fn settled(&self, template: &str) {
        self.tracked.lock().turning_off.remove(template);
    }

    pub fn all(&self) -> BTreeMap<String, Opinion> {
        self.map.read().clone()
    }

    /// The one writer: publishes `opinion` for `kind` (`None` removes it) and, if that changes
    /// it, re-enqueues the kind's constraints (`constraint_names`: the local store, no list
    /// call) to be reconciled against it. Returns whether it changed.
    pub fn should_generate_vap(
        &self,
        kind: &str,
        opinion: Option<Opinion>,
        constraint_names: impl FnOnce() -> Vec<String>,
        queue: &impl Enqueue,
    ) -> bool {
        let mut map = self.map.write();
        let changed = map.get(kind) != opinion.as_ref();
        match opinion {
            Some(o) => map.insert(kind.to_string(), o),
            None => map.remove(kind),
        };
        drop(map);
        if changed {
            for name in constraint_names() {
                queue.enqueue(Key::constraint(kind, name));
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key enqueued, duplicates included.
    type Keys = Mutex<Vec<Key>>;
    impl Enqueue for Keys {
        fn enqueue(&self, key: Key) {
            self.lock().push(key);
        }
        fn enqueue_after(&self, key: Key, _: std::time::Duration) {
            self.enqueue(key);
        }
    }
    fn take(q: &Keys) -> Vec<Key> {
        std::mem::take(&mut *q.lock())
    }

    fn opinion(template: &str) -> Opinion {
        Opinion {
            template: template.into(),
            generate: true,
            policy_ready: true,
            frozen: false,
            reason: String::new(),
            coverage: crate::core::scope::Coverage::everything(),
            fail_closed: true,
            shape: crate::core::PolicyShape::Narrowed,
            body: None,
        }
    }

    #[test]
    fn cold_until_every_listed_template_is_reconciled_then_deferred_keys_come_back_once() {
        let cache = OpinionCache::default();
        let q = Keys::default();
        let templates = ["a".to_string(), "b".to_string()];
        let k1 = Key::constraint("KA", "x");
        let k2 = Key::constraint("KB", "y");
        assert!(cache.defer_if_cold(&k1));
        assert!(cache.defer_if_cold(&k2));
        assert!(cache.defer_if_cold(&k1), "deferring twice is harmless");
        // No complete list yet: never primed, whatever was reconciled.
        cache.template_reconciled("a");
        cache.template_reconciled("b");
        assert!(!cache.prime_if_ready(false, &templates, &q));
        assert!(take(&q).is_empty());
        // Listed, one template short.
        let three = ["a".to_string(), "b".to_string(), "c".to_string()];
        assert!(!cache.prime_if_ready(true, &three, &q));
        assert!(!cache.is_primed() && take(&q).is_empty());
        // KA gets an opinion meanwhile: its fan-out re-enqueues k1 (from the store).
        cache.should_generate_vap("KA", Some(opinion("a")), || vec!["x".into()], &q);
        assert_eq!(take(&q), vec![k1.clone()]);
        // Every listed template reconciled: primed, each deferred key whose kind still has
        // no opinion enqueued once.
        assert!(cache.prime_if_ready(true, &templates, &q));
        assert!(cache.is_primed());
        assert_eq!(take(&q), vec![k2]);
        // Primed: nothing is deferred any more, and priming again enqueues nothing.
        assert!(!cache.defer_if_cold(&k1));
        assert!(cache.prime_if_ready(true, &three, &q));
        assert!(take(&q).is_empty());
    }

    #[test]
    fn the_locks_of_gone_kinds_are_dropped_unless_held() {
        let cache = OpinionCache::default();
        cache.should_generate_vap("K8sLive", Some(opinion("live")), Vec::new, &Keys::default());
        let held = cache.kind_lock("K8sHeld");
        for kind in ["K8sLive", "K8sGone1", "K8sGone2"] {
            drop(cache.kind_lock(kind));
        }
        let again = cache.kind_lock("K8sHeld");
        assert!(Arc::ptr_eq(&held, &again), "a held lock is the same lock");
        drop(cache.kind_lock("K8sNew"));
        let kinds: Vec<String> = cache.kind_locks.lock().keys().cloned().collect();
        assert_eq!(kinds, ["K8sHeld", "K8sLive", "K8sNew"]);
    }

    #[test]
    fn an_empty_complete_list_primes_at_once() {
        let cache = OpinionCache::default();
        let q = Keys::default();
        assert!(cache.prime_if_ready(true, &[], &q));
        assert!(!cache.defer_if_cold(&Key::constraint("K", "c")));
    }
}
