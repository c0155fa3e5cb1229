//! What a plugin sees for the same API flows on the dev cluster and on the real kube-apiserver:
//! a recording plugin logs every add, update and delete with the whole object, and the sequences
//! are compared per object (event kinds in order, and which fields each update changed). The
//! flows are the ones the real server runs without a controller-manager: a Deployment created,
//! labelled, annotated, scaled and given a new template; deletes with each propagation policy of
//! owners whose dependents carry hand-written `ownerReferences` (and a foreground deletion's
//! finalizer removed by hand); a namespace with objects deleted; a Pod's status updated.
//!
//! The controller-driven flows (Deployment → ReplicaSet → Pods, garbage collection, Jobs,
//! namespace deletion) are checked on the dev cluster against what Kubernetes documents.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::{Value, json};
use wasmformer::config::HostConfig;
use wasmformer::plugin::PluginEngine;
use wasmformer::runtime::{Runtime, RuntimeOptions};
use wasmformer_devcluster::{ControllerConfig, DevCluster, DevClusterConfig};
use wasmformer_tests::apiserver::KubeApiserver;
use wasmformer_tests::{Recorded, guests};

const WAIT: Duration = Duration::from_secs(60);

/// Fields that differ between two servers for reasons a plugin cannot act on: the
/// resourceVersion (a different counter) and the field managers' bookkeeping.
const IGNORED: &[&str] = &["metadata.resourceVersion", "metadata.managedFields"];

/// The leaf paths where `old` and `new` differ (`metadata.labels.tier`, `spec.replicas`); lists
/// of different lengths are one change, lists of the same length compare per item.
fn changed(old: &Value, new: &Value, path: &str, out: &mut Vec<String>) {
    if IGNORED.contains(&path) {
        return;
    }
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                changed(
                    a.get(key).unwrap_or(&Value::Null),
                    b.get(key).unwrap_or(&Value::Null),
                    &join(key),
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                changed(x, y, &format!("{path}[{i}]"), out);
            }
        }
        (a, b) if a != b => out.push(path.to_owned()),
        _ => {}
    }
}

/// Per object (`Kind name`), each event as `add`, `update <changed fields>` or
/// `delete <fields changed since the last event>`.
fn sequences(events: &[Value], suffix: &str) -> BTreeMap<String, Vec<String>> {
    let mut last: BTreeMap<String, Value> = BTreeMap::new();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for event in events {
        // Names are made unique per server by `suffix`; the comparison strips it.
        let name = event["name"].as_str().unwrap().replace(suffix, "");
        let object = event["object"].clone();
        let key = format!("{} {name}", event["kind"].as_str().unwrap());
        let kind = event["event"].as_str().unwrap();
        let line = match (kind, last.get(&key)) {
            ("add", _) | (_, None) => kind.to_owned(),
            (_, Some(previous)) => {
                let mut fields = Vec::new();
                changed(previous, &object, "", &mut fields);
                format!("{kind} {}", fields.join(" ")).trim_end().to_owned()
            }
        };
        last.insert(key.clone(), object);
        out.entry(key).or_default().push(line);
    }
    out
}

fn engine() -> Arc<PluginEngine> {
    Arc::new(
        PluginEngine::new(Some(
            std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components"),
        ))
        .unwrap(),
    )
}

/// The recorder, subscribed to every kind the flows touch, selecting the flows' objects by label.
async fn start_recorder(client: kube::Client, seq: &str, recorded: &Recorded) -> Arc<Runtime> {
    let handles = [
        "apps/v1 Deployment",
        "v1 ConfigMap",
        "v1 Pod",
        "v1 Namespace",
    ]
    .iter()
    .map(|t| {
        let (api_version, kind) = t.split_once(' ').unwrap();
        format!("      - {{apiVersion: {api_version}, kind: {kind}, labelSelector: seq={seq}}}\n")
    })
    .collect::<String>();
    let yaml = format!(
        "plugins:\n  - name: rec\n    wasm: {}\n    handles:\n{handles}    config: {{body: true}}\n",
        guests::RECORDER
    );
    let config = HostConfig::parse(&yaml, std::path::PathBuf::from("/"))
        .unwrap_or_else(|p| panic!("{p:#?}"));
    let options = RuntimeOptions {
        log_observer: Some(recorded.observer()),
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::start(config, client, engine(), options).await;
    assert!(
        runtime.wait_synced(WAIT).await,
        "{:#?}",
        runtime.statuses().await
    );
    runtime
}

fn labelled(seq: &str, object: Value) -> Value {
    let mut object = object;
    object["metadata"]["labels"]["seq"] = json!(seq);
    object
}

fn deployment(seq: &str, name: &str) -> Deployment {
    serde_json::from_value(labelled(
        seq,
        json!({
            "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}}
        }),
    ))
    .unwrap()
}

fn configmap(seq: &str, name: &str, owner: Option<&ConfigMap>) -> ConfigMap {
    let mut cm = labelled(seq, json!({"metadata": {"name": name}, "data": {"a": "1"}}));
    if let Some(owner) = owner {
        cm["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "ConfigMap",
            "name": owner.metadata.name, "uid": owner.metadata.uid,
        }]);
    }
    serde_json::from_value(cm).unwrap()
}

fn pod(seq: &str, name: &str) -> Pod {
    serde_json::from_value(labelled(
        seq,
        json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}),
    ))
    .unwrap()
}

fn namespace(seq: &str, name: &str) -> Namespace {
    serde_json::from_value(labelled(seq, json!({"metadata": {"name": name}}))).unwrap()
}

/// Runs the flows in `ns` and returns what the recorder saw, per object. `suffix` makes the
/// names of cluster-scoped objects (namespaces) unique on the shared real server.
async fn record_flows(
    client: kube::Client,
    ns: &str,
    suffix: &str,
) -> BTreeMap<String, Vec<String>> {
    let seq = format!("s{suffix}");
    let recorded = Recorded::default();
    let runtime = start_recorder(client.clone(), &seq, &recorded).await;
    let post = PostParams::default();
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns);
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), ns);
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let namespaces = Api::<Namespace>::all(client.clone());

    // A Deployment's spec and metadata, as kubectl label/annotate/scale/set image change them.
    deployments
        .create(&post, &deployment(&seq, "web"))
        .await
        .unwrap();
    let pp = PatchParams::default();
    for patch in [
        json!({"metadata": {"labels": {"tier": "front"}}}),
        json!({"metadata": {"annotations": {"note": "hello"}}}),
    ] {
        deployments
            .patch("web", &pp, &Patch::Merge(patch))
            .await
            .unwrap();
    }
    deployments
        .patch_scale("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .unwrap();
    let image = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}});
    deployments
        .patch("web", &pp, &Patch::Strategic(image))
        .await
        .unwrap();

    // Deletes with each propagation policy of owners with hand-made dependents.
    for (policy, name) in [
        (PropagationPolicy::Background, "background"),
        (PropagationPolicy::Foreground, "foreground"),
        (PropagationPolicy::Orphan, "orphan"),
    ] {
        let owner = configmaps
            .create(&post, &configmap(&seq, &format!("owner-{name}"), None))
            .await
            .unwrap();
        configmaps
            .create(
                &post,
                &configmap(&seq, &format!("dependent-{name}"), Some(&owner)),
            )
            .await
            .unwrap();
        let params = DeleteParams {
            propagation_policy: Some(policy),
            ..DeleteParams::default()
        };
        configmaps
            .delete(&format!("owner-{name}"), &params)
            .await
            .unwrap();
    }
    // Without a garbage collector the foreground owner waits on its finalizer; removing it by
    // hand completes the deletion.
    configmaps
        .patch(
            "owner-foreground",
            &pp,
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();

    // A Pod's status, as a kubelet writes it; then the (unscheduled) Pod is deleted at once.
    pods.create(&post, &pod(&seq, "runner")).await.unwrap();
    let status = json!({"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    pods.patch_status("runner", &pp, &Patch::Merge(status))
        .await
        .unwrap();
    pods.delete("runner", &DeleteParams::default())
        .await
        .unwrap();

    // A namespace with objects in it, deleted: Terminating (and, with no namespace controller,
    // staying so; its objects stay too).
    let inner = format!("inner{suffix}");
    namespaces
        .create(&post, &namespace(&seq, &inner))
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), &inner)
        .create(&post, &configmap(&seq, "inside", None))
        .await
        .unwrap();
    namespaces
        .delete(&inner, &DeleteParams::default())
        .await
        .unwrap();

    // End markers: each informer delivers in order, so once a kind's marker arrived, everything
    // of that kind before it did.
    let end = format!("zz-end{suffix}");
    deployments
        .create(&post, &deployment(&seq, &end))
        .await
        .unwrap();
    configmaps
        .create(&post, &configmap(&seq, &end, None))
        .await
        .unwrap();
    pods.create(&post, &pod(&seq, &end)).await.unwrap();
    namespaces
        .create(&post, &namespace(&seq, &end))
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    let events = loop {
        let events = recorded.events("rec");
        let markers = events
            .iter()
            .filter(|e| e["name"] == end.as_str() && e["event"] == "add")
            .count();
        if markers == 4 {
            break events;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "markers not seen: {events:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    runtime.shutdown().await;
    sequences(&events, suffix)
}

/// The sequences every server must produce for the flows (checked on both, so the comparison
/// cannot pass by both being wrong the same way).
fn assert_documented(seen: &BTreeMap<String, Vec<String>>) {
    let of = |key: &str| seen.get(key).cloned().unwrap_or_default();
    assert_eq!(
        of("Deployment web"),
        [
            "add",
            "update metadata.labels.tier",
            "update metadata.annotations metadata.generation",
            "update metadata.generation spec.replicas",
            "update metadata.generation spec.template.spec.containers[0].image",
        ],
        "{seen:#?}"
    );
    assert_eq!(of("ConfigMap owner-background"), ["add", "delete"]);
    assert_eq!(
        of("ConfigMap owner-foreground"),
        [
            "add",
            "update metadata.deletionGracePeriodSeconds metadata.deletionTimestamp metadata.finalizers",
            // The delete event carries the last stored state (finalizer still listed), as etcd's.
            "delete",
        ],
        "{seen:#?}"
    );
    assert_eq!(
        of("ConfigMap owner-orphan"),
        [
            "add",
            "update metadata.deletionGracePeriodSeconds metadata.deletionTimestamp metadata.finalizers",
        ],
        "{seen:#?}"
    );
    for dependent in ["background", "foreground", "orphan"] {
        assert_eq!(of(&format!("ConfigMap dependent-{dependent}")), ["add"]);
    }
    assert_eq!(
        of("Pod runner"),
        [
            "add",
            "update status.conditions status.phase",
            // Graceful deletion of an unscheduled Pod: marked with a grace period of 0, then gone.
            "update metadata.deletionGracePeriodSeconds metadata.deletionTimestamp metadata.generation",
            "delete",
        ],
        "{seen:#?}"
    );
    assert_eq!(
        of("Namespace inner"),
        ["add", "update metadata.deletionTimestamp status.phase",],
        "{seen:#?}"
    );
    assert_eq!(of("ConfigMap inside"), ["add"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_sees_the_same_event_sequences_on_the_dev_cluster_as_on_the_real_apiserver() {
    let server = KubeApiserver::shared();
    let admin = server.admin().await;
    let ns = server.namespace("sequences").await;
    let suffix = format!("-{}", std::process::id());
    let real = record_flows(admin, &ns, &suffix).await;

    let dev = DevCluster::start(DevClusterConfig::default())
        .await
        .unwrap();
    let client = dev.client().unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace("x", &ns))
        .await
        .unwrap();
    let ours = record_flows(client, &ns, &suffix).await;
    dev.shutdown().await.unwrap();

    let differences: Vec<String> = real
        .keys()
        .chain(ours.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|object| real.get(*object) != ours.get(*object))
        .map(|object| {
            format!(
                "{object}:\n  dev:  {:?}\n  real: {:?}",
                ours.get(object),
                real.get(object)
            )
        })
        .collect();
    assert!(
        differences.is_empty(),
        "dev vs real:\n{}",
        differences.join("\n")
    );
    assert_documented(&real);
}

/// The events recorded so far once `done` holds for them (panics after [`WAIT`]).
async fn wait_until(recorded: &Recorded, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let events = recorded.events("rec");
        if done(&events) {
            return events;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not seen in {WAIT:?}: {:#?}",
            events
                .iter()
                .map(|e| format!(
                    "{} {} {} {}",
                    e["event"], e["kind"], e["name"], e["resourceVersion"]
                ))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn rv(event: &Value) -> u64 {
    event["resourceVersion"].as_str().unwrap().parse().unwrap()
}

fn of<'a>(events: &'a [Value], kind: &str) -> impl Iterator<Item = &'a Value> {
    events.iter().filter(move |e| e["kind"] == kind)
}

fn condition<'a>(object: &'a Value, kind: &str) -> Option<&'a str> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?["status"]
        .as_str()
}

/// The controller-driven flows on the dev cluster, against what Kubernetes documents: a
/// Deployment's Pods go Pending → scheduled → Running and Ready; a foreground deletion marks the
/// owner (deletionTimestamp + `foregroundDeletion`), deletes the dependents, then the owner; a Job
/// completes; a deleted namespace is `Terminating` while its contents are deleted, then goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_flows_on_the_dev_cluster_follow_what_kubernetes_documents() {
    let config = DevClusterConfig::default().controllers(Some(
        ControllerConfig::default().pod_start_delay(Duration::from_millis(100)),
    ));
    let dev = DevCluster::start(config).await.unwrap();
    let client = dev.client().unwrap();
    let seq = "flows";
    let namespaces = Api::<Namespace>::all(client.clone());
    let post = PostParams::default();
    namespaces
        .create(&post, &namespace(seq, "work"))
        .await
        .unwrap();
    let recorded = Recorded::default();
    let handles = [
        "apps/v1 Deployment",
        "apps/v1 ReplicaSet",
        "v1 Pod",
        "batch/v1 Job",
        "v1 ConfigMap",
        "v1 Namespace",
    ]
    .iter()
    .map(|t| {
        let (api_version, kind) = t.split_once(' ').unwrap();
        format!("      - {{apiVersion: {api_version}, kind: {kind}, labelSelector: seq={seq}}}\n")
    })
    .collect::<String>();
    let yaml = format!(
        "plugins:\n  - name: rec\n    wasm: {}\n    handles:\n{handles}    config: {{body: true}}\n",
        guests::RECORDER
    );
    let options = RuntimeOptions {
        log_observer: Some(recorded.observer()),
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::start(
        HostConfig::parse(&yaml, "/".into()).unwrap(),
        client.clone(),
        engine(),
        options,
    )
    .await;
    assert!(runtime.wait_synced(WAIT).await);

    // Deployment → ReplicaSet → two Pods, each Pending, then bound, then Running and Ready.
    let mut web = deployment(seq, "web");
    web.spec.as_mut().unwrap().replicas = Some(2);
    web.spec
        .as_mut()
        .unwrap()
        .template
        .metadata
        .as_mut()
        .unwrap()
        .labels
        .as_mut()
        .unwrap()
        .insert("seq".into(), seq.into());
    let deployments = Api::<Deployment>::namespaced(client.clone(), "work");
    deployments.create(&post, &web).await.unwrap();
    let events = wait_until(&recorded, |events| {
        of(events, "ReplicaSet").next().is_some()
            && of(events, "Pod")
                .filter(|e| {
                    e["object"]["status"]["phase"] == "Running"
                        && condition(&e["object"], "Ready") == Some("True")
                })
                .map(|e| e["name"].as_str().unwrap())
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                == 2
    })
    .await;
    let rs = of(&events, "ReplicaSet").next().unwrap();
    assert_eq!(
        rs["object"]["metadata"]["ownerReferences"][0]["kind"],
        "Deployment"
    );
    assert_eq!(
        rs["object"]["metadata"]["ownerReferences"][0]["controller"],
        true
    );
    let pod_names: std::collections::BTreeSet<&str> = of(&events, "Pod")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for name in &pod_names {
        let states: Vec<&Value> = of(&events, "Pod").filter(|e| e["name"] == *name).collect();
        assert_eq!(states[0]["event"], "add");
        assert_eq!(states[0]["object"]["status"]["phase"], "Pending");
        assert!(states[0]["object"]["spec"]["nodeName"].is_null());
        assert_eq!(
            states[0]["object"]["metadata"]["ownerReferences"][0]["kind"],
            "ReplicaSet"
        );
        let bound = states
            .iter()
            .position(|s| s["object"]["spec"]["nodeName"].is_string())
            .expect("scheduled");
        assert_eq!(
            condition(&states[bound]["object"], "PodScheduled"),
            Some("True")
        );
        let running = states
            .iter()
            .position(|s| s["object"]["status"]["phase"] == "Running")
            .unwrap();
        assert!(bound < running, "bound before running: {states:#?}");
        for ready in ["Initialized", "ContainersReady", "Ready"] {
            assert_eq!(
                condition(&states[running]["object"], ready),
                Some("True"),
                "{ready}"
            );
        }
    }

    // Foreground deletion: the owner is marked first, its dependents go, then it does.
    let foreground = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        ..DeleteParams::default()
    };
    deployments.delete("web", &foreground).await.unwrap();
    // Each kind has its own watch, so the owner's delete can reach the plugin before its
    // dependents' do; the order is checked on resource versions, after all of them arrived.
    let events = wait_until(&recorded, |events| {
        let deletes = |kind| of(events, kind).filter(|e| e["event"] == "delete").count();
        deletes("Pod") >= 2 && deletes("ReplicaSet") >= 1 && deletes("Deployment") >= 1
    })
    .await;
    let marked = of(&events, "Deployment")
        .find(|e| e["object"]["metadata"]["deletionTimestamp"].is_string())
        .expect("the owner is marked before it goes");
    assert_eq!(marked["event"], "update");
    assert_eq!(
        marked["object"]["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    let deleted = |kind: &str| -> Vec<u64> {
        of(&events, kind)
            .filter(|e| e["event"] == "delete")
            .map(rv)
            .collect()
    };
    let (pods, sets, owner) = (deleted("Pod"), deleted("ReplicaSet"), deleted("Deployment"));
    assert_eq!((pods.len(), sets.len(), owner.len()), (2, 1, 1));
    assert!(pods.iter().all(|p| rv(marked) < *p && *p < sets[0]));
    assert!(sets[0] < owner[0], "the owner goes last");

    // A Job runs its Pod to Succeeded and completes.
    let job: Job = serde_json::from_value(labelled(seq, json!({
        "metadata": {"name": "once"},
        "spec": {"template": {"metadata": {"labels": {"seq": seq}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}
    })))
    .unwrap();
    Api::<Job>::namespaced(client.clone(), "work")
        .create(&post, &job)
        .await
        .unwrap();
    let job_pod_succeeded = |events: &[Value]| {
        of(events, "Pod").any(|e| {
            e["object"]["status"]["phase"] == "Succeeded"
                && e["object"]["metadata"]["ownerReferences"][0]["kind"] == "Job"
        })
    };
    let events = wait_until(&recorded, |events| {
        of(events, "Job").any(|e| condition(&e["object"], "Complete") == Some("True"))
            && job_pod_succeeded(events)
    })
    .await;
    let completed = of(&events, "Job")
        .find(|e| condition(&e["object"], "Complete") == Some("True"))
        .unwrap();
    let succeeded = of(&events, "Pod")
        .find(|e| e["object"]["status"]["phase"] == "Succeeded")
        .unwrap();
    assert!(
        rv(succeeded) < rv(completed),
        "the Pod succeeds before the Job completes"
    );

    // A deleted namespace is Terminating while what it holds is deleted, then goes.
    namespaces
        .create(&post, &namespace(seq, "gone"))
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "gone")
        .create(&post, &configmap(seq, "inside", None))
        .await
        .unwrap();
    namespaces
        .delete("gone", &DeleteParams::default())
        .await
        .unwrap();
    let events = wait_until(&recorded, |events| {
        let deleted =
            |kind, name| of(events, kind).any(|e| e["name"] == name && e["event"] == "delete");
        deleted("Namespace", "gone") && deleted("ConfigMap", "inside")
    })
    .await;
    let gone: Vec<&Value> = of(&events, "Namespace")
        .filter(|e| e["name"] == "gone")
        .collect();
    let steps: Vec<(&str, &str)> = gone
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap(),
                e["object"]["status"]["phase"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("add", "Active"),
            ("update", "Terminating"),
            ("delete", "Terminating")
        ]
    );
    let inside = of(&events, "ConfigMap")
        .find(|e| e["name"] == "inside" && e["event"] == "delete")
        .expect("its contents are deleted");
    assert!(rv(gone[1]) < rv(inside) && rv(inside) < rv(gone[2]));
    runtime.shutdown().await;
    dev.shutdown().await.unwrap();
}
