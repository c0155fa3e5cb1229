//! The factory against an in-process API server (`fake_api`): sharing, lifetime, the list/watch
//! protocol as kube's watcher drives it, errors and backoff, streaming lists.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kube::discovery::ApiResource;
use serde_json::json;

use super::*;
use crate::cache::IndexSpec;
use crate::informer::fake_api::{self, Reply, event, initial_events_end, list, pod, status};
use crate::informer::{Delta, Error, ListStrategy};

fn pods() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
}

fn configmaps() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

fn settings(list_strategy: ListStrategy) -> WatchSettings {
    WatchSettings { list_strategy, ..WatchSettings::default() }
}

/// Records deltas as `add a@1`, `update c@15`, `delete b@10 unknown`, `synced`.
#[derive(Default)]
struct Recorder {
    lines: std::sync::Mutex<Vec<String>>,
    pushed: tokio::sync::watch::Sender<usize>,
}

impl DeltaSink for Recorder {
    fn push(&self, delta: Delta) {
        let line = match &delta {
            Delta::Delete { obj, final_state_unknown: true } => format!("delete {}@{} unknown", obj.name(), obj.resource_version()),
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
    async fn wait_for(&self, line: &str) -> Vec<String> {
        let mut pushed = self.pushed.subscribe();
        pushed.wait_for(|_| self.lines.lock().unwrap().iter().any(|l| l == line)).await.unwrap();
        self.lines.lock().unwrap().clone()
    }
}

fn is_watch(target: &str) -> bool {
    target.contains("watch=true")
}

/// A server whose lists return nothing and whose watches stay open.
fn quiet_server() -> (kube::Client, fake_api::RequestLog) {
    fake_api::client(|target| if is_watch(target) { Reply::Watch(vec![], true) } else { list(vec![], "1") })
}

#[tokio::test]
async fn equal_keys_share_one_informer_until_the_last_handle_goes() {
    let (client, _) = quiet_server();
    let factory = InformerFactory::new(client, settings(ListStrategy::List));
    let key = InformerKey::new(pods(), true).namespace("default");
    let a = factory.informer(key.clone(), &StoreOptions::default()).unwrap();
    let b = factory.informer(key.clone().labels(" "), &StoreOptions::default()).unwrap();
    assert!(Arc::ptr_eq(&a, &b), "an empty selector is no selector: same key");
    let other = factory.informer(key.clone().namespace("prod"), &StoreOptions::default()).unwrap();
    assert!(!Arc::ptr_eq(&a, &other));
    assert_eq!(factory.statuses().len(), 2);

    let lister = factory.store(&key).unwrap();
    let subscription = a.subscribe(Arc::new(Recorder::default()));
    drop((a, b));
    assert!(factory.get(&key).is_some(), "the subscription and the lister keep it running");
    drop(subscription);
    assert!(factory.get(&key).is_some(), "the lister keeps it running");
    let store = Arc::downgrade(&lister.store());
    drop(lister);
    assert!(factory.get(&key).is_none(), "stopped with its last handle");
    assert_eq!(factory.statuses().len(), 1);
    tokio::task::yield_now().await; // let the runtime drop the aborted task
    assert!(store.upgrade().is_none(), "its store is freed");
    assert!(factory.store(&key).is_none());
}

#[tokio::test]
async fn store_options_of_every_user_are_merged() {
    let (client, _) = quiet_server();
    let factory = InformerFactory::new(client, settings(ListStrategy::List));
    let key = InformerKey::new(pods(), true);
    let index = |name: &str, path: &str| IndexSpec { name: name.into(), path: path.parse().unwrap() };
    let first = StoreOptions { indexes: vec![index("by-node", "spec.nodeName")], ..StoreOptions::default() };
    let second = StoreOptions { indexes: vec![index("by-owner", "metadata.ownerReferences[*].uid")], ..StoreOptions::default() };
    let lister = factory.lister(key.clone(), &first).unwrap();
    let _informer = factory.informer(key.clone(), &second).unwrap();
    let names: Vec<_> = lister.store().indexes().iter().map(|i| i.name.clone()).collect();
    assert_eq!(names, ["by-node", "by-owner"]);
    let clash = StoreOptions { indexes: vec![index("by-node", "status.hostIP")], ..StoreOptions::default() };
    assert!(matches!(factory.informer(key, &clash), Err(Error::IndexConflict { .. })));
}

#[tokio::test]
async fn syncs_then_delivers_live_changes_with_selectors_pushed_down() {
    let (client, log) = fake_api::client(|target| {
        if is_watch(target) {
            let mut a = pod("a", "11");
            a["spec"]["nodeName"] = json!("n2");
            Reply::Watch(vec![event("MODIFIED", a), event("ADDED", pod("c", "12")), event("DELETED", pod("b", "13"))], true)
        } else {
            list(vec![pod("a", "10"), pod("b", "10")], "10")
        }
    });
    let factory = InformerFactory::new(client, settings(ListStrategy::List));
    let key = InformerKey::new(pods(), true).namespace("default").labels("app=web").fields("spec.nodeName=n1");
    let recorder = Arc::new(Recorder::default());
    let _sub = factory.subscribe(key.clone(), &StoreOptions::default(), recorder.clone()).unwrap();
    let lines = recorder.wait_for("delete b@13").await;
    assert_eq!(lines, ["add a@10", "add b@10", "synced", "update a@11", "add c@12", "delete b@13"]);
    let informer = factory.get(&key).unwrap();
    assert_eq!(informer.status().list_strategy, Some(ListStrategy::List));
    assert_eq!(informer.store().get("default", "a").unwrap().resource_version(), "11");

    let requests = log.all();
    let list_request = requests.iter().find(|r| !is_watch(r)).unwrap();
    assert!(list_request.starts_with("GET /api/v1/namespaces/default/pods?"), "{list_request}");
    for expected in ["labelSelector=app%3Dweb", "fieldSelector=spec.nodeName%3Dn1", "limit=500"] {
        assert!(list_request.contains(expected), "{list_request} lacks {expected}");
    }
    let watch_request = requests.iter().find(|r| is_watch(r)).unwrap();
    for expected in ["labelSelector=app%3Dweb", "fieldSelector=spec.nodeName%3Dn1", "allowWatchBookmarks=true", "resourceVersion=10"] {
        assert!(watch_request.contains(expected), "{watch_request} lacks {expected}");
    }
}

#[tokio::test]
async fn a_closed_watch_resumes_from_its_resource_version_without_relisting() {
    let watches = AtomicUsize::new(0);
    let (client, log) = fake_api::client(move |target| {
        if !is_watch(target) {
            return list(vec![pod("a", "10")], "10");
        }
        match watches.fetch_add(1, Ordering::SeqCst) {
            0 => Reply::Watch(vec![event("ADDED", pod("c", "12"))], false), // closed cleanly
            // The server repeats the last event on the new watch.
            _ => Reply::Watch(vec![event("ADDED", pod("c", "12")), event("ADDED", pod("d", "13"))], true),
        }
    });
    let factory = InformerFactory::new(client, settings(ListStrategy::List));
    let recorder = Arc::new(Recorder::default());
    let _sub = factory.subscribe(InformerKey::new(pods(), true), &StoreOptions::default(), recorder.clone()).unwrap();
    let lines = recorder.wait_for("add d@13").await;
    assert_eq!(lines, ["add a@10", "synced", "add c@12", "add d@13"]);
    assert_eq!(log.count("watch=true"), 2);
    assert_eq!(log.all().iter().filter(|r| !is_watch(r)).count(), 1, "no relist: {:?}", log.all());
    assert!(log.all()[2].contains("resourceVersion=12"), "{:?}", log.all());
}

#[tokio::test(start_paused = true)]
async fn gone_relists_and_delivers_tombstones_before_the_relists_changes() {
    let lists = AtomicUsize::new(0);
    let (client, log) = fake_api::client(move |target| {
        if is_watch(target) {
            return if target.contains("resourceVersion=10&") || target.ends_with("resourceVersion=10") {
                Reply::Watch(vec![event("ERROR", status(410, "Expired", "too old resource version: 10"))], true)
            } else {
                Reply::Watch(vec![], true)
            };
        }
        match lists.fetch_add(1, Ordering::SeqCst) {
            0 => list(vec![pod("a", "10"), pod("b", "10"), pod("c", "10")], "10"),
            _ => list(vec![pod("a", "10"), pod("c", "15"), pod("d", "16")], "20"),
        }
    });
    let factory = InformerFactory::new(client, settings(ListStrategy::List));
    let recorder = Arc::new(Recorder::default());
    let subscription = factory.subscribe(InformerKey::new(pods(), true), &StoreOptions::default(), recorder.clone()).unwrap();
    let lines = recorder.wait_for("add d@16").await;
    assert_eq!(lines, ["add a@10", "add b@10", "add c@10", "synced", "delete b@10 unknown", "update c@15", "add d@16"]);
    assert_eq!(log.all().iter().filter(|r| !is_watch(r)).count(), 2);
    let status = subscription.informer().status();
    assert_eq!((status.relists, status.errors, status.objects), (1, 1, 3));
}

#[tokio::test(start_paused = true)]
async fn a_persistent_403_backs_off_exponentially_and_other_informers_keep_working() {
    let (client, log) = fake_api::client(|target| {
        if target.contains("/pods") {
            let message = "pods is forbidden: User \"system:serviceaccount:ops:wasmformer\" cannot list resource \"pods\" in API group \"\" in the namespace \"prod\"";
            return Reply::Json(403, status(403, "Forbidden", message));
        }
        if is_watch(target) { Reply::Watch(vec![], true) } else { list(vec![], "1") }
    });
    let factory = InformerFactory::new(client, settings(ListStrategy::List));
    let pods_informer = factory.informer(InformerKey::new(pods(), true).namespace("prod"), &StoreOptions::default()).unwrap();
    let configmaps_informer = factory.informer(InformerKey::new(configmaps(), true), &StoreOptions::default()).unwrap();
    configmaps_informer.wait_synced().await;

    tokio::time::sleep(Duration::from_secs(300)).await; // virtual time
    let attempts = log.count("/pods?");
    // 0.8 s doubling to 30 s (jitter adds up to 100%): at most ~15 attempts in 5 minutes; a
    // backoff reset by kube's Init marker would retry every ~1 s (~250 attempts).
    assert!((4..=16).contains(&attempts), "{attempts} LIST attempts in 300 s");
    let status = pods_informer.status();
    assert!(!status.synced);
    assert_eq!(status.errors as usize, attempts);
    assert_eq!(
        status.last_error.unwrap().message,
        "forbidden: cannot list pods in namespace \"prod\" — grant list and watch on pods to system:serviceaccount:ops:wasmformer"
    );
    assert!(configmaps_informer.status().errors == 0 && configmaps_informer.has_synced());
}

fn streaming_server(minor: u32, supports: bool) -> (kube::Client, fake_api::RequestLog) {
    fake_api::client(move |target| {
        if target.starts_with("/version") {
            return fake_api::version(minor);
        }
        if target.contains("sendInitialEvents=true") {
            if !supports {
                let message = "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled";
                return Reply::Json(422, status(422, "Invalid", message));
            }
            return Reply::Watch(vec![event("ADDED", pod("a", "5")), event("ADDED", pod("b", "6")), initial_events_end("6")], true);
        }
        if is_watch(target) { Reply::Watch(vec![], true) } else { list(vec![pod("a", "5")], "5") }
    })
}

#[tokio::test]
async fn a_server_at_1_34_gets_a_streaming_list() {
    let (client, log) = streaming_server(34, true);
    let factory = InformerFactory::new(client, settings(ListStrategy::Auto));
    let informer = factory.informer(InformerKey::new(pods(), true), &StoreOptions::default()).unwrap();
    informer.wait_synced().await;
    assert_eq!(informer.store().len(), 2);
    assert_eq!(informer.status().list_strategy, Some(ListStrategy::Streaming));
    assert_eq!(log.all().iter().filter(|r| r.contains("/pods") && !is_watch(r)).count(), 0, "{:?}", log.all());
}

#[tokio::test(start_paused = true)]
async fn a_refused_streaming_list_falls_back_to_list_for_the_whole_factory() {
    let (client, log) = streaming_server(34, false);
    let factory = InformerFactory::new(client, settings(ListStrategy::Auto));
    let informer = factory.informer(InformerKey::new(pods(), true), &StoreOptions::default()).unwrap();
    informer.wait_synced().await;
    assert_eq!(informer.status().list_strategy, Some(ListStrategy::List));
    assert_eq!(informer.store().len(), 1);
    let other = factory.informer(InformerKey::new(pods(), true).namespace("x"), &StoreOptions::default()).unwrap();
    other.wait_synced().await;
    assert_eq!(log.count("sendInitialEvents=true"), 1, "{:?}", log.all());
}

#[tokio::test]
async fn an_older_server_gets_list_and_watch() {
    let (client, log) = streaming_server(31, true);
    let factory = InformerFactory::new(client, settings(ListStrategy::Auto));
    let informer = factory.informer(InformerKey::new(pods(), true), &StoreOptions::default()).unwrap();
    informer.wait_synced().await;
    assert_eq!(informer.status().list_strategy, Some(ListStrategy::List));
    assert_eq!(log.count("sendInitialEvents=true"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_server_ignoring_send_initial_events_falls_back_after_the_timeout() {
    // Claims 1.34 but never marks the end of the initial events.
    let (client, log) = fake_api::client(|target| {
        if target.starts_with("/version") {
            return fake_api::version(34);
        }
        if is_watch(target) {
            return Reply::Watch(vec![event("ADDED", pod("a", "5"))], true);
        }
        list(vec![pod("a", "5")], "5")
    });
    let factory = InformerFactory::new(client, settings(ListStrategy::Auto));
    let informer = factory.informer(InformerKey::new(pods(), true), &StoreOptions::default()).unwrap();
    informer.wait_synced().await;
    assert_eq!(informer.status().list_strategy, Some(ListStrategy::List));
    assert_eq!(log.count("sendInitialEvents=true"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_forbidden_streaming_list_is_retried_not_mistaken_for_missing_support() {
    let (client, log) = fake_api::client(|target| {
        if target.starts_with("/version") {
            return fake_api::version(34);
        }
        Reply::Json(403, status(403, "Forbidden", "pods is forbidden: User \"u\" cannot watch resource \"pods\""))
    });
    let factory = InformerFactory::new(client, settings(ListStrategy::Auto));
    let informer = factory.informer(InformerKey::new(pods(), true), &StoreOptions::default()).unwrap();
    tokio::time::sleep(Duration::from_secs(300)).await; // virtual time, past initial_events_timeout
    assert!(log.count("sendInitialEvents=true") >= 4, "{:?}", log.all());
    assert_eq!(log.all().iter().filter(|r| r.contains("/pods") && !is_watch(r)).count(), 0, "no fallback to LIST");
    assert!(informer.status().last_error.unwrap().message.starts_with("forbidden: cannot watch pods in all namespaces"));
}

#[tokio::test]
async fn metadata_only_informers_ask_for_and_cache_partial_object_metadata() {
    let (client, log) = fake_api::client(|target| {
        if is_watch(target) {
            return Reply::Watch(vec![], true);
        }
        let item = json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {"name": "a", "namespace": "default", "uid": "u", "resourceVersion": "3"}});
        Reply::Json(200, json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": {"resourceVersion": "3"}, "items": [item]}))
    });
    let factory = InformerFactory::new(client, settings(ListStrategy::List));
    let informer = factory.informer(InformerKey::new(pods(), true).metadata_only(), &StoreOptions::default()).unwrap();
    informer.wait_synced().await;
    let obj = informer.store().get("default", "a").unwrap();
    assert_eq!(obj.body(), r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"a","namespace":"default","resourceVersion":"3","uid":"u"}}"#);
    assert!(log.all()[0].contains("as=PartialObjectMetadataList"), "{:?}", log.all());
}
