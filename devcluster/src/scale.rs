//! The `/scale` subresource of deployments, replicasets and statefulsets: an `autoscaling/v1`
//! `Scale` view of `.spec.replicas` (what `kubectl scale` and autoscalers use). Writes change
//! only the replica count.

use serde_json::{Value, json};

use crate::{patch::Patch, status::ApiStatus};

/// The `Scale` view of a scalable object.
pub(crate) fn of(object: &Value) -> Value {
    let meta = &object["metadata"];
    let selector = object
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": object.pointer("/spec/replicas").cloned().unwrap_or(json!(1))},
        "status": {"replicas": object.pointer("/status/replicas").cloned().unwrap_or(json!(0)), "selector": selector},
    })
}

/// The merge patch of the scaled object that a desired `Scale` asks for; its
/// `metadata.resourceVersion`, when set, is kept as a precondition.
pub(crate) fn to_patch(scale: &Value) -> Result<Patch, ApiStatus> {
    let replicas = scale
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .filter(|r| *r >= 0)
        .ok_or_else(|| {
            ApiStatus::invalid_options(
                "Scale",
                "spec.replicas",
                "Invalid value: must be a non-negative integer",
            )
        })?;
    let mut patch = json!({"spec": {"replicas": replicas}});
    if let Some(rv) = scale
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|rv| !rv.is_empty())
    {
        patch["metadata"] = json!({"resourceVersion": rv});
    }
    Ok(Patch::Merge(patch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_reflects_replicas_and_selector_and_round_trips() {
        let deployment = json!({"metadata": {"name": "web", "namespace": "default", "resourceVersion": "7"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web", "tier": "front"}}},
            "status": {"replicas": 1}});
        let scale = of(&deployment);
        assert_eq!(scale["spec"]["replicas"], 2);
        assert_eq!(
            scale["status"],
            json!({"replicas": 1, "selector": "app=web,tier=front"})
        );
        let mut wanted = scale.clone();
        wanted["spec"]["replicas"] = json!(5);
        let Patch::Merge(patch) = to_patch(&wanted).unwrap() else {
            panic!("merge patch")
        };
        assert_eq!(
            patch,
            json!({"spec": {"replicas": 5}, "metadata": {"resourceVersion": "7"}})
        );
        assert_eq!(
            to_patch(&json!({"spec": {"replicas": -1}}))
                .unwrap_err()
                .code,
            422
        );
    }
}
