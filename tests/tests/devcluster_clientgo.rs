//! The dev cluster checked by a client no one here wrote: client-go's SharedInformer (the
//! harness's `informer` program) syncs against it, receives a scripted sequence, and recovers
//! from each injected fault the way it does against a real API server.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmformer_devcluster::{
    DevCluster, DevClusterConfig, ObjectKey, Preconditions, ResourceId, Verb,
};
use wasmformer_tests::apiserver::harness_binaries;

const WAIT: Duration = Duration::from_secs(30);

struct GoInformer {
    child: Child,
    lines: Receiver<Value>,
}

impl GoInformer {
    fn start(kubeconfig: &std::path::Path, namespace: &str) -> Self {
        let mut child = Command::new(harness_binaries().join("informer"))
            .args([
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "--resource",
                "configmaps",
                "--namespace",
                namespace,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the client-go informer");
        let (send, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(value) = serde_json::from_str::<Value>(&line) {
                    let _ = send.send(value);
                }
            }
        });
        Self { child, lines }
    }

    /// The next `n` handler callbacks, as `event name` (plus ` unknown` for tombstones).
    fn next(&self, n: usize) -> Vec<String> {
        let mut events = Vec::new();
        while events.len() < n {
            let line = self
                .lines
                .recv_timeout(WAIT)
                .unwrap_or_else(|_| panic!("client-go informer said only {events:?}"));
            let event = line["event"].as_str().unwrap_or_default();
            if matches!(event, "add" | "update" | "delete") {
                let unknown = if line["finalStateUnknown"] == true {
                    " unknown"
                } else {
                    ""
                };
                events.push(format!(
                    "{event} {}{unknown}",
                    line["name"].as_str().unwrap()
                ));
            } else if event == "synced" {
                events.push("synced".into());
            }
        }
        events
    }
}

impl Drop for GoInformer {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": "1"}})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_go_informer_syncs_follows_and_recovers_from_faults() {
    let dev = DevCluster::start(DevClusterConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("dev.kubeconfig");
    dev.write_kubeconfig(&kubeconfig).unwrap();
    let client = dev.client().unwrap();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "go"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "go");
    cms.create(&PostParams::default(), &cm("before"))
        .await
        .unwrap();

    let go = GoInformer::start(&kubeconfig, "go");
    assert_eq!(go.next(2), ["add before", "synced"]);

    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await
    .unwrap();
    cms.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(go.next(3), ["add a", "update a", "delete before"]);

    // A closed watch: client-go re-watches from its last resourceVersion, without a new LIST.
    let lists = dev.request_log().count(Verb::List, "configmaps");
    let before_close = dev.request_log().last_seq();
    dev.faults().close_watches();
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    assert_eq!(go.next(1), ["add b"]);
    assert_eq!(
        dev.request_log().count(Verb::List, "configmaps"),
        lists,
        "a clean close must not relist"
    );
    let streaming_relists = dev
        .request_log()
        .records()
        .into_iter()
        .filter(|r| r.seq > before_close && r.param("sendInitialEvents") == Some("true"))
        .count();
    assert_eq!(
        streaming_relists, 0,
        "a clean close must not restart a streaming list"
    );

    // Compaction while the watch is down: the re-watch gets 410 Gone, client-go relists and
    // reports the object deleted in the gap as a tombstone.
    let mark = dev.request_log().last_seq();
    dev.faults().pause();
    dev.faults().close_watches();
    dev.store()
        .delete(
            &ObjectKey::new(ResourceId::core("configmaps"), Some("go"), "a"),
            &Preconditions::default(),
        )
        .unwrap();
    dev.faults().compact();
    dev.faults().resume();
    // client-go's relist (Replace) reports the vanished object as a tombstone, then every
    // listed object as an update, unchanged or not (wasmformer skips unchanged ones).
    assert_eq!(go.next(2), ["delete a unknown", "update b"]);
    // client-go relists with a LIST, or (WatchList, on by default in recent client-go) with a
    // streaming list: a WATCH with sendInitialEvents=true.
    let relists = dev
        .request_log()
        .records()
        .into_iter()
        .filter(|r| r.seq > mark)
        .filter(|r| {
            r.is(Verb::List, "configmaps")
                || (r.is(Verb::Watch, "configmaps") && r.param("sendInitialEvents") == Some("true"))
        })
        .count();
    assert!(relists >= 1, "410 Gone must lead to a relist");
    cms.create(&PostParams::default(), &cm("c")).await.unwrap();
    assert_eq!(go.next(1), ["add c"]);
    drop(go);
    dev.shutdown().await.unwrap();
}
