//! wasmformer: runs Kubernetes informer event handlers as sandboxed WebAssembly components.
//!
//! Data flows one way: API server → [`informer`] → [`cache`] → [`dispatch`] → [`plugin`].
//! [`config`] is the typed host configuration; [`runtime`] assembles the running host from it;
//! [`replay`] runs one plugin against a scripted event sequence with no cluster.

pub mod admin;
pub mod cache;
pub mod config;
pub mod dispatch;
pub mod informer;
pub mod manifests;
pub mod metrics;
pub mod oci;
pub mod plugin;
pub mod rbac;
pub mod replay;
pub mod resident;
pub mod runtime;
pub mod trigger;
pub mod trim;
pub mod workqueue;
pub mod writer;
pub mod yaml;

/// An error and its causes on one line: `error: cause: cause …` (logs, status, CLI output).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
