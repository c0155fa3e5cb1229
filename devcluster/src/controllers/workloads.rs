//! The workload controllers: Deployment → ReplicaSets (one per pod template, named by the
//! `pod-template-hash`, rolled with `maxSurge`/`maxUnavailable` or recreated), ReplicaSet → Pods,
//! and Job → Pods until `completions` succeed. Each writes its object's status (replicas,
//! `observedGeneration`, conditions) the way `kubectl rollout status` and `kubectl get` read it,
//! and records the events Kubernetes' controllers record.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{
    Snapshot,
    object::{
        condition, controller_uid, deleting, keep_times, key_of, labels, meta, owner_reference,
        phase, pod_ready, record_event, selector_matches,
    },
    tolerate,
};
use crate::{
    resources::ResourceId,
    store::{Part, Preconditions, Propagation, Result, Store},
};

const REVISION: &str = "deployment.kubernetes.io/revision";
const HASH_LABEL: &str = "pod-template-hash";

fn replicas(object: &Value, pointer: &str) -> i64 {
    object.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn spec_replicas(object: &Value) -> i64 {
    object["spec"]["replicas"].as_i64().unwrap_or(1)
}

/// The `pod-template-hash` of a template: FNV-1a (32 bit) of its JSON, its decimal digits
/// mapped onto the alphabet Kubernetes' `rand.SafeEncodeString` uses.
pub(super) fn template_hash(template: &Value) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut hash: u32 = 0x811c_9dc5;
    for byte in template.to_string().bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash.to_string()
        .bytes()
        .map(|b| ALPHABET[usize::from(b) % ALPHABET.len()] as char)
        .collect()
}

/// `25%` of `total` rounded up or down, or an absolute number.
fn int_or_percent(value: &Value, default: &str, total: i64, round_up: bool) -> i64 {
    let value = if value.is_null() {
        json!(default)
    } else {
        value.clone()
    };
    match (&value, value.as_str().and_then(|s| s.strip_suffix('%'))) {
        (_, Some(percent)) => {
            let percent: i64 = percent.parse().unwrap_or(25);
            let scaled = total * percent;
            if round_up {
                (scaled + 99) / 100
            } else {
                scaled / 100
            }
        }
        (Value::Number(n), _) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

fn revision(rs: &Value) -> i64 {
    rs["metadata"]["annotations"][REVISION]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn owned<'a>(objects: &'a [Arc<Value>], owner: &Value) -> Vec<&'a Arc<Value>> {
    let uid = meta(owner, "uid");
    objects
        .iter()
        .filter(|o| controller_uid(o) == Some(uid) && !deleting(o))
        .collect()
}

fn scale_replicaset(store: &Store, deployment: &Value, rs: &Value, to: i64) -> Result<()> {
    let from = spec_replicas(rs);
    if from == to {
        return Ok(());
    }
    let key = key_of(&ResourceId::new("apps", "replicasets"), rs);
    let scaled = tolerate(store.modify(&key, Part::Main, |o| {
        o["spec"]["replicas"] = json!(to);
        o["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] =
            json!(spec_replicas(deployment).to_string());
    }))?;
    if scaled.is_some() {
        let direction = if to > from { "up" } else { "down" };
        record_event(
            store,
            deployment,
            "ScalingReplicaSet",
            format!(
                "Scaled {direction} replica set {} from {from} to {to}",
                meta(rs, "name")
            ),
            "deployment-controller",
        );
    }
    Ok(())
}

/// One pass over every Deployment.
pub(super) fn sync_deployments(store: &Store, snapshot: &Snapshot) -> Result<()> {
    for deployment in &snapshot.deployments {
        if deleting(deployment) {
            continue;
        }
        sync_deployment(store, snapshot, deployment)?;
    }
    Ok(())
}

fn sync_deployment(store: &Store, snapshot: &Snapshot, deployment: &Value) -> Result<()> {
    let desired = spec_replicas(deployment);
    let template = &deployment["spec"]["template"];
    let hash = template_hash(template);
    let mut all: Vec<&Arc<Value>> = owned(&snapshot.replicasets, deployment);
    all.sort_by_key(|rs| (revision(rs), meta(rs, "creationTimestamp").to_string()));
    let new = all
        .iter()
        .find(|rs| rs["metadata"]["labels"][HASH_LABEL] == hash.as_str())
        .copied();
    let old: Vec<&Arc<Value>> = all.iter().filter(|rs| Some(**rs) != new).copied().collect();
    let max_revision = all.iter().map(|rs| revision(rs)).max().unwrap_or(0);
    let rolling = deployment["spec"]["strategy"]["type"] != "Recreate";
    let rolling_update = &deployment["spec"]["strategy"]["rollingUpdate"];
    let surge = if rolling {
        int_or_percent(&rolling_update["maxSurge"], "25%", desired, true)
    } else {
        0
    };
    let mut unavailable = if rolling {
        int_or_percent(&rolling_update["maxUnavailable"], "25%", desired, false)
    } else {
        desired
    };
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    let total: i64 = all.iter().map(|rs| spec_replicas(rs)).sum();
    let old_pods: i64 = old.iter().map(|rs| replicas(rs, "/status/replicas")).sum();
    let Some(new) = new else {
        let initial = if rolling {
            (desired + surge - total).clamp(0, desired)
        } else if old_pods == 0 && old.iter().all(|rs| spec_replicas(rs) == 0) {
            desired
        } else {
            0
        };
        let mut pod_labels = labels(template);
        pod_labels.insert(HASH_LABEL.into(), json!(hash));
        let mut selector = deployment["spec"]["selector"].clone();
        selector["matchLabels"][HASH_LABEL] = json!(hash);
        let mut rs_template = template.clone();
        rs_template["metadata"]["labels"] = Value::Object(pod_labels.clone());
        let name = format!("{}-{hash}", meta(deployment, "name"));
        let rs = json!({
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": meta(deployment, "namespace"),
                "labels": pod_labels,
                "annotations": {
                    REVISION: (max_revision + 1).to_string(),
                    "deployment.kubernetes.io/desired-replicas": desired.to_string(),
                    "deployment.kubernetes.io/max-replicas": (desired + surge).to_string(),
                },
                "ownerReferences": [owner_reference(deployment)],
            },
            "spec": {
                "replicas": initial,
                "minReadySeconds": deployment["spec"]["minReadySeconds"].as_i64().unwrap_or(0),
                "selector": selector,
                "template": rs_template,
            },
        });
        let created = tolerate(store.create(&ResourceId::new("apps", "replicasets"), None, rs))?;
        if created.is_some() {
            record_event(
                store,
                deployment,
                "ScalingReplicaSet",
                format!("Scaled up replica set {name} from 0 to {initial}"),
                "deployment-controller",
            );
        }
        return Ok(());
    };
    // Scale the new ReplicaSet up (within the surge) or down (a scale-down of the Deployment).
    let new_spec = spec_replicas(new);
    if new_spec > desired {
        scale_replicaset(store, deployment, new, desired)?;
    } else if new_spec < desired {
        let to = if rolling {
            (new_spec + (desired + surge - total)).min(desired)
        } else if old_pods == 0 && old.iter().all(|rs| spec_replicas(rs) == 0) {
            desired
        } else {
            new_spec
        };
        if to > new_spec {
            scale_replicaset(store, deployment, new, to)?;
        }
    }
    // Scale old ReplicaSets down as far as availability allows (everything, when recreating).
    if rolling {
        let min_available = desired - unavailable;
        let new_unavailable = spec_replicas(new) - replicas(new, "/status/availableReplicas");
        let mut budget = total - min_available - new_unavailable.max(0);
        for rs in &old {
            if budget <= 0 {
                break;
            }
            let current = spec_replicas(rs);
            let cut = current.min(budget);
            if cut > 0 {
                scale_replicaset(store, deployment, rs, current - cut)?;
                budget -= cut;
            }
        }
    } else {
        for rs in &old {
            scale_replicaset(store, deployment, rs, 0)?;
        }
    }
    if revision(new) < max_revision {
        let key = key_of(&ResourceId::new("apps", "replicasets"), new);
        tolerate(store.modify(&key, Part::Main, |o| {
            o["metadata"]["annotations"][REVISION] = json!((max_revision + 1).to_string());
        }))?;
    }
    write_deployment_status(store, deployment, new, &all, desired, unavailable)
}

fn write_deployment_status(
    store: &Store,
    deployment: &Value,
    new: &Value,
    all: &[&Arc<Value>],
    desired: i64,
    max_unavailable: i64,
) -> Result<()> {
    let sum = |pointer: &str| all.iter().map(|rs| replicas(rs, pointer)).sum::<i64>();
    let (total, ready, available) = (
        sum("/status/replicas"),
        sum("/status/readyReplicas"),
        sum("/status/availableReplicas"),
    );
    let updated = replicas(new, "/status/replicas");
    let now = super::now();
    let complete = updated == desired
        && total == desired
        && available == desired
        && replicas(new, "/status/observedGeneration") == replicas(new, "/metadata/generation");
    let minimum = available >= desired - max_unavailable;
    let new_name = meta(new, "name");
    let available_condition = json!({
        "type": "Available",
        "status": if minimum { "True" } else { "False" },
        "lastUpdateTime": now,
        "reason": if minimum { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
        "message": if minimum { "Deployment has minimum availability." } else { "Deployment does not have minimum availability." },
    });
    let progressing = json!({
        "type": "Progressing",
        "status": "True",
        "lastUpdateTime": now,
        "reason": if complete { "NewReplicaSetAvailable" } else { "ReplicaSetUpdated" },
        "message": if complete {
            format!("ReplicaSet \"{new_name}\" has successfully progressed.")
        } else {
            format!("ReplicaSet \"{new_name}\" is progressing.")
        },
    });
    let mut status = json!({
        "observedGeneration": replicas(deployment, "/metadata/generation"),
        "replicas": total,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": available,
        "conditions": [
            keep_times(condition(deployment, "Available"), available_condition, &now),
            keep_times(condition(deployment, "Progressing"), progressing, &now),
        ],
    });
    let unavailable = all.iter().map(|rs| spec_replicas(rs)).sum::<i64>() - available;
    if unavailable > 0 {
        status["unavailableReplicas"] = json!(unavailable);
    }
    let key = key_of(&ResourceId::new("apps", "deployments"), deployment);
    let revision = revision(new).to_string();
    // The revision annotation goes with the status (as Kubernetes' controller writes it through
    // the status subresource), so it does not bump the generation.
    tolerate(store.modify(&key, Part::Whole, |o| {
        o["metadata"]["annotations"][REVISION] = json!(revision);
        o["status"] = status;
    }))?;
    Ok(())
}

/// Pods a controller creates from its template.
fn pod_from_template(owner: &Value, template: &Value, extra_labels: Map<String, Value>) -> Value {
    let mut pod_labels = labels(template);
    pod_labels.extend(extra_labels);
    let mut metadata = json!({
        "generateName": format!("{}-", meta(owner, "name")),
        "namespace": meta(owner, "namespace"),
        "labels": pod_labels,
        "ownerReferences": [owner_reference(owner)],
    });
    if let Some(annotations) = template["metadata"]["annotations"].as_object() {
        metadata["annotations"] = json!(annotations);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]})
}

fn create_pod(store: &Store, owner: &Value, pod: Value, component: &str) -> Result<()> {
    if let Some(pod) = tolerate(store.create(&ResourceId::core("pods"), None, pod))? {
        record_event(
            store,
            owner,
            "SuccessfulCreate",
            format!("Created pod: {}", meta(&pod, "name")),
            component,
        );
    }
    Ok(())
}

/// One pass over every ReplicaSet.
pub(super) fn sync_replicasets(store: &Store, snapshot: &Snapshot) -> Result<()> {
    let pods_resource = ResourceId::core("pods");
    for rs in &snapshot.replicasets {
        if deleting(rs) {
            continue;
        }
        let desired = spec_replicas(rs);
        let mut pods: Vec<&Arc<Value>> = owned(&snapshot.pods, rs)
            .into_iter()
            .filter(|p| !matches!(phase(p), "Succeeded" | "Failed"))
            .filter(|p| selector_matches(&rs["spec"]["selector"], &labels(p)))
            .collect();
        let count = pods.len() as i64;
        if count < desired {
            for _ in count..desired {
                let pod = pod_from_template(rs, &rs["spec"]["template"], Map::new());
                create_pod(store, rs, pod, "replicaset-controller")?;
            }
        } else if count > desired {
            // Delete the least progressed first: unscheduled, pending, not ready, newest.
            pods.sort_by_key(|p| {
                (
                    !p["spec"]["nodeName"].as_str().is_none_or(str::is_empty),
                    phase(p) == "Running",
                    pod_ready(p),
                    std::cmp::Reverse(meta(p, "creationTimestamp").to_string()),
                )
            });
            for pod in pods.iter().take((count - desired) as usize) {
                let deleted = tolerate(store.delete_propagating(
                    &key_of(&pods_resource, pod),
                    &Preconditions::default(),
                    Propagation::Background,
                ))?;
                if deleted.is_some() {
                    record_event(
                        store,
                        rs,
                        "SuccessfulDelete",
                        format!("Deleted pod: {}", meta(pod, "name")),
                        "replicaset-controller",
                    );
                }
            }
            pods.drain(..(count - desired) as usize);
        }
        let ready = pods.iter().filter(|p| pod_ready(p)).count() as i64;
        let observed = pods.len() as i64;
        let status = json!({
            "replicas": observed,
            "fullyLabeledReplicas": observed,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": replicas(rs, "/metadata/generation"),
        });
        let key = key_of(&ResourceId::new("apps", "replicasets"), rs);
        tolerate(store.modify(&key, Part::Status, |o| o["status"] = status))?;
    }
    Ok(())
}

/// One pass over every Job.
pub(super) fn sync_jobs(store: &Store, snapshot: &Snapshot) -> Result<()> {
    for job in &snapshot.jobs {
        if deleting(job) || condition(job, "Complete").is_some() || job["spec"]["suspend"] == true {
            continue;
        }
        let pods = owned(&snapshot.pods, job);
        let succeeded = pods.iter().filter(|p| phase(p) == "Succeeded").count() as i64;
        let failed = pods.iter().filter(|p| phase(p) == "Failed").count() as i64;
        let active: Vec<_> = pods
            .iter()
            .filter(|p| !matches!(phase(p), "Succeeded" | "Failed"))
            .collect();
        let completions = job["spec"]["completions"].as_i64().unwrap_or(1);
        let parallelism = job["spec"]["parallelism"].as_i64().unwrap_or(1);
        let now = super::now();
        let mut status = job["status"].as_object().cloned().unwrap_or_default();
        status.entry("startTime").or_insert_with(|| json!(now));
        let ready = active.iter().filter(|p| pod_ready(p)).count() as i64;
        status.insert("active".into(), json!(active.len()));
        status.insert("ready".into(), json!(ready));
        status.insert("succeeded".into(), json!(succeeded));
        status.insert("failed".into(), json!(failed));
        status.insert("terminating".into(), json!(0));
        status.insert("uncountedTerminatedPods".into(), json!({}));
        let complete = succeeded >= completions;
        if complete {
            status.insert("active".into(), json!(0));
            status.insert("completionTime".into(), json!(now));
            let condition = |kind: &str| {
                json!({"type": kind, "status": "True", "lastProbeTime": now,
                    "lastTransitionTime": now, "reason": "CompletionsReached",
                    "message": "Reached expected number of succeeded pods"})
            };
            status.insert(
                "conditions".into(),
                json!([condition("SuccessCriteriaMet"), condition("Complete")]),
            );
        } else {
            let wanted = parallelism.min(completions - succeeded);
            let uid = meta(job, "uid");
            let job_name = meta(job, "name");
            let extra: Map<String, Value> = [
                ("batch.kubernetes.io/controller-uid", uid),
                ("batch.kubernetes.io/job-name", job_name),
                ("controller-uid", uid),
                ("job-name", job_name),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
            for _ in active.len() as i64..wanted {
                let pod = pod_from_template(job, &job["spec"]["template"], extra.clone());
                create_pod(store, job, pod, "job-controller")?;
            }
        }
        let key = key_of(&ResourceId::new("batch", "jobs"), job);
        let written =
            tolerate(store.modify(&key, Part::Status, |o| o["status"] = Value::Object(status)))?;
        if complete && written.is_some() {
            record_event(
                store,
                job,
                "Completed",
                "Job completed".into(),
                "job-controller",
            );
        }
    }
    Ok(())
}
