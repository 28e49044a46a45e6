//! Lists and watches that decode each object on its own, so one object that cannot be decoded
//! costs only itself.
//!
//! kube's `Api::list` decodes a whole list in one go: one constraint whose parameters nest
//! deeper than serde_json's recursion limit (128) failed its whole kind's list, every time,
//! which made every constraint of that kind unknown, `/readyz` fail and `check` exit 2. Here a
//! list's items and a watch's objects are kept as raw JSON (serde_json's `RawValue`: skipping a
//! value is not recursive, so no depth limit applies to it) and decoded one by one. An object
//! that fails becomes a stub: its type and metadata (read shallowly, everything else skipped),
//! and [`UNDECODABLE`] with the reason, which the model reads as an error of that object (a
//! finding naming it, see `model::UNDECODABLE`); stores and snapshots still know it exists.

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::core::Request;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use std::marker::PhantomData;

pub use crate::model::UNDECODABLE;

/// An object that could not be decoded: who it is, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecodable {
    /// `Kind namespace/name` (or `Kind name`), as far as it could be read.
    pub object: String,
    pub resource_version: String,
    pub reason: String,
}

/// A list as the server sent it: its items, decoded one by one (undecodable ones as stubs),
/// and what could not be decoded.
#[derive(Debug)]
pub struct Listed<K> {
    pub items: Vec<K>,
    pub resource_version: String,
    pub undecodable: Vec<Undecodable>,
}

/// A watch's events, each object decoded on its own: an undecodable one as its stub, and why.
pub type Changes<K> = BoxStream<'static, Result<(WatchEvent<K>, Option<Undecodable>), kube::Error>>;

/// An object read as far as it goes without reading its content: what a stub keeps.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Shallow {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: ShallowMeta,
    #[serde(default)]
    spec: ShallowSpec,
}

#[derive(Deserialize, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ShallowMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    resource_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    creation_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    labels: Option<std::collections::BTreeMap<String, String>>,
}

/// What of a spec names the object's kind: a CRD's group and names, a ConstraintTemplate's
/// `crd.spec.names.kind`.
#[derive(Deserialize, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ShallowSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    names: Option<Names>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scope: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    crd: Option<TemplateCrd>,
}

#[derive(Deserialize, serde::Serialize)]
struct TemplateCrd {
    #[serde(default)]
    spec: TemplateCrdSpec,
}

#[derive(Deserialize, Default, serde::Serialize)]
struct TemplateCrdSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    names: Option<Names>,
}

#[derive(Deserialize, Default, serde::Serialize)]
struct Names {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    plural: Option<String>,
}

/// Why `e` failed, for people: serde_json's words, and what its recursion limit means.
fn reason_of(e: &serde_json::Error) -> String {
    let said = e.to_string();
    if said.contains("recursion limit exceeded") {
        format!("it nests deeper than the 128 levels a JSON decoder here accepts ({said})")
    } else {
        said
    }
}

/// `raw` decoded as a `K`; if it cannot be, a stub of it and why.
pub fn decode<K: DeserializeOwned>(raw: &RawValue) -> (Option<K>, Option<Undecodable>) {
    let e = match serde_json::from_str::<K>(raw.get()) {
        Ok(k) => return (Some(k), None),
        Err(e) => e,
    };
    let reason = reason_of(&e);
    let shallow: Shallow = serde_json::from_str(raw.get()).unwrap_or_default();
    let object = match (&shallow.metadata.namespace, &shallow.metadata.name) {
        (Some(ns), Some(n)) => format!("{ns}/{n}"),
        (None, Some(n)) => n.clone(),
        _ => "(no name)".into(),
    };
    let bad = Undecodable {
        object: format!(
            "{} {object}",
            shallow.kind.as_deref().unwrap_or("an object")
        ),
        resource_version: shallow
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default(),
        reason: reason.clone(),
    };
    let mut stub = serde_json::json!({
        "metadata": shallow.metadata,
        "spec": shallow.spec,
        UNDECODABLE: reason,
    });
    if let Some(v) = shallow.api_version {
        stub["apiVersion"] = v.into();
    }
    // A CRD's spec has fields without defaults: a stub CRD serves nothing and is not
    // Established, but it exists (so nothing tries to create it again).
    if shallow.kind.as_deref() == Some("CustomResourceDefinition") {
        stub["spec"]["versions"] = serde_json::json!([]);
        if stub["spec"]["scope"].is_null() {
            stub["spec"]["scope"] = "Cluster".into();
        }
    }
    if let Some(k) = shallow.kind {
        stub["kind"] = k.into();
    }
    // A typed object (a CRD) that needs fields the stub lacks cannot be kept: reported only.
    (serde_json::from_value(stub).ok(), Some(bad))
}

/// Lists and watches one resource (`url_path`, as `kube::Resource::url_path` gives it), each
/// object decoded on its own ([`decode`]).
#[derive(Clone)]
pub struct Objects<K> {
    client: kube::Client,
    request: std::sync::Arc<Request>,
    _k: PhantomData<fn() -> K>,
}

#[derive(Deserialize)]
struct RawList {
    #[serde(default)]
    metadata: kube::core::ListMeta,
    #[serde(default)]
    items: Vec<Box<RawValue>>,
}

impl<K: DeserializeOwned> Objects<K> {
    pub fn new(client: kube::Client, url_path: impl Into<String>) -> Self {
        Objects {
            client,
            request: std::sync::Arc::new(Request::new(url_path)),
            _k: PhantomData,
        }
    }

    /// The objects the list `lp` selects.
    pub async fn list(&self, lp: &ListParams) -> Result<Listed<K>, kube::Error> {
        let mut req = self.request.list(lp).map_err(kube::Error::BuildRequest)?;
        req.extensions_mut().insert("list");
        let text = self.client.request_text(req).await?;
        let list: RawList = serde_json::from_str(&text).map_err(kube::Error::SerdeError)?;
        let mut out = Listed {
            items: Vec::with_capacity(list.items.len()),
            resource_version: list.metadata.resource_version.unwrap_or_default(),
            undecodable: Vec::new(),
        };
        for raw in &list.items {
            let (item, bad) = decode(raw);
            out.items.extend(item);
            out.undecodable.extend(bad);
        }
        Ok(out)
    }

    /// The changes from resourceVersion `rv` on: each object decoded on its own, an
    /// undecodable one as a stub (with why, beside the event).
    pub async fn watch(&self, wp: &WatchParams, rv: &str) -> Result<Changes<K>, kube::Error>
    where
        K: Clone + Send + 'static,
    {
        let mut req = self
            .request
            .watch(wp, rv)
            .map_err(kube::Error::BuildRequest)?;
        req.extensions_mut().insert("watch");
        let events = self.client.request_events::<Box<RawValue>>(req).await?;
        Ok(events.map(|e| e.map(decode_event)).boxed())
    }
}

fn decode_event<K: DeserializeOwned>(
    e: WatchEvent<Box<RawValue>>,
) -> (WatchEvent<K>, Option<Undecodable>) {
    let one = |raw: Box<RawValue>, f: fn(K) -> WatchEvent<K>| {
        let (k, bad) = decode::<K>(&raw);
        match k {
            Some(k) => (f(k), bad),
            // Not even a stub: nothing to apply; the bookmark-like event keeps the watch going.
            None => (
                WatchEvent::Bookmark(kube::core::watch::Bookmark {
                    types: Default::default(),
                    metadata: kube::core::watch::BookmarkMeta {
                        resource_version: bad
                            .as_ref()
                            .map(|b| b.resource_version.clone())
                            .unwrap_or_default(),
                        annotations: Default::default(),
                    },
                }),
                bad,
            ),
        }
    };
    match e {
        WatchEvent::Added(raw) => one(raw, WatchEvent::Added),
        WatchEvent::Modified(raw) => one(raw, WatchEvent::Modified),
        WatchEvent::Deleted(raw) => one(raw, WatchEvent::Deleted),
        WatchEvent::Bookmark(b) => (WatchEvent::Bookmark(b), None),
        WatchEvent::Error(s) => (WatchEvent::Error(s), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::DynamicObject;

    /// `depth` objects nested in `spec.parameters`.
    fn deep(depth: usize) -> String {
        let mut inner = String::from("1");
        for _ in 0..depth {
            inner = format!("{{\"a\":{inner}}}");
        }
        format!(
            r#"{{"apiVersion":"constraints.gatekeeper.sh/v1beta1","kind":"K8sDeep","metadata":{{"name":"deep","resourceVersion":"7","uid":"u1"}},"spec":{{"parameters":{inner}}}}}"#
        )
    }

    #[test]
    fn a_deep_object_is_a_stub_naming_it_and_the_rest_of_its_list_decodes() {
        let body = format!(
            r#"{{"metadata":{{"resourceVersion":"9"}},"items":[{},{}]}}"#,
            deep(200),
            deep(3).replace("\"deep\"", "\"fine\"")
        );
        // What kube's own list decoding does with it: the whole list fails.
        let whole = serde_json::from_str::<kube::core::ObjectList<DynamicObject>>(&body);
        assert!(
            whole
                .as_ref()
                .is_err_and(|e| e.to_string().contains("recursion limit")),
            "{whole:?}"
        );
        let list: RawList = serde_json::from_str(&body).expect("the list itself decodes");
        let decoded: Vec<_> = list
            .items
            .iter()
            .map(|r| decode::<DynamicObject>(r))
            .collect();
        let (stub, bad) = &decoded[0];
        let stub = stub.as_ref().expect("a stub");
        assert_eq!(stub.metadata.name.as_deref(), Some("deep"));
        assert_eq!(stub.metadata.resource_version.as_deref(), Some("7"));
        let bad = bad.as_ref().expect("why");
        assert_eq!(bad.object, "K8sDeep deep");
        assert!(bad.reason.contains("128 levels"), "{}", bad.reason);
        assert_eq!(stub.data[UNDECODABLE], bad.reason.as_str());
        assert!(
            stub.data["spec"].get("parameters").is_none(),
            "content dropped"
        );
        let (fine, none) = &decoded[1];
        assert!(none.is_none());
        assert_eq!(
            fine.as_ref().and_then(|o| o.metadata.name.as_deref()),
            Some("fine")
        );
        assert_eq!(
            fine.as_ref().map(|o| o.data[UNDECODABLE].is_null()),
            Some(true)
        );
    }

    /// Every CRD of the cluster is watched: a deep schema in any of them must not blind the
    /// copy to the others.
    #[test]
    fn a_deep_crd_is_a_stub_that_still_names_its_group_and_kind() {
        let mut schema = String::from(r#"{"type":"object"}"#);
        for _ in 0..70 {
            schema = format!(r#"{{"type":"object","properties":{{"a":{schema}}}}}"#);
        }
        let crd = format!(
            r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{{"name":"k8sdeep.constraints.gatekeeper.sh","resourceVersion":"3"}},"spec":{{"group":"constraints.gatekeeper.sh","names":{{"kind":"K8sDeep","plural":"k8sdeep"}},"scope":"Cluster","versions":[{{"name":"v1beta1","served":true,"storage":true,"schema":{{"openAPIV3Schema":{schema}}}}}]}}}}"#
        );
        let raw = RawValue::from_string(crd).expect("raw");
        let (stub, bad) = decode::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(&raw);
        let stub = stub.expect("a stub CRD");
        assert!(bad.is_some());
        assert_eq!(stub.spec.group, "constraints.gatekeeper.sh");
        assert_eq!(stub.spec.names.kind, "K8sDeep");
        assert!(stub.spec.versions.is_empty() && stub.status.is_none());
    }

    #[test]
    fn a_watch_event_of_a_deep_object_is_its_stub() {
        let line = format!(r#"{{"type":"MODIFIED","object":{}}}"#, deep(300));
        let raw: WatchEvent<Box<RawValue>> = serde_json::from_str(&line).expect("the event");
        let (event, bad) = decode_event::<DynamicObject>(raw);
        assert!(
            matches!(&event, WatchEvent::Modified(o) if o.metadata.name.as_deref() == Some("deep"))
        );
        assert!(bad.is_some());
    }
}
