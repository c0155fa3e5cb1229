//! kube-rs against the dev cluster: CRUD with API semantics, selectors, pagination, status,
//! CRDs and discovery.

use std::collections::BTreeMap;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Pod},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{
        ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
        PostParams, WatchEvent, WatchParams,
    },
    discovery::{Discovery, Scope},
};
use serde_json::json;
use wasmformer_devcluster::{Verb, store::ObjectKey};

use crate::common::{start, within};

/// The `(code, reason)` of the Status an API call failed with.
fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn config_map(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_string());
    cm.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    cm.data = Some(
        data.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    cm
}

#[tokio::test]
async fn config_map_crud_follows_api_semantics() -> anyhow::Result<()> {
    let dev = start().await;
    let api: Api<ConfigMap> = Api::namespaced(dev.client()?, "default");
    let pp = PostParams::default();

    let created = api
        .create(&pp, &config_map("app", &[("app", "web")], &[("k", "1")]))
        .await?;
    let rv1: u64 = created.resource_version().unwrap().parse()?;
    assert!(created.uid().is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(
        created.metadata.generation, None,
        "ConfigMaps have no generation on the API server"
    );

    let duplicate = api_error(api.create(&pp, &config_map("app", &[], &[])).await);
    assert_eq!((duplicate.0, duplicate.1.as_str()), (409, "AlreadyExists"));
    let nameless = api_error(api.create(&pp, &ConfigMap::default()).await);
    assert_eq!((nameless.0, nameless.1.as_str()), (422, "Invalid"));

    let mut update = created.clone();
    update.data = Some(BTreeMap::from([("k".into(), "2".into())]));
    let replaced = api.replace("app", &pp, &update).await?;
    let rv2: u64 = replaced.resource_version().unwrap().parse()?;
    assert!(rv2 > rv1);
    assert_eq!(replaced.metadata.generation, None);
    // `update` still carries rv1: optimistic concurrency rejects it.
    let stale = api_error(api.replace("app", &pp, &update).await);
    assert_eq!((stale.0, stale.1.as_str()), (409, "Conflict"));

    let patched = api
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"data": {"extra": "x"}, "metadata": {"labels": {"tier": "front"}}}),
            ),
        )
        .await?;
    assert_eq!(patched.data.as_ref().unwrap()["k"], "2");
    assert_eq!(patched.data.as_ref().unwrap()["extra"], "x");
    assert_eq!(patched.labels()["tier"], "front");

    api.create(&pp, &config_map("db", &[("app", "db")], &[]))
        .await?;
    api.create(&pp, &config_map("plain", &[], &[])).await?;
    let names = |list: kube::core::ObjectList<ConfigMap>| {
        list.items.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app in (web,db)"))
                .await?
        ),
        vec!["app", "db"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app,app!=db"))
                .await?
        ),
        vec!["app"]
    );
    assert_eq!(
        names(api.list(&ListParams::default().labels("!app")).await?),
        vec!["plain"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name=db"))
                .await?
        ),
        vec!["db"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name!=db"))
                .await?
        ),
        vec!["app", "plain"]
    );
    let list_rv: u64 = api
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap()
        .parse()?;
    assert_eq!(list_rv, dev.store().resource_version());
    let selector_list = dev
        .request_log()
        .records()
        .into_iter()
        .rev()
        .find(|r| r.is(Verb::List, "configmaps") && r.param("labelSelector").is_some());
    assert_eq!(selector_list.unwrap().param("labelSelector"), Some("!app"));

    api.delete("app", &DeleteParams::default()).await?;
    let gone = api_error(api.get("app").await);
    assert_eq!((gone.0, gone.1.as_str()), (404, "NotFound"));
    assert_eq!(
        api_error(api.delete("app", &DeleteParams::default()).await).0,
        404
    );

    let removed = api
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("app=db"),
        )
        .await?;
    assert_eq!(removed.left().map(|l| l.items.len()), Some(1));
    assert_eq!(
        names(api.list(&ListParams::default()).await?),
        vec!["plain"]
    );
    dev.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn pods_support_node_selectors_strategic_patches_and_status() -> anyhow::Result<()> {
    let dev = start().await;
    let pods: Api<Pod> = Api::namespaced(dev.client()?, "default");
    for (name, node) in [("a", Some("node-1")), ("b", Some("node-2")), ("c", None)] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [
                {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
                {"name": "sidecar", "image": "side:1"}
            ]}
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    let on_node = pods
        .list(&ListParams::default().fields("spec.nodeName=node-1"))
        .await?;
    assert_eq!(
        on_node
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>(),
        vec!["a"]
    );
    let unscheduled = pods
        .list(&ListParams::default().fields("spec.nodeName="))
        .await?;
    assert_eq!(
        unscheduled
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>(),
        vec!["c"]
    );
    let unsupported = api_error(
        pods.list(&ListParams::default().fields("spec.containers=x"))
            .await,
    );
    assert_eq!((unsupported.0, unsupported.1.as_str()), (400, "BadRequest"));

    let patched = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [{"name": "app", "image": "app:2"}]}})),
        )
        .await?;
    let containers = &patched.spec.as_ref().unwrap().containers;
    assert_eq!(containers.len(), 2, "strategic merge keeps the sidecar");
    assert_eq!(containers[0].image.as_deref(), Some("app:2"));
    assert_eq!(containers[0].env.as_ref().unwrap()[0].name, "A");

    assert_eq!(
        patched.status.as_ref().unwrap().phase.as_deref(),
        Some("Pending")
    );
    let running = pods
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await?;
    assert_eq!(running.status.unwrap().phase.as_deref(), Some("Running"));
    let ignored = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Failed"}})),
        )
        .await?;
    assert_eq!(
        ignored.status.unwrap().phase.as_deref(),
        Some("Running"),
        "main-resource writes keep the status"
    );
    dev.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn paginated_lists_are_consistent_and_expire_with_410() -> anyhow::Result<()> {
    let dev = start().await;
    let api: Api<ConfigMap> = Api::namespaced(dev.client()?, "default");
    for i in 0..7 {
        dev.store()
            .create_object(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i}"), "namespace": "default"}}))?;
    }
    let first = api.list(&ListParams::default().limit(3)).await?;
    assert_eq!(first.items.len(), 3);
    let token = first.metadata.continue_.clone().expect("more pages");
    // Changes after the first page do not leak into later pages of the same list.
    dev.store().delete(
        &ObjectKey::new(
            wasmformer_devcluster::ResourceId::core("configmaps"),
            Some("default"),
            "cm-5",
        ),
        &Default::default(),
    )?;
    let second = api
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await?;
    let third = api
        .list(
            &ListParams::default()
                .limit(3)
                .continue_token(second.metadata.continue_.as_ref().unwrap()),
        )
        .await?;
    let mut names: Vec<String> = [first, second, third]
        .iter()
        .flat_map(|p| p.items.iter().map(ResourceExt::name_any))
        .collect();
    names.sort();
    assert_eq!(names, (0..7).map(|i| format!("cm-{i}")).collect::<Vec<_>>());

    dev.faults().compact();
    let expired = api_error(
        api.list(&ListParams::default().limit(3).continue_token(&token))
            .await,
    );
    assert_eq!((expired.0, expired.1.as_str()), (410, "Expired"));
    dev.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn crds_register_custom_resources_in_discovery() -> anyhow::Result<()> {
    let dev = start().await;
    let client: Client = dev.client()?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}}}]
        }
    }))?;
    let created = crds.create(&PostParams::default(), &crd).await?;
    let conditions = created.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );

    let discovery = Discovery::new(client.clone()).run().await?;
    let (resource, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"))
        .expect("the CRD's kind is discoverable");
    assert_eq!(resource.plural, "widgets");
    assert_eq!(caps.scope, Scope::Namespaced);
    assert!(
        discovery
            .resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
            .is_some()
    );
    assert!(
        discovery
            .resolve_gvk(&GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"))
            .is_some()
    );

    let widgets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget")),
    );
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 3}}))?;
    widgets.create(&PostParams::default(), &widget).await?;
    let fetched = widgets.get("w1").await?;
    assert_eq!(fetched.data["spec"]["size"], 3);

    let rv = dev.store().resource_version().to_string();
    let mut watch = widgets
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await?
        .boxed();
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await?;
    match within("the widget deletion", watch.try_next()).await? {
        Some(WatchEvent::Deleted(gone)) => assert_eq!(gone.metadata.name.as_deref(), Some("w1")),
        other => panic!("expected the widget's deletion, got {other:?}"),
    }
    assert!(
        within("the widget watch to end", watch.try_next())
            .await?
            .is_none()
    );
    let after = api_error(widgets.get("w1").await);
    assert_eq!(after.0, 404);

    let deployments: Api<Deployment> = Api::namespaced(client, "default");
    assert!(
        deployments
            .list(&ListParams::default())
            .await?
            .items
            .is_empty()
    );
    dev.shutdown().await?;
    Ok(())
}
