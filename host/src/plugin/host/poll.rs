//! `wasi:io/poll` bounded by the call's deadline. wasmtime-wasi's synchronous `poll` and
//! `pollable.block` wait on the thread until a pollable is ready (a 20 s sleep waits 20 s), and
//! epoch interruption cannot stop a host call; these replace them and trap with
//! [`DeadlineExceeded`] when the deadline comes first.

use std::time::Instant;

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::bindings::sync::io::poll;
use wasmtime_wasi::runtime::in_tokio;
use wasmtime_wasi_io::bindings::wasi::io::poll as async_poll;
use wasmtime_wasi_io::poll::DynPollable;

use super::{DeadlineExceeded, HostState, Overrun};

/// A plugin's resource table with its current call's deadline.
pub(crate) struct BoundedPoll<'a> {
    table: &'a mut ResourceTable,
    /// When a wait ends: the call's deadline as it stands when the wait begins (moved if the
    /// machine kept the call from running before it); the wait itself is not given back.
    deadline: Instant,
    /// What the trap says if the deadline comes first (the call may be over already).
    overrun: Overrun,
}

impl BoundedPoll<'_> {
    /// Runs a wait until it finishes or `deadline` passes (a trap saying `overrun`).
    fn wait<R>(
        deadline: Instant,
        overrun: Overrun,
        wait: impl Future<Output = wasmtime::Result<R>>,
    ) -> wasmtime::Result<R> {
        in_tokio(async {
            match tokio::time::timeout_at(deadline.into(), wait).await {
                Ok(result) => result,
                Err(_) => Err(wasmtime::Error::new(DeadlineExceeded::InHostCall(overrun))),
            }
        })
    }
}

impl poll::Host for BoundedPoll<'_> {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        Self::wait(
            self.deadline,
            self.overrun,
            async_poll::Host::poll(self.table, pollables),
        )
    }
}

impl poll::HostPollable for BoundedPoll<'_> {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        in_tokio(async_poll::HostPollable::ready(self.table, pollable))
    }

    fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        Self::wait(
            self.deadline,
            self.overrun,
            async_poll::HostPollable::block(self.table, pollable),
        )
    }

    fn drop(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        async_poll::HostPollable::drop(self.table, pollable)
    }
}

struct HasBoundedPoll;

impl HasData for HasBoundedPoll {
    type Data<'a> = BoundedPoll<'a>;
}

/// Replaces wasmtime-wasi's `wasi:io/poll` in `linker` (added before) with [`BoundedPoll`].
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    poll::add_to_linker::<HostState, HasBoundedPoll>(linker, |state| {
        let now = Instant::now();
        let (deadline, overrun) = match state.deadline.left(now) {
            Ok(left) => (now + left, Overrun::Limit),
            Err(overrun) => (now, overrun),
        };
        BoundedPoll {
            table: &mut state.table,
            deadline,
            overrun,
        }
    })?;
    linker.allow_shadowing(false);
    Ok(())
}
