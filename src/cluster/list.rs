//! One consistent-enough read of everything the analysis needs, for `check`/`plan` on a
//! live cluster: templates, constraint CRDs, constraints of every kind, VAPs, bindings and
//! Gatekeeper's pod statuses. Resources that cannot be read are reported, never shown as empty.

use super::discovery::{
    AdmissionApi, constraint_resource, pod_status_resources, resource_name, templates_resource,
};
use super::{KubeError, status_code};
use crate::controller::state::AccessError;
use crate::model::{CONSTRAINTS_GROUP, Source};
use crate::snapshot::Snapshot;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;

/// What a failed read of one resource means for the user.
pub fn access_error(resource: &str, e: &kube::Error) -> AccessError {
    AccessError::from_status(resource, status_code(e), "reading", e)
}

async fn list_dynamic(
    client: &kube::Client,
    ar: &ApiResource,
) -> Result<Vec<serde_json::Value>, kube::Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .map(|mut o| {
            o.types = Some(kube::core::TypeMeta {
                api_version: ar.api_version.clone(),
                kind: ar.kind.clone(),
            });
            serde_json::to_value(o).unwrap_or_default()
        })
        .collect())
}

/// The constraint kinds the CRDs define: `(kind, plural)`.
pub fn constraint_kinds(crds: &[CustomResourceDefinition]) -> Vec<(String, String)> {
    crds.iter()
        .filter(|c| c.spec.group == CONSTRAINTS_GROUP)
        .map(|c| (c.spec.names.kind.clone(), c.spec.names.plural.clone()))
        .collect()
}

/// Lists a snapshot. `Err` only when nothing useful can be read (no VAP API, connection);
/// resources that fail individually come back as access errors next to the partial snapshot.
pub async fn list_snapshot(
    client: &kube::Client,
    api: &AdmissionApi,
) -> Result<(Snapshot, Vec<AccessError>), KubeError> {
    let mut snap = Snapshot::default();
    let mut errors = Vec::new();
    let cluster = Source::default();
    let insert = |snap: &mut Snapshot, raw: serde_json::Value| {
        if let Err(e) = snap.insert(raw, cluster.clone()) {
            tracing::warn!("skipping an unreadable object: {e}");
        }
    };

    // CRDs first: they say which constraint kinds exist.
    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crds = match crd_api.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(e) => {
            if matches!(e, kube::Error::Api(_)) {
                errors.push(access_error(
                    "customresourcedefinitions.apiextensions.k8s.io",
                    &e,
                ));
                Vec::new()
            } else {
                return Err(KubeError::request("listing CustomResourceDefinitions", e));
            }
        }
    };
    for crd in crds.iter().filter(|c| c.spec.group == CONSTRAINTS_GROUP) {
        let mut raw = serde_json::to_value(crd).unwrap_or_default();
        raw["apiVersion"] = "apiextensions.k8s.io/v1".into();
        raw["kind"] = "CustomResourceDefinition".into();
        insert(&mut snap, raw);
    }

    let mut resources = vec![templates_resource(), api.policy(), api.binding()];
    for (kind, plural) in constraint_kinds(&crds) {
        resources.push(constraint_resource(&kind, &plural));
    }
    for ar in &resources {
        match list_dynamic(client, ar).await {
            Ok(items) => items.into_iter().for_each(|raw| insert(&mut snap, raw)),
            Err(e @ kube::Error::Api(_)) => errors.push(access_error(&resource_name(ar), &e)),
            Err(e) => {
                return Err(KubeError::request(
                    format!("listing {}", resource_name(ar)),
                    e,
                ));
            }
        }
    }
    // Pod statuses are optional (Gatekeeper may not run here): ignore their errors.
    for ar in pod_status_resources() {
        if let Ok(items) = list_dynamic(client, &ar).await {
            items.into_iter().for_each(|raw| insert(&mut snap, raw));
        }
    }
    snap.now = Some(chrono::Utc::now());
    snap.crds_listed = true;
    snap.unreadable = crate::controller::live::unreadable(&errors);
    Ok((snap, errors))
}
