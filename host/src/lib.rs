//! wasmformer: runs Kubernetes informer event handlers as sandboxed WebAssembly components.
//!
//! Data flows one way: API server → informer → [`cache`] → dispatch → [`plugin`].

pub mod cache;
pub mod informer;
pub mod plugin;
pub mod replay;
