//! [`PluginInstance`]: the long-lived instance of one plugin version that events are delivered
//! to, one call at a time, each under the plugin's deadline, memory and log limits. Its wasmtime
//! instance may be dropped while idle ([`PluginInstance::unload`]) and is created again for the
//! next call; a plugin that exports `state` (0.3.2) keeps its state across that and across a hot
//! swap ([`SavedState`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::Store;

use super::engine::EPOCH_TICK;
use super::host::{
    CallDeadline, DeadlineExceeded, Grants, HostState, LogObserver, LogSink, MemoryLimitExceeded,
    PackedKind,
};
use super::world::Bindings as PluginBindings;
use super::{CallError, Limits, LoadedPlugin, StateError, TrapKind};
use crate::cache::{Event, Gvk};
use crate::error_chain;

/// What a plugin's `save-state` returned, kept by the host for its next instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedState {
    /// The bytes (never empty: an empty state is nothing to keep).
    pub bytes: Vec<u8>,
    /// The version (digest) of the instance that saved them.
    pub version: String,
}

/// A running plugin: its wasmtime store and instance, recreated after a trap.
pub struct PluginInstance {
    plugin: LoadedPlugin,
    name: Arc<str>,
    limits: Limits,
    grants: Arc<Grants>,
    config: Arc<str>,
    log: Arc<Mutex<LogSink>>,
    live: Option<Live>,
    calls: u64,
    failures: u64,
    instantiations: u64,
    /// State for the next instance to restore.
    saved: Option<SavedState>,
    /// Whether the instance was dropped by [`PluginInstance::unload`] (not by a trap).
    unloaded: bool,
    /// Instances created after an unload.
    activations: u64,
    /// A restore that failed while creating an instance, not yet reported.
    state_error: Option<StateError>,
    /// The kind of the last event delivered, packed for the objects' `meta`.
    kind: Option<PackedKind>,
}

struct Live {
    store: Store<HostState>,
    bindings: PluginBindings,
}

impl PluginInstance {
    /// Instantiates `plugin` and calls its `init` with `config` (its config block as JSON).
    pub fn start(
        plugin: LoadedPlugin,
        limits: Limits,
        grants: Grants,
        config: &serde_json::Value,
        observer: Option<LogObserver>,
    ) -> Result<Self, CallError> {
        let name: Arc<str> = plugin.name().into();
        let log = Arc::new(Mutex::new(LogSink::new(
            name.clone(),
            limits.log_bytes_per_call,
            observer,
        )));
        let mut instance = Self {
            plugin,
            name,
            limits,
            grants: Arc::new(grants),
            config: config.to_string().into(),
            log,
            live: None,
            calls: 0,
            failures: 0,
            instantiations: 0,
            saved: None,
            unloaded: false,
            activations: 0,
            state_error: None,
            kind: None,
        };
        instance.ensure_live()?;
        Ok(instance)
    }

    /// The plugin version this instance runs.
    pub fn plugin(&self) -> &LoadedPlugin {
        &self.plugin
    }

    /// Handler calls made, failed ones included.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Handler calls that failed.
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// Log bytes dropped over the per-call budget by this version so far.
    pub fn dropped_log_bytes(&self) -> u64 {
        self.log
            .lock()
            .expect("log sink lock poisoned")
            .dropped_bytes_total()
    }

    /// How many times an instance was created (1 + recreations after traps).
    pub fn instantiations(&self) -> u64 {
        self.instantiations
    }

    /// Whether a wasmtime instance is live (not unloaded, not discarded after a trap).
    pub fn is_loaded(&self) -> bool {
        self.live.is_some()
    }

    /// How many times an instance was created again after [`PluginInstance::unload`].
    pub fn activations(&self) -> u64 {
        self.activations
    }

    /// The size of the state kept for the next instance, if any.
    pub fn saved_state_bytes(&self) -> Option<usize> {
        self.saved.as_ref().map(|s| s.bytes.len())
    }

    /// A failed `restore-state` while an instance was created, once.
    pub fn take_state_error(&mut self) -> Option<StateError> {
        self.state_error.take()
    }

    /// Drops the wasmtime instance, its memory's pages given back to the OS (its pool slot keeps
    /// none: see `memory`), after saving its state if it exports `state`; the next call creates
    /// an instance again, which restores that state before `init`. A state over
    /// `limits.stateBytes` is refused: the instance stays. A `save-state` that traps loses the
    /// instance and its state (reported).
    pub fn unload(&mut self) -> Result<(), StateError> {
        if self.live.is_none() {
            return Ok(());
        }
        let saved = self.save();
        // A trap in `save-state` already dropped the instance; too large a state keeps it.
        if matches!(saved, Err(StateError::TooLarge { .. })) {
            return saved.map(drop);
        }
        if let Some(live) = self.live.take() {
            // SAFETY: the instance is dropped right after, running nothing more.
            unsafe { live.store.data().memory.release() };
        }
        self.unloaded = true;
        self.plugin.release_code();
        crate::trim::request();
        self.saved = saved?;
        Ok(())
    }

    /// The state to hand to a new version: saved now if the instance is live, else what was
    /// saved when it was unloaded.
    pub fn take_state(&mut self) -> Result<Option<SavedState>, StateError> {
        match self.live.is_some() {
            true => self.save(),
            false => Ok(self.saved.take()),
        }
    }

    /// Starts this (new) version over from `state`, its predecessor's: a fresh instance restores
    /// it, then runs `init`. A plugin that does not export `state` keeps its instance as it is.
    pub fn restore(&mut self, state: SavedState) -> Result<(), CallError> {
        if !self.plugin.keeps_state() {
            return Ok(());
        }
        self.live = None;
        self.saved = Some(state);
        self.ensure_live()
    }

    /// Calls `save-state` on the live instance; `None`: the plugin keeps no state.
    fn save(&mut self) -> Result<Option<SavedState>, StateError> {
        if !self.plugin.keeps_state() || self.live.is_none() {
            return Ok(None);
        }
        let bytes = self
            .call(|bindings, store| {
                bindings
                    .call_save_state(store)
                    .unwrap_or_else(|| Ok(Vec::new()))
            })
            .map_err(|error| StateError::Save {
                plugin: self.name.to_string(),
                cause: error_chain(&error),
            })?;
        if bytes.len() > self.limits.state_bytes {
            return Err(StateError::TooLarge {
                plugin: self.name.to_string(),
                size: bytes.len(),
                limit: self.limits.state_bytes,
            });
        }
        Ok((!bytes.is_empty()).then(|| SavedState {
            bytes,
            version: self.plugin.digest().to_owned(),
        }))
    }

    /// Delivers `event` about an object of kind `gvk`. On a trap the instance is discarded; the
    /// next call creates a fresh one (and calls `init` again). `Synced` has no handler export:
    /// nothing is called.
    pub fn handle(&mut self, gvk: &Gvk, event: &Event) -> Result<(), CallError> {
        if matches!(event, Event::Synced) {
            return Ok(());
        }
        self.calls += 1;
        let kind = PackedKind::reuse(&mut self.kind, gvk);
        let result = self.ensure_live().and_then(|_| {
            let (result, retry) = self.call(|bindings, store| {
                let result = bindings.call_event(store, &kind, event);
                Ok((result?, store.data().retry_requested))
            })?;
            result.map_err(|message| match retry {
                true => CallError::HandlerRetry(message),
                false => CallError::Handler(message),
            })
        });
        if result.is_err() {
            self.failures += 1;
        }
        result
    }

    /// Whether this version exports `reconciler`.
    pub fn reconciles(&self) -> bool {
        self.plugin.reconciles()
    }

    /// Reconciles the object `namespace`/`name` of kind `gvk`; returns its requeue-after. On a
    /// trap the instance is discarded, as for [`PluginInstance::handle`].
    pub fn reconcile(
        &mut self,
        gvk: &Gvk,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Duration>, CallError> {
        if !self.reconciles() {
            return Err(CallError::NoReconciler);
        }
        self.calls += 1;
        let result = self.ensure_live().and_then(|_| {
            self.call(|bindings, store| {
                bindings
                    .call_reconcile(store, gvk, namespace, name)
                    .unwrap_or(Ok(Err(("no reconciler".to_owned(), false))))
            })?
            .map_err(|(message, retry)| CallError::Reconcile { message, retry })
        });
        if result.is_err() {
            self.failures += 1;
        }
        result
    }

    /// Makes sure a live, initialised instance exists: creates one, restores the saved state
    /// into it (if any; a failed restore is kept for [`PluginInstance::take_state_error`] and a
    /// fresh instance replaces it), then calls `init`.
    fn ensure_live(&mut self) -> Result<(), CallError> {
        if self.live.is_some() {
            return Ok(());
        }
        self.instantiate()?;
        if std::mem::take(&mut self.unloaded) {
            self.activations += 1;
        }
        if let Some(saved) = self.saved.take()
            && let Err(cause) = self.restore_saved(&saved)
        {
            self.state_error = Some(StateError::Restore {
                plugin: self.name.to_string(),
                size: saved.bytes.len(),
                from: saved.version.chars().take(12).collect(),
                cause,
            });
            self.live = None;
            self.instantiate()?;
        }
        super::let_waiting_threads_run();
        let config = self.config.clone();
        let init = self.call(|bindings, store| {
            store.data_mut().in_init = true;
            let result = bindings.call_init(store, config);
            store.data_mut().in_init = false;
            result
        });
        match init {
            Ok(Ok(())) => {
                self.plugin.settle_code();
                Ok(())
            }
            Ok(Err(message)) => {
                self.live = None;
                Err(CallError::Init(message))
            }
            Err(e) => Err(e),
        }
    }

    /// Calls `restore-state` on the fresh instance; the cause on one line if it failed.
    fn restore_saved(&mut self, saved: &SavedState) -> Result<(), String> {
        let result = self.call(|bindings, store| {
            bindings
                .call_restore_state(store, &saved.bytes, &saved.version)
                .unwrap_or(Ok(Ok(())))
        });
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(format!("restore-state returned an error: {message}")),
            Err(error) => Err(error_chain(&error)),
        }
    }

    /// Creates a fresh instance (no call into it yet).
    fn instantiate(&mut self) -> Result<(), CallError> {
        let pre = self.plugin.pre().map_err(CallError::Instantiate)?;
        let mut state = HostState::new(
            self.name.clone(),
            self.limits.memory_bytes,
            self.grants.clone(),
            self.log.clone(),
        );
        // Instantiating runs guest code too (its start functions): under the same deadline.
        state.deadline = CallDeadline::start(self.limits.deadline, Instant::now());
        let mut store = Store::new(pre.engine(), state);
        store.limiter(|s| &mut s.memory);
        // The deadline lives in the store data, so a host call can move it (a write's time with
        // the API server is its own budget, not the handler's), and so can a machine that kept
        // the call from running (`CallDeadline`); the epoch only says when to look.
        store.epoch_deadline_callback(|mut store| {
            match store.data_mut().deadline.left(Instant::now()) {
                Ok(left) => Ok(wasmtime::UpdateDeadline::Continue(deadline_ticks(left))),
                Err(overrun) => Err(wasmtime::Error::new(DeadlineExceeded::InGuest(overrun))),
            }
        });
        store.set_epoch_deadline(deadline_ticks(self.limits.deadline));
        let bindings = pre.instantiate(&mut store).map_err(|error| {
            let pool_full = error
                .chain()
                .any(|cause| cause.is::<wasmtime::PoolConcurrencyLimitError>());
            if pool_full {
                CallError::InstancePoolExhausted(error)
            } else {
                CallError::Instantiate(error)
            }
        })?;
        self.instantiations += 1;
        self.live = Some(Live { store, bindings });
        Ok(())
    }

    /// Runs one call with the deadline armed and the log budget reset. A trap discards the
    /// instance.
    fn call<R>(
        &mut self,
        f: impl FnOnce(&PluginBindings, &mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let live = self.live.as_mut().expect("call on a live instance");
        let started = Instant::now();
        live.store.data_mut().deadline = CallDeadline::start(self.limits.deadline, started);
        live.store.data_mut().writes_this_call = 0;
        live.store.data_mut().retry_requested = false;
        live.store
            .set_epoch_deadline(deadline_ticks(self.limits.deadline));
        self.log
            .lock()
            .expect("log sink lock poisoned")
            .begin_call();
        let result = f(&live.bindings, &mut live.store);
        let last_stderr = self.log.lock().expect("log sink lock poisoned").end_call();
        result.map_err(|error| {
            self.live = None;
            let elapsed = started.elapsed();
            let backtrace = error.downcast_ref::<wasmtime::WasmBacktrace>();
            if let Some(backtrace) = backtrace {
                tracing::debug!(plugin.id = %self.name, wasm.backtrace = %backtrace, "trap backtrace");
            }
            let (kind, cause) = classify(&error, backtrace);
            CallError::Trap { kind, cause, frame: backtrace.and_then(guest_frame), elapsed, detail: last_stderr, error }
        })
    }
}

/// Epoch ticks for `deadline`, rounded up, plus one: the first tick may come at once.
fn deadline_ticks(deadline: Duration) -> u64 {
    (deadline.as_nanos().div_ceil(EPOCH_TICK.as_nanos()) as u64).max(1) + 1
}

/// How many of the innermost frames of an out-of-bounds trap are looked at to tell a stack
/// overflow from a bad pointer (wasmtime keeps the innermost 20).
const RECURSION_WINDOW: usize = 16;

/// Whether the innermost frames are a recursion: at least [`RECURSION_WINDOW`] frames, all in at
/// most two functions (a function calling itself, or two calling each other).
fn is_recursion(backtrace: &wasmtime::WasmBacktrace) -> bool {
    let frames = backtrace.frames();
    if frames.len() < RECURSION_WINDOW {
        return false;
    }
    let mut functions: Vec<u32> = Vec::new();
    for frame in &frames[..RECURSION_WINDOW] {
        if !functions.contains(&frame.func_index()) {
            functions.push(frame.func_index());
        }
    }
    functions.len() <= 2
}

/// The kind of trap and its cause on one line.
///
/// A Rust (or C) guest keeps its stack in linear memory below its data: when a recursion
/// overflows it, the stack pointer leaves linear memory and the trap is an out-of-bounds access,
/// not wasmtime's stack-overflow trap. An out-of-bounds access whose innermost frames are a
/// recursion is reported as that stack overflow.
fn classify(
    error: &wasmtime::Error,
    backtrace: Option<&wasmtime::WasmBacktrace>,
) -> (TrapKind, String) {
    if let Some(e) = error.downcast_ref::<DeadlineExceeded>() {
        return (TrapKind::Deadline, e.to_string());
    }
    if let Some(e) = error.downcast_ref::<MemoryLimitExceeded>() {
        return (TrapKind::MemoryLimit, e.to_string());
    }
    let Some(trap) = error.downcast_ref::<wasmtime::Trap>() else {
        // A host error: its own message, without wasmtime's backtrace context.
        let root = error.root_cause().to_string();
        return (
            TrapKind::Other,
            root.lines().next().unwrap_or("trap").to_owned(),
        );
    };
    let kind = match trap {
        wasmtime::Trap::Interrupt => TrapKind::Deadline,
        wasmtime::Trap::StackOverflow => TrapKind::StackOverflow,
        wasmtime::Trap::UnreachableCodeReached => TrapKind::Unreachable,
        wasmtime::Trap::MemoryOutOfBounds => {
            if backtrace.is_some_and(is_recursion) {
                return (
                    TrapKind::StackOverflow,
                    "stack overflow in linear memory (out of bounds memory access)".to_owned(),
                );
            }
            TrapKind::OutOfBounds
        }
        _ => TrapKind::Other,
    };
    let cause = match kind {
        TrapKind::Other => trap.to_string(),
        kind => kind.to_string(),
    };
    (kind, cause)
}

/// Prefixes of Rust functions that are not the plugin's own code: the standard library, the
/// allocator, the panic machinery, the SDK and its generated bindings. Functions without a `::`
/// path (wasi-libc's `sbrk`, `malloc`, `memcpy`, …) are not the plugin's either.
const LIBRARY_FRAMES: &[&str] = &[
    "std::",
    "core::",
    "alloc::",
    "<std::",
    "<core::",
    "<alloc::",
    "__rust",
    "rust_panic",
    "dlmalloc",
    "<dlmalloc",
    "wasmformer_guest::",
    "<wasmformer_guest::",
    "wit_bindgen",
    "<wit_bindgen",
    "wasi::",
    "<wasi::",
];

/// The innermost frame of the plugin's own code, demangled without its hash:
/// `guest_panic::explode`, `<my_plugin::Logger as wasmformer_guest::Plugin>::on_add`.
///
/// A plugin built with whole-program optimisation may have its handler inlined into the
/// component's export (`wasmformer:plugin/handler@0.3.3#on-add`): with no frame of its own code,
/// the export names the handler.
fn guest_frame(backtrace: &wasmtime::WasmBacktrace) -> Option<String> {
    let names = backtrace.frames().iter().filter_map(|frame| {
        let raw = frame
            .symbols()
            .first()
            .and_then(|s| s.name())
            .or(frame.func_name())?;
        Some(format!("{:#}", rustc_demangle::demangle(raw)))
    });
    let mut export = None;
    for name in names {
        let library = !name.contains("::")
            || LIBRARY_FRAMES.iter().any(|prefix| name.starts_with(prefix))
            || name.contains("::_export_");
        if !library {
            return Some(name);
        }
        // `<interface>#<function>`; not a Rust path's `{closure#0}`.
        if export.is_none() && name.contains('#') && !name.contains("::") {
            export = Some(name);
        }
    }
    export
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_rounds_up_to_whole_ticks_plus_one() {
        assert_eq!(deadline_ticks(Duration::from_millis(100)), 21);
        assert_eq!(deadline_ticks(Duration::from_millis(1)), 2);
        assert_eq!(deadline_ticks(Duration::ZERO), 2);
    }
}
