//! Tier 2: the reconciler logic under adversarial schedules, without a server.
//!
//! The same `controller::logic` code, driven by the same worker step
//! (`controller::worker::process` on the live `SharedQueue`), runs here against an in-memory
//! world (stores + writes + a virtual clock). Every write is checked against I1/I2 as it happens;
//! every quiescent point is checked against I3 with the pure analysis as the oracle
//! (`analyze(snapshot).plan` empty, no unexpected warning/error finding); I4 by a full resync
//! that must send zero writes.

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

mod support;

use chrono::{DateTime, Utc};
use kubectl_vap::cluster::apply::ApplyError;
use kubectl_vap::controller::cache::OpinionCache;
use kubectl_vap::controller::queue::{Key, SharedQueue};
use kubectl_vap::controller::reconcilers::Ctx;
use kubectl_vap::controller::reconcilers::Outcome;
use kubectl_vap::controller::worker::process;
use kubectl_vap::controller::world::{
    ConstraintStore, Enqueue, Read, TemplateStore, Unreadable, WriteError, WriteOutcome, Writer,
};
use kubectl_vap::core::analysis::analyze;
use kubectl_vap::core::desired::CrdState;
use kubectl_vap::core::{Code, Options, PlannedWrite, PolicyShape, Severity, Verb};
use kubectl_vap::load::cel::default_options;
use kubectl_vap::model::{Binding, Constraint, ConstraintTemplate, ObjectId, Policy, Source};
use kubectl_vap::snapshot::Snapshot;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// The in-memory world
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Default)]
struct State {
    templates: BTreeMap<String, Value>,
    constraints: BTreeMap<(String, String), Value>,
    /// kind → CRD
    crds: BTreeMap<String, Value>,
    policies: BTreeMap<String, Value>,
    bindings: BTreeMap<String, Value>,
    counter: u64,
    /// Writes that reached the "server": `verb kind/name`.
    writes: Vec<String>,
    /// I1/I2 violations seen at write time.
    violations: Vec<String>,
    /// Fault injection: every n-th write attempt fails (0: never), alternating a 409 conflict
    /// and a 500, before it reaches the "server".
    fail_every: u64,
    attempts: u64,
    /// Policies deleted by someone else and not re-created yet: a binding written in that
    /// window (before the VAP watch event reaches the template side) is not an I1 violation.
    externally_deleted: std::collections::BTreeSet<String>,
    /// Stores that cannot be read now ("templates", "crds", "policies", "bindings", or a
    /// constraint kind): every read of them is `Unknown`.
    unknown: std::collections::BTreeSet<String>,
    /// Fault injection: objects whose every write the server refuses (422).
    refused: std::collections::BTreeSet<ObjectId>,
    /// The last failed write of each object, kept as the controller's status keeps it: until
    /// a write of it passes or none is needed (`Writer::not_needed`).
    failed: std::collections::BTreeSet<ObjectId>,
}

impl State {
    fn read<T>(&self, store: &str, f: impl FnOnce() -> T) -> Read<T> {
        if self.unknown.contains(store) {
            Read::Unknown(Unreadable(store.to_string()))
        } else {
            Read::Known(f())
        }
    }
}

/// The live workers' queue, and their step ([`process`]): the tests run what runs live.
type MemQueue = SharedQueue;

struct World {
    st: Mutex<State>,
    cache: Arc<OpinionCache>,
    queue: Arc<MemQueue>,
    opts: Options,
    /// Reconciles run concurrently: writes yield before they land (a request in flight), and
    /// I1 is checked on what a concurrent world can promise (the policy exists when a
    /// binding lands; the opinion may flip while the request is in flight).
    concurrent: std::sync::atomic::AtomicBool,
    yields: std::sync::atomic::AtomicU64,
    /// Tokio's clock, paused: the queue's due times and backoff run on it, as live, and the
    /// world's wall clock is [`t0`] plus the time it has advanced ([`World::now_`]). It moves
    /// only by [`World::advance_by`]; a restarted or forked world shares it (the same
    /// cluster, the same time).
    clock: Arc<(tokio::runtime::Runtime, tokio::time::Instant)>,
}

/// A paused tokio clock for a world (a runtime that only keeps the time), and when it began
/// (the world's [`t0`]).
fn paused_clock() -> Arc<(tokio::runtime::Runtime, tokio::time::Instant)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let start = rt.block_on(async { tokio::time::Instant::now() });
    Arc::new((rt, start))
}

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn controller_of(v: &Value) -> Option<(String, String, String)> {
    v["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == json!(true))
        .map(|r| {
            (
                r["apiVersion"].as_str().unwrap_or_default().to_string(),
                r["kind"].as_str().unwrap_or_default().to_string(),
                r["name"].as_str().unwrap_or_default().to_string(),
            )
        })
}

impl World {
    fn new(opts: Options) -> World {
        let w = World::with_state(State::default(), opts, paused_clock());
        // The template watch listed an empty store.
        assert!(w.cache.prime_if_ready(true, &[], &*w.queue));
        w
    }

    /// `st` behind a cold cache and an empty queue.
    fn with_state(
        st: State,
        opts: Options,
        clock: Arc<(tokio::runtime::Runtime, tokio::time::Instant)>,
    ) -> World {
        World {
            clock,
            st: Mutex::new(st),
            cache: Arc::new(OpinionCache::default()),
            queue: Arc::new(SharedQueue::default()),
            opts,
            concurrent: Default::default(),
            yields: Default::default(),
        }
    }

    /// A new copy started on the same cluster: the same objects, a cold cache, every key
    /// queued (the watches' first lists).
    fn restart(&self) -> World {
        self.restart_with(self.opts.clone())
    }

    /// [`World::restart`] with other options (another `--policy-shape`).
    fn restart_with(&self, opts: Options) -> World {
        let st = self.st.lock().unwrap().clone();
        let w = World::with_state(st, opts, self.clock.clone());
        w.enqueue_all();
        w
    }

    fn next(&self, st: &mut State) -> u64 {
        st.counter += 1;
        st.counter
    }

    // --- user / Gatekeeper actions (each is a watch event) ---

    fn set_template(&self, name: &str, generate: Option<bool>) {
        let mut source = json!({
            "validations": [{ "expression": "has(object.metadata.labels)", "message": "labels" }]
        });
        if let Some(g) = generate {
            source["generateVAP"] = json!(g);
        }
        let kind = kind_of(name);
        let since = self.now_();
        let mut st = self.put_template(name, source);
        // The constraint CRD exists with the template (created by an earlier run, exactly as
        // the template defines it).
        if !st.crds.contains_key(&kind) {
            let crd = crd_json(&st.templates[name], &kind, since);
            st.crds.insert(kind.clone(), crd);
            drop(st);
            self.crd_event(&kind);
        } else {
            drop(st);
        }
        self.queue.enqueue(Key::Template(name.into()));
    }

    fn set_invalid_template(&self, name: &str) {
        let st = self.put_template(
            name,
            json!({ "failurePolicy": "Sometimes", "validations": [{ "expression": "true" }] }),
        );
        drop(st);
        self.queue.enqueue(Key::Template(name.into()));
    }

    /// Stores template `name` (kind `kind_of(name)`) with CEL `source`, keeping its uid; returns
    /// the state, still locked.
    fn put_template(&self, name: &str, source: Value) -> std::sync::MutexGuard<'_, State> {
        let mut st = self.st.lock().unwrap();
        let n = self.next(&mut st);
        let uid = st
            .templates
            .get(name)
            .map(|t| t["metadata"]["uid"].clone())
            .unwrap_or(json!(format!("uid-t-{n}")));
        let mut t = support::objects::template(name, &kind_of(name), source);
        t["metadata"] = json!({ "name": name, "uid": uid, "resourceVersion": n.to_string() });
        st.templates.insert(name.into(), t);
        st
    }

    /// Deletes the template; the API server's GC (modelled) deletes its CRD and constraints.
    fn delete_template(&self, name: &str) {
        let kind = kind_of(name);
        let mut st = self.st.lock().unwrap();
        st.templates.remove(name);
        st.crds.remove(&kind);
        let gone: Vec<(String, String)> = st
            .constraints
            .keys()
            .filter(|(k, _)| *k == kind)
            .cloned()
            .collect();
        for key in &gone {
            st.constraints.remove(key);
        }
        drop(st);
        self.queue.enqueue(Key::Template(name.into()));
        for (k, n) in gone {
            self.queue.enqueue(Key::constraint(k, n));
        }
    }

    fn set_constraint(&self, kind: &str, name: &str, action: &str) {
        let mut st = self.st.lock().unwrap();
        let n = self.next(&mut st);
        let uid = st
            .constraints
            .get(&(kind.to_string(), name.to_string()))
            .map(|c| c["metadata"]["uid"].clone())
            .unwrap_or(json!(format!("uid-c-{n}")));
        let spec = if action == "scoped-audit" {
            json!({ "enforcementAction": "scoped",
                    "scopedEnforcementActions": [{ "action": "deny", "enforcementPoints": [{ "name": "validation.gatekeeper.sh" }] }] })
        } else {
            json!({ "enforcementAction": action })
        };
        st.constraints.insert(
            (kind.into(), name.into()),
            json!({
                "apiVersion": "constraints.gatekeeper.sh/v1beta1",
                "kind": kind,
                "metadata": { "name": name, "uid": uid, "resourceVersion": n.to_string() },
                "spec": spec
            }),
        );
        drop(st);
        // As the constraint watch does: the constraint, and its kind's template (its VAP
        // matches what the kind's constraints match).
        self.queue.enqueue(Key::constraint(kind, name));
        self.queue.enqueue(Key::Template(kind.to_lowercase()));
    }

    fn delete_constraint(&self, kind: &str, name: &str) {
        self.st
            .lock()
            .unwrap()
            .constraints
            .remove(&(kind.to_string(), name.to_string()));
        self.queue.enqueue(Key::constraint(kind, name));
        self.queue.enqueue(Key::Template(kind.to_lowercase()));
    }

    fn crd_event(&self, kind: &str) {
        self.queue.enqueue(Key::Template(kind.to_lowercase()));
        for n in self.constraint_names(kind) {
            self.queue.enqueue(Key::constraint(kind, n));
        }
    }

    /// Someone deletes an object we own (drift): the watch maps it to its owner.
    fn external_delete_policy(&self, name: &str) {
        let v = {
            let mut st = self.st.lock().unwrap();
            st.externally_deleted.insert(name.to_string());
            st.policies.remove(name)
        };
        if let Some(v) = v {
            self.owner_event(&v);
        }
    }
    fn external_delete_binding(&self, name: &str) {
        let v = self.st.lock().unwrap().bindings.remove(name);
        if let Some(v) = v {
            self.owner_event(&v);
        }
    }
    fn external_edit_binding(&self, name: &str) {
        let mut st = self.st.lock().unwrap();
        let n = self.next(&mut st);
        let v = st.bindings.get_mut(name).map(|b| {
            b["spec"]["validationActions"] = json!(["Audit"]);
            b["metadata"]["resourceVersion"] = json!(n.to_string());
            b.clone()
        });
        drop(st);
        if let Some(v) = v {
            self.owner_event(&v);
        }
    }
    fn external_edit_policy(&self, name: &str) {
        let mut st = self.st.lock().unwrap();
        let n = self.next(&mut st);
        let v = st.policies.get_mut(name).map(|p| {
            p["spec"]["validations"] = json!([{ "expression": "true" }]);
            p["metadata"]["resourceVersion"] = json!(n.to_string());
            p.clone()
        });
        drop(st);
        if let Some(v) = v {
            self.owner_event(&v);
        }
    }
    /// An object created by someone else (foreign, legacy, orphan).
    fn put_binding(&self, v: Value) {
        let name = v["metadata"]["name"].as_str().unwrap().to_string();
        self.st.lock().unwrap().bindings.insert(name, v.clone());
        self.owner_event(&v);
    }
    fn put_policy(&self, v: Value) {
        let name = v["metadata"]["name"].as_str().unwrap().to_string();
        self.st.lock().unwrap().policies.insert(name, v.clone());
        self.owner_event(&v);
    }

    /// The VAP/VAPB watches map an event to the controller owner (the live mapping).
    fn owner_event(&self, v: &Value) {
        if let Some((api_version, kind, name)) = controller_of(v) {
            if api_version.starts_with("templates.gatekeeper.sh/") {
                self.queue.enqueue(Key::Template(name));
            } else if api_version.starts_with("constraints.gatekeeper.sh/") {
                self.queue.enqueue(Key::constraint(kind, name));
            }
        }
    }

    // --- observation ---

    fn snapshot(&self) -> Snapshot {
        let st = self.st.lock().unwrap();
        let mut s = Snapshot::default();
        let all = st
            .templates
            .values()
            .chain(st.constraints.values())
            .chain(st.crds.values())
            .chain(st.policies.values())
            .chain(st.bindings.values());
        for v in all {
            s.insert(v.clone(), Source::default()).unwrap();
        }
        s.now = Some(self.now_());
        s
    }

    fn writes(&self) -> Vec<String> {
        self.st.lock().unwrap().writes.clone()
    }
    /// The writes after the first `n`.
    fn writes_since(&self, n: usize) -> Vec<String> {
        self.writes()[n..].to_vec()
    }
    fn violations(&self) -> Vec<String> {
        self.st.lock().unwrap().violations.clone()
    }
    /// The world's wall clock: [`t0`] and the time its tokio clock has advanced.
    fn now_(&self) -> DateTime<Utc> {
        t0() + chrono::Duration::from_std(self.instant() - self.clock.1).unwrap()
    }

    // --- the driver ---

    fn ctx(&self) -> Ctx<'_, SharedQueue, World> {
        Ctx {
            cache: &self.cache,
            queue: &self.queue,
            opts: &self.opts,
            writer: self,
        }
    }

    /// One worker step on `key`, which the caller took from the queue (on the world's clock).
    fn run_key(&self, key: &Key) {
        let _clock = self.clock.0.enter();
        let done = futures::executor::block_on(process(key.clone(), self, &self.ctx()));
        if let Outcome::Retry(r) = done.outcome
            && self.st.lock().unwrap().fail_every == 0
        {
            panic!("unexpected retry in the in-memory world: {r}");
        }
    }

    /// Processes `key` if it is ready; returns whether it ran.
    fn step(&self, key: &Key) -> bool {
        let taken = self.queue.take(key);
        if taken {
            self.run_key(key);
        }
        taken
    }

    /// Processes the first ready key matching `pred`.
    fn step_where(&self, pred: impl Fn(&Key) -> bool) -> bool {
        let ready = self.queue.ready_keys();
        match ready.into_iter().find(|k| pred(k)) {
            Some(k) => self.step(&k),
            None => false,
        }
    }

    /// Runs until nothing is queued, advancing the virtual clock to delayed keys. Returns
    /// `Err` if the world does not quiesce (a requeue loop).
    fn drain(&self) -> Result<(), String> {
        for _ in 0..20_000 {
            let (key, due) = self.pop();
            match key {
                Some(k) => self.run_key(&k),
                None => match due {
                    Some(at) => {
                        let wait = at.saturating_duration_since(self.instant());
                        if self.now_() + chrono::Duration::from_std(wait).unwrap() - t0()
                            > chrono::Duration::hours(1)
                        {
                            return Err("requeued for more than an hour of virtual time: the world does not converge".into());
                        }
                        self.advance_by(wait);
                    }
                    None => return Ok(()),
                },
            }
        }
        Err("more than 20000 reconciles: the world does not quiesce".into())
    }

    fn advance(&self, secs: u64) {
        self.advance_by(Duration::from_secs(secs));
    }

    /// Moves the world's clock (tokio's, which the queue reads, and so the wall clock).
    fn advance_by(&self, by: Duration) {
        self.clock.0.block_on(tokio::time::advance(by));
    }

    /// Tokio's clock now, as the queue reads it.
    fn instant(&self) -> tokio::time::Instant {
        let _clock = self.clock.0.enter();
        tokio::time::Instant::now()
    }

    /// The next ready key and when the next delayed one is due, on the world's clock.
    fn pop(&self) -> (Option<Key>, Option<tokio::time::Instant>) {
        let _clock = self.clock.0.enter();
        self.queue.pop()
    }

    /// Every key the watches would list on a resync.
    fn enqueue_all(&self) {
        let st = self.st.lock().unwrap();
        let mut keys: Vec<Key> = st
            .templates
            .keys()
            .map(|t| Key::Template(t.clone()))
            .collect();
        keys.extend(st.constraints.keys().map(|(k, n)| Key::constraint(k, n)));
        for v in st.policies.values().chain(st.bindings.values()) {
            if let Some((api_version, kind, name)) = controller_of(v) {
                if api_version.starts_with("templates.") {
                    keys.push(Key::Template(name));
                } else {
                    keys.push(Key::constraint(kind, name));
                }
            }
        }
        drop(st);
        for k in keys {
            self.queue.enqueue(k);
        }
    }

    /// A copy of the world with the same objects, cache and queue.
    fn fork(&self) -> World {
        let st = self.st.lock().unwrap().clone();
        let w = World {
            st: Mutex::new(st),
            cache: Arc::new(OpinionCache::default()),
            queue: Arc::new(self.queue.fork()),
            opts: self.opts.clone(),
            concurrent: Default::default(),
            yields: Default::default(),
            clock: self.clock.clone(),
        };
        let sink = SharedQueue::default();
        if self.cache.is_primed() {
            w.cache.prime_if_ready(true, &[], &sink);
        }
        for (kind, opinion) in self.cache.all() {
            let names = || w.constraint_names(&kind);
            w.cache
                .should_generate_vap(&kind, Some(opinion), names, &sink);
        }
        w
    }
}

fn kind_of(template: &str) -> String {
    // Template names are lower(kind); kinds here are `K` + the rest.
    let mut k = template.to_string();
    k.replace_range(0..1, &template[0..1].to_uppercase());
    k
}

/// The CRD `template` defines, Established since `since`.
fn crd_json(template: &Value, kind: &str, since: DateTime<Utc>) -> Value {
    let t = ConstraintTemplate::from_value(template.clone(), Source::default());
    let mut crd = kubectl_vap::core::crd::desired_crd(&t, kind).unwrap();
    crd["metadata"]["uid"] = json!(format!("uid-crd-{kind}"));
    crd["metadata"]["resourceVersion"] = json!("1");
    established(&mut crd, since);
    crd
}

fn established(crd: &mut Value, since: DateTime<Utc>) {
    crd["status"] = json!({ "conditions": [{ "type": "Established", "status": "True",
        "lastTransitionTime": since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true) }] });
}

impl ConstraintStore for World {
    fn constraint(&self, kind: &str, name: &str) -> Read<Option<Constraint>> {
        let st = self.st.lock().unwrap();
        if let Read::Unknown(u) = st.read("crds", || ()) {
            return Read::Unknown(u);
        }
        st.read(kind, || {
            st.constraints
                .get(&(kind.to_string(), name.to_string()))
                .map(|v| Constraint::from_value(v.clone(), Source::default()))
        })
    }
    fn constraint_names(&self, kind: &str) -> Vec<String> {
        let st = self.st.lock().unwrap();
        st.constraints
            .keys()
            .filter(|(k, _)| k == kind)
            .map(|(_, n)| n.clone())
            .collect()
    }
    fn crd_state(&self, kind: &str) -> Read<CrdState> {
        let st = self.st.lock().unwrap();
        st.read("crds", || match st.crds.get(kind) {
            Some(v) => {
                let info = kubectl_vap::model::CrdInfo::from_value(v, Source::default());
                if info.established {
                    CrdState::Established(info.established_since)
                } else {
                    CrdState::NotEstablished
                }
            }
            None => CrdState::NotEstablished,
        })
    }
    fn policy(&self, name: &str) -> Read<Option<Policy>> {
        let st = self.st.lock().unwrap();
        st.read("policies", || {
            st.policies
                .get(name)
                .map(|v| Policy::from_value(v.clone(), Source::default()).unwrap())
        })
    }
    fn binding(&self, name: &str) -> Read<Option<Binding>> {
        let st = self.st.lock().unwrap();
        st.read("bindings", || {
            st.bindings
                .get(name)
                .map(|v| Binding::from_value(v.clone(), Source::default()).unwrap())
        })
    }
    fn opinions_known(&self) -> Read<()> {
        let st = self.st.lock().unwrap();
        match st.read("templates", || ()) {
            Read::Known(()) => st.read("policies", || ()),
            u => u,
        }
    }
    fn served(&self) -> Read<Arc<kubectl_vap::model::served::Served>> {
        Read::Known(Arc::new(kubectl_vap::model::served::Served::builtin()))
    }
    fn now(&self) -> DateTime<Utc> {
        self.now_()
    }
}

impl TemplateStore for World {
    fn constraints_of_kind(&self, kind: &str) -> Read<Vec<Constraint>> {
        let mut out = Vec::new();
        for n in self.constraint_names(kind) {
            match self.constraint(kind, &n) {
                Read::Known(Some(c)) => out.push(c),
                Read::Known(None) => {}
                Read::Unknown(u) => return Read::Unknown(u),
            }
        }
        // The kind's store must be known even when it holds nothing.
        let st = self.st.lock().unwrap();
        match st.read(kind, || ()) {
            Read::Known(()) => Read::Known(out),
            Read::Unknown(u) => Read::Unknown(u),
        }
    }
    fn template(&self, name: &str) -> Read<Option<ConstraintTemplate>> {
        let st = self.st.lock().unwrap();
        st.read("templates", || {
            st.templates
                .get(name)
                .map(|v| ConstraintTemplate::from_value(v.clone(), Source::default()))
        })
    }
    fn template_names(&self) -> Vec<String> {
        self.st.lock().unwrap().templates.keys().cloned().collect()
    }
    fn templates_listed(&self) -> bool {
        !self.st.lock().unwrap().unknown.contains("templates")
    }
    fn crd(&self, name: &str) -> Read<Option<kubectl_vap::model::CrdInfo>> {
        let st = self.st.lock().unwrap();
        st.read("crds", || {
            st.crds
                .values()
                .find(|c| c["metadata"]["name"] == name)
                .map(|c| kubectl_vap::model::CrdInfo::from_value(c, Source::default()))
        })
    }
    fn bindings_of_kind(&self, kind: &str) -> Read<Vec<Binding>> {
        let st = self.st.lock().unwrap();
        st.read("bindings", || {
            st.bindings
                .values()
                .filter(|v| {
                    controller_of(v).is_some_and(|(av, k, _)| {
                        av.starts_with("constraints.gatekeeper.sh/") && k == kind
                    })
                })
                .map(|v| Binding::from_value(v.clone(), Source::default()).unwrap())
                .collect()
        })
    }
}

/// The modelled server's answer when the object changed meanwhile (409, precondition).
fn conflict(why: String) -> WriteOutcome {
    WriteOutcome::Failed(WriteError::Conflict(Arc::new(ApplyError::Conflict(why))))
}

impl Writer for World {
    async fn write(&self, w: &PlannedWrite) -> WriteOutcome {
        let outcome = self.write_through(w).await;
        let mut st = self.st.lock().unwrap();
        match outcome {
            WriteOutcome::Done => st.failed.remove(&w.object.id()),
            WriteOutcome::Failed(_) => st.failed.insert(w.object.id()),
            WriteOutcome::Skipped(_) => false,
        };
        outcome
    }

    fn not_needed(&self, object: &ObjectId) {
        self.st.lock().unwrap().failed.remove(object);
    }
}

impl World {
    async fn write_through(&self, w: &PlannedWrite) -> WriteOutcome {
        use std::sync::atomic::Ordering;
        if self.concurrent.load(Ordering::SeqCst) {
            // The request is in flight for a while: other reconciles run meanwhile.
            let n = self.yields.fetch_add(1, Ordering::SeqCst);
            for _ in 0..(n * 7919 % 5) {
                tokio::task::yield_now().await;
            }
        }
        {
            let mut st = self.st.lock().unwrap();
            if st.refused.contains(&w.object.id()) {
                let status = kube::core::Status {
                    message: "injected: 422 Invalid".into(),
                    code: 422,
                    ..Default::default()
                };
                return WriteOutcome::Failed(WriteError::Invalid(Arc::new(ApplyError::Failed {
                    what: format!("{} {}", w.verb.as_str(), w.object),
                    source: Box::new(kube::Error::Api(Box::new(status))),
                })));
            }
            st.attempts += 1;
            if st.fail_every > 0 && st.attempts.is_multiple_of(st.fail_every) {
                let n = st.attempts / st.fail_every;
                return if n.is_multiple_of(2) {
                    conflict(format!("injected: 409 Conflict on {}", w.object))
                } else {
                    WriteOutcome::Failed(WriteError::Failed(Arc::new(ApplyError::Failed {
                        what: format!("{} {}", w.verb.as_str(), w.object),
                        source: Box::new(kube::Error::Api(Box::new(kube::core::Status {
                            message: "injected: Internal Server Error".into(),
                            code: 500,
                            ..Default::default()
                        }))),
                    })))
                };
            }
        }
        let outcome = self.apply(w);
        if outcome == WriteOutcome::Done {
            // Our own write comes back as a watch event on its owner.
            if let Some(body) = &w.body {
                self.owner_event(body);
            }
        }
        outcome
    }
}

impl World {
    /// A CRD write; the modelled server establishes a created CRD at once.
    fn apply_crd(&self, w: &PlannedWrite) -> WriteOutcome {
        let mut st = self.st.lock().unwrap();
        st.writes.push(format!(
            "{} {}/{}",
            w.verb.as_str(),
            w.object.kind,
            w.object.name
        ));
        let n = self.next(&mut st);
        let now = self.now_();
        let kind = st
            .crds
            .iter()
            .find(|(_, c)| c["metadata"]["name"] == w.object.name.as_str())
            .map(|(k, _)| k.clone());
        match w.verb {
            Verb::Create | Verb::Update => {
                let mut body = w.body.clone().unwrap();
                let k = body["spec"]["names"]["kind"].as_str().unwrap().to_string();
                match (w.verb, &kind) {
                    (Verb::Create, Some(_)) => {
                        return conflict(format!("{} already exists", w.object.name));
                    }
                    (Verb::Update, None) => {
                        return conflict(format!("{} is gone", w.object.name));
                    }
                    _ => {}
                }
                body["metadata"]["uid"] = json!(format!("uid-{n}"));
                body["metadata"]["resourceVersion"] = json!(n.to_string());
                established(&mut body, now);
                st.crds.insert(k, body);
            }
            Verb::Delete => {
                if let Some(k) = kind {
                    st.crds.remove(&k);
                }
            }
        }
        WriteOutcome::Done
    }

    fn apply(&self, w: &PlannedWrite) -> WriteOutcome {
        if w.object.kind == "CustomResourceDefinition" {
            return self.apply_crd(w);
        }
        let mut st = self.st.lock().unwrap();
        let is_policy = w.object.kind == "ValidatingAdmissionPolicy";
        let name = w.object.name.clone();
        st.writes
            .push(format!("{} {}/{}", w.verb.as_str(), w.object.kind, name));
        // I1: a binding is written only while its kind's opinion is generate + policy ready,
        // and its policy exists.
        if !is_policy && w.verb != Verb::Delete {
            let body = w.body.as_ref().unwrap();
            let policy = body["spec"]["policyName"].as_str().unwrap_or_default();
            let kind = controller_of(body).map(|c| c.1).unwrap_or_default();
            let opinion = self.cache.get(&kind);
            if !st.policies.contains_key(policy) && !st.externally_deleted.contains(policy) {
                st.violations.push(format!(
                    "I1: {name} written while its policy {policy} does not exist"
                ));
            }
            if !self.concurrent.load(std::sync::atomic::Ordering::SeqCst)
                && !opinion
                    .as_ref()
                    .is_some_and(|o| o.generate && o.policy_ready)
            {
                st.violations.push(format!(
                    "I1: {name} written while the opinion of {kind} is {opinion:?}"
                ));
            }
        }
        // I2: a VAP is deleted only once no binding points at it; a template's VAP, besides,
        // only after the opinion is off (or its kind's policies are one per constraint).
        if is_policy && w.verb == Verb::Delete {
            let left: Vec<String> = st
                .bindings
                .iter()
                .filter(|(_, v)| v["spec"]["policyName"].as_str() == Some(name.as_str()))
                .map(|(n, _)| n.clone())
                .collect();
            if !left.is_empty() {
                st.violations.push(format!(
                    "I2: {name} deleted while bindings {left:?} point at it"
                ));
            }
            let kind = st
                .policies
                .get(&name)
                .and_then(|p| p["spec"]["paramKind"]["kind"].as_str().map(str::to_string));
            if let Some(kind) = kind
                && self
                    .cache
                    .get(&kind)
                    .is_some_and(|o| o.generate && o.shape != PolicyShape::Inline)
            {
                st.violations.push(format!(
                    "I2: {name} deleted while the opinion of {kind} is generate"
                ));
            }
        }
        let n = self.next(&mut st);
        if is_policy && w.verb == Verb::Create {
            st.externally_deleted.remove(&name);
        }
        let map = if is_policy {
            &mut st.policies
        } else {
            &mut st.bindings
        };
        match w.verb {
            Verb::Create => {
                if map.contains_key(&name) {
                    return conflict(format!("{name} already exists"));
                }
                let mut body = w.body.clone().unwrap();
                body["metadata"]["uid"] = json!(format!("uid-{n}"));
                body["metadata"]["resourceVersion"] = json!(n.to_string());
                map.insert(name, body);
            }
            Verb::Update => {
                let Some(cur) = map.get(&name) else {
                    return conflict(format!("{name} is gone"));
                };
                let body = w.body.clone().unwrap();
                if body["metadata"]["resourceVersion"] != cur["metadata"]["resourceVersion"] {
                    return conflict(format!("{name}: resourceVersion conflict"));
                }
                let mut body = body;
                body["metadata"]["uid"] = cur["metadata"]["uid"].clone();
                body["metadata"]["resourceVersion"] = json!(n.to_string());
                map.insert(name, body);
            }
            Verb::Delete => {
                let Some(cur) = map.get(&name) else {
                    return WriteOutcome::Done;
                };
                if w.uid.as_deref() != cur["metadata"]["uid"].as_str()
                    || w.resource_version.as_deref() != cur["metadata"]["resourceVersion"].as_str()
                {
                    return conflict(format!("{name}: precondition failed"));
                }
                map.remove(&name);
            }
        }
        WriteOutcome::Done
    }
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// I3: the analysis of the world proposes no write and finds nothing unexpected.
fn check_i3(w: &World, context: &str, allowed: &[Code]) {
    let snap = w.snapshot();
    let a = analyze(&snap, &w.opts);
    let plan: Vec<String> = a
        .plan
        .iter()
        .map(|p| format!("{} {} ({})", p.verb.as_str(), p.object, p.reason))
        .collect();
    assert!(
        plan.is_empty(),
        "{context}: I3: at quiescence the plan is not empty: {plan:#?}"
    );
    let bad: Vec<String> = a
        .findings
        .iter()
        // Advice about a constraint's own spec (it names no kinds), not a state to converge.
        .filter(|f| f.severity != Severity::Info && f.code != Code::ConstraintMatchesEverything)
        .filter(|f| !allowed.contains(&f.code))
        .map(|f| format!("{} {}: {}", f.code, f.object, f.message))
        .collect();
    assert!(
        bad.is_empty(),
        "{context}: I3: unexpected findings: {bad:#?}"
    );
}

fn check_i1_i2(w: &World, context: &str) {
    let v = w.violations();
    assert!(v.is_empty(), "{context}: {v:#?}");
}

/// I4: a full resync sends no write.
fn check_i4(w: &World, context: &str) {
    let before = w.writes().len();
    w.enqueue_all();
    w.drain().unwrap_or_else(|e| panic!("{context}: {e}"));
    let after = w.writes();
    assert_eq!(
        after.len(),
        before,
        "{context}: I4: steady state sent writes: {:?}",
        &after[before..]
    );
}

fn quiesce(w: &World, context: &str, allowed: &[Code]) {
    w.drain().unwrap_or_else(|e| panic!("{context}: {e}"));
    check_i1_i2(w, context);
    check_i3(w, context, allowed);
}

fn opts(wait_secs: u64) -> Options {
    Options {
        binding_wait: Duration::from_secs(wait_secs),
        ..default_options()
    }
}

/// [`opts`] in the narrowed shape, for the tests about it (one VAP per template, a paramKind,
/// the binding wait): the default is `auto`.
fn narrowed_opts(wait_secs: u64) -> Options {
    opts(wait_secs).with_shape(PolicyShape::Narrowed)
}

// ---------------------------------------------------------------------------------------------
// gatekeeper#3287, every interleaving
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    /// A template event: the user sets generateVAP.
    Set(bool),
    /// The (slow) template reconciler runs once, if its key is queued.
    ReconcileTemplate,
    /// A constraint event (the user touches the constraint).
    Touch,
    /// The (fast) constraint reconciler runs once, if its key is queued.
    ReconcileConstraint,
}

const T: &str = "k8srace";
const K: &str = "K8srace";
const C: &str = "c1";

/// Template `T` (generating) and its constraint `C` (deny), at quiescence (`context`).
fn converged(context: &str) -> World {
    let w = World::new(opts(0));
    w.set_template(T, Some(true));
    w.set_constraint(K, C, "deny");
    quiesce(&w, context, &[]);
    w
}

fn interleavings(a: &[Step], b: &[Step]) -> Vec<Vec<Step>> {
    if a.is_empty() {
        return vec![b.to_vec()];
    }
    if b.is_empty() {
        return vec![a.to_vec()];
    }
    let mut out = Vec::new();
    for mut rest in interleavings(&a[1..], b) {
        rest.insert(0, a[0]);
        out.push(rest);
    }
    for mut rest in interleavings(a, &b[1..]) {
        rest.insert(0, b[0]);
        out.push(rest);
    }
    out
}

/// The template side's chains: events e1 e2 e3 with exactly two template reconciles placed
/// anywhere after e1 (the coalescing of a slow reconciler).
fn template_chains(events: [bool; 3]) -> Vec<Vec<Step>> {
    let mut out = Vec::new();
    for first in 0..3 {
        for second in first..3 {
            let mut chain = Vec::new();
            for (i, e) in events.iter().enumerate() {
                chain.push(Step::Set(*e));
                if i == first {
                    chain.push(Step::ReconcileTemplate);
                }
                if i == second {
                    chain.push(Step::ReconcileTemplate);
                }
            }
            out.push(chain);
        }
    }
    out
}

fn apply_step(w: &World, s: Step) {
    match s {
        Step::Set(g) => w.set_template(T, Some(g)),
        Step::ReconcileTemplate => {
            w.step(&Key::Template(T.into()));
        }
        Step::Touch => w.set_constraint(K, C, "deny"),
        Step::ReconcileConstraint => {
            w.step_where(|k| matches!(k, Key::Constraint { .. }));
        }
    }
}

fn race_world(initial: bool, shape: PolicyShape) -> World {
    let w = World::new(Options {
        policy_shape: shape,
        ..opts(0)
    });
    w.set_template(T, Some(initial));
    w.set_constraint(K, C, "deny");
    w.advance(60);
    quiesce(&w, "initial steady state", &[]);
    let snap = w.snapshot();
    assert_eq!(snap.policies.len(), usize::from(initial));
    assert_eq!(snap.bindings.len(), usize::from(initial));
    w
}

fn run_race(initial: bool, events: [bool; 3]) -> usize {
    run_race_in(initial, events, PolicyShape::Narrowed)
}

fn run_race_in(initial: bool, events: [bool; 3], shape: PolicyShape) -> usize {
    let constraint_chain = [
        Step::Touch,
        Step::ReconcileConstraint,
        Step::Touch,
        Step::ReconcileConstraint,
    ];
    let mut runs = 0;
    for chain in template_chains(events) {
        for schedule in interleavings(&chain, &constraint_chain) {
            let w = race_world(initial, shape);
            for (i, s) in schedule.iter().enumerate() {
                apply_step(&w, *s);
                let ctx = format!("initial={initial} schedule={schedule:?} after step {i}");
                check_i1_i2(&w, &ctx);
                // Every prefix, run to quiescence, must satisfy I1–I3.
                let f = w.fork();
                quiesce(&f, &ctx, &[]);
            }
            let ctx = format!("initial={initial} schedule={schedule:?} at the end");
            quiesce(&w, &ctx, &[]);
            check_i4(&w, &ctx);
            // The final state follows the last event.
            let snap = w.snapshot();
            assert_eq!(snap.policies.len(), usize::from(events[2]), "{ctx}");
            assert_eq!(snap.bindings.len(), usize::from(events[2]), "{ctx}");
            runs += 1;
        }
    }
    runs
}

/// gatekeeper#3287 exactly: generateVAP no → yes → no on the slow template side (only two
/// reconciles), a fast constraint side; no binding may ever be written without its VAP.
#[test]
fn race_3287_off_on_off_every_interleaving() {
    let runs = run_race(false, [false, true, false]);
    assert_eq!(runs, 6 * 126);
}

/// The mirror: yes → no → yes from a bound steady state (turning off must delete bindings
/// before the VAP, turning on must write the VAP before bindings).
#[test]
fn race_3287_on_off_on_every_interleaving() {
    let runs = run_race(true, [true, false, true]);
    assert_eq!(runs, 6 * 126);
}

/// Turning off from a bound steady state, every interleaving.
#[test]
fn race_turn_off_every_interleaving() {
    run_race(true, [true, true, false]);
    run_race(false, [true, false, false]);
}

/// gatekeeper#3287 in the inline shape (issue 29): the constraint side writes its own VAP
/// before its binding and deletes it after, every interleaving of both sequences.
#[test]
fn race_3287_every_interleaving_inline() {
    assert_eq!(
        run_race_in(false, [false, true, false], PolicyShape::Inline),
        6 * 126
    );
    assert_eq!(
        run_race_in(true, [true, false, true], PolicyShape::Inline),
        6 * 126
    );
}

/// A copy restarted with `--policy-shape inline` on a narrowed cluster: the constraint's VAP,
/// then its binding repointed, then the template's VAP deleted (once nothing points at it),
/// each once; then nothing. And back.
#[test]
fn switching_to_the_inline_shape_and_back_writes_each_object_once_in_order() {
    // From the narrowed shape by name (the default's, auto, is inline for one constraint).
    let w = World::new(narrowed_opts(0));
    w.set_template(T, Some(true));
    w.set_constraint(K, C, "deny");
    quiesce(&w, "narrowed", &[]);
    let inline = w.restart_with(Options {
        policy_shape: PolicyShape::Inline,
        ..opts(0)
    });
    let before = inline.writes().len();
    quiesce(&inline, "inline", &[]);
    assert_eq!(
        inline.writes_since(before),
        [
            "create ValidatingAdmissionPolicy/gatekeeper-k8srace.c1",
            "update ValidatingAdmissionPolicyBinding/gatekeeper-k8srace-c1",
            "delete ValidatingAdmissionPolicy/gatekeeper-k8srace",
        ]
    );
    check_i4(&inline, "inline steady");
    let back = inline.restart_with(narrowed_opts(0));
    let before = back.writes().len();
    quiesce(&back, "back", &[]);
    assert_eq!(
        back.writes_since(before),
        [
            "create ValidatingAdmissionPolicy/gatekeeper-k8srace",
            "update ValidatingAdmissionPolicyBinding/gatekeeper-k8srace-c1",
            "delete ValidatingAdmissionPolicy/gatekeeper-k8srace.c1",
        ]
    );
    check_i4(&back, "narrowed steady");
}

// ---------------------------------------------------------------------------------------------
// Focused behaviours
// ---------------------------------------------------------------------------------------------

#[test]
fn turning_on_writes_the_policy_then_the_binding_then_nothing() {
    let w = World::new(opts(0));
    w.set_constraint(K, C, "deny");
    w.set_template(T, Some(true));
    w.advance(1);
    quiesce(&w, "on", &[]);
    // The default shape: the constraint's own VAP (inline), then its binding.
    assert_eq!(
        w.writes(),
        vec![
            "create ValidatingAdmissionPolicy/gatekeeper-k8srace.c1".to_string(),
            "create ValidatingAdmissionPolicyBinding/gatekeeper-k8srace-c1".to_string(),
        ]
    );
    check_i4(&w, "steady");
}

#[test]
fn turning_off_deletes_bindings_then_the_policy() {
    let w = World::new(opts(0));
    w.set_template(T, Some(true));
    w.set_constraint(K, C, "deny");
    w.set_constraint(K, "c2", "warn");
    quiesce(&w, "on", &[]);
    let before = w.writes().len();
    w.set_template(T, Some(false));
    quiesce(&w, "off", &[]);
    // The default shape: each constraint's binding, then its own VAP (I2).
    assert_eq!(
        w.writes_since(before),
        [
            "delete ValidatingAdmissionPolicyBinding/gatekeeper-k8srace-c1",
            "delete ValidatingAdmissionPolicy/gatekeeper-k8srace.c1",
            "delete ValidatingAdmissionPolicyBinding/gatekeeper-k8srace-c2",
            "delete ValidatingAdmissionPolicy/gatekeeper-k8srace.c2",
        ]
    );
}

#[test]
fn one_change_is_one_write() {
    let w = converged("on");
    let before = w.writes().len();
    w.set_constraint(K, C, "warn");
    quiesce(&w, "warn", &[]);
    assert_eq!(
        w.writes_since(before),
        vec!["update ValidatingAdmissionPolicyBinding/gatekeeper-k8srace-c1".to_string()]
    );
    let before = w.writes().len();
    w.set_constraint(K, C, "scoped-audit");
    quiesce(&w, "not vap", &[]);
    // Its binding, then the constraint's own VAP (the default shape's, inline), once each.
    assert_eq!(
        w.writes_since(before),
        vec![
            "delete ValidatingAdmissionPolicyBinding/gatekeeper-k8srace-c1".to_string(),
            "delete ValidatingAdmissionPolicy/gatekeeper-k8srace.c1".to_string(),
        ]
    );
}

#[test]
fn binding_waits_for_the_crd_then_is_written_once() {
    // The binding wait is the narrowed shape's (a paramKind to discover; an inline binding
    // follows its VAP at once): that shape by name.
    let w = World::new(narrowed_opts(30));
    w.set_template(T, Some(true)); // CRD established now
    w.set_constraint(K, C, "deny");
    // Run what is ready without advancing time: the policy, but no binding yet.
    loop {
        let (k, _) = w.pop();
        match k {
            Some(k) => w.run_key(&k),
            None => break,
        }
    }
    assert_eq!(
        w.snapshot().bindings.len(),
        0,
        "no binding within --binding-wait"
    );
    let a = analyze(&w.snapshot(), &w.opts);
    assert!(a.findings.iter().any(|f| f.code == Code::BindingWaiting));
    // The requeue lands after the wait; draining advances the clock to it.
    quiesce(&w, "after the wait", &[]);
    assert_eq!(w.snapshot().bindings.len(), 1);
    assert!(w.now_() >= t0() + chrono::Duration::seconds(30));
}

/// A write that failed and is no longer needed is forgotten: its failure is not given as the
/// reason of a later finding, and the copy keeps no entry per object that ever failed (once
/// kept for the life of the copy).
#[test]
fn a_failed_write_whose_need_went_is_forgotten() {
    let failed = |w: &World| w.st.lock().unwrap().failed.clone();
    let refuse = |w: &World, object: &ObjectId| w.st.lock().unwrap().refused.insert(object.clone());
    let binding = &ObjectId::new("ValidatingAdmissionPolicyBinding", "gatekeeper-k8srace-c1");
    let policy = &ObjectId::new("ValidatingAdmissionPolicy", "gatekeeper-k8srace");

    // An update refused, then the constraint back as the binding is: in sync, nothing to send.
    let w = converged("on");
    refuse(&w, binding);
    w.set_constraint(K, C, "warn");
    w.drain().unwrap();
    assert_eq!(failed(&w), [binding.clone()].into());
    w.set_constraint(K, C, "deny");
    w.drain().unwrap();
    assert!(failed(&w).is_empty(), "in sync again: {:?}", failed(&w));

    // A create refused, then its constraint deleted: no binding is needed.
    w.st.lock().unwrap().refused.clear();
    w.delete_constraint(K, C);
    w.drain().unwrap();
    assert!(w.snapshot().bindings.is_empty());
    refuse(&w, binding);
    w.set_constraint(K, C, "deny");
    w.drain().unwrap();
    assert_eq!(failed(&w), [binding.clone()].into());
    w.delete_constraint(K, C);
    w.drain().unwrap();
    assert!(failed(&w).is_empty(), "constraint gone: {:?}", failed(&w));

    // The template's VAP refused, then the template deleted (a VAP of the template's own: the
    // narrowed shape, by name; the default's are its constraints').
    let w = World::new(narrowed_opts(0));
    refuse(&w, policy);
    w.set_template(T, Some(true));
    w.drain().unwrap();
    assert_eq!(failed(&w), [policy.clone()].into());
    w.delete_template(T);
    w.drain().unwrap();
    assert!(failed(&w).is_empty(), "template gone: {:?}", failed(&w));

    // Its constraint CRD's create refused, then the template deleted.
    let w = World::new(opts(0));
    let crd = ObjectId::new(
        kubectl_vap::core::crd::CRD_KIND,
        kubectl_vap::core::crd::crd_name(K),
    );
    w.set_template(T, Some(true));
    w.drain().unwrap();
    refuse(&w, &crd);
    w.st.lock().unwrap().crds.remove(K);
    w.crd_event(K);
    w.queue.enqueue(Key::Template(T.into()));
    w.drain().unwrap();
    assert!(failed(&w).contains(&crd), "{:?}", failed(&w));
    w.delete_template(T);
    w.drain().unwrap();
    assert!(failed(&w).is_empty(), "template gone: {:?}", failed(&w));
}

#[test]
fn crd_not_established_means_no_binding_until_it_is() {
    let w = World::new(opts(0));
    w.set_template(T, Some(true));
    {
        let mut st = w.st.lock().unwrap();
        st.crds.get_mut(K).unwrap()["status"]["conditions"][0]["status"] = json!("False");
    }
    w.set_constraint(K, C, "deny");
    w.drain().unwrap();
    assert_eq!(w.snapshot().bindings.len(), 0);
    {
        let mut st = w.st.lock().unwrap();
        let now = w.now_();
        let crd = crd_json(&st.templates[T], K, now);
        st.crds.insert(K.into(), crd);
    }
    w.crd_event(K);
    quiesce(&w, "established", &[]);
    assert_eq!(w.snapshot().bindings.len(), 1);
}

#[test]
fn drift_is_repaired_at_once() {
    let w = converged("on");
    let n = w.writes().len();
    w.external_edit_binding("gatekeeper-k8srace-c1");
    quiesce(&w, "binding edited", &[]);
    // The constraint's own VAP: the default shape's (inline).
    w.external_edit_policy("gatekeeper-k8srace.c1");
    quiesce(&w, "policy edited", &[]);
    w.external_delete_binding("gatekeeper-k8srace-c1");
    quiesce(&w, "binding deleted", &[]);
    w.external_delete_policy("gatekeeper-k8srace.c1");
    quiesce(&w, "policy deleted", &[]);
    assert_eq!(
        w.writes_since(n),
        vec![
            "update ValidatingAdmissionPolicyBinding/gatekeeper-k8srace-c1",
            "update ValidatingAdmissionPolicy/gatekeeper-k8srace.c1",
            "create ValidatingAdmissionPolicyBinding/gatekeeper-k8srace-c1",
            "create ValidatingAdmissionPolicy/gatekeeper-k8srace.c1",
        ]
    );
}

#[test]
fn foreign_objects_are_never_touched_and_orphans_and_legacy_names_are_swept() {
    // In the default shape c2's own VAP is not written either: its binding is not ours.
    let w = converged("on");
    // A foreign binding with the name another constraint needs.
    w.put_binding(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": { "name": "gatekeeper-k8srace-c2", "uid": "f1", "resourceVersion": "1",
                      "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "Deployment", "name": "x", "uid": "d", "controller": true }] },
        "spec": { "policyName": "gatekeeper-k8srace", "validationActions": ["Deny"] }
    }));
    w.set_constraint(K, "c2", "deny");
    // A legacy-named binding controlled by c1, and an orphan VAP of a deleted template.
    let c1_uid = w.constraint(K, C).known().unwrap().unwrap().meta.uid;
    w.put_binding(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": { "name": "gatekeeper-c1", "uid": "l1", "resourceVersion": "1",
                      "ownerReferences": [{ "apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": K, "name": C, "uid": c1_uid, "controller": true }] },
        "spec": { "policyName": "gatekeeper-k8srace", "validationActions": ["Deny"] }
    }));
    w.put_policy(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": { "name": "gatekeeper-k8sgone", "uid": "o1", "resourceVersion": "1",
                      "ownerReferences": [{ "apiVersion": "templates.gatekeeper.sh/v1beta1", "kind": "ConstraintTemplate", "name": "k8sgone", "uid": "x", "controller": true }] },
        "spec": { "paramKind": { "apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sgone" },
                  "validations": [{ "expression": "true" }] }
    }));
    quiesce(&w, "swept", &[Code::BindingForeign]);
    let snap = w.snapshot();
    let names: Vec<&str> = snap.bindings.iter().map(|b| b.name()).collect();
    assert_eq!(names, ["gatekeeper-k8srace-c1", "gatekeeper-k8srace-c2"]);
    assert_eq!(
        snap.bindings[1].meta.uid, "f1",
        "the foreign binding is untouched"
    );
    assert_eq!(snap.policies.len(), 1, "the orphan VAP is deleted");
}

#[test]
fn invalid_template_freezes_what_exists() {
    let w = converged("on");
    let n = w.writes().len();
    w.set_invalid_template(T);
    w.set_constraint(K, C, "warn");
    quiesce(&w, "frozen", &[Code::TemplateError]);
    assert_eq!(
        w.writes().len(),
        n,
        "nothing is written while the template is invalid"
    );
}

#[test]
fn template_and_constraint_deletion_clean_up_without_gc() {
    let w = World::new(opts(0));
    w.set_template(T, Some(true));
    w.set_constraint(K, C, "deny");
    w.set_constraint(K, "c2", "deny");
    quiesce(&w, "on", &[]);
    w.delete_constraint(K, "c2");
    quiesce(&w, "constraint deleted", &[]);
    assert_eq!(w.snapshot().bindings.len(), 1);
    w.delete_template(T);
    quiesce(&w, "template deleted", &[]);
    let snap = w.snapshot();
    assert!(snap.bindings.is_empty() && snap.policies.is_empty());
}

#[test]
fn a_copy_that_may_not_write_keeps_the_cache_warm_and_writes_nothing() {
    // The constraint side reads only the cache; a non-leader computes the same opinions.
    let w = converged("on");
    let opinion = w.cache.get(K).unwrap();
    assert!(opinion.generate && opinion.policy_ready);
    w.set_template(T, None);
    quiesce(&w, "unset generateVAP with the default flag on", &[]);
    assert!(w.cache.get(K).unwrap().generate);
}

/// A binding controlled by constraint `kind/name` whose kind no template holds.
fn orphan_binding(kind: &str, name: &str, uid: &str) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": { "name": format!("gatekeeper-{}-{name}", kind.to_lowercase()), "uid": "o-b", "resourceVersion": "1",
                      "ownerReferences": [{ "apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": kind, "name": name, "uid": uid, "controller": true }] },
        "spec": { "policyName": format!("gatekeeper-{}", kind.to_lowercase()), "validationActions": ["Deny"] }
    })
}

#[test]
fn a_restart_on_a_converged_world_writes_nothing_even_if_constraints_run_first() {
    // A fresh copy's cache is cold: a kind without an opinion is not yet a kind without a
    // template. Constraint keys that run before their template must not delete bindings.
    let w = World::new(opts(0));
    for (t, generate) in [(T, Some(true)), ("k8sother", None), ("k8soff", Some(false))] {
        w.set_template(t, generate);
        for c in ["c1", "c2"] {
            w.set_constraint(&kind_of(t), c, "deny");
        }
    }
    quiesce(&w, "converged", &[]);
    let before = w.writes().len();
    assert_eq!(w.snapshot().bindings.len(), 4, "two kinds generate");

    let r = w.restart();
    assert!(!r.cache.is_primed());
    while r.step_where(|k| matches!(k, Key::Constraint { .. })) {}
    assert_eq!(r.writes().len(), before, "constraints ran before templates");
    quiesce(&r, "restarted", &[]);
    assert!(r.cache.is_primed());
    assert_eq!(
        r.writes()[before..],
        [] as [String; 0],
        "a restart on a converged world writes nothing"
    );
}

#[test]
fn a_cold_cache_defers_orphans_until_every_template_is_reconciled() {
    let w = converged("converged");
    // While no copy ran, a constraint kind lost its template but kept a constraint and its
    // binding (an orphan).
    w.set_constraint("K8sgone", "x", "deny");
    let uid = w
        .constraint("K8sgone", "x")
        .known()
        .unwrap()
        .unwrap()
        .meta
        .uid;
    w.st.lock().unwrap().bindings.insert(
        "gatekeeper-k8sgone-x".into(),
        orphan_binding("K8sgone", "x", &uid),
    );
    let before = w.writes().len();

    let r = w.restart();
    while r.step_where(|k| matches!(k, Key::Constraint { .. })) {}
    assert_eq!(r.writes().len(), before, "deferred while the cache is cold");
    r.drain().unwrap();
    let writes = &r.writes()[before..];
    assert_eq!(
        writes.len(),
        1,
        "one write: the orphan's delete: {writes:?}"
    );
    assert!(writes[0].contains("gatekeeper-k8sgone-x"), "{writes:?}");
    assert!(
        r.snapshot()
            .bindings
            .iter()
            .all(|b| b.name() != "gatekeeper-k8sgone-x")
    );
}

// ---------------------------------------------------------------------------------------------
// A randomized storm
// ---------------------------------------------------------------------------------------------

mod storm {
    use super::*;
    use proptest::prelude::*;

    const TEMPLATES: [&str; 3] = ["k8sa", "k8sb", "k8sc"];
    const CONSTRAINTS: [&str; 3] = ["x", "y", "z"];
    const ACTIONS: [&str; 4] = ["deny", "warn", "dryrun", "scoped-audit"];

    #[derive(Debug, Clone)]
    enum Op {
        SetTemplate(usize, Option<bool>),
        InvalidTemplate(usize),
        DeleteTemplate(usize),
        SetConstraint(usize, usize, usize),
        DeleteConstraint(usize, usize),
        /// Process the n-th ready key (a random schedule).
        Process(usize),
        Advance(u8),
        DeleteOwnedObject(usize),
        /// Run to quiescence and check I1–I4.
        Quiesce,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..3usize, prop_oneof![Just(None), Just(Some(true)), Just(Some(false))])
                .prop_map(|(t, g)| Op::SetTemplate(t, g)),
            1 => (0..3usize).prop_map(Op::InvalidTemplate),
            1 => (0..3usize).prop_map(Op::DeleteTemplate),
            3 => (0..3usize, 0..3usize, 0..4usize).prop_map(|(t, c, a)| Op::SetConstraint(t, c, a)),
            1 => (0..3usize, 0..3usize).prop_map(|(t, c)| Op::DeleteConstraint(t, c)),
            8 => (0..16usize).prop_map(Op::Process),
            1 => (0..40u8).prop_map(Op::Advance),
            1 => (0..8usize).prop_map(Op::DeleteOwnedObject),
            1 => Just(Op::Quiesce),
        ]
    }

    fn run(ops: &[Op], wait: u64, default_create: bool) {
        run_with_faults(ops, wait, default_create, 0);
    }

    fn run_with_faults(ops: &[Op], wait: u64, default_create: bool, fail_every: u64) {
        let mut o = opts(wait);
        o.default_create_vap_for_templates = default_create;
        let w = World::new(o);
        w.st.lock().unwrap().fail_every = fail_every;
        for (i, op) in ops.iter().enumerate() {
            let ctx = format!("op {i} {op:?}");
            match op {
                Op::SetTemplate(t, g) => w.set_template(TEMPLATES[*t], *g),
                Op::InvalidTemplate(t) => w.set_invalid_template(TEMPLATES[*t]),
                Op::DeleteTemplate(t) => w.delete_template(TEMPLATES[*t]),
                Op::SetConstraint(t, c, a) => {
                    let kind = kind_of(TEMPLATES[*t]);
                    // Constraints exist only while their CRD does.
                    if w.st.lock().unwrap().crds.contains_key(&kind) {
                        w.set_constraint(&kind, CONSTRAINTS[*c], ACTIONS[*a]);
                    }
                }
                Op::DeleteConstraint(t, c) => {
                    w.delete_constraint(&kind_of(TEMPLATES[*t]), CONSTRAINTS[*c])
                }
                Op::Process(n) => {
                    let ready = w.queue.ready_keys();
                    if !ready.is_empty() {
                        let k = ready[n % ready.len()].clone();
                        w.step(&k);
                    }
                }
                Op::Advance(s) => w.advance(u64::from(*s)),
                Op::DeleteOwnedObject(n) => {
                    let (ps, bs): (Vec<String>, Vec<String>) = {
                        let st = w.st.lock().unwrap();
                        (
                            st.policies.keys().cloned().collect(),
                            st.bindings.keys().cloned().collect(),
                        )
                    };
                    if n % 2 == 0 && !ps.is_empty() {
                        w.external_delete_policy(&ps[n / 2 % ps.len()]);
                    } else if !bs.is_empty() {
                        w.external_delete_binding(&bs[n / 2 % bs.len()]);
                    }
                }
                Op::Quiesce => {
                    quiesce(&w, &ctx, &[Code::TemplateError]);
                    check_i4(&w, &ctx);
                }
            }
            check_i1_i2(&w, &ctx);
        }
        quiesce(&w, "end", &[Code::TemplateError]);
        check_i4(&w, "end");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, rng_seed: proptest::test_runner::RngSeed::Fixed(3287), ..ProptestConfig::default() })]

        #[test]
        fn storm_of_template_flips_and_constraint_churn(ops in proptest::collection::vec(op(), 1..80)) {
            run(&ops, 0, true);
        }

        #[test]
        fn storm_with_binding_wait_and_default_off(ops in proptest::collection::vec(op(), 1..80)) {
            run(&ops, 30, false);
        }

        /// Every third write fails (409 conflicts and 500s alternating): retried with
        /// backoff, never a panic, never an invariant broken, never a lost or extra object.
        #[test]
        fn storm_with_injected_api_errors(ops in proptest::collection::vec(op(), 1..80)) {
            run_with_faults(&ops, 0, true, 3);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Concurrent reconciles (the live runtime runs several workers)
// ---------------------------------------------------------------------------------------------

mod concurrent {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    async fn worker(w: Arc<World>, stop: Arc<AtomicBool>) {
        loop {
            match w.queue.pop() {
                (Some(key), _) => {
                    process(key, &*w, &w.ctx()).await;
                }
                (None, _) => {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    tokio::task::yield_now().await;
                }
            }
        }
    }

    /// Template flips and constraint churn while 4 workers reconcile concurrently on 2
    /// threads: no binding may land after its VAP is deleted (the per-kind lock), no VAP is
    /// deleted while bindings remain, and the world converges exactly.
    #[test]
    fn concurrent_workers_never_leave_a_binding_without_its_policy() {
        for seed in 0..300u64 {
            let w = Arc::new(World::new(opts(0)));
            w.set_template(T, Some(true));
            for c in 0..2 {
                w.set_constraint(K, &format!("c{c}"), "deny");
            }
            quiesce(&w, "start", &[]);
            w.concurrent.store(true, Ordering::SeqCst);
            w.yields.store(seed, Ordering::SeqCst);
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .build()
                .unwrap();
            rt.block_on(async {
                let stop = Arc::new(AtomicBool::new(false));
                let workers: Vec<_> = (0..4)
                    .map(|_| tokio::spawn(worker(w.clone(), stop.clone())))
                    .collect();
                let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                for i in 0..30 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if i % 2 == 0 {
                        w.set_template(T, Some(x % 2 == 0));
                    }
                    let c = format!("c{}", x % 2);
                    w.set_constraint(K, &c, if x % 5 == 0 { "warn" } else { "deny" });
                    for _ in 0..(x % 7) {
                        tokio::task::yield_now().await;
                    }
                }
                stop.store(true, Ordering::SeqCst);
                for h in workers {
                    h.await.unwrap();
                }
            });
            w.concurrent.store(false, Ordering::SeqCst);
            let ctx = format!("seed {seed}");
            check_i1_i2(&w, &ctx);
            quiesce(&w, &ctx, &[]);
            check_i4(&w, &ctx);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Constraint CRDs
// ---------------------------------------------------------------------------------------------

#[test]
fn a_new_template_gets_its_crd_then_its_vap_then_its_bindings() {
    let w = World::new(opts(0));
    w.set_template(T, Some(true));
    // Nothing created the CRD yet (Gatekeeper's generate operation is off); the modelled
    // server establishes it at once.
    w.st.lock().unwrap().crds.clear();
    w.drain().unwrap();
    w.set_constraint(K, C, "deny");
    quiesce(&w, "on", &[]);
    assert_eq!(
        w.writes(),
        [
            "create CustomResourceDefinition/k8srace.constraints.gatekeeper.sh".to_string(),
            // The default shape: the constraint's own VAP (inline).
            "create ValidatingAdmissionPolicy/gatekeeper-k8srace.c1".to_string(),
            "create ValidatingAdmissionPolicyBinding/gatekeeper-k8srace-c1".to_string(),
        ]
    );
    check_i4(&w, "steady");
}

#[test]
fn the_vap_waits_until_the_crd_is_established() {
    // The template's VAP (its paramKind is the CRD's kind) is the narrowed shape's: by name.
    let w = World::new(narrowed_opts(0));
    w.set_template(T, Some(true));
    w.st.lock().unwrap().crds.get_mut(K).unwrap()["status"]["conditions"][0]["status"] =
        json!("False");
    w.drain().unwrap();
    assert!(w.writes().is_empty(), "{:?}", w.writes());
    let now = w.now_();
    established(w.st.lock().unwrap().crds.get_mut(K).unwrap(), now);
    w.crd_event(K);
    quiesce(&w, "established", &[]);
    assert_eq!(
        w.writes(),
        ["create ValidatingAdmissionPolicy/gatekeeper-k8srace".to_string()]
    );
}

#[test]
fn a_rego_only_template_gets_its_crd_too() {
    let w = World::new(opts(0));
    w.set_template(T, Some(true));
    {
        let mut st = w.st.lock().unwrap();
        st.crds.clear();
        let t = st.templates.get_mut(T).unwrap();
        t["spec"]["targets"][0] =
            json!({ "target": "admission.k8s.gatekeeper.sh", "rego": "package x" });
    }
    quiesce(&w, "rego", &[]);
    assert_eq!(
        w.writes(),
        vec!["create CustomResourceDefinition/k8srace.constraints.gatekeeper.sh".to_string()]
    );
}

/// Deleting a CRD deletes every constraint of its kind: only a template deletion this copy
/// saw justifies it, and only after the bindings and the VAP (no GC modelled here).
#[test]
fn a_deleted_template_takes_its_crd_last_and_only_if_this_copy_saw_it() {
    // The narrowed shape by name: "last" is after the template's VAP, whose paramKind the CRD
    // serves. (Under the default, auto, the CRD goes first and the constraint's binding and
    // own VAP after it: see docs/reconciler.md, "Constraint CRDs", condition 2.)
    let w = World::new(narrowed_opts(0));
    w.set_template(T, Some(true));
    w.set_constraint(K, C, "deny");
    quiesce(&w, "on", &[]);
    // A copy that starts now never saw the template: it must not delete the CRD.
    let fresh = w.fork();
    let fresh = World {
        cache: Arc::new(OpinionCache::default()),
        ..fresh
    };
    for world in [&w, &fresh] {
        world.st.lock().unwrap().templates.remove(T);
        world.queue.enqueue(Key::Template(T.into()));
        world.queue.enqueue(Key::constraint(K, C));
    }
    let before = w.writes().len();
    w.drain().unwrap();
    assert_eq!(
        w.writes()[before..],
        [
            "delete ValidatingAdmissionPolicyBinding/gatekeeper-k8srace-c1".to_string(),
            "delete ValidatingAdmissionPolicy/gatekeeper-k8srace".to_string(),
            "delete CustomResourceDefinition/k8srace.constraints.gatekeeper.sh".to_string(),
        ]
    );
    check_i1_i2(&w, "deleted");
    let before = fresh.writes().len();
    fresh.cache.prime_if_ready(true, &[], &*fresh.queue);
    fresh.drain().unwrap();
    assert!(
        !fresh.writes()[before..]
            .iter()
            .any(|w| w.contains("CustomResourceDefinition")),
        "a CRD found without its template is never deleted: {:?}",
        &fresh.writes()[before..]
    );
}

/// On → off → on within `TURN_OFF_SETTLE` costs nothing (it cost a delete and a create of the
/// VAP and of every binding); an off that stays off goes through once the moment has passed.
#[test]
fn a_quick_flip_back_on_costs_no_write() {
    let w = World::new(opts(0));
    w.set_template(T, Some(true));
    for c in ["c1", "c2", "c3", "c4"] {
        w.set_constraint(K, c, "deny");
    }
    quiesce(&w, "on", &[]);
    let before = w.writes().len();
    w.set_template(T, Some(false));
    // The off is seen, and is not acted on yet.
    while w.step_where(|k| *k == Key::Template(T.into())) {}
    w.advance(1);
    w.set_template(T, Some(true));
    quiesce(&w, "back on", &[]);
    assert_eq!(
        w.writes()[before..],
        [] as [String; 0],
        "on → off → on wrote"
    );
    check_i4(&w, "steady");

    w.set_template(T, Some(false));
    quiesce(&w, "off for good", &[]);
    assert!(
        w.now_() >= t0() + chrono::Duration::seconds(3),
        "the off waited for the settle time"
    );
    // The default shape: each constraint's binding, then its own VAP (I2).
    let after: Vec<String> = w.writes_since(before);
    let expected: Vec<String> = ["c1", "c2", "c3", "c4"]
        .iter()
        .flat_map(|c| {
            [
                format!("delete ValidatingAdmissionPolicyBinding/gatekeeper-k8srace-{c}"),
                format!("delete ValidatingAdmissionPolicy/gatekeeper-k8srace.{c}"),
            ]
        })
        .collect();
    assert_eq!(after, expected, "4 bindings and their VAPs");
}

/// Knowledge before action: a store that cannot be read (never listed, forbidden, failed,
/// relisting) is never taken for an empty one. For each store, a change that needs a write
/// resting on it is made while it is unknown: nothing is written; once it is known again,
/// the world converges. (Fails with the reads answering "absent" for an unknown store: the
/// binding, VAP and CRD are written blind, the template's deletion deletes its CRD.)
#[test]
fn nothing_is_written_on_what_could_not_be_read() {
    type Change = fn(&World);
    let changes: [(&str, Change); 5] = [
        ("bindings", |w| {
            w.st.lock()
                .unwrap()
                .bindings
                .remove(&format!("gatekeeper-k8srace-{C}"));
        }),
        ("policies", |w| {
            let mut st = w.st.lock().unwrap();
            // The constraint's own VAP: the default shape's (inline).
            st.policies.remove(&format!("gatekeeper-{T}.{C}"));
            st.externally_deleted.insert(format!("gatekeeper-{T}.{C}"));
        }),
        ("crds", |w| {
            let mut st = w.st.lock().unwrap();
            st.crds.remove(K);
            st.constraints.retain(|(k, _), _| k != K);
        }),
        ("templates", |w| w.delete_template(T)),
        (K, |w| w.delete_constraint(K, C)),
    ];
    for (store, change) in changes {
        let w = World::new(opts(0));
        w.set_template(T, Some(true));
        w.set_constraint(K, C, "deny");
        quiesce(&w, "converged", &[]);
        let before = w.writes().len();
        w.st.lock().unwrap().unknown.insert(store.to_string());
        change(&w);
        w.enqueue_all();
        w.drain().unwrap();
        assert_eq!(
            w.writes()[before..],
            [] as [String; 0],
            "{store} unknown: no write may rest on it"
        );
        w.st.lock().unwrap().unknown.remove(store);
        w.enqueue_all();
        quiesce(&w, &format!("{store} known again"), &[]);
        assert!(
            w.writes().len() > before,
            "{store}: the change is acted on once known"
        );
    }
}
