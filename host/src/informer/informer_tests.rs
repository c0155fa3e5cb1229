//! A running informer fed by scripted watcher events: fan-out, subscription atomicity, lifetime,
//! status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

use super::*;
use crate::cache::IndexSpec;
use crate::informer::spec::InformerKey;
use crate::informer::watch::value_stream;

fn key() -> InformerKey {
    InformerKey::new(
        kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        true,
    )
}

fn pod(name: &str, rv: u64) -> Value {
    json!({"metadata": {"namespace": "default", "name": name, "uid": format!("uid-{name}"), "resourceVersion": rv.to_string()},
        "spec": {"nodeName": format!("n{}", rv % 3)}})
}

type Sender = UnboundedSender<watcher::Result<WatchEvent<Value>>>;

/// An informer fed through a channel.
fn informer(options: StoreOptions) -> (Arc<Informer>, Sender) {
    let (tx, rx) = unbounded_channel();
    let events =
        futures::stream::unfold(rx, |mut rx| async { rx.recv().await.map(|e| (e, rx)) }).boxed();
    (
        Informer::from_stream(key(), options, value_stream(events)).unwrap(),
        tx,
    )
}

/// A sink that records deltas and lets a test await a condition on them.
#[derive(Default)]
struct Recorder {
    deltas: Mutex<Vec<Event>>,
    pushed: tokio::sync::watch::Sender<usize>,
}

impl EventSink for Recorder {
    fn push(&self, delta: Event) {
        let len = {
            let mut deltas = self.deltas.lock().unwrap();
            deltas.push(delta);
            deltas.len()
        };
        self.pushed.send_replace(len);
    }
}

impl Recorder {
    fn deltas(&self) -> Vec<Event> {
        self.deltas.lock().unwrap().clone()
    }

    async fn wait_for(&self, done: impl Fn(&[Event]) -> bool) {
        let mut pushed = self.pushed.subscribe();
        pushed
            .wait_for(|_| done(&self.deltas.lock().unwrap()))
            .await
            .unwrap();
    }

    async fn wait_for_add(&self, name: &str) {
        self.wait_for(|ds| {
            ds.iter()
                .any(|d| matches!(d, Event::Add { obj, .. } if obj.name() == name))
        })
        .await;
    }
}

fn render(deltas: &[Event]) -> Vec<String> {
    deltas
        .iter()
        .map(|d| match d.object() {
            Some(obj) => format!("{} {}@{}", d.kind(), obj.name(), obj.resource_version()),
            None => d.kind().to_owned(),
        })
        .collect()
}

fn list(tx: &Sender, names: &[&str]) {
    tx.send(Ok(WatchEvent::Init)).unwrap();
    for name in names {
        tx.send(Ok(WatchEvent::InitApply(pod(name, 1)))).unwrap();
    }
    tx.send(Ok(WatchEvent::InitDone)).unwrap();
}

#[tokio::test]
async fn a_late_subscriber_gets_the_store_then_synced_then_live_deltas() {
    let (informer, tx) = informer(StoreOptions::default());
    let early = Arc::new(Recorder::default());
    let _early_sub = informer.subscribe(early.clone());
    list(&tx, &["b", "a"]);
    informer.wait_synced().await;
    assert_eq!(render(&early.deltas()), ["add b@1", "add a@1", "synced"]);

    let late = Arc::new(Recorder::default());
    let _late_sub = informer.subscribe(late.clone());
    tx.send(Ok(WatchEvent::Apply(pod("c", 2)))).unwrap();
    late.wait_for_add("c").await;
    assert_eq!(
        render(&late.deltas()),
        ["add a@1", "add b@1", "synced", "add c@2"]
    );
    assert!(
        late.deltas()
            .iter()
            .take(2)
            .all(|d| matches!(d, Event::Add { initial: true, .. }))
    );
    assert!(matches!(
        late.deltas()[3],
        Event::Add { initial: false, .. }
    ));
}

#[tokio::test]
async fn a_sink_reading_the_store_sees_the_event_applied() {
    struct Checker(Arc<crate::cache::Store>, Arc<Recorder>);
    impl EventSink for Checker {
        fn push(&self, delta: Event) {
            if let Event::Add { obj, .. } | Event::Update { new: obj, .. } = &delta {
                let stored = self
                    .0
                    .get(obj.namespace(), obj.name())
                    .expect("store has the object");
                assert_eq!(stored.resource_version(), obj.resource_version());
            }
            if let Event::Delete { obj, .. } = &delta {
                assert!(self.0.get(obj.namespace(), obj.name()).is_none());
            }
            self.1.push(delta);
        }
    }
    let (informer, tx) = informer(StoreOptions::default());
    let recorder = Arc::new(Recorder::default());
    let _sub = informer.subscribe(Arc::new(Checker(informer.store(), recorder.clone())));
    list(&tx, &["a"]);
    tx.send(Ok(WatchEvent::Apply(pod("a", 2)))).unwrap();
    tx.send(Ok(WatchEvent::Delete(pod("a", 3)))).unwrap();
    tx.send(Ok(WatchEvent::Apply(pod("z", 4)))).unwrap();
    recorder.wait_for_add("z").await;
    assert_eq!(
        render(&recorder.deltas()),
        ["add a@1", "synced", "update a@2", "delete a@3", "add z@4"]
    );
}

/// Applies a subscriber's events in order, failing on a gap or a duplicate; returns the final content.
fn apply_all(deltas: &[Event]) -> HashMap<String, String> {
    let mut objects: HashMap<String, String> = HashMap::new();
    let mut synced = 0;
    for delta in deltas {
        match delta {
            Event::Add { obj, initial } => {
                assert_eq!(
                    *initial,
                    synced == 0,
                    "initial adds come before Synced, live ones after"
                );
                let previous =
                    objects.insert(obj.name().to_owned(), obj.resource_version().to_owned());
                assert!(previous.is_none(), "duplicate add of {}", obj.name());
            }
            Event::Update { old, new } => {
                let known =
                    objects.insert(new.name().to_owned(), new.resource_version().to_owned());
                assert_eq!(
                    known.as_deref(),
                    Some(old.resource_version()),
                    "gap before update of {}",
                    new.name()
                );
            }
            Event::Delete { obj, .. } => {
                assert!(
                    objects.remove(obj.name()).is_some(),
                    "delete of unknown {}",
                    obj.name()
                );
            }
            Event::Synced => synced += 1,
        }
    }
    assert_eq!(synced, 1, "Synced exactly once");
    objects
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribing_during_a_stream_of_changes_has_no_gap_and_no_duplicate() {
    let (informer, tx) = informer(StoreOptions::default());
    let initial: Vec<String> = (0..50).map(|i| format!("p{i:02}")).collect();
    list(&tx, &initial.iter().map(String::as_str).collect::<Vec<_>>());

    // A producer applies, updates and deletes in chunks; a subscriber joins after each chunk is
    // sent, while the informer is still applying it.
    let (go, chunk_sent) = std::sync::mpsc::sync_channel::<()>(0);
    let producer = std::thread::spawn(move || {
        let mut exists: HashMap<String, bool> = initial.iter().map(|n| (n.clone(), true)).collect();
        for rv in 2..3000u64 {
            let name = format!("p{:02}", rv % 70);
            let event = if rv % 7 == 0 && exists.get(&name) == Some(&true) {
                exists.insert(name.clone(), false);
                WatchEvent::Delete(pod(&name, rv))
            } else {
                exists.insert(name.clone(), true);
                WatchEvent::Apply(pod(&name, rv))
            };
            tx.send(Ok(event)).unwrap();
            if rv % 100 == 0 {
                let _ = go.send(());
            }
        }
        tx.send(Ok(WatchEvent::Apply(pod("done", 5000)))).unwrap();
        tx
    });
    let mut subscribers = Vec::new();
    let mut chunk = 0u64;
    while chunk_sent.recv().is_ok() {
        // Join once the informer has applied something of this chunk: the producer holds the
        // next chunk until this one is taken, so each subscriber joins later than the one before,
        // however slowly the informer runs on a loaded machine.
        chunk += 1;
        let first_of_chunk = 100 * (chunk - 1) + 2;
        while !informer
            .store()
            .snapshot()
            .iter()
            .any(|o| o.resource_version().parse::<u64>().unwrap() >= first_of_chunk)
        {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let recorder = Arc::new(Recorder::default());
        subscribers.push((informer.subscribe(recorder.clone()), recorder));
    }
    let _tx = producer.join().unwrap();
    let store: HashMap<String, String> = {
        let (_, last) = subscribers.last().unwrap();
        last.wait_for_add("done").await;
        informer
            .store()
            .snapshot()
            .iter()
            .map(|o| (o.name().to_owned(), o.resource_version().to_owned()))
            .collect()
    };
    for (_, recorder) in &subscribers {
        recorder.wait_for_add("done").await;
        assert_eq!(apply_all(&recorder.deltas()), store);
    }
    let first_len = subscribers[0].1.deltas().len();
    assert!(
        subscribers
            .iter()
            .any(|(_, r)| r.deltas().len() != first_len),
        "subscribers joined at different points"
    );
}

#[tokio::test]
async fn dropping_the_last_handle_stops_the_task_and_frees_the_store() {
    let (informer, tx) = informer(StoreOptions::default());
    list(&tx, &["a"]);
    informer.wait_synced().await;
    let recorder = Arc::new(Recorder::default());
    let subscription = informer.subscribe(recorder.clone());
    let lister = informer.lister();
    let store = Arc::downgrade(&informer.store());
    drop(informer);
    drop(subscription);
    assert!(lister.has_synced(), "the lister keeps the informer running");
    tx.send(Ok(WatchEvent::Apply(pod("b", 2)))).unwrap();
    assert_eq!(
        render(&recorder.deltas()),
        ["add a@1", "synced"],
        "no delta after unsubscribing"
    );

    drop(lister);
    tx.closed().await; // the task, which owns the receiver, is gone
    assert!(store.upgrade().is_none(), "store freed");
}

#[tokio::test(start_paused = true)]
async fn status_counts_events_relists_and_errors() {
    let (informer, tx) = informer(StoreOptions::default());
    list(&tx, &["a", "b"]);
    let gone = kube::core::Status::failure("too old resource version", "Expired").with_code(410);
    tx.send(Err(watcher::Error::WatchError(Box::new(gone))))
        .unwrap();
    list(&tx, &["a"]);
    tx.send(Ok(WatchEvent::Apply(pod("c", 2)))).unwrap();
    let recorder = Arc::new(Recorder::default());
    let _sub = informer.subscribe(recorder.clone());
    recorder.wait_for_add("c").await;
    let status = informer.status();
    assert!(status.synced && status.synced_at.is_some());
    assert_eq!(
        (status.events, status.relists, status.errors, status.objects),
        (4, 1, 1, 2)
    );
    // What the metrics show: two lists, the second after a 410; b's tombstone; a unchanged.
    assert_eq!((status.lists, status.relists_expired), (2, 1));
    assert_eq!(
        status.emitted,
        crate::informer::EventCounts {
            added: 3,
            updated: 0,
            deleted: 1
        }
    );
    assert!(status.last_event_at.is_some());
    assert!(
        status
            .last_error
            .unwrap()
            .message
            .starts_with("watch of pods in all namespaces expired (410 Gone)")
    );
}

#[tokio::test]
async fn ensure_options_adds_indexes_that_listers_follow() {
    let by_node = IndexSpec {
        name: "by-node".into(),
        path: "spec.nodeName".parse().unwrap(),
    };
    let (informer, tx) = informer(StoreOptions {
        indexes: vec![by_node.clone()],
        ..StoreOptions::default()
    });
    let lister = informer.lister();
    list(&tx, &["a"]);
    informer.wait_synced().await;
    assert!(lister.store().by_index("by-uid", "uid-a").is_err());

    let by_uid = IndexSpec {
        name: "by-uid".into(),
        path: "metadata.uid".parse().unwrap(),
    };
    informer
        .ensure_options(&StoreOptions {
            indexes: vec![by_uid, by_node],
            ..StoreOptions::default()
        })
        .unwrap();
    assert_eq!(lister.store().by_index("by-uid", "uid-a").unwrap().len(), 1);
    assert_eq!(lister.store().by_index("by-node", "n1").unwrap().len(), 1);

    let clash = IndexSpec {
        name: "by-uid".into(),
        path: "metadata.name".parse().unwrap(),
    };
    let err = informer
        .ensure_options(&StoreOptions {
            indexes: vec![clash],
            ..StoreOptions::default()
        })
        .unwrap_err();
    assert!(matches!(err, Error::IndexConflict { .. }));
    let err = informer
        .ensure_options(&StoreOptions {
            indexes: vec![],
            strip_managed_fields: false,
        })
        .unwrap_err();
    assert!(matches!(err, Error::ManagedFieldsStripped { .. }));
}

/// The virtual instants at which the informer asked a scripted watch for each item.
async fn poll_times(script: Vec<watcher::Result<WatchEvent<Value>>>) -> Vec<tokio::time::Instant> {
    let times = Arc::new(Mutex::new(Vec::new()));
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let recorded = times.clone();
    let events = futures::stream::unfold(
        (script.into_iter(), Some(done_tx)),
        move |(mut script, mut done)| {
            recorded.lock().unwrap().push(tokio::time::Instant::now());
            let item = script.next();
            if item.is_none() {
                done.take().map(|done| done.send(()));
            }
            async move { item.map(|item| (item, (script, done))) }
        },
    )
    .boxed();
    let _informer =
        Informer::from_stream(key(), StoreOptions::default(), value_stream(events)).unwrap();
    done_rx.await.unwrap();
    Arc::try_unwrap(times).unwrap().into_inner().unwrap()
}

fn gone() -> watcher::Result<WatchEvent<Value>> {
    let status = kube::core::Status::failure("too old resource version", "Expired").with_code(410);
    Err(watcher::Error::WatchError(Box::new(status)))
}

fn listed(name: &str, rv: u64) -> Vec<watcher::Result<WatchEvent<Value>>> {
    vec![
        Ok(WatchEvent::Init),
        Ok(WatchEvent::InitApply(pod(name, rv))),
        Ok(WatchEvent::InitDone),
    ]
}

#[tokio::test(start_paused = true)]
async fn a_single_gone_relists_at_once_and_a_storm_backs_off() {
    // list, live event, 410, relist, 410 (no live event between), relist.
    let mut script = listed("a", 1);
    script.push(Ok(WatchEvent::Apply(pod("a", 2))));
    script.push(gone());
    script.extend(listed("a", 3));
    script.push(gone());
    script.extend(listed("a", 4));
    let times = poll_times(script).await;
    let first_gone = 4;
    let relist = |gone: usize| times[gone + 1] - times[gone];
    assert_eq!(
        relist(first_gone),
        Duration::ZERO,
        "the relist after a single 410 waits for nothing"
    );
    assert!(
        relist(first_gone + 4) >= Duration::from_millis(800),
        "a second 410 without a live event backs off: {:?}",
        relist(first_gone + 4)
    );
}

#[tokio::test(start_paused = true)]
async fn a_gone_after_failures_relists_at_once() {
    // Three failures (a server restarting) grow the backoff; then the server answers 410.
    let failure = || {
        let status =
            kube::core::Status::failure("etcd unavailable", "InternalError").with_code(500);
        Err(watcher::Error::WatchError(Box::new(status)))
    };
    let mut script = listed("a", 1);
    script.extend([failure(), failure(), failure(), gone()]);
    script.extend(listed("a", 2));
    let times = poll_times(script).await;
    let waits: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        waits[3..6].iter().all(|w| *w >= Duration::from_millis(800)),
        "{waits:?}"
    );
    assert_eq!(waits[6], Duration::ZERO, "{waits:?}");
}

#[tokio::test]
async fn a_completed_list_asks_for_the_freed_heap_to_be_given_back() {
    let (informer, tx) = informer(StoreOptions::default());
    let recorder = Arc::new(Recorder::default());
    let _sub = informer.subscribe(recorder.clone());
    let before = crate::trim::requests_on_this_thread();
    list(&tx, &["a", "b"]);
    informer.wait_synced().await;
    assert_eq!(crate::trim::requests_on_this_thread(), before + 1);

    // A live event frees nothing worth a trim; a relist does again.
    tx.send(Ok(WatchEvent::Apply(pod("c", 2)))).unwrap();
    recorder.wait_for_add("c").await;
    assert_eq!(crate::trim::requests_on_this_thread(), before + 1);
    list(&tx, &["a", "b", "c"]);
    // Nothing changed, so the relist delivers nothing to wait for: poll.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while crate::trim::requests_on_this_thread() == before + 1
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(crate::trim::requests_on_this_thread(), before + 2);
}
