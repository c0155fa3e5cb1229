//! The factory against the embedded dev cluster (a real HTTP API server with fault injection and
//! a request log): sharing, lifetime, the list/watch protocol as kube's watcher drives it, errors
//! and backoff, streaming lists and the fallbacks from them. Everything runs in real time; every
//! wait is bounded.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::discovery::ApiResource;
use serde_json::{Value, json};
use tokio::time::Instant;
use wasmformer_devcluster::{
    Deletion, DevCluster, DevClusterConfig, Failure, ObjectKey, Part, Preconditions, RequestFilter,
    RequestRecord, ResourceId, Verb,
};

use super::*;
use crate::cache::IndexSpec;
use crate::informer::{Error, Event, ListStrategy};

/// How long any single expected thing may take before the test fails.
const WAIT: Duration = Duration::from_secs(30);

/// The user the dev cluster's RBAC denials name.
const USER: &str = "system:serviceaccount:ops:wasmformer";

fn pods() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
}

fn configmaps() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

fn settings(list_strategy: ListStrategy) -> WatchSettings {
    WatchSettings {
        list_strategy,
        ..WatchSettings::default()
    }
}

/// `future`, or a failure naming `what` after [`WAIT`].
async fn bounded<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

async fn dev_cluster() -> DevCluster {
    DevCluster::start(DevClusterConfig::default())
        .await
        .unwrap()
}

fn pod_key(name: &str) -> ObjectKey {
    ObjectKey::new(ResourceId::core("pods"), Some("default"), name)
}

fn rv(object: &Value) -> String {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Creates pod `name` in `default`, labelled `app`, on `node`; returns its resourceVersion.
fn create_pod(dev: &DevCluster, name: &str, app: &str, node: &str) -> String {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]}});
    rv(&dev
        .store()
        .create(&ResourceId::core("pods"), Some("default"), pod)
        .unwrap())
}

/// Annotates pod `name`; returns its new resourceVersion.
fn touch_pod(dev: &DevCluster, name: &str) -> String {
    let touched = dev.store().modify(&pod_key(name), Part::Main, |pod| {
        pod["metadata"]["annotations"] = json!({"touched": "yes"})
    });
    rv(&touched.unwrap())
}

/// Deletes pod `name`; returns the resourceVersion of its deletion.
fn delete_pod(dev: &DevCluster, name: &str) -> String {
    match dev
        .store()
        .delete(&pod_key(name), &Preconditions::default())
        .unwrap()
    {
        Deletion::Deleted(pod) => rv(&pod),
        Deletion::Finalizing(_) => panic!("{name} has finalizers"),
    }
}

/// The requests `verb` on pods so far.
fn pod_requests(dev: &DevCluster, verb: Verb) -> Vec<RequestRecord> {
    dev.request_log()
        .records()
        .into_iter()
        .filter(|r| r.is(verb, "pods"))
        .collect()
}

/// The pod requests that asked for a streaming list.
fn streaming_requests(dev: &DevCluster) -> Vec<RequestRecord> {
    pod_requests(dev, Verb::Watch)
        .into_iter()
        .filter(|r| r.param("sendInitialEvents") == Some("true"))
        .collect()
}

/// Records deltas as `add a@1`, `update c@15`, `delete b@10 unknown`, `synced`.
#[derive(Default)]
struct Recorder {
    lines: std::sync::Mutex<Vec<String>>,
    pushed: tokio::sync::watch::Sender<usize>,
}

impl EventSink for Recorder {
    fn push(&self, delta: Event) {
        let line = match &delta {
            Event::Delete {
                obj,
                final_state_unknown: true,
            } => format!("delete {}@{} unknown", obj.name(), obj.resource_version()),
            d => match d.object() {
                Some(obj) => format!("{} {}@{}", d.kind(), obj.name(), obj.resource_version()),
                None => d.kind().to_owned(),
            },
        };
        let len = {
            let mut lines = self.lines.lock().unwrap();
            lines.push(line);
            lines.len()
        };
        self.pushed.send_replace(len);
    }
}

impl Recorder {
    /// Waits for `line`, then returns every line so far.
    async fn wait_for(&self, line: &str) -> Vec<String> {
        let mut pushed = self.pushed.subscribe();
        let seen = pushed.wait_for(|_| self.lines.lock().unwrap().iter().any(|l| l == line));
        if tokio::time::timeout(WAIT, seen).await.is_err() {
            panic!("no {line:?} in {:?}", self.lines.lock().unwrap());
        }
        self.lines.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn equal_keys_share_one_informer_until_the_last_handle_goes() {
    let dev = dev_cluster().await;
    let factory = InformerFactory::new(dev.client().unwrap(), settings(ListStrategy::List));
    let key = InformerKey::new(pods(), true).namespace("default");
    let a = factory
        .informer(key.clone(), &StoreOptions::default())
        .unwrap();
    let b = factory
        .informer(key.clone().labels(" "), &StoreOptions::default())
        .unwrap();
    assert!(
        Arc::ptr_eq(&a, &b),
        "an empty selector is no selector: same key"
    );
    let other = factory
        .informer(key.clone().namespace("prod"), &StoreOptions::default())
        .unwrap();
    assert!(!Arc::ptr_eq(&a, &other));
    assert_eq!(factory.statuses().len(), 2);

    let lister = factory.store(&key).unwrap();
    let subscription = a.subscribe(Arc::new(Recorder::default()));
    drop((a, b));
    assert!(
        factory.get(&key).is_some(),
        "the subscription and the lister keep it running"
    );
    drop(subscription);
    assert!(factory.get(&key).is_some(), "the lister keeps it running");
    let store = Arc::downgrade(&lister.store());
    drop(lister);
    assert!(factory.get(&key).is_none(), "stopped with its last handle");
    assert_eq!(factory.statuses().len(), 1);
    // The aborted task, which holds the store, is dropped when the runtime next gets to it.
    for _ in 0..100 {
        if store.strong_count() == 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(store.upgrade().is_none(), "its store is freed");
    assert!(factory.store(&key).is_none());
}

#[tokio::test]
async fn store_options_of_every_user_are_merged() {
    let dev = dev_cluster().await;
    let factory = InformerFactory::new(dev.client().unwrap(), settings(ListStrategy::List));
    let key = InformerKey::new(pods(), true);
    let index = |name: &str, path: &str| IndexSpec {
        name: name.into(),
        path: path.parse().unwrap(),
    };
    let first = StoreOptions {
        indexes: vec![index("by-node", "spec.nodeName")],
        ..StoreOptions::default()
    };
    let second = StoreOptions {
        indexes: vec![index("by-owner", "metadata.ownerReferences[*].uid")],
        ..StoreOptions::default()
    };
    let lister = factory.lister(key.clone(), &first).unwrap();
    let _informer = factory.informer(key.clone(), &second).unwrap();
    let names: Vec<_> = lister
        .store()
        .indexes()
        .iter()
        .map(|i| i.name.clone())
        .collect();
    assert_eq!(names, ["by-node", "by-owner"]);
    let clash = StoreOptions {
        indexes: vec![index("by-node", "status.hostIP")],
        ..StoreOptions::default()
    };
    assert!(matches!(
        factory.informer(key, &clash),
        Err(Error::IndexConflict { .. })
    ));
}

#[tokio::test]
async fn syncs_then_delivers_live_changes_with_selectors_pushed_down() {
    let dev = dev_cluster().await;
    let a = create_pod(&dev, "a", "web", "n1");
    let b = create_pod(&dev, "b", "web", "n1");
    create_pod(&dev, "x", "db", "n1");
    create_pod(&dev, "y", "web", "n2");
    let listed_at = dev.store().resource_version().to_string();
    let factory = InformerFactory::new(dev.client().unwrap(), settings(ListStrategy::List));
    let key = InformerKey::new(pods(), true)
        .namespace("default")
        .labels("app=web")
        .fields("spec.nodeName=n1");
    let recorder = Arc::new(Recorder::default());
    let subscription = factory
        .subscribe(key.clone(), &StoreOptions::default(), recorder.clone())
        .unwrap();
    recorder.wait_for("synced").await;

    let a_touched = touch_pod(&dev, "a");
    create_pod(&dev, "x2", "db", "n1");
    create_pod(&dev, "y2", "web", "n2");
    let c = create_pod(&dev, "c", "web", "n1");
    let b_deleted = delete_pod(&dev, "b");
    let lines = recorder.wait_for(&format!("delete b@{b_deleted}")).await;
    let expected = [
        format!("add a@{a}"),
        format!("add b@{b}"),
        "synced".into(),
        format!("update a@{a_touched}"),
        format!("add c@{c}"),
        format!("delete b@{b_deleted}"),
    ];
    assert_eq!(
        lines, expected,
        "x and y never reach the informer: the server filtered them"
    );
    let informer = subscription.informer();
    assert_eq!(informer.status().list_strategy, Some(ListStrategy::List));
    assert_eq!(
        informer
            .store()
            .get("default", "a")
            .unwrap()
            .resource_version(),
        a_touched
    );

    let lists = pod_requests(&dev, Verb::List);
    assert_eq!(lists.len(), 1, "{lists:?}");
    assert_eq!(lists[0].path, "/api/v1/namespaces/default/pods");
    for (param, value) in [
        ("labelSelector", "app=web"),
        ("fieldSelector", "spec.nodeName=n1"),
        ("limit", "500"),
    ] {
        assert_eq!(
            lists[0].param(param),
            Some(value),
            "{param} in {:?}",
            lists[0]
        );
    }
    let watches = pod_requests(&dev, Verb::Watch);
    assert_eq!(watches.len(), 1, "{watches:?}");
    assert_eq!(watches[0].path, "/api/v1/namespaces/default/pods");
    for (param, value) in [
        ("labelSelector", "app=web"),
        ("fieldSelector", "spec.nodeName=n1"),
        ("allowWatchBookmarks", "true"),
        ("resourceVersion", &listed_at),
    ] {
        assert_eq!(
            watches[0].param(param),
            Some(value),
            "{param} in {:?}",
            watches[0]
        );
    }
}

/// Both ways of fetching the initial content: LIST + WATCH, and a streaming list.
const STRATEGIES: [ListStrategy; 2] = [ListStrategy::List, ListStrategy::Auto];

/// The initial-content requests `strategy` makes: LISTs, or streaming watches.
fn initial_requests(dev: &DevCluster, strategy: ListStrategy) -> usize {
    match strategy {
        ListStrategy::List => pod_requests(dev, Verb::List).len(),
        _ => {
            assert!(
                pod_requests(dev, Verb::List).is_empty(),
                "a streaming list needs no LIST"
            );
            streaming_requests(dev).len()
        }
    }
}

/// A paged LIST (`page_size`) delivers every object, in order, each page asked for once.
#[tokio::test]
async fn a_paged_list_asks_for_each_page_once_and_delivers_every_object() {
    let dev = dev_cluster().await;
    let names: Vec<String> = (0..7).map(|i| format!("p{i}")).collect();
    for name in &names {
        create_pod(&dev, name, "web", "n1");
    }
    let settings = WatchSettings {
        page_size: 2,
        ..settings(ListStrategy::List)
    };
    let factory = InformerFactory::new(dev.client().unwrap(), settings);
    let recorder = Arc::new(Recorder::default());
    let subscription = factory
        .subscribe(
            InformerKey::new(pods(), true).namespace("default"),
            &StoreOptions::default(),
            recorder.clone(),
        )
        .unwrap();
    let lines = recorder.wait_for("synced").await;
    let added: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("add "))
        .map(|l| l.split('@').next().unwrap())
        .collect();
    assert_eq!(added, names, "{lines:?}");
    assert_eq!(subscription.informer().store().len(), names.len());

    let lists = pod_requests(&dev, Verb::List);
    let tokens: Vec<Option<&str>> = lists.iter().map(|r| r.param("continue")).collect();
    assert_eq!(tokens.len(), 4, "7 Pods in pages of 2: {lists:?}");
    assert_eq!(tokens[0], None);
    let later: std::collections::HashSet<_> = tokens[1..].iter().flatten().collect();
    assert_eq!(later.len(), 3, "pages 2-4 each asked for once: {lists:?}");
}

#[tokio::test]
async fn a_closed_watch_resumes_from_its_resource_version_without_relisting() {
    for strategy in STRATEGIES {
        let dev = dev_cluster().await;
        let a = create_pod(&dev, "a", "web", "n1");
        let factory = InformerFactory::new(dev.client().unwrap(), settings(strategy));
        let recorder = Arc::new(Recorder::default());
        let _sub = factory
            .subscribe(
                InformerKey::new(pods(), true),
                &StoreOptions::default(),
                recorder.clone(),
            )
            .unwrap();
        recorder.wait_for("synced").await;
        let c = create_pod(&dev, "c", "web", "n1");
        recorder.wait_for(&format!("add c@{c}")).await;

        let log = dev.request_log();
        let closed_at = log.last_seq();
        dev.faults().close_watches(); // a clean end of the stream, as at a watch timeout
        let rewatch = bounded(
            "the re-watch",
            log.wait_for(closed_at, |r| r.is(Verb::Watch, "pods")),
        )
        .await;
        let d = create_pod(&dev, "d", "web", "n1");
        let lines = recorder.wait_for(&format!("add d@{d}")).await;

        assert_eq!(
            lines,
            [
                format!("add a@{a}"),
                "synced".into(),
                format!("add c@{c}"),
                format!("add d@{d}")
            ],
            "{strategy:?}"
        );
        assert_eq!(
            rewatch.param("resourceVersion"),
            Some(c.as_str()),
            "{strategy:?}: resumed after the last event seen: {rewatch:?}"
        );
        assert_eq!(
            rewatch.param("sendInitialEvents"),
            None,
            "{strategy:?}: a resumption, not a new streaming list"
        );
        assert_eq!(pod_requests(&dev, Verb::Watch).len(), 2, "{strategy:?}");
        assert_eq!(
            initial_requests(&dev, strategy),
            1,
            "{strategy:?}: no relist"
        );
    }
}

#[tokio::test]
async fn gone_relists_and_delivers_tombstones_before_the_relists_changes() {
    for strategy in STRATEGIES {
        let dev = dev_cluster().await;
        let [a, b, c] = ["a", "b", "c"].map(|name| create_pod(&dev, name, "web", "n1"));
        let factory = InformerFactory::new(dev.client().unwrap(), settings(strategy));
        let recorder = Arc::new(Recorder::default());
        let subscription = factory
            .subscribe(
                InformerKey::new(pods(), true),
                &StoreOptions::default(),
                recorder.clone(),
            )
            .unwrap();
        recorder.wait_for("synced").await;

        // The informer misses b's deletion, c's change and d's creation, and the history that
        // would replay them is gone by the time its re-watch is served: 410 Gone.
        let faults = dev.faults();
        faults.pause();
        faults.close_watches();
        delete_pod(&dev, "b");
        let c_touched = touch_pod(&dev, "c");
        let d = create_pod(&dev, "d", "web", "n1");
        faults.compact();
        faults.resume();

        let lines = recorder.wait_for(&format!("add d@{d}")).await;
        let expected = [
            format!("add a@{a}"),
            format!("add b@{b}"),
            format!("add c@{c}"),
            "synced".into(),
            format!("delete b@{b} unknown"),
            format!("update c@{c_touched}"),
            format!("add d@{d}"),
        ];
        assert_eq!(lines, expected, "{strategy:?}");
        assert_eq!(initial_requests(&dev, strategy), 2, "{strategy:?}");
        let status = subscription.informer().status();
        assert_eq!(
            (status.relists, status.errors, status.objects),
            (1, 1, 3),
            "{strategy:?}"
        );
        assert_eq!(
            (status.lists, status.relists_expired),
            (2, 1),
            "{strategy:?}: the relist is counted as a 410's"
        );
        assert_eq!(
            status.emitted,
            crate::informer::EventCounts {
                added: 4,
                updated: 1,
                deleted: 1
            },
            "{strategy:?}"
        );
        assert!(
            status.last_error.unwrap().message.contains("410 Gone"),
            "{strategy:?}"
        );
    }
}

#[tokio::test]
async fn a_persistent_403_backs_off_exponentially_and_other_informers_keep_working() {
    // kube's DefaultBackoff waits 0.8 s doubling to 30 s, and its jitter only adds (up to 100%):
    // LIST attempts come at ≥ 0, 0.8, 2.4, 5.6 and 12 s, so at most 4 fit in 8 s however slow
    // the machine. A backoff reset by kube's Init marker would retry within 1.6 s every time (6
    // or more in 8 s); no backoff at all, hundreds.
    const WINDOW: Duration = Duration::from_secs(8);
    let dev = dev_cluster().await;
    dev.faults().fail_next_matching(
        RequestFilter::default().resource("pods"),
        u32::MAX,
        Failure::Forbidden { user: USER },
    );
    let factory = InformerFactory::new(dev.client().unwrap(), settings(ListStrategy::List));
    let started = Instant::now();
    let pods_informer = factory
        .informer(
            InformerKey::new(pods(), true).namespace("prod"),
            &StoreOptions::default(),
        )
        .unwrap();
    let configmaps_informer = factory
        .informer(
            InformerKey::new(configmaps(), true),
            &StoreOptions::default(),
        )
        .unwrap();
    bounded(
        "the configmaps informer to sync",
        configmaps_informer.wait_synced(),
    )
    .await;

    tokio::time::sleep_until(started + WINDOW).await; // watching the retries, not waiting for one
    let attempts = pod_requests(&dev, Verb::List).len();
    let status = pods_informer.status();
    assert!(
        (3..=4).contains(&attempts),
        "{attempts} LIST attempts in {WINDOW:?}"
    );
    assert!(pod_requests(&dev, Verb::Watch).is_empty());
    assert!(!status.synced);
    // The answer to the latest attempt may still be on its way.
    let errors = status.errors as usize;
    assert!(
        errors == attempts || errors + 1 == attempts,
        "{errors} errors for {attempts} attempts"
    );
    assert_eq!(
        status.last_error.unwrap().message,
        format!(
            "forbidden: cannot list pods in namespace \"prod\" — grant list and watch on pods to {USER}"
        )
    );
    assert!(configmaps_informer.status().errors == 0 && configmaps_informer.has_synced());
}

#[tokio::test]
async fn a_server_at_1_34_or_later_gets_a_streaming_list() {
    let dev = dev_cluster().await;
    create_pod(&dev, "a", "web", "n1");
    create_pod(&dev, "b", "web", "n1");
    create_pod(&dev, "z", "db", "n1");
    let client = dev.client().unwrap();
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "37"),
        "the dev cluster reports 1.37 (1.34 or later streams lists)"
    );
    let factory = InformerFactory::new(client, settings(ListStrategy::Auto));
    let informer = factory
        .informer(
            InformerKey::new(pods(), true).labels("app=web"),
            &StoreOptions::default(),
        )
        .unwrap();
    bounded("the streaming list", informer.wait_synced()).await;
    assert_eq!(
        informer.store().len(),
        2,
        "the selector went to the server: z is not listed"
    );
    assert_eq!(
        informer.status().list_strategy,
        Some(ListStrategy::Streaming)
    );
    let streaming = streaming_requests(&dev);
    assert_eq!(streaming.len(), 1);
    assert_eq!(
        streaming[0].param("labelSelector"),
        Some("app=web"),
        "{:?}",
        streaming[0]
    );
    assert!(
        pod_requests(&dev, Verb::List).is_empty(),
        "{:?}",
        dev.request_log().records()
    );
}

#[tokio::test]
async fn a_refused_streaming_list_falls_back_to_list_for_the_whole_factory() {
    let dev = dev_cluster().await;
    create_pod(&dev, "a", "web", "n1");
    // A 1.34 server with the WatchList feature gate turned off.
    let refusal = Failure::Invalid {
        field: "sendInitialEvents",
        detail: "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
    };
    let streaming = RequestFilter::default()
        .verb(Verb::Watch)
        .param("sendInitialEvents", "true");
    dev.faults()
        .fail_next_matching(streaming, u32::MAX, refusal);
    let factory = InformerFactory::new(dev.client().unwrap(), settings(ListStrategy::Auto));
    let informer = factory
        .informer(InformerKey::new(pods(), true), &StoreOptions::default())
        .unwrap();
    bounded("the fallback LIST", informer.wait_synced()).await;
    assert_eq!(informer.status().list_strategy, Some(ListStrategy::List));
    assert_eq!(informer.store().len(), 1);
    let other = factory
        .informer(
            InformerKey::new(pods(), true).namespace("default"),
            &StoreOptions::default(),
        )
        .unwrap();
    bounded("the second informer", other.wait_synced()).await;
    assert_eq!(other.status().list_strategy, Some(ListStrategy::List));
    assert_eq!(
        streaming_requests(&dev).len(),
        1,
        "{:?}",
        dev.request_log().records()
    );
    assert_eq!(pod_requests(&dev, Verb::List).len(), 2);
}

#[tokio::test]
async fn an_older_server_gets_list_and_watch() {
    let dev = dev_cluster().await;
    dev.faults().report_version("1", "31");
    let factory = InformerFactory::new(dev.client().unwrap(), settings(ListStrategy::Auto));
    let informer = factory
        .informer(InformerKey::new(pods(), true), &StoreOptions::default())
        .unwrap();
    bounded("the LIST", informer.wait_synced()).await;
    assert_eq!(informer.status().list_strategy, Some(ListStrategy::List));
    assert!(streaming_requests(&dev).is_empty());
    assert_eq!(pod_requests(&dev, Verb::List).len(), 1);
}

#[tokio::test]
async fn a_server_ignoring_send_initial_events_falls_back_after_the_timeout() {
    const TIMEOUT: Duration = Duration::from_secs(1);
    let dev = dev_cluster().await;
    create_pod(&dev, "a", "web", "n1");
    // Claims 1.34 but serves the streaming list's watch as a plain one: the initial events
    // (synthetic ADDED) come, their end is never marked.
    let streaming = RequestFilter::default()
        .verb(Verb::Watch)
        .param("sendInitialEvents", "true");
    dev.faults().ignore_params_matching(
        streaming,
        u32::MAX,
        &["sendInitialEvents", "resourceVersionMatch"],
    );
    let settings = WatchSettings {
        initial_events_timeout: TIMEOUT,
        ..settings(ListStrategy::Auto)
    };
    let factory = InformerFactory::new(dev.client().unwrap(), settings);
    let started = Instant::now();
    let informer = factory
        .informer(InformerKey::new(pods(), true), &StoreOptions::default())
        .unwrap();
    bounded("the fallback LIST", informer.wait_synced()).await;
    assert!(
        started.elapsed() >= TIMEOUT,
        "fell back after {:?}",
        started.elapsed()
    );
    assert_eq!(informer.status().list_strategy, Some(ListStrategy::List));
    assert_eq!(informer.store().len(), 1);
    assert_eq!(streaming_requests(&dev).len(), 1);
    assert_eq!(pod_requests(&dev, Verb::List).len(), 1);
}

#[tokio::test]
async fn a_forbidden_streaming_list_is_retried_not_mistaken_for_missing_support() {
    const TIMEOUT: Duration = Duration::from_millis(500);
    let dev = dev_cluster().await;
    dev.faults().fail_next_matching(
        RequestFilter::default().resource("pods"),
        u32::MAX,
        Failure::Forbidden { user: USER },
    );
    let settings = WatchSettings {
        initial_events_timeout: TIMEOUT,
        ..settings(ListStrategy::Auto)
    };
    let factory = InformerFactory::new(dev.client().unwrap(), settings);
    let informer = factory
        .informer(InformerKey::new(pods(), true), &StoreOptions::default())
        .unwrap();

    // Three attempts span at least 2.4 s of backoff, well past the initial-events timeout. A
    // fallback would show up as a LIST.
    let log = dev.request_log();
    let mut seq = 0;
    for _ in 0..3 {
        seq = bounded(
            "a pods request",
            log.wait_for(seq, |r| {
                r.is(Verb::Watch, "pods") || r.is(Verb::List, "pods")
            }),
        )
        .await
        .seq;
    }
    assert_eq!(streaming_requests(&dev).len(), 3, "{:?}", log.records());
    assert!(
        pod_requests(&dev, Verb::List).is_empty(),
        "no fallback to LIST"
    );
    let message = informer.status().last_error.unwrap().message;
    assert!(
        message.starts_with("forbidden: cannot watch pods in all namespaces"),
        "{message}"
    );
}

#[tokio::test]
async fn metadata_only_informers_ask_for_and_cache_partial_object_metadata() {
    let dev = dev_cluster().await;
    create_pod(&dev, "a", "web", "n1");
    let factory = InformerFactory::new(dev.client().unwrap(), settings(ListStrategy::List));
    let informer = factory
        .informer(
            InformerKey::new(pods(), true).metadata_only(),
            &StoreOptions::default(),
        )
        .unwrap();
    bounded("the metadata LIST", informer.wait_synced()).await;
    let cached: Value =
        serde_json::from_str(informer.store().get("default", "a").unwrap().body()).unwrap();
    let stored = dev.store().get(&pod_key("a")).unwrap();
    assert_eq!(
        cached,
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": stored["metadata"]})
    );
    let lists = pod_requests(&dev, Verb::List);
    let accept = lists[0].accept.as_deref().unwrap_or("");
    assert!(accept.contains("as=PartialObjectMetadataList"), "{accept}");
}

/// A watch event line for `object`.
fn event_line(kind: &str, object: Value) -> String {
    json!({"type": kind, "object": object}).to_string()
}

#[tokio::test]
async fn a_broken_watch_stream_never_reaches_the_cache() {
    for strategy in STRATEGIES {
        let dev = dev_cluster().await;
        let a = create_pod(&dev, "a", "web", "n1");
        let factory = InformerFactory::new(dev.client().unwrap(), settings(strategy));
        let recorder = Arc::new(Recorder::default());
        let sub = factory
            .subscribe(
                InformerKey::new(pods(), true),
                &StoreOptions::default(),
                recorder.clone(),
            )
            .unwrap();
        recorder.wait_for("synced").await;
        let informer = sub.informer().clone();
        let watches = RequestFilter::default().verb(Verb::Watch).resource("pods");

        // A ConfigMap inside the Pod watch: refused, counted, the stream goes on.
        let intruder = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "intruder", "namespace": "default", "uid": "u-intruder", "resourceVersion": "100000"}});
        dev.faults()
            .send_watch_line(watches.clone(), event_line("ADDED", intruder));
        let b = create_pod(&dev, "b", "web", "n1");
        recorder.wait_for(&format!("add b@{b}")).await;
        assert_eq!(
            (informer.status().rejected, informer.status().undecodable),
            (1, 0),
            "{strategy:?}"
        );
        assert!(
            informer.store().get("default", "intruder").is_none(),
            "{strategy:?}"
        );

        // A truncated event: counted, and the watch restarts from the last resourceVersion.
        let log = dev.request_log();
        let before = log.last_seq();
        dev.faults().send_watch_line(
            watches.clone(),
            r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"cut""#,
        );
        let rewatch = bounded(
            "the re-watch",
            log.wait_for(before, |r| r.is(Verb::Watch, "pods")),
        )
        .await;
        assert_eq!(
            rewatch.param("resourceVersion"),
            Some(b.as_str()),
            "{strategy:?}: resumed, not relisted: {rewatch:?}"
        );
        let c = create_pod(&dev, "c", "web", "n1");
        recorder.wait_for(&format!("add c@{c}")).await;
        assert_eq!(
            (informer.status().rejected, informer.status().undecodable),
            (1, 1),
            "{strategy:?}"
        );
        assert!(
            informer
                .status()
                .last_error
                .unwrap()
                .message
                .starts_with("undecodable watch event"),
            "{strategy:?}"
        );

        // A 64 MiB object: dropped as it streams, named, counted; the stream goes on.
        let huge = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "huge", "namespace": "default", "uid": "u-huge", "resourceVersion": "100001"},
            "spec": {"containers": [{"name": "main", "image": "x".repeat(64 << 20)}]}});
        dev.faults()
            .send_watch_line(watches.clone(), event_line("ADDED", huge));
        let d = create_pod(&dev, "d", "web", "n1");
        let lines = recorder.wait_for(&format!("add d@{d}")).await;
        let status = informer.status();
        assert_eq!(
            (status.rejected, status.undecodable),
            (2, 1),
            "{strategy:?}"
        );
        let message = status.last_error.unwrap().message;
        assert!(
            message.starts_with("Pod default/huge: watch event of 6710"),
            "{strategy:?}: {message}"
        );
        assert!(
            message.ends_with("is over host.maxObjectBytes (2097152 bytes); not cached"),
            "{strategy:?}: {message}"
        );

        let expected = [
            format!("add a@{a}"),
            "synced".into(),
            format!("add b@{b}"),
            format!("add c@{c}"),
            format!("add d@{d}"),
        ];
        assert_eq!(lines, expected, "{strategy:?}: plugins see none of it");
        assert_eq!(informer.store().len(), 4, "{strategy:?}");
        assert_eq!(
            initial_requests(&dev, strategy),
            1,
            "{strategy:?}: no relist"
        );
    }
}

/// Where wasmformer differs from client-go on purpose (README, "WatchEvent semantics"): after a
/// relist client-go calls OnUpdate with old == new for every unchanged object, and reports an
/// object deleted and recreated while the watch was down as one OnUpdate.
#[tokio::test]
async fn across_a_relist_unchanged_objects_are_silent_and_a_recreated_one_is_a_tombstone_and_an_add()
 {
    for strategy in STRATEGIES {
        let dev = dev_cluster().await;
        let [a, c] = ["a", "c"].map(|name| create_pod(&dev, name, "web", "n1"));
        let factory = InformerFactory::new(dev.client().unwrap(), settings(strategy));
        let recorder = Arc::new(Recorder::default());
        let subscription = factory
            .subscribe(
                InformerKey::new(pods(), true),
                &StoreOptions::default(),
                recorder.clone(),
            )
            .unwrap();
        recorder.wait_for("synced").await;
        let old_uid = subscription
            .informer()
            .store()
            .get("default", "c")
            .unwrap()
            .uid()
            .to_owned();

        let faults = dev.faults();
        faults.pause();
        faults.close_watches();
        delete_pod(&dev, "c");
        let recreated = create_pod(&dev, "c", "web", "n1");
        faults.compact();
        faults.resume();

        let lines = recorder.wait_for(&format!("add c@{recreated}")).await;
        let expected = [
            format!("add a@{a}"),
            format!("add c@{c}"),
            "synced".into(),
            format!("delete c@{c} unknown"),
            format!("add c@{recreated}"),
        ];
        assert_eq!(
            lines, expected,
            "{strategy:?}: nothing for a; c is a tombstone and an add, not an update"
        );
        assert_eq!(subscription.informer().status().relists, 1, "{strategy:?}");
        assert_ne!(
            subscription
                .informer()
                .store()
                .get("default", "c")
                .unwrap()
                .uid(),
            old_uid,
            "{strategy:?}"
        );
    }
}
