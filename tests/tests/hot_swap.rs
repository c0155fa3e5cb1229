//! Hot swap (issue 6), the whole host in-process against the embedded dev cluster: a plugin
//! swapped 50 times under sustained load loses, duplicates and reorders nothing and the API
//! server sees no new list or watch; with `onSwap: snapshot` each new version gets the cache, then
//! exactly the events after it; a broken new version leaves the old one serving; a new
//! version replaces a crash-looping one without waiting out its backoff; plugins added and
//! removed at run time start and stop their informers; the file watcher never swaps in a
//! half-written module and does not miss a file written while a reload runs; SIGHUP reloads.
//!
//! Two versions of a plugin are the recorder guest as built (`v1`) and the same bytes with a
//! custom section appended (`v2`, `v3`): same code, different content hash. Their `config.tag`
//! tells in each logged event which version handled it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmformer::config::HostConfig;
use wasmformer::plugin::{LogLine, PluginEngine};
use wasmformer::runtime::{ReloadOutcome, Runtime, RuntimeOptions};
use wasmformer::trigger;
use wasmformer_devcluster::{
    Deletion, DevCluster, ObjectKey, Preconditions, RequestRecord, ResourceId, Store, Verb,
};
use wasmformer_tests::{Recorded, guests, with_custom_section};

const WAIT: Duration = Duration::from_secs(30);

/// The tests that run a [`trigger`] are serialized: SIGHUP reaches every trigger in the process.
static TRIGGERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---------------------------------------------------------------------------------------------
// Plugin versions

fn digest(bytes: &[u8]) -> String {
    wasmformer::plugin::content_digest(bytes)
}

/// The recorder as `label`: as built for `v1`, with a custom section naming the label otherwise.
fn recorder_version(label: &str) -> Vec<u8> {
    let wasm = std::fs::read(guests::RECORDER).expect("read the recorder guest");
    if label == "v1" {
        wasm
    } else {
        with_custom_section(&wasm, "wasmformer-test-version", label.as_bytes())
    }
}

/// A folder holding `v1.wasm` and `v2.wasm` (and whatever a test writes there).
struct Versions {
    dir: tempfile::TempDir,
    v1: String,
    v2: String,
}

impl Versions {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (v1, v2) = (recorder_version("v1"), recorder_version("v2"));
        std::fs::write(dir.path().join("v1.wasm"), &v1).unwrap();
        std::fs::write(dir.path().join("v2.wasm"), &v2).unwrap();
        Self {
            dir,
            v1: digest(&v1),
            v2: digest(&v2),
        }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    fn digest(&self, label: &str) -> &str {
        match label {
            "v1" => &self.v1,
            "v2" => &self.v2,
            _ => panic!("no version {label}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The cluster, the host and what plugins log

struct Setup {
    dev: DevCluster,
    client: kube::Client,
    cms: Api<ConfigMap>,
    recorded: Recorded,
    /// Lines logged by any plugin, counted as they are logged (cheaper than parsing them all).
    lines: Arc<AtomicUsize>,
}

async fn setup(namespace: &str) -> Setup {
    let (dev, client) = wasmformer_tests::dev_cluster_with_namespace(namespace).await;
    Setup {
        cms: Api::namespaced(client.clone(), namespace),
        client,
        dev,
        recorded: Recorded::default(),
        lines: Arc::default(),
    }
}

fn engine() -> Arc<PluginEngine> {
    Arc::new(
        PluginEngine::new(Some(
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components"),
        ))
        .unwrap(),
    )
}

async fn start(s: &Setup, config: HostConfig) -> Arc<Runtime> {
    let (recorded, lines) = (s.recorded.observer(), s.lines.clone());
    let observer = Arc::new(move |line: &LogLine| {
        recorded(line);
        lines.fetch_add(1, Ordering::SeqCst);
    });
    let options = RuntimeOptions {
        log_observer: Some(observer),
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::start(config, s.client.clone(), engine(), options).await;
    assert!(
        runtime.wait_synced(WAIT).await,
        "plugins did not sync: {:#?}",
        runtime.statuses().await
    );
    runtime
}

/// A recorder plugin entry for ConfigMaps in `namespace`.
fn recorder_entry(name: &str, wasm: &str, namespace: &str, config: &str) -> String {
    format!(
        "  - name: {name}\n    wasm: {wasm}\n    handles: [{{apiVersion: v1, kind: ConfigMap, namespace: {namespace}}}]\n    \
         maxQueuedEvents: 1000000\n    limits: {{deadline: 10s}}\n    config: {config}\n"
    )
}

fn parse(yaml: &str, base_dir: &Path) -> HostConfig {
    HostConfig::parse(yaml, base_dir.to_owned()).unwrap_or_else(|p| panic!("{p:#?}"))
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"n": "0"}})).unwrap()
}

async fn status(runtime: &Runtime, name: &str) -> wasmformer::dispatch::StatusReport {
    runtime
        .statuses()
        .await
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no plugin {name}"))
}

/// Creates a ConfigMap and returns the event `plugin` logged for it.
async fn probe(s: &Setup, plugin: &str, name: &str) -> Value {
    s.cms
        .create(&PostParams::default(), &config_map(name))
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(event) = s
            .recorded
            .events(plugin)
            .into_iter()
            .find(|e| e["name"] == name)
        {
            return event;
        }
        assert!(Instant::now() < deadline, "{plugin} did not receive {name}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `check` every 20 ms until it returns `Some`, or panics with `what` after `timeout`.
async fn eventually<T>(
    timeout: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until plugin `rec` has logged `expected` lines, or its log has held still for `quiet`
/// with nothing queued (then the caller's comparison says what is missing).
async fn until_delivered(s: &Setup, runtime: &Runtime, expected: usize, quiet: Duration) {
    let mut progress = (usize::MAX, Instant::now());
    eventually(
        Duration::from_secs(60),
        "the plugin to receive the events",
        async || {
            let logged = s.lines.load(Ordering::SeqCst);
            if logged != progress.0 {
                progress = (logged, Instant::now());
            }
            let stalled =
                progress.1.elapsed() > quiet && status(runtime, "rec").await.queue_depth == 0;
            (logged >= expected || stalled).then_some(())
        },
    )
    .await;
}

/// The LISTs and WATCHes of ConfigMaps the dev cluster served after request `mark`.
fn configmap_lists_and_watches(s: &Setup, mark: u64) -> Vec<RequestRecord> {
    s.dev
        .request_log()
        .since(mark)
        .into_iter()
        .filter(|r| r.is(Verb::List, "configmaps") || r.is(Verb::Watch, "configmaps"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// 1. Fifty swaps under sustained load

/// What the load generator did to each object: `(event, resourceVersion)` in order.
type Produced = BTreeMap<String, Vec<(String, String)>>;

/// Creates, updates `updates` times and deletes ConfigMaps `{prefix}-0`, `{prefix}-1`, … one
/// after the other (each object's changes are sequential) until `stop` is set, counting events.
/// Creates and updates go through the API; deletes go to the store, because the API answers a
/// DELETE with a `Status` and the deletion's resourceVersion (the one the watch event carries) is
/// known only there.
async fn churn(
    cms: Api<ConfigMap>,
    store: Store,
    prefix: String,
    updates: usize,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicUsize>,
) -> Produced {
    let namespace = cms.namespace().expect("a namespaced Api").to_owned();
    let mut produced = Produced::new();
    for i in 0.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let name = format!("{prefix}-{i}");
        let mut changes = Vec::with_capacity(updates + 2);
        let created = cms
            .create(&PostParams::default(), &config_map(&name))
            .await
            .unwrap();
        changes.push(("add".to_owned(), created.metadata.resource_version.unwrap()));
        for n in 1..=updates {
            let patch = json!({"data": {"n": n.to_string()}});
            let updated = cms
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
            changes.push((
                "update".to_owned(),
                updated.metadata.resource_version.unwrap(),
            ));
        }
        let key = ObjectKey::new(
            ResourceId::core("configmaps"),
            Some(&namespace),
            name.as_str(),
        );
        let Deletion::Deleted(deleted) = store.delete(&key, &Preconditions::default()).unwrap()
        else {
            panic!("{name} has finalizers")
        };
        changes.push((
            "delete".to_owned(),
            deleted["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned(),
        ));
        count.fetch_add(changes.len(), Ordering::SeqCst);
        produced.insert(name, changes);
    }
    produced
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_swaps_under_load_lose_duplicate_and_reorder_nothing_and_do_not_relist() {
    const SWAPS: usize = 50;
    const PRODUCERS: usize = 8;
    const MIN_EVENTS: usize = 5_000;
    let s = setup("load").await;
    let versions = Versions::new();
    let config_for = |label: &str| {
        parse(
            &format!(
                "plugins:\n{}",
                recorder_entry(
                    "rec",
                    &format!("{label}.wasm"),
                    "load",
                    &format!("{{tag: {label}}}")
                )
            ),
            versions.dir.path(),
        )
    };
    let runtime = start(&s, config_for("v1")).await;
    let mark = s.dev.request_log().last_seq();
    let watches_before = s
        .dev
        .request_log()
        .records()
        .into_iter()
        .filter(|r| {
            r.seq <= mark && (r.is(Verb::List, "configmaps") || r.is(Verb::Watch, "configmaps"))
        })
        .count();
    assert!(
        watches_before >= 1,
        "the request log shows the informer's list or watch, so the check below can fail"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let produced_count = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            tokio::spawn(churn(
                s.cms.clone(),
                s.dev.store().clone(),
                format!("w{p}"),
                3,
                stop.clone(),
                produced_count.clone(),
            ))
        })
        .collect();

    // Swap back and forth while the load runs. `windows[k]` is (lines logged when swap k was
    // asked for, lines logged when it returned).
    let mut windows = Vec::with_capacity(SWAPS);
    let mut expected_tags = Vec::with_capacity(SWAPS);
    for k in 1..=SWAPS {
        tokio::time::sleep(Duration::from_millis(40)).await;
        let label = if k % 2 == 1 { "v2" } else { "v1" };
        let asked = s.lines.load(Ordering::SeqCst);
        let report = runtime.apply_config(config_for(label)).await;
        let returned = s.lines.load(Ordering::SeqCst);
        match &report.plugins[..] {
            [(name, ReloadOutcome::Swapped { version, .. })] if name == "rec" => {
                assert_eq!(version, versions.digest(label), "swap {k}")
            }
            other => panic!("swap {k} to {label}: {other:?}"),
        }
        windows.push((asked, returned));
        expected_tags.push(label);
    }
    let swaps_took = started.elapsed();
    assert!(
        produced_count.load(Ordering::SeqCst) > 0,
        "the load had started before the swaps ended"
    );
    // Keep the load going a little past the last swap, and to at least MIN_EVENTS events.
    let past_last_swap = produced_count.load(Ordering::SeqCst) + 200;
    eventually(
        Duration::from_secs(120),
        "the load to produce enough events",
        async || {
            (produced_count.load(Ordering::SeqCst) >= MIN_EVENTS.max(past_last_swap)).then_some(())
        },
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    let mut produced = Produced::new();
    for producer in producers {
        produced.extend(producer.await.unwrap());
    }
    let load_took = started.elapsed();
    let total: usize = produced.values().map(Vec::len).sum();

    // Wait for every event, or for the stream to have stopped short of it (then the comparison
    // below says what is missing); let anything extra (a duplicate) arrive before comparing.
    until_delivered(&s, &runtime, total, Duration::from_secs(2)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let received = s.recorded.events("rec");
    eprintln!(
        "{total} events from {} objects in {load_took:.1?} ({:.0}/s); {SWAPS} swaps in {swaps_took:.1?}",
        produced.len(),
        total as f64 / load_took.as_secs_f64()
    );

    // What both versions received, together, is exactly what was produced, per object in order.
    assert!(
        received
            .iter()
            .all(|e| e["initial"] != true && e["finalStateUnknown"] != true),
        "no initial adds nor tombstones expected"
    );
    let mut seen = Produced::new();
    for e in &received {
        let name = e["name"].as_str().unwrap().to_owned();
        seen.entry(name).or_default().push((
            e["event"].as_str().unwrap().to_owned(),
            e["resourceVersion"].as_str().unwrap().to_owned(),
        ));
    }
    let differing: BTreeSet<_> = produced
        .keys()
        .chain(seen.keys())
        .filter(|name| produced.get(*name) != seen.get(*name))
        .collect();
    for name in differing.iter().take(5) {
        eprintln!(
            "{name}: produced {:?}\n{name}: received {:?}",
            produced.get(*name),
            seen.get(*name)
        );
    }
    assert!(
        differing.is_empty(),
        "events lost, duplicated or reordered for {} of {} objects (the first ones above)",
        differing.len(),
        produced.len()
    );
    assert_eq!(received.len(), total);

    // Each swap took effect when it returned: what was logged between two swaps is all from the
    // version the first one put in.
    let tags: Vec<&str> = received
        .iter()
        .map(|e| e["tag"].as_str().unwrap())
        .collect();
    let before_first = windows[0].0;
    assert!(
        tags[..before_first].iter().all(|t| *t == "v1"),
        "before the first swap, only v1 serves"
    );
    for k in 0..SWAPS {
        let (from, to) = (windows[k].1, windows.get(k + 1).map_or(tags.len(), |w| w.0));
        if let Some(i) = (from..to).find(|&i| tags[i] != expected_tags[k]) {
            panic!(
                "event {i} ({}) was handled by {} after swap {} to {} returned",
                received[i],
                tags[i],
                k + 1,
                expected_tags[k]
            );
        }
    }
    let switches = tags.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        switches <= SWAPS,
        "{switches} version changes in the event stream for {SWAPS} swaps"
    );
    eprintln!("{switches} of the {SWAPS} swaps fell between two events of the stream");
    assert!(
        switches >= SWAPS / 2,
        "most swaps should happen while events flow ({switches} of {SWAPS}): the load was too thin to prove anything"
    );

    let st = status(&runtime, "rec").await;
    assert_eq!(
        (st.swaps, st.version.as_str(), st.failures),
        (SWAPS as u64, versions.digest("v1"), 0),
        "{st:?}"
    );
    assert!(st.last_swap_error.is_none(), "{st:?}");

    let relisted = configmap_lists_and_watches(&s, mark);
    assert!(
        relisted.is_empty(),
        "swaps must not touch the informer: {relisted:#?}"
    );
    assert!(total >= MIN_EVENTS);
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 2. Snapshot swaps

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_swaps_give_each_new_version_the_cache_then_exactly_the_events_after_it() {
    const SWAPS: usize = 10;
    const BASE: usize = 20;
    let s = setup("snapshot").await;
    let versions = Versions::new();
    for i in 0..BASE {
        s.cms
            .create(&PostParams::default(), &config_map(&format!("base-{i}")))
            .await
            .unwrap();
    }
    // 2 ms per event: slower than the load, so the old version has a backlog when it is swapped
    // out, and the snapshot swap drops it.
    let config_for = |label: &str| {
        let entry = recorder_entry(
            "rec",
            &format!("{label}.wasm"),
            "snapshot",
            &format!("{{tag: {label}, sleepMs: 2}}"),
        );
        parse(
            &format!("plugins:\n{entry}    onSwap: snapshot\n"),
            versions.dir.path(),
        )
    };
    let runtime = start(&s, config_for("v1")).await;
    let mark = s.dev.request_log().last_seq();

    let stop = Arc::new(AtomicBool::new(false));
    let produced_count = Arc::new(AtomicUsize::new(0));
    let producers: Vec<_> = (0..4)
        .map(|p| {
            tokio::spawn(churn(
                s.cms.clone(),
                s.dev.store().clone(),
                format!("r{p}"),
                3,
                stop.clone(),
                produced_count.clone(),
            ))
        })
        .collect();
    let (mut snapshots, mut backlogs) = (Vec::new(), Vec::new());
    for k in 1..=SWAPS {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let label = if k % 2 == 1 { "v2" } else { "v1" };
        backlogs.push(status(&runtime, "rec").await.queue_depth);
        match &runtime.apply_config(config_for(label)).await.plugins[..] {
            [
                (
                    _,
                    ReloadOutcome::Swapped {
                        version,
                        snapshot: Some(n),
                        ..
                    },
                ),
            ] => {
                assert_eq!(version, versions.digest(label), "swap {k}");
                snapshots.push(*n);
            }
            other => panic!("swap {k} to {label}: {other:?}"),
        }
    }
    stop.store(true, Ordering::SeqCst);
    let mut produced = Produced::new();
    for producer in producers {
        produced.extend(producer.await.unwrap());
    }
    assert!(
        backlogs.iter().any(|&b| b > 0),
        "no swap found a backlog to drop: {backlogs:?}"
    );
    // Every churned object is deleted by now; a few changes after the last swap leave the last
    // version's view different from the cache it was given.
    for i in 0..5 {
        s.cms
            .create(&PostParams::default(), &config_map(&format!("after-{i}")))
            .await
            .unwrap();
    }
    s.cms
        .patch(
            "base-0",
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": {"n": "1"}})),
        )
        .await
        .unwrap();
    until_delivered(&s, &runtime, usize::MAX, Duration::from_millis(500)).await;

    // One run of events per version, each beginning with the cache as initial adds.
    let received = s.recorded.events("rec");
    let mut runs: Vec<(&str, Vec<&Value>)> = Vec::new();
    for e in &received {
        let tag = e["tag"].as_str().unwrap();
        match runs.last_mut() {
            Some((t, run)) if *t == tag => run.push(e),
            _ => runs.push((tag, vec![e])),
        }
    }
    assert_eq!(runs.len(), SWAPS + 1, "one run of events per version");
    let mut last_state = BTreeMap::new();
    for (k, (tag, run)) in runs.iter().enumerate() {
        assert_eq!(*tag, if k % 2 == 0 { "v1" } else { "v2" }, "run {k}");
        let initial = run.iter().take_while(|e| e["initial"] == true).count();
        assert!(
            run[initial..].iter().all(|e| e["initial"] != true),
            "run {k}: the initial adds come first"
        );
        let expected = if k == 0 { BASE } else { snapshots[k - 1] };
        if initial < run.len() {
            assert_eq!(
                initial, expected,
                "run {k}: as many initial adds as the swap's snapshot"
            );
        } else {
            // The next swap came before this version had delivered all of its snapshot (a busy
            // machine): the next snapshot replaced the rest, which is what a snapshot swap does.
            assert!(
                initial <= expected,
                "run {k}: {initial} initial adds, {expected} in the snapshot"
            );
        }
        // Applied in order from an empty state, the run is consistent, and every change continues
        // its object's history exactly from the version the run last saw: nothing lost,
        // duplicated or reordered after the snapshot's state.
        let mut state = BTreeMap::<String, String>::new();
        for e in run {
            let (name, event, rv) = (
                e["name"].as_str().unwrap().to_owned(),
                e["event"].as_str().unwrap(),
                e["resourceVersion"].as_str().unwrap().to_owned(),
            );
            let history = produced.get(&name);
            match event {
                "add" if e["initial"] == true => {
                    assert!(
                        name.starts_with("base-")
                            || history.is_some_and(|h| h.iter().any(|(_, r)| *r == rv)),
                        "run {k}: unknown {name} {rv}"
                    );
                }
                "add" if name.starts_with("after-") => {
                    assert_eq!(k, SWAPS, "{name} was created after the last swap")
                }
                "add" => assert_eq!(
                    history.map(|h| &h[0]),
                    Some(&("add".to_owned(), rv.clone())),
                    "run {k}: live add of {name}"
                ),
                "update" if name == "base-0" => {
                    assert_eq!(k, SWAPS, "base-0 was changed after the last swap")
                }
                _ => {
                    let seen = state.get(&name).unwrap_or_else(|| {
                        panic!("run {k}: {event} of {name}, which the run never saw added")
                    });
                    let history = history
                        .unwrap_or_else(|| panic!("run {k}: {event} of the unchanged {name}"));
                    let at = history
                        .iter()
                        .position(|(_, r)| r == seen)
                        .expect("a version of the history");
                    assert_eq!(
                        history.get(at + 1),
                        Some(&(event.to_owned(), rv.clone())),
                        "run {k}: {name} after {seen}"
                    );
                }
            }
            if event == "delete" {
                state.remove(&name);
            } else {
                assert!(
                    event != "add" || !state.contains_key(&name),
                    "run {k}: {name} added twice"
                );
                state.insert(name, rv);
            }
        }
        last_state = state;
    }
    let relisted = configmap_lists_and_watches(&s, mark);
    assert!(
        relisted.is_empty(),
        "a snapshot swap reads the cache, not the API server: {relisted:#?}"
    );
    // The last version's view is the cluster's content.
    let listed: BTreeMap<String, String> = s
        .cms
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|cm| {
            (
                cm.metadata.name.unwrap(),
                cm.metadata.resource_version.unwrap(),
            )
        })
        .collect();
    assert_eq!(last_state, listed, "the last version's state");
    assert_eq!(listed.len(), BASE + 5);

    let st = status(&runtime, "rec").await;
    assert_eq!(
        (st.swaps, st.version.as_str(), st.failures),
        (SWAPS as u64, versions.digest("v1"), 0),
        "{st:?}"
    );
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 3. A broken new version

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_new_version_is_refused_and_the_old_one_keeps_serving() {
    let s = setup("broken").await;
    let versions = Versions::new();
    let plugin = versions.path("plugin.wasm");
    std::fs::copy(versions.path("v1.wasm"), &plugin).unwrap();
    std::fs::write(
        versions.path("not-wasm.wasm"),
        "this is a text file, not a component\n",
    )
    .unwrap();
    let yaml = |wasm: &str| {
        format!(
            "plugins:\n{}",
            recorder_entry("rec", wasm, "broken", "{tag: v1}")
        )
    };
    let runtime = start(&s, parse(&yaml("plugin.wasm"), versions.dir.path())).await;
    assert_eq!(probe(&s, "rec", "first").await["tag"], "v1");

    // (how the new version is offered, the file, what the error must say)
    let cases = [
        (
            "reload",
            guests::INIT_FAILS,
            "init refused: config lacks \"ok\": true",
        ),
        (
            "reload",
            guests::FUTURE_CONTRACT,
            "was built for contract wasmformer:plugin@0.4.0",
        ),
        ("reload", "not-wasm.wasm", "is not a WebAssembly file"),
        (
            "config",
            guests::FUTURE_CONTRACT,
            "was built for contract wasmformer:plugin@0.4.0",
        ),
        ("config", guests::INIT_FAILS, "failed to start"),
        ("reload", "missing.wasm", "cannot read"),
    ];
    for (i, (how, file, cause)) in cases.into_iter().enumerate() {
        let source = versions.path(file);
        let outcome = match how {
            "reload" => {
                match std::fs::copy(&source, &plugin) {
                    Ok(_) => {}
                    Err(_) => std::fs::remove_file(&plugin).unwrap(), // missing.wasm: no file at all
                }
                runtime.reload_plugin("rec", false).await.unwrap()
            }
            _ => {
                let report = runtime
                    .apply_config(parse(
                        &yaml(&source.display().to_string()),
                        versions.dir.path(),
                    ))
                    .await;
                assert_eq!(report.plugins.len(), 1, "{report:?}");
                report.plugins[0].1.clone()
            }
        };
        let ReloadOutcome::Failed { error } = &outcome else {
            panic!("case {i} ({file}): {outcome:?}")
        };
        assert!(
            error.contains(cause),
            "case {i}: the error should say {cause:?}: {error}"
        );
        assert!(
            error.contains("plugin rec"),
            "case {i}: the error names the plugin: {error}"
        );
        let st = status(&runtime, "rec").await;
        assert_eq!(
            st.version, versions.v1,
            "case {i}: the running version is unchanged"
        );
        assert_eq!(st.swaps, 0, "case {i}");
        let last = st.last_swap_error.map(|e| e.message).unwrap_or_default();
        assert!(
            last.contains(cause),
            "case {i}: lastSwapError should say {cause:?}: {last}"
        );
        let event = probe(&s, "rec", &format!("after-{i}")).await;
        assert_eq!(
            event["tag"], "v1",
            "case {i}: the old version still serves: {event}"
        );
    }

    // A good version still goes in afterwards.
    std::fs::copy(versions.path("v2.wasm"), &plugin).unwrap();
    let report = runtime
        .apply_config(parse(
            &yaml("plugin.wasm").replace("tag: v1", "tag: v2"),
            versions.dir.path(),
        ))
        .await;
    assert!(
        matches!(&report.plugins[..], [(_, ReloadOutcome::Swapped { version, .. })] if *version == versions.v2),
        "{report:?}"
    );
    assert_eq!(probe(&s, "rec", "recovered").await["tag"], "v2");
    let st = status(&runtime, "rec").await;
    assert_eq!((st.swaps, st.failures), (1, 0), "{st:?}");
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_replaces_a_backed_off_one_at_once_and_starts_with_a_clean_slate() {
    let s = setup("crashloop").await;
    let versions = Versions::new();
    let plugin = versions.path("plugin.wasm");
    let panics = std::fs::read(guests::PANIC).unwrap();
    std::fs::write(&plugin, &panics).unwrap();
    let runtime = start(
        &s,
        parse(
            &format!(
                "plugins:\n{}",
                recorder_entry("rec", "plugin.wasm", "crashloop", "{tag: fixed}")
            ),
            versions.dir.path(),
        ),
    )
    .await;

    // Every event traps; past three failures in a row the worker pauses 0.1 s, 0.2 s, … doubling.
    // After the ninth it pauses 3.2 s, with three events still queued.
    for i in 0..12 {
        s.cms
            .create(&PostParams::default(), &config_map(&format!("boom-{i}")))
            .await
            .unwrap();
    }
    eventually(WAIT, "nine failures", async || {
        (status(&runtime, "rec").await.failures >= 9).then_some(())
    })
    .await;

    // A new version (failing too) goes in during the pause: the reload wakes the worker (the
    // wake that ends a backoff sleep is pinned by `dispatch::queue`'s unit tests, without a
    // clock) ...
    std::fs::write(
        &plugin,
        with_custom_section(&panics, "wasmformer-test-version", b"v2"),
    )
    .unwrap();
    let outcome = runtime.reload_plugin("rec", false).await.unwrap();
    assert!(
        matches!(outcome, ReloadOutcome::Swapped { .. }),
        "{outcome:?}"
    );
    // ... and is not paused for its predecessor's failures: its first failures are tolerated.
    eventually(
        WAIT,
        "the new version to fail the three queued events",
        async || (status(&runtime, "rec").await.failures == 12).then_some(()),
    )
    .await;

    // The fix goes in at once too, and serves.
    std::fs::copy(versions.path("v1.wasm"), &plugin).unwrap();
    assert!(matches!(
        runtime.reload_plugin("rec", false).await.unwrap(),
        ReloadOutcome::Swapped { .. }
    ));
    assert_eq!(probe(&s, "rec", "fine").await["tag"], "fixed");
    let st = status(&runtime, "rec").await;
    assert_eq!((st.swaps, st.failures, st.calls), (2, 12, 13), "{st:?}");
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 4. Plugins added and removed at run time

fn informed_resources(runtime: &Runtime) -> Vec<String> {
    runtime
        .informers()
        .statuses()
        .into_iter()
        .map(|(key, _)| key.resource_name())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_added_and_removed_at_run_time_start_and_stop_their_informers() {
    let s = setup("dyn").await;
    let versions = Versions::new();
    let pods_entry = "  - name: pods\n    wasm: v1.wasm\n    handles: [{apiVersion: v1, kind: Pod, namespace: dyn}]\n    config: {tag: pods}\n";
    let cms_entry =
        |name: &str| recorder_entry(name, "v1.wasm", "dyn", &format!("{{tag: {name}}}"));
    let with = |entries: &[&str]| {
        parse(
            &format!("plugins:\n{}", entries.concat()),
            versions.dir.path(),
        )
    };
    let runtime = start(&s, with(&[pods_entry])).await;
    assert_eq!(informed_resources(&runtime), ["pods"]);

    let outcomes = |report: wasmformer::runtime::ReloadReport| {
        report
            .plugins
            .into_iter()
            .map(|(n, o)| format!("{n}: {o:?}"))
            .collect::<Vec<_>>()
    };
    let (a, b) = (cms_entry("cms-a"), cms_entry("cms-b"));
    assert_eq!(
        outcomes(runtime.apply_config(with(&[pods_entry, &a])).await),
        ["cms-a: Added", "pods: Unchanged"]
    );
    assert_eq!(informed_resources(&runtime), ["configmaps", "pods"]);
    assert!(runtime.wait_synced(WAIT).await);
    assert_eq!(probe(&s, "cms-a", "one").await["tag"], "cms-a");

    assert_eq!(
        outcomes(runtime.apply_config(with(&[pods_entry, &a, &b])).await),
        ["cms-a: Unchanged", "cms-b: Added", "pods: Unchanged"]
    );
    assert!(runtime.wait_synced(WAIT).await);
    let initial = s.recorded.wait_for("cms-b", 1, WAIT).await;
    assert_eq!(
        (initial[0]["name"].as_str(), initial[0]["initial"].as_bool()),
        (Some("one"), Some(true)),
        "{initial:?}"
    );

    // Removing one of two subscribers keeps the informer; removing the last one stops it.
    let informer_watch = s.dev.request_log().last_seq();
    assert_eq!(
        outcomes(runtime.apply_config(with(&[pods_entry, &b])).await),
        ["cms-a: Removed", "cms-b: Unchanged", "pods: Unchanged"]
    );
    assert_eq!(
        informed_resources(&runtime),
        ["configmaps", "pods"],
        "cms-b still subscribes"
    );
    assert_eq!(probe(&s, "cms-b", "two").await["tag"], "cms-b");
    assert_eq!(
        s.dev
            .request_log()
            .count_since(informer_watch, Verb::Watch, "configmaps"),
        0
    );
    assert_eq!(
        outcomes(runtime.apply_config(with(&[pods_entry])).await),
        ["cms-b: Removed", "pods: Unchanged"]
    );
    eventually(
        Duration::from_secs(5),
        "the ConfigMap informer to stop",
        async || (informed_resources(&runtime) == ["pods"]).then_some(()),
    )
    .await;
    let st = runtime.statuses().await;
    assert_eq!(
        st.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["pods"],
        "{st:?}"
    );

    // Re-adding starts a new informer (a new list and watch) that sees what changed meanwhile.
    let gone = s.dev.request_log().last_seq();
    s.cms
        .create(&PostParams::default(), &config_map("while-unwatched"))
        .await
        .unwrap();
    assert_eq!(
        outcomes(runtime.apply_config(with(&[pods_entry, &a])).await),
        ["cms-a: Added", "pods: Unchanged"]
    );
    assert!(runtime.wait_synced(WAIT).await);
    assert_eq!(informed_resources(&runtime), ["configmaps", "pods"]);
    assert!(
        !configmap_lists_and_watches(&s, gone).is_empty(),
        "a re-added informer lists again"
    );
    // cms-a saw "one" live before it was removed; now it gets the whole cache as initial adds.
    let events = s.recorded.wait_for("cms-a", 4, WAIT).await;
    let mut initial: Vec<_> = events[1..]
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["initial"] == true))
        .collect();
    initial.sort();
    assert_eq!(
        initial,
        [("one", true), ("two", true), ("while-unwatched", true)],
        "{events:#?}"
    );
    assert_eq!(probe(&s, "cms-a", "three").await["initial"], false);
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 5. File changes seen by the trigger

/// A config file in the versions folder, naming `plugin.wasm`.
fn write_config(versions: &Versions, namespace: &str, config: &str) -> PathBuf {
    let path = versions.path("config.yaml");
    std::fs::write(
        &path,
        format!(
            "plugins:\n{}",
            recorder_entry("rec", "plugin.wasm", namespace, config)
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_written_wasm_file_is_never_swapped_in_and_the_complete_one_is() {
    let _serial = TRIGGERS.lock().await;
    let s = setup("partial").await;
    let versions = Versions::new();
    let plugin = versions.path("plugin.wasm");
    std::fs::copy(versions.path("v1.wasm"), &plugin).unwrap();
    let config = write_config(&versions, "partial", "{tag: v1}");
    let runtime = start(&s, HostConfig::load(&config).unwrap()).await;
    let trigger = trigger::spawn(runtime.clone(), true).unwrap();

    let v2 = std::fs::read(versions.path("v2.wasm")).unwrap();
    let half = &v2[..v2.len() / 2];
    std::fs::write(&plugin, half).unwrap();
    // The file holds still, so the watcher tries it once: the compile fails and is reported.
    let failure = eventually(
        Duration::from_secs(5),
        "a failed reload of the half-written file",
        async || {
            let st = status(&runtime, "rec").await;
            assert_eq!(
                (st.version.as_str(), st.swaps),
                (versions.v1.as_str(), 0),
                "the half-written file was swapped in: {st:?}"
            );
            st.last_swap_error.map(|e| e.message)
        },
    )
    .await;
    assert!(failure.contains("does not compile"), "{failure}");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let st = status(&runtime, "rec").await;
    assert_eq!(
        (st.version.as_str(), st.swaps),
        (versions.v1.as_str(), 0),
        "{st:?}"
    );
    assert_eq!(
        probe(&s, "rec", "during").await["tag"],
        "v1",
        "the old version keeps serving"
    );

    // The complete file (and a new tag) goes in.
    std::fs::write(&plugin, &v2).unwrap();
    write_config(&versions, "partial", "{tag: v2}");
    eventually(Duration::from_secs(10), "v2 to be swapped in", async || {
        (status(&runtime, "rec").await.version == versions.v2).then_some(())
    })
    .await;
    assert_eq!(probe(&s, "rec", "after").await["tag"], "v2");
    assert_eq!(status(&runtime, "rec").await.swaps, 1);
    trigger.abort();
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

/// A runtime whose file watcher is in the middle of a reload, with what it needs.
struct ReloadInProgress {
    s: Setup,
    versions: Versions,
    runtime: Arc<Runtime>,
    trigger: tokio::task::JoinHandle<()>,
    plugin: PathBuf,
}

/// Starts the recorder as v1 with a file watcher, keeps it busy with one 4 s event, and writes
/// v2: the watcher notices v2 within 1 s, and its reload then waits for the call to end (a swap
/// happens between two events), about 3.8 s from the write. Returns 2 s after the write, in the
/// middle of that reload.
async fn reload_in_progress(namespace: &str) -> ReloadInProgress {
    let s = setup(namespace).await;
    let versions = Versions::new();
    let plugin = versions.path("plugin.wasm");
    std::fs::copy(versions.path("v1.wasm"), &plugin).unwrap();
    let config = write_config(&versions, namespace, "{tag: v1, sleepMs: 4000}");
    let runtime = start(&s, HostConfig::load(&config).unwrap()).await;
    let trigger = trigger::spawn(runtime.clone(), true).unwrap();
    s.cms
        .create(&PostParams::default(), &config_map("slow"))
        .await
        .unwrap();
    eventually(WAIT, "the event to be taken", async || {
        (status(&runtime, "rec").await.queue_depth == 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    std::fs::copy(versions.path("v2.wasm"), &plugin).unwrap();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    ReloadInProgress {
        s,
        versions,
        runtime,
        trigger,
        plugin,
    }
}

impl ReloadInProgress {
    /// Waits for the reload to swap v2 in.
    async fn v2_swapped_in(&self) {
        let st = eventually(
            Duration::from_secs(10),
            "the call to end and v2 to be swapped in",
            async || {
                let st = status(&self.runtime, "rec").await;
                (st.swaps > 0).then_some(st)
            },
        )
        .await;
        assert_eq!(
            st.version, self.versions.v2,
            "the next version was written before the reload read the file: this proves nothing"
        );
    }

    async fn end(self) {
        self.trigger.abort();
        self.runtime.shutdown().await;
        self.s.dev.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_file_written_while_a_reload_runs_is_loaded_next() {
    let _serial = TRIGGERS.lock().await;
    let r = reload_in_progress("racing").await;
    let v3 = recorder_version("v3");
    std::fs::write(&r.plugin, &v3).unwrap();
    r.v2_swapped_in().await;
    let v3 = digest(&v3);
    eventually(Duration::from_secs(10), "v3 to be swapped in", async || {
        (status(&r.runtime, "rec").await.version == v3).then_some(())
    })
    .await;
    assert_eq!(status(&r.runtime, "rec").await.swaps, 2);
    r.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_file_still_being_written_when_a_reload_ends_is_loaded_once_complete() {
    let _serial = TRIGGERS.lock().await;
    let r = reload_in_progress("finishing").await;
    let v3 = recorder_version("v3");
    std::fs::write(&r.plugin, &v3[..v3.len() / 2]).unwrap();
    r.v2_swapped_in().await;
    std::fs::write(&r.plugin, &v3).unwrap();
    // The watcher saw the file change during the reload, and waits for it to hold still.
    let v3 = digest(&v3);
    eventually(Duration::from_secs(10), "v3 to be swapped in", async || {
        (status(&r.runtime, "rec").await.version == v3).then_some(())
    })
    .await;
    let st = status(&r.runtime, "rec").await;
    assert_eq!(st.swaps, 2, "{st:?}");
    assert_eq!(st.last_swap_error, None, "the half-written v3 was tried");
    r.end().await;
}

// ---------------------------------------------------------------------------------------------
// 6. SIGHUP

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_config() {
    let _serial = TRIGGERS.lock().await;
    let s = setup("hangup").await;
    let versions = Versions::new();
    std::fs::copy(versions.path("v1.wasm"), versions.path("plugin.wasm")).unwrap();
    let config = write_config(&versions, "hangup", "{tag: v1}");
    let runtime = start(&s, HostConfig::load(&config).unwrap()).await;
    // Files are not watched: only the signal reloads. `spawn` installs the SIGHUP handler before
    // it returns, so from here on the signal cannot end this process.
    let trigger = trigger::spawn(runtime.clone(), false).unwrap();

    std::fs::write(
        &config,
        format!(
            "plugins:\n{}",
            recorder_entry("rec", "v2.wasm", "hangup", "{tag: v2}")
        ),
    )
    .unwrap();
    tokio::time::sleep(trigger::POLL_INTERVAL * 3).await;
    assert_eq!(
        status(&runtime, "rec").await.version,
        versions.v1,
        "without the signal nothing reloads"
    );

    let sent = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    eventually(Duration::from_secs(10), "v2 to be swapped in", async || {
        (status(&runtime, "rec").await.version == versions.v2).then_some(())
    })
    .await;
    assert_eq!(probe(&s, "rec", "after-hangup").await["tag"], "v2");
    trigger.abort();
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// 7. One reload at a time, one version at a time (issue 18)

/// `POST /reload[?plugin=NAME]` to the admin endpoint at `addr`: the status code and the body.
async fn post_reload(addr: std::net::SocketAddr, query: &str, token: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST /reload{query} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let code = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (code, body)
}

/// The outcome names in a report's JSON or in a list of outcomes, e.g. `["swapped", "unchanged"]`.
fn outcome_names(report: &Value) -> Vec<String> {
    let mut names = Vec::new();
    let mut walk = vec![report];
    while let Some(v) = walk.pop() {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(outcome)) = map.get("outcome") {
                    names.push(outcome.clone());
                }
                walk.extend(map.values());
            }
            Value::Array(items) => walk.extend(items),
            _ => {}
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reloads_from_every_trigger_are_carried_out_one_at_a_time_each_with_its_report()
{
    let s = setup("concurrent").await;
    let versions = Versions::new();
    let plugin = versions.path("plugin.wasm");
    std::fs::copy(versions.path("v1.wasm"), &plugin).unwrap();
    let config = write_config(&versions, "concurrent", "{tag: v1, sleepMs: 1500}");
    let runtime = start(&s, HostConfig::load(&config).unwrap()).await;
    let token = "sesame";
    let (admin, _server) = wasmformer::admin::serve(
        "127.0.0.1:0".parse().unwrap(),
        runtime.clone(),
        Some(token.into()),
    )
    .await
    .unwrap();

    // The plugin is in a 1.5 s call when v2 is written and a dozen reloads arrive at once: from
    // the admin endpoint (one plugin, whole config), and as the file watcher and SIGHUP ask
    // (`reload_config`), and `reload_plugin`.
    let busy = async |name: &str| {
        s.cms
            .create(&PostParams::default(), &config_map(name))
            .await
            .unwrap();
        eventually(WAIT, "the event to be taken", async || {
            (status(&runtime, "rec").await.queue_depth == 0).then_some(())
        })
        .await;
    };
    busy("slow-1").await;
    std::fs::copy(versions.path("v2.wasm"), &plugin).unwrap();
    let mut reloads = tokio::task::JoinSet::new();
    for i in 0..12 {
        let runtime = runtime.clone();
        reloads.spawn(async move {
            match i % 4 {
                0 => {
                    let (code, body) = post_reload(admin, "?plugin=rec", token).await;
                    assert_eq!(code, 200, "{body}");
                    outcome_names(&serde_json::from_str(&body).unwrap())
                }
                1 => {
                    let (code, body) = post_reload(admin, "", token).await;
                    assert_eq!(code, 200, "{body}");
                    outcome_names(&serde_json::from_str(&body).unwrap())
                }
                2 => outcome_names(
                    &serde_json::to_value(runtime.reload_config().await.unwrap()).unwrap(),
                ),
                _ => outcome_names(
                    &serde_json::to_value(runtime.reload_plugin("rec", false).await.unwrap())
                        .unwrap(),
                ),
            }
        });
    }
    let mut outcomes: Vec<String> = reloads.join_all().await.into_iter().flatten().collect();
    outcomes.sort();
    let mut expected = vec!["unchanged".to_owned(); 11];
    expected.insert(0, "swapped".to_owned());
    assert_eq!(
        outcomes, expected,
        "one reload swaps v2 in; the others, after it, find nothing to do"
    );
    let st = status(&runtime, "rec").await;
    assert_eq!(
        (st.swaps, st.version.as_str()),
        (1, versions.v2.as_str()),
        "{st:?}"
    );

    // Forced swaps offered while the plugin is busy: each one happens, none is lost.
    busy("slow-2").await;
    let mut forced = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let runtime = runtime.clone();
        forced.spawn(async move { runtime.reload_plugin("rec", true).await.unwrap() });
    }
    for outcome in forced.join_all().await {
        assert!(
            matches!(outcome, ReloadOutcome::Swapped { .. }),
            "{outcome:?}"
        );
    }
    assert_eq!(
        status(&runtime, "rec").await.swaps,
        5,
        "every reported swap happened"
    );
    assert_eq!(probe(&s, "rec", "after").await["tag"], "v1");
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_subscribed_plugin_never_runs_two_versions_at_once() {
    let s = setup("overlap").await;
    let versions = Versions::new();
    for i in 0..10 {
        s.cms
            .create(&PostParams::default(), &config_map(&format!("base-{i}")))
            .await
            .unwrap();
    }
    let config_for = |label: &str, resync: &str| {
        let entry = recorder_entry(
            "rec",
            &format!("{label}.wasm"),
            "overlap",
            &format!("{{tag: {label}, sleepMs: 100, marks: true}}"),
        );
        parse(
            &format!("plugins:\n{entry}    resync: {resync}\n"),
            versions.dir.path(),
        )
    };
    let runtime = start(&s, config_for("v1", "0s")).await;
    // A backlog for v1 when it is re-subscribed (a change of `resync`).
    for i in 0..20 {
        s.cms
            .create(&PostParams::default(), &config_map(&format!("live-{i}")))
            .await
            .unwrap();
    }
    eventually(WAIT, "a backlog", async || {
        (status(&runtime, "rec").await.queue_depth >= 3).then_some(())
    })
    .await;
    let report = runtime.apply_config(config_for("v2", "1h")).await;
    assert!(
        matches!(&report.plugins[..], [(_, ReloadOutcome::Rewired)]),
        "{report:?}"
    );
    // v2 gets all 30 objects (as initial adds, or live if they arrived after it subscribed).
    eventually(WAIT, "v2 to see every object", async || {
        let names: BTreeSet<String> = s
            .recorded
            .events("rec")
            .into_iter()
            .filter(|e| e["tag"] == "v2")
            .map(|e| e["name"].as_str().unwrap().to_owned())
            .collect();
        (names.len() == 30).then_some(())
    })
    .await;

    let marks: Vec<String> = s
        .recorded
        .messages("rec")
        .into_iter()
        .filter(|m| m.starts_with("enter ") || m.starts_with("leave "))
        .collect();
    let mut running: Option<&str> = None;
    for (i, mark) in marks.iter().enumerate() {
        match (mark.split_once(' ').unwrap(), running) {
            (("enter", tag), None) => running = Some(tag),
            (("leave", tag), Some(current)) if tag == current => running = None,
            (_, current) => panic!(
                "mark {i} {mark:?} while {current:?} was in a call: {:?}",
                &marks[i.saturating_sub(4)..(i + 4).min(marks.len())]
            ),
        }
    }
    let v1_calls = marks.iter().filter(|m| *m == "leave v1").count();
    assert!(
        v1_calls >= 10 + 3,
        "v1 delivered its initial list and its backlog before it stopped: {v1_calls} calls"
    );
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_re_subscription_shows_once_and_a_removed_failed_plugin_leaves_the_status() {
    let s = setup("failing").await;
    let versions = Versions::new();
    let good = recorder_entry("rec", "v1.wasm", "failing", "{tag: v1}");
    let with = |entries: &[&str]| {
        parse(
            &format!("plugins:\n{}", entries.concat()),
            versions.dir.path(),
        )
    };
    let runtime = start(&s, with(&[&good])).await;
    let names = async || {
        runtime
            .statuses()
            .await
            .into_iter()
            .map(|st| st.name)
            .collect::<Vec<_>>()
    };

    // Re-subscribing to a kind the cluster does not serve fails; the running version keeps
    // serving and shows the failure once, as its last swap error.
    let unserved = good.replace("kind: ConfigMap", "kind: NoSuchKind");
    let report = runtime.apply_config(with(&[&unserved])).await;
    let [(_, ReloadOutcome::Failed { error })] = &report.plugins[..] else {
        panic!("{report:?}")
    };
    assert!(error.contains("does not serve"), "{error}");
    assert_eq!(names().await, ["rec"], "the plugin is listed once");
    let st = status(&runtime, "rec").await;
    assert!(
        st.last_swap_error
            .as_ref()
            .is_some_and(|e| e.message.contains("does not serve")),
        "{st:?}"
    );
    assert_eq!(st.version, versions.v1);
    assert_eq!(probe(&s, "rec", "still-serving").await["tag"], "v1");

    // A plugin that fails to start is listed until it leaves the config.
    let broken = recorder_entry("broken", "missing.wasm", "failing", "{tag: broken}");
    let report = runtime.apply_config(with(&[&good, &broken])).await;
    assert!(
        matches!(&report.plugins[..], [(b, ReloadOutcome::Failed { .. }), (r, ReloadOutcome::Unchanged)] if b == "broken" && r == "rec"),
        "{report:?}"
    );
    assert_eq!(names().await, ["broken", "rec"]);
    let report = runtime.apply_config(with(&[&good])).await;
    assert!(
        matches!(&report.plugins[..], [(b, ReloadOutcome::Removed), (_, ReloadOutcome::Unchanged)] if b == "broken"),
        "{report:?}"
    );
    assert_eq!(names().await, ["rec"], "the removed plugin left the status");
    runtime.shutdown().await;
    s.dev.shutdown().await.unwrap();
}
