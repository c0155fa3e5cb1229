//! The sandboxed plugin runtime: loading WebAssembly components and calling their handlers.
//!
//! - [`PluginEngine`] owns the one wasmtime `Engine`, the epoch ticker that enforces deadlines, and
//!   the on-disk cache of compiled components (`cache`: private, each artifact MAC-checked).
//! - [`LoadedPlugin`] is one plugin version: compiled once, its contract version checked, its
//!   imports resolved against the host's linker (a pre-instantiated handle).
//! - [`PluginInstance`] is the long-lived instance events are delivered to, one call at a time,
//!   under the plugin's [`Limits`]; after a trap it is recreated from the `LoadedPlugin`.
//! - [`host`] implements what plugins import: the lister, the log, the writer (grants and limits;
//!   sending is `crate::writer`'s), and a locked-down WASI.
//! - [`Backoff`] decides how long a repeatedly failing plugin waits before its next event.

mod backoff;
mod cache;
mod code;
mod engine;
mod error;
pub mod host;
mod instance;
mod load;
mod memory;
mod world;

/// Host-side bindings generated from `wit/` (the current contract, 0.3.3).
pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "plugin",
        imports: { default: trappable },
    });
}

/// Host-side bindings of the `controller` world (since 0.3.1: `plugin` plus the `reconciler` export),
/// for plugins that export `reconciler`; its imports are `bindings`' own.
pub(crate) mod bindings_controller {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "controller",
        imports: { default: trappable },
        with: {
            "wasmformer:plugin/types": super::bindings::wasmformer::plugin::types,
            "wasmformer:plugin/lister": super::bindings::wasmformer::plugin::lister,
            "wasmformer:plugin/log": super::bindings::wasmformer::plugin::log,
            "wasmformer:plugin/writer": super::bindings::wasmformer::plugin::writer,
            "wasmformer:plugin/retry": super::bindings::wasmformer::plugin::retry,
        },
    });
}

/// Host-side bindings of the frozen 0.2.0 contract (`host/wit-0.2/`): linked beside the current
/// one so plugins built before `writer` keep loading unchanged.
pub(crate) mod bindings_v02 {
    wasmtime::component::bindgen!({
        path: "wit-0.2",
        world: "plugin",
        imports: { default: trappable },
    });
}

pub use crate::cache::Event;
pub use crate::config::Limits;
pub use backoff::Backoff;
pub use cache::CacheError;
pub use engine::{
    DEFAULT_KEEP_RESIDENT_BYTES, DEFAULT_MAX_INSTANCES, PluginEngine, PoolSettings,
    START_PAGES_BYTES, content_digest,
};
pub use error::{CallError, LoadError, StateError, TrapKind};
pub use host::{Granted, Grants, LogLine, LogObserver, LogSource, WriteAccess};
pub use instance::{PluginInstance, SavedState};
pub use load::{ContractInfo, LoadedPlugin, inspect};

/// Lets threads waiting for this core run before the next step of loading or starting a plugin
/// (a hot swap's prepare, a first start, a re-activation). A load and a start are about a
/// millisecond of CPU in steps of 0.05–0.3 ms on an idle host (hash, map and decode, link,
/// instantiate and restore, `init`; the decode took 0.3–0.5 ms under a swap bench's load). On two
/// cores the threads that carry events, woken on the core a prepare runs
/// on, otherwise wait for all of it: that wait was most of a hot swap's pause (issue 17, item 9;
/// BENCHMARKS.md, "yield points in a prepare"). With nothing waiting, a yield costs one system
/// call (about 0.25 µs on a `start`).
fn let_waiting_threads_run() {
    std::thread::yield_now();
}

/// The WIT package this host implements.
pub const CONTRACT_PACKAGE: &str = "wasmformer:plugin";
/// The contract version this host implements; plugins built for any `0.3.x` are accepted, and
/// for `0.2.x` (the contract before `writer`). 0.3.1 added the optional `reconciler` export and
/// the `retry` import, 0.3.2 the optional `state` export, 0.3.3 the lister's `list-page`; plugins
/// built for 0.3.0 to 0.3.2 load unchanged.
pub const CONTRACT_VERSION: &str = "0.3.3";
/// The older contract versions still linked: `0.2.x` plugins load unchanged.
pub const LEGACY_CONTRACT_VERSIONS: &[&str] = &["0.2.0"];
