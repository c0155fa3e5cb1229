//! The replay feed delivers what the live informer would, rule by rule.

use super::*;

/// Renders what the feed delivers: `add Pod a@1 initial`, `update Pod a 1->2`,
/// `delete Pod a@3 unknown`.
fn deliveries(script: &str) -> Vec<String> {
    let mut feed = Feed::new(&Script::parse(script).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some((gvk, event)) = feed.next() {
        let line = match &event {
            Event::Add { obj, initial } => {
                format!(
                    "add {} {}@{}{}",
                    gvk.kind,
                    obj.name(),
                    obj.resource_version(),
                    if *initial { " initial" } else { "" }
                )
            }
            Event::Update { old, new } => format!(
                "update {} {} {}->{}",
                gvk.kind,
                new.name(),
                old.resource_version(),
                new.resource_version()
            ),
            Event::Delete {
                obj,
                final_state_unknown,
            } => {
                format!(
                    "delete {} {}@{}{}",
                    gvk.kind,
                    obj.name(),
                    obj.resource_version(),
                    if *final_state_unknown { " unknown" } else { "" }
                )
            }
            Event::Synced => unreachable!("the feed yields no synced"),
        };
        out.push(line);
    }
    out
}

#[test]
fn initial_objects_are_initial_adds_in_script_order() {
    let script = "initial:\n  - {apiVersion: v1, kind: Pod, metadata: {name: b, namespace: x}}\n  - {apiVersion: apps/v1, kind: ReplicaSet, metadata: {name: r, namespace: x}}\n  - {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}}\nevents:\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: c, namespace: x}}\n";
    assert_eq!(
        deliveries(script),
        [
            "add Pod b@1 initial",
            "add ReplicaSet r@2 initial",
            "add Pod a@3 initial",
            "add Pod c@4"
        ]
    );
}

#[test]
fn an_update_with_the_cached_resource_version_delivers_nothing() {
    let script = "events:\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x, resourceVersion: '5'}}\n  - update: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x, resourceVersion: '5', labels: {ignored: yes}}}\n  - update: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x, resourceVersion: '6'}}\n";
    assert_eq!(deliveries(script), ["add Pod a@5", "update Pod a 5->6"]);
}

#[test]
fn a_new_uid_under_a_cached_name_is_a_tombstone_and_an_add() {
    let script = "initial:\n  - {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x, uid: one}}\nevents:\n  - update: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x, uid: two}}\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x, uid: three}}\n";
    assert_eq!(
        deliveries(script),
        [
            "add Pod a@1 initial",
            "delete Pod a@1 unknown",
            "add Pod a@2",
            "delete Pod a@2 unknown",
            "add Pod a@3"
        ]
    );
}

#[test]
fn deletes_deliver_the_final_state_or_a_tombstone_of_the_cached_one() {
    let script = "initial:\n  - {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}}\n  - {apiVersion: v1, kind: Pod, metadata: {name: b, namespace: x}}\nevents:\n  - delete: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}}\n  - delete: {apiVersion: v1, kind: Pod, metadata: {name: b, namespace: x}}\n    finalStateUnknown: true\n";
    assert_eq!(
        deliveries(script),
        [
            "add Pod a@1 initial",
            "add Pod b@2 initial",
            "delete Pod a@3",
            "delete Pod b@2 unknown"
        ]
    );
}

#[test]
fn the_cache_holds_each_event_when_it_is_delivered() {
    let script = "initial:\n  - {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}}\nevents:\n  - update: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}}\n  - delete: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}}\n";
    let mut feed = Feed::new(&Script::parse(script).unwrap()).unwrap();
    let pods = Gvk::from_api_version("v1", "Pod");
    let mut seen = Vec::new();
    while let Some((_, event)) = feed.next() {
        let cached = feed.stores()[&pods]
            .get("x", "a")
            .map(|o| o.resource_version().to_owned());
        seen.push((event.kind(), cached));
    }
    assert_eq!(
        seen,
        [
            ("add", Some("1".to_owned())),
            ("update", Some("2".to_owned())),
            ("delete", None)
        ]
    );
}

#[test]
fn impossible_steps_are_refused_before_anything_runs_with_index_and_line() {
    let refused = |script: &str| {
        Feed::new(&Script::parse(script).unwrap())
            .unwrap_err()
            .to_string()
    };
    let delete_twice = "events:\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}}\n  - delete: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}}\n\n  - delete: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}}\n";
    assert_eq!(
        refused(delete_twice),
        "events[2] (line 5): delete of Pod x/a, which is not in the cache at this point"
    );
    let update_unknown =
        "events:\n  - update: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}}\n";
    assert_eq!(
        refused(update_unknown),
        "events[0] (line 2): update of Pod x/a, which is not in the cache at this point"
    );
    let add_twice = "initial:\n  - {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}}\nevents:\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}}\n";
    assert_eq!(
        refused(add_twice),
        "events[0] (line 4): add of Pod x/a, which is already in the cache (use update)"
    );
    let nameless = "events:\n  - add: {apiVersion: v1, kind: Pod, metadata: {namespace: x}}\n";
    assert_eq!(
        refused(nameless),
        "events[0] (line 2): object cannot be cached"
    );
}

#[test]
fn a_json_script_is_a_script() {
    let script = r#"{"initial": [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "x"}}], "events": [{"update": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "x"}}}]}"#;
    assert_eq!(
        deliveries(script),
        ["add Pod a@1 initial", "update Pod a 1->2"]
    );
}
