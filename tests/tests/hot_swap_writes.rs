//! Hot swap of a plugin while it writes, the whole host in-process against the embedded dev
//! cluster: the writer-probe applies one ConfigMap per event it receives, each write held up by
//! the server, while it is swapped back and forth between two versions. Every write of the old
//! version completes, none is lost or sent twice (the server's request log shows exactly one
//! apply per event), and from each swap on the new version makes the writes (each written object
//! is labelled with the version that wrote it).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use wasmformer::config::HostConfig;
use wasmformer::plugin::PluginEngine;
use wasmformer::runtime::{ReloadOutcome, Runtime, RuntimeOptions};
use wasmformer_devcluster::{DevCluster, DevClusterConfig, RequestFilter, Verb};
use wasmformer_tests::{guests, with_custom_section};

const WAIT: Duration = Duration::from_secs(60);
const SWAPS: usize = 16;
/// How long the server holds each write: a swap asked for while one is in flight must wait.
const WRITE_DELAY: Duration = Duration::from_millis(25);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_the_old_version_complete_once_and_the_new_version_makes_the_rest() {
    let dev = DevCluster::start(DevClusterConfig::default())
        .await
        .expect("dev cluster starts");
    let client = dev.client().expect("client");
    for name in ["src", "out"] {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let v1 = std::fs::read(guests::WRITER_PROBE).unwrap();
    let v2 = with_custom_section(&v1, "wasmformer-test-version", b"v2");
    std::fs::write(dir.path().join("v1.wasm"), &v1).unwrap();
    std::fs::write(dir.path().join("v2.wasm"), &v2).unwrap();
    let config_for = |label: &str| {
        let yaml = format!(
            "plugins:
  - name: probe
    wasm: {label}.wasm
    handles: [{{apiVersion: v1, kind: ConfigMap, namespace: src}}]
    write: [{{apiVersion: v1, kind: ConfigMap, verbs: [apply], namespaces: [out]}}]
    maxQueuedEvents: 100000
    limits: {{deadline: 10s, writeQps: 10000, writeBurst: 10000, writeTimeout: 10s}}
    config: {{tag: {label}}}
"
        );
        HostConfig::parse(&yaml, dir.path().to_owned()).unwrap_or_else(|p| panic!("{p:#?}"))
    };
    let engine = Arc::new(
        PluginEngine::new(Some(
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components"),
        ))
        .unwrap(),
    );
    let runtime = Runtime::start(
        config_for("v1"),
        client.clone(),
        engine,
        RuntimeOptions::default(),
    )
    .await;
    assert!(
        runtime.wait_synced(WAIT).await,
        "{:#?}",
        runtime.statuses().await
    );
    let applies = || {
        RequestFilter::default()
            .verb(Verb::Patch)
            .resource("configmaps")
    };
    dev.faults()
        .delay_next_matching(applies(), u32::MAX, WRITE_DELAY);

    // Events keep coming while the plugin is swapped: each asks for one write.
    let created = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (sources, created, stop) = (
            Api::<ConfigMap>::namespaced(client.clone(), "src"),
            created.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let i = created.load(Ordering::SeqCst);
                let target = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("d-{i:04}"), "namespace": "out"}, "data": {"i": i.to_string()}});
                let source: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("s-{i:04}"), "labels": {"probe": "yes"}},
                    "data": {"op": "apply", "manifest": target.to_string()}}))
                .unwrap();
                sources
                    .create(&PostParams::default(), &source)
                    .await
                    .unwrap();
                created.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };

    // `after[k]`: the first source created after swap k returned (one may be in flight).
    let mut after = Vec::with_capacity(SWAPS);
    let mut labels = Vec::with_capacity(SWAPS);
    for k in 1..=SWAPS {
        tokio::time::sleep(Duration::from_millis(60)).await;
        let label = if k % 2 == 1 { "v2" } else { "v1" };
        let report = runtime.apply_config(config_for(label)).await;
        assert!(
            matches!(&report.plugins[..], [(name, ReloadOutcome::Swapped { .. })] if name == "probe"),
            "swap {k} to {label}: {report:?}"
        );
        after.push(created.load(Ordering::SeqCst) + 1);
        labels.push(label);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.store(true, Ordering::SeqCst);
    producer.await.unwrap();
    let total = created.load(Ordering::SeqCst);
    assert!(
        total > SWAPS * 2,
        "the load was too thin to prove anything: {total} events"
    );

    // Every event's write reached the server.
    let written = Api::<ConfigMap>::namespaced(client.clone(), "out");
    let deadline = Instant::now() + WAIT;
    let mut objects = loop {
        let objects = written.list(&ListParams::default()).await.unwrap().items;
        if objects.len() >= total {
            break objects;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {total} writes arrived: {:#?}",
            objects.len(),
            runtime.statuses().await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    dev.faults().clear();
    objects.sort_by_key(|o| o.metadata.name.clone());

    // Exactly once each: one apply per object in the server's request log.
    let mut sent: BTreeMap<String, usize> = BTreeMap::new();
    for record in dev.request_log().records() {
        if record.is(Verb::Patch, "configmaps") && record.namespace.as_deref() == Some("out") {
            *sent
                .entry(record.name.clone().unwrap_or_default())
                .or_default() += 1;
        }
    }
    let repeated: Vec<_> = sent.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        repeated.is_empty(),
        "writes sent more than once: {repeated:?}"
    );
    assert_eq!(sent.len(), total, "one write per event, none lost");
    let status = runtime.statuses().await.remove(0);
    assert_eq!(
        (status.calls, status.failures, status.swaps),
        (total as u64, 0, SWAPS as u64),
        "no write failed or was cut off by a swap: {status:#?}"
    );
    assert_eq!(status.writes.ok, total as u64, "{status:#?}");

    // Who wrote what, in event order: the version changes only at swaps (a queued event may go
    // to the next version), and every event that came after the last swap returned was written
    // by the version it put in.
    let tags: Vec<String> = objects
        .iter()
        .map(|o| {
            let label = o.metadata.labels.as_ref().and_then(|l| l.get("by"));
            label.cloned().unwrap_or_default()
        })
        .collect();
    assert_eq!(tags.len(), total);
    assert!(
        tags.iter().all(|t| t == "v1" || t == "v2"),
        "each write is labelled by its version: {tags:?}"
    );
    let last = *labels.last().unwrap();
    assert!(
        tags[after[SWAPS - 1]..].iter().all(|t| t == last),
        "after the last swap only {last} writes: {:?}",
        &tags[after[SWAPS - 1]..]
    );
    let switches = tags.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        switches <= SWAPS,
        "{switches} changes of writer for {SWAPS} swaps"
    );
    assert!(
        switches >= SWAPS / 2,
        "most swaps should fall between writes ({switches} of {SWAPS}): the load was too thin"
    );
    runtime.shutdown().await;
    dev.shutdown().await.unwrap();
}
