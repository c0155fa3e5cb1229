//! Property test: the replay-script parser and the checks and feed behind it answer every input
//! with events or an error, never a panic. Inputs are scripts built from the format's own parts
//! with odd values (as JSON, which is YAML), some of them cut or garbled, and YAML-like text.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::Script;
use crate::config::props::{document, garble};
use crate::replay::Feed;

const KEYS: &[&str] = &[
    "initial",
    "handles",
    "read",
    "indexes",
    "events",
    "add",
    "update",
    "delete",
    "finalStateUnknown",
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "field",
    "spec",
    "nodeName",
    "unknown",
];
const VALUES: &[&str] = &[
    "",
    "~",
    "-",
    "0",
    "v1",
    "Pod",
    "a",
    "[",
    "{",
    "{}",
    "[]",
    "{name: a}",
    "\"unterminated",
    "&anchor",
    "*anchor",
];

/// Mostly one of `good`, sometimes one of `bad`.
fn mostly(good: Vec<Value>, bad: Vec<Value>) -> impl Strategy<Value = Value> {
    prop_oneof![12 => prop::sample::select(good), 1 => prop::sample::select(bad)]
}

fn object() -> impl Strategy<Value = Value> {
    let metadata = (
        mostly(vec![json!("a"), json!("b")], vec![json!(""), Value::Null, json!(1)]),
        mostly(vec![json!("x")], vec![json!(""), Value::Null]),
        mostly(vec![Value::Null], vec![json!("u1"), json!("u2")]),
        mostly(vec![Value::Null], vec![json!("1"), json!("2"), json!(3)]),
        mostly(vec![Value::Null, json!({"app": "web"})], vec![json!({"app": 1}), json!("bad"), json!({"k": "v\u{0}"})]),
    )
        .prop_map(|(name, namespace, uid, rv, labels)| {
            let mut metadata = json!({"name": name, "namespace": namespace, "uid": uid, "resourceVersion": rv, "labels": labels});
            metadata.as_object_mut().unwrap().retain(|_, v| !v.is_null());
            metadata
        });
    (
        mostly(vec![json!("v1")], vec![json!("apps/v1"), json!(""), json!("a/b/c"), Value::Null]),
        mostly(vec![json!("Pod")], vec![json!("ReplicaSet"), json!(""), Value::Null]),
        prop_oneof![12 => metadata, 1 => prop::sample::select(vec![Value::Null, json!("m"), json!([])])],
    )
        .prop_map(|(api_version, kind, metadata)| json!({"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": {"nodeName": "n1"}}))
}

fn step() -> impl Strategy<Value = Value> {
    let action = prop_oneof![12 => prop::sample::select(vec!["add", "update", "delete"]), 1 => prop::sample::select(vec!["add+delete", "none"])];
    (action, object(), any::<bool>()).prop_map(|(action, obj, unknown)| match action {
        "add+delete" => json!({"add": obj.clone(), "delete": obj}),
        "none" => json!({"finalStateUnknown": unknown}),
        "delete" => json!({"delete": obj, "finalStateUnknown": unknown}),
        action => json!({ action: obj }),
    })
}

fn structured() -> impl Strategy<Value = String> {
    let kinds = || {
        mostly(
            vec![Value::Null, json!([{"apiVersion": "v1", "kind": "Pod"}])],
            vec![json!([{"apiVersion": "v1"}]), json!("x")],
        )
    };
    let indexes = mostly(
        vec![
            Value::Null,
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "by-node", "field": "spec.nodeName"}]),
        ],
        vec![json!([{"apiVersion": "v1", "kind": "Pod", "name": "bad", "field": "spec.[["}])],
    );
    let parts = (
        prop::collection::vec(object(), 0..4),
        prop::collection::vec(step(), 0..8),
        kinds(),
        kinds(),
        indexes,
    );
    parts.prop_map(|(initial, events, handles, read, indexes)| {
        let mut doc = json!({"initial": initial, "events": events, "handles": handles, "read": read, "indexes": indexes});
        doc.as_object_mut().unwrap().retain(|_, v| !v.is_null());
        doc.to_string()
    })
}

fn script() -> impl Strategy<Value = String> {
    prop_oneof![6 => structured(), 2 => garble(structured()), 1 => document(KEYS, VALUES)]
}

// Cases: `PROPTEST_CASES` (proptest's default: 256).
proptest! {
    #[test]
    fn the_script_parser_and_feed_never_panic(text in script()) {
        if let Ok(script) = Script::parse(&text) {
            let _ = (script.handled_kinds(), script.readable_kinds());
            if let Ok(mut feed) = Feed::new(&script) {
                while feed.next().is_some() {}
            }
        }
    }
}
