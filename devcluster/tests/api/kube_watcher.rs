//! kube-rs `watcher` and raw watches against the dev cluster: initial sync, live events,
//! re-watch without relist after closed watches, 410 and relist after compaction, streaming
//! lists, selector pushdown, bookmarks and timeouts.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams},
    core::PartialObjectMeta,
    runtime::watcher::{self, Event},
};
use serde_json::json;
use tokio::sync::mpsc;
use wasmformer_devcluster::{DevCluster, DevClusterConfig, ObjectKey, ResourceId, Verb};

use crate::common::{start, start_with, within};

/// A watcher event reduced to what the tests compare.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Init,
    InitApply(String),
    InitDone,
    Apply(String, String),
    Delete(String),
    Error(u16),
}

fn seen(event: Result<Event<ConfigMap>, watcher::Error>) -> Seen {
    match event {
        Ok(Event::Init) => Seen::Init,
        Ok(Event::InitApply(cm)) => Seen::InitApply(cm.name_any()),
        Ok(Event::InitDone) => Seen::InitDone,
        Ok(Event::Apply(cm)) => {
            let value = cm
                .data
                .as_ref()
                .and_then(|d| d.get("v"))
                .cloned()
                .unwrap_or_default();
            Seen::Apply(cm.name_any(), value)
        }
        Ok(Event::Delete(cm)) => Seen::Delete(cm.name_any()),
        Err(watcher::Error::WatchError(status)) => Seen::Error(status.code),
        Err(other) => panic!("unexpected watcher error: {other}"),
    }
}

/// Runs a watcher in the background and hands its events over a channel.
struct Feed {
    events: mpsc::UnboundedReceiver<Seen>,
}

impl Feed {
    fn start(api: Api<ConfigMap>, config: watcher::Config) -> Self {
        let (tx, events) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut stream = watcher::watcher(api, config).boxed();
            while let Some(event) = stream.next().await {
                if tx.send(seen(event)).is_err() {
                    break;
                }
            }
        });
        Self { events }
    }

    async fn next(&mut self) -> Seen {
        within("a watcher event", self.events.recv())
            .await
            .expect("watcher runs")
    }

    /// Consumes one initial sync and returns the initially listed names.
    async fn synced(&mut self) -> Vec<String> {
        assert_eq!(self.next().await, Seen::Init);
        let mut names = Vec::new();
        loop {
            match self.next().await {
                Seen::InitApply(name) => names.push(name),
                Seen::InitDone => return names,
                other => panic!("unexpected event during sync: {other:?}"),
            }
        }
    }
}

fn cm(name: &str, v: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}}, "data": {"v": v}})
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new(ResourceId::core("configmaps"), Some("default"), name)
}

async fn seeded() -> (DevCluster, Api<ConfigMap>) {
    let dev = start().await;
    for name in ["a", "b", "c"] {
        dev.store().create_object(cm(name, "0")).unwrap();
    }
    let api = Api::namespaced(dev.client().unwrap(), "default");
    (dev, api)
}

#[tokio::test]
async fn watcher_syncs_then_follows_a_scripted_sequence() -> anyhow::Result<()> {
    let (dev, api) = seeded().await;
    let mut feed = Feed::start(api.clone(), watcher::Config::default());
    assert_eq!(feed.synced().await, vec!["a", "b", "c"]);

    api.create(
        &PostParams::default(),
        &serde_json::from_value(cm("d", "1"))?,
    )
    .await?;
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await?;
    api.delete("b", &DeleteParams::default()).await?;
    dev.store().modify(&key("c"), Default::default(), |o| {
        o["data"]["v"] = json!("3")
    })?;
    assert_eq!(feed.next().await, Seen::Apply("d".into(), "1".into()));
    assert_eq!(feed.next().await, Seen::Apply("a".into(), "2".into()));
    assert_eq!(feed.next().await, Seen::Delete("b".into()));
    assert_eq!(feed.next().await, Seen::Apply("c".into(), "3".into()));

    let log = dev.request_log();
    assert_eq!(log.count(Verb::List, "configmaps"), 1);
    assert_eq!(log.count(Verb::Watch, "configmaps"), 1);
    dev.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn closed_watches_resume_from_the_last_version_without_relisting() -> anyhow::Result<()> {
    let (dev, api) = seeded().await;
    let mut feed = Feed::start(api, watcher::Config::default());
    feed.synced().await;
    dev.store().modify(&key("a"), Default::default(), |o| {
        o["data"]["v"] = json!("1")
    })?;
    assert_eq!(feed.next().await, Seen::Apply("a".into(), "1".into()));
    let last_rv = dev.store().resource_version();

    let log = dev.request_log();
    let before = log.last_seq();
    dev.faults().close_watches();
    let rewatch = within(
        "the re-watch",
        log.wait_for(before, |r| r.is(Verb::Watch, "configmaps")),
    )
    .await;
    assert_eq!(
        rewatch.param("resourceVersion"),
        Some(last_rv.to_string().as_str())
    );
    dev.store().create_object(cm("e", "5"))?;
    assert_eq!(feed.next().await, Seen::Apply("e".into(), "5".into()));
    assert_eq!(
        log.count_since(before, Verb::List, "configmaps"),
        0,
        "no relist after a closed watch"
    );
    dev.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn compaction_makes_the_watcher_relist_after_410() -> anyhow::Result<()> {
    let (dev, api) = seeded().await;
    let mut feed = Feed::start(api, watcher::Config::default());
    feed.synced().await;
    let log = dev.request_log();
    let before = log.last_seq();

    // Hold the re-watch while the store moves on and the history is compacted.
    dev.faults().pause();
    dev.faults().close_watches();
    within(
        "the held re-watch",
        log.wait_for(before, |r| r.is(Verb::Watch, "configmaps")),
    )
    .await;
    dev.store().create_object(cm("e", "1"))?;
    dev.store().delete(&key("a"), &Default::default())?;
    dev.faults().compact();
    dev.faults().resume();

    assert_eq!(feed.next().await, Seen::Error(410));
    let mut names = feed.synced().await;
    names.sort();
    assert_eq!(names, vec!["b", "c", "e"]);
    assert_eq!(
        log.count_since(before, Verb::List, "configmaps"),
        1,
        "the watcher relisted"
    );
    dev.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn streaming_list_syncs_from_a_single_watch() -> anyhow::Result<()> {
    let (dev, api) = seeded().await;
    let mut feed = Feed::start(api, watcher::Config::default().streaming_lists());
    assert_eq!(feed.synced().await, vec!["a", "b", "c"]);
    dev.store().delete(&key("c"), &Default::default())?;
    assert_eq!(feed.next().await, Seen::Delete("c".into()));

    let log = dev.request_log();
    assert_eq!(log.count(Verb::List, "configmaps"), 0);
    let watch = log
        .records()
        .into_iter()
        .find(|r| r.is(Verb::Watch, "configmaps"))
        .unwrap();
    assert_eq!(watch.param("sendInitialEvents"), Some("true"));
    assert_eq!(watch.param("resourceVersionMatch"), Some("NotOlderThan"));
    dev.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn selectors_are_pushed_down_and_objects_leaving_them_are_deleted() -> anyhow::Result<()> {
    let (dev, api) = seeded().await;
    dev.store().create_object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": "default"}}))?;
    let mut feed = Feed::start(
        api.clone(),
        watcher::Config::default()
            .labels("app=web")
            .fields("metadata.name!=c"),
    );
    assert_eq!(feed.synced().await, vec!["a", "b"]);
    let log = dev.request_log();
    for verb in [Verb::List, Verb::Watch] {
        let record = within("the request", log.wait_for(0, |r| r.is(verb, "configmaps"))).await;
        assert_eq!(record.param("labelSelector"), Some("app=web"));
        assert_eq!(record.param("fieldSelector"), Some("metadata.name!=c"));
    }
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await?;
    assert_eq!(feed.next().await, Seen::Delete("a".into()));
    api.patch(
        "other",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}, "data": {"v": "9"}})),
    )
    .await?;
    assert_eq!(feed.next().await, Seen::Apply("other".into(), "9".into()));
    dev.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn raw_watches_from_old_versions_get_410_and_bookmarks_flow() -> anyhow::Result<()> {
    let dev =
        start_with(DevClusterConfig::default().bookmark_interval(Duration::from_millis(100))).await;
    dev.store().create_object(cm("a", "0"))?;
    let api: Api<ConfigMap> = Api::namespaced(dev.client()?, "default");
    let old = dev.store().resource_version() - 1;
    dev.store().create_object(cm("b", "0"))?;
    dev.faults().compact();
    let mut expired = api
        .watch(&WatchParams::default(), &old.to_string())
        .await?
        .boxed();
    match within("the error event", expired.try_next()).await? {
        Some(WatchEvent::Error(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"))
        }
        other => panic!("expected a 410 error event, got {other:?}"),
    }
    assert!(
        within("the stream end", expired.try_next())
            .await?
            .is_none()
    );

    let current = dev.store().resource_version();
    let mut live = api
        .watch(&WatchParams::default(), &current.to_string())
        .await?
        .boxed();
    match within("a bookmark", live.try_next()).await? {
        Some(WatchEvent::Bookmark(bookmark)) => {
            assert_eq!(bookmark.metadata.resource_version, current.to_string())
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }
    let short = api
        .watch(
            &WatchParams::default().timeout(1).disable_bookmarks(),
            &current.to_string(),
        )
        .await?
        .boxed();
    let events: Vec<_> =
        within("the timed-out watch to end", short.try_collect::<Vec<_>>()).await?;
    assert!(events.is_empty());
    dev.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn metadata_only_watchers_get_partial_object_metadata() -> anyhow::Result<()> {
    let (dev, _) = seeded().await;
    let api: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(dev.client()?, "default");
    let listed = api.list(&Default::default()).await?;
    assert_eq!(listed.items.len(), 3);
    assert_eq!(
        listed.items[0].types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    let mut stream = watcher::watcher(api, watcher::Config::default().streaming_lists()).boxed();
    let mut initial = 0;
    loop {
        match within("a metadata event", stream.try_next())
            .await?
            .expect("watching")
        {
            Event::InitApply(object) => {
                assert_eq!(object.types.as_ref().unwrap().api_version, "meta.k8s.io/v1");
                initial += 1;
            }
            Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(initial, 3);
    dev.store().modify(&key("a"), Default::default(), |o| {
        o["metadata"]["labels"]["x"] = json!("y")
    })?;
    match within("the change", stream.try_next())
        .await?
        .expect("watching")
    {
        Event::Apply(object) => {
            assert_eq!(object.types.unwrap().kind, "PartialObjectMetadata");
            assert_eq!(object.metadata.labels.unwrap()["x"], "y");
        }
        other => panic!("expected an apply, got {other:?}"),
    }
    dev.shutdown().await?;
    Ok(())
}
