//! What the host provides to plugins: the [`lister`] over granted stores, the [`log`], the
//! [`writer`] (grants and limits; sending is `crate::writer`'s), and WASI locked down to nothing
//! but clocks, randomness and captured stdout/stderr ([`stdio`]), its blocking waits bounded by
//! the call's deadline ([`poll`]). Handler calls and lister answers carry objects as [`object`]
//! lowers them, and lister calls take their strings as [`arg`] lifts them. [`legacy`] answers
//! plugins built for contract 0.2.x with the same implementations.
//!
//! [`HostState`] is the per-instance store data. Every host call first checks the call's deadline
//! and the plugin's grants; a refusal is logged with who asked for what.

mod arg;
mod clock;
mod deadline;
mod legacy;
mod lister;
mod log;
mod object;
pub(crate) mod poll;
mod retry;
mod stdio;
mod writer;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

pub(crate) use deadline::{CallDeadline, Overrun};
pub(crate) use lister::add_to_linker as add_lister_to_linker;
pub use lister::{Granted, Grants};
pub(crate) use log::LogSink;
pub use log::{LogLine, LogObserver, LogSource};
pub(crate) use object::{PackedKind, SharedObject};
pub use writer::WriteAccess;

use crate::plugin::bindings::wasmformer::plugin::types;
use crate::plugin::memory::GuestMemory;

/// The call's deadline passed: while the plugin's own code ran (the epoch check), or in a host
/// call (one made late, or a WASI wait the deadline cut short); the message says when the call
/// was kept from running rather than running for it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DeadlineExceeded {
    #[error("deadline exceeded{0}")]
    InGuest(Overrun),
    #[error("deadline exceeded during a host call{0}")]
    InHostCall(Overrun),
}

/// The instance tried to grow its memory past the plugin's limit.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {limit} bytes exceeded (tried to grow to {desired} bytes)")]
pub(crate) struct MemoryLimitExceeded {
    pub limit: usize,
    pub desired: usize,
}

/// Enforces the per-instance memory limit with a typed error, so the trap can be told apart;
/// and knows where the memory is, to give its pages back when the instance is unloaded.
pub(crate) struct MemoryCap {
    pub limit: usize,
    /// The largest size a memory of this instance has been allowed to reach.
    pub peak: usize,
    /// Where the memory starts, once `init`'s config was lowered into it.
    pub base: Option<GuestMemory>,
}

impl MemoryCap {
    /// Gives the memory's pages back to the OS (see [`GuestMemory::release`]).
    ///
    /// # Safety
    /// The instance runs no more wasm and is dropped next.
    pub(crate) unsafe fn release(&self) {
        if let Some(memory) = self.base {
            // The memory's size is at most the largest its limiter allowed, and at most its
            // slot's (a grow the limiter allowed may still have failed).
            let len = self.peak.min(crate::plugin::engine::SLOT_MEMORY_BYTES);
            // SAFETY: the caller's contract; the range lies in the instance's slot.
            unsafe { memory.release(len) };
        }
    }
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            return Err(wasmtime::Error::new(MemoryLimitExceeded {
                limit: self.limit,
                desired,
            }));
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _max: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// The data of one plugin instance's wasmtime store.
pub struct HostState {
    plugin: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) memory: MemoryCap,
    grants: Arc<Grants>,
    pub(crate) log: Arc<Mutex<LogSink>>,
    pub(crate) deadline: CallDeadline,
    /// Whether the running call is `init` (writes are refused there).
    pub(crate) in_init: bool,
    /// Writes made in the running call.
    pub(crate) writes_this_call: usize,
    /// Whether the running call asked for a retry of its failure (the `retry` import).
    pub(crate) retry_requested: bool,
}

impl HostState {
    pub(crate) fn new(
        plugin: Arc<str>,
        memory_limit: usize,
        grants: Arc<Grants>,
        log: Arc<Mutex<LogSink>>,
    ) -> Self {
        let wasi = WasiCtxBuilder::new()
            .stdout(stdio::CapturedOutput::new(log.clone(), LogSource::Stdout))
            .stderr(stdio::CapturedOutput::new(log.clone(), LogSource::Stderr))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self {
            plugin,
            wasi,
            table: ResourceTable::new(),
            memory: MemoryCap {
                limit: memory_limit,
                peak: 0,
                base: None,
            },
            grants,
            log,
            deadline: CallDeadline::expired(Instant::now()),
            in_init: false,
            writes_this_call: 0,
            retry_requested: false,
        }
    }

    /// Traps if the current call's deadline has passed: host calls count against it too.
    fn check_deadline(&self) -> wasmtime::Result<()> {
        if clock::certainly_before(self.deadline.at()) {
            return Ok(());
        }
        match self.deadline.overrun(Instant::now()) {
            Some(overrun) => Err(wasmtime::Error::new(DeadlineExceeded::InHostCall(overrun))),
            None => Ok(()),
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for HostState {}
