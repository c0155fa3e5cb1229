//! The writer against the dev cluster, with the real kube-apiserver as the reference: each flow
//! runs on both and must give the same answers. Server-side apply's field ownership (managers in
//! `managedFields`, the conflict naming the other manager, `force`, a field the applier stopped
//! applying removed) and `events.k8s.io/v1` Events as kube's recorder writes them (create, then
//! the series patch of a repeat), also visible as core `v1` Events (what `kubectl get events`
//! lists).

use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Namespace};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmformer_devcluster::{DevCluster, DevClusterConfig};
use wasmformer_tests::apiserver::KubeApiserver;
use wasmformer_tests::writer::{WriterProbe, apply, force_apply};

const CONFIGMAPS: &str =
    "[{apiVersion: v1, kind: ConfigMap, verbs: [apply, patch, create, delete]}]";

fn cm(ns: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data})
}

/// Runs `flow` on the real kube-apiserver and on a fresh dev cluster, each with a new namespace.
async fn on_both<F, Fut>(prefix: &str, flow: F)
where
    F: Fn(kube::Client, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let server = KubeApiserver::shared();
    flow(server.admin().await, server.namespace(prefix).await).await;
    let dev = DevCluster::start(DevClusterConfig::default())
        .await
        .unwrap();
    let client = dev.client().unwrap();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": prefix}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    flow(client, prefix.to_owned()).await;
    dev.shutdown().await.unwrap();
}

fn managers(cm: &ConfigMap) -> Vec<(String, String)> {
    cm.metadata
        .managed_fields
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect()
}

async fn ownership_flow(client: kube::Client, ns: String) {
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    cms.patch(
        "owned",
        &PatchParams::apply("kubectl"),
        &Patch::Apply(cm(&ns, "owned", json!({"team": "a", "tier": "web"}))),
    )
    .await
    .unwrap();
    assert_eq!(
        managers(&cms.get("owned").await.unwrap()),
        [("kubectl".to_owned(), "Apply".to_owned())]
    );
    let mut probe = WriterProbe::start(client.clone(), CONFIGMAPS, false, false).await;
    let error = probe
        .write(&ns, apply(cm(&ns, "owned", json!({"team": "b"}))))
        .await
        .unwrap_err();
    assert!(
        error.contains("conflict:")
            && error
                .contains("Apply failed with 1 conflict: conflict with \"kubectl\": .data.team"),
        "{error}"
    );
    assert_eq!(cms.get("owned").await.unwrap().data.unwrap()["team"], "a");
    // The same value is no conflict: the field is shared.
    probe
        .write(
            &ns,
            apply(cm(&ns, "owned", json!({"tier": "web", "x": "1"}))),
        )
        .await
        .unwrap();
    probe
        .write(
            &ns,
            force_apply(cm(&ns, "owned", json!({"team": "b", "x": "1"}))),
        )
        .await
        .unwrap();
    let got = cms.get("owned").await.unwrap();
    assert_eq!(
        got.data.clone().unwrap()["team"],
        "b",
        "force takes the field over"
    );
    assert_eq!(
        managers(&got),
        [
            ("kubectl".to_owned(), "Apply".to_owned()),
            ("wasmformer/probe".to_owned(), "Apply".to_owned())
        ]
    );
    // kubectl's next apply of its old value now conflicts with the plugin.
    let again = cms
        .patch(
            "owned",
            &PatchParams::apply("kubectl"),
            &Patch::Apply(cm(&ns, "owned", json!({"team": "a", "tier": "web"}))),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = again else {
        panic!("{again:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        "Apply failed with 1 conflict: conflict with \"wasmformer/probe\": .data.team"
    );
    // The plugin stops applying `x`, which only it owns: it is removed; `tier`, still kubectl's,
    // stays though the plugin stopped applying it too.
    probe
        .write(&ns, apply(cm(&ns, "owned", json!({"team": "b"}))))
        .await
        .unwrap();
    let data = cms.get("owned").await.unwrap().data.unwrap();
    assert_eq!(
        data.into_iter().collect::<Vec<_>>(),
        [
            ("team".to_owned(), "b".to_owned()),
            ("tier".to_owned(), "web".to_owned())
        ]
    );
    // An update (merge patch) takes the fields it changes from their owners.
    cms.patch(
        "owned",
        &PatchParams {
            field_manager: Some("editor".into()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({"data": {"team": "c"}})),
    )
    .await
    .unwrap();
    let got = cms.get("owned").await.unwrap();
    assert!(
        managers(&got).contains(&("editor".to_owned(), "Update".to_owned())),
        "{:?}",
        managers(&got)
    );
    probe
        .write(&ns, apply(cm(&ns, "owned", json!({"team": "d"}))))
        .await
        .expect_err("team is the editor's now");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_ownership_conflicts_and_force_as_on_the_real_apiserver() {
    on_both("ownership", ownership_flow).await;
}

async fn events_flow(client: kube::Client, ns: String) {
    let mut probe = WriterProbe::start(client.clone(), "[]", true, false).await;
    let event = json!({"op": "event", "note": "something to see"});
    for _ in 0..3 {
        probe
            .write_about("probe-1", &ns, event.clone())
            .await
            .unwrap();
    }
    let listed = Api::<Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(listed.len(), 1, "{listed:#?}");
    let recorded = &listed[0];
    assert_eq!(
        recorded.reporting_controller.as_deref(),
        Some("wasmformer/probe")
    );
    assert_eq!(recorded.note.as_deref(), Some("something to see"));
    assert_eq!(recorded.series.as_ref().map(|s| s.count), Some(3));
    // The same Event through the core API, as `kubectl get events` reads it.
    let core = Api::<CoreEvent>::namespaced(client, &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(core.len(), 1, "{core:#?}");
    assert_eq!(core[0].metadata.name, recorded.metadata.name);
    assert_eq!(core[0].message.as_deref(), Some("something to see"));
    assert_eq!(core[0].type_.as_deref(), Some("Warning"));
    assert_eq!(
        core[0].involved_object.name.as_deref(),
        Some("probe-1"),
        "{:#?}",
        core[0]
    );
    assert_eq!(
        core[0].reporting_component.as_deref(),
        Some("wasmformer/probe")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_recorded_aggregated_and_listed_as_core_events_as_on_the_real_apiserver() {
    on_both("events", events_flow).await;
}
