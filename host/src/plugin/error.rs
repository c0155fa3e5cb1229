//! Why a plugin did not load ([`LoadError`]) or a call into it failed ([`CallError`]).
//!
//! Both name the plugin; a [`CallError`] is data the host logs and counts, never a host crash.

use std::path::PathBuf;
use std::time::Duration;

/// Why a plugin could not be loaded. The message names the plugin, the file and the cause.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("plugin {plugin}: cannot read {path}")]
    Read {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not WebAssembly at all.
    #[error("plugin {plugin}: {path} is not a WebAssembly file (no \\0asm header)")]
    NotWasm {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
    },
    /// The file is a core WebAssembly module, not a component.
    #[error(
        "plugin {plugin}: {path} is a core WebAssembly module, not a component; build it with \
         `cargo build --target wasm32-wasip2` (or wrap it with `wasm-tools component new`)"
    )]
    CoreModule {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
    },
    /// wasmtime could not compile or validate the component.
    #[error("plugin {plugin}: {path} does not compile")]
    Compile {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// wasmtime's error.
        #[source]
        source: wasmtime::Error,
    },
    /// The component does not export the handler interface at all.
    #[error(
        "plugin {plugin}: {path} is not a wasmformer plugin: it exports {exports}, not {expected}"
    )]
    WrongWorld {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// What it exports instead.
        exports: String,
        /// What a plugin must export.
        expected: String,
    },
    /// The component was built for a contract version this host does not accept.
    #[error(
        "plugin {plugin}: {path} was built for contract {found}, but this host accepts \
         {accepted}; rebuild it with a matching wasmformer-guest"
    )]
    IncompatibleContract {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// The version it was built for.
        found: String,
        /// The versions this host accepts.
        accepted: String,
    },
    /// The component imports something the host does not provide to plugins.
    #[error("plugin {plugin}: {path} imports what the host does not provide")]
    UnsatisfiedImport {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// wasmtime's error, naming the import.
        #[source]
        source: wasmtime::Error,
    },
    /// The component imports an interface the host does not link (`wasi:http`, say); the
    /// message names the import and how to build without it.
    #[error("plugin {plugin}: {path} imports what the host does not provide: {import}; {fix}")]
    UnlinkedImport {
        /// The plugin's name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// The import, e.g. `wasi:http/types@0.2.3`.
        import: String,
        /// How to build the plugin without it.
        fix: std::borrow::Cow<'static, str>,
        /// wasmtime's error.
        #[source]
        source: wasmtime::Error,
    },
    /// Instantiating or calling `init` failed.
    #[error("plugin {plugin}: failed to start")]
    Start {
        /// The plugin's name.
        plugin: String,
        /// What went wrong.
        #[source]
        source: CallError,
    },
}

/// How a call trapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrapKind {
    /// The call overran its deadline (epoch interruption or a late host call).
    Deadline,
    /// The instance tried to grow its memory past its limit.
    MemoryLimit,
    /// The stack overflowed: wasmtime's call stack, or the stack a compiled language keeps in
    /// linear memory (an out-of-bounds access deep in a recursion).
    StackOverflow,
    /// The guest read or wrote outside its linear memory (a bad pointer).
    OutOfBounds,
    /// The guest executed `unreachable`, which is how a Rust panic or abort ends.
    Unreachable,
    /// Any other trap (integer division by zero, a bad indirect call, …).
    Other,
}

impl std::fmt::Display for TrapKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Deadline => "deadline exceeded",
            Self::MemoryLimit => "memory limit exceeded",
            Self::StackOverflow => "stack overflow",
            Self::OutOfBounds => "out of bounds memory access",
            Self::Unreachable => "panic or abort (wasm unreachable)",
            Self::Other => "trap",
        })
    }
}

/// Why one call into a plugin failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The handler returned an error.
    #[error("handler returned an error: {0}")]
    Handler(String),
    /// The handler returned an error and asked for a retry (the `retry` import, since 0.3.1).
    #[error("handler returned an error (retried after a backoff): {0}")]
    HandlerRetry(String),
    /// `reconcile` returned an error.
    #[error("reconcile returned an error{}: {message}", if *retry { " (retried after a backoff)" } else { "" })]
    Reconcile {
        /// What the plugin said.
        message: String,
        /// Whether it asked for a retry.
        retry: bool,
    },
    /// `reconcile` was called on a plugin that does not export `reconciler`.
    #[error(
        "the plugin does not export wasmformer:plugin/reconciler (built for contract 0.3.0 or earlier, or without a reconciler)"
    )]
    NoReconciler,
    /// `init` returned an error.
    #[error("init returned an error: {0}")]
    Init(String),
    /// The call trapped; the instance is discarded and recreated for the next event. The message
    /// is one line: `out of bounds memory access in guest::parse after 0.4ms: …`; the whole wasm
    /// backtrace is logged at debug level.
    #[error(
        "{cause}{} after {:.1}ms{}",
        frame.as_deref().map(|f| format!(" in {f}")).unwrap_or_default(),
        elapsed.as_secs_f64() * 1e3,
        detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default()
    )]
    Trap {
        /// What kind of trap.
        kind: TrapKind,
        /// What happened, on one line: `stack overflow`, `out of bounds memory access`,
        /// `memory limit of 67108864 bytes exceeded (…)`.
        cause: String,
        /// The innermost function of the plugin's own code it happened in (not the standard
        /// library's, the allocator's or the SDK's), demangled.
        frame: Option<String>,
        /// How long the call ran.
        elapsed: Duration,
        /// The last line the plugin wrote to stderr (a panic message), if any.
        detail: Option<String>,
        /// wasmtime's error with the whole wasm backtrace (not part of the message).
        error: wasmtime::Error,
    },
    /// A fresh instance could not be created (after a trap).
    #[error("cannot instantiate")]
    Instantiate(#[source] wasmtime::Error),
    /// Every slot of the instance pool is taken: as many instances as `host.maxInstances` (or
    /// their memories or tables) are live.
    #[error("cannot instantiate: the instance pool is full (raise host.maxInstances)")]
    InstancePoolExhausted(#[source] wasmtime::Error),
}

/// Why a plugin's state (the `state` export, contract 0.3.2) could not be kept or put back. The
/// plugin keeps running either way.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// `save-state` returned more than `limits.stateBytes`: the plugin is not unloaded (a hot
    /// swap's new version starts with `init` alone).
    #[error(
        "plugin {plugin:?}: save-state returned {size} bytes, over its limits.stateBytes ({limit}); the state is not kept"
    )]
    TooLarge {
        /// The plugin.
        plugin: String,
        /// How many bytes it returned.
        size: usize,
        /// Its `limits.stateBytes`.
        limit: usize,
    },
    /// `save-state` trapped: the instance and its state are gone.
    #[error("plugin {plugin:?}: save-state failed, its state is lost: {cause}")]
    Save {
        /// The plugin.
        plugin: String,
        /// The trap, on one line.
        cause: String,
    },
    /// `restore-state` returned an error or trapped: the plugin started over with `init` alone.
    #[error(
        "plugin {plugin:?}: restore-state of {size} bytes from version {from} failed, started with init alone: {cause}"
    )]
    Restore {
        /// The plugin.
        plugin: String,
        /// The state's size.
        size: usize,
        /// The version that saved it (12 hex digits).
        from: String,
        /// What the plugin said, or the trap, on one line.
        cause: String,
    },
}

impl CallError {
    /// Whether the key or event is retried after a backoff: a handler or reconcile that asked
    /// for it, and a reconcile that trapped (as controller-runtime retries a reconciler's panic).
    pub fn wants_retry(&self, reconcile: bool) -> bool {
        match self {
            Self::HandlerRetry(_) => true,
            Self::Reconcile { retry, .. } => *retry,
            Self::Trap { .. }
            | Self::Instantiate(_)
            | Self::InstancePoolExhausted(_)
            | Self::Init(_) => reconcile,
            Self::Handler(_) | Self::NoReconciler => false,
        }
    }

    /// The trap kind, if the call trapped.
    pub fn trap_kind(&self) -> Option<TrapKind> {
        match self {
            Self::Trap { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}
