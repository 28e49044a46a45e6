//! Server-side dry-runs, with the reply kept whole: status code, `Warning` headers (kube's
//! typed calls drop them, and a `Warn` binding's verdict is only there) and the Status body.

use super::AdmissionError;
use crate::core::verdict;
use kube::api::{DynamicObject, GetParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind, Resource};
use kube::discovery::{ApiCapabilities, Scope};
use serde_json::Value;
use std::collections::HashMap;

/// What the server answered.
#[derive(Debug, Clone)]
pub struct Reply {
    pub code: u16,
    /// The texts of every `Warning` header.
    pub warnings: Vec<String>,
    pub body: Value,
}

impl Reply {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.code)
    }
    /// The Status body's message, when the request failed.
    pub fn status_message(&self) -> Option<&str> {
        (!self.ok()).then(|| self.body["message"].as_str().unwrap_or_default())
    }
}

/// Sends a request and keeps the whole reply. `Err` only below HTTP (connection, TLS).
pub async fn send(
    client: &kube::Client,
    req: http::Request<Vec<u8>>,
) -> Result<Reply, kube::Error> {
    let res = client.send(req.map(kube::client::Body::from)).await?;
    let code = res.status().as_u16();
    let warnings = res
        .headers()
        .get_all("warning")
        .iter()
        .flat_map(|v| verdict::warning_texts(&String::from_utf8_lossy(v.as_bytes())))
        .collect();
    let bytes = res.into_body().collect_bytes().await?;
    // A body that is not JSON (a proxy's HTML page) is kept as text in the message.
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| serde_json::json!({"message": String::from_utf8_lossy(&bytes)}));
    Ok(Reply {
        code,
        warnings,
        body,
    })
}

/// A kind's resource, from discovery; cached per command.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub resource: ApiResource,
    pub namespaced: bool,
}

#[derive(Default)]
pub struct Resolver {
    cache: HashMap<(String, String), Result<Resolved, String>>,
}

impl Resolver {
    /// The resource serving `kind` at `api_version`; `Err` says why there is none.
    pub async fn resolve(
        &mut self,
        client: &kube::Client,
        api_version: &str,
        kind: &str,
    ) -> Result<Resolved, String> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(r) = self.cache.get(&key) {
            return r.clone();
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let r = match kube::discovery::pinned_kind(client, &gvk).await {
            Ok((resource, caps)) => Ok(resolved(resource, &caps)),
            Err(e) => Err(format!(
                "{kind} {api_version} is not served by this cluster: {e}"
            )),
        };
        self.cache.insert(key, r.clone());
        r
    }
}

pub fn resolved(resource: ApiResource, caps: &ApiCapabilities) -> Resolved {
    Resolved {
        resource,
        namespaced: matches!(caps.scope, Scope::Namespaced),
    }
}

fn request(r: &Resolved, namespace: Option<&str>) -> kube::core::Request {
    let ns = if r.namespaced { namespace } else { None };
    kube::core::Request::new(DynamicObject::url_path(&r.resource, ns))
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        field_manager: Some("kubectl-vap".into()),
    }
}

fn build(
    what: &'static str,
    r: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
) -> Result<http::Request<Vec<u8>>, AdmissionError> {
    r.map_err(|source| AdmissionError::Build { what, source })
}

/// The live object, `None` when it does not exist. Other replies come back as they are.
pub async fn get(
    client: &kube::Client,
    r: &Resolved,
    namespace: Option<&str>,
    name: &str,
) -> Result<Reply, AdmissionError> {
    let req = build(
        "get",
        request(r, namespace).get(name, &GetParams::default()),
    )?;
    sent(client, req, || {
        format!("reading {} {name}", r.resource.kind)
    })
    .await
}

/// [`send`], a failure said as what was being done.
async fn sent(
    client: &kube::Client,
    req: http::Request<Vec<u8>>,
    what: impl FnOnce() -> String,
) -> Result<Reply, AdmissionError> {
    send(client, req)
        .await
        .map_err(|e| AdmissionError::request(what(), e))
}

/// A dry-run create of `obj`.
pub async fn create(
    client: &kube::Client,
    r: &Resolved,
    namespace: Option<&str>,
    obj: &Value,
) -> Result<Reply, AdmissionError> {
    let body = serde_json::to_vec(obj).map_err(|source| AdmissionError::Encode {
        what: format!("a {}", r.resource.kind),
        source,
    })?;
    let req = build("create", request(r, namespace).create(&dry_run(), body))?;
    sent(client, req, || {
        format!("dry-run create of {}", r.resource.kind)
    })
    .await
}

/// The field manager of `test`'s server-side apply: ours, and not the reconciler's
/// ([`crate::cluster::apply::FIELD_MANAGER`]), so a forced apply of a manifest of one of our
/// own objects takes nothing from the reconciler's fields in what the policies see.
pub const TEST_FIELD_MANAGER: &str = "kubectl-vap-test";

/// A dry-run server-side apply of `obj` (named in its metadata), forced, as `kubectl apply --server-side
/// --dry-run=server --force-conflicts` sends it: the server merges the manifest into the live
/// object (fields the manifest leaves out, such as a bound Pod's `nodeName`, stay as they are)
/// or creates it when absent (HTTP 201). A full replace (PUT) of the same manifest would be
/// refused as invalid before any policy ran.
pub async fn apply(
    client: &kube::Client,
    r: &Resolved,
    namespace: Option<&str>,
    obj: &Value,
) -> Result<Reply, AdmissionError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let params = PatchParams::apply(TEST_FIELD_MANAGER).force().dry_run();
    let req = build(
        "apply",
        request(r, namespace).patch(name, &params, &Patch::Apply(obj)),
    )?;
    sent(client, req, || {
        format!("dry-run apply of {} {name}", r.resource.kind)
    })
    .await
}

/// A dry-run update of `obj` (which carries the resourceVersion it replaces).
pub async fn update(
    client: &kube::Client,
    r: &Resolved,
    namespace: Option<&str>,
    name: &str,
    obj: &Value,
) -> Result<Reply, AdmissionError> {
    let body = serde_json::to_vec(obj).map_err(|source| AdmissionError::Encode {
        what: format!("a {}", r.resource.kind),
        source,
    })?;
    let req = build(
        "update",
        request(r, namespace).replace(name, &dry_run(), body),
    )?;
    sent(client, req, || {
        format!("dry-run update of {} {name}", r.resource.kind)
    })
    .await
}
