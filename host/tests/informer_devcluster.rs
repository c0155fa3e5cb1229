//! Informers against the in-process dev cluster (a real HTTP API server with fault injection):
//! sync, live changes, selectors pushed down, a closed watch resuming without a relist, and a
//! compacted history (410 Gone) relisting with tombstones first. Each scenario runs with LIST and
//! with a streaming list (the dev cluster reports 1.34 and serves `sendInitialEvents`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::discovery::ApiResource;
use serde_json::{Value, json};
use wasmformer::informer::{Delta, DeltaSink, InformerFactory, InformerKey, ListStrategy, StoreOptions, WatchSettings};
use wasmformer_devcluster::{DevCluster, DevClusterConfig, ObjectKey, Part, Preconditions, ResourceId, Verb};

const WAIT: Duration = Duration::from_secs(30);

fn pods() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
}

fn pod(name: &str, app: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}})
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new(ResourceId::core("pods"), Some("default"), name)
}

struct Dev {
    cluster: DevCluster,
}

impl Dev {
    async fn start(seed: &[(&str, &str)]) -> Self {
        let cluster = DevCluster::start(DevClusterConfig::default()).await.unwrap();
        let dev = Self { cluster };
        for (name, app) in seed {
            dev.create(name, app);
        }
        dev
    }

    fn create(&self, name: &str, app: &str) {
        self.cluster.store().create(&ResourceId::core("pods"), Some("default"), pod(name, app)).unwrap();
    }

    fn touch(&self, name: &str) {
        self.cluster.store().modify(&key(name), Part::Main, |pod| pod["metadata"]["annotations"] = json!({"touched": "yes"})).unwrap();
    }

    fn delete(&self, name: &str) {
        self.cluster.store().delete(&key(name), &Preconditions::default()).unwrap();
    }

    fn factory(&self, list_strategy: ListStrategy) -> InformerFactory {
        InformerFactory::new(self.cluster.client().unwrap(), WatchSettings { list_strategy, ..WatchSettings::default() })
    }
}

/// Records deltas as `add a`, `update c`, `delete b unknown`, `synced`.
#[derive(Default)]
struct Recorder {
    lines: Mutex<Vec<String>>,
    pushed: tokio::sync::watch::Sender<usize>,
}

impl DeltaSink for Recorder {
    fn push(&self, delta: Delta) {
        let line = match &delta {
            Delta::Delete { obj, final_state_unknown: true } => format!("delete {} unknown", obj.name()),
            d => match d.object() {
                Some(obj) => format!("{} {}", d.kind(), obj.name()),
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
    /// Waits for `line`, then returns every line after the first `synced`.
    async fn wait_for(&self, line: &str) -> Vec<String> {
        let mut pushed = self.pushed.subscribe();
        let seen = pushed.wait_for(|_| self.lines.lock().unwrap().iter().any(|l| l == line));
        tokio::time::timeout(WAIT, seen).await.unwrap_or_else(|_| panic!("no {line:?} in {:?}", self.lines.lock().unwrap())).unwrap();
        let lines = self.lines.lock().unwrap().clone();
        lines.iter().skip_while(|l| *l != "synced").skip(1).cloned().collect()
    }

    fn initial(&self) -> Vec<String> {
        self.lines.lock().unwrap().iter().take_while(|l| *l != "synced").cloned().collect()
    }
}

const STRATEGIES: [ListStrategy; 2] = [ListStrategy::List, ListStrategy::Auto];

#[tokio::test]
async fn syncs_follows_changes_and_pushes_selectors_down() {
    for strategy in STRATEGIES {
        let dev = Dev::start(&[("a", "web"), ("b", "web"), ("z", "db")]).await;
        let factory = dev.factory(strategy);
        let recorder = Arc::new(Recorder::default());
        let informer_key = InformerKey::new(pods(), true).namespace("default").labels("app=web");
        let subscription = factory.subscribe(informer_key, &StoreOptions::default(), recorder.clone()).unwrap();
        tokio::time::timeout(WAIT, subscription.informer().wait_synced()).await.unwrap();
        assert_eq!(recorder.initial(), ["add a", "add b"], "{strategy:?}");

        dev.create("c", "web");
        dev.touch("a");
        dev.delete("b");
        dev.create("y", "db");
        dev.create("end", "web");
        let live = recorder.wait_for("add end").await;
        assert_eq!(live, ["add c", "update a", "delete b", "add end"], "{strategy:?}");

        let log = dev.cluster.request_log();
        let watches: Vec<_> = log.records().into_iter().filter(|r| r.is(Verb::Watch, "pods")).collect();
        assert!(!watches.is_empty());
        assert!(watches.iter().all(|r| r.param("labelSelector") == Some("app=web")), "{watches:?}");
        let lists: Vec<_> = log.records().into_iter().filter(|r| r.is(Verb::List, "pods")).collect();
        let status = subscription.informer().status();
        match strategy {
            ListStrategy::List => {
                assert_eq!(lists.len(), 1);
                assert_eq!((lists[0].param("labelSelector"), lists[0].param("limit")), (Some("app=web"), Some("500")));
                assert_eq!(status.list_strategy, Some(ListStrategy::List));
            }
            _ => {
                assert!(lists.is_empty(), "a streaming list needs no LIST: {lists:?}");
                assert_eq!(watches[0].param("sendInitialEvents"), Some("true"));
                assert_eq!(status.list_strategy, Some(ListStrategy::Streaming));
            }
        }
        assert_eq!(subscription.informer().store().len(), 3, "a, c, end");
    }
}

#[tokio::test]
async fn a_closed_watch_resumes_without_relisting_or_duplicate_adds() {
    for strategy in STRATEGIES {
        let dev = Dev::start(&[("a", "web")]).await;
        let factory = dev.factory(strategy);
        let recorder = Arc::new(Recorder::default());
        let subscription = factory.subscribe(InformerKey::new(pods(), true), &StoreOptions::default(), recorder.clone()).unwrap();
        tokio::time::timeout(WAIT, subscription.informer().wait_synced()).await.unwrap();
        let log = dev.cluster.request_log();
        let seq = log.last_seq();

        dev.cluster.faults().close_watches();
        dev.create("d", "web");
        recorder.wait_for("add d").await;
        dev.create("e", "web");
        let live = recorder.wait_for("add e").await;

        assert_eq!(live, ["add d", "add e"], "{strategy:?}");
        assert_eq!(log.count_since(seq, Verb::List, "pods"), 0, "{strategy:?}: no relist");
        let rewatches: Vec<_> = log.since(seq).into_iter().filter(|r| r.is(Verb::Watch, "pods")).collect();
        assert!(!rewatches.is_empty());
        assert!(rewatches.iter().all(|r| r.param("sendInitialEvents").is_none() && r.param("resourceVersion").is_some()), "{rewatches:?}");
        assert_eq!(subscription.informer().status().relists, 0);
    }
}

#[tokio::test]
async fn a_compacted_history_relists_with_tombstones_first() {
    for strategy in STRATEGIES {
        let dev = Dev::start(&[("a", "web"), ("b", "web"), ("c", "web")]).await;
        let factory = dev.factory(strategy);
        let recorder = Arc::new(Recorder::default());
        let subscription = factory.subscribe(InformerKey::new(pods(), true), &StoreOptions::default(), recorder.clone()).unwrap();
        tokio::time::timeout(WAIT, subscription.informer().wait_synced()).await.unwrap();

        // The informer misses b's deletion, c's change and d's creation, and the history that
        // would replay them is gone by the time it re-watches.
        let faults = dev.cluster.faults();
        faults.pause();
        faults.close_watches();
        dev.delete("b");
        dev.touch("c");
        dev.create("d", "web");
        faults.compact();
        faults.resume();

        let live = recorder.wait_for("add d").await;
        assert_eq!(live, ["delete b unknown", "update c", "add d"], "{strategy:?}");
        let status = subscription.informer().status();
        assert_eq!((status.relists, status.objects), (1, 3), "{strategy:?}");
        assert!(status.last_error.unwrap().message.contains("410 Gone"), "{strategy:?}");
        assert_eq!(recorder.lines.lock().unwrap().iter().filter(|l| *l == "synced").count(), 1);
    }
}
