//! Support for wasmformer's integration tests: the paths of the plugins built from `examples/`
//! and `tests/guests/` (by this crate's `build.rs`), and helpers to make objects.

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
    Arc::new(CachedObject::from_value(pod_json(namespace, name, resource_version), true, &[]).unwrap())
}

/// An empty store for `gvk`.
pub fn store(gvk: Gvk, indexes: Vec<IndexSpec>) -> Arc<Store> {
    Arc::new(Store::new(gvk, indexes, true))
}

/// `../shared/fixtures/pod-realistic.json`, the object of record for benchmarks.
pub fn realistic_pod() -> Value {
    let path = shared_dir().join("fixtures/pod-realistic.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
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
