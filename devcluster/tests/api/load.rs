//! Load: 10k objects, three concurrent kube-rs watchers (two list-then-watch with 500-item
//! pages, one streaming list), then about 1000 writes per second for three seconds. Every
//! watcher must see exactly the produced sequence of changes for every object.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, ResourceExt,
    runtime::watcher::{self, Event},
};
use serde_json::json;
use tokio::{sync::watch, time::Instant};
use wasmformer_devcluster::{Deletion, ObjectKey, ResourceId, Verb, simulate::Rng};

use crate::common::{start, within};

const OBJECTS: usize = 10_000;
const RATE: u64 = 1_000;
const SECONDS: u64 = 3;

/// `(applied or deleted, resourceVersion)` per object.
type Changes = BTreeMap<String, Vec<(bool, u64)>>;

fn rv_of(cm: &ConfigMap) -> u64 {
    cm.resource_version().unwrap().parse().unwrap()
}

struct Observer {
    synced: watch::Receiver<Option<usize>>,
    reached: watch::Receiver<u64>,
    changes: Arc<Mutex<Changes>>,
}

fn observe(api: Api<ConfigMap>, config: watcher::Config) -> Observer {
    let (synced_tx, synced) = watch::channel(None);
    let (reached_tx, reached) = watch::channel(0);
    let changes = Arc::new(Mutex::new(Changes::new()));
    let sink = changes.clone();
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).boxed();
        let mut initial = 0;
        while let Some(event) = stream.next().await {
            let (name, change) = match event.expect("no watcher errors under load") {
                Event::Init => continue,
                Event::InitApply(_) => {
                    initial += 1;
                    continue;
                }
                Event::InitDone => {
                    synced_tx.send_replace(Some(initial));
                    continue;
                }
                Event::Apply(cm) => (cm.name_any(), (true, rv_of(&cm))),
                Event::Delete(cm) => (cm.name_any(), (false, rv_of(&cm))),
            };
            sink.lock().unwrap().entry(name).or_default().push(change);
            reached_tx.send_replace(change.1);
        }
    });
    Observer {
        synced,
        reached,
        changes,
    }
}

fn config_map(name: &str, seq: u64) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "load"}, "data": {"seq": seq.to_string()}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_watchers_see_every_change_in_order_under_load() {
    let dev = start().await;
    let store = dev.store().clone();
    store
        .create(
            &ResourceId::namespaces(),
            None,
            json!({"metadata": {"name": "load"}}),
        )
        .unwrap();
    let mut live: Vec<String> = (0..OBJECTS).map(|i| format!("cm-{i:05}")).collect();
    for name in &live {
        store.create_object(config_map(name, 0)).unwrap();
    }

    let api: Api<ConfigMap> = Api::namespaced(dev.client().unwrap(), "load");
    let mut observers = vec![
        observe(api.clone(), watcher::Config::default()),
        observe(api.clone(), watcher::Config::default()),
        observe(api.clone(), watcher::Config::default().streaming_lists()),
    ];
    for observer in &mut observers {
        let initial = within(
            "the initial sync",
            observer.synced.wait_for(Option::is_some),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(initial, OBJECTS);
    }

    let configmaps = ResourceId::core("configmaps");
    let key = |name: &str| ObjectKey::new(configmaps.clone(), Some("load"), name);
    let mut expected = Changes::new();
    let mut rng = Rng::new(42);
    let total = RATE * SECONDS;
    let started = Instant::now();
    for seq in 1..=total {
        // Keep to the rate: write in small bursts, then wait for the schedule.
        if seq % 10 == 0 {
            tokio::time::sleep_until(started + Duration::from_micros(seq * 1_000_000 / RATE)).await;
        }
        let roll = rng.below(100);
        let (name, change) = if roll < 5 && !live.is_empty() {
            let name = live.swap_remove(rng.below(live.len() as u64) as usize);
            let Deletion::Deleted(gone) = store.delete(&key(&name), &Default::default()).unwrap()
            else {
                panic!("no finalizers here")
            };
            (
                name,
                (
                    false,
                    gone["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap(),
                ),
            )
        } else {
            let created = roll < 10 || live.is_empty();
            let name = if created {
                format!("new-{seq}")
            } else {
                live[rng.below(live.len() as u64) as usize].clone()
            };
            let object = if created {
                live.push(name.clone());
                store.create_object(config_map(&name, seq)).unwrap()
            } else {
                store
                    .modify(&key(&name), Default::default(), |o| {
                        o["data"]["seq"] = json!(seq.to_string())
                    })
                    .unwrap()
            };
            (
                name,
                (
                    true,
                    object["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .parse()
                        .unwrap(),
                ),
            )
        };
        expected.entry(name).or_default().push(change);
    }
    let producing = started.elapsed();
    assert!(
        producing < Duration::from_secs(SECONDS * 2),
        "producing {total} changes took {producing:?}"
    );

    let last = store.resource_version();
    for (i, observer) in observers.iter_mut().enumerate() {
        within(
            "the watcher to catch up",
            observer.reached.wait_for(|rv| *rv >= last),
        )
        .await
        .unwrap();
        let seen = observer.changes.lock().unwrap();
        assert_eq!(
            seen.len(),
            expected.len(),
            "watcher {i}: objects with changes"
        );
        for (name, changes) in &expected {
            assert_eq!(
                seen.get(name),
                Some(changes),
                "watcher {i}: changes of {name}"
            );
        }
    }
    let log = dev.request_log();
    let first_pages = log
        .records()
        .iter()
        .filter(|r| r.is(Verb::List, "configmaps") && r.param("continue").is_none())
        .count();
    assert_eq!(first_pages, 2, "each list-watch watcher listed once");
    assert_eq!(
        log.count(Verb::Watch, "configmaps"),
        3,
        "each watcher watched once"
    );
    dev.shutdown().await.unwrap();
}
