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
pub mod plugin;
pub mod replay;
pub mod runtime;
pub mod trigger;
pub mod yaml;
