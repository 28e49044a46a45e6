//! `audit`: for each constraint's binding, list the existing objects it selects (only the
//! resources its `spec.match.kinds` names, label selectors and literal namespaces applied by
//! the server, the rest by the pure matcher) and dry-run a no-op update of each: the API
//! server runs its admission policies on it and writes nothing. One request per object, shared
//! by every constraint that selects it; bounded concurrency and a token bucket.
//!
//! What cannot be seen is reported as such: `dryrun` constraints (binding action `Audit`) only
//! reach the audit log; when an object is denied, the server names only the first denying
//! binding, so other constraints' verdicts on that object are `hidden`, not "compliant".

use super::AdmissionError;
use super::dryrun::{self, Resolved};
use super::rate::TokenBucket;
use super::test::ObjectId;
use crate::core::matching::{
    ListSelector, Subject, binding_selects, constraint_selects, labels_of, list_selector,
    needs_namespace_labels,
};
use crate::core::verdict::{ConstraintRef, Outcome, read_reply};
use crate::model::{Binding, CONSTRAINTS_GROUP, Constraint};
use crate::snapshot::Snapshot;
use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct AuditOptions {
    pub qps: f64,
    pub burst: u32,
    pub concurrency: usize,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
    /// Told how far the audit is, for a caller that shows progress itself (the TUI): a watch,
    /// so only the latest counts and a slow reader never holds the audit back.
    pub report_to: Option<tokio::sync::watch::Sender<AuditProgress>>,
    /// Only objects in this namespace (`audit -n`); cluster-scoped objects, which are in no
    /// namespace, are then left out. `None`: every namespace and cluster-scoped objects.
    pub namespace: Option<String>,
}

/// The default rate (`check --audit` and the TUI's `a`): 50 requests a second, bursts of 100,
/// 16 at a time, no progress shown.
impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            qps: 50.0,
            burst: 100,
            concurrency: 16,
            progress: false,
            report_to: None,
            namespace: None,
        }
    }
}

/// How far an audit is: the dry-runs answered of those it makes (`total` is 0 until the
/// objects in scope are listed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuditProgress {
    pub done: usize,
    pub total: usize,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Violation {
    pub object: ObjectId,
    /// `Deny` or `Warn`: the binding's action that reported it.
    pub action: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hidden {
    pub object: ObjectId,
    /// The binding the server named instead (it reports its first denial only).
    pub denied_by: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectError {
    pub object: ObjectId,
    pub outcome: &'static str,
    pub message: String,
    /// The constraint's own policy ran over the API server's CEL cost budget on the object
    /// (outcome `policy-error`): the finding `policy-cost-exceeded`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub over_cost_budget: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Audited,
    /// No binding: nothing enforces it through VAP.
    NotBound,
    /// Bound with `Audit` only (`dryrun`): the verdicts go to the audit log, not to us.
    NotObservable,
    /// Its scope could not be listed (an invalid label selector, a list refused, Namespaces
    /// that may not be listed for its namespace selector): the note says why.
    NotAudited,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConstraintAudit {
    pub constraint: ConstraintRef,
    pub template: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binding: Option<String>,
    pub validation_actions: Vec<String>,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Objects the binding and `spec.match` select.
    pub in_scope: usize,
    /// Of those, answered by the server (less when interrupted).
    pub checked: usize,
    pub violations: Vec<Violation>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<Hidden>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ObjectError>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditReport {
    /// False when interrupted: what was found so far.
    pub complete: bool,
    pub constraints: Vec<ConstraintAudit>,
    /// Dry-run requests sent (one per object in any audited scope).
    pub requests: usize,
}

impl AuditReport {
    /// 130 interrupted, 2 objects (or a constraint's scope) that could not be checked, 1
    /// violations, 0 clean.
    pub fn exit_code(&self) -> u8 {
        if !self.complete {
            130
        } else if self
            .constraints
            .iter()
            .any(|c| !c.errors.is_empty() || c.status == Status::NotAudited)
        {
            2
        } else if self.constraints.iter().any(|c| !c.violations.is_empty()) {
            1
        } else {
            0
        }
    }
}

/// The constraints `target` names: a template (every constraint of its kind), `Kind/name`, or a
/// constraint name; all when `None`. As kubectl takes them: a kind in any case
/// (`K8sRequiredLabels`, `k8srequiredlabels`), a template or constraint name exactly.
pub fn select<'a>(
    snap: &'a Snapshot,
    target: Option<&str>,
) -> Result<Vec<&'a Constraint>, AdmissionError> {
    let Some(t) = target else {
        return Ok(snap.constraints.iter().collect());
    };
    // The kinds `t` names: as a kind, or as a template's name.
    let kind_named = |kind: &str| {
        kind.eq_ignore_ascii_case(t)
            || snap
                .templates
                .iter()
                .any(|tp| tp.name() == t && tp.kind.as_deref() == Some(kind))
    };
    let picked: Vec<&Constraint> = snap
        .constraints
        .iter()
        .filter(|c| match t.split_once('/') {
            Some((kind, name)) => c.kind.eq_ignore_ascii_case(kind) && c.name() == name,
            None => kind_named(&c.kind) || c.name() == t,
        })
        .collect();
    if picked.is_empty() {
        let known = snap.templates.iter().any(|tp| {
            tp.name() == t
                || tp
                    .kind
                    .as_deref()
                    .is_some_and(|k| k.eq_ignore_ascii_case(t))
        });
        return Err(if known {
            AdmissionError::NoConstraints(t.to_string())
        } else {
            AdmissionError::NothingNamed(t.to_string())
        });
    }
    Ok(picked)
}

fn binding_of<'a>(c: &Constraint, snap: &'a Snapshot) -> Option<&'a Binding> {
    snap.bindings.iter().find(|b| {
        b.meta.controller().is_some_and(|o| {
            o.group() == CONSTRAINTS_GROUP && o.kind == c.kind && o.name == c.name()
        })
    })
}

/// The resources a constraint's `spec.match.kinds` names (every listable, updatable one when
/// it names none), from discovery.
fn resources_for(c: &Constraint, discovery: &kube::Discovery) -> Vec<Resolved> {
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if !caps.supports_operation("list") || !caps.supports_operation("update") {
                continue;
            }
            let kinds = &c.matcher.kinds;
            let listed = kinds.is_empty()
                || kinds.iter().any(|k| {
                    (k.api_groups.is_empty()
                        || k.api_groups.iter().any(|g| g == "*" || *g == ar.group))
                        && (k.kinds.is_empty() || k.kinds.iter().any(|x| x == "*" || *x == ar.kind))
                });
            if listed {
                out.push(dryrun::resolved(ar, &caps));
            }
        }
    }
    out
}

/// Every page of a list.
async fn list_all(
    client: &kube::Client,
    r: &Resolved,
    namespace: Option<&str>,
    selector: Option<&str>,
    bucket: &TokenBucket,
) -> Result<Vec<serde_json::Value>, AdmissionError> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &r.resource),
        None => Api::all_with(client.clone(), &r.resource),
    };
    let mut lp = ListParams::default().limit(500);
    if let Some(s) = selector {
        lp = lp.labels(s);
    }
    let mut out = Vec::new();
    loop {
        bucket.acquire().await;
        let page = api.list(&lp).await.map_err(|e| {
            AdmissionError::request(
                format!(
                    "listing {}",
                    crate::cluster::discovery::resource_name(&r.resource)
                ),
                e,
            )
        })?;
        for mut o in page.items {
            o.types = Some(kube::core::TypeMeta {
                api_version: r.resource.api_version.clone(),
                kind: r.resource.kind.clone(),
            });
            o.metadata.managed_fields = None;
            out.push(
                serde_json::to_value(o).map_err(|source| AdmissionError::Encode {
                    what: format!("a listed {}", r.resource.kind),
                    source,
                })?,
            );
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// One object to dry-run and the constraints (indices) that select it.
struct Work {
    resolved: Resolved,
    raw: serde_json::Value,
    id: ObjectId,
    constraints: Vec<usize>,
}

/// The report's entry of each picked constraint (its status: not bound, not observable,
/// audited), and the audited ones with their bindings (by the entry's index).
fn entries<'a>(
    snap: &'a Snapshot,
    picked: Vec<&'a Constraint>,
) -> (
    Vec<ConstraintAudit>,
    Vec<(usize, &'a Constraint, &'a Binding)>,
) {
    let mut audits: Vec<ConstraintAudit> = Vec::new();
    let mut bound: Vec<(usize, &Constraint, &Binding)> = Vec::new();
    for c in picked {
        let binding = binding_of(c, snap);
        let actions: Vec<String> = binding
            .and_then(|b| b.object.spec.as_ref())
            .and_then(|s| s.validation_actions.clone())
            .unwrap_or_default();
        let observable = actions.iter().any(|a| a == "Deny" || a == "Warn");
        let (status, note) = match binding {
            None => (Status::NotBound, Some("no binding: VAP does not enforce it".to_string())),
            Some(_) if !observable => (
                Status::NotObservable,
                Some("bound with Audit only (dryrun): its verdicts go to the API server's audit log, which a dry-run does not return".to_string()),
            ),
            Some(_) => (Status::Audited, None),
        };
        if let (Some(b), Status::Audited) = (binding, status) {
            bound.push((audits.len(), c, b));
        }
        audits.push(ConstraintAudit {
            constraint: ConstraintRef {
                kind: c.kind.clone(),
                name: c.name().to_string(),
            },
            template: template_name(snap, &c.kind),
            binding: binding.map(|b| b.name().to_string()),
            validation_actions: actions,
            status,
            note,
            in_scope: 0,
            checked: 0,
            violations: Vec::new(),
            hidden: Vec::new(),
            errors: Vec::new(),
        });
    }
    (audits, bound)
}

/// The name of the template that defines `kind` (by `spec.crd.spec.names.kind`); the lowercased
/// kind, as Gatekeeper names templates, when the template was not read.
pub fn template_name(snap: &Snapshot, kind: &str) -> String {
    snap.templates
        .iter()
        .find(|t| t.kind.as_deref() == Some(kind))
        .map_or_else(|| kind.to_lowercase(), |t| t.name().to_string())
}

/// Runs the audit. `listed` is told how many objects will be dry-run, once they are listed;
/// `interrupt` resolving stops it: the report then holds what was found so far and says it is
/// incomplete.
#[expect(
    clippy::too_many_lines,
    reason = "one run of the audit, its interrupt and its report; to be split into named steps"
)]
pub async fn audit(
    reader: &kube::Client,
    actor: &kube::Client,
    snap: &Snapshot,
    target: Option<&str>,
    opts: &AuditOptions,
    listed: impl FnOnce(usize),
    interrupt: impl std::future::Future<Output = ()>,
) -> Result<AuditReport, AdmissionError> {
    let picked = select(snap, target)?;
    let (mut audits, bound) = entries(snap, picked);
    let mut report = AuditReport {
        complete: true,
        constraints: Vec::new(),
        requests: 0,
    };
    let bucket = Arc::new(TokenBucket::new(opts.qps, opts.burst));
    tokio::pin!(interrupt);

    // Phase 1: what to dry-run. Interruptible too: listing a large cluster takes a while.
    let gather = gather(
        reader,
        &bound,
        &mut audits,
        &bucket,
        opts.namespace.as_deref(),
    );
    let work = tokio::select! {
        biased;
        () = &mut interrupt => {
            report.complete = false;
            report.constraints = audits;
            return Ok(report);
        }
        w = gather => w?,
    };

    // Phase 2: one dry-run per object, answers attributed to every constraint that selects it.
    listed(work.len());
    if let Some(tx) = &opts.report_to {
        tx.send_replace(AuditProgress {
            done: 0,
            total: work.len(),
        });
    }
    let progress = progress_bar(opts.progress, work.len() as u64);
    // Which binding each audited constraint answers through.
    let binding_names: BTreeMap<usize, String> = bound
        .iter()
        .map(|(i, _, b)| (*i, b.name().to_string()))
        .collect();
    let mut replies = futures::stream::iter(work.into_iter().map(|w| {
        let bucket = bucket.clone();
        async move {
            bucket.acquire().await;
            let name = w.raw["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let reply =
                dryrun::update(actor, &w.resolved, w.id.namespace.as_deref(), &name, &w.raw).await;
            (w, reply)
        }
    }))
    .buffer_unordered(opts.concurrency.max(1));
    loop {
        let next = tokio::select! {
            biased;
            () = &mut interrupt => { report.complete = false; break; }
            n = replies.next() => n,
        };
        let Some((w, reply)) = next else { break };
        report.requests += 1;
        if let Some(p) = &progress {
            p.inc(1);
        }
        if let Some(tx) = &opts.report_to {
            tx.send_modify(|p| p.done += 1);
        }
        let reading = match reply {
            Ok(r) => read_reply(r.code, r.status_message(), &r.warnings, snap),
            Err(e) => {
                let message = crate::text::error_text(&e);
                for i in &w.constraints {
                    audits[*i].checked += 1;
                    audits[*i].errors.push(ObjectError {
                        object: w.id.clone(),
                        outcome: Outcome::Error.as_str(),
                        message: message.clone(),
                        over_cost_budget: false,
                    });
                }
                continue;
            }
        };
        for i in &w.constraints {
            let Some(binding) = binding_names.get(i) else {
                continue;
            };
            let a = &mut audits[*i];
            a.checked += 1;
            let mine = |b: &Option<String>| b.as_deref() == Some(binding.as_str());
            let mut violated = false;
            let own_denial = reading.denial.as_ref().filter(|d| mine(&d.binding));
            if let Some(d) = own_denial.filter(|d| d.evaluation_error.is_none()) {
                a.violations.push(Violation {
                    object: w.id.clone(),
                    action: "Deny",
                    message: d.message.clone(),
                });
                violated = true;
            } else if let Some(wn) = reading.warnings.iter().find(|x| mine(&x.binding)) {
                // Policies run before webhooks: a Warn verdict is there even when a webhook
                // then rejects the request, which is reported below as well.
                a.violations.push(Violation {
                    object: w.id.clone(),
                    action: "Warn",
                    message: wn.message.clone(),
                });
                violated = true;
            }
            match reading.outcome {
                Outcome::Admitted | Outcome::Warned => {}
                Outcome::Denied if violated => {}
                // Another binding's denial or failing CEL came first: ours was not reported.
                Outcome::Denied | Outcome::PolicyError if own_denial.is_none() => {
                    a.hidden.push(Hidden {
                        object: w.id.clone(),
                        denied_by: reading
                            .denial
                            .as_ref()
                            .map(|d| d.chain())
                            .unwrap_or_default(),
                    })
                }
                // Our own CEL failed on the object: no verdict, and the policy's fault.
                Outcome::PolicyError => {
                    let (message, error) = own_denial
                        .map(|d| (d.message.clone(), d.evaluation_error.as_ref()))
                        .unwrap_or_default();
                    a.errors.push(ObjectError {
                        object: w.id.clone(),
                        outcome: Outcome::PolicyError.as_str(),
                        message,
                        over_cost_budget: error.is_some_and(|e| e.over_cost_budget),
                    })
                }
                other => a.errors.push(ObjectError {
                    object: w.id.clone(),
                    outcome: other.as_str(),
                    message: reading.message.clone().unwrap_or_default(),
                    over_cost_budget: false,
                }),
            }
        }
    }
    drop(replies);
    if let Some(p) = progress {
        p.finish_and_clear();
    }
    report.constraints = audits;
    Ok(report)
}

fn progress_bar(on: bool, len: u64) -> Option<indicatif::ProgressBar> {
    if !on {
        return None;
    }
    let p = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} dry-runs {pos}/{len} [{bar:30}] {per_sec} eta {eta}",
    ) {
        p.set_style(style.progress_chars("=> "));
    }
    Some(p)
}

/// Lists what each bound constraint selects; one work item per object. A constraint whose
/// scope cannot be listed (its label selector is invalid, a list is refused, its namespace
/// selector needs Namespaces that may not be listed) is marked not audited, with the reason;
/// the others go on.
async fn gather(
    reader: &kube::Client,
    bound: &[(usize, &Constraint, &Binding)],
    audits: &mut [ConstraintAudit],
    bucket: &TokenBucket,
    only: Option<&str>,
) -> Result<Vec<Work>, AdmissionError> {
    if bound.is_empty() {
        return Ok(Vec::new());
    }
    // Only the groups the constraints name, when they all name some: one broken aggregated
    // API elsewhere in the cluster must not stop an audit of ConfigMaps.
    let mut groups: BTreeSet<String> = BTreeSet::new();
    let mut every_group = false;
    for (_, c, _) in bound {
        let kinds = &c.matcher.kinds;
        every_group |= kinds.is_empty()
            || kinds
                .iter()
                .any(|k| k.api_groups.is_empty() || k.api_groups.iter().any(|g| g == "*"));
        groups.extend(kinds.iter().flat_map(|k| k.api_groups.iter().cloned()));
    }
    let mut discovery = kube::Discovery::new(reader.clone());
    if !every_group {
        let names: Vec<&str> = groups.iter().map(String::as_str).collect();
        discovery = discovery.filter(&names);
    }
    let discovery = discovery
        .run()
        .await
        .map_err(|e| AdmissionError::request("discovering the cluster's resources", e))?;
    // Namespace labels, for namespace selectors (binding's or constraint's), listed only when
    // one needs them: a user who may not list Namespaces can still audit the rest.
    let needs_labels =
        |(_, c, b): &&(usize, &Constraint, &Binding)| needs_namespace_labels(&b.object, &c.matcher);
    let namespaces = match bound.iter().any(|x| needs_labels(&x)) {
        true => namespace_labels(reader, bucket).await,
        false => Ok(BTreeMap::new()),
    };

    let mut work: BTreeMap<ObjectId, Work> = BTreeMap::new();
    let mut listed = Listed::default();
    for x in bound {
        let (i, c, b) = *x;
        let in_scope = match (&namespaces, needs_labels(&x)) {
            (Err(e), true) => Err(format!(
                "not audited: its namespace selector needs the Namespaces' labels, which could not be listed: {e}"
            )),
            (Ok(labels), _) => {
                let lists = Lists {
                    reader,
                    discovery: &discovery,
                    namespaces: labels,
                    bucket,
                    only,
                };
                scope(&lists, c, b, &mut listed).await
            }
            (Err(_), false) => {
                let lists = Lists {
                    reader,
                    discovery: &discovery,
                    namespaces: &BTreeMap::new(),
                    bucket,
                    only,
                };
                scope(&lists, c, b, &mut listed).await
            }
        };
        let objects = match in_scope {
            Ok(Scope::Objects(objects)) => objects,
            Ok(Scope::Nothing(why)) => {
                audits[i].note = Some(why);
                continue;
            }
            Err(why) => {
                audits[i].status = Status::NotAudited;
                audits[i].note = Some(why);
                continue;
            }
        };
        for (id, resolved, raw) in objects {
            let w = work.entry(id.clone()).or_insert_with(|| Work {
                resolved,
                raw,
                id,
                constraints: Vec::new(),
            });
            if !w.constraints.contains(&i) {
                w.constraints.push(i);
                audits[i].in_scope += 1;
            }
        }
    }
    Ok(work.into_values().collect())
}

/// Every Namespace's labels; `Err`: why they could not be listed.
async fn namespace_labels(
    reader: &kube::Client,
    bucket: &TokenBucket,
) -> Result<BTreeMap<String, BTreeMap<String, String>>, String> {
    let ns_list = Resolved {
        resource: kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
        namespaced: false,
    };
    let items = list_all(reader, &ns_list, None, None, bucket)
        .await
        .map_err(|e| crate::text::error_text(&e))?;
    Ok(items
        .into_iter()
        .map(|n| {
            let name = n["metadata"]["name"].as_str().unwrap_or_default();
            (name.to_string(), labels_of(&n["metadata"]["labels"]))
        })
        .collect())
}

/// Lists already made, shared by the constraints: (resource, namespace, selector) → objects.
type Listed = BTreeMap<(String, Option<String>, Option<String>), Vec<serde_json::Value>>;

/// What one constraint selects.
enum Scope {
    Objects(Vec<(ObjectId, Resolved, serde_json::Value)>),
    /// Nothing, and why (its label selector matches no object).
    Nothing(String),
}

/// What listing a constraint's scope needs, the same for every constraint.
struct Lists<'a> {
    reader: &'a kube::Client,
    discovery: &'a kube::Discovery,
    /// Every Namespace's labels (empty when no selector needs them).
    namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
    bucket: &'a TokenBucket,
    /// `audit -n`: only this namespace's objects.
    only: Option<&'a str>,
}

/// The objects constraint `c` and its binding `b` select; `Err`: why they could not be listed.
async fn scope(
    lists: &Lists<'_>,
    c: &Constraint,
    b: &Binding,
    listed: &mut Listed,
) -> Result<Scope, String> {
    let Lists {
        reader,
        discovery,
        namespaces,
        bucket,
        only,
    } = *lists;
    let selector = match list_selector(c.matcher.label_selector.as_ref()) {
        Ok(ListSelector::All) => None,
        Ok(ListSelector::Filter(s)) => Some(s),
        Ok(ListSelector::Nothing) => {
            return Ok(Scope::Nothing(
                "its spec.match.labelSelector has an In with no values: it selects no object"
                    .into(),
            ));
        }
        Err(e) => {
            return Err(format!(
                "not audited: its spec.match.labelSelector is invalid ({e}); the API server would refuse it"
            ));
        }
    };
    // Literal namespaces are listed one by one; globs need every namespace.
    let literal: Option<BTreeSet<String>> = (!c.matcher.namespaces.is_empty()
        && c.matcher.namespaces.iter().all(|n| !n.contains('*')))
    .then(|| c.matcher.namespaces.iter().cloned().collect());
    let mut out = Vec::new();
    for r in resources_for(c, discovery) {
        let scopes: Vec<Option<String>> = match (only, &literal, r.namespaced) {
            // `-n`: cluster-scoped objects are in no namespace.
            (Some(_), _, false) => Vec::new(),
            (Some(ns), Some(listed), true) if !listed.contains(ns) => Vec::new(),
            (Some(ns), _, true) => vec![Some(ns.to_string())],
            (None, Some(ns), true) => ns.iter().cloned().map(Some).collect(),
            (None, _, _) => vec![None],
        };
        for ns in scopes {
            let key = (
                crate::cluster::discovery::resource_name(&r.resource),
                ns.clone(),
                selector.clone(),
            );
            if !listed.contains_key(&key) {
                let items = list_all(reader, &r, ns.as_deref(), selector.as_deref(), bucket)
                    .await
                    .map_err(|e| format!("not audited: {}", crate::text::error_text(&e)))?;
                listed.insert(key.clone(), items);
            }
            for raw in listed.get(&key).into_iter().flatten() {
                let mut s = Subject::from_manifest(raw);
                s.namespaced = Some(r.namespaced);
                s.resource = Some(r.resource.plural.clone());
                if s.namespace_labels.is_none() {
                    s.namespace_labels = s
                        .namespace
                        .as_ref()
                        .and_then(|n| namespaces.get(n).cloned());
                }
                if binding_selects(&b.object, &s).is_no()
                    || constraint_selects(&c.matcher, &s).is_no()
                {
                    continue;
                }
                let id = ObjectId {
                    api_version: r.resource.api_version.clone(),
                    kind: r.resource.kind.clone(),
                    namespace: s.namespace.clone(),
                    name: s.name.clone(),
                };
                out.push((id, r.clone(), raw.clone()));
            }
        }
    }
    Ok(Scope::Objects(out))
}

/// `check --audit`: an info finding per constraint with violations (what flipping it to deny
/// would break), and per constraint whose verdicts could not all be seen: hidden behind
/// another denial, or objects that could not be checked (forbidden, rejected by a webhook), so
/// a CI job never reads "no violations" where the server was not asked.
pub fn findings(report: &AuditReport) -> Vec<crate::core::Finding> {
    use crate::core::{Code, Finding};
    use crate::model::ObjectRef;
    let mut out = Vec::new();
    for c in &report.constraints {
        let not_audited = c.status == Status::NotAudited;
        if c.violations.is_empty() && c.hidden.is_empty() && c.errors.is_empty() && !not_audited {
            continue;
        }
        let object = ObjectRef::new(
            crate::model::CONSTRAINT_API_VERSION,
            c.constraint.kind.clone(),
            c.constraint.name.clone(),
        );
        let mut message = match (not_audited, &c.note) {
            (true, Some(note)) => note.clone(),
            _ => format!(
                "{} of {} existing object(s) in its scope violate it",
                c.violations.len(),
                c.in_scope
            ),
        };
        if let Some(v) = c.violations.first() {
            message.push_str(&format!(" (e.g. {}: {})", v.object, v.message));
        }
        if !c.hidden.is_empty() {
            message.push_str(&format!(
                "; {} more denied by another binding first, so not observable",
                c.hidden.len()
            ));
        }
        if let Some(e) = c.errors.first() {
            message.push_str(&format!(
                "; {} could not be checked ({}; e.g. {}: {})",
                c.errors.len(),
                unchecked_by_outcome(&c.errors),
                e.object,
                e.message
            ));
        }
        let over_budget: Vec<&ObjectError> =
            c.errors.iter().filter(|e| e.over_cost_budget).collect();
        let mut found = vec![Finding::new(
            Code::ConstraintViolations,
            object.clone(),
            message,
        )];
        if let Some(e) = over_budget.first() {
            found.push(Finding::new(
                Code::PolicyCostExceeded,
                object,
                format!(
                    "its policy's CEL ran over the API server's cost budget on {} of {} existing object(s) in its scope (e.g. {}: {}): under failurePolicy Fail every request for such an object is refused, under Ignore admitted unjudged; the template's CEL must be made cheaper",
                    over_budget.len(),
                    c.in_scope,
                    e.object,
                    e.message
                ),
            ));
        }
        for mut f in found {
            if let Some(b) = &c.binding {
                f = f.related(ObjectRef::new(
                    "admissionregistration.k8s.io/v1",
                    crate::model::VAPB_KIND,
                    b.clone(),
                ));
            }
            out.push(f);
        }
    }
    out
}

/// How many objects could not be checked, per outcome: `2 forbidden, 1 rejected-by-webhook`.
fn unchecked_by_outcome(errors: &[ObjectError]) -> String {
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for e in errors {
        *by.entry(e.outcome).or_default() += 1;
    }
    by.iter()
        .map(|(outcome, n)| format!("{n} {outcome}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The report as event-log lines (`true`: an error line), for the TUI: one per violation,
/// hidden verdict and unchecked object, then the summary.
pub fn event_lines(report: &AuditReport) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let (mut violations, mut audited) = (0, 0);
    for c in &report.constraints {
        if c.status != Status::Audited {
            out.push((
                c.status == Status::NotAudited,
                format!(
                    "audit {}: {}",
                    c.constraint,
                    c.note.as_deref().unwrap_or_default()
                ),
            ));
            continue;
        }
        audited += 1;
        violations += c.violations.len();
        for v in &c.violations {
            out.push((
                false,
                format!(
                    "audit {}: {} {}: {}",
                    c.constraint, v.action, v.object, v.message
                ),
            ));
        }
        for h in &c.hidden {
            out.push((false, format!("audit {}: {} not observable (the server reported only the first denial, by {})", c.constraint, h.object, h.denied_by)));
        }
        for e in &c.errors {
            out.push((
                true,
                format!(
                    "audit {}: {} not checked ({}): {}",
                    c.constraint, e.object, e.outcome, e.message
                ),
            ));
        }
    }
    // Said as `check --audit` and `audit` say it.
    use crate::text::count;
    out.push((
        false,
        format!(
            "audit done: {} in {}; {}",
            count(violations, "violation", "violations"),
            count(audited, "audited constraint", "audited constraints"),
            count(report.requests, "dry-run request", "dry-run requests"),
        ),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A template `template` (when given) defining `K8sRequiredLabels`, and constraints
    /// `(kind, name)`.
    fn snapshot_of(template: Option<&str>, constraints: &[(&str, &str)]) -> Snapshot {
        let mut snap = Snapshot::default();
        let templates = template.map(|name| {
            json!({"apiVersion": "templates.gatekeeper.sh/v1", "kind": "ConstraintTemplate",
                   "metadata": {"name": name},
                   "spec": {"crd": {"spec": {"names": {"kind": "K8sRequiredLabels"}}}}})
        });
        let constraints = constraints.iter().map(|(kind, name)| {
            json!({"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": kind,
                   "metadata": {"name": name}})
        });
        for raw in templates.into_iter().chain(constraints) {
            snap.insert(raw, Default::default()).expect("insert");
        }
        snap
    }

    #[test]
    fn targets_pick_templates_and_constraints() {
        let snap = snapshot_of(None, &[("K8sA", "one"), ("K8sA", "two"), ("K8sB", "one")]);
        let names = |t: Option<&str>| -> Vec<String> {
            select(&snap, t)
                .expect("selects")
                .iter()
                .map(|c| format!("{}/{}", c.kind, c.name()))
                .collect()
        };
        assert_eq!(names(None).len(), 3);
        assert_eq!(names(Some("k8sa")), ["K8sA/one", "K8sA/two"]);
        assert_eq!(names(Some("one")), ["K8sA/one", "K8sB/one"]);
        assert_eq!(names(Some("K8sB/one")), ["K8sB/one"]);
        assert!(select(&snap, Some("nope")).is_err());
    }

    /// The report names the template as it is named in the cluster, read from the snapshot.
    #[test]
    fn the_template_is_the_one_that_defines_the_kind() {
        let snap = snapshot_of(
            Some("required-labels"),
            &[("K8sRequiredLabels", "c"), ("K8sUnread", "c")],
        );
        let picked = select(&snap, None).expect("all");
        let (audits, bound) = entries(&snap, picked);
        let templates: Vec<&str> = audits.iter().map(|a| a.template.as_str()).collect();
        // No template read for K8sUnread: Gatekeeper's naming, the lowercased kind.
        assert_eq!(templates, ["required-labels", "k8sunread"]);
        assert!(bound.is_empty(), "no bindings: nothing to dry-run");
        assert!(audits.iter().all(|a| a.status == Status::NotBound));
    }

    /// A constraint without violations whose objects could not all be checked gets a finding:
    /// CI must not read "no violations" where the server was never asked.
    #[test]
    fn unchecked_objects_make_a_finding() {
        let object = |name: &str| ObjectId {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("shop".into()),
            name: name.into(),
        };
        let unchecked = |name: &str, outcome: &'static str| ObjectError {
            object: object(name),
            outcome,
            message: format!("{outcome} here"),
            over_cost_budget: false,
        };
        let snap = snapshot_of(None, &[("K8sA", "clean"), ("K8sA", "unchecked")]);
        let (mut audits, _) = entries(&snap, select(&snap, None).expect("all"));
        for a in &mut audits {
            (a.in_scope, a.checked) = (3, 3);
        }
        audits[1].errors = vec![
            unchecked("a", "forbidden"),
            unchecked("b", "rejected-by-webhook"),
            unchecked("c", "forbidden"),
        ];
        let report = AuditReport {
            complete: true,
            constraints: audits,
            requests: 3,
        };
        let found = findings(&report);
        assert_eq!(found.len(), 1, "none for the clean constraint: {found:?}");
        assert_eq!(found[0].object.name, "unchecked");
        assert_eq!(
            found[0].message,
            "0 of 3 existing object(s) in its scope violate it; 3 could not be checked \
             (2 forbidden, 1 rejected-by-webhook; e.g. ConfigMap shop/a: forbidden here)"
        );
    }

    /// A report built by hand, as the TUI's event log and `check --audit`'s findings say it:
    /// one line per violation, hidden verdict and unchecked object, one per constraint that
    /// was not audited, then the totals.
    #[test]
    fn a_report_in_event_lines_and_findings() {
        let object = |name: &str| ObjectId {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some("web".into()),
            name: name.into(),
        };
        let constraint = |name: &str, status: Status| ConstraintAudit {
            constraint: ConstraintRef {
                kind: "K8sRequiredLabels".into(),
                name: name.into(),
            },
            template: "k8srequiredlabels".into(),
            binding: Some(format!("gatekeeper-{name}")),
            validation_actions: vec!["Deny".into()],
            status,
            note: None,
            in_scope: 4,
            checked: 4,
            violations: Vec::new(),
            hidden: Vec::new(),
            errors: Vec::new(),
        };
        let violated = ConstraintAudit {
            violations: vec![Violation {
                object: object("a"),
                action: "Deny",
                message: "missing label owner".into(),
            }],
            hidden: vec![Hidden {
                object: object("b"),
                denied_by: "gatekeeper-other".into(),
            }],
            errors: vec![ObjectError {
                object: object("c"),
                outcome: "forbidden",
                message: "pods is forbidden".into(),
                over_cost_budget: false,
            }],
            ..constraint("owner", Status::Audited)
        };
        let dryrun_only = ConstraintAudit {
            note: Some("bound with Audit only: its verdicts go to the audit log".into()),
            ..constraint("audit-only", Status::NotObservable)
        };
        let unlisted = ConstraintAudit {
            note: Some("its namespaces could not be listed".into()),
            ..constraint("unlisted", Status::NotAudited)
        };
        let clean = constraint("clean", Status::Audited);
        let report = AuditReport {
            complete: true,
            constraints: vec![violated, dryrun_only, unlisted, clean],
            requests: 8,
        };
        assert_eq!(report.exit_code(), 2);
        assert_eq!(
            event_lines(&report),
            [
                (false, "audit K8sRequiredLabels/owner: Deny Pod web/a: missing label owner".to_string()),
                (false, "audit K8sRequiredLabels/owner: Pod web/b not observable (the server reported only the first denial, by gatekeeper-other)".into()),
                (true, "audit K8sRequiredLabels/owner: Pod web/c not checked (forbidden): pods is forbidden".into()),
                (false, "audit K8sRequiredLabels/audit-only: bound with Audit only: its verdicts go to the audit log".into()),
                (true, "audit K8sRequiredLabels/unlisted: its namespaces could not be listed".into()),
                (false, "audit done: 1 violation in 2 audited constraints; 8 dry-run requests".into()),
            ]
        );
        let found: Vec<(String, String, Vec<String>)> = findings(&report)
            .into_iter()
            .map(|f| {
                let related = f
                    .related
                    .iter()
                    .map(|r| format!("{}/{}", r.kind, r.name))
                    .collect();
                (f.object.name, f.message, related)
            })
            .collect();
        assert_eq!(
            found,
            [
                (
                    "owner".to_string(),
                    "1 of 4 existing object(s) in its scope violate it (e.g. Pod web/a: missing \
                     label owner); 1 more denied by another binding first, so not observable; 1 \
                     could not be checked (1 forbidden; e.g. Pod web/c: pods is forbidden)"
                        .to_string(),
                    vec!["ValidatingAdmissionPolicyBinding/gatekeeper-owner".to_string()],
                ),
                (
                    "unlisted".into(),
                    "its namespaces could not be listed".into(),
                    vec!["ValidatingAdmissionPolicyBinding/gatekeeper-unlisted".into()],
                ),
            ]
        );
        assert_eq!(
            AuditReport {
                complete: false,
                ..report
            }
            .exit_code(),
            130
        );
    }

    /// As kubectl takes them: kinds in any case, names exactly.
    #[test]
    fn kinds_match_in_any_case_and_names_exactly() {
        let snap = snapshot_of(
            Some("k8srequiredlabels"),
            &[
                ("K8sRequiredLabels", "must-have-owner"),
                ("K8sOther", "Mixed"),
            ],
        );
        let names = |t: &str| -> Vec<String> {
            select(&snap, Some(t))
                .map(|cs| {
                    cs.iter()
                        .map(|c| format!("{}/{}", c.kind, c.name()))
                        .collect()
                })
                .unwrap_or_else(|e| vec![e.to_string()])
        };
        let labels = ["K8sRequiredLabels/must-have-owner"];
        assert_eq!(names("K8sRequiredLabels"), labels);
        assert_eq!(names("k8srequiredlabels"), labels);
        assert_eq!(names("K8SREQUIREDLABELS"), labels);
        assert_eq!(names("k8srequiredlabels/must-have-owner"), labels);
        assert_eq!(names("K8sOther/Mixed"), ["K8sOther/Mixed"]);
        assert_eq!(names("Mixed"), ["K8sOther/Mixed"]);
        // Names are exact.
        assert_eq!(names("mixed"), ["no template or constraint named mixed"]);
        assert_eq!(
            names("K8sOther/mixed"),
            ["no template or constraint named K8sOther/mixed"]
        );
        assert_eq!(names("K8sRequiredLabels/Must-Have-Owner").len(), 1);
        assert!(names("K8sRequiredLabels/Must-Have-Owner")[0].starts_with("no template"));
    }
}
