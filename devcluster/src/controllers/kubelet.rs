//! Fake Nodes and the fake kubelet that runs the Pods bound to them: a bound Pod gets
//! `ContainerCreating` container statuses at once, is Running and Ready after
//! [`ControllerConfig::pod_start_delay`], and a Job's Pod (restart policy `Never`/`OnFailure`)
//! Succeeds after the same delay again. Each step is one status write, as a kubelet's are.

use serde_json::{Value, json};
use tokio::time::Instant;

use super::{
    ControllerConfig, FAKE_NODE_ANNOTATION, Snapshot, State,
    object::{condition, deleting, keep_times, key_of, meta, phase},
    tolerate,
};
use crate::{
    discovery::KUBERNETES_GIT_VERSION,
    resources::ResourceId,
    store::{Part, Result, Store},
};

/// Creates `count` Ready fake Nodes (`dev-node-0`, …), keeping those that exist.
pub(super) fn create_nodes(store: &Store, count: usize) -> Result<()> {
    let now = super::now();
    for i in 0..count {
        let name = format!("dev-node-{i}");
        let ready = |kind: &str, status: &str, reason: &str, message: &str| {
            json!({"type": kind, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now})
        };
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "beta.kubernetes.io/os": "linux",
                    "beta.kubernetes.io/arch": "amd64",
                    "node-role.kubernetes.io/agent": "",
                    "type": "kwok",
                },
                "annotations": {FAKE_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {"podCIDR": format!("10.244.{i}.0/24"), "podCIDRs": [format!("10.244.{i}.0/24")]},
            "status": {
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"},
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"},
                "conditions": [
                    ready("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                    ready("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    ready("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                    ready("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
                ],
                "addresses": [
                    {"type": "InternalIP", "address": format!("10.0.0.{}", 10 + i)},
                    {"type": "Hostname", "address": name},
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": "",
                    "containerRuntimeVersion": "kwok",
                    "kernelVersion": "",
                    "kubeProxyVersion": "",
                    "kubeletVersion": KUBERNETES_GIT_VERSION,
                    "machineID": "",
                    "operatingSystem": "linux",
                    "osImage": "",
                    "systemUUID": "",
                },
                "phase": "Running",
            },
        });
        tolerate(store.create(&ResourceId::core("nodes"), None, node))?;
    }
    Ok(())
}

/// The InternalIP of a Node.
fn node_ip(node: &Value) -> String {
    node["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .unwrap_or("10.0.0.1")
        .to_string()
}

/// A pod IP in the Node's pod CIDR, derived from the pod's uid.
fn pod_ip(node: &Value, pod: &Value) -> String {
    let cidr = node["spec"]["podCIDR"].as_str().unwrap_or("10.244.0.0/24");
    let prefix = cidr
        .rsplit_once('.')
        .map_or("10.244.0", |(network, _)| network);
    let host = meta(pod, "uid")
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    format!("{prefix}.{}", 2 + host % 250)
}

/// Whether the pod runs to completion (a Job's pod) rather than forever.
fn runs_to_completion(pod: &Value) -> bool {
    matches!(
        pod["spec"]["restartPolicy"].as_str(),
        Some("Never" | "OnFailure")
    )
}

fn container_statuses(pod: &Value, state: impl Fn(&Value) -> (Value, bool)) -> Value {
    let statuses: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let (state, ready) = state(c);
            json!({
                "name": c["name"],
                "image": c["image"],
                "imageID": "",
                "ready": ready,
                "restartCount": 0,
                "started": ready,
                "state": state,
                "lastState": {},
            })
        })
        .collect();
    json!(statuses)
}

fn conditions(
    pod: &Value,
    ready: &str,
    containers_ready: &str,
    reason: Option<&str>,
    now: &str,
) -> Value {
    let make = |kind: &str, status: &str, reason: Option<&str>| {
        let mut c = json!({"type": kind, "status": status, "lastProbeTime": null});
        if let Some(reason) = reason {
            c["reason"] = json!(reason);
        }
        keep_times(condition(pod, kind), c, now)
    };
    let started = if containers_ready == "True" || reason == Some("PodCompleted") {
        "True"
    } else {
        "False"
    };
    json!([
        make("PodReadyToStartContainers", started, None),
        make(
            "Initialized",
            "True",
            reason.filter(|r| *r == "PodCompleted")
        ),
        make("Ready", ready, reason),
        make("ContainersReady", containers_ready, reason),
        make("PodScheduled", "True", None),
    ])
}

/// One pass of the fake kubelet; returns when a Pod's next step is due.
pub(super) fn sync(
    store: &Store,
    config: &ControllerConfig,
    state: &mut State,
    snapshot: &Snapshot,
) -> Option<Instant> {
    let fake_nodes: Vec<&Value> = snapshot
        .nodes
        .iter()
        .filter(|n| n["metadata"]["annotations"][FAKE_NODE_ANNOTATION].is_string())
        .map(|n| &**n)
        .collect();
    let pods = ResourceId::core("pods");
    let mut wake: Option<Instant> = None;
    let clock = Instant::now();
    state
        .kubelet_clock
        .retain(|uid, _| snapshot.pods.iter().any(|p| meta(p, "uid") == uid));
    for pod in &snapshot.pods {
        let node_name = pod["spec"]["nodeName"].as_str().unwrap_or("");
        let Some(node) = fake_nodes.iter().find(|n| meta(n, "name") == node_name) else {
            continue;
        };
        if deleting(pod) || matches!(phase(pod), "Succeeded" | "Failed") {
            continue;
        }
        let now = super::now();
        let creating = pod["status"]["containerStatuses"].is_null();
        let since = *state
            .kubelet_clock
            .entry(meta(pod, "uid").to_string())
            .or_insert(clock);
        let due = since + config.pod_start_delay;
        let running = phase(pod) == "Running";
        let status = if creating {
            state
                .kubelet_clock
                .insert(meta(pod, "uid").to_string(), clock);
            wake = earliest(wake, clock + config.pod_start_delay);
            let mut status = json!({
                "phase": "Pending",
                "conditions": conditions(pod, "False", "False", Some("ContainersNotReady"), &now),
                "hostIP": node_ip(node),
                "hostIPs": [{"ip": node_ip(node)}],
                "startTime": pod["status"]["startTime"].as_str().unwrap_or(&now),
                "containerStatuses": container_statuses(pod, |_| {
                    (json!({"waiting": {"reason": "ContainerCreating"}}), false)
                }),
                "qosClass": "BestEffort",
            });
            status["conditions"][0]["status"] = json!("False");
            status
        } else if clock < due {
            wake = earliest(wake, due);
            continue;
        } else if !running {
            state
                .kubelet_clock
                .insert(meta(pod, "uid").to_string(), clock);
            if runs_to_completion(pod) {
                wake = earliest(wake, clock + config.pod_start_delay);
            }
            let ip = pod_ip(node, pod);
            json!({
                "phase": "Running",
                "conditions": conditions(pod, "True", "True", None, &now),
                "hostIP": node_ip(node),
                "hostIPs": [{"ip": node_ip(node)}],
                "podIP": ip,
                "podIPs": [{"ip": ip}],
                "startTime": pod["status"]["startTime"],
                "containerStatuses": container_statuses(pod, |_| {
                    (json!({"running": {"startedAt": now}}), true)
                }),
                "qosClass": "BestEffort",
            })
        } else if runs_to_completion(pod) {
            let started =
                pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].clone();
            let mut status = pod["status"].clone();
            status["phase"] = json!("Succeeded");
            status["conditions"] = conditions(pod, "False", "False", Some("PodCompleted"), &now);
            status["containerStatuses"] = container_statuses(pod, |_| {
                (
                    json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": now}}),
                    false,
                )
            });
            status
        } else {
            continue;
        };
        let key = key_of(&pods, pod);
        let result = store.modify(&key, Part::Status, |p| p["status"] = status);
        if let Err(e) = tolerate(result) {
            tracing::debug!(error = %e, "fake kubelet cannot update a pod");
        }
    }
    wake
}

fn earliest(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}
