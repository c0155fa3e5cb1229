//! KWOK-style controllers that make the dev cluster behave like a cluster for the flows a plugin
//! author meets: fake Nodes, Deployment → ReplicaSet → Pods (rolling updates, status and
//! conditions that `kubectl rollout status` reads), a scheduler binding Pods to the fake Nodes, a
//! fake kubelet moving them to Running/Ready (and Job pods to Succeeded) after a delay, Jobs, and
//! the garbage collector (background, foreground and orphan propagation), and the namespace
//! controller (a deleted namespace stays `Terminating` until it is empty).
//!
//! They act through the [`Store`]'s write API, never over HTTP, and level-triggered: every store
//! change (and every kubelet deadline) runs one pass of all controllers over the current state;
//! passes repeat until one writes nothing. Objects in the workload simulator's namespaces (label
//! `app.kubernetes.io/managed-by: wasmformer-simulate`) are left to the simulator.

mod gc;
mod kubelet;
mod namespace;
mod object;
mod scheduler;
mod workloads;

use std::{collections::HashMap, sync::Arc, time::Duration};

use serde_json::Value;
use tokio::{sync::oneshot, task::JoinHandle, time::Instant};

use crate::{
    resources::ResourceId,
    store::{Result, Store},
};

/// The annotation KWOK puts on the Nodes whose Pods its fake kubelet runs; the dev cluster's
/// kubelet runs the Pods bound to any Node that has it.
pub const FAKE_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// How the controllers behave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerConfig {
    /// Fake Nodes created at start (`dev-node-0`, `dev-node-1`, …).
    pub nodes: usize,
    /// How long a scheduled Pod stays `ContainerCreating` before it is Running and Ready (and how
    /// long a Job's Pod then runs before it Succeeds).
    pub pod_start_delay: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            nodes: 1,
            pod_start_delay: Duration::from_millis(500),
        }
    }
}

impl ControllerConfig {
    /// Sets [`ControllerConfig::nodes`].
    #[must_use]
    pub fn nodes(mut self, nodes: usize) -> Self {
        self.nodes = nodes;
        self
    }

    /// Sets [`ControllerConfig::pod_start_delay`].
    #[must_use]
    pub fn pod_start_delay(mut self, delay: Duration) -> Self {
        self.pod_start_delay = delay;
        self
    }
}

/// The running controllers; dropping it stops them.
#[derive(Debug)]
pub struct Controllers {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Controllers {
    /// Stops the controllers and waits for the pass in progress.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Controllers {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Creates the fake Nodes and starts the controllers on `store`.
pub fn spawn(store: Store, config: ControllerConfig) -> Controllers {
    let (stop, mut stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let mut changes = store.subscribe();
        let mut state = State::default();
        if let Err(e) = kubelet::create_nodes(&store, config.nodes) {
            tracing::warn!(error = %e, "cannot create the fake nodes");
        }
        loop {
            changes.borrow_and_update();
            let wake = match pass(&store, &config, &mut state) {
                Ok(wake) => wake,
                Err(e) => {
                    tracing::debug!(error = %e, "controller pass failed; retrying");
                    Some(Instant::now() + Duration::from_millis(100))
                }
            };
            let deadline = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut stopped => break,
                changed = changes.changed() => if changed.is_err() { break },
                () = deadline => {}
            }
        }
    });
    Controllers {
        stop: Some(stop),
        task: Some(task),
    }
}

/// What the controllers remember between passes (the fake kubelet's container start times).
#[derive(Debug, Default)]
struct State {
    /// Pod uid → when its containers started being created (or started running).
    kubelet_clock: HashMap<String, Instant>,
}

/// The objects one pass reads, listed once.
struct Snapshot {
    deployments: Vec<Arc<Value>>,
    replicasets: Vec<Arc<Value>>,
    pods: Vec<Arc<Value>>,
    jobs: Vec<Arc<Value>>,
    nodes: Vec<Arc<Value>>,
    simulated_namespaces: Vec<String>,
}

impl Snapshot {
    fn read(store: &Store) -> Result<Self> {
        let list = |resource: ResourceId| store.list(&resource, None).map(|(items, _)| items);
        let simulated_namespaces = list(ResourceId::namespaces())?
            .iter()
            .filter(|ns| {
                ns["metadata"]["labels"]["app.kubernetes.io/managed-by"]
                    == crate::simulate::MANAGED_BY
            })
            .map(|ns| object::meta(ns, "name").to_string())
            .collect();
        let mut snapshot = Self {
            deployments: list(ResourceId::new("apps", "deployments"))?,
            replicasets: list(ResourceId::new("apps", "replicasets"))?,
            pods: list(ResourceId::core("pods"))?,
            jobs: list(ResourceId::new("batch", "jobs"))?,
            nodes: list(ResourceId::core("nodes"))?,
            simulated_namespaces,
        };
        let simulated = snapshot.simulated_namespaces.clone();
        let ours = |o: &Arc<Value>| {
            !simulated
                .iter()
                .any(|ns| ns == object::meta(o, "namespace"))
        };
        snapshot.deployments.retain(ours);
        snapshot.replicasets.retain(ours);
        snapshot.pods.retain(ours);
        snapshot.jobs.retain(ours);
        Ok(snapshot)
    }
}

/// One pass of every controller; returns when the next pass is due without a store change.
fn pass(store: &Store, config: &ControllerConfig, state: &mut State) -> Result<Option<Instant>> {
    gc::sync(store)?;
    namespace::sync(store)?;
    let snapshot = Snapshot::read(store)?;
    workloads::sync_deployments(store, &snapshot)?;
    workloads::sync_replicasets(store, &snapshot)?;
    workloads::sync_jobs(store, &snapshot)?;
    scheduler::sync(store, &snapshot)?;
    let snapshot = Snapshot::read(store)?;
    Ok(kubelet::sync(store, config, state, &snapshot))
}

/// The current time as the API server writes timestamps.
pub(crate) fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Store errors a controller expects when users write concurrently (the object changed or went
/// away): the next pass sees the new state.
fn tolerate<T>(result: Result<T>) -> Result<Option<T>> {
    use crate::store::Error;
    match result {
        Ok(value) => Ok(Some(value)),
        Err(Error::NotFound { .. } | Error::Conflict { .. } | Error::AlreadyExists { .. }) => {
            Ok(None)
        }
        Err(Error::Forbidden { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}
