//! The built-in resource table (`crates/core/src/model/builtin_resources.json`) that offline
//! analysis narrows bindings with is what a real kube-apiserver serves: every built-in kind
//! with its resources and subresources (`request.kind` for each). A new Kubernetes version that adds or
//! moves a resource fails here; regenerate the table with
//! `UPDATE_BUILTIN_RESOURCES=1 cargo test --test e2e_served` (on a server with no CRDs).

// A scenario, not held to the limits on one function (Cargo.toml, `[workspace.lints]`).
#![allow(clippy::cognitive_complexity, clippy::too_many_lines)]

use kubectl_vap::cluster::discovery::discover_served;
use kubectl_vap::model::served::{Served, ServedResource};
use testenv::TestEnv;

/// Groups that come from CRDs or aggregated APIs other tests may install.
fn built_in(r: &ServedResource) -> bool {
    !r.group.contains(".gatekeeper.sh")
        && !r.group.ends_with(".example.com")
        && !r.group.ends_with(".test")
}

#[tokio::test]
async fn the_builtin_table_is_what_the_api_server_serves() {
    let env = TestEnv::shared();
    let client = env.client_admin().await;
    let served = discover_served(&client).await.expect("discovery");
    assert!(
        served.failed_groups.is_empty(),
        "{:?}",
        served.failed_groups
    );
    let live: Vec<ServedResource> = served.rows().into_iter().filter(built_in).collect();
    assert!(
        live.len() > 50,
        "a bare API server serves more: {}",
        live.len()
    );
    if std::env::var_os("UPDATE_BUILTIN_RESOURCES").is_some() {
        let rows: Vec<serde_json::Value> = live
            .iter()
            .map(|r| {
                serde_json::json!({"group": r.group, "resource": r.resource,
                    "kind_group": r.kind_group, "kind": r.kind})
            })
            .collect();
        let mut text = String::from("[\n");
        for (i, r) in rows.iter().enumerate() {
            text.push_str(&format!(
                "  {r}{}\n",
                if i + 1 < rows.len() { "," } else { "" }
            ));
        }
        text.push_str("]\n");
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/crates/core/src/model/builtin_resources.json"
        );
        std::fs::write(path, text).expect("writing the table");
        return;
    }
    let table: Vec<ServedResource> = Served::builtin().rows();
    let missing: Vec<_> = live.iter().filter(|r| !table.contains(r)).collect();
    let extra: Vec<_> = table.iter().filter(|r| !live.contains(r)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "the built-in table differs from the API server's discovery\nserved, not in the table: {missing:#?}\nin the table, not served: {extra:#?}\n(UPDATE_BUILTIN_RESOURCES=1 regenerates it)"
    );
}
