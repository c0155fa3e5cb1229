//! The simulated workload: a model of nodes, deployments, replicasets and pods, the queue of
//! controller and kubelet work their lifecycle implies, and the objects written for each step.

use std::collections::VecDeque;

use serde_json::json;

use super::{
    Operation, Result, SimulationConfig,
    rng::Rng,
    writes::{
        MANAGED_BY, create, delete, now, object_key, owner, pod_template, set_condition, update,
    },
};
use crate::{
    resources::ResourceId,
    store::{ObjectKey, Part, Store},
};

#[derive(Clone, Debug)]
struct Pod {
    name: String,
    running: bool,
}

#[derive(Clone, Debug)]
struct Deployment {
    namespace: String,
    name: String,
    replicas: u32,
    replica_set: Option<String>,
    pods: Vec<Pod>,
}

/// The `team` labels of the simulated namespaces, in turn.
const TEAMS: &[&str] = &["payments", "checkout", "search"];

/// Deployment `(namespace, name)`.
type DeploymentKey = (String, String);

#[derive(Clone, Debug)]
enum Work {
    CreateLease(String),
    CreateReplicaSet(DeploymentKey),
    /// The replicaset controller: create or delete one pod towards the desired count.
    Reconcile(DeploymentKey),
    BindPod(DeploymentKey, String),
    InitializePod(DeploymentKey, String),
    StartPod(DeploymentKey, String),
    ScaleReplicaSet(DeploymentKey),
    ReplicaSetStatus(DeploymentKey),
    DeploymentStatus(DeploymentKey),
    Delete(ObjectKey),
}

#[derive(Debug)]
pub(super) struct Workload {
    rng: Rng,
    namespaces: usize,
    nodes: usize,
    max_deployments: usize,
    max_replicas: u32,
    namespaces_created: usize,
    nodes_created: usize,
    deployments: Vec<Deployment>,
    next_deployment: u64,
    heartbeats: u64,
    queue: VecDeque<Work>,
}

fn deployment_key(d: &DeploymentKey) -> ObjectKey {
    object_key("apps", "deployments", Some(&d.0), &d.1)
}

impl Workload {
    pub(super) fn new(config: &SimulationConfig) -> Self {
        Self {
            rng: Rng::new(config.seed),
            namespaces: config.namespaces.max(1),
            nodes: config.nodes.max(1),
            max_deployments: config.max_deployments,
            max_replicas: config.max_replicas.max(1),
            namespaces_created: 0,
            nodes_created: 0,
            deployments: Vec::new(),
            next_deployment: 0,
            heartbeats: 0,
            queue: VecDeque::new(),
        }
    }

    /// Performs exactly one write.
    pub(super) fn step(&mut self, store: &Store) -> Result<Operation> {
        loop {
            if let Some(op) = self.try_step(store)? {
                return Ok(op);
            }
        }
    }

    fn try_step(&mut self, store: &Store) -> Result<Option<Operation>> {
        if self.nodes_created < self.nodes {
            let name = format!("sim-node-{}", self.nodes_created);
            self.nodes_created += 1;
            self.queue.push_back(Work::CreateLease(name.clone()));
            let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
                "labels": {"kubernetes.io/hostname": name, "app.kubernetes.io/managed-by": MANAGED_BY}},
                "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "lastHeartbeatTime": now(), "lastTransitionTime": now()}],
                    "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"}}});
            return create(store, ResourceId::core("nodes"), node);
        }
        if self.namespaces_created < self.namespaces {
            let name = format!("sim-{}", self.namespaces_created);
            self.namespaces_created += 1;
            // A `team` label per namespace, for plugins that read namespace labels
            // (examples/label-sync).
            let team = TEAMS[(self.namespaces_created - 1) % TEAMS.len()];
            let namespace = json!({"metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY, "team": team}}});
            return create(store, ResourceId::namespaces(), namespace);
        }
        let lifecycle = !self.queue.is_empty() && (self.queue.len() > 16 || self.rng.chance(0.7));
        match lifecycle.then(|| self.queue.pop_front()).flatten() {
            Some(work) => self.perform(work, store),
            None => self.random_action(store),
        }
    }

    fn deployment(&mut self, key: &DeploymentKey) -> Option<&mut Deployment> {
        self.deployments
            .iter_mut()
            .find(|d| d.namespace == key.0 && d.name == key.1)
    }

    fn random_action(&mut self, store: &Store) -> Result<Option<Operation>> {
        let count = self.deployments.len();
        let with_pods = self
            .deployments
            .iter()
            .filter(|d| !d.pods.is_empty())
            .count();
        let weights = [
            if count < self.max_deployments { 4 } else { 0 },
            if count > 0 { 3 } else { 0 },
            if with_pods > 0 { 3 } else { 0 },
            if count >= self.max_deployments && count > 0 {
                3
            } else if count > 1 {
                1
            } else {
                0
            },
            3,
            1,
        ];
        let mut roll = self.rng.below(weights.iter().sum());
        let action = weights.iter().position(|w| {
            let hit = roll < *w;
            roll = roll.saturating_sub(*w);
            hit
        });
        match action {
            Some(0) => self.create_deployment(store),
            Some(1) => self.scale_deployment(store),
            Some(2) => self.restart_pod(store),
            Some(3) => self.delete_deployment(store),
            Some(4) => self.renew_lease(store),
            _ => self.node_heartbeat(store),
        }
    }

    fn create_deployment(&mut self, store: &Store) -> Result<Option<Operation>> {
        let namespace = format!("sim-{}", self.rng.below(self.namespaces as u64));
        let name = format!("app-{}", self.next_deployment);
        self.next_deployment += 1;
        let replicas = 1 + self.rng.below(u64::from(self.max_replicas)) as u32;
        let object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name, "app.kubernetes.io/managed-by": MANAGED_BY}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": pod_template(&name)}});
        let op = create(store, ResourceId::new("apps", "deployments"), object)?;
        if op.is_some() {
            let key = (namespace.clone(), name.clone());
            self.deployments.push(Deployment {
                namespace,
                name,
                replicas,
                replica_set: None,
                pods: Vec::new(),
            });
            self.queue.push_back(Work::CreateReplicaSet(key));
        }
        Ok(op)
    }

    fn pick_deployment(&mut self, with_pods: bool) -> Option<DeploymentKey> {
        let candidates: Vec<DeploymentKey> = self
            .deployments
            .iter()
            .filter(|d| !with_pods || !d.pods.is_empty())
            .map(|d| (d.namespace.clone(), d.name.clone()))
            .collect();
        (!candidates.is_empty())
            .then(|| candidates[self.rng.below(candidates.len() as u64) as usize].clone())
    }

    fn scale_deployment(&mut self, store: &Store) -> Result<Option<Operation>> {
        let Some(key) = self.pick_deployment(false) else {
            return Ok(None);
        };
        let max = self.max_replicas;
        let mut replicas = 1 + self.rng.below(u64::from(max)) as u32;
        let deployment = self.deployment(&key).expect("picked from the model");
        if replicas == deployment.replicas {
            replicas = replicas % max + 1;
        }
        deployment.replicas = replicas;
        self.queue.push_back(Work::ScaleReplicaSet(key.clone()));
        update(store, deployment_key(&key), Part::Main, |d| {
            d["spec"]["replicas"] = json!(replicas)
        })
    }

    fn restart_pod(&mut self, store: &Store) -> Result<Option<Operation>> {
        let Some(key) = self.pick_deployment(true) else {
            return Ok(None);
        };
        let index = {
            let pods = self.deployment(&key).expect("picked").pods.len();
            self.rng.below(pods as u64) as usize
        };
        // Half the time a running Pod's container restarts in place (its `restartCount` grows,
        // as a kubelet reports a crash); otherwise the Pod is replaced.
        let (running, name) = {
            let pod = &self.deployment(&key).expect("picked").pods[index];
            (pod.running, pod.name.clone())
        };
        if running && self.rng.chance(0.5) {
            return update(store, key_for_pod(&key, &name), Part::Status, |p| {
                let container = &mut p["status"]["containerStatuses"][0];
                let count = container["restartCount"].as_u64().unwrap_or(0) + 1;
                container["restartCount"] = json!(count);
                container["lastState"] =
                    json!({"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": now()}});
                container["state"] = json!({"running": {"startedAt": now()}});
            });
        }
        let pod = self.deployment(&key).expect("picked").pods.remove(index);
        self.queue.push_back(Work::Reconcile(key.clone()));
        self.queue.push_back(Work::ReplicaSetStatus(key.clone()));
        delete(store, key_for_pod(&key, &pod.name))
    }

    fn delete_deployment(&mut self, store: &Store) -> Result<Option<Operation>> {
        let Some(key) = self.pick_deployment(false) else {
            return Ok(None);
        };
        let position = self
            .deployments
            .iter()
            .position(|d| d.namespace == key.0 && d.name == key.1)
            .expect("picked");
        let deployment = self.deployments.remove(position);
        // What the garbage collector would do with the owned objects.
        if let Some(rs) = &deployment.replica_set {
            self.queue.push_back(Work::Delete(object_key(
                "apps",
                "replicasets",
                Some(&deployment.namespace),
                rs,
            )));
        }
        for pod in &deployment.pods {
            self.queue
                .push_back(Work::Delete(key_for_pod(&key, &pod.name)));
        }
        delete(store, deployment_key(&key))
    }

    fn renew_lease(&mut self, store: &Store) -> Result<Option<Operation>> {
        let node = format!("sim-node-{}", self.rng.below(self.nodes as u64));
        self.heartbeats += 1;
        let renewals = self.heartbeats.to_string();
        update(
            store,
            object_key(
                "coordination.k8s.io",
                "leases",
                Some("kube-node-lease"),
                &node,
            ),
            Part::Main,
            |lease| {
                lease["spec"]["renewTime"] = json!(
                    jiff::Timestamp::now()
                        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
                        .to_string()
                );
                lease["metadata"]["annotations"] =
                    json!({"simulate.wasmformer.dev/renewals": renewals});
            },
        )
    }

    fn node_heartbeat(&mut self, store: &Store) -> Result<Option<Operation>> {
        let node = format!("sim-node-{}", self.rng.below(self.nodes as u64));
        self.heartbeats += 1;
        let message = format!(
            "kubelet is posting ready status (heartbeat {})",
            self.heartbeats
        );
        update(
            store,
            object_key("", "nodes", None, &node),
            Part::Status,
            |n| {
                n["status"]["conditions"][0]["lastHeartbeatTime"] = json!(now());
                n["status"]["conditions"][0]["message"] = json!(message);
            },
        )
    }

    fn perform(&mut self, work: Work, store: &Store) -> Result<Option<Operation>> {
        match work {
            Work::CreateLease(node) => {
                let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": node, "namespace": "kube-node-lease"},
                    "spec": {"holderIdentity": node, "leaseDurationSeconds": 40,
                        "renewTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}});
                create(
                    store,
                    ResourceId::new("coordination.k8s.io", "leases"),
                    lease,
                )
            }
            Work::CreateReplicaSet(d) => {
                let Ok(owner_object) = store.get(&deployment_key(&d)) else {
                    return Ok(None);
                };
                let name = format!("{}-{}", d.1, self.rng.token(10));
                let Some(deployment) = self.deployment(&d) else {
                    return Ok(None);
                };
                deployment.replica_set = Some(name.clone());
                let hash = name.rsplit('-').next().unwrap_or_default().to_string();
                let mut template = pod_template(&d.1);
                template["metadata"]["labels"]["pod-template-hash"] = json!(hash);
                let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": {"name": name, "namespace": d.0, "ownerReferences": owner("apps/v1", "Deployment", &owner_object),
                        "labels": {"app": d.1, "pod-template-hash": hash}},
                    "spec": {"replicas": deployment.replicas, "selector": {"matchLabels": {"app": d.1, "pod-template-hash": hash}},
                        "template": template}});
                self.queue.push_back(Work::Reconcile(d.clone()));
                self.queue.push_back(Work::DeploymentStatus(d));
                create(store, ResourceId::new("apps", "replicasets"), rs)
            }
            Work::Reconcile(d) => self.reconcile(d, store),
            Work::BindPod(d, pod) => {
                let node = format!("sim-node-{}", self.rng.below(self.nodes as u64));
                self.queue
                    .push_back(Work::InitializePod(d.clone(), pod.clone()));
                update(store, key_for_pod(&d, &pod), Part::Main, |p| {
                    p["spec"]["nodeName"] = json!(node)
                })
            }
            Work::InitializePod(d, pod) => {
                self.queue.push_back(Work::StartPod(d.clone(), pod.clone()));
                update(store, key_for_pod(&d, &pod), Part::Status, |p| {
                    let status = &mut p["status"];
                    set_condition(&mut status["conditions"], "PodScheduled", true, "Scheduled");
                    set_condition(
                        &mut status["conditions"],
                        "Initialized",
                        true,
                        "PodCompleted",
                    );
                    set_condition(
                        &mut status["conditions"],
                        "Ready",
                        false,
                        "ContainersNotReady",
                    );
                    status["containerStatuses"] = json!([{"name": "app", "ready": false, "restartCount": 0,
                        "image": format!("registry.example/{}:1.0", d.1), "state": {"waiting": {"reason": "ContainerCreating"}}}]);
                })
            }
            Work::StartPod(d, pod) => {
                let running = self
                    .deployment(&d)
                    .and_then(|dep| dep.pods.iter_mut().find(|p| p.name == pod));
                let Some(running) = running else {
                    return Ok(None);
                };
                running.running = true;
                let ip = format!("10.244.{}.{}", self.rng.below(8), 2 + self.rng.below(250));
                self.queue.push_back(Work::ReplicaSetStatus(d.clone()));
                update(store, key_for_pod(&d, &pod), Part::Status, |p| {
                    let status = &mut p["status"];
                    status["phase"] = json!("Running");
                    status["podIP"] = json!(ip);
                    status["startTime"] = json!(now());
                    set_condition(
                        &mut status["conditions"],
                        "ContainersReady",
                        true,
                        "ContainersReady",
                    );
                    set_condition(&mut status["conditions"], "Ready", true, "PodReady");
                    status["containerStatuses"][0]["ready"] = json!(true);
                    status["containerStatuses"][0]["started"] = json!(true);
                    status["containerStatuses"][0]["state"] =
                        json!({"running": {"startedAt": now()}});
                })
            }
            Work::ScaleReplicaSet(d) => {
                let Some(deployment) = self.deployment(&d) else {
                    return Ok(None);
                };
                let Some(rs) = deployment.replica_set.clone() else {
                    return Ok(None);
                };
                let replicas = deployment.replicas;
                self.queue.push_back(Work::Reconcile(d.clone()));
                update(
                    store,
                    object_key("apps", "replicasets", Some(&d.0), &rs),
                    Part::Main,
                    |r| r["spec"]["replicas"] = json!(replicas),
                )
            }
            Work::ReplicaSetStatus(d) => {
                let Some(deployment) = self.deployment(&d) else {
                    return Ok(None);
                };
                let Some(rs) = deployment.replica_set.clone() else {
                    return Ok(None);
                };
                let (total, ready) = (
                    deployment.pods.len(),
                    deployment.pods.iter().filter(|p| p.running).count(),
                );
                self.queue.push_back(Work::DeploymentStatus(d.clone()));
                update(
                    store,
                    object_key("apps", "replicasets", Some(&d.0), &rs),
                    Part::Status,
                    |r| {
                        let generation = r["metadata"]["generation"].clone();
                        r["status"] = json!({"replicas": total, "fullyLabeledReplicas": total, "readyReplicas": ready,
                        "availableReplicas": ready, "observedGeneration": generation});
                    },
                )
            }
            Work::DeploymentStatus(d) => {
                let Some(deployment) = self.deployment(&d) else {
                    return Ok(None);
                };
                let (desired, total) = (deployment.replicas as usize, deployment.pods.len());
                let ready = deployment.pods.iter().filter(|p| p.running).count();
                update(store, deployment_key(&d), Part::Status, |dep| {
                    let generation = dep["metadata"]["generation"].clone();
                    let mut conditions = dep["status"]["conditions"].take();
                    set_condition(
                        &mut conditions,
                        "Available",
                        ready >= desired,
                        if ready >= desired {
                            "MinimumReplicasAvailable"
                        } else {
                            "MinimumReplicasUnavailable"
                        },
                    );
                    set_condition(
                        &mut conditions,
                        "Progressing",
                        true,
                        if ready == desired && total == desired {
                            "NewReplicaSetAvailable"
                        } else {
                            "ReplicaSetUpdated"
                        },
                    );
                    dep["status"] = json!({"observedGeneration": generation, "replicas": total, "updatedReplicas": total,
                        "readyReplicas": ready, "availableReplicas": ready, "conditions": conditions});
                })
            }
            Work::Delete(object) => delete(store, object),
        }
    }

    fn reconcile(&mut self, d: DeploymentKey, store: &Store) -> Result<Option<Operation>> {
        let Some(deployment) = self.deployment(&d) else {
            return Ok(None);
        };
        let Some(rs) = deployment.replica_set.clone() else {
            return Ok(None);
        };
        let (have, want) = (deployment.pods.len(), deployment.replicas as usize);
        if have == want {
            return Ok(None);
        }
        if have > want {
            let pod = self
                .deployment(&d)
                .expect("present")
                .pods
                .pop()
                .expect("more pods than wanted");
            self.queue.push_back(Work::Reconcile(d.clone()));
            self.queue.push_back(Work::ReplicaSetStatus(d.clone()));
            return delete(store, key_for_pod(&d, &pod.name));
        }
        let Ok(owner_object) = store.get(&object_key("apps", "replicasets", Some(&d.0), &rs))
        else {
            return Ok(None);
        };
        let name = format!("{rs}-{}", self.rng.token(5));
        let hash = rs.rsplit('-').next().unwrap_or_default();
        let mut pod = pod_template(&d.1);
        pod["apiVersion"] = json!("v1");
        pod["kind"] = json!("Pod");
        pod["metadata"] = json!({"name": name, "namespace": d.0, "labels": {"app": d.1, "pod-template-hash": hash},
            "ownerReferences": owner("apps/v1", "ReplicaSet", &owner_object)});
        pod["spec"]["restartPolicy"] = json!("Always");
        pod["spec"]["schedulerName"] = json!("default-scheduler");
        let op = create(store, ResourceId::core("pods"), pod)?;
        if op.is_some() {
            self.deployment(&d).expect("present").pods.push(Pod {
                name: name.clone(),
                running: false,
            });
            self.queue.push_back(Work::BindPod(d.clone(), name));
            self.queue.push_back(Work::Reconcile(d.clone()));
            self.queue.push_back(Work::ReplicaSetStatus(d));
        }
        Ok(op)
    }
}

fn key_for_pod(d: &DeploymentKey, pod: &str) -> ObjectKey {
    object_key("", "pods", Some(&d.0), pod)
}
