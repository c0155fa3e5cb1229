use std::time::Duration;

use serde_json::Value;

use super::*;

fn trace(seed: u64, steps: usize) -> Vec<(&'static str, String, Option<String>, String)> {
    let mut simulator = Simulator::new(Store::new(100_000), SimulationConfig::default().seed(seed));
    (0..steps)
        .map(|_| {
            let op = simulator.step().unwrap();
            (op.verb, op.resource.to_string(), op.namespace, op.name)
        })
        .collect()
}

#[test]
fn the_same_seed_gives_the_same_operations() {
    let first = trace(7, 600);
    assert_eq!(first, trace(7, 600));
    assert_ne!(first, trace(8, 600));
}

#[test]
fn every_step_is_exactly_one_write() {
    let store = Store::new(100_000);
    let mut simulator = Simulator::new(store.clone(), SimulationConfig::default());
    for _ in 0..800 {
        let before = store.resource_version();
        let op = simulator.step().unwrap();
        assert_eq!(op.resource_version, before + 1, "{op:?}");
        assert_eq!(store.resource_version(), before + 1);
    }
    let stats = simulator.stats();
    assert_eq!(stats.operations, 800);
    assert!(
        stats.creates > 0 && stats.updates > 0 && stats.deletes > 0,
        "{stats:?}"
    );
}

#[test]
fn pods_go_through_their_lifecycle_under_replicasets() {
    let store = Store::new(100_000);
    let mut simulator = Simulator::new(store.clone(), SimulationConfig::default().seed(3));
    for _ in 0..1500 {
        simulator.step().unwrap();
    }
    let (pods, _) = store.list(&ResourceId::core("pods"), None).unwrap();
    let (replica_sets, _) = store
        .list(&ResourceId::new("apps", "replicasets"), None)
        .unwrap();
    let running: Vec<&Value> = pods
        .iter()
        .map(|p| &**p)
        .filter(|p| p["status"]["phase"] == "Running")
        .collect();
    assert!(!running.is_empty(), "some pods are running");
    for pod in &running {
        assert!(
            pod["spec"]["nodeName"]
                .as_str()
                .unwrap()
                .starts_with("sim-node-")
        );
        let ready = pod["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        let owner = &pod["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "ReplicaSet");
    }
    let owned = running.iter().filter(|p| {
        replica_sets
            .iter()
            .any(|rs| rs["metadata"]["uid"] == p["metadata"]["ownerReferences"][0]["uid"])
    });
    assert!(owned.count() > 0, "running pods belong to live replicasets");
    let (deployments, _) = store
        .list(&ResourceId::new("apps", "deployments"), None)
        .unwrap();
    assert!(
        deployments
            .iter()
            .any(|d| d["status"]["readyReplicas"].as_u64().unwrap_or(0) > 0)
    );
    let (leases, _) = store
        .list(
            &ResourceId::new("coordination.k8s.io", "leases"),
            Some("kube-node-lease"),
        )
        .unwrap();
    assert_eq!(leases.len(), 3);
}

#[tokio::test]
async fn run_keeps_the_rate_and_stops_at_max_events() {
    let store = Store::new(100_000);
    let started = tokio::time::Instant::now();
    let handle = spawn(
        store.clone(),
        SimulationConfig::default()
            .events_per_second(2000.0)
            .max_events(300),
    );
    let stats = tokio::time::timeout(Duration::from_secs(10), handle.join())
        .await
        .unwrap()
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(stats.operations, 300);
    assert!(
        elapsed >= Duration::from_millis(140),
        "300 events at 2000/s take about 150ms, took {elapsed:?}"
    );
    let before = store.resource_version();
    let handle = spawn(
        store.clone(),
        SimulationConfig::default().seed(9).events_per_second(100.0),
    );
    let stats = handle.stop().await.unwrap();
    assert_eq!(store.resource_version() - before, stats.operations);
}

#[tokio::test]
async fn a_non_positive_rate_is_rejected() {
    let simulator = Simulator::new(
        Store::new(10),
        SimulationConfig::default().events_per_second(0.0),
    );
    assert!(matches!(
        simulator.run(async {}).await,
        Err(Error::Rate { .. })
    ));
}
