//! [`SmallObjectCache`]: the plugin's global allocator, a cache of freed small blocks in front of
//! the system allocator (wasi-libc's dlmalloc).
//!
//! A handler call allocates and frees the same small blocks every time: the two strings the host
//! lowers into the guest (`cabi_realloc`), and when it decodes an object, the hundreds of
//! `String`s, `Vec`s and `BTreeMap` nodes of a `Pod`. dlmalloc serves each of those through its
//! bins (splitting, coalescing, bookkeeping); this cache keeps a freed block of up to
//! [`MAX_CACHED`] bytes on a list of its size class and hands it out again with two loads and a
//! store, like glibc's per-thread cache does for native code. It holds at most [`CACHE_BYTES`]
//! in all; a block that does not fit goes back to dlmalloc. The memory it keeps is memory the plugin
//! kept anyway: a wasm memory never shrinks, so dlmalloc holds freed chunks too.
//!
//! The fast paths of `alloc` and `dealloc` are inlined where the plugin allocates and drops: that
//! makes the empty plugin's wasm 10 KB (7%) larger. With `dealloc` kept out of line it grew 3 KB,
//! but the decode of a `Pod` ran 1.31× native instead of 1.26–1.29× (BENCHMARKS.md, issue 17,
//! item 5).
//!
//! Plugins that bring their own `#[global_allocator]` turn the SDK's off with
//! `default-features = false`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr;

/// Size classes are multiples of this.
const GRAIN: usize = 16;
/// The largest block the cache keeps; larger ones go straight to the system allocator.
pub const MAX_CACHED: usize = 512;
/// The most the cache keeps in all: the blocks of one realistic `Pod` decoded and dropped.
pub const CACHE_BYTES: usize = 32 << 10;
const CLASSES: usize = MAX_CACHED / GRAIN;
/// The alignment of every cached block: what the system allocator gives a plain `malloc` on
/// wasm32, so a class block never takes its slower aligned path.
const BLOCK_ALIGN: usize = 8;

/// A cache of freed small blocks in front of [`System`]: see the module documentation.
///
/// Not thread-safe: the plugin's global allocator only where wasm has no threads.
pub struct SmallObjectCache {
    lists: UnsafeCell<Lists>,
}

struct Lists {
    /// The first free block of each class; each free block's first word points to the next.
    heads: [*mut u8; CLASSES],
    cached_bytes: usize,
}

// SAFETY: a wasm32 plugin without the `atomics` feature runs on one thread, so the lists are
// never reached from two at once.
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
unsafe impl Sync for SmallObjectCache {}

impl SmallObjectCache {
    /// An empty cache.
    pub const fn new() -> Self {
        Self {
            lists: UnsafeCell::new(Lists {
                heads: [ptr::null_mut(); CLASSES],
                cached_bytes: 0,
            }),
        }
    }

    /// How many bytes the cache holds now.
    pub fn cached_bytes(&self) -> usize {
        // SAFETY: single-threaded (see `Sync`); no reference into the lists outlives this read.
        unsafe { (*self.lists.get()).cached_bytes }
    }
}

impl Drop for SmallObjectCache {
    fn drop(&mut self) {
        let lists = self.lists.get_mut();
        for (class, head) in lists.heads.iter_mut().enumerate() {
            while !head.is_null() {
                let block = *head;
                // SAFETY: a free block of this class; its first word is the next one.
                *head = unsafe { block.cast::<*mut u8>().read() };
                free_block(block, class);
            }
        }
    }
}

impl Default for SmallObjectCache {
    fn default() -> Self {
        Self::new()
    }
}

/// The class of a block for `layout`, if the cache keeps such blocks.
fn class_of(layout: Layout) -> Option<usize> {
    (layout.size() <= MAX_CACHED && layout.align() <= BLOCK_ALIGN)
        .then(|| layout.size().saturating_sub(1) / GRAIN)
}

/// The layout every block of `class` is allocated from the system with.
fn class_layout(class: usize) -> Layout {
    // SAFETY: (class + 1) * GRAIN ≤ MAX_CACHED is far below isize::MAX, and BLOCK_ALIGN is a
    // power of two.
    unsafe { Layout::from_size_align_unchecked((class + 1) * GRAIN, BLOCK_ALIGN) }
}

/// A fresh system block for `class` (the cache has none).
#[cold]
#[inline(never)]
fn alloc_block(class: usize) -> *mut u8 {
    // SAFETY: a class layout has a non-zero size.
    unsafe { System.alloc(class_layout(class)) }
}

/// Gives a block of `class` back to the system (the cache is full).
#[cold]
#[inline(never)]
fn free_block(block: *mut u8, class: usize) {
    // SAFETY: every block of a class came from the system with its class layout.
    unsafe { System.dealloc(block, class_layout(class)) }
}

// SAFETY: every block handed out is either a fresh system block of its class's layout (at least
// `layout.size()` bytes, aligned to BLOCK_ALIGN ≥ `layout.align()`) or one of those, freed and not
// handed out since; a cached block is reached only through its list.
unsafe impl GlobalAlloc for SmallObjectCache {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(class) = class_of(layout) else {
            // SAFETY: the caller's contract, passed on.
            return unsafe { System.alloc(layout) };
        };
        // SAFETY: single-threaded (see `Sync`); `lists` is not borrowed elsewhere.
        let lists = unsafe { &mut *self.lists.get() };
        let head = lists.heads[class];
        if head.is_null() {
            return alloc_block(class);
        }
        // SAFETY: `head` is a free block of this class; its first word is the next one.
        lists.heads[class] = unsafe { head.cast::<*mut u8>().read() };
        lists.cached_bytes -= class_layout(class).size();
        head
    }

    #[inline]
    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let Some(class) = class_of(layout) else {
            // SAFETY: `block` came from `System.alloc(layout)` (above).
            return unsafe { System.dealloc(block, layout) };
        };
        // SAFETY: single-threaded (see `Sync`); `lists` is not borrowed elsewhere.
        let lists = unsafe { &mut *self.lists.get() };
        let size = class_layout(class).size();
        if lists.cached_bytes + size > CACHE_BYTES {
            return free_block(block, class);
        }
        // SAFETY: the block is ours again, at least GRAIN bytes and aligned for a pointer.
        unsafe { block.cast::<*mut u8>().write(lists.heads[class]) };
        lists.heads[class] = block;
        lists.cached_bytes += size;
    }

    #[inline(never)]
    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size`, rounded up to `layout.align()`, fits isize.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class_of(layout), class_of(new_layout)) {
            // The block already has room for the new size.
            (Some(old), Some(new)) if old == new => block,
            // SAFETY: a large block came from the system with `layout`.
            (None, None) => unsafe { System.realloc(block, layout, new_size) },
            _ => {
                // SAFETY: `new_layout` has a non-zero size (the caller's contract).
                let moved = unsafe { self.alloc(new_layout) };
                if !moved.is_null() {
                    // SAFETY: both blocks hold at least the smaller size and do not overlap.
                    unsafe {
                        ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                        self.dealloc(block, layout);
                    }
                }
                moved
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One step of a random workload: allocate `size` bytes aligned to `1 << align_log2`, free the
    /// `index`-th live block, or grow or shrink it to `size`.
    #[derive(Debug, Clone)]
    enum Step {
        Alloc { size: usize, align_log2: u32 },
        Free { index: usize },
        Realloc { index: usize, size: usize },
    }

    fn step() -> impl Strategy<Value = Step> {
        let size = prop_oneof![1..=64usize, 1..=MAX_CACHED + 64, 1..=4096usize];
        prop_oneof![
            (size.clone(), 0..=5u32)
                .prop_map(|(size, align_log2)| Step::Alloc { size, align_log2 }),
            any::<usize>().prop_map(|index| Step::Free { index }),
            (any::<usize>(), size).prop_map(|(index, size)| Step::Realloc { index, size }),
        ]
    }

    struct Live {
        block: *mut u8,
        layout: Layout,
        fill: u8,
    }

    fn check(live: &Live) {
        // SAFETY: `block` is live with `layout.size()` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(live.block, live.layout.size()) };
        assert!(
            bytes.iter().all(|&b| b == live.fill),
            "a live block was overwritten"
        );
        assert_eq!(
            live.block as usize % live.layout.align(),
            0,
            "misaligned block"
        );
    }

    proptest! {
        /// Every live block keeps its bytes and alignment whatever is allocated, freed or resized
        /// around it (no block is handed out twice), and the cache stays within its bounds.
        #[test]
        fn live_blocks_keep_their_bytes(steps in proptest::collection::vec(step(), 1..400)) {
            let cache = SmallObjectCache::new();
            let mut live: Vec<Live> = Vec::new();
            for (n, step) in steps.into_iter().enumerate() {
                let fill = n as u8;
                match step {
                    Step::Alloc { size, align_log2 } => {
                        let layout = Layout::from_size_align(size, 1 << align_log2).unwrap();
                        // SAFETY: a non-zero size.
                        let block = unsafe { cache.alloc(layout) };
                        assert!(!block.is_null());
                        // SAFETY: the block has `size` bytes.
                        unsafe { block.write_bytes(fill, size) };
                        live.push(Live { block, layout, fill });
                    }
                    Step::Free { index } if !live.is_empty() => {
                        let gone = live.swap_remove(index % live.len());
                        check(&gone);
                        // SAFETY: live, with its layout.
                        unsafe { cache.dealloc(gone.block, gone.layout) };
                    }
                    Step::Realloc { index, size } if !live.is_empty() => {
                        let index = index % live.len();
                        let old = &live[index];
                        check(old);
                        let kept = old.layout.size().min(size);
                        // SAFETY: live, with its layout; a non-zero size.
                        let block = unsafe { cache.realloc(old.block, old.layout, size) };
                        assert!(!block.is_null());
                        // SAFETY: `block` has `size` bytes, the first `kept` of them copied.
                        let bytes = unsafe { std::slice::from_raw_parts(block, kept) };
                        assert!(bytes.iter().all(|&b| b == old.fill), "realloc lost bytes");
                        let layout = Layout::from_size_align(size, old.layout.align()).unwrap();
                        // SAFETY: as above.
                        unsafe { block.write_bytes(fill, size) };
                        live[index] = Live { block, layout, fill };
                    }
                    Step::Free { .. } | Step::Realloc { .. } => {}
                }
                for block in &live {
                    check(block);
                }
                prop_assert!(cache.cached_bytes() <= CACHE_BYTES);
            }
            for gone in live {
                // SAFETY: live, with its layout.
                unsafe { cache.dealloc(gone.block, gone.layout) };
            }
        }
    }

    /// A freed small block is handed out again for the next request of its class, and a block
    /// of a larger class is not.
    #[test]
    fn a_freed_block_serves_the_next_request_of_its_class() {
        let cache = SmallObjectCache::new();
        let small = Layout::from_size_align(40, 1).unwrap();
        // SAFETY: a non-zero size; freed with its layout.
        unsafe {
            let first = cache.alloc(small);
            cache.dealloc(first, small);
            assert_eq!(cache.cached_bytes(), 48);
            let same_class = cache.alloc(Layout::from_size_align(33, 8).unwrap());
            assert_eq!(same_class, first, "the cached block was not reused");
            assert_eq!(cache.cached_bytes(), 0);
            cache.dealloc(same_class, Layout::from_size_align(33, 8).unwrap());
            let other_class = cache.alloc(Layout::from_size_align(49, 1).unwrap());
            assert_ne!(other_class, first);
            cache.dealloc(other_class, Layout::from_size_align(49, 1).unwrap());
        }
    }

    /// The cache gives blocks back to the system beyond its budget.
    #[test]
    fn the_cache_keeps_no_more_than_its_budget() {
        let cache = SmallObjectCache::new();
        let layout = Layout::from_size_align(MAX_CACHED, 8).unwrap();
        // SAFETY: non-zero sizes; each block freed once with its layout.
        let blocks: Vec<_> = (0..2 * CACHE_BYTES / MAX_CACHED)
            .map(|_| unsafe { cache.alloc(layout) })
            .collect();
        for block in blocks {
            unsafe { cache.dealloc(block, layout) };
        }
        assert_eq!(cache.cached_bytes(), CACHE_BYTES);
    }
}
