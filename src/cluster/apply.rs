//! Sends one [`PlannedWrite`]: create, replace with the observed resourceVersion, or delete
//! with uid + resourceVersion preconditions, so we never delete an object we did not read
//! (and so never anyone else's object that took the name meanwhile).

use super::discovery::AdmissionApi;
use crate::core::{PlannedWrite, Verb};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams, Preconditions};

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "kubectl-vap";

/// What the server did.
#[derive(Debug, Clone)]
pub enum Applied {
    /// The object as the server returned it.
    Written(serde_json::Value),
    Deleted,
    /// A delete found nothing: someone else deleted it first.
    AlreadyGone,
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The object changed since it was read (409, failed precondition, already exists, or
    /// gone before an update): read again and retry.
    #[error("{0}: the object changed on the server; it will be read again and retried")]
    Conflict(String),
    #[error("{what}: {}", super::describe(source))]
    Failed {
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// The body could not be encoded (a bug in the plan, not the cluster).
    #[error("{what}: {source}")]
    Body {
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// The request could not be built (e.g. a name no URL can hold).
    #[error("{what}: {source}")]
    Request {
        what: String,
        #[source]
        source: kube::core::request::Error,
    },
    #[error("{0}: the write carries no body (a bug in the plan)")]
    NoBody(String),
    /// No answer came before the sender's fence closed: the request was abandoned (its
    /// connection closed), and whether the server applied it is unknown.
    #[error(
        "{what}: no answer within {:.1}s, before this copy's write fence closed; abandoned",
        after.as_secs_f32()
    )]
    Abandoned {
        what: String,
        after: std::time::Duration,
    },
}

impl ApplyError {
    /// How long the server asked the sender to wait before trying again (its 429 or 503
    /// Status' `details.retryAfterSeconds`, which kube-apiserver sets with its Retry-After
    /// header), if it did.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        let ApplyError::Failed { source, .. } = self else {
            return None;
        };
        let kube::Error::Api(status) = &**source else {
            return None;
        };
        let secs = status.details.as_ref()?.retry_after_seconds;
        (secs > 0).then(|| std::time::Duration::from_secs(u64::from(secs)))
    }
}

/// The body as sent: the served apiVersion set (bodies are built as v1).
fn request_body(body: &serde_json::Value, api_version: &str) -> serde_json::Result<Vec<u8>> {
    if body["apiVersion"] == api_version {
        serde_json::to_vec(body)
    } else {
        let mut body = body.clone();
        body["apiVersion"] = api_version.into();
        serde_json::to_vec(&body)
    }
}

/// The server's answer to a create or replace, without managedFields (never read).
fn written(mut v: serde_json::Value) -> Applied {
    if let Some(meta) = v["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    Applied::Written(v)
}

/// Sends `w`. VAP and VAPB bodies are built as v1 and sent as the served version; CRDs as v1.
pub async fn apply_write(
    client: &kube::Client,
    api: &AdmissionApi,
    w: &PlannedWrite,
) -> Result<Applied, ApplyError> {
    send(client, api, w, false).await
}

/// `w` sent as a server-side dry-run (`dryRun=All`, as `kubectl diff` does): validated and
/// admitted by the server as the write would be, and stored nowhere.
pub async fn dry_run_write(
    client: &kube::Client,
    api: &AdmissionApi,
    w: &PlannedWrite,
) -> Result<Applied, ApplyError> {
    send(client, api, w, true).await
}

/// The server's message, if it refuses `w`'s body itself (400, 422): what no retry and no
/// grant changes. A 422 whose cause is `FieldValueForbidden` (a VAP's paramKind needs `get`
/// on that kind from whoever writes it) is about the sender's rights, not the body.
pub fn refusal(e: &ApplyError) -> Option<String> {
    let ApplyError::Failed { source, .. } = e else {
        return None;
    };
    match &**source {
        kube::Error::Api(status) if status.code == 400 || status.code == 422 => {
            let forbidden = status
                .details
                .iter()
                .flat_map(|d| &d.causes)
                .any(|c| c.reason == "FieldValueForbidden");
            (!forbidden).then(|| super::describe(source))
        }
        _ => None,
    }
}

async fn send(
    client: &kube::Client,
    api: &AdmissionApi,
    w: &PlannedWrite,
    dry_run: bool,
) -> Result<Applied, ApplyError> {
    let ar = if w.object.kind == super::discovery::VAP_KIND {
        api.policy()
    } else if w.object.kind == crate::core::crd::CRD_KIND {
        super::discovery::crds_resource()
    } else {
        api.binding()
    };
    let target: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let what = format!("{} {}", w.verb.as_str(), w.object);
    let pp = PostParams {
        dry_run,
        field_manager: Some(FIELD_MANAGER.into()),
    };
    let classify = |e: kube::Error, conflict_codes: &[u16]| -> ApplyError {
        match super::status_code(&e) {
            Some(code) if conflict_codes.contains(&code) => ApplyError::Conflict(what.clone()),
            _ => ApplyError::Failed {
                what: what.clone(),
                source: Box::new(e),
            },
        }
    };
    // Creates and replaces go as bytes and come back as JSON values: no typed round trip.
    let request = kube::core::Request::new(<DynamicObject as kube::Resource>::url_path(&ar, None));
    match w.verb {
        Verb::Create | Verb::Update => {
            let body = w
                .body
                .as_ref()
                .ok_or_else(|| ApplyError::NoBody(what.clone()))?;
            let bytes = request_body(body, &ar.api_version).map_err(|source| ApplyError::Body {
                what: what.clone(),
                source,
            })?;
            let (req, conflict_codes): (_, &[u16]) = if w.verb == Verb::Create {
                (request.create(&pp, bytes), &[409])
            } else {
                (request.replace(&w.object.name, &pp, bytes), &[404, 409])
            };
            let req = req.map_err(|source| ApplyError::Request {
                what: what.clone(),
                source,
            })?;
            let v: serde_json::Value = client
                .request(req)
                .await
                .map_err(|e| classify(e, conflict_codes))?;
            Ok(written(v))
        }
        Verb::Delete => {
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: w.uid.clone(),
                    resource_version: w.resource_version.clone(),
                }),
                dry_run,
                ..DeleteParams::default()
            };
            match target.delete(&w.object.name, &dp).await {
                Ok(_) => Ok(Applied::Deleted),
                Err(e) if super::status_code(&e) == Some(404) => Ok(Applied::AlreadyGone),
                Err(e) => Err(classify(e, &[409])),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(status: serde_json::Value) -> ApplyError {
        let status: kube::core::Status = serde_json::from_value(status).expect("a Status");
        ApplyError::Failed {
            what: "create ValidatingAdmissionPolicy/gatekeeper-k8sx".into(),
            source: Box::new(kube::Error::Api(Box::new(status))),
        }
    }

    /// What `plan` marks as refused: the body (422, 400), never the sender's rights or a
    /// conflict.
    #[test]
    fn a_refusal_is_the_servers_verdict_on_the_body() {
        let invalid = failed(serde_json::json!({
            "code": 422, "reason": "Invalid",
            "message": "spec.validations[0].expression: compilation failed",
            "details": { "causes": [{ "reason": "FieldValueInvalid" }] }
        }));
        assert!(refusal(&invalid).is_some_and(|m| m.contains("compilation failed")));
        let param_kind = failed(serde_json::json!({
            "code": 422, "reason": "Invalid", "message": "spec.paramKind: Forbidden",
            "details": { "causes": [{ "reason": "FieldValueForbidden" }] }
        }));
        assert_eq!(refusal(&param_kind), None);
        assert_eq!(
            refusal(&failed(serde_json::json!({ "code": 403, "message": "no" }))),
            None
        );
        assert_eq!(refusal(&ApplyError::Conflict("409".into())), None);
    }
}
