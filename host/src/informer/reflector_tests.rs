//! The delta state machine driven by scripted kube `watcher::Event` sequences.

use std::sync::Arc;

use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use kube::runtime::watcher::Event as WatchEvent;
use serde_json::json;

use super::*;
use crate::cache::{Gvk, IndexSpec};
use crate::informer::watch::{dynamic_value, map_event};

fn pods() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
}

/// A pod as the watcher yields it; `uid` defaults to one per name.
fn pod(name: &str, rv: &str, node: &str) -> DynamicObject {
    pod_uid(name, rv, node, &format!("uid-{name}"))
}

fn pod_uid(name: &str, rv: &str, node: &str, uid: &str) -> DynamicObject {
    let mut obj = DynamicObject::new(name, &pods())
        .within("default")
        .data(json!({"spec": {"nodeName": node}}));
    obj.metadata.resource_version = Some(rv.into());
    obj.metadata.uid = Some(uid.into());
    obj
}

fn wire(value: serde_json::Value) -> WireObject {
    WireObject::from_value(&value).unwrap()
}

fn store() -> Arc<Store> {
    let by_node = IndexSpec {
        name: "by-node".into(),
        path: "spec.nodeName".parse().unwrap(),
    };
    Arc::new(Store::new(
        Gvk::from_api_version("v1", "Pod"),
        vec![by_node],
        true,
    ))
}

/// Applies `events` and renders the deltas: `add a@1 initial`, `update a 1->2`,
/// `delete b@1 unknown`, `synced`.
fn run(reflector: &mut Reflector, events: Vec<WatchEvent<DynamicObject>>) -> Vec<String> {
    let mut out = Vec::new();
    for event in events {
        let event = map_event(event, |obj| dynamic_value(obj, &pods()));
        reflector.apply(event, &mut |delta| out.push(render(&delta)));
    }
    out
}

fn render(delta: &Event) -> String {
    match delta {
        Event::Add { obj, initial } => {
            format!(
                "add {}@{}{}",
                obj.name(),
                obj.resource_version(),
                if *initial { " initial" } else { "" }
            )
        }
        Event::Update { old, new } => format!(
            "update {} {}->{}",
            new.name(),
            old.resource_version(),
            new.resource_version()
        ),
        Event::Delete {
            obj,
            final_state_unknown,
        } => {
            format!(
                "delete {}@{}{}",
                obj.name(),
                obj.resource_version(),
                if *final_state_unknown { " unknown" } else { "" }
            )
        }
        Event::Synced => "synced".into(),
    }
}

fn names(objs: Vec<Arc<CachedObject>>) -> Vec<String> {
    objs.iter()
        .map(|o| format!("{}@{}", o.name(), o.resource_version()))
        .collect()
}

fn synced(objects: &[(&str, &str)]) -> Reflector {
    let mut reflector = Reflector::new(store());
    let mut events = vec![WatchEvent::Init];
    events.extend(
        objects
            .iter()
            .map(|(name, rv)| WatchEvent::InitApply(pod(name, rv, "n1"))),
    );
    events.push(WatchEvent::InitDone);
    run(&mut reflector, events);
    reflector
}

#[test]
fn first_list_is_initial_then_live_adds_updates_deletes() {
    let mut r = Reflector::new(store());
    let deltas = run(
        &mut r,
        vec![
            WatchEvent::Init,
            WatchEvent::InitApply(pod("a", "1", "n1")),
            WatchEvent::InitApply(pod("b", "1", "n1")),
        ],
    );
    assert!(
        deltas.is_empty(),
        "a list is delivered only when complete: {deltas:?}"
    );
    assert!(r.store().is_empty());
    assert_eq!(
        run(&mut r, vec![WatchEvent::InitDone]),
        ["add a@1 initial", "add b@1 initial", "synced"]
    );
    assert!(r.is_synced());

    let deltas = run(
        &mut r,
        vec![
            WatchEvent::Apply(pod("c", "2", "n1")),
            WatchEvent::Apply(pod("a", "3", "n2")),
            WatchEvent::Delete(pod("b", "4", "n1")),
        ],
    );
    assert_eq!(deltas, ["add c@2", "update a 1->3", "delete b@4"]);
    assert_eq!(names(r.store().snapshot()), ["a@3", "c@2"]);
}

#[test]
fn apply_with_the_stored_resource_version_is_a_no_op() {
    let mut r = synced(&[("a", "1")]);
    // kube re-watches from the last resourceVersion after a clean close; a server may still
    // repeat the last event: nothing is delivered twice.
    let deltas = run(
        &mut r,
        vec![
            WatchEvent::Apply(pod("a", "1", "n1")),
            WatchEvent::Apply(pod("b", "5", "n1")),
            WatchEvent::Apply(pod("b", "5", "n1")),
        ],
    );
    assert_eq!(deltas, ["add b@5"]);
    let deltas = run(&mut r, vec![WatchEvent::Delete(pod("zz", "6", "n1"))]);
    assert!(
        deltas.is_empty(),
        "delete of an object never seen: {deltas:?}"
    );
}

#[test]
fn relist_delivers_tombstones_first_then_changes_and_skips_unchanged() {
    let mut r = synced(&[("a", "1"), ("b", "1"), ("c", "1")]);
    let deltas = run(
        &mut r,
        vec![
            WatchEvent::Init,
            WatchEvent::InitApply(pod("a", "1", "n1")), // unchanged
            WatchEvent::InitApply(pod("d", "7", "n1")), // created during the gap
            WatchEvent::InitApply(pod("c", "8", "n1")), // changed during the gap
            // b was deleted during the gap
            WatchEvent::InitDone,
        ],
    );
    assert_eq!(deltas, ["delete b@1 unknown", "add d@7", "update c 1->8"]);
    assert_eq!(names(r.store().snapshot()), ["a@1", "c@8", "d@7"]);
}

#[test]
fn relist_keeps_unchanged_objects_shared_and_buffers_only_changes() {
    let objects: Vec<(String, String)> = (0..200)
        .map(|i| (format!("p{i:03}"), "1".to_owned()))
        .collect();
    let refs: Vec<(&str, &str)> = objects
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let mut r = synced(&refs);
    let before = r.store().get("default", "p000").unwrap();
    let steady: usize = r.store().snapshot().iter().map(|o| o.heap_size()).sum();

    run(&mut r, vec![WatchEvent::Init]);
    for (i, (name, _)) in objects.iter().enumerate() {
        let rv = if i % 10 == 0 { "2" } else { "1" };
        run(&mut r, vec![WatchEvent::InitApply(pod(name, rv, "n1"))]);
    }
    let relist = r.relist.as_ref().unwrap();
    assert_eq!(
        relist.changed.len(),
        20,
        "only changed objects are buffered"
    );
    let buffered: usize = relist.changed.iter().map(|o| o.heap_size()).sum::<usize>()
        + relist
            .unchanged
            .iter()
            .map(|k| std::mem::size_of_val(k) + k.namespace().len() + 1 + k.name().len())
            .sum::<usize>();
    assert!(
        buffered * 2 <= steady,
        "relist buffer {buffered} B vs store {steady} B: peak must stay under 1.5x"
    );

    let deltas = run(&mut r, vec![WatchEvent::InitDone]);
    assert_eq!(deltas.len(), 20);
    assert_eq!(
        r.store().get("default", "p000").unwrap().resource_version(),
        "2"
    );
    assert_eq!(before.resource_version(), "1");
    assert_eq!(
        r.store().get("default", "p001").unwrap().resource_version(),
        "1"
    );
}

#[test]
fn unchanged_objects_keep_their_cached_instance_across_a_relist() {
    let mut r = synced(&[("a", "1")]);
    let before = r.store().get("default", "a").unwrap();
    assert!(
        run(
            &mut r,
            vec![
                WatchEvent::Init,
                WatchEvent::InitApply(pod("a", "1", "n1")),
                WatchEvent::InitDone
            ]
        )
        .is_empty()
    );
    assert!(Arc::ptr_eq(
        &before,
        &r.store().get("default", "a").unwrap()
    ));
}

#[test]
fn synced_is_delivered_once_and_only_the_first_list_is_initial() {
    let mut r = Reflector::new(store());
    let first = run(
        &mut r,
        vec![
            WatchEvent::Init,
            WatchEvent::InitApply(pod("a", "1", "n1")),
            WatchEvent::InitDone,
        ],
    );
    assert_eq!(first, ["add a@1 initial", "synced"]);
    let second = run(
        &mut r,
        vec![
            WatchEvent::Init,
            WatchEvent::InitApply(pod("a", "1", "n1")),
            WatchEvent::InitApply(pod("b", "2", "n1")),
            WatchEvent::InitDone,
        ],
    );
    assert_eq!(second, ["add b@2"]);
    let third = run(&mut r, vec![WatchEvent::Init, WatchEvent::InitDone]);
    assert_eq!(third, ["delete a@1 unknown", "delete b@2 unknown"]);
}

#[test]
fn an_empty_first_list_still_syncs() {
    let mut r = Reflector::new(store());
    assert_eq!(
        run(&mut r, vec![WatchEvent::Init, WatchEvent::InitDone]),
        ["synced"]
    );
}

#[test]
fn an_interrupted_list_leaves_no_trace() {
    // A LIST page or a streaming list fails half-way: kube starts over with a new Init.
    let mut r = Reflector::new(store());
    let deltas = run(
        &mut r,
        vec![
            WatchEvent::Init,
            WatchEvent::InitApply(pod("a", "1", "n1")),
            WatchEvent::InitApply(pod("b", "1", "n1")),
            WatchEvent::Init,
            WatchEvent::InitApply(pod("a", "2", "n1")),
            WatchEvent::InitDone,
        ],
    );
    assert_eq!(deltas, ["add a@2 initial", "synced"]);
    assert_eq!(names(r.store().snapshot()), ["a@2"]);

    // The same during a relist: the partial relist's changes are forgotten.
    let deltas = run(
        &mut r,
        vec![
            WatchEvent::Init,
            WatchEvent::InitApply(pod("c", "3", "n1")),
            WatchEvent::Init,
            WatchEvent::InitApply(pod("a", "2", "n1")),
            WatchEvent::InitDone,
        ],
    );
    assert!(deltas.is_empty(), "{deltas:?}");
}

#[test]
fn a_recreated_object_is_a_tombstone_and_an_add_not_an_update() {
    let mut r = synced(&[("a", "1")]);
    let deltas = run(
        &mut r,
        vec![
            WatchEvent::Init,
            WatchEvent::InitApply(pod_uid("a", "5", "n1", "uid-new")),
            WatchEvent::InitDone,
        ],
    );
    assert_eq!(deltas, ["delete a@1 unknown", "add a@5"]);
    let deltas = run(
        &mut r,
        vec![WatchEvent::Apply(pod_uid("a", "6", "n1", "uid-newer"))],
    );
    assert_eq!(deltas, ["delete a@5 unknown", "add a@6"]);
    assert_eq!(r.store().get("default", "a").unwrap().uid(), "uid-newer");
}

#[test]
fn indexes_are_right_after_a_relist() {
    let mut r = Reflector::new(store());
    run(
        &mut r,
        vec![
            WatchEvent::Init,
            WatchEvent::InitApply(pod("a", "1", "n1")),
            WatchEvent::InitApply(pod("b", "1", "n1")),
            WatchEvent::InitApply(pod("c", "1", "n2")),
            WatchEvent::InitDone,
        ],
    );
    // During the gap: a moved to n2, b was deleted, d was created on n1.
    run(
        &mut r,
        vec![
            WatchEvent::Init,
            WatchEvent::InitApply(pod("a", "2", "n2")),
            WatchEvent::InitApply(pod("c", "1", "n2")),
            WatchEvent::InitApply(pod("d", "3", "n1")),
            WatchEvent::InitDone,
        ],
    );
    let store = r.store();
    assert_eq!(names(store.by_index("by-node", "n1").unwrap()), ["d@3"]);
    assert_eq!(
        names(store.by_index("by-node", "n2").unwrap()),
        ["a@2", "c@1"]
    );
    assert_eq!(store.by_index("namespace", "default").unwrap().len(), 3);
}

#[test]
fn store_is_updated_before_each_delta_is_emitted() {
    let mut r = synced(&[("a", "1"), ("b", "1")]);
    let store = r.store().clone();
    let mut checked = 0;
    let events = [
        WatchEvent::Apply(pod("a", "2", "n1")),
        WatchEvent::Delete(pod("b", "3", "n1")),
        WatchEvent::Init,
        WatchEvent::InitDone,
    ];
    for event in events {
        let event = map_event(event, |obj| dynamic_value(obj, &pods()));
        r.apply(event, &mut |delta| {
            checked += 1;
            match &delta {
                Event::Update { new, .. } => assert_eq!(
                    store.get("default", new.name()).unwrap().resource_version(),
                    new.resource_version()
                ),
                Event::Delete { obj, .. } => assert!(store.get("default", obj.name()).is_none()),
                other => panic!("unexpected {other:?}"),
            }
        });
    }
    assert_eq!(checked, 3);
}

#[test]
fn rejected_objects_are_counted_not_stored() {
    let mut r = synced(&[]);
    let nameless = WatchEvent::Apply(wire(
        json!({"metadata": {"namespace": "default", "resourceVersion": "1"}}),
    ));
    assert_eq!(
        r.apply(nameless, &mut |d| panic!("no delta expected, got {d:?}")),
        1
    );
    assert!(r.store().is_empty());
}

#[test]
fn replacing_the_store_keeps_content_and_adds_indexes() {
    let mut r = synced(&[("a", "1")]);
    run(
        &mut r,
        vec![WatchEvent::Init, WatchEvent::InitApply(pod("b", "2", "n3"))],
    );
    let by_ns = IndexSpec {
        name: "by-node".into(),
        path: "spec.nodeName".parse().unwrap(),
    };
    let by_uid = IndexSpec {
        name: "by-uid".into(),
        path: "metadata.uid".parse().unwrap(),
    };
    r.replace_store(Arc::new(Store::new(
        Gvk::from_api_version("v1", "Pod"),
        vec![by_ns, by_uid],
        true,
    )));
    assert_eq!(
        names(r.store().by_index("by-uid", "uid-a").unwrap()),
        ["a@1"]
    );
    // The relist buffered before the swap completes into the new store, indexed.
    run(
        &mut r,
        vec![
            WatchEvent::InitApply(pod("a", "1", "n1")),
            WatchEvent::InitDone,
        ],
    );
    assert_eq!(names(r.store().by_index("by-node", "n3").unwrap()), ["b@2"]);
    assert_eq!(
        names(r.store().by_index("by-uid", "uid-b").unwrap()),
        ["b@2"]
    );
}

#[test]
fn objects_of_another_kind_are_refused_listed_watched_or_deleted() {
    let mut r = Reflector::new(store()).expecting("v1", "Pod");
    let config_map = |name: &str, rv: &str| {
        wire(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "default", "name": name, "uid": "u", "resourceVersion": rv}}),
        )
    };
    let mut deltas = Vec::new();
    let mut rejected = 0;
    let listed = [
        WatchEvent::Init,
        WatchEvent::InitApply(config_map("cm", "1")),
        WatchEvent::InitApply(dynamic_value(pod("a", "1", "n1"), &pods())),
        WatchEvent::InitDone,
    ];
    for event in listed {
        rejected += r.apply(event, &mut |d| deltas.push(render(&d)));
    }
    assert_eq!(
        (deltas, rejected),
        (vec!["add a@1 initial".to_owned(), "synced".to_owned()], 1)
    );
    let mut other_pod = serde_json::to_value(pod("b", "2", "n1")).unwrap();
    other_pod["apiVersion"] = json!("v2");
    let other_pod = wire(other_pod);
    for event in [
        WatchEvent::Apply(config_map("cm", "2")),
        WatchEvent::Apply(other_pod),
        WatchEvent::Delete(config_map("a", "3")),
    ] {
        assert_eq!(
            r.apply(event, &mut |d| panic!("no delta expected, got {d:?}")),
            1
        );
    }
    assert_eq!(
        names(r.store().snapshot()),
        ["a@1"],
        "a delete of another kind does not remove the pod of that name"
    );
}

#[test]
fn objects_over_the_size_bound_are_refused_listed_or_watched() {
    let mut r = Reflector::new(store()).max_object_bytes(400);
    let big = |name: &str, rv: &str| {
        let mut pod = pod(name, rv, "n1");
        pod.data["spec"]["containers"] = json!([{"name": "main", "image": "x".repeat(400)}]);
        pod
    };
    let deltas = run(
        &mut r,
        vec![
            WatchEvent::Init,
            WatchEvent::InitApply(big("a", "1")),
            WatchEvent::InitApply(pod("b", "1", "n1")),
            WatchEvent::InitDone,
        ],
    );
    assert_eq!(deltas, ["add b@1 initial", "synced"]);
    let deltas = run(
        &mut r,
        vec![
            WatchEvent::Apply(big("b", "2")),
            WatchEvent::Apply(pod("c", "3", "n1")),
        ],
    );
    assert_eq!(deltas, ["add c@3"], "the stored b stays as it was");
    assert_eq!(names(r.store().snapshot()), ["b@1", "c@3"]);
}
