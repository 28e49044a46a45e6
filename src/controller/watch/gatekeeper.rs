//! Coexistence with Gatekeeper's own generator (spec §6): if a Gatekeeper Deployment runs the
//! `generate` operation (or no `--operation` at all, which enables every operation), both would
//! write the same objects and thrash. `run` then refuses to write unless `--take-over` — at
//! start, and whenever a periodic re-check finds the generator switched on later.

use super::resync::Resync;
use crate::controller::view::state::{EventResult, EventVerb};
use crate::controller::view::status::Status;
use crate::model::ObjectRef;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams};
use std::sync::Arc;
use std::time::Duration;

/// How to switch Gatekeeper's generation off: the message users see.
pub const HOW_TO_DISABLE: &str = "switch Gatekeeper's generator off (Helm: --set audit.disableGenerateOperation=true, and keep controllerManager.disableGenerateOperation=true; plain manifests: remove --operation=generate from the gatekeeper-audit container, and give every Gatekeeper container explicit --operation flags), or pass --take-over to write anyway (`kubectl vap help gatekeeper`)";

/// The `--operation` values of a container's command line, or `None` when it sets none.
fn operations<'a>(mut tokens: impl Iterator<Item = &'a String>) -> Option<Vec<String>> {
    let mut ops: Option<Vec<String>> = None;
    while let Some(t) = tokens.next() {
        let t = t.trim();
        let flag = t.strip_prefix("--").or_else(|| t.strip_prefix('-'));
        let value = match flag.and_then(|f| f.strip_prefix("operation")) {
            Some("") => tokens.next().map(String::as_str),
            Some(v) => v.strip_prefix('='),
            None => None,
        };
        if let Some(v) = value {
            let values = v.split(',').map(|s| s.trim().to_string());
            ops.get_or_insert_default().extend(values);
        }
    }
    ops
}

/// What in these Deployments looks like an active Gatekeeper generator.
fn generator_active(deployments: &[Deployment]) -> Vec<String> {
    let mut found = Vec::new();
    for d in deployments {
        let name = d.metadata.name.clone().unwrap_or_default();
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let spec = d.spec.as_ref().filter(|s| s.replicas != Some(0));
        let Some(pod) = spec.and_then(|s| s.template.spec.as_ref()) else {
            continue;
        };
        for c in &pod.containers {
            let image = c.image.clone().unwrap_or_default();
            let is_gatekeeper = image.contains("gatekeeper")
                && !image.contains("kubectl-vap")
                && !image.contains("gatekeeper-crds");
            if !is_gatekeeper {
                continue;
            }
            let what = match operations(c.command.iter().flatten().chain(c.args.iter().flatten())) {
                None => "sets no --operation (all operations, including generate, are on)",
                Some(ops) if ops.iter().any(|o| o == "generate") => "runs --operation=generate",
                Some(_) => continue,
            };
            let container = &c.name;
            found.push(format!(
                "Deployment {ns}/{name} container {container} {what}"
            ));
        }
    }
    found
}

/// Lists the Deployments of Gatekeeper's namespace (`--gatekeeper-namespace`), a page at a
/// time, and applies `generator_active`. Only there: the rights to list Deployments
/// cluster-wide would read every Deployment's spec, env values among them (issue 42).
pub async fn detect(
    client: &kube::Client,
    namespace: &str,
) -> Result<Option<String>, crate::cluster::KubeError> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let mut found: Vec<String> = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await.map_err(|e| {
            crate::cluster::KubeError::request(
                format!("listing Deployments in {namespace} to detect Gatekeeper's generator"),
                e,
            )
        })?;
        found.extend(generator_active(&page.items));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok((!found.is_empty()).then(|| found.join("; ")))
}

/// May touch what looking for Gatekeeper's generator again uses: the client (its
/// Deployments), the status (whether this copy writes, the event log) and a [`Resync`] when
/// the generator is off again.
pub struct RecheckContext {
    pub client: kube::Client,
    pub status: Arc<Status>,
    pub resync: Resync,
}

/// Stops writing while Gatekeeper's own generator is active, and resumes (with a resync) once
/// it is off again. Only for a copy that was allowed to write at start.
pub(in crate::controller) async fn recheck(
    ctx: RecheckContext,
    namespace: String,
    every: Duration,
) {
    loop {
        tokio::time::sleep(every).await;
        let found = match detect(&ctx.client, &namespace).await {
            Ok(found) => found,
            Err(e) => {
                tracing::debug!("{e}; keeping the last answer");
                continue;
            }
        };
        if found == ctx.status.gatekeeper_generator() {
            continue;
        }
        ctx.status.set_writes_enabled(found.is_none());
        let (result, detail) = match &found {
            Some(what) => {
                let msg = format!(
                    "Gatekeeper's generator looks active: {what}. Not writing until it is off: {HOW_TO_DISABLE}"
                );
                tracing::error!("{msg}");
                (EventResult::Skipped(msg), String::new())
            }
            None => {
                tracing::info!("Gatekeeper's generator is off again: writing (resync)");
                (
                    EventResult::Ok,
                    "Gatekeeper's generator is off again; resync".into(),
                )
            }
        };
        let deployments = ObjectRef::new("apps/v1", "Deployment", "*");
        ctx.status
            .log(EventVerb::Gatekeeper, deployments, result, detail);
        if found.is_none() {
            ctx.resync.resync();
        }
        ctx.status.set_gatekeeper_generator(found);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_generate_operation_is_found_in_every_spelling_and_by_default() {
        let active = |args: serde_json::Value, replicas: i32| {
            let d = serde_json::from_value(json!({
                "metadata": { "name": "gatekeeper-audit", "namespace": "gatekeeper-system" },
                "spec": {
                    "replicas": replicas,
                    "selector": {},
                    "template": { "spec": { "containers": [{
                        "name": "manager",
                        "image": "openpolicyagent/gatekeeper:v3.23.0",
                        "args": args
                    }] } }
                }
            }));
            generator_active(&[d.expect("deployment literal")]).join("; ")
        };
        const GENERATE: &str = "runs --operation=generate";
        for (args, replicas, found) in [
            (
                json!(["--operation=audit", "--operation=generate"]),
                1,
                GENERATE,
            ),
            (json!(["--operation", "generate"]), 1, GENERATE),
            (json!(["-operation=audit,generate,status"]), 1, GENERATE),
            // No --operation at all enables every operation.
            (json!(["--port=8443"]), 1, "no --operation"),
            (json!(["--operation=webhook", "--operation=audit"]), 1, ""),
            (json!([]), 0, ""),
        ] {
            let said = active(args.clone(), replicas);
            assert!(
                said.contains(found) && found.is_empty() == said.is_empty(),
                "{args}: {said}"
            );
        }
    }
}
