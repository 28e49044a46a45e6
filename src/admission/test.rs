//! `test -f`: each manifest sent as a server-side dry-run (a create, or a server-side apply onto
//! the live object when it exists) through the cluster's admission chain, the reply attributed binding →
//! constraint → template. Offline (`--offline`), the same manifests are matched against the
//! bindings and constraints in the files by the pure core: which would select each object.

use super::dryrun::{self, Resolver};
use super::objects::Manifest;
use crate::core::Options;
use crate::core::matching::{Selection, Subject, Tri, selections};
use crate::core::verdict::{Outcome, Reading, read_reply};
use crate::snapshot::{ObjectClass, Snapshot, classify};
use serde::Serialize;
use std::collections::BTreeMap;

/// Which object, as the report names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectId {
    pub api_version: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for ObjectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// One manifest's result.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectResult {
    pub object: ObjectId,
    pub source: String,
    /// `create` or `update` (live only); `apply` when the server refused a server-side apply
    /// of an object whose existence we could not read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<&'static str>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub reading: Option<Reading>,
    /// Bindings that select the object, or may (offline: all of them, with the reason).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub selected_by: Vec<Selection>,
    /// Deny bindings that select the object besides the one the server named: the server
    /// reports only its first denial, so these may deny it too.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub may_also_deny: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TestReport {
    pub mode: &'static str,
    pub objects: Vec<ObjectResult>,
    pub summary: BTreeMap<&'static str, usize>,
}

impl TestReport {
    fn new(mode: &'static str, objects: Vec<ObjectResult>) -> Self {
        let mut summary = BTreeMap::new();
        for o in &objects {
            let key = o
                .reading
                .as_ref()
                .map_or("explained", |r| r.outcome.as_str());
            *summary.entry(key).or_default() += 1;
        }
        TestReport {
            mode,
            objects,
            summary,
        }
    }

    /// 0 all admitted without warnings (or offline), 2 when an object could not be sent at
    /// all, else 1.
    pub fn exit_code(&self) -> u8 {
        let outcomes: Vec<Outcome> = self
            .objects
            .iter()
            .filter_map(|o| o.reading.as_ref().map(|r| r.outcome))
            .collect();
        if outcomes.contains(&Outcome::Error) {
            2
        } else if outcomes.iter().all(|o| *o == Outcome::Admitted) {
            0
        } else {
            1
        }
    }
}

fn id_of(raw: &serde_json::Value, namespace: Option<String>) -> ObjectId {
    let (api_version, kind) = crate::model::meta::type_of(raw);
    let m = &raw["metadata"];
    let name = m["name"]
        .as_str()
        .map(str::to_string)
        .or_else(|| m["generateName"].as_str().map(|g| format!("{g}*")))
        .unwrap_or_default();
    ObjectId {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        namespace,
        name,
    }
}

/// Whether a manifest is policy machinery (a template, constraint, VAP, binding, CRD) rather
/// than an object to test: offline, those make up the snapshot the others are matched against.
fn is_policy_object(raw: &serde_json::Value) -> bool {
    !matches!(classify(raw), ObjectClass::Other | ObjectClass::List)
}

/// The snapshot of the policy objects among the manifests (offline).
pub fn policy_snapshot(manifests: &[Manifest]) -> Snapshot {
    let mut snap = Snapshot::default();
    for m in manifests.iter().filter(|m| is_policy_object(&m.raw)) {
        if let Err(e) = snap.insert(m.raw.clone(), m.source.clone()) {
            tracing::warn!("{}: {e}", m.source);
        }
    }
    // An object given twice: the last copy, as `check` and `kubectl apply -f` take it.
    snap.dedupe();
    snap
}

/// Offline: which bindings (in the files, or the ones their constraints would get) select
/// each object that is not itself policy machinery. An object of a namespaced kind that names
/// no namespace is in `namespace` (`-n`) when given, as kubectl would put it there.
pub fn offline(manifests: &[Manifest], opts: &Options, namespace: Option<&str>) -> TestReport {
    let snap = policy_snapshot(manifests);
    let objects = manifests
        .iter()
        .filter(|m| !is_policy_object(&m.raw))
        .map(|m| {
            let mut subject = Subject::from_manifest(&m.raw);
            if subject.namespace.is_none() && subject.namespaced == Some(true) {
                subject.namespace = namespace.map(str::to_string);
            }
            ObjectResult {
                object: id_of(&m.raw, subject.namespace.clone()),
                source: m.source.to_string(),
                operation: None,
                reading: None,
                selected_by: selections(&subject, &snap, opts),
                may_also_deny: Vec::new(),
            }
        })
        .collect();
    TestReport::new("offline", objects)
}

/// The first manifest whose own namespace is not `namespace` (`-n`): its source and
/// namespace. kubectl refuses such an object rather than move it; so does `test`.
pub fn namespace_conflict<'a>(
    manifests: &'a [Manifest],
    namespace: &str,
) -> Option<(&'a Manifest, &'a str)> {
    manifests.iter().find_map(|m| {
        m.raw["metadata"]["namespace"]
            .as_str()
            .filter(|n| !n.is_empty() && *n != namespace)
            .map(|n| (m, n))
    })
}

/// Labels of namespaces, read once each (`None`: could not be read).
#[derive(Default)]
struct NamespaceLabels(BTreeMap<String, Option<BTreeMap<String, String>>>);

impl NamespaceLabels {
    async fn get(&mut self, client: &kube::Client, ns: &str) -> Option<BTreeMap<String, String>> {
        if let Some(l) = self.0.get(ns) {
            return l.clone();
        }
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
        let labels = api
            .get_opt(ns)
            .await
            .ok()
            .flatten()
            .map(|n| n.metadata.labels.unwrap_or_default());
        self.0.insert(ns.to_string(), labels.clone());
        labels
    }
}

fn error_result(m: &Manifest, message: String) -> ObjectResult {
    ObjectResult {
        object: id_of(
            &m.raw,
            m.raw["metadata"]["namespace"].as_str().map(str::to_string),
        ),
        source: m.source.to_string(),
        operation: None,
        reading: Some(Reading {
            outcome: Outcome::Error,
            denial: None,
            warnings: Vec::new(),
            other_warnings: Vec::new(),
            webhook: None,
            message: Some(message),
        }),
        selected_by: Vec::new(),
        may_also_deny: Vec::new(),
    }
}

/// Whether the object exists, read by `client`: `None` when the server would not say.
async fn exists(
    client: &kube::Client,
    r: &dryrun::Resolved,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<bool>, super::AdmissionError> {
    let live = dryrun::get(client, r, namespace, name).await?;
    Ok(match live.code {
        404 => Some(false),
        _ if live.ok() => Some(true),
        _ => None,
    })
}

/// What the dry-run did: the server's answer says it when it succeeded (an apply answers 201
/// when it created the object, a create always does); otherwise whether the object existed;
/// `apply` when neither is known (the server refused an apply of an object we could not read).
fn operation(exists: Option<bool>, reply: &dryrun::Reply) -> &'static str {
    match (reply.ok(), reply.code, exists) {
        (true, 201, _) | (false, _, Some(false)) => "create",
        (true, _, _) | (false, _, Some(true)) => "update",
        (false, _, None) => "apply",
    }
}

/// Live: every manifest dry-run by `actor` (who may be impersonated); `reader` reads what
/// attribution needs (discovery, namespaces); `snap` holds the cluster's bindings and policies.
pub async fn live(
    reader: &kube::Client,
    actor: &kube::Client,
    snap: &Snapshot,
    manifests: &[Manifest],
    opts: &Options,
) -> TestReport {
    let mut resolver = Resolver::default();
    let mut ns_labels = NamespaceLabels::default();
    let mut objects = Vec::new();
    for m in manifests {
        let (api_version, kind) = crate::model::meta::type_of(&m.raw);
        let r = match resolver.resolve(reader, api_version, kind).await {
            Ok(r) => r,
            Err(e) => {
                objects.push(error_result(m, e));
                continue;
            }
        };
        let namespace = r.namespaced.then(|| {
            m.raw["metadata"]["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(actor.default_namespace())
                .to_string()
        });
        let mut body = m.raw.clone();
        if let (Some(ns), Some(meta)) = (&namespace, body["metadata"].as_object_mut()) {
            meta.insert("namespace".into(), ns.clone().into());
        }
        let name = m.raw["metadata"]["name"].as_str().unwrap_or_default();
        let ns = namespace.as_deref();
        // Whether it exists is read with the user's own identity: as an impersonated user
        // who may not `get`, it would look absent and its create be refused AlreadyExists.
        // Absent: a dry-run create, as `kubectl create` sends it. There: a server-side apply,
        // as `kubectl apply --server-side --force-conflicts` sends it — it merges the manifest
        // into the live object, so fields the server set (a bound Pod's `nodeName`, a Job's
        // selector) stay, where a full replace would be refused as invalid before any policy
        // ran. Unknown: the apply too, which creates the object when it is absent.
        let sent = async {
            let exists = match name {
                "" => Some(false),
                _ => exists(reader, &r, ns, name).await?,
            };
            let reply = match exists {
                Some(false) => dryrun::create(actor, &r, ns, &body).await?,
                _ => dryrun::apply(actor, &r, ns, &body).await?,
            };
            Ok::<_, super::AdmissionError>((operation(exists, &reply), reply))
        }
        .await;
        let (operation, reply) = match sent {
            Ok(sent) => sent,
            Err(e) => {
                objects.push(error_result(m, crate::text::error_text(&e)));
                continue;
            }
        };
        let reading = read_reply(reply.code, reply.status_message(), &reply.warnings, snap);

        let mut subject = Subject::from_manifest(&body);
        subject.namespaced = Some(r.namespaced);
        if let Some(ns) = ns {
            subject.namespace_labels = ns_labels.get(reader, ns).await;
        }
        let selected_by: Vec<Selection> = selections(&subject, snap, opts)
            .into_iter()
            .filter(|s| !s.selects.is_no() && !s.planned)
            .collect();
        let may_also_deny = match &reading.denial {
            Some(d) => selected_by
                .iter()
                .filter(|s| Some(&s.binding) != d.binding.as_ref())
                .filter(|s| s.validation_actions.iter().any(|a| a == "Deny"))
                .map(|s| match &s.constraint {
                    Some(c) => format!("binding {} → {c}", s.binding),
                    None => format!("binding {}", s.binding),
                })
                .collect(),
            None => Vec::new(),
        };
        objects.push(ObjectResult {
            object: id_of(&body, namespace.clone()),
            source: m.source.to_string(),
            operation: Some(operation),
            reading: Some(reading),
            selected_by,
            may_also_deny,
        });
    }
    TestReport::new("live", objects)
}

/// What the table says of the server's first denial: a verdict, or the policy's CEL that
/// failed on the object (no verdict: the request was refused by `failurePolicy: Fail`).
fn denial_lines(d: &crate::core::verdict::Attribution) -> String {
    use crate::text::printable;
    let chain = printable(&d.chain()).into_owned();
    let Some(e) = &d.evaluation_error else {
        return format!("  denied by {chain}: {}\n", printable(&d.message));
    };
    let mut out = format!(
        "  refused by {chain}: its CEL failed on the object, so failurePolicy Fail refused it without a verdict: {}\n",
        printable(&d.message)
    );
    if e.over_cost_budget {
        out.push_str("  the expression ran over the API server's CEL cost budget: it fails on every object like this one (under failurePolicy Ignore such objects are admitted unjudged); make it cheaper (fewer nested macros, shorter lists)\n");
    }
    out
}

/// The table form.
pub fn table(report: &TestReport) -> String {
    use crate::text::printable;
    let mut out = String::new();
    for o in &report.objects {
        let p = |s: &str| printable(s).into_owned();
        match &o.reading {
            Some(r) => {
                out.push_str(&format!(
                    "{} ({}): {} (dry-run {})\n",
                    p(&o.object.to_string()),
                    p(&o.source),
                    r.outcome.as_str().to_uppercase(),
                    o.operation.unwrap_or("not sent")
                ));
                if let Some(d) = &r.denial {
                    out.push_str(&denial_lines(d));
                }
                if !o.may_also_deny.is_empty() {
                    out.push_str(&format!(
                        "  the server reports only its first denial; these Deny bindings also select the object and may deny it too: {}\n",
                        p(&o.may_also_deny.join(", "))
                    ));
                }
                for w in &r.warnings {
                    out.push_str(&format!(
                        "  warned by {}: {}\n",
                        p(&w.chain()),
                        p(&w.message)
                    ));
                }
                for w in &r.other_warnings {
                    out.push_str(&format!("  warning: {}\n", p(w)));
                }
                match (r.outcome, &r.message) {
                    (Outcome::Denied | Outcome::PolicyError, _) | (_, None) => {}
                    (Outcome::RejectedByWebhook, Some(m)) => out.push_str(&format!(
                        "  rejected by webhook {}: {}\n",
                        p(r.webhook.as_deref().unwrap_or("?")),
                        p(m)
                    )),
                    (Outcome::Forbidden, Some(m)) => out.push_str(&format!(
                        "  not authorized (no policy was asked): {}\n",
                        p(m)
                    )),
                    (_, Some(m)) => out.push_str(&format!("  {}\n", p(m))),
                }
            }
            None => {
                out.push_str(&format!(
                    "{} ({})\n",
                    p(&o.object.to_string()),
                    p(&o.source)
                ));
                if o.selected_by.is_empty() {
                    out.push_str("  no binding or constraint in the input\n");
                }
                for s in &o.selected_by {
                    let who = match &s.constraint {
                        Some(c) => format!("{} ({c})", s.binding),
                        None => s.binding.clone(),
                    };
                    let planned = if s.planned { ", planned" } else { "" };
                    let why = match (&s.selects, &s.note) {
                        (Tri::Yes, Some(n)) => format!(": {n}"),
                        (t, _) if !t.reason().is_empty() => format!(": {}", t.reason()),
                        _ => String::new(),
                    };
                    out.push_str(&format!(
                        "  {:<7} {} [{}{}]{}\n",
                        s.selects.as_str(),
                        p(&who),
                        s.validation_actions.join(","),
                        planned,
                        p(&why)
                    ));
                }
            }
        }
    }
    let summary: Vec<String> = report
        .summary
        .iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect();
    out.push_str(&format!(
        "\n{} object(s): {}\n",
        report.objects.len(),
        summary.join(", ")
    ));
    out
}

/// The report as event-log lines (`true`: an error line), for the TUI.
pub fn event_lines(report: &TestReport) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    for o in &report.objects {
        let Some(r) = &o.reading else { continue };
        let head = format!(
            "test {}: {} (dry-run {})",
            o.object,
            r.outcome.as_str(),
            o.operation.unwrap_or("not sent")
        );
        match (&r.denial, r.outcome, &r.message) {
            // A policy error is the policy's failure, not the object's: an error line.
            (Some(d), outcome, _) => out.push((
                outcome == Outcome::PolicyError,
                format!("{head} by {}: {}", d.chain(), d.message),
            )),
            (None, Outcome::Admitted | Outcome::Warned, _) | (None, _, None) => {
                out.push((false, head))
            }
            (None, outcome, Some(m)) => {
                out.push((outcome == Outcome::Error, format!("{head}: {m}")))
            }
        }
        if !o.may_also_deny.is_empty() {
            out.push((
                false,
                format!(
                    "test {}: the server reports only its first denial; may also deny: {}",
                    o.object,
                    o.may_also_deny.join(", ")
                ),
            ));
        }
        for w in &r.warnings {
            out.push((
                false,
                format!("test {}: warned by {}: {}", o.object, w.chain(), w.message),
            ));
        }
    }
    out.push((
        false,
        format!(
            "test done: {} object(s): {}",
            report.objects.len(),
            report
                .summary
                .iter()
                .map(|(k, v)| format!("{v} {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(code: u16) -> dryrun::Reply {
        dryrun::Reply {
            code,
            warnings: Vec::new(),
            body: serde_json::Value::Null,
        }
    }

    #[test]
    fn the_operation_is_the_servers_answer_then_what_existed() {
        // An apply that created the object (it was gone after all) answers 201.
        assert_eq!(operation(Some(true), &reply(201)), "create");
        assert_eq!(operation(Some(true), &reply(200)), "update");
        assert_eq!(operation(Some(false), &reply(201)), "create");
        // Refused: what was sent.
        assert_eq!(operation(Some(true), &reply(422)), "update");
        assert_eq!(operation(Some(false), &reply(403)), "create");
        // Not readable with our own identity, and the apply refused: either.
        assert_eq!(operation(None, &reply(403)), "apply");
        assert_eq!(operation(None, &reply(201)), "create");
    }

    fn id(kind: &str, ns: Option<&str>, name: &str) -> ObjectId {
        ObjectId {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: ns.map(str::to_string),
            name: name.into(),
        }
    }

    fn attribution(message: &str) -> crate::core::verdict::Attribution {
        crate::core::verdict::Attribution {
            policy: "gatekeeper-k8srequiredlabels".into(),
            binding: Some("gatekeeper-must-have-owner".into()),
            constraint: Some(crate::core::verdict::ConstraintRef {
                kind: "K8sRequiredLabels".into(),
                name: "must-have-owner".into(),
            }),
            template: Some("k8srequiredlabels".into()),
            attributed_by: Some("binding"),
            message: message.into(),
            evaluation_error: crate::core::verdict::parse_evaluation_error(message),
        }
    }

    /// A verdict reads "denied by"; CEL that failed reads as the policy's failure, and the
    /// cost budget says what would fix it.
    #[test]
    fn a_policy_error_is_not_told_as_a_denial() {
        let verdict = denial_lines(&attribution("missing label owner"));
        assert!(
            verdict.starts_with("  denied by binding gatekeeper-must-have-owner"),
            "{verdict}"
        );
        let cost = denial_lines(&attribution(
            "expression 'x' resulted in error: operation cancelled: actual cost limit exceeded",
        ));
        assert!(
            cost.starts_with("  refused by binding gatekeeper-must-have-owner"),
            "{cost}"
        );
        assert!(cost.contains("without a verdict"), "{cost}");
        assert!(
            cost.contains("ran over the API server's CEL cost budget"),
            "{cost}"
        );
        let other = denial_lines(&attribution(
            "expression 'x' resulted in error: no such key: x",
        ));
        assert!(
            other.contains("without a verdict") && !other.contains("cost budget"),
            "{other}"
        );
    }

    fn reading(outcome: Outcome) -> Reading {
        Reading {
            outcome,
            denial: None,
            warnings: Vec::new(),
            other_warnings: Vec::new(),
            webhook: None,
            message: None,
        }
    }

    fn live(object: ObjectId, operation: &'static str, reading: Reading) -> ObjectResult {
        ObjectResult {
            object,
            source: "pods.yaml".into(),
            operation: Some(operation),
            reading: Some(reading),
            selected_by: Vec::new(),
            may_also_deny: Vec::new(),
        }
    }

    /// Every kind of live answer, as the table and the TUI's event lines say it; what came
    /// from the input or the server is escaped in the table.
    #[test]
    fn a_live_report_in_the_table_and_the_event_lines() {
        let denied = ObjectResult {
            may_also_deny: vec!["gatekeeper-other".into()],
            ..live(
                id("Pod", Some("web"), "a"),
                "create",
                Reading {
                    denial: Some(attribution("missing label owner\u{1b}[2J")),
                    ..reading(Outcome::Denied)
                },
            )
        };
        let warned = live(
            id("Namespace", None, "b"),
            "update",
            Reading {
                warnings: vec![attribution("should have owner")],
                other_warnings: vec!["deprecated API".into()],
                ..reading(Outcome::Warned)
            },
        );
        let webhook = live(
            id("Pod", Some("web"), "c"),
            "create",
            Reading {
                webhook: Some("validation.gatekeeper.sh".into()),
                message: Some("no".into()),
                ..reading(Outcome::RejectedByWebhook)
            },
        );
        let forbidden = live(
            id("Pod", Some("web"), "d"),
            "apply",
            Reading {
                message: Some("pods is forbidden".into()),
                ..reading(Outcome::Forbidden)
            },
        );
        let error = ObjectResult {
            operation: None,
            ..live(
                id("Widget", Some("web"), "e"),
                "create",
                Reading {
                    message: Some("no kind Widget is served".into()),
                    ..reading(Outcome::Error)
                },
            )
        };
        let report = TestReport::new("live", vec![denied, warned, webhook, forbidden, error]);
        assert_eq!(report.exit_code(), 2);
        assert_eq!(
            table(&report),
            "Pod web/a (pods.yaml): DENIED (dry-run create)
  denied by binding gatekeeper-must-have-owner → K8sRequiredLabels/must-have-owner → template k8srequiredlabels: missing label owner\\x1b[2J
  the server reports only its first denial; these Deny bindings also select the object and may deny it too: gatekeeper-other
Namespace b (pods.yaml): WARNED (dry-run update)
  warned by binding gatekeeper-must-have-owner → K8sRequiredLabels/must-have-owner → template k8srequiredlabels: should have owner
  warning: deprecated API
Pod web/c (pods.yaml): REJECTED-BY-WEBHOOK (dry-run create)
  rejected by webhook validation.gatekeeper.sh: no
Pod web/d (pods.yaml): FORBIDDEN (dry-run apply)
  not authorized (no policy was asked): pods is forbidden
Widget web/e (pods.yaml): ERROR (dry-run not sent)
  no kind Widget is served

5 object(s): 1 denied, 1 error, 1 forbidden, 1 rejected-by-webhook, 1 warned
"
        );
        let lines: Vec<String> = event_lines(&report)
            .into_iter()
            .map(|(error, l)| format!("{}{l}", if error { "E " } else { "" }))
            .collect();
        assert_eq!(
            lines,
            [
                "test Pod web/a: denied (dry-run create) by binding gatekeeper-must-have-owner → K8sRequiredLabels/must-have-owner → template k8srequiredlabels: missing label owner\u{1b}[2J",
                "test Pod web/a: the server reports only its first denial; may also deny: gatekeeper-other",
                "test Namespace b: warned (dry-run update)",
                "test Namespace b: warned by binding gatekeeper-must-have-owner → K8sRequiredLabels/must-have-owner → template k8srequiredlabels: should have owner",
                "test Pod web/c: rejected-by-webhook (dry-run create): no",
                "test Pod web/d: forbidden (dry-run apply): pods is forbidden",
                "E test Widget web/e: error (dry-run not sent): no kind Widget is served",
                "test done: 5 object(s): 1 denied, 1 error, 1 forbidden, 1 rejected-by-webhook, 1 warned",
            ]
        );
    }

    /// Offline: which bindings would select each object, and why (or why they may).
    #[test]
    fn an_offline_report_names_each_selecting_binding_and_why() {
        let selection =
            |binding: &str, selects: Tri, planned: bool, note: Option<&str>| Selection {
                binding: binding.into(),
                policy: "p".into(),
                constraint: Some(crate::core::verdict::ConstraintRef {
                    kind: "K8sRequiredLabels".into(),
                    name: "c".into(),
                }),
                validation_actions: vec!["Deny".into(), "Audit".into()],
                planned,
                selects,
                note: note.map(str::to_string),
            };
        let explained = ObjectResult {
            object: id("Pod", Some("web"), "a"),
            source: "pods.yaml".into(),
            operation: None,
            reading: None,
            selected_by: vec![
                selection(
                    "b1",
                    Tri::Yes,
                    false,
                    Some("if the template's matchConditions hold"),
                ),
                selection(
                    "b2",
                    Tri::Unknown("namespace labels unknown".into()),
                    true,
                    None,
                ),
                selection("b3", Tri::No("other namespace".into()), false, None),
            ],
            may_also_deny: Vec::new(),
        };
        let alone = ObjectResult {
            object: id("ConfigMap", Some("web"), "b"),
            selected_by: Vec::new(),
            ..explained.clone()
        };
        let report = TestReport::new("offline", vec![explained, alone]);
        assert_eq!(report.exit_code(), 0);
        assert_eq!(
            table(&report),
            "Pod web/a (pods.yaml)
  yes     b1 (K8sRequiredLabels/c) [Deny,Audit]: if the template's matchConditions hold
  unknown b2 (K8sRequiredLabels/c) [Deny,Audit, planned]: namespace labels unknown
  no      b3 (K8sRequiredLabels/c) [Deny,Audit]: other namespace
ConfigMap web/b (pods.yaml)
  no binding or constraint in the input

2 object(s): 2 explained
"
        );
        assert_eq!(
            event_lines(&report),
            [(false, "test done: 2 object(s): 2 explained".to_string())]
        );
    }
}
