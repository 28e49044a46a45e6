//! A real kube-controller-manager against a private env: garbage collection by
//! ownerReferences and namespace deletion.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use testenv::poll::within;
use testenv::{TestEnv, rss_kib};

/// The garbage collector first discovers every resource and syncs a monitor per resource.
const GC_TIMEOUT: Duration = Duration::from_secs(90);
const EVERY: Duration = Duration::from_millis(200);

async fn wait_gone<K>(api: &Api<K>, name: &str, what: &str, env: &TestEnv) -> Duration
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let start = Instant::now();
    within(GC_TIMEOUT, EVERY, || async {
        match api.get_opt(name).await {
            Ok(None) => Ok(()),
            Ok(Some(_)) => Err(()),
            Err(e) => panic!("reading {what}: {e}"),
        }
    })
    .await
    .unwrap_or_else(|()| {
        panic!(
            "{what} still there after {GC_TIMEOUT:?}\n{}",
            env.logs_tail()
        )
    });
    start.elapsed()
}

fn config_map(name: &str, owner: Option<(&str, &str)>) -> ConfigMap {
    let mut cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name },
        "data": { "k": "v" },
    });
    if let Some((owner_name, owner_uid)) = owner {
        cm["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner_name, "uid": owner_uid,
        }]);
    }
    serde_json::from_value(cm).expect("valid ConfigMap")
}

#[tokio::test]
#[ignore = "needs a real kube-apiserver: run scripts/test"]
async fn garbage_collector_and_namespace_controller_work() {
    let env = TestEnv::start();
    let kcm = env
        .start_controller_manager()
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!(
        "kube-controller-manager: /healthz after {:?}, RSS {:?} KiB",
        kcm.startup_time(),
        rss_kib(kcm.pid())
    );
    let client = env.client_admin().await;
    let ns = env.create_namespace("gc").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);

    // 1. A dependent whose owner never existed (a made-up uid) is collected.
    cms.create(
        &PostParams::default(),
        &config_map("orphan", Some(("no-such-owner", "0000-no-such-uid"))),
    )
    .await
    .expect("create orphan");
    let took = wait_gone(&cms, "orphan", "dependent of a missing owner", &env).await;
    eprintln!("dependent of a missing owner collected after {took:?}");

    // 2. Deleting an owner (background propagation) collects its dependent.
    let owner = cms
        .create(&PostParams::default(), &config_map("owner", None))
        .await
        .expect("create owner");
    let uid = owner.metadata.uid.clone().expect("uid");
    cms.create(
        &PostParams::default(),
        &config_map("dependent", Some(("owner", &uid))),
    )
    .await
    .expect("create dependent");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        cms.get_opt("dependent").await.expect("get").is_some(),
        "the dependent of a live owner stays"
    );
    cms.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    let took = wait_gone(&cms, "dependent", "dependent of a deleted owner", &env).await;
    eprintln!("dependent of a deleted owner collected after {took:?}");

    // 3. The serviceaccount controller gives namespaces their `default` ServiceAccount.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    within(GC_TIMEOUT, EVERY, || async {
        match sas.get_opt("default").await.expect("get sa") {
            Some(_) => Ok(()),
            None => Err(()),
        }
    })
    .await
    .expect("no default ServiceAccount");

    // 4. A deleted namespace (with content) goes away instead of staying Terminating.
    cms.create(&PostParams::default(), &config_map("content", None))
        .await
        .expect("create content");
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.delete(&ns, &DeleteParams::default())
        .await
        .expect("delete namespace");
    let took = wait_gone(&nss, &ns, "deleted namespace", &env).await;
    eprintln!("deleted namespace gone after {took:?}");

    kcm.stop();
}
