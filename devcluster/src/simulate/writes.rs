//! How the simulator touches the store and what it writes: one store call per step, recorded
//! as an [`Operation`], and the object shapes shared by the workload (pod templates, owner
//! references, conditions).

use serde_json::{Value, json};

use super::{Error, Operation, Result};
use crate::{
    resources::ResourceId,
    store::{self, ObjectKey, Part, Preconditions, Store},
};

pub(crate) const MANAGED_BY: &str = "wasmformer-simulate";

pub(super) fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub(super) fn operation(verb: &'static str, object: &Value, resource: ResourceId) -> Operation {
    let meta = &object["metadata"];
    Operation {
        verb,
        resource,
        namespace: meta["namespace"].as_str().map(String::from),
        name: meta["name"].as_str().unwrap_or("").to_string(),
        resource_version: meta["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    }
}

pub(super) fn failed(
    verb: &'static str,
    resource: &ResourceId,
    name: &str,
    source: store::Error,
) -> Error {
    Error::Store {
        verb,
        resource: resource.clone(),
        name: name.to_string(),
        source: Box::new(source),
    }
}

pub(super) fn create(
    store: &Store,
    resource: ResourceId,
    object: Value,
) -> Result<Option<Operation>> {
    match store.create(&resource, None, object.clone()) {
        Ok(created) => Ok(Some(operation("create", &created, resource))),
        // Left over from an earlier run, or the namespace was deleted under us: skip.
        Err(store::Error::AlreadyExists { .. } | store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(failed(
            "create",
            &resource,
            object["metadata"]["name"].as_str().unwrap_or(""),
            e,
        )),
    }
}

/// Read-modify-write; `None` when the object is gone or the write changed nothing.
pub(super) fn update(
    store: &Store,
    key: ObjectKey,
    part: Part,
    f: impl FnOnce(&mut Value),
) -> Result<Option<Operation>> {
    let before = store.resource_version();
    match store.modify(&key, part, f) {
        Ok(object) => {
            let op = operation("update", &object, key.resource);
            Ok((op.resource_version > before).then_some(op))
        }
        Err(store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(failed("update", &key.resource, &key.name, e)),
    }
}

pub(super) fn delete(store: &Store, key: ObjectKey) -> Result<Option<Operation>> {
    match store.delete(&key, &Preconditions::default()) {
        Ok(store::Deletion::Deleted(object) | store::Deletion::Finalizing(object)) => {
            Ok(Some(operation("delete", &object, key.resource)))
        }
        Err(store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(failed("delete", &key.resource, &key.name, e)),
    }
}

pub(super) fn object_key(
    group: &str,
    resource: &str,
    namespace: Option<&str>,
    name: &str,
) -> ObjectKey {
    ObjectKey::new(ResourceId::new(group, resource), namespace, name)
}

/// Sets a condition, keeping its transition time when its status did not change.
pub(super) fn set_condition(conditions: &mut Value, kind: &str, status: bool, reason: &str) {
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let list = conditions.as_array_mut().unwrap();
    let status = if status { "True" } else { "False" };
    match list.iter_mut().find(|c| c["type"] == kind) {
        Some(c) if c["status"] == status => c["reason"] = json!(reason),
        Some(c) => {
            *c = json!({"type": kind, "status": status, "reason": reason, "lastTransitionTime": now()})
        }
        None => list.push(
            json!({"type": kind, "status": status, "reason": reason, "lastTransitionTime": now()}),
        ),
    }
}

pub(super) fn owner(api_version: &str, kind: &str, object: &Value) -> Value {
    json!([{"apiVersion": api_version, "kind": kind, "name": object["metadata"]["name"],
        "uid": object["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}])
}

pub(super) fn pod_template(app: &str) -> Value {
    json!({"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": "app",
        "image": format!("registry.example/{app}:1.0"), "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}})
}
