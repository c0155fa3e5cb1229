//! The whole host (config → informers → cache → dispatch → wasm plugins) against the embedded
//! dev cluster: event order, lister consistency inside handlers, slow-plugin isolation, a plugin
//! added at run time, resync, and relist tombstones after a compaction.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use wasmformer::config::HostConfig;
use wasmformer::plugin::PluginEngine;
use wasmformer::runtime::{Runtime, RuntimeOptions};
use wasmformer_devcluster::{DevCluster, ObjectKey, Preconditions, ResourceId, Verb};
use wasmformer_tests::{Recorded, guests, summary};

const WAIT: Duration = Duration::from_secs(20);

struct Setup {
    dev: DevCluster,
    client: kube::Client,
    pods: Api<Pod>,
    recorded: Recorded,
}

async fn setup(namespace: &str) -> Setup {
    let (dev, client) = wasmformer_tests::dev_cluster_with_namespace(namespace).await;
    Setup {
        pods: Api::namespaced(client.clone(), namespace),
        client,
        dev,
        recorded: Recorded::default(),
    }
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}
    }))
    .unwrap()
}

fn engine() -> Arc<PluginEngine> {
    Arc::new(
        PluginEngine::new(Some(
            std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components"),
        ))
        .unwrap(),
    )
}

fn config(yaml: &str) -> HostConfig {
    HostConfig::parse(yaml, std::path::PathBuf::from("/")).unwrap_or_else(|p| panic!("{p:#?}"))
}

async fn start(setup: &Setup, yaml: &str) -> Arc<Runtime> {
    let options = RuntimeOptions {
        log_observer: Some(setup.recorded.observer()),
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::start(config(yaml), setup.client.clone(), engine(), options).await;
    assert!(
        runtime.wait_synced(WAIT).await,
        "plugins did not sync: {:#?}",
        runtime.statuses().await
    );
    runtime
}

fn recorder(name: &str, namespace: &str, extra: &str) -> String {
    format!(
        "  - name: {name}\n    wasm: {wasm}\n    handles: [{{apiVersion: v1, kind: Pod, namespace: {namespace}}}]\n{extra}",
        wasm = guests::RECORDER
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_see_initial_adds_then_live_events_in_order_and_the_lister_agrees() {
    let s = setup("shop").await;
    for name in ["a", "b"] {
        s.pods
            .create(&PostParams::default(), &pod(name))
            .await
            .unwrap();
    }
    let yaml = format!(
        "plugins:\n{}",
        recorder("rec", "shop", "    config: {lookup: true}\n")
    );
    let runtime = start(&s, &yaml).await;
    s.pods
        .create(&PostParams::default(), &pod("c"))
        .await
        .unwrap();
    let patch = json!({"metadata": {"labels": {"tier": "front"}}});
    s.pods
        .patch("c", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    s.pods.delete("a", &DeleteParams::default()).await.unwrap();

    // A Pod's delete is graceful, as on the API server: marked (update), then gone.
    let events = s.recorded.wait_for("rec", 6, WAIT).await;
    let mut initial = summary(&events[..2]);
    initial.sort();
    assert_eq!(initial, ["add a initial", "add b initial"]);
    assert_eq!(
        summary(&events[2..]),
        ["add c", "update c", "update a", "delete a"]
    );
    // The cache is updated before the plugin is called: inside the handler, the lister returns
    // the event's object or a newer state of it, never an older one (and no longer finds a
    // deleted one).
    let rv = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("not a resourceVersion: {v}"))
    };
    for event in &events[..5] {
        // The marked Pod `a` may already be gone by the time its update is handled: newer.
        if event["name"] == "a"
            && event["event"] == "update"
            && event["listerResourceVersion"] == "not-found"
        {
            continue;
        }
        assert!(
            rv(&event["listerResourceVersion"]) >= rv(&event["resourceVersion"]),
            "lister older than the event: {event}"
        );
    }
    assert_eq!(events[5]["listerResourceVersion"], "not-found");
    let status = &runtime.statuses().await[0];
    assert!(
        status.synced && status.failures == 0 && status.calls == 6,
        "{status:?}"
    );
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

/// Issue 18, item 1: a plugin with two subscriptions of one kind reads the union of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lister_get_finds_the_handed_object_whichever_of_two_subscriptions_of_its_kind_delivered_it()
 {
    let s = setup("east").await;
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("west".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(s.client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let west: Api<Pod> = Api::namespaced(s.client.clone(), "west");
    s.pods
        .create(&PostParams::default(), &pod("e0"))
        .await
        .unwrap();
    west.create(&PostParams::default(), &pod("w0"))
        .await
        .unwrap();
    let yaml = format!(
        "plugins:\n  - name: rec\n    wasm: {}\n    handles:\n      - {{apiVersion: v1, kind: Pod, namespace: east}}\n      \
         - {{apiVersion: v1, kind: Pod, namespace: west}}\n    config: {{lookup: true}}\n",
        guests::RECORDER
    );
    let runtime = start(&s, &yaml).await;
    s.pods
        .create(&PostParams::default(), &pod("e1"))
        .await
        .unwrap();
    west.create(&PostParams::default(), &pod("w1"))
        .await
        .unwrap();
    let patch = json!({"metadata": {"labels": {"tier": "front"}}});
    west.patch("w1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();

    let events = s.recorded.wait_for("rec", 5, WAIT).await;
    let mut seen: Vec<String> = events
        .iter()
        .map(|e| {
            format!(
                "{}/{}",
                e["namespace"].as_str().unwrap(),
                e["name"].as_str().unwrap()
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        ["east/e0", "east/e1", "west/w0", "west/w1", "west/w1"]
    );
    let rv = |v: &serde_json::Value| v.as_str().and_then(|s| s.parse::<u64>().ok());
    for event in &events {
        let (handed, read) = (
            rv(&event["resourceVersion"]).unwrap(),
            rv(&event["listerResourceVersion"]),
        );
        assert!(
            read.is_some_and(|read| read >= handed),
            "lister.get inside the handler missed the handed object: {event}"
        );
    }
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_plugin_does_not_delay_another() {
    let s = setup("slow").await;
    let yaml = format!(
        "plugins:\n{}{}",
        recorder(
            "sleepy",
            "slow",
            "    config: {sleepMs: 400}\n    limits: {deadline: 5s}\n"
        ),
        recorder("quick", "slow", "")
    );
    let runtime = start(&s, &yaml).await;
    for i in 0..5 {
        s.pods
            .create(&PostParams::default(), &pod(&format!("p{i}")))
            .await
            .unwrap();
    }
    let quick = s.recorded.wait_for("quick", 5, WAIT).await;
    assert_eq!(
        summary(&quick),
        ["add p0", "add p1", "add p2", "add p3", "add p4"]
    );
    // The sleepy plugin needs 2 s for these five; the quick one did not wait for it.
    assert!(
        s.recorded.events("sleepy").len() < 5,
        "the sleepy plugin kept up, so this proves nothing"
    );
    let sleepy = s.recorded.wait_for("sleepy", 5, WAIT).await;
    assert_eq!(
        summary(&sleepy),
        summary(&quick),
        "the slow plugin still gets every event in order"
    );
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_added_at_run_time_gets_the_cache_then_live_events_without_a_new_watch() {
    let s = setup("late").await;
    let runtime = start(&s, &format!("plugins:\n{}", recorder("first", "late", ""))).await;
    for name in ["x", "y"] {
        s.pods
            .create(&PostParams::default(), &pod(name))
            .await
            .unwrap();
    }
    s.recorded.wait_for("first", 2, WAIT).await;
    let seq_before = s.dev.request_log().last_seq();

    let late = config(&format!("plugins:\n{}", recorder("late", "late", "")))
        .plugins
        .remove(0);
    runtime.add_plugin(late).await.unwrap();
    s.pods
        .create(&PostParams::default(), &pod("z"))
        .await
        .unwrap();
    let events = s.recorded.wait_for("late", 3, WAIT).await;
    let mut initial = summary(&events[..2]);
    initial.sort();
    assert_eq!(initial, ["add x initial", "add y initial"]);
    assert_eq!(summary(&events[2..]), ["add z"]);
    let new_list_or_watch: Vec<_> = s
        .dev
        .request_log()
        .records()
        .into_iter()
        .filter(|r| r.seq > seq_before && (r.is(Verb::List, "pods") || r.is(Verb::Watch, "pods")))
        .collect();
    assert!(
        new_list_or_watch.is_empty(),
        "the late plugin must reuse the running informer: {new_list_or_watch:#?}"
    );
    let all_pod_watches = s
        .dev
        .request_log()
        .records()
        .into_iter()
        .filter(|r| r.is(Verb::Watch, "pods") || r.is(Verb::List, "pods"))
        .count();
    assert!(
        all_pod_watches >= 1,
        "the request log sees the first plugin's watch, so the check above can fail"
    );
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resync_replays_the_cache_as_updates_with_old_equal_to_new() {
    let s = setup("resync").await;
    s.pods
        .create(&PostParams::default(), &pod("r"))
        .await
        .unwrap();
    let runtime = start(
        &s,
        &format!(
            "plugins:\n{}",
            recorder("rec", "resync", "    resync: 300ms\n")
        ),
    )
    .await;
    let events = s.recorded.wait_for("rec", 3, WAIT).await;
    assert_eq!(
        summary(&events[..3]),
        ["add r initial", "update r", "update r"]
    );
    assert_eq!(
        events[1]["oldResourceVersion"],
        events[1]["resourceVersion"]
    );
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_compaction_objects_deleted_in_the_gap_arrive_as_final_state_unknown() {
    let s = setup("gap").await;
    for name in ["keep", "gone"] {
        s.pods
            .create(&PostParams::default(), &pod(name))
            .await
            .unwrap();
    }
    let runtime = start(&s, &format!("plugins:\n{}", recorder("rec", "gap", ""))).await;
    // Stop the server from answering, delete behind the host's back, compact the history and
    // drop the watches: the informer's re-watch gets 410 Gone and relists.
    s.dev.faults().pause();
    s.dev.faults().close_watches();
    let gone = ObjectKey::new(ResourceId::core("pods"), Some("gap"), "gone");
    s.dev
        .store()
        .delete(&gone, &Preconditions::default())
        .unwrap();
    s.dev.faults().compact();
    s.dev.faults().resume();
    s.pods
        .create(&PostParams::default(), &pod("new"))
        .await
        .unwrap();
    let events = s.recorded.wait_for("rec", 4, WAIT).await;
    assert_eq!(
        summary(&events[2..4]),
        ["delete gone final-state-unknown", "add new"]
    );
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_keeps_trapping_is_contained_reported_and_still_gets_every_event() {
    let s = setup("crashy").await;
    let yaml = format!(
        "plugins:\n  - name: crashy\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod, namespace: crashy}}]\n{}",
        guests::PANIC,
        recorder("calm", "crashy", "")
    );
    let runtime = start(&s, &yaml).await;
    for name in ["boom-0", "boom-1", "boom-2", "boom-3", "boom-4", "fine"] {
        s.pods
            .create(&PostParams::default(), &pod(name))
            .await
            .unwrap();
    }
    // The other plugin is not disturbed.
    assert_eq!(s.recorded.wait_for("calm", 6, WAIT).await.len(), 6);
    // The crashing one traps five times, is backed off, and still receives the sixth event.
    for _ in 0..200 {
        if s.recorded.messages("crashy").iter().any(|m| m == "ok fine") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        s.recorded.messages("crashy").iter().any(|m| m == "ok fine"),
        "{:?}",
        s.recorded.messages("crashy")
    );
    let status = runtime
        .statuses()
        .await
        .into_iter()
        .find(|p| p.name == "crashy")
        .unwrap();
    assert_eq!((status.calls, status.failures), (6, 5), "{status:?}");
    let error = status.last_error.unwrap().message;
    assert!(
        error.contains("add Pod crashy/boom-4")
            && error.contains("boom: the plugin panicked on purpose"),
        "{error}"
    );
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}
