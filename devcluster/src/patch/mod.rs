//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), an approximation of
//! strategic merge patch, and server-side apply treated as a merge of the applied configuration.
//!
//! Strategic merge patch is a merge patch plus list handling: a list of objects is merged by a
//! key (taken from the `$setElementOrder/<field>` or `$patch` directives kubectl sends, falling
//! back to `name`), primitive lists with a `$setElementOrder` directive are unioned, and the
//! `$patch`, `$retainKeys` and `$deleteFromPrimitiveList` directives are honoured. Without the
//! OpenAPI merge-key table some lists kubectl would merge are replaced.

mod json_patch;

use serde_json::{Map, Value};

/// A patch that could not be decoded or applied.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `Content-Type` is not a patch type the server knows.
    #[error("unsupported patch content type {content_type:?}")]
    UnsupportedMediaType {
        /// The request's content type.
        content_type: String,
    },
    /// The body is not valid JSON (or YAML for apply).
    #[error("the patch body is malformed: {reason}")]
    Malformed {
        /// The decoder's message.
        reason: String,
    },
    /// A JSON patch operation failed.
    #[error("json patch operation {index} failed: {reason}")]
    JsonPatch {
        /// Position of the operation in the patch.
        index: usize,
        /// What went wrong.
        reason: String,
    },
}

/// `pub type Result<T, E = Error>` for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A decoded PATCH body.
#[derive(Clone, Debug, PartialEq)]
pub enum Patch {
    /// `application/merge-patch+json`.
    Merge(Value),
    /// `application/strategic-merge-patch+json`.
    Strategic(Value),
    /// `application/json-patch+json`.
    Json(Vec<Value>),
    /// `application/apply-patch+yaml`: server-side apply, approximated as a strategic merge that
    /// creates the object when it does not exist. Fields are not owned or pruned.
    Apply(Value),
}

impl Patch {
    /// Decodes a body by its `Content-Type` (parameters such as `; charset=utf-8` ignored).
    pub fn decode(content_type: &str, body: &[u8]) -> Result<Self> {
        let mime = content_type.split(';').next().unwrap_or("").trim();
        let json = || {
            serde_json::from_slice::<Value>(body).map_err(|e| Error::Malformed {
                reason: e.to_string(),
            })
        };
        match mime {
            "application/merge-patch+json" => Ok(Self::Merge(json()?)),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic(json()?)),
            "application/json-patch+json" => match json()? {
                Value::Array(ops) => Ok(Self::Json(ops)),
                _ => Err(Error::Malformed {
                    reason: "a json patch must be an array of operations".into(),
                }),
            },
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                let value: Value =
                    serde_saphyr::from_slice(body).map_err(|e| Error::Malformed {
                        reason: e.to_string(),
                    })?;
                Ok(Self::Apply(value))
            }
            _ => Err(Error::UnsupportedMediaType {
                content_type: content_type.to_string(),
            }),
        }
    }

    /// Applies the patch to `target`, returning the patched document.
    pub fn apply_to(&self, target: &Value) -> Result<Value> {
        let mut out = target.clone();
        match self {
            Self::Merge(patch) => merge(&mut out, patch),
            Self::Strategic(patch) | Self::Apply(patch) => strategic(&mut out, patch),
            Self::Json(ops) => {
                for (index, op) in ops.iter().enumerate() {
                    json_patch::apply_op(&mut out, op)
                        .map_err(|reason| Error::JsonPatch { index, reason })?;
                }
            }
        }
        Ok(out)
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let target = target.as_object_mut().unwrap();
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

const ORDER: &str = "$setElementOrder/";
const DELETE_PRIMITIVE: &str = "$deleteFromPrimitiveList/";

/// The strategic-merge approximation described in the module docs.
fn strategic(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        *target = strip_directives(&Value::Object(patch.clone()));
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let object = target.as_object_mut().unwrap();
    for (key, value) in patch {
        if key.starts_with('$') {
            continue;
        }
        match value {
            Value::Null => {
                object.remove(key);
            }
            Value::Object(inner)
                if inner.get("$patch").and_then(Value::as_str) == Some("delete") =>
            {
                object.remove(key);
            }
            Value::Object(_) => strategic(object.entry(key.clone()).or_insert(Value::Null), value),
            Value::Array(items) => {
                let order = patch
                    .get(&format!("{ORDER}{key}"))
                    .and_then(Value::as_array);
                let merged = merge_list(object.get(key), items, order);
                object.insert(key.clone(), merged);
            }
            _ => {
                object.insert(key.clone(), value.clone());
            }
        }
    }
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix(DELETE_PRIMITIVE) {
            let remove = value.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(list)) = object.get_mut(field) {
                list.retain(|v| !remove.contains(v));
            }
        } else if let Some(field) = key.strip_prefix(ORDER) {
            // An order directive without a list in the patch still reorders (and prunes deletions).
            if !patch.contains_key(field)
                && let Some(order) = value.as_array()
            {
                let merged = merge_list(object.get(field), &[], Some(order));
                object.insert(field.to_string(), merged);
            }
        }
    }
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        object.retain(|k, _| keep.iter().any(|r| r.as_str() == Some(k)));
    }
}

/// The merge key of a list: the non-directive key of the order directive or `$patch` elements,
/// else `name` when every element has one.
fn merge_key(current: &[Value], items: &[Value], order: Option<&Vec<Value>>) -> Option<String> {
    let from_directive = order
        .into_iter()
        .flatten()
        .chain(items.iter().filter(|i| i.get("$patch").is_some()))
        .filter_map(Value::as_object)
        .find_map(|o| o.keys().find(|k| !k.starts_with('$')).cloned());
    if from_directive.is_some() {
        return from_directive;
    }
    let all_named = |list: &[Value]| {
        list.iter()
            .all(|v| v.get("name").is_some_and(Value::is_string))
    };
    (!items.is_empty() && all_named(items) && all_named(current)).then(|| "name".to_string())
}

fn merge_list(current: Option<&Value>, items: &[Value], order: Option<&Vec<Value>>) -> Value {
    let current: Vec<Value> = current
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let objects = items
        .iter()
        .chain(order.into_iter().flatten())
        .all(Value::is_object);
    if objects && let Some(key) = merge_key(&current, items, order) {
        let mut merged = current;
        for item in items {
            let id = item.get(&key);
            let position = merged.iter().position(|c| c.get(&key) == id);
            match (item.get("$patch").and_then(Value::as_str), position) {
                (Some("delete"), Some(i)) => {
                    merged.remove(i);
                }
                (Some("delete"), None) => {}
                (_, Some(i)) => strategic(&mut merged[i], item),
                (_, None) => merged.push(strip_directives(item)),
            }
        }
        if let Some(order) = order {
            let rank = |v: &Value| order.iter().position(|o| o.get(&key) == v.get(&key));
            // Listed elements take the given order; others (added by another writer) follow.
            let (mut listed, rest): (Vec<_>, Vec<_>) =
                merged.into_iter().partition(|v| rank(v).is_some());
            listed.sort_by_key(|v| rank(v));
            listed.extend(rest);
            merged = listed;
        }
        return Value::Array(merged);
    }
    match order {
        Some(order) if !objects => {
            let mut merged: Vec<Value> = order
                .iter()
                .filter(|v| current.contains(v) || items.contains(v))
                .cloned()
                .collect();
            for v in items.iter().chain(&current) {
                if !merged.contains(v) {
                    merged.push(v.clone());
                }
            }
            Value::Array(merged)
        }
        _ => Value::Array(items.iter().map(strip_directives).collect()),
    }
}

fn strip_directives(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn apply(content_type: &str, target: Value, patch: Value) -> Value {
        Patch::decode(content_type, patch.to_string().as_bytes())
            .unwrap()
            .apply_to(&target)
            .unwrap()
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        let out = apply(
            "application/merge-patch+json",
            json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}),
            json!({"a": "z", "c": {"f": null}, "l": [3]}),
        );
        assert_eq!(out, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }

    #[test]
    fn strategic_patch_merges_containers_by_name_and_keeps_order() {
        let target = json!({"spec": {"containers": [
            {"name": "app", "image": "app:1", "ports": [{"containerPort": 80}, {"containerPort": 81}]},
            {"name": "sidecar", "image": "side:1"}
        ]}});
        // What kubectl apply sends when only the app image and one port change.
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
            "containers": [{
                "name": "app", "image": "app:2",
                "$setElementOrder/ports": [{"containerPort": 80}, {"containerPort": 8080}],
                "ports": [{"containerPort": 8080}, {"$patch": "delete", "containerPort": 81}]
            }]
        }});
        let out = apply(
            "application/strategic-merge-patch+json; charset=utf-8",
            target,
            patch,
        );
        assert_eq!(
            out,
            json!({"spec": {"containers": [
                {"name": "app", "image": "app:2", "ports": [{"containerPort": 80}, {"containerPort": 8080}]},
                {"name": "sidecar", "image": "side:1"}
            ]}})
        );
    }

    #[test]
    fn strategic_patch_handles_primitive_merge_lists_and_deletions() {
        let target = json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x": "1"}}, "spec": {"args": ["-v"]}});
        let patch = json!({
            "metadata": {
                "$setElementOrder/finalizers": ["a", "c"],
                "$deleteFromPrimitiveList/finalizers": ["b"],
                "finalizers": ["c"],
                "labels": {"$patch": "delete"}
            },
            "spec": {"args": ["-q"]}
        });
        let out = apply("application/strategic-merge-patch+json", target, patch);
        assert_eq!(
            out,
            json!({"metadata": {"finalizers": ["a", "c"]}, "spec": {"args": ["-q"]}})
        );
    }

    #[test]
    fn strategic_replace_directive_and_retain_keys() {
        let target =
            json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}});
        let patch = json!({"strategy": {"$retainKeys": ["type"], "type": "Recreate"}});
        assert_eq!(
            apply(
                "application/strategic-merge-patch+json",
                target.clone(),
                patch
            ),
            json!({"strategy": {"type": "Recreate"}})
        );
        let patch = json!({"strategy": {"$patch": "replace", "type": "Recreate"}});
        assert_eq!(
            apply("application/strategic-merge-patch+json", target, patch),
            json!({"strategy": {"type": "Recreate"}})
        );
    }

    #[test]
    fn json_patch_operations() {
        let target = json!({"metadata": {"labels": {"a/b": "1"}}, "list": [1, 2]});
        let patch = json!([
            {"op": "test", "path": "/metadata/labels/a~1b", "value": "1"},
            {"op": "replace", "path": "/metadata/labels/a~1b", "value": "2"},
            {"op": "add", "path": "/list/-", "value": 3},
            {"op": "add", "path": "/list/0", "value": 0},
            {"op": "remove", "path": "/list/1"},
            {"op": "copy", "from": "/list", "path": "/copy"},
            {"op": "move", "from": "/copy", "path": "/moved"}
        ]);
        let out = apply("application/json-patch+json", target, patch);
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"a/b": "2"}}, "list": [0, 2, 3], "moved": [0, 2, 3]})
        );
    }

    #[test]
    fn failed_json_patch_test_reports_the_operation() {
        let patch = Patch::decode(
            "application/json-patch+json",
            br#"[{"op":"test","path":"/a","value":2}]"#,
        )
        .unwrap();
        let err = patch.apply_to(&json!({"a": 1})).unwrap_err();
        assert!(matches!(err, Error::JsonPatch { index: 0, .. }), "{err}");
    }

    #[test]
    fn apply_patch_accepts_yaml_and_unknown_types_are_rejected() {
        let patch = Patch::decode("application/apply-patch+yaml", b"data:\n  k: v\n").unwrap();
        assert_eq!(
            patch.apply_to(&json!({"data": {"o": "1"}})).unwrap(),
            json!({"data": {"o": "1", "k": "v"}})
        );
        assert!(matches!(
            Patch::decode("text/plain", b"{}"),
            Err(Error::UnsupportedMediaType { .. })
        ));
        assert!(matches!(
            Patch::decode("application/merge-patch+json", b"{"),
            Err(Error::Malformed { .. })
        ));
    }
}
