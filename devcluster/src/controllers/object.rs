//! Reading and building the pieces of objects the controllers share: metadata, owner
//! references, label selectors, conditions, and the Events controllers record.

use serde_json::{Map, Value, json};

use crate::{
    resources::ResourceId,
    store::{ObjectKey, Store},
};

/// `metadata.{field}` as a string, `""` when absent.
pub(super) fn meta<'a>(object: &'a Value, field: &str) -> &'a str {
    object["metadata"][field].as_str().unwrap_or("")
}

/// The key of an object of `resource`.
pub(super) fn key_of(resource: &ResourceId, object: &Value) -> ObjectKey {
    ObjectKey::new(
        resource.clone(),
        Some(meta(object, "namespace")),
        meta(object, "name"),
    )
}

/// Whether the object has a `deletionTimestamp`.
pub(super) fn deleting(object: &Value) -> bool {
    !meta(object, "deletionTimestamp").is_empty()
}

/// The uid of the object's controller (the owner reference with `controller: true`).
pub(super) fn controller_uid(object: &Value) -> Option<&str> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .and_then(|r| r["uid"].as_str())
}

/// The owner reference a controller puts on what it creates.
pub(super) fn owner_reference(owner: &Value) -> Value {
    json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta(owner, "name"),
        "uid": meta(owner, "uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// `metadata.labels` (empty when absent).
pub(super) fn labels(object: &Value) -> Map<String, Value> {
    object["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default()
}

/// Whether `labels` match a `metav1.LabelSelector` (`matchLabels` and `matchExpressions`). An
/// empty or missing selector matches nothing, as for workload controllers.
pub(super) fn selector_matches(selector: &Value, labels: &Map<String, Value>) -> bool {
    let match_labels = selector["matchLabels"].as_object();
    let expressions = selector["matchExpressions"].as_array();
    if match_labels.is_none_or(Map::is_empty) && expressions.is_none_or(Vec::is_empty) {
        return false;
    }
    let labels_ok = match_labels
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_ok = expressions.into_iter().flatten().all(|e| {
        let value = labels.get(e["key"].as_str().unwrap_or(""));
        let values: Vec<&Value> = e["values"].as_array().into_iter().flatten().collect();
        match e["operator"].as_str().unwrap_or("") {
            "In" => value.is_some_and(|v| values.contains(&v)),
            "NotIn" => value.is_none_or(|v| !values.contains(&v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && expressions_ok
}

/// Whether the pod's `Ready` condition is `True`.
pub(super) fn pod_ready(pod: &Value) -> bool {
    condition(pod, "Ready").is_some_and(|c| c["status"] == "True")
}

/// The condition of `type` in `status.conditions`.
pub(super) fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// A condition that keeps its timestamps while its status, reason and message stay the same, so
/// a controller's unchanged status is a no-op write.
pub(super) fn keep_times(previous: Option<&Value>, mut condition: Value, now: &str) -> Value {
    let same = |field: &str| previous.is_some_and(|p| p[field] == condition[field]);
    let transition = match previous {
        Some(p) if same("status") => p["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    if condition.get("lastUpdateTime").is_some() {
        condition["lastUpdateTime"] = match previous {
            Some(p) if same("status") && same("reason") && same("message") => {
                p["lastUpdateTime"].clone()
            }
            _ => json!(now),
        };
    }
    condition["lastTransitionTime"] = transition;
    condition
}

/// The pod phase (`Pending` when unset).
pub(super) fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("Pending")
}

/// Records a `v1` Event about `involved`, as the named component would.
pub(super) fn record_event(
    store: &Store,
    involved: &Value,
    reason: &str,
    message: String,
    component: &str,
) {
    let namespace = match meta(involved, "namespace") {
        "" => "default",
        ns => ns,
    };
    let now = super::now();
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": format!("{}.", meta(involved, "name")), "namespace": namespace},
        "involvedObject": {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "name": meta(involved, "name"),
            "namespace": meta(involved, "namespace"),
            "uid": meta(involved, "uid"),
            "resourceVersion": meta(involved, "resourceVersion"),
        },
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "type": "Normal",
        "reportingComponent": component,
        "reportingInstance": "",
    });
    if let Err(e) = store.create(&ResourceId::core("events"), Some(namespace), event) {
        tracing::debug!(error = %e, event.reason = reason, "cannot record an event");
    }
}
