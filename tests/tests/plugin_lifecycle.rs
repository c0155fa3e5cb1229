//! Plugin lifecycle in the whole host on the dev cluster (issue 16): 100 plugins with
//! `lifecycle.unloadAfter`, half of them busy and half idle — the idle ones are unloaded while the
//! busy ones keep working, the next events bring them back, and every plugin has seen every event
//! once, in order, with its state (a count) kept across its unloads; and a hot swap to a new
//! version, and a re-subscription, that hand the count over (from an unloaded instance, too).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmformer::config::HostConfig;
use wasmformer::dispatch::{InstanceState, StatusReport};
use wasmformer::plugin::PluginEngine;
use wasmformer::runtime::{ReloadOutcome, Runtime, RuntimeOptions};
use wasmformer_tests::{Recorded, dev_cluster_with_namespace, guests};

const PLUGINS: usize = 100;
const WAIT: Duration = Duration::from_secs(60);

fn engine() -> Arc<PluginEngine> {
    Arc::new(
        PluginEngine::new(Some(
            std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components"),
        ))
        .unwrap(),
    )
}

/// Starts the host with `config`, recording what its plugins log; waits until it is synced.
async fn start(config: HostConfig, client: &kube::Client) -> (Arc<Runtime>, Recorded) {
    let recorded = Recorded::default();
    let options = RuntimeOptions {
        log_observer: Some(recorded.observer()),
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::start(config, client.clone(), engine(), options).await;
    assert!(runtime.wait_synced(WAIT).await);
    (runtime, recorded)
}

fn plugin_name(i: usize) -> String {
    match i % 2 {
        0 => format!("busy-{i}"),
        _ => format!("idle-{i}"),
    }
}

fn group(name: &str) -> &str {
    name.split('-').next().unwrap()
}

async fn statuses(runtime: &Runtime) -> Vec<StatusReport> {
    runtime.statuses().await
}

/// Waits until `done` holds for the plugins' statuses (panics after `WAIT`).
async fn wait_for_status(runtime: &Runtime, what: &str, done: impl Fn(&[StatusReport]) -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let reports = statuses(runtime).await;
        if done(&reports) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} not reached in {WAIT:?}: {:?}",
            reports
                .iter()
                .map(|r| (&r.name, r.instance, r.activations, r.calls))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The (count, configmap name, resourceVersion) each event line of `plugin` logged.
fn deliveries(recorded: &Recorded, plugin: &str) -> Vec<(u64, String, u64)> {
    recorded
        .events(plugin)
        .iter()
        .filter(|e| e["count"].is_u64())
        .map(|e: &Value| {
            (
                e["count"].as_u64().unwrap(),
                e["name"].as_str().unwrap().to_owned(),
                e["resourceVersion"].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_of_100_plugins_idle_unload_and_come_back_with_nothing_lost_or_reordered() {
    let (dev, client) = dev_cluster_with_namespace("work").await;
    let plugins: String = (0..PLUGINS)
        .map(|i| {
            let name = plugin_name(i);
            format!(
                "  - name: {name}\n    wasm: {}\n    handles:\n      - {{apiVersion: v1, kind: ConfigMap, namespace: work, labelSelector: group={}}}\n    lifecycle: {{unloadAfter: 1s}}\n",
                guests::COUNTER,
                group(&name),
            )
        })
        .collect();
    let (runtime, recorded) = start(
        HostConfig::parse(&format!("plugins:\n{plugins}"), "/".into()).unwrap(),
        &client,
    )
    .await;

    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), "work");
    for name in ["busy", "idle"] {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"group": name}}, "data": {"n": "0"}
        }))
        .unwrap();
        configmaps
            .create(&PostParams::default(), &cm)
            .await
            .unwrap();
    }
    let bump = |name: &'static str, n: usize| {
        let configmaps = configmaps.clone();
        async move {
            configmaps
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"n": n.to_string()}})),
                )
                .await
                .unwrap();
        }
    };

    // The busy half gets an event every 100 ms; the idle half none, and unloads.
    let mut busy_updates = 0;
    let idle_unloaded = |reports: &[StatusReport]| {
        reports.len() == PLUGINS
            && reports.iter().all(|r| match group(&r.name) {
                "idle" => r.instance == InstanceState::Unloaded,
                _ => true,
            })
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while !idle_unloaded(&statuses(&runtime).await) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the idle plugins did not unload"
        );
        busy_updates += 1;
        bump("busy", busy_updates).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Busy plugins stayed loaded while the idle ones unloaded (each busy one got an event
    // within its last second).
    let reports = statuses(&runtime).await;
    for report in reports.iter().filter(|r| group(&r.name) == "busy") {
        assert_eq!(report.instance, InstanceState::Loaded, "{}", report.name);
    }

    // Three changes to the idle half's object: each idle plugin comes back for them.
    for n in 1..=3 {
        bump("idle", n).await;
    }
    wait_for_status(&runtime, "every idle plugin handled 4 events", |reports| {
        reports
            .iter()
            .filter(|r| group(&r.name) == "idle")
            .all(|r| r.calls == 4 && r.activations >= 1)
    })
    .await;
    wait_for_status(
        &runtime,
        "every busy plugin handled every update",
        |reports| {
            reports
                .iter()
                .filter(|r| group(&r.name) == "busy")
                .all(|r| r.calls == 1 + busy_updates as u64)
        },
    )
    .await;

    for i in 0..PLUGINS {
        let name = plugin_name(i);
        let seen = deliveries(&recorded, &name);
        let expected_events = match group(&name) {
            "idle" => 4,
            _ => 1 + busy_updates as u64,
        };
        let counts: Vec<u64> = seen.iter().map(|d| d.0).collect();
        assert_eq!(
            counts,
            (1..=expected_events).collect::<Vec<_>>(),
            "{name}: the count survives unloading, no event lost or repeated"
        );
        assert!(
            seen.windows(2).all(|w| w[0].2 < w[1].2),
            "{name}: in resourceVersion order: {seen:?}"
        );
        assert!(seen.iter().all(|d| d.1 == group(&name)), "{name}: {seen:?}");
    }
    runtime.shutdown().await;
    dev.shutdown().await.unwrap();
}

/// The line plugin `c` logged for the ConfigMap `name` (panics after `WAIT`).
async fn delivered(recorded: &Recorded, name: &str) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(line) = recorded.events("c").into_iter().find(|e| e["name"] == name) {
            return line;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} not delivered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One counter plugin `c` on ConfigMaps labelled `group=swap`, from `wasm`, unloaded after
/// `unload_after`, handling in `namespace`.
fn swap_config(wasm: &str, unload_after: &str, namespace: &str) -> HostConfig {
    HostConfig::parse(
        &format!(
            "plugins:\n  - name: c\n    wasm: {wasm}\n    handles:\n      - {{apiVersion: v1, kind: ConfigMap, namespace: {namespace}, labelSelector: group=swap}}\n    lifecycle: {{unloadAfter: {unload_after}}}\n"
        ),
        "/".into(),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_swap_and_a_resubscription_hand_the_state_to_the_next_version() {
    let (dev, client) = dev_cluster_with_namespace("work").await;
    let (runtime, recorded) = start(swap_config(guests::COUNTER, "200ms", "work"), &client).await;
    let configmaps = Api::<ConfigMap>::namespaced(client.clone(), "work");
    let create = |name: &str| {
        serde_json::from_value::<ConfigMap>(json!({
            "metadata": {"name": name, "labels": {"group": "swap"}}
        }))
        .unwrap()
    };
    for name in ["a", "b", "c"] {
        configmaps
            .create(&PostParams::default(), &create(name))
            .await
            .unwrap();
    }
    recorded.wait_for("c", 3 + 1, WAIT).await; // 3 events and the first init
    // Let it unload: the new version must take the state saved at the unload.
    wait_for_status(&runtime, "the counter unloaded", |reports| {
        reports[0].instance == InstanceState::Unloaded
    })
    .await;
    let report = statuses(&runtime).await.remove(0);
    assert!(
        report.saved_state_bytes.is_some_and(|b| b > 0),
        "{report:?}"
    );

    // A hot swap (same subscriptions) to the version with the new state format.
    let outcome = runtime
        .apply_config(swap_config(guests::COUNTER_V2, "200ms", "work"))
        .await;
    assert!(
        matches!(outcome.plugins[..], [(_, ReloadOutcome::Swapped { .. })]),
        "{outcome:?}"
    );
    configmaps
        .create(&PostParams::default(), &create("d"))
        .await
        .unwrap();
    let line = delivered(&recorded, "d").await;
    assert_eq!(
        line["total"], 4,
        "the count went over to the new version: {line}"
    );
    assert_eq!(line["sinceV2"], 1, "{line}");
    let report = statuses(&runtime).await.remove(0);
    assert!(report.last_state_error.is_none(), "{report:?}");

    // A re-subscription (another namespace): a new worker, which takes the old one's state.
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap(),
        )
        .await
        .unwrap();
    let outcome = runtime
        .apply_config(swap_config(guests::COUNTER_V2, "0s", "other"))
        .await;
    assert!(
        matches!(outcome.plugins[..], [(_, ReloadOutcome::Rewired)]),
        "{outcome:?}"
    );
    Api::<ConfigMap>::namespaced(client.clone(), "other")
        .create(&PostParams::default(), &create("e"))
        .await
        .unwrap();
    let line = delivered(&recorded, "e").await;
    assert_eq!(
        line["total"], 5,
        "the re-subscribed plugin kept its count: {line}"
    );
    runtime.shutdown().await;
    dev.shutdown().await.unwrap();
}
