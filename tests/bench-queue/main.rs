//! The work-queue benchmark, wasmformer's side (`scripts/bench-workqueue`; the client-go side is
//! `tests/bench-go/workqueue`, the same workload). It compiles `host/src/workqueue` by itself
//! (std only) with `rustc -O`, so an optimized build takes seconds instead of the host's release
//! build. `WorkQueue` with client-go's default limits on the system clock, `String` keys
//! `ns/name-<i>`:
//!
//! - dedup: every key added twice, then drained: `get`, a no-op reconcile, `forget`, `done`;
//! - rateLimited: every key's `add_rate_limited` (its first failure), then `forget` (the keys are
//!   scheduled, not waited for);
//! - published: every key added once, then drained, with the queue's counts and its most failing
//!   keys read after each step, as the host's worker does for `/status` (no client-go
//!   counterpart: its metrics are updated by each operation), then the bytes the drained queue
//!   still holds;
//! - memory: the bytes allocated and still live per queued key after N keys are added (key
//!   strings included), counted by a global allocator.
//!
//! Prints one JSON line.

#![allow(dead_code, unused_imports)]

#[path = "../../host/src/workqueue/mod.rs"]
mod workqueue;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use workqueue::{RateLimits, SystemClock, WorkQueue};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn queue() -> WorkQueue<String> {
    WorkQueue::new(Arc::new(SystemClock), RateLimits::default())
}

/// What the host's worker reads after each step: the counts and the ten most failing keys.
fn publish(q: &WorkQueue<String>) {
    std::hint::black_box(q.stats());
    std::hint::black_box(q.most_failing(10).count());
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(200_000, |a| a.parse().expect("the number of keys"));
    let keys: Vec<String> = (0..n).map(|i| format!("ns/name-{i}")).collect();

    let mut q = queue();
    let start = Instant::now();
    for key in keys.iter().chain(&keys) {
        q.add(key.clone());
    }
    let mut drained = 0;
    while let Some(key) = q.get() {
        std::hint::black_box(&key); // the no-op reconcile
        q.forget(&key);
        q.done(&key);
        drained += 1;
    }
    let dedup = start.elapsed().as_secs_f64();
    assert_eq!(drained, n, "every key once");
    drop(q);

    let before = LIVE.load(Ordering::Relaxed);
    let mut q = queue();
    let start = Instant::now();
    for key in &keys {
        q.add(key.clone());
        publish(&q);
    }
    while let Some(key) = q.get() {
        q.forget(&key);
        q.done(&key);
        q.release_drained();
        publish(&q);
    }
    let published = start.elapsed().as_secs_f64();
    let kept_after_drain = LIVE.load(Ordering::Relaxed) - before;
    drop(q);

    let mut q = queue();
    let start = Instant::now();
    for key in &keys {
        q.add_rate_limited(key.clone());
        q.forget(key);
    }
    let limited = start.elapsed().as_secs_f64();
    drop(q);

    // Memory: the key strings are made after the baseline, so they count, as in the Go bench.
    let before = LIVE.load(Ordering::Relaxed);
    let mut q = queue();
    for i in 0..n {
        q.add(format!("ns/name-{i}"));
    }
    let after = LIVE.load(Ordering::Relaxed);
    std::hint::black_box(&q);
    println!(
        "{{\"keys\":{n},\"dedupKeysPerSecond\":{:.0},\"publishedKeysPerSecond\":{:.0},\"rateLimitedPerSecond\":{:.0},\"bytesPerQueuedKey\":{:.1},\"bytesKeptAfterDrain\":{}}}",
        n as f64 / dedup,
        n as f64 / published,
        n as f64 / limited,
        (after - before) as f64 / n as f64,
        kept_after_drain
    );
}
