use serde_json::json;

use super::{read::Page, *};

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": data})
}

fn key(resource: &str, ns: Option<&str>, name: &str) -> ObjectKey {
    ObjectKey::new(ResourceId::core(resource), ns, name)
}

fn rv(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn create_sets_server_metadata_and_increments_the_store_version() {
    let store = Store::new(100);
    let start = store.resource_version();
    let created = store.create_object(cm("a", json!({"k": "v"}))).unwrap();
    assert_eq!(rv(&created), start + 1);
    assert!(
        created["metadata"].get("generation").is_none(),
        "ConfigMaps have no generation on the API server"
    );
    assert_eq!(created["metadata"]["uid"].as_str().unwrap().len(), 36);
    assert!(
        created["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    let other = store.create_object(cm("b", json!({}))).unwrap();
    assert_eq!(rv(&other), start + 2);
    assert_ne!(created["metadata"]["uid"], other["metadata"]["uid"]);
    assert_eq!(
        store.get(&key("configmaps", Some("default"), "a")).unwrap(),
        created
    );
}

#[test]
fn create_errors_match_the_api_server() {
    let store = Store::new(100);
    store.create_object(cm("a", json!({}))).unwrap();
    assert!(matches!(
        store.create_object(cm("a", json!({}))),
        Err(Error::AlreadyExists { .. })
    ));
    let nameless =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default"}});
    let Err(Error::Invalid { causes, .. }) = store.create_object(nameless) else {
        panic!("expected invalid")
    };
    assert_eq!(causes[0].field, "metadata.name");
    assert_eq!(causes[0].reason, "FieldValueRequired");
    let elsewhere = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "nope"}});
    assert!(matches!(
        store.create_object(elsewhere),
        Err(Error::NotFound { resource, name }) if resource == ResourceId::namespaces() && name == "nope"
    ));
    let generated = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-", "namespace": "default"}});
    let created = store.create_object(generated).unwrap();
    assert!(
        created["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("gen-")
    );
}

#[test]
fn replace_enforces_optimistic_concurrency_and_bumps_generation_on_spec_change() {
    let store = Store::new(100);
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "a", "namespace": "default"}, "spec": {"replicas": 1}});
    let created = store.create_object(deployment).unwrap();
    assert_eq!(created["metadata"]["generation"], 1);
    let k = ObjectKey::new(ResourceId::new("apps", "deployments"), Some("default"), "a");
    let mut update = Value::clone(&created);
    update["spec"]["replicas"] = json!(2);
    let updated = store.replace(&k, update.clone(), Part::Main).unwrap();
    assert_eq!(updated["metadata"]["generation"], 2);
    assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
    // The same body again carries the old resourceVersion: conflict.
    assert!(matches!(
        store.replace(&k, update, Part::Main),
        Err(Error::Conflict { .. })
    ));
    // A label-only change does not bump generation.
    let mut relabel = Value::clone(&updated);
    relabel["metadata"]["labels"] = json!({"x": "y"});
    let relabeled = store.replace(&k, relabel, Part::Main).unwrap();
    assert_eq!(relabeled["metadata"]["generation"], 2);
}

#[test]
fn no_op_update_keeps_the_resource_version() {
    let store = Store::new(100);
    let created = store.create_object(cm("a", json!({"k": "1"}))).unwrap();
    let before = store.resource_version();
    let same = store
        .replace(
            &key("configmaps", Some("default"), "a"),
            Value::clone(&created),
            Part::Main,
        )
        .unwrap();
    assert_eq!(same, created);
    assert_eq!(store.resource_version(), before);
}

#[test]
fn status_subresource_separates_status_from_spec() {
    let store = Store::new(100);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let created = store.create_object(pod).unwrap();
    assert_eq!(created["status"]["phase"], "Pending");
    let k = key("pods", Some("default"), "p");
    let mut main = Value::clone(&created);
    main["status"]["phase"] = json!("Running");
    main["spec"]["nodeName"] = json!("n1");
    let after_main = store.replace(&k, main, Part::Main).unwrap();
    assert_eq!(
        after_main["status"]["phase"], "Pending",
        "main writes keep the status"
    );
    assert_eq!(after_main["spec"]["nodeName"], "n1");
    let after_status = store
        .patch(
            &k,
            &Patch::Merge(json!({"status": {"phase": "Running"}, "spec": {"nodeName": "n2"}})),
            Part::Status,
        )
        .unwrap();
    assert_eq!(after_status["status"]["phase"], "Running");
    assert_eq!(
        after_status["spec"]["nodeName"], "n1",
        "status writes keep the spec"
    );
    assert!(matches!(
        store.replace(
            &key("configmaps", Some("default"), "x"),
            json!({}),
            Part::Status
        ),
        Err(Error::UnknownResource { .. })
    ));
}

#[test]
fn finalizers_defer_deletion_until_removed() {
    let store = Store::new(100);
    let mut object = cm("f", json!({}));
    object["metadata"]["finalizers"] = json!(["example.com/hold"]);
    store.create_object(object).unwrap();
    let k = key("configmaps", Some("default"), "f");
    let Deletion::Finalizing(marked) = store.delete(&k, &Preconditions::default()).unwrap() else {
        panic!("expected finalizing")
    };
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    assert!(store.get(&k).is_ok());
    let removed = store
        .patch(
            &k,
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            Part::Main,
        )
        .unwrap();
    assert!(matches!(store.get(&k), Err(Error::NotFound { .. })));
    let (events, _) = store
        .events_after(&ResourceId::core("configmaps"), rv(&marked), 10)
        .unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, EventKind::Deleted);
    assert_eq!(events[0].object, removed);
}

#[test]
fn delete_preconditions_and_protected_namespaces() {
    let store = Store::new(100);
    store.create_object(cm("a", json!({}))).unwrap();
    let k = key("configmaps", Some("default"), "a");
    let stale = Preconditions {
        resource_version: Some("1".into()),
        ..Default::default()
    };
    assert!(matches!(
        store.delete(&k, &stale),
        Err(Error::Conflict { .. })
    ));
    assert!(matches!(
        store.delete(&k, &Preconditions::default()),
        Ok(Deletion::Deleted(_))
    ));
    assert!(matches!(
        store.delete(&k, &Preconditions::default()),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        store.delete(
            &key("namespaces", None, "default"),
            &Preconditions::default()
        ),
        Err(Error::Forbidden { .. })
    ));
}

#[test]
fn a_deleted_namespace_is_terminating_until_its_finalizer_is_removed() {
    let store = Store::new(100);
    let created = store
        .create(
            &ResourceId::namespaces(),
            None,
            json!({"metadata": {"name": "team"}}),
        )
        .unwrap();
    assert_eq!(created["spec"]["finalizers"], json!(["kubernetes"]));
    store
        .create(
            &ResourceId::core("configmaps"),
            Some("team"),
            json!({"metadata": {"name": "a"}}),
        )
        .unwrap();
    let ns = key("namespaces", None, "team");
    let Deletion::Finalizing(marked) = store.delete(&ns, &Preconditions::default()).unwrap() else {
        panic!("a namespace with spec.finalizers is not deleted at once");
    };
    assert_eq!(marked["status"]["phase"], "Terminating");
    assert!(marked["metadata"].get("finalizers").is_none(), "{marked}");
    assert!(marked["metadata"].get("generation").is_none(), "{marked}");
    // Its contents stay (the namespace controller deletes them); nothing new may be created.
    assert_eq!(
        store
            .list(&ResourceId::core("configmaps"), Some("team"))
            .unwrap()
            .0
            .len(),
        1
    );
    assert!(matches!(
        store.create(
            &ResourceId::core("configmaps"),
            Some("team"),
            json!({"metadata": {"name": "b"}})
        ),
        Err(Error::Forbidden { .. })
    ));
    // An ordinary update cannot drop the finalizer; the controller's write can, and deletes it.
    store
        .modify(&ns, Part::Main, |o| o["spec"]["finalizers"] = json!([]))
        .unwrap();
    assert_eq!(
        store.get(&ns).unwrap()["spec"]["finalizers"],
        json!(["kubernetes"])
    );
    store
        .modify(&ns, Part::Whole, |o| o["spec"]["finalizers"] = json!([]))
        .unwrap();
    assert!(matches!(store.get(&ns), Err(Error::NotFound { .. })));
}

#[test]
fn crd_creation_serves_the_type_and_deletion_removes_it() {
    let store = Store::new(100);
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true}]}
    });
    let created = store.create_object(crd).unwrap();
    assert_eq!(created["status"]["conditions"][1]["type"], "Established");
    let widgets = ResourceId::new("example.com", "widgets");
    store
        .create_object(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "default"}}))
        .unwrap();
    assert_eq!(store.list(&widgets, None).unwrap().0.len(), 1);
    store
        .delete(
            &ObjectKey::new(ResourceId::crds(), None, "widgets.example.com"),
            &Preconditions::default(),
        )
        .unwrap();
    assert!(store.registry().get(&widgets).is_none());
    assert!(matches!(
        store.list(&widgets, None),
        Err(Error::UnknownResource { .. })
    ));
}

#[test]
fn pages_at_an_old_version_show_the_old_state() {
    let store = Store::new(1000);
    let configmaps = ResourceId::core("configmaps");
    for i in 0..5 {
        store
            .create_object(cm(&format!("cm-{i}"), json!({"v": "0"})))
            .unwrap();
    }
    let snapshot = store.resource_version();
    store
        .delete(
            &key("configmaps", Some("default"), "cm-1"),
            &Preconditions::default(),
        )
        .unwrap();
    store
        .modify(
            &key("configmaps", Some("default"), "cm-3"),
            Part::Main,
            |o| o["data"]["v"] = json!("1"),
        )
        .unwrap();
    store.create_object(cm("cm-9", json!({}))).unwrap();
    fn request<'a>(
        resource: &'a ResourceId,
        after: Option<&'a NameKey>,
        at: Option<u64>,
    ) -> PageRequest<'a> {
        PageRequest {
            resource,
            namespace: Some("default"),
            at,
            after,
            limit: Some(2),
        }
    }
    let first = store
        .page(request(&configmaps, None, Some(snapshot)), &|_| true)
        .unwrap();
    let names = |page: &Page| {
        page.items
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&first), vec!["cm-0", "cm-1"]);
    let second = store
        .page(
            request(&configmaps, first.continue_after.as_ref(), Some(snapshot)),
            &|_| true,
        )
        .unwrap();
    assert_eq!(names(&second), vec!["cm-2", "cm-3"]);
    assert_eq!(second.items[1]["data"]["v"], "0");
    let third = store
        .page(
            request(&configmaps, second.continue_after.as_ref(), Some(snapshot)),
            &|_| true,
        )
        .unwrap();
    assert_eq!(names(&third), vec!["cm-4"]);
    assert!(third.continue_after.is_none());
    let latest = store
        .page(request(&configmaps, None, None), &|o| o["data"]["v"] == "1")
        .unwrap();
    assert_eq!(names(&latest), vec!["cm-3"]);
    store.compact();
    assert!(matches!(
        store.page(request(&configmaps, None, Some(snapshot)), &|_| true),
        Err(Error::Expired(_))
    ));
}

#[test]
fn history_limit_expires_old_watch_positions() {
    let store = Store::new(3);
    let start = store.resource_version();
    for i in 0..5 {
        store
            .create_object(cm(&format!("cm-{i}"), json!({})))
            .unwrap();
    }
    assert!(matches!(
        store.events_after(&ResourceId::core("configmaps"), start, 10),
        Err(Error::Expired(_))
    ));
    let (events, reached) = store
        .events_after(&ResourceId::core("configmaps"), start + 2, 10)
        .unwrap();
    assert_eq!(events.len(), 3);
    assert_eq!(reached, store.resource_version());
}
