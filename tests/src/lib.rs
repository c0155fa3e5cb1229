//! Support for wasmformer's integration tests: the paths of the plugins built from `examples/`
//! and `tests/guests/` (by this crate's `build.rs`), and helpers to make objects.

pub mod apiserver;
pub mod bench;
pub mod image;
pub mod registry;
pub mod writer;

/// Paths of the wasm components, one constant per crate (`POD_LOGGER`, `PANIC`, …).
pub mod guests {
    include!(concat!(env!("OUT_DIR"), "/guests.rs"));
}

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};
use wasmformer::cache::{CachedObject, Gvk, IndexSpec, Store};

/// The kind `v1 Pod`.
pub fn pod_gvk() -> Gvk {
    Gvk::from_api_version("v1", "Pod")
}

/// A minimal Pod manifest.
pub fn pod_json(namespace: &str, name: &str, resource_version: u64) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-{name}"),
                     "resourceVersion": resource_version.to_string(), "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}
    })
}

/// A Pod as the cache holds it.
pub fn pod(namespace: &str, name: &str, resource_version: u64) -> Arc<CachedObject> {
    Arc::new(
        CachedObject::from_value(pod_json(namespace, name, resource_version), true, &[]).unwrap(),
    )
}

/// An empty store for `gvk`.
pub fn store(gvk: Gvk, indexes: Vec<IndexSpec>) -> Arc<Store> {
    Arc::new(Store::new(gvk, indexes, true))
}

/// A store for `gvk` holding `objects` (a store's writes are its informer's: tests fill it once).
pub fn store_with(
    gvk: Gvk,
    indexes: Vec<IndexSpec>,
    objects: impl IntoIterator<Item = Value>,
) -> Arc<Store> {
    Arc::new(Store::with_objects(gvk, indexes, true, objects).expect("objects a store admits"))
}

/// A store for paging through: Pods `default/p0` … `p{n-1}` labelled `app=web`, written in
/// reverse order, beside a `default/db` labelled `app=db` and an `other/o1`; what a plugin reading
/// `app=web` in `default` a page at a time logs as [`paged_read`] says.
pub fn paged_pods(n: usize) -> Arc<Store> {
    let mut pods: Vec<_> = (0..n)
        .rev()
        .map(|i| pod_json("default", &format!("p{i}"), 1))
        .collect();
    let mut db = pod_json("default", "db", 1);
    db["metadata"]["labels"]["app"] = json!("db");
    pods.extend([db, pod_json("other", "o1", 1)]);
    store_with(pod_gvk(), vec![], pods)
}

/// The line a paging test plugin logs after reading [`paged_pods`]'s `app=web` Pods of `default`:
/// each key once, in key order.
pub fn paged_read(n: usize) -> String {
    let keys: Vec<_> = (0..n).map(|i| format!("default/p{i}")).collect();
    format!("read {}", keys.join(" "))
}

/// A dev cluster with the namespace `namespace` created, and a client for it.
pub async fn dev_cluster_with_namespace(
    namespace: &str,
) -> (wasmformer_devcluster::DevCluster, kube::Client) {
    use k8s_openapi::api::core::v1::Namespace;
    let dev = wasmformer_devcluster::DevCluster::start(Default::default())
        .await
        .expect("dev cluster starts");
    let client = dev.client().expect("client");
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
    kube::Api::<Namespace>::all(client.clone())
        .create(&Default::default(), &ns)
        .await
        .expect("the namespace is created");
    (dev, client)
}

/// Runs headless Chromium on `url` with `args` (e.g. `--dump-dom`, `--screenshot=FILE`) and
/// returns its stdout: its own empty profile, nothing phoned home (`scripts/test` installs
/// Debian's `chromium`).
pub fn chromium(url: &str, args: &[&str]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let output = std::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=5000",
            "--window-size=1280,800",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .output()
        .expect(
            "chromium is needed for this test (scripts/test installs the Debian package `chromium`)",
        );
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// `../shared/fixtures/pod-realistic.json`, the object of record for benchmarks.
pub fn realistic_pod() -> Value {
    let path = shared_dir().join("fixtures/pod-realistic.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The `shared/` folder beside the repository.
pub fn shared_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

use std::sync::Mutex;
use std::time::{Duration, Instant};

use wasmformer::plugin::{LogLine, LogObserver};

/// `wasm` with a custom section appended: the same code, another content hash (hot-swap tests
/// and benchmarks tell plugin versions apart this way).
pub fn with_custom_section(wasm: &[u8], name: &str, payload: &[u8]) -> Vec<u8> {
    use wasm_encoder::Encode;
    let mut out = wasm.to_vec();
    out.push(wasm_encoder::ComponentSectionId::CoreCustom as u8);
    wasm_encoder::CustomSection {
        name: name.into(),
        data: payload.into(),
    }
    .encode(&mut out);
    out
}

/// Collects what plugins log; the recorder guest logs one JSON object per call.
#[derive(Clone, Default)]
pub struct Recorded {
    lines: Arc<Mutex<Vec<LogLine>>>,
}

impl Recorded {
    /// A log observer that records here.
    pub fn observer(&self) -> LogObserver {
        let lines = self.lines.clone();
        Arc::new(move |line: &LogLine| lines.lock().unwrap().push(line.clone()))
    }

    /// Every line `plugin` logged so far.
    pub fn messages(&self, plugin: &str) -> Vec<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| &*l.plugin == plugin)
            .map(|l| l.message.clone())
            .collect()
    }

    /// The JSON lines `plugin` logged so far.
    pub fn events(&self, plugin: &str) -> Vec<Value> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| &*l.plugin == plugin)
            .filter_map(|l| serde_json::from_str(&l.message).ok())
            .collect()
    }

    /// Waits until `plugin` logged at least `count` JSON lines (panics after `timeout`).
    pub async fn wait_for(&self, plugin: &str, count: usize, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let events = self.events(plugin);
            if events.len() >= count {
                return events;
            }
            assert!(
                Instant::now() < deadline,
                "{plugin} logged {} of {count} events in {timeout:?}: {events:#?}",
                events.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// `event name` of each recorded event, e.g. `add web-1`, for order assertions.
pub fn summary(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            let mut s = format!(
                "{} {}",
                e["event"].as_str().unwrap_or("?"),
                e["name"].as_str().unwrap_or("?")
            );
            if e["initial"] == true {
                s.push_str(" initial");
            }
            if e["finalStateUnknown"] == true {
                s.push_str(" final-state-unknown");
            }
            s
        })
        .collect()
}
