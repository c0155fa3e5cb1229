//! Reconcilers (contract 0.3.1) in the whole host against the real kube-apiserver: a burst of
//! changes to one object folds into at most two reconciles, the last seeing the newest state; a
//! reconcile that fails N times runs exactly N+1 times; `reconcile.owns` and `reconcile.watches`
//! queue the right keys (the harness runs no controller-manager: the tests create owners and
//! owned objects themselves); a hot swap in the middle of a retry sequence keeps the key's failure
//! count; `examples/config-reloader` rolls the right Deployments, here and on the embedded dev
//! cluster. Only orders and counts are asserted, never durations.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmformer::config::HostConfig;
use wasmformer::dispatch::StatusReport;
use wasmformer::plugin::PluginEngine;
use wasmformer::runtime::{Runtime, RuntimeOptions};
use wasmformer_tests::apiserver::KubeApiserver;
use wasmformer_tests::{Recorded, guests};

const WAIT: Duration = Duration::from_secs(120);

fn engine() -> Arc<PluginEngine> {
    Arc::new(
        PluginEngine::new(Some(
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components"),
        ))
        .unwrap(),
    )
}

/// The host running the reconciler guest as plugin `ctl` on ConfigMaps in `ns`, with `extra`
/// YAML lines in its entry.
async fn start(client: kube::Client, ns: &str, extra: &str, recorded: &Recorded) -> Arc<Runtime> {
    let yaml = format!(
        "plugins:\n  - name: ctl\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: ConfigMap, namespace: {ns}}}]\n    \
         limits: {{deadline: 120s}}\n{extra}",
        guests::RECONCILER
    );
    let config = HostConfig::parse(&yaml, PathBuf::from("/")).unwrap_or_else(|p| panic!("{p:#?}"));
    let options = RuntimeOptions {
        log_observer: Some(recorded.observer()),
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::start(config, client, engine(), options).await;
    assert!(
        runtime.wait_synced(WAIT).await,
        "the plugin did not sync: {:#?}",
        runtime.statuses().await
    );
    runtime
}

/// The status of the runtime's one plugin.
async fn status(runtime: &Runtime) -> StatusReport {
    let mut statuses = runtime.statuses().await;
    assert_eq!(statuses.len(), 1, "{statuses:#?}");
    statuses.remove(0)
}

/// Polls `check` every 20 ms until it returns `Some`, or panics with `what` after [`WAIT`].
async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The reconciles of `key` (`ConfigMap ns/name`) logged so far, in order.
fn reconciles(recorded: &Recorded, key: &str) -> Vec<Value> {
    recorded
        .events("ctl")
        .into_iter()
        .filter(|e| e["reconcile"] == key)
        .collect()
}

/// Waits until nothing is queued: no event waiting, no key ready or scheduled.
async fn quiet(runtime: &Runtime) {
    eventually("the plugin's queues to drain", async || {
        let status = status(runtime).await;
        let work = &status.work_queue;
        (status.queue_depth == 0 && work.depth == 0 && work.scheduled == 0).then_some(())
    })
    .await;
}

/// The config-reloader example's annotation for these strings written in turn (its FNV-1a, 64
/// bits, each string followed by a NUL), as 16 hex digits.
fn config_hash(parts: &[&str]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in parts.iter().flat_map(|part| part.bytes().chain([0])) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

fn config_map(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_updates_during_a_slow_reconcile_fold_into_one_more_with_the_newest_state() {
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("rc-burst").await);
    let recorded = Recorded::default();
    let runtime = start(
        admin.clone(),
        &ns,
        "    config: {holdUntilLabel: final=yes}\n",
        &recorded,
    )
    .await;
    let cms = Api::<ConfigMap>::namespaced(admin, &ns);
    cms.create(
        &PostParams::default(),
        &config_map("hot", json!({"n": "0"})),
    )
    .await
    .unwrap();
    let key = format!("ConfigMap {ns}/hot");
    eventually("the first reconcile to start", async || {
        recorded
            .events("ctl")
            .iter()
            .any(|e| e["holding"] == key.as_str())
            .then_some(())
    })
    .await;
    let mut last = String::new();
    for n in 1..=1000 {
        let mut patch = json!({"data": {"n": n.to_string()}});
        if n == 1000 {
            patch["metadata"] = json!({"labels": {"final": "yes"}});
        }
        let updated = cms
            .patch("hot", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        last = updated.metadata.resource_version.unwrap();
    }
    // Every update reached the handler (it runs before the key is queued), then the queues drain.
    eventually("the handler to see the last update", async || {
        recorded
            .events("ctl")
            .iter()
            .any(|e| e["event"] == "update" && e["resourceVersion"] == last.as_str())
            .then_some(())
    })
    .await;
    quiet(&runtime).await;
    let seen = reconciles(&recorded, &key);
    assert!(
        !seen.is_empty() && seen.len() <= 2,
        "{} reconciles of {key} for 1,000 updates: {seen:#?}",
        seen.len()
    );
    assert_eq!(
        seen.last().unwrap()["resourceVersion"],
        last.as_str(),
        "the last reconcile read the newest state"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_failing_three_times_runs_exactly_four_times() {
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("rc-retry").await);
    let recorded = Recorded::default();
    let runtime = start(
        admin.clone(),
        &ns,
        "    config: {failTimes: 3}\n    reconcile: {backoff: {base: 10ms, max: 1s}}\n",
        &recorded,
    )
    .await;
    Api::<ConfigMap>::namespaced(admin, &ns)
        .create(&PostParams::default(), &config_map("flaky", json!({})))
        .await
        .unwrap();
    let key = format!("ConfigMap {ns}/flaky");
    eventually("the fourth attempt", async || {
        (reconciles(&recorded, &key).len() >= 4).then_some(())
    })
    .await;
    quiet(&runtime).await;
    let calls: Vec<Value> = reconciles(&recorded, &key)
        .iter()
        .map(|e| e["call"].clone())
        .collect();
    assert_eq!(calls, [json!(1), json!(2), json!(3), json!(4)]);
    let work = status(&runtime).await.work_queue;
    assert_eq!(work.retries, 3, "{work:?}");
    assert!(
        work.failing.is_empty(),
        "success forgot the failures: {work:?}"
    );
    let scrape = runtime.metrics().encode(wasmformer::metrics::Format::Text);
    assert!(
        scrape
            .lines()
            .any(|l| l == "workqueue_retries_total{name=\"ctl\"} 3"),
        "{scrape}"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owned_object_queues_its_controller_owner_and_nothing_else() {
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("rc-owns").await);
    let recorded = Recorded::default();
    let runtime = start(
        admin.clone(),
        &ns,
        "    reconcile: {owns: [{apiVersion: v1, kind: Secret}]}\n",
        &recorded,
    )
    .await;
    let owner = Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &config_map("owner", json!({})))
        .await
        .unwrap();
    let key = format!("ConfigMap {ns}/owner");
    eventually("the owner's own reconcile", async || {
        (reconciles(&recorded, &key).len() == 1).then_some(())
    })
    .await;
    quiet(&runtime).await;
    let uid = owner.metadata.uid.unwrap();
    let secret = |name: &str, controller: bool| -> Secret {
        serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid, "controller": controller}
        ]}}))
        .unwrap()
    };
    let secrets = Api::<Secret>::namespaced(admin, &ns);
    // Not the controller reference: queues nothing. Then the controller one: queues the owner.
    secrets
        .create(&PostParams::default(), &secret("referencing", false))
        .await
        .unwrap();
    secrets
        .create(&PostParams::default(), &secret("owned", true))
        .await
        .unwrap();
    eventually("the owner's reconcile for its owned Secret", async || {
        (reconciles(&recorded, &key).len() >= 2).then_some(())
    })
    .await;
    quiet(&runtime).await;
    assert_eq!(
        reconciles(&recorded, &key).len(),
        2,
        "{:#?}",
        recorded.events("ctl")
    );
    assert!(
        recorded
            .events("ctl")
            .iter()
            .all(|e| e["name"] != "owned" && e["name"] != "referencing"),
        "no handler is called for an owned kind"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_object_queues_the_handled_objects_its_index_maps_it_to() {
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("rc-watch").await);
    let recorded = Recorded::default();
    let runtime = start(
        admin.clone(),
        &ns,
        "    indexes: [{apiVersion: v1, kind: ConfigMap, name: by-secret, field: data.secretName}]\n    \
         reconcile: {watches: [{apiVersion: v1, kind: Secret, index: by-secret}]}\n",
        &recorded,
    )
    .await;
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
    for (name, secret) in [("consumer", "creds"), ("bystander", "other")] {
        cms.create(
            &PostParams::default(),
            &config_map(name, json!({"secretName": secret})),
        )
        .await
        .unwrap();
    }
    let (consumer, bystander) = (
        format!("ConfigMap {ns}/consumer"),
        format!("ConfigMap {ns}/bystander"),
    );
    eventually("both ConfigMaps' own reconciles", async || {
        (reconciles(&recorded, &consumer).len() == 1
            && reconciles(&recorded, &bystander).len() == 1)
            .then_some(())
    })
    .await;
    quiet(&runtime).await;
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "creds"}})).unwrap();
    Api::<Secret>::namespaced(admin, &ns)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    eventually("the consumer's reconcile for its Secret", async || {
        (reconciles(&recorded, &consumer).len() >= 2).then_some(())
    })
    .await;
    quiet(&runtime).await;
    assert_eq!(reconciles(&recorded, &consumer).len(), 2);
    assert_eq!(
        reconciles(&recorded, &bystander).len(),
        1,
        "its index holds another name"
    );
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_swap_in_the_middle_of_retries_keeps_the_keys_failure_count() {
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("rc-swap").await);
    let recorded = Recorded::default();
    let runtime = start(
        admin.clone(),
        &ns,
        "    config: {failAlways: true}\n    reconcile: {backoff: {base: 200ms, max: 60s}}\n",
        &recorded,
    )
    .await;
    Api::<ConfigMap>::namespaced(admin, &ns)
        .create(&PostParams::default(), &config_map("stuck", json!({})))
        .await
        .unwrap();
    let key = format!("ConfigMap {ns}/stuck");
    let failures = async || -> u32 {
        status(&runtime)
            .await
            .work_queue
            .failing
            .iter()
            .find(|f| f.key == key)
            .map_or(0, |f| f.failures)
    };
    eventually("three failures", async || {
        (failures().await >= 3).then_some(())
    })
    .await;
    let before = failures().await;
    let calls_before = reconciles(&recorded, &key).len();
    // The same wasm, forced: a new instance (its own call counter starts at 1 again).
    runtime.reload_plugin("ctl", true).await.unwrap();
    eventually("a reconcile by the new version", async || {
        reconciles(&recorded, &key)[calls_before..]
            .iter()
            .any(|e| e["call"] == 1)
            .then_some(())
    })
    .await;
    let after = failures().await;
    assert!(
        after > before,
        "the new version's failure extends the count ({before} before the swap, {after} after)"
    );
    assert_eq!(status(&runtime).await.swaps, 1);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_error_asking_for_a_retry_delivers_the_newest_state_again() {
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("rc-handler").await);
    let recorded = Recorded::default();
    // The reconciler guest's first add of an object fails asking for a retry.
    let runtime = start(
        admin.clone(),
        &ns,
        "    config: {retryAdds: 1}\n    reconcile: {backoff: {base: 10ms, max: 1s}}\n",
        &recorded,
    )
    .await;
    let created = Api::<ConfigMap>::namespaced(admin, &ns)
        .create(&PostParams::default(), &config_map("late", json!({})))
        .await
        .unwrap();
    let rv = created.metadata.resource_version.unwrap();
    let handled = async || -> Vec<String> {
        recorded
            .events("ctl")
            .iter()
            .filter(|e| e["name"] == "late")
            .map(|e| {
                format!(
                    "{} {}",
                    e["event"].as_str().unwrap(),
                    e["resourceVersion"].as_str().unwrap()
                )
            })
            .collect()
    };
    eventually("the retried delivery", async || {
        (handled().await.len() >= 2).then_some(())
    })
    .await;
    quiet(&runtime).await;
    assert_eq!(
        handled().await,
        [format!("add {rv}"), format!("update {rv}")],
        "the failed add, then the object's newest state again as an update"
    );
    let work = status(&runtime).await.work_queue;
    assert_eq!(work.retries, 1, "{work:?}");
    assert!(work.failing.is_empty(), "{work:?}");
    runtime.shutdown().await;
}

/// `examples/config-reloader` on the real kube-apiserver, with its own `config.yaml`: a changed
/// ConfigMap rolls the Deployments that reference it (volume or envFrom), and only those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_reloader_annotates_the_deployments_that_reference_a_changed_configmap() {
    let server = KubeApiserver::shared();
    config_reloader_flow(server.admin().await, server.namespace("rc-reloader").await).await;
}

/// The same on the embedded dev cluster (`wasmformer dev`): its server-side apply takes the
/// plugin's annotation and its watches bring the changes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_reloader_annotates_the_same_deployments_on_the_dev_cluster() {
    use k8s_openapi::api::core::v1::Namespace;
    use wasmformer_devcluster::{DevCluster, DevClusterConfig};
    let dev = DevCluster::start(DevClusterConfig::default())
        .await
        .unwrap();
    let client = dev.client().unwrap();
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "rc-reloader"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    config_reloader_flow(client, "rc-reloader".to_owned()).await;
    dev.shutdown().await.unwrap();
}

/// The config-reloader example with its own `config.yaml`, limited to `ns`, on `admin`'s server.
async fn config_reloader_flow(admin: kube::Client, ns: String) {
    use k8s_openapi::api::apps::v1::Deployment;
    let example = wasmformer_tests::repo_root().join("examples/config-reloader/config.yaml");
    let yaml = std::fs::read_to_string(&example)
        .unwrap()
        .replace(
            "../../target/wasm/wasm32-wasip2/release/config_reloader.wasm",
            guests::CONFIG_RELOADER,
        )
        .replace(
            "handles: [{apiVersion: apps/v1, kind: Deployment}]",
            &format!("handles: [{{apiVersion: apps/v1, kind: Deployment, namespace: {ns}}}]"),
        );
    let config = HostConfig::parse(&yaml, example.parent().unwrap().to_owned())
        .unwrap_or_else(|p| panic!("{p:#?}"));
    let recorded = Recorded::default();
    let options = RuntimeOptions {
        log_observer: Some(recorded.observer()),
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::start(config, admin.clone(), engine(), options).await;
    assert!(
        runtime.wait_synced(WAIT).await,
        "{:#?}",
        runtime.statuses().await
    );
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
    cms.create(
        &PostParams::default(),
        &config_map("settings", json!({"level": "info"})),
    )
    .await
    .unwrap();
    let deployment = |name: &str, pod: Value| -> Deployment {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod}}}))
        .unwrap()
    };
    let deployments = Api::<Deployment>::namespaced(admin, &ns);
    for (name, pod) in [
        (
            "by-volume",
            json!({"containers": [{"name": "c", "image": "nginx"}],
            "volumes": [{"name": "v", "configMap": {"name": "settings"}}]}),
        ),
        (
            "by-env",
            json!({"containers": [{"name": "c", "image": "nginx",
            "envFrom": [{"configMapRef": {"name": "settings"}}]}]}),
        ),
        (
            "unrelated",
            json!({"containers": [{"name": "c", "image": "nginx"}]}),
        ),
    ] {
        deployments
            .create(&PostParams::default(), &deployment(name, pod))
            .await
            .unwrap();
    }
    let hash = async |name: &str| -> Option<String> {
        deployments
            .get(name)
            .await
            .unwrap()
            .spec?
            .template
            .metadata?
            .annotations?
            .get("wasmformer.io/config-hash")
            .cloned()
    };
    // Both annotated with the hash of the ConfigMap's content, once the controller has
    // converged: a Deployment's event may come through its watch before the ConfigMap's through
    // its own, and be reconciled with the ConfigMap absent (another hash); the ConfigMap's event
    // then queues it again (the `watches` above).
    let annotated_with = async |expected: &str| {
        eventually(
            &format!("both referencing Deployments annotated with {expected}"),
            async || {
                let (a, b) = (hash("by-volume").await?, hash("by-env").await?);
                (a == expected && b == expected).then_some(())
            },
        )
        .await
    };
    annotated_with(&config_hash(&["settings", "level", "info"])).await;
    cms.patch(
        "settings",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"level": "debug"}})),
    )
    .await
    .unwrap();
    annotated_with(&config_hash(&["settings", "level", "debug"])).await;
    quiet(&runtime).await;
    assert_eq!(hash("unrelated").await, None, "it references no ConfigMap");
    runtime.shutdown().await;
}
