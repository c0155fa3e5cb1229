//! A plugin instance's linear memory as the host sees it: where it is, noted when `init`'s config
//! is lowered into it ([`ConfigArg`]), and its pages given back to the OS when the instance is
//! unloaded ([`GuestMemory::release`]).
//!
//! The instance pool keeps the pages a start writes resident in a released slot
//! (`host.keepResidentBytes`), so the next start in that slot faults none in: right for a slot
//! used again soon (a restart after a trap, the next instance of the same plugin), wrong for an
//! unloaded plugin's, which may stay idle for hours. So before an unload drops its instance, the
//! host gives back every page of its memory itself: anonymous pages read as zeros again, the
//! copy-on-write image's as the image, exactly what the pool's reset would leave, and wasmtime
//! then finds no page written and keeps none. wasmtime 49 has no call for this (50's
//! `Engine::release_idle_pool_memory` releases every idle slot at once, and keeping saves little
//! there: BENCHMARKS.md) and does not tell an embedder where a component's memory is; lowering a
//! string into it does. The pages go back through [`give_back`], the host's one way of returning
//! pages (`crate::resident`).
//!
//! A restored state goes the other way: [`StateArg`] lowers it into pages the instance has never
//! touched (an unload gave them all back), and has the kernel fill them in one call first.

use std::any::Any;
use std::mem::MaybeUninit;
use std::sync::Arc;

use wasmtime::ValRaw;
use wasmtime::component::__internal::{
    CanonicalAbiInfo, InstanceType, InterfaceType, LowerContext,
};
use wasmtime::component::{ComponentType, Lower};

use super::host::HostState;
use crate::resident::{give_back, page_size};

/// `init`'s config, lowered as the `string` it is, noting where the guest's memory starts (in
/// the instance's [`MemoryCap`](super::host::MemoryCap)).
pub(crate) struct ConfigArg(pub(crate) Arc<str>);

impl ConfigArg {
    fn note_memory<T: 'static>(cx: &mut LowerContext<'_, T>) {
        let base = cx.as_slice_mut().as_ptr() as usize;
        if let Some(state) = (cx.store.data_mut() as &mut dyn Any).downcast_mut::<HostState>() {
            state.memory.base = Some(GuestMemory { base });
        }
    }
}

// SAFETY: lowered exactly as `str` is (its ABI, type check and lowering); the memory's address
// is only read.
unsafe impl ComponentType for ConfigArg {
    type Lower = <str as ComponentType>::Lower;
    const ABI: CanonicalAbiInfo = <str as ComponentType>::ABI;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <str as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: as for `ComponentType`.
unsafe impl Lower for ConfigArg {
    fn linear_lower_to_flat<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        ty: InterfaceType,
        dst: &mut MaybeUninit<[ValRaw; 2]>,
    ) -> wasmtime::Result<()> {
        str::linear_lower_to_flat(&self.0, cx, ty, dst)?;
        Self::note_memory(cx);
        Ok(())
    }

    fn linear_lower_to_memory<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        ty: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        str::linear_lower_to_memory(&self.0, cx, ty, offset)?;
        Self::note_memory(cx);
        Ok(())
    }
}

/// `restore-state`'s state, lowered as the `list<u8>` it is, except that the pages it lands on
/// are faulted in by one `madvise(MADV_POPULATE_WRITE)` before the copy: a state restores into a
/// fresh instance, whose pages are all new, and the kernel fills a range in one call in about
/// half the time it takes to fault its pages in one by one (BENCHMARKS.md, issue 16).
pub(crate) struct StateArg<'a>(pub(crate) &'a [u8]);

impl StateArg<'_> {
    /// Smaller states are copied as they are: a few faults cost less than the call.
    const POPULATE_FROM: usize = 64 << 10;

    /// Allocates the list in the guest (its `cabi_realloc`) and copies the state there.
    fn lower<T>(&self, cx: &mut LowerContext<'_, T>) -> wasmtime::Result<usize> {
        let len = self.0.len();
        let ptr = cx.realloc(0, 0, 1, len)?;
        let dst = cx
            .as_slice_mut()
            .get_mut(ptr..)
            .and_then(|rest| rest.get_mut(..len))
            .ok_or_else(|| {
                wasmtime::format_err!("restore-state's buffer is outside the plugin's memory")
            })?;
        if len >= Self::POPULATE_FROM {
            populate(dst);
        }
        dst.copy_from_slice(self.0);
        Ok(ptr)
    }
}

// SAFETY: lowered exactly as `[u8]` is: its ABI and type check, and a list of `len` bytes at
// an address the guest's `cabi_realloc` returned.
unsafe impl ComponentType for StateArg<'_> {
    type Lower = <[u8] as ComponentType>::Lower;
    const ABI: CanonicalAbiInfo = <[u8] as ComponentType>::ABI;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <[u8] as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: as for `ComponentType`.
unsafe impl Lower for StateArg<'_> {
    fn linear_lower_to_flat<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        _ty: InterfaceType,
        dst: &mut MaybeUninit<[ValRaw; 2]>,
    ) -> wasmtime::Result<()> {
        let ptr = self.lower(cx)?;
        dst.write([ValRaw::i64(ptr as i64), ValRaw::i64(self.0.len() as i64)]);
        Ok(())
    }

    fn linear_lower_to_memory<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        _ty: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        let ptr = self.lower(cx)?;
        write_pointer_pairs(cx.get::<8>(offset), &[(ptr, self.0.len())])
    }
}

/// Writes `pairs` into `dst` as a string's or a list's (address, length) pairs lie in a guest's
/// memory: two little-endian 32-bit words each, one pair after the other.
pub(crate) fn write_pointer_pairs(
    dst: &mut [u8],
    pairs: &[(usize, usize)],
) -> wasmtime::Result<()> {
    debug_assert_eq!(dst.len(), 8 * pairs.len());
    let words = pairs.iter().flat_map(|&(ptr, len)| [ptr, len]);
    for (word, value) in dst.chunks_exact_mut(4).zip(words) {
        word.copy_from_slice(&u32::try_from(value)?.to_le_bytes());
    }
    Ok(())
}

/// Faults in the whole pages of `range` at once, writable (`MADV_POPULATE_WRITE`, Linux 5.14);
/// a kernel without it leaves them to fault in as they are written.
fn populate(range: &mut [u8]) {
    let page = page_size();
    let start = (range.as_ptr() as usize).next_multiple_of(page);
    let end = (range.as_ptr() as usize + range.len()) / page * page;
    if end <= start {
        return;
    }
    // SAFETY: the range is inside `range`, memory this process may write; populating changes no
    // byte of it.
    if unsafe {
        libc::madvise(
            start as *mut libc::c_void,
            end - start,
            libc::MADV_POPULATE_WRITE,
        )
    } != 0
    {
        tracing::trace!(error = %std::io::Error::last_os_error(), "could not fault a state's pages in at once");
    }
}

/// Where a live instance's linear memory starts: in the instance pool, a slot's fixed address
/// for the instance's whole life (a pooled memory grows in place).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GuestMemory {
    base: usize,
}

impl GuestMemory {
    /// Gives the first `len` bytes' pages back to the OS.
    ///
    /// # Safety
    /// The instance owning this memory runs no more wasm and is dropped next, and `len` is at
    /// most what its slot reserves (the memory's size, or its limit).
    pub(crate) unsafe fn release(self, len: usize) {
        let page = page_size();
        // SAFETY: the range is the instance's own memory, mapped by its pool slot, and nothing
        // reads it again before the pool resets it (the caller's contract).
        unsafe { give_back(self.base, len.div_ceil(page) * page) };
    }
}
