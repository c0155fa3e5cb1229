//! The scheduler: binds each unscheduled Pod (scheduler `default-scheduler`) to the Ready,
//! schedulable Node running the fewest Pods, in one write that sets `spec.nodeName` and the
//! `PodScheduled` condition (as the `binding` subresource does), and records a `Scheduled` event.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{
    Snapshot,
    object::{condition, deleting, key_of, meta, record_event},
    tolerate,
};
use crate::{
    resources::ResourceId,
    store::{Part, Result, Store},
};

/// Ready, not cordoned, and not one of the workload simulator's Nodes (which no kubelet runs).
fn schedulable(node: &Value) -> bool {
    node["spec"]["unschedulable"] != true
        && node["metadata"]["labels"]["app.kubernetes.io/managed-by"] != crate::simulate::MANAGED_BY
        && condition(node, "Ready").is_some_and(|c| c["status"] == "True")
}

/// One pass: binds every pending, unbound Pod.
pub(super) fn sync(store: &Store, snapshot: &Snapshot) -> Result<()> {
    let mut load: BTreeMap<&str, usize> = snapshot
        .nodes
        .iter()
        .filter(|n| schedulable(n))
        .map(|n| (meta(n, "name"), 0))
        .collect();
    if load.is_empty() {
        return Ok(());
    }
    for pod in &snapshot.pods {
        if let Some(count) = pod["spec"]["nodeName"]
            .as_str()
            .and_then(|n| load.get_mut(n))
        {
            *count += 1;
        }
    }
    let pods = ResourceId::core("pods");
    for pod in &snapshot.pods {
        let unbound = pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty);
        let ours = pod["spec"]["schedulerName"]
            .as_str()
            .is_none_or(|s| s == "default-scheduler");
        if !unbound || !ours || deleting(pod) {
            continue;
        }
        let Some((&node, _)) = load.iter().min_by_key(|(name, count)| (**count, *name)) else {
            break;
        };
        let now = super::now();
        let bound = store.modify(&key_of(&pods, pod), Part::Whole, |p| {
            p["spec"]["nodeName"] = json!(node);
            if !p["status"].is_object() {
                p["status"] = json!({"phase": "Pending"});
            }
            let scheduled = json!({"type": "PodScheduled", "status": "True",
                "lastProbeTime": null, "lastTransitionTime": now});
            match p["status"]["conditions"].as_array_mut() {
                Some(conditions) => {
                    conditions.retain(|c| c["type"] != "PodScheduled");
                    conditions.push(scheduled);
                }
                None => p["status"]["conditions"] = json!([scheduled]),
            }
        });
        if let Some(bound) = tolerate(bound)? {
            *load.get_mut(node).expect("node is in the load table") += 1;
            record_event(
                store,
                &bound,
                "Scheduled",
                format!(
                    "Successfully assigned {}/{} to {node}",
                    meta(&bound, "namespace"),
                    meta(&bound, "name")
                ),
                "default-scheduler",
            );
        }
    }
    Ok(())
}
