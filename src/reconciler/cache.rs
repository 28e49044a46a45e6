//! The opinion cache of gatekeeper#3287: `constraint kind → Opinion`. The template side is its
//! only writer, through [`OpinionCache::should_generate_vap`]; the constraint side only reads
//! it, and never reads a ConstraintTemplate.

use super::queue::Key;
use super::world::{ConstraintStore, Enqueue};
use crate::core::desired::Opinion;
use std::collections::BTreeMap;
use std::sync::RwLock;

#[derive(Debug, Default)]
pub struct OpinionCache {
    map: RwLock<BTreeMap<String, Opinion>>,
    /// Per kind: constraint reconciles hold it shared while they decide and write; the template
    /// side holds it exclusively while it checks that no binding is left and deletes the VAP,
    /// so a binding write that read an old opinion cannot land after the VAP is gone (I2).
    kind_locks: std::sync::Mutex<BTreeMap<String, std::sync::Arc<tokio::sync::RwLock<()>>>>,
}

impl OpinionCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The published opinion of `kind` (`None`: no template holds the kind).
    pub fn get(&self, kind: &str) -> Option<Opinion> {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(kind)
            .cloned()
    }

    /// The lock of `kind` (see the field's documentation).
    pub fn kind_lock(&self, kind: &str) -> std::sync::Arc<tokio::sync::RwLock<()>> {
        self.kind_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(kind.to_string())
            .or_default()
            .clone()
    }

    /// The kinds whose opinion template `template` published.
    pub fn kinds_of_template(&self, template: &str) -> Vec<String> {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, o)| o.template == template)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// A copy of the whole cache (for views and tests).
    pub fn all(&self) -> BTreeMap<String, Opinion> {
        self.map.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The one writer. Publishes `opinion` for `kind` (`None` removes it); when the value
    /// changes, re-enqueues every constraint of `kind` from the local store (no list call), so
    /// every constraint is reconciled against what the template side last concluded.
    /// Returns whether the value changed.
    pub fn should_generate_vap(
        &self,
        kind: &str,
        opinion: Option<Opinion>,
        store: &impl ConstraintStore,
        queue: &impl Enqueue,
    ) -> bool {
        let changed = {
            let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
            let old = map.get(kind);
            if old == opinion.as_ref() {
                false
            } else {
                match opinion {
                    Some(o) => map.insert(kind.to_string(), o),
                    None => map.remove(kind),
                };
                true
            }
        };
        if changed {
            for name in store.constraint_names(kind) {
                queue.enqueue(Key::constraint(kind, name));
            }
        }
        changed
    }
}
